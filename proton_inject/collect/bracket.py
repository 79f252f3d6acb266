"""The clock bracket: the SM clock measured right before and right after a profiled launch.

A launch's own timer reads pin its clock only when they differ enough within an SM; on a short
launch whose CTAs all start together they are a few 32 ns globaltimer ticks apart and the fit
is noise, and the device's max clock is a guess (36% off on an H100 right after a heavy
matmul). So the runtime launches ``clock_bracket`` (``_clock_kernel.py``: one CTA per SM,
one warp each) on the launch's stream right before and right after it. Each CTA reads the
globaltimer and ``%clock64`` at a timer edge, spins ``SPIN_NS``, reads both at the next edge
past it; the rate of each CTA is cycles / ns and the mean over SMs beats the timer's tick.
``summarize`` turns one bracket's rows into the few numbers kept in the launch metadata
(``LaunchMeta.clock_bracket``); ``rate`` turns the two sides into a clock and an uncertainty.
"""

from __future__ import annotations

from typing import Any

# Spin of each bracket side: ~10 us plus a launch on the stream, against 32 ns ticks.
SPIN_NS = 10_000


# --- on the GPU (the runtime) -----------------------------------------------------------------


def compile_for(device: int) -> Any:
    """The bracket kernel compiled and loaded for ``device`` (torch's index)."""
    from proton_inject.collect._clock_kernel import clock_bracket

    return compile_tool_kernel(clock_bracket, {"out_ptr": "*i64", "spin_ns": "i64"}, device)


def compile_tool_kernel(fn: Any, signature: dict[str, str], device: int) -> Any:
    """One of the tool's own kernels (the bracket, ``--measure-overhead``'s gate) compiled and
    loaded for ``device`` (torch's index), one warp.

    Called before a session installs its hooks, so no lowering or rule touches it; it is
    launched through the compiled kernel's own launcher without launch hooks. Built in the
    tool's own cache (``user_cache_dir()/triton``, checked against its seal before Triton reads
    it: ``formats/tool_kernel_cache.py``), not the program's Triton cache.
    """
    import torch
    import triton
    from triton.compiler import ASTSource
    from triton.runtime import driver

    from proton_inject.formats import tool_kernel_cache
    from proton_inject.formats.files import user_cache_dir

    with tool_kernel_cache.checked(user_cache_dir(make=True) / "triton") as cache, \
            torch.cuda.device(device), triton.knobs.cache.scope():
        triton.knobs.cache.dir = str(cache)
        ck = triton.compile(ASTSource(fn, signature=signature), target=driver.active.get_current_target(),
                            options={"num_warps": 1})
        ck._init_handles()  # loads it on this device now, not inside a program's launch
    return ck


def launch(ck: Any, out: Any, ctas: int, stream: int) -> None:
    """Enqueue one bracket side writing ``ctas`` rows into ``out`` (int64) on ``stream``."""
    ck.run(ctas, 1, 1, stream, ck.function, ck.packed_metadata, None, None, None, out, SPIN_NS)
