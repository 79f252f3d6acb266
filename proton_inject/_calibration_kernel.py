"""The calibration kernels of ``calibrate``: a loop of fixed work (``n`` dependent
multiply-adds) between two clock reads, in two kernels of the same code. The reference runs
plain; the other gets a region around the loop (``--loops outer``); they are launched in turn,
and the region minus the reference's loop time is what the region's own records add."""

import triton
import triton.language as tl

CLOCK64 = tl.constexpr("mov.u64 $0, %clock64;")


@triton.jit
def _timed_work(out_ptr, n):
    """Each CTA stores the cycles its loop took (clock reads right around it) and a bit of
    the loop's result, so the loop stays. The factors are literals: a kernel argument is
    reloaded from constant memory inside the loop, and its latency varied between launches (an
    H100 ran the same 100 iterations in 477 and 970 cycles)."""
    x = tl.program_id(0).to(tl.float32)
    t0 = tl.inline_asm_elementwise(CLOCK64, "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    for _ in range(n):
        x = x * 0.999 + 1.0
    t1 = tl.inline_asm_elementwise(CLOCK64, "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    tl.store(out_ptr + 2 * tl.program_id(0), t1 - t0)
    tl.store(out_ptr + 2 * tl.program_id(0) + 1, (x > 0).to(tl.int64))


@triton.jit
def record_cost_calibration(out_ptr, n):
    """The kernel that gets the region (``benchmarks/accuracy.py`` times its loop too)."""
    _timed_work(out_ptr, n)


@triton.jit
def plain_reference(out_ptr, n):
    """The same code, never instrumented: launched between the calibration launches, so
    both builds are loaded and measured in the same stretch of time."""
    _timed_work(out_ptr, n)
