#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: the GPU tests and the overhead benchmark, one summary.
# Usage: scripts/gpu_check.sh [part1|part2|part3 | test paths or pytest args; default: tests]
# The parts split tests/gpu into runs that fit a 10-minute call on an H100 (2026-11-27, fourth
# session, whole call with the overhead benchmark and the machine's start): part1 the runtime,
# profile, AOT, direct-lowering, sampling and overhead tests (403 s), part2 same-program,
# vs-Proton and accuracy (380 s), part3 the real libraries but fla (FlagGems, Liger, Inductor:
# 427 s). fla's plain run alone compiles for ~230 s: give it a call of its own
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
"$PY" -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, \
'gpu', torch.cuda.get_device_name())" || exit 2

G=tests/gpu
case "${1:-}" in
  part1) set -- $G/test_gpu_runtime.py $G/test_gpu_profile_cmd.py $G/test_gpu_measure_overhead.py \
           $G/test_gpu_aot.py $G/test_gpu_direct.py $G/test_gpu_many_launches.py $G/test_gpu_sampling.py \
           $G/test_gpu_launch_path.py ;;
  part2) set -- $G/test_gpu_same_program.py $G/test_gpu_vs_proton.py $G/test_gpu_accuracy.py ;;
  part3) set -- $G/test_gpu_libraries.py -k "not fla or flaggems" ;;  # "fla" also matches flaggems
esac

echo "== GPU tests (pytest -m gpu) =="
"$PY" -m pytest -m gpu -q -s -p no:cacheprovider --durations=8 "${@:-tests}" 2>&1 | tee "$LOG/pytest.log"
tests_rc=${PIPESTATUS[0]}

echo "== overhead benchmark =="
"$PY" benchmarks/bench_overhead.py 2>&1 | tee "$LOG/bench.log"
bench_rc=${PIPESTATUS[0]}

echo "== summary =="
echo "gpu tests: $(tail -n 1 "$LOG/pytest.log")  (exit $tests_rc)"
echo "benchmark: exit $bench_rc; ratios above (instrumented / plain kernel time)"
[ "$tests_rc" -eq 0 ] && [ "$bench_rc" -eq 0 ]
