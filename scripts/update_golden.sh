#!/usr/bin/env bash
# Regenerate the golden instrumented IR that CI diffs (tests/unit/instrument/test_instrument.py).
# Review the diff with `git diff ttgir_samples/instrumented` before committing.
set -euo pipefail
cd "$(dirname "$0")/.."
PI=${PROTON_INJECT:-proton-inject}
for target in cuda-80 cuda-90 cuda-100 hip-gfx942; do
  "$PI" insert "ttgir_samples/$target" -o "ttgir_samples/instrumented/default/$target"
  "$PI" insert "ttgir_samples/$target" -o "ttgir_samples/instrumented/detailed/$target" \
    --loops both --op tt.load --op tt.descriptor_load --op ttng.warp_group_dot --op ttg.async_wait
done
# Third-party kernels (scripts/make_thirdparty_samples.py; tests/unit/dump/test_thirdparty_samples.py).
for target in cuda-80 cuda-90 cuda-100 hip-gfx942; do
  "$PI" insert "ttgir_samples/thirdparty/$target" -o "ttgir_samples/instrumented/thirdparty/$target" \
    --kernel-scope --loops both --no-marks
done
