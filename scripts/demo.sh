#!/usr/bin/env bash
# The main job on the bundled example, end to end:
#   dump -> inspect -> insert -> check -> run (GPU only) -> report
# With a GPU it profiles examples/matmul.py for real; without one it compiles the kernel
# ahead of time for an H100 and reports on buffers that `run` recorded on an H100 for this very
# kernel, config and regions (tests/data/h100-shortlaunch). Usage: scripts/demo.sh [OUT_DIR]
# (default: demo_out)
set -euo pipefail
cd "$(dirname "$0")/.."
PI=${PROTON_INJECT:-.venv/bin/proton-inject}
[ -x "$PI" ] || PI=$(command -v proton-inject) || { echo "run scripts/setup.sh first" >&2; exit 2; }
PY=$(dirname "$PI")/python
OUT=${1:-demo_out}
rm -rf "$OUT"
step() { printf '\n== %s\n' "$*"; }

if "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  GPU=1
  step "dump: run examples/matmul.py once and keep each kernel's TTGIR"
  "$PI" dump -o "$OUT/dump" -- "$PY" examples/matmul.py
else
  GPU=0
  step "dump: no GPU here, so compile matmul_kernel ahead of time for an H100 (cuda:90)"
  "$PI" dump --target cuda:90 examples/matmul.py:matmul_kernel -o "$OUT/dump" \
    --signature 'a_ptr=*fp16,b_ptr=*fp16,c_ptr=*fp16,M=i32:16,N=i32:16,K=i32:16,stride_am=i32:16,stride_bk=i32:16,stride_cm=i32:16' \
    --constexpr stride_ak=1 --constexpr stride_bn=1 --constexpr stride_cn=1 \
    --constexpr BLOCK_M=128 --constexpr BLOCK_N=128 --constexpr BLOCK_K=64 --constexpr GROUP_M=8 \
    --num-warps 8 --num-stages 3
fi

step "inspect: kernels, loops and source lines to choose regions from"
"$PI" inspect "$OUT/dump"

step "insert: kernel body + each loop + the '# proton:' marks in examples/matmul.py"
"$PI" insert "$OUT/dump" -o "$OUT/instrumented"
diff -r -x manifest.json "$OUT/dump" "$OUT/instrumented" | grep '^>' | head -20 || true

step "check: compile the instrumented IR down to cubin on this machine"
"$PI" check "$OUT/instrumented"

if [ "$GPU" = 1 ]; then
  step "run: the same program, with the instrumented kernels"
  "$PI" run "$OUT/instrumented" -o "$OUT/traces" -- "$PY" examples/matmul.py
  step "report"
  "$PI" report "$OUT/traces" --plot "$OUT/timeline.png"
else
  step "report: no GPU to run on, so report on this kernel's buffers recorded on an H100 (tests/data)"
  echo "These buffers were recorded with every warp recording (8 of 8, as --warps all does today;"
  echo "check above shows the default now: warp 0). In this launch each SM ran one CTA: too few"
  echo "timer readings for a clock fit, so expect 'globaltimer fit rejected': its ns come from a"
  echo "bound on the clock, and +-ns is '-' (tests/data/h100-shortlaunch/README.md says why)."
  "$PI" report tests/data/h100-shortlaunch/00000-matmul_kernel.json \
    --plot "$OUT/timeline.png" --trace "$OUT/traces"
fi
printf '\nDone. Open the .pftrace.gz traces in %s/traces with https://ui.perfetto.dev; the picture is %s/timeline.png\n' "$OUT" "$OUT"
