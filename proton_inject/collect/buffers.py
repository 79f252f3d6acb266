"""Profile buffers: device memory for kept launches, throw-away buffers for the rest, pinned host
copies; allocated so no library and no CUDA-graph pool sees them."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from proton_inject.collect import bracket, device_ops
from proton_inject.collect.device_ops import in_tool_work, tool_work
from proton_inject.collect.launches import _Pending
from proton_inject.formats import clock_bracket

# Discard buffers captured into graphs we cannot follow: freeing them could let a later
# replay write into someone else's memory.
_KEEP_FOREVER: list[Any] = []


_ALLOC_POOL: Any = None  # one helper thread for device buffers (see _device_empty)


_ALLOC_POOL_LOCK = threading.Lock()


def _device_empty(size: int, device: int, inline: bool = False) -> Any:
    """A device buffer from the default pool, allocated on a helper thread: on the program's
    thread it could come from a CUDA-graph pool (Inductor's cudagraph trees route the thread's
    allocations there and check that pool for unknown tensors). ``inline``: on this thread
    (a global-mode capture forbids allocating from others)."""
    import torch

    def alloc() -> Any:
        with outside_program_modes():
            return torch.empty(size, dtype=torch.uint8, device=torch.device("cuda", device))

    if inline:
        return alloc()
    global _ALLOC_POOL
    with _ALLOC_POOL_LOCK:
        if _ALLOC_POOL is None:
            from concurrent.futures import ThreadPoolExecutor

            _ALLOC_POOL = ThreadPoolExecutor(1, thread_name_prefix="proton-inject-alloc")
    return _ALLOC_POOL.submit(alloc).result()


class _DiscardBuffers:
    """Device buffers that take records nobody reads (launches not kept, kernels run after
    their session). Reused when large enough, never freed: an in-flight kernel (or a captured
    graph) may still write to them."""

    def __init__(self) -> None:
        self._bufs: list[Any] = []
        self._lock = threading.Lock()

    def get(self, size: int, device: int, inline: bool = False) -> Any:
        with self._lock:
            for b in self._bufs:
                if b.device.index == device and b.numel() >= size:
                    return b
            buf = _device_empty(max(size, 1 << 20), device, inline)
            self._bufs.append(buf)
            return buf


_AFTER_SESSION_BUFFERS = _DiscardBuffers()


def throwaway_scratch(size: int, alignment: int, stream: int | None) -> Any:
    """Profile scratch for instrumented kernels launched after their session ended.

    Inductor keeps the kernels it compiled inside a ``with profile()`` block; their next
    launch asks Triton for profile scratch, and Triton's default allocator raises in the
    user's code. They get a reused buffer instead (allocated off this thread, which may be
    capturing a CUDA graph); nobody reads it."""
    import torch

    return _AFTER_SESSION_BUFFERS.get(size, torch.cuda.current_device())


def after_session(prev: Any) -> Any:
    """The profile allocator to restore when a session ends: the program's own if it set one,
    else a throwaway one rather than Triton's default, which raises on instrumented kernels."""
    from triton.runtime import _allocation

    return throwaway_scratch if isinstance(prev, _allocation.NullAllocator) else prev


@contextmanager
def outside_program_modes() -> Iterator[None]:
    """Outside the program's torch modes (set_default_device, Inductor's): our own tensors
    must land where we say, not where the program's context would put them."""
    import torch
    from torch.utils._python_dispatch import _disable_current_modes

    with torch._C.DisableTorchFunction(), _disable_current_modes():
        yield


def _pinned(nbytes: int) -> Any:
    import torch

    with outside_program_modes():
        return torch.empty(nbytes, dtype=torch.uint8, device="cpu", pin_memory=True)


