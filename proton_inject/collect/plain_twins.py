"""Plain twins: an instrumented build's launches not kept run the program's own build.

A launch not kept used to run the instrumented build with a throw-away buffer for its records:
under the default policy nearly every launch of an instrumented kernel, each paying the
records' kernel time (1.05x plain on an H200 for a small loop kernel, more for a kernel with
many records). The plain twin is the same source compiled with the same options, without our
instrumentation (as autotuners' timing builds are, in the program's own cache: usually a cache
hit). Triton's CUDA entry point takes the function and the packed metadata (warps, shared
memory) on every call, and every Triton 3.6 kernel takes a profile scratch pointer, used or
not, so the instrumented build's entry point launches the twin as it is.

On unless ``PROTON_INJECT_PLAIN_TWINS=0``. A twin is built at its build's first load: a cache
hit where the program ran plain before (or tuned it), else one plain compile more per
instrumented build in the profile's first run.
"""

from __future__ import annotations

import os
from typing import Any

ENV = "PROTON_INJECT_PLAIN_TWINS"

# Options fields that must match between a build and its twin for one launch call to serve
# both (the entry point takes its grid flags from the instrumented build's launcher).
SAME = ("num_warps", "num_ctas", "launch_cooperative_grid", "launch_pdl", "global_scratch_size")


def enabled() -> bool:
    return os.environ.get(ENV, "1") != "0"


def _tuples(v: Any) -> Any:
    """JSON gave lists where the options hold tuples (their hash, the cache key, tells)."""
    return tuple(_tuples(x) for x in v) if isinstance(v, list) else v


def twin_options(metadata: Any, plain_mode: str) -> dict[str, Any]:
    """The compile options of ``metadata``'s build, with the program's own instrumentation mode."""
    opts = {k: _tuples(v) for k, v in metadata._asdict().items()}
    opts["instrumentation_mode"] = plain_mode
    return opts


def compile_twin(ck: Any, autotune: Any) -> Any:
    """The plain CompiledKernel of instrumented build ``ck`` (not loaded). Raises ValueError
    when its launch options differ from ``ck``'s."""
    import triton

    md = ck.metadata
    with autotune.plain_builds():
        twin = triton.compile(ck.src, target=md.target, options=twin_options(md, autotune.plain_mode))
    tm = twin.metadata
    differ = [k for k in SAME if getattr(md, k, None) != getattr(tm, k, None)]
    if differ or getattr(tm, "profile_scratch_size", 0):
        raise ValueError(f"its plain build differs in {', '.join(differ) or 'profile scratch'}")
    return twin


def plain_twin(ck: Any, autotune: Any) -> Any:
    """``ck``'s plain twin, compiled and loaded on the current device: its ``function`` and
    ``packed_metadata`` are what the entry point takes (made as a plain build, the twin's load
    is Triton's own: the launch path wraps no plain build)."""
    twin = compile_twin(ck, autotune)
    twin._init_handles()
    return twin
