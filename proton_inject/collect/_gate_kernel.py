"""The launch gate of ``--measure-overhead`` (see ``measured_overhead.py``): one warp that holds
its stream until the host has enqueued everything a timed launch needs, or a time limit
passes."""

import triton
import triton.language as tl

GLOBALTIMER = tl.constexpr("mov.u64 $0, %globaltimer;")


@triton.jit
def _now():
    return tl.inline_asm_elementwise(GLOBALTIMER, "=l", [], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit
def launch_gate(flag_ptr, ticket, limit_ns, late_ptr):
    """Spins until the host-pinned ``flag_ptr`` holds ``ticket`` or more, at most ``limit_ns``;
    one more in ``late_ptr`` when it stopped on the limit."""
    t0 = _now()
    t = t0
    flag = tl.load(flag_ptr, volatile=True)
    while (flag < ticket) & (t - t0 < limit_ns):
        flag = tl.load(flag_ptr, volatile=True)
        t = _now()
    tl.atomic_add(late_ptr, 1, mask=flag < ticket)
