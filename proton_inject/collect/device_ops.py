"""The tool's own device work through the CUDA driver, never through torch operators.

A library may replace torch's own operators with Triton kernels (FlagGems' ``use_gems()``
registers aten implementations for ``zero_``, ``copy_``, ``fill_``, ...). Zeroing a profile
buffer with ``Tensor.zero_()`` would launch one of those kernels, instrumented, which would
need a buffer of its own, zeroed the same way: a recursion (docs/programs.md, "Libraries
that replace torch's operators"). The driver's memset and copy cannot be re-routed, and like
``zero_`` they are captured into a CUDA graph when the stream is capturing.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class _ToolState(threading.local):
    # A default on the class: a thread that never set it reads 0 without an AttributeError
    # raised and caught inside getattr (about a microsecond on every launch we look at).
    depth = 0


_state = _ToolState()


@contextmanager
def tool_work() -> Iterator[None]:
    """Mark this thread as running the tool's own code: a kernel launched meanwhile (by a
    library that re-routed something we call) runs with a throw-away buffer and is not kept."""
    prev = getattr(_state, "depth", 0)
    _state.depth = prev + 1
    try:
        yield
    finally:
        _state.depth = prev


def in_tool_work() -> bool:
    """Whether this thread is inside ``tool_work()``."""
    return getattr(_state, "depth", 0) > 0


@functools.cache
def _driver() -> Any:
    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuMemsetD8Async.argtypes = [ctypes.c_uint64, ctypes.c_ubyte, ctypes.c_size_t, ctypes.c_void_p]
    lib.cuMemsetD8Async.restype = ctypes.c_int
    lib.cuMemcpyDtoHAsync_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p]
    lib.cuMemcpyDtoHAsync_v2.restype = ctypes.c_int
    lib.cuGetErrorString.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    return lib


def _check(rc: int, what: str) -> None:
    if rc != 0:
        msg = ctypes.c_char_p()
        _driver().cuGetErrorString(rc, ctypes.byref(msg))
        raise RuntimeError(f"{what}: CUDA error {rc} ({(msg.value or b'?').decode()})")


def zero(buf: Any, stream: int, nbytes: int | None = None) -> None:
    """Zero the device tensor ``buf`` (contiguous; its first ``nbytes``, else all) on ``stream``."""
    size = buf.numel() * buf.element_size()
    nbytes = size if nbytes is None else min(nbytes, size)
    _check(_driver().cuMemsetD8Async(buf.data_ptr(), 0, nbytes, stream), "cuMemsetD8Async")


def copy_to_host(host_address: int, buf: Any, stream: int, nbytes: int) -> None:
    """Copy the first ``nbytes`` of the device tensor ``buf`` to pinned host memory at
    ``host_address`` on ``stream``."""
    if nbytes > buf.numel() * buf.element_size():
        raise ValueError(f"device buffer of {buf.numel()} bytes is smaller than {nbytes}")
    _check(_driver().cuMemcpyDtoHAsync_v2(host_address, buf.data_ptr(), nbytes, stream),
           "cuMemcpyDtoHAsync")