class Buffers:
    """Profile buffers: allocated for each kept launch on the program's stream (through paths no
    library re-routes), zeroed, bracketed by the clock kernel; throw-away ones for launches not
    kept."""

    def _compile_brackets(self) -> None:
        """The clock-bracket kernel for every device, built before any hook is installed (so
        no rule instruments it and the override leaves it alone). Without it launches keep
        their records; their clock is then fitted or guessed, and said so."""
        import torch

        try:
            for d in range(torch.cuda.device_count()):
                self._brackets[d] = (bracket.compile_for(d),
                                     torch.cuda.get_device_properties(d).multi_processor_count)
        except Exception as e:  # never stop profiling for it
            self._brackets.clear()
            self._bracket_error = f"bracket kernel could not be built ({e})"[:300]
            self.result.messages.append(f"warning: clock {self._bracket_error}; launches whose own "
                                        "timer reads cannot fit the clock get a guessed one")

    def _before_kernel(self, p: _Pending, stream: int) -> None:
        """Enqueue a kept launch's own work before its kernel: the buffer's zeroing and the
        clock bracket's first side."""
        p.deferred_stream = None
        # The driver's memset, not zero_(), which a library may re-route to a Triton kernel; in a
        # capture it becomes part of the graph: zeroed on every replay.
        device_ops.zero(p.buffer, stream)
        if p.bracket is not None:
            self._run_bracket(p, 0, stream)

    def _run_bracket(self, p: _Pending, side: int, stream: int) -> None:
        """Enqueue one side (0 before, 1 after) of ``p``'s bracket on the launch's stream."""
        entry = self._brackets.get(p.buffer.device.index)
        if p.bracket is None or entry is None:  # none, or a launch failed since it was set up
            p.bracket = p.bracket_at = None
            return
        ck, ctas = entry
        try:
            bracket.launch(ck, p.bracket[side], ctas, stream)
        except Exception as e:  # never fail the program's launch because of us
            p.bracket = p.bracket_at = None
            self._bracket_error = f"a bracket launch failed ({e})"[:300]
            self._brackets.clear()
            self.result.messages.append(f"warning: clock {self._bracket_error}; later launches have "
                                        "none")

    def _stream_obj(self, stream: int, device: int):
        import torch

        cur = torch.cuda.current_stream(device)
        if cur.cuda_stream == stream:
            return cur
        s = self._streams.get(stream)
        if s is None:
            s = torch.cuda.ExternalStream(stream, device=device)
            self._streams[stream] = s
        return s

    def _allocate(self, size: int, alignment: int, stream: int | None):
        try:
            if in_tool_work():  # a kernel a library launched from inside our own device work
                import torch

                return self._discard.get(size, torch.cuda.current_device())
            with tool_work():
                return self._allocate_buffer(size, stream)
        except Exception as e:  # never fail the program's launch because of us
            import torch

            self._tls.pending = None
            with self._lock:
                if not any(m.startswith("profile buffer allocation failed") for m in self.result.messages):
                    self.result.messages.append(f"profile buffer allocation failed ({e!r}); "
                                                "those launches ran unprofiled")
            return torch.empty(size, dtype=torch.uint8, device=torch.device("cuda", torch.cuda.current_device()))

    def _allocate_buffer(self, size: int, stream: int | None):
        import torch

        pending: _Pending | None = getattr(self._tls, "pending", None)
        device = torch.cuda.current_device()
        capturing = torch.cuda.is_current_stream_capturing()
        graph, mode = getattr(self._tls, "capture", None) or (None, "global")
        # A global-mode capture forbids allocating from other threads: take the graph's pool.
        inline = capturing and mode == "global"
        keep = pending is not None and self._want(pending, capturing)
        if keep and capturing and graph is None:  # captured by an API we do not follow
            with self._lock:
                name = pending.info.name
                self.result.in_cuda_graphs[name] = self.result.in_cuda_graphs.get(name, 0) + 1
            keep = False
        if not keep:
            buf = self._discard.get(size, device, inline)
            if capturing:  # the graph writes to it on every replay, after this session too
                if graph is not None:
                    graph.__dict__.setdefault("_proton_inject_keep", []).append(buf)
                else:
                    _KEEP_FOREVER.append(buf)
            return buf
        s = self._stream_obj(int(stream or 0), device)
        if not capturing:  # event queries are illegal during a capture
            with self._lock:
                self._poll()
                while self._pending_bytes + size > self.max_pending and self._inflight:
                    self._retire(self._inflight.popleft(), wait=True)
        # Outside a capture the clock bracket's rows ride in the buffer's tail: one allocation,
        # one copy. A captured launch has none (a bracket kernel would join the user's graph).
        ctas = 0 if capturing or device not in self._brackets else self._brackets[device][1]
        at = -(-size // 128) * 128
        buf = _device_empty(at + clock_bracket.bracket_bytes(ctas) if ctas else size, device, inline)
        pending.buffer = buf
        pending.keep = True
        pending.graph = graph if capturing else None
        if ctas:
            pending.bracket = buf[at:].view(torch.int64).view(2, -1)
            pending.bracket_at = (at, ctas)
        if getattr(self._tls, "measure", None) is not None:
            pending.deferred_stream = s.cuda_stream  # after --measure-overhead's gate (_measure_enter)
        else:
            self._before_kernel(pending, s.cuda_stream)
        return buf[:size] if ctas else buf
