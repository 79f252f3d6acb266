"""Instrumented builds' launchers in C (``fast_launch.c``, its state ``fast_launch_state.c``),
beside the Python launch path.

Per kept launch the Python path (``KernelLauncher``, ``LaunchPath.launch``, ``Slabs.launch``,
``program_frame``) costs a launch-bound loop about as much again as Triton's own launch: each
attribute read and call is tens of nanoseconds. The C launcher counts each launch, sends a
launch not kept straight to Triton's entry point, and keeps the usual kept launch itself (no
bracket due, the open slab has room, no autotuner, capture, --measure-overhead or tool work);
everything else it hands to the Python path's ``LaunchPath.not_kept`` and ``launch`` before it
changes anything, so the Python path stays the one reference.

It shares the Python path's state by reference, not a copy: the slabs' lock and open slabs, the
path's and the slabs' flags, the session's thread-local state, the tool-work depth and the
call-site cache; a session with C launchers also makes its per-build counts and open slabs as
C twins of ``LaunchCounts`` and ``Slab`` (the same attributes, read by C as fields; a slab holds
the C path's entries as C fields until its ``launches`` is read) and its slabs' lock as a C
twin of ``threading.RLock``. Where the CUDA driver is loaded, the C path asks it whether the
launch's stream is capturing a graph (``cuStreamIsCapturing``) rather than torch. A change to
how the Python path keeps any of them is a change to the C files too (tests/unit/collect/
test_fast_launch.py compares the two paths). The module is compiled once per machine and Python
version with Triton's own build helper and cache (Triton compiles its launchers the same way, so
a C compiler is there).

On by default (measured on an H200: docs/host-performance.md); ``PROTON_INJECT_FAST_LAUNCH=0``
turns it off, leaving every launch to the Python path.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

from proton_inject.collect import call_site, device_ops
from proton_inject.collect.slabs import NOT_TAKEN, SHIP_AFTER_S

MODULE = "proton_inject_fast_launch"
SOURCES = ("fast_launch_state.c", "fast_launch.c")  # one module: the state's types, then the launchers
ENV = "PROTON_INJECT_FAST_LAUNCH"


@functools.cache
def _module() -> Any:
    from triton.runtime.build import compile_module_from_src

    here = Path(__file__).parent
    src = "\n".join((here / name).read_text() for name in SOURCES)
    return compile_module_from_src(src, MODULE)


def enabled() -> bool:
    return os.environ.get(ENV, "1") != "0"


def make(path: Any, slabs: Any, sink: Any, buffers: Any, stream_query: int | None = None) -> Any:
    """The state a session's C launchers share (the Python path's, by reference). Raises when it
    cannot be built (no C compiler, no Python headers): the caller notes it and keeps the Python
    path. ``stream_query``: the address of a function as the driver's ``cuStreamIsCapturing``
    (default: the driver's, where it is loaded; 0: torch's query instead)."""
    policy = path.policy
    fast = _module().Fast(
        path, slabs, slabs._lock, slabs._open, path._tls, device_ops._state, path._capturing_here,
        sink.next_seq, buffers.bracket_after, call_site._is_library, call_site.classify, path._config, NOT_TAKEN,
        policy.first, policy.every, -1 if policy.total is None else policy.total, slabs.largest,
        -1.0 if policy.rate is None else float(policy.rate), path.started, SHIP_AFTER_S,
        driver_stream_query() if stream_query is None else stream_query)
    fast.kept, fast.sampled = path.kept, path.sampled  # (the path's counts are held here from now on)
    return fast


def driver_stream_query() -> int:
    """The address of the CUDA driver's ``cuStreamIsCapturing`` where the driver is loaded in
    this process already (torch and Triton load it), else 0."""
    import ctypes

    try:
        lib = ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOLOAD | os.RTLD_NOW)
        return ctypes.cast(lib.cuStreamIsCapturing, ctypes.c_void_p).value or 0
    except (OSError, AttributeError):
        return 0


def launcher(fast: Any, inner: Any, info: Any, counts: Any, path: Any, device: int, direct: Any, coop: Any,
             pdl: Any, per_cta: int) -> Any:
    """An instrumented build's launcher in C (``launch_path.KernelLauncher``'s twin, with the
    same attributes), for the session whose shared state ``make`` gave."""
    return _module().Launcher(fast, inner, info, counts, path, device, direct, coop, pdl, per_cta)


def slab_type() -> Any:
    """``slabs.Slab``'s C twin: the slabs a session with C launchers opens."""
    return _module().Slab


def lock_type() -> Any:
    """The slabs' re-entrant lock in C (``threading.RLock``'s twin), which the C path takes
    without a Python call."""
    return _module().Lock


def counts_type() -> Any:
    """``keep_policy.LaunchCounts``' C twin: the counts a session with C launchers keeps."""
    return _module().Counts
