#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: the GPU tests, and benchmarks by name (spread), one summary.
# Usage: scripts/gpu_check.sh [part1|part2|part3|part4|fla | test paths or pytest args; default: tests]
#        scripts/gpu_check.sh spread PART[+PART]... : on GPU i the i-th argument's parts, one after
#        the other, all GPUs at once; logs $OUT/PART.log. Besides the test parts: "bench"
#        (benchmarks/launch_cost.py), "parts" (kept_launch_parts_gpu.py --timers), "tuning"
#        (tuning_choices.py, FlagGems' layer_norm, 8 runs a side), "twins" (plain twins: their GPU
#        tests and launch_cost's twin cases), "sampled" (--sample-ctas: its GPU tests and overhead.py
#        --warm-l2 on the short kernels and layer norm, every CTA against 1 in 8), "speed-fla" (profile_speed.py on fla, one cache:
#        ~230 s plain cold, then 2 warm rounds a side), "speed-loop" (profile_speed.py on
#        benchmarks/programs/launch_loop.py, 40,000 launches, SPEED_ROUNDS (5) warm rounds a side, SPEED_ARGS
#        its further options; ~100 s), "tuning-all" (tuning_choices.py on all 50
#        FlagGems ops, TUNING_SIDES (plain,profile,dump) in TUNING_RUNS rounds, one warm Triton compile cache, fresh
#        FlagGems caches (every run tunes), runs saved to $OUT/tuning-all.jsonl:
#        compare the files of several calls with --combine), "auto-liger" and "auto-inductor"
#        (auto_vs_torch_profiler.py, AUTO_ROUNDS rounds (1), AUTO_ARGS its further options; its log.txt as
#        $OUT/avt-auto-NAME.txt; Liger with 3
#        rounds 201 s on an H200); tuning-all with TUNING_SIDES=dump: 108 s for the first run, ~30 s after
# The parts split tests/gpu into runs that fit a 10-minute call on an H100 (2026-11-27, fourth
# session, whole call with the overhead benchmark and the machine's start): part1 the runtime,
# profile, AOT, direct-lowering, sampling and overhead tests (403 s), part2 same-program,
# vs-Proton and accuracy (380 s), part3 the real libraries but fla (FlagGems, Liger, Inductor:
# 427 s), part4 AOT, first-use calibration and Inductor's model lines (~110 s on an H200,
# 2026-11-28). fla's plain run alone compiles for ~230 s: give it a call of its own
# (tests/gpu/test_gpu_libraries.py -k "fla and not flaggems").
# Logs go to $OUT (or /tmp/gpu_check).
# Runs from the checkout with PYTHONPATH=. (the project is not pip-installed there); the
# wheels in .whl/ (lark, google-re2, and the libraries' for part3) are installed into /tmp/site
# when lark or re2 is missing.
set -uo pipefail
cd "$(dirname "$0")/.."
LOG=${OUT:-/tmp/gpu_check}
mkdir -p "$LOG"
PY=${PYTHON:-python3}
if ! "$PY" -c "import lark, re2" 2>/dev/null && compgen -G ".whl/*.whl" >/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 2
  export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# Bytecode for our package and the wheels above, as pip's install writes it: the GPU machine's
# Python writes none itself (PYTHONDONTWRITEBYTECODE), so each process there would compile
# them from source (0.5-0.9 s of every profile's start, which no installed tool pays).
"$PY" -m compileall -q -j 0 proton_inject $([ -d /tmp/site ] && echo /tmp/site) >/dev/null 2>&1 || true
[ -n "${NO_GPU_CHECK:-}" ] || "$PY" -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, \
'gpu', torch.cuda.get_device_name())" || exit 2

