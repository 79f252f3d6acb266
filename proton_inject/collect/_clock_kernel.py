"""The clock-bracket kernel (see ``bracket.py``): one warp per CTA, one CTA per SM, reads
``%globaltimer`` and ``%clock64`` at two globaltimer edges ``spin_ns`` apart."""

import triton
import triton.language as tl

# Both reads in one asm block: the clock is read right after the timer, in this order.
TIMER_AND_CLOCK = tl.constexpr("mov.u64 $0, %globaltimer;\n\tmov.u64 $1, %clock64;")
SMID = tl.constexpr("mov.u32 $0, %smid;")


@triton.jit
def _read():
    return tl.inline_asm_elementwise(TIMER_AND_CLOCK, "=l,=l", [], dtype=(tl.int64, tl.int64),
                                     is_pure=False, pack=1)


@triton.jit
def clock_bracket(out_ptr, spin_ns):
    """Stores (smid, c0, t0, c1, t1) at ``out_ptr + 5 * pid``: both pairs read at the first
    timer value after a tick (the timer ticks every 32 ns on an H100), so each read lags its
    tick by the same loop delay and quantization does not bias the rate."""
    g, _ = _read()
    t0, c0 = _read()
    while t0 == g:
        t0, c0 = _read()
    t1, c1 = _read()
    while t1 - t0 < spin_ns:
        t1, c1 = _read()
    sm = tl.inline_asm_elementwise(SMID, "=r", [], dtype=tl.int32, is_pure=False, pack=1)
    base = out_ptr + 5 * tl.program_id(0)
    tl.store(base, sm.to(tl.int64))
    tl.store(base + 1, c0)
    tl.store(base + 2, t0)
    tl.store(base + 3, c1)
    tl.store(base + 4, t1)
