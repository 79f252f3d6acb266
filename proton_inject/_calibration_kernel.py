"""The calibration kernel of ``calibrate``: its one region (the ``# proton: empty`` mark)
holds a single clock read, so the region measures what its two records add to it."""

import triton
import triton.language as tl

CLOCK64 = tl.constexpr("mov.u64 $0, %clock64;")


@triton.jit
def record_cost_calibration(out_ptr):
    """Each CTA stores the cycles between two clock reads; the second is the marked region."""
    t0 = tl.inline_asm_elementwise(CLOCK64, "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    t1 = tl.inline_asm_elementwise(CLOCK64, "=l", [], dtype=tl.int64, is_pure=False, pack=1)  # proton: empty
    tl.store(out_ptr + tl.program_id(0), t1 - t0)