G=tests/gpu
part_args() {  # the pytest arguments of a part, in the array ARGS
  case "$1" in
    part1) ARGS=($G/test_gpu_runtime.py $G/test_gpu_profile_cmd.py $G/test_gpu_measure_overhead.py
                 $G/test_gpu_direct.py $G/test_gpu_many_launches.py $G/test_gpu_sampling.py
                 $G/test_gpu_launch_path.py) ;;
    part2) ARGS=($G/test_gpu_same_program.py $G/test_gpu_vs_proton.py $G/test_gpu_accuracy.py
                 $G/test_gpu_auto.py) ;;
    part3) ARGS=($G/test_gpu_libraries.py -k "not fla or flaggems") ;;  # "fla" also matches flaggems
    part4) ARGS=($G/test_gpu_aot.py $G/test_gpu_auto_calibrate.py $G/test_gpu_inductor_origin.py) ;;
    fla) ARGS=($G/test_gpu_libraries.py -k "fla and not flaggems") ;;
    *) ARGS=($1) ;;
  esac
}
run_part() {  # one part (bench, parts, tuning: benchmarks, see the usage), its log in $LOG/PART.log
  if [ "$1" = bench ]; then
    "$PY" benchmarks/launch_cost.py --launches 10000 --kept-launches 4000 --rounds 9 --long 1000000 \
      --cprofile "$LOG/cprofile"
  elif [ "$1" = parts ]; then
    "$PY" benchmarks/kept_launch_parts_gpu.py --launches 4000 --rounds 5 --timers
  elif [ "$1" = tuning ]; then
    "$PY" benchmarks/tuning_choices.py --runs 8 -- tests/gpu/programs/flaggems_ops.py --ops layer_norm
  elif [ "$1" = tuning-all ]; then  # issue 40: FlagGems' 50 ops, TUNING_RUNS rounds of plain, profile, dump
    "$PY" benchmarks/tuning_choices.py --runs "${TUNING_RUNS:-1}" --sides "${TUNING_SIDES:-plain,profile,dump}" --warm-compile-cache \
      --save "$LOG/tuning-all.jsonl" -- tests/gpu/programs/flaggems_ops.py
  elif [ "$1" = speed-fla ]; then  # issue 40: fla's second profile against a warm plain run, one cache
    "$PY" benchmarks/profile_speed.py --out "$LOG/speed-fla" --rounds 2 --one-cache -- tests/gpu/programs/fla_prog.py
  elif [ "$1" = speed-loop ]; then  # issue 40: a launch-bound program's whole wall under profile
    "$PY" benchmarks/profile_speed.py --out "$LOG/speed-loop" --rounds "${SPEED_ROUNDS:-5}" --one-cache --goal 1.1 ${SPEED_ARGS:-} -- \
      benchmarks/programs/launch_loop.py --launches 40000
  elif [ "$1" = sampled ]; then  # --sample-ctas lowered directly: its GPU tests, then kernel time (~2 min)
    "$PY" -m pytest -m gpu -q -p no:cacheprovider $G/test_gpu_sampling.py $G/test_gpu_auto.py
    "$PY" benchmarks/overhead.py --warm-l2 --only '2\^20|2\^12|layer norm' --rounds 9 \
      --combos "default:default,default cta/8:default,loops both:default,loops both cta/8:default"
  elif [ "$1" = twins ]; then
    "$PY" -m pytest -m gpu -q -p no:cacheprovider $G/test_gpu_launch_path.py  # (all: captures too)
    "$PY" benchmarks/launch_cost.py --launches 10000 --rounds 9 \
      --cases "plain,not kept,not kept (twin),default,default (twin)"
  elif [ "${1#auto-}" != "$1" ]; then  # auto-liger, auto-inductor: --auto against torch.profiler
    "$PY" benchmarks/auto_vs_torch_profiler.py --rounds "${AUTO_ROUNDS:-1}" --programs "${1#auto-}" \
      --work "/tmp/avt-$1" ${AUTO_ARGS:-}
    cp "/tmp/avt-$1/log.txt" "$LOG/avt-$1.txt"  # (the runs and caches stay: thousands of files)
  else
    part_args "$1"
    "$PY" -m pytest -m gpu -q -p no:cacheprovider --durations=8 "${ARGS[@]}"
  fi >"$LOG/${1//\//_}.log" 2>&1
}
if [ "${1:-}" = spread ]; then  # spread A B+C ...: A on GPU 0; B then C on GPU 1; ...
  shift
  i=0
  for spec in "$@"; do
    (export CUDA_VISIBLE_DEVICES=$i
     for part in ${spec//+/ }; do timeout "${PART_TIMEOUT:-560}" bash -c "$(declare -f run_part part_args); \
       G=$G PY=$PY LOG=$LOG run_part $part"; done) &
    i=$((i + 1))
  done
  wait
  for spec in "$@"; do for part in ${spec//+/ }; do
    echo "$part: $(tail -n 1 "$LOG/${part//\//_}.log")"; done; done
  exit 0
fi
case "${1:-}" in
  part1|part2|part3|part4|fla) part_args "$1"; set -- "${ARGS[@]}" ;;
esac

echo "== GPU tests (pytest -m gpu) =="
"$PY" -m pytest -m gpu -q -s -p no:cacheprovider --durations=8 "${@:-tests}" 2>&1 | tee "$LOG/pytest.log"
tests_rc=${PIPESTATUS[0]}
echo "gpu tests: $(tail -n 1 "$LOG/pytest.log")  (exit $tests_rc); kernel time instrumented vs plain: benchmarks/overhead.py --quick"
[ "$tests_rc" -eq 0 ]
