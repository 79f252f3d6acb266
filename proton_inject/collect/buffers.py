"""Profile buffers: pooled device memory for kept launches, throw-away buffers for the rest, a
pinned ring for their copies; allocated so no library and no CUDA-graph pool sees them."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from proton_inject.collect import bracket, device_ops
from proton_inject.collect.launches import _Pending
from proton_inject.formats import clock_bracket

# How often a kept launch gets its own clock bracket, at most, on one device (seconds), past
# the first launches of each build (each bracketed: a short kernel's own timer reads cannot
# fit its clock, and a program that launches a kernel a few times has no other).
BRACKET_EVERY_S = 0.01
BRACKETED_FIRST = 3

_ALLOC_POOL: Any = None  # one helper thread for device buffers (see _device_empty)


_ALLOC_POOL_LOCK = threading.Lock()
_TOOL_STREAMS: dict[int, Any] = {}


def tool_stream(device: int) -> Any:
    """A stream of the tool's own on ``device`` (its buffers' allocations, a new slab's
    zeroing): it waits for nothing of the program's."""
    s = _TOOL_STREAMS.get(device)
    if s is None:
        import torch

        with _ALLOC_POOL_LOCK:
            s = _TOOL_STREAMS.get(device)
            if s is None:
                s = _TOOL_STREAMS[device] = torch.cuda.Stream(device=device)
    return s


def _device_empty(size: int, device: int, inline: bool = False) -> Any:
    """A device buffer from the default pool, allocated on a helper thread: on the program's
    thread it could come from a CUDA-graph pool (Inductor's cudagraph trees route the thread's
    allocations there and check that pool for unknown tensors). ``inline``: on this thread
    (a global-mode capture forbids allocating from others)."""
    import torch

    def alloc(own_stream: bool = True) -> Any:
        # On a stream of the tool's own: the caching allocator then never hands us a block the
        # program freed on its streams while its kernels may still use it (a block is reused
        # only on the stream it was freed on).
        with outside_program_modes(), torch.cuda.stream(tool_stream(device) if own_stream else None):
            return torch.empty(size, dtype=torch.uint8, device=torch.device("cuda", device))

    if inline:
        return alloc(own_stream=False)  # (from the capture's own pool)
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

    def find(self, size: int, device: int) -> Any:
        for b in self._bufs:  # (a list only grows: read without the lock)
            if b.numel() >= size and b.device.index == device:
                return b
        return None

    def get(self, size: int, device: int, inline: bool = False) -> Any:
        buf = self.find(size, device)
        if buf is None:
            with self._lock:
                buf = _device_empty(max(size, 1 << 20), device, inline)
                self._bufs.append(buf)
        return buf


def _size_class(nbytes: int) -> int:
    """Pooled buffers come in powers of two from 64 KiB: few sizes, each reused often."""
    return max(1 << 16, 1 << (max(nbytes, 1) - 1).bit_length())


class BufferPool:
    """Device buffers for kept launches, reused.

    A device buffer is busy from its launch until the event after its copy and zeroing (both
    on the copy stream) has passed; then the next kept launch of its size takes it, zeroed,
    with no allocation and no memset on the program's stream. Busy buffers are checked
    oldest first with one event query. Device bytes stay under ``limit``: past it a launch
    waits for the oldest busy buffer (the only wait for the GPU on the launch path)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0  # device bytes allocated by the pool (busy and free)
        self._free: dict[tuple[int, int], list[Any]] = {}
        self._busy: dict[tuple[int, int], deque[tuple[Any, Any]]] = {}
        self._lock = threading.Lock()

    def take(self, nbytes: int, device: int, capturing: bool = False) -> tuple[Any, bool]:
        """A device buffer of at least ``nbytes`` and whether it is fresh (not zeroed yet).
        ``capturing``: a CUDA-graph capture is under way on some thread, so no event is asked
        (CUDA refuses it during a global-mode capture)."""
        size = _size_class(nbytes)
        key = (device, size)
        with self._lock:
            free, busy = self._free.get(key), self._busy.get(key)
            if free:
                return free.pop(), False
            if capturing:
                busy = None
            elif busy and busy[0][0].query():
                return busy.popleft()[1], False
            if self.held + size > self.limit and not capturing:
                if busy:  # at the limit: the oldest of this size, once its copy is done
                    done, buf = busy.popleft()
                    done.synchronize()
                    return buf, False
                self._trim(size)
            self.held += size
        return _device_empty(size, device), True

    def give_back(self, buf: Any) -> None:
        """``buf`` was taken but nothing wrote to it (still all zero): free now."""
        with self._lock:
            self._free.setdefault((buf.device.index, buf.numel()), []).append(buf)

    def busy(self, buf: Any, done: Any) -> None:
        """``buf`` is free again, zeroed, once ``done`` (a CUDA event) has passed."""
        with self._lock:
            self._busy.setdefault((buf.device.index, buf.numel()), deque()).append((done, buf))

    def _trim(self, size: int) -> None:
        """Free unused buffers of other sizes (or whose copy is done) while the pool would
        pass its limit."""
        for key, busy in self._busy.items():
            while busy and self.held + size > self.limit and busy[0][0].query():
                busy.popleft()
                self.held -= key[1]
        for key, free in self._free.items():
            while free and self.held + size > self.limit:
                self.held -= key[1]
                free.pop()


class HostRing:
    """Pinned host memory for kept launches' copies: one block, taken in launch order and
    given back in the same order by the raw writer once it has moved the bytes out, so the
    program's thread never allocates pinned memory (an allocation can take longer than
    many launches). A copy larger than the block gets a pinned buffer of its own."""

    def __init__(self, size: int, wake: Any) -> None:
        self.size = size
        self._wake = wake  # asks the raw writer to land copies now
        self._mem: Any = None
        self.array: Any = None  # the block as a numpy array
        self._head = 0
        self._spans: deque[tuple[int, int]] = deque()
        self._cond = threading.Condition()

    def take(self, n: int) -> int | None:
        """The offset of ``n`` bytes of the block, or None if they can never fit; waits while
        the block is full of copies not yet landed."""
        if n > self.size:
            return None
        with self._cond:
            self._allocate()
            while True:
                start = self._fit(n)
                if start is not None:
                    self._spans.append((start, start + n))
                    self._head = start + n
                    return start
                self._wake()
                self._cond.wait(0.1)

    def prepare(self) -> None:
        """The block allocated now, ahead of the first copy."""
        with self._cond:
            self._allocate()

    def _allocate(self) -> None:
        if self._mem is None:
            self._mem = _pinned(self.size)
            self.array = self._mem.numpy()

    def _fit(self, n: int) -> int | None:
        if not self._spans:
            return 0
        tail, head = self._spans[0][0], self._head
        if head > tail:  # free: [head, size) and [0, tail)
            if head + n <= self.size:
                return head
            return 0 if n <= tail else None
        return head if head + n <= tail else None  # free: [head, tail); none when equal

    def address(self, start: int) -> int:
        return self._mem.data_ptr() + start

    def release(self, start: int) -> None:
        """(raw writer) The bytes of the copy at ``start`` (the oldest) have been moved out."""
        with self._cond:
            if self._spans and self._spans[0][0] == start:
                self._spans.popleft()
            else:  # (out of order: never expected; keep the ring consistent anyway)
                self._spans = deque(sp for sp in self._spans if sp[0] != start)
            self._cond.notify_all()



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


class LaunchBuffers:
    """A session's collaborator for launches' device buffers: a kept launch's from the pool
    (zeroed; a fresh one zeroed through the driver on the program's stream, which no library
    re-routes), now and then bracketed by the clock kernel; the profile allocator Triton asks
    on every other launch of an instrumented build (a throw-away buffer).

    It needs the thread-local state it shares with the launch path (``buffer``, ``pending``,
    ``capture``, ``measure``), the run's lock and result (for its notes), the pool, and
    ``capturing()``: whether a CUDA-graph capture is under way on some thread."""

    def __init__(self, tls: Any, lock: Any, result: Any, pool: BufferPool, capturing: Any) -> None:
        self._tls, self._lock, self.result, self.pool, self._capturing = tls, lock, result, pool, capturing
        self.discard = _DiscardBuffers()  # for launches not kept
        # Clock-bracket kernel per device and its CTAs (one per SM); why, where there is none.
        self.brackets: dict[int, tuple[Any, int]] = {}
        self.bracket_error: str | None = None
        # device -> when a launch not among its build's first is next bracketed (perf_counter s);
        # slabs read it before asking bracket_ctas, which costs a kept launch a call
        self.bracket_after: dict[int, float] = {}
        self._streams: dict[tuple[int, int], Any] = {}

    def compile_brackets(self) -> None:
        """The clock-bracket kernel for every device, built before any hook is installed (so
        no rule instruments it and the override leaves it alone). Without it launches keep
        their records; their clock is then fitted or guessed, and said so."""
        import torch

        for d in range(torch.cuda.device_count()):
            tool_stream(d)  # (made now: a stream made later might be made during a capture)
        try:
            for d in range(torch.cuda.device_count()):
                self.brackets[d] = (bracket.compile_for(d),
                                     torch.cuda.get_device_properties(d).multi_processor_count)
        except Exception as e:  # never stop profiling for it
            self.brackets.clear()
            self.bracket_error = f"bracket kernel could not be built ({e})"[:300]
            self.result.messages.append(f"warning: clock {self.bracket_error}; launches whose own "
                                        "timer reads cannot fit the clock get a guessed one")

    def before_kernel(self, p: _Pending, stream: int) -> None:
        """Enqueue a kept launch's own work before its kernel: the zeroing of a buffer not
        taken zeroed from the pool, and the clock bracket's first side."""
        p.deferred_stream = None
        # The driver's memset, not zero_(), which a library may re-route to a Triton kernel; in a
        # capture it becomes part of the graph: zeroed on every replay.
        if p.fresh:
            device_ops.zero(p.buffer, stream)
        if p.bracket is not None:
            self.run_bracket(p, 0, stream)

    def run_bracket(self, p: _Pending, side: int, stream: int) -> None:
        """Enqueue one side (0 before, 1 after) of ``p``'s bracket on the launch's stream."""
        if p.bracket is None or not self.launch_bracket(p.buffer.device.index, p.bracket[side], stream):
            p.bracket = p.bracket_at = None  # none, or a launch failed since it was set up

    def launch_bracket(self, device: int, rows: Any, stream: int) -> bool:
        """Enqueue one bracket side writing into ``rows`` (int64 rows, a tensor or an address)
        on ``stream``; False when there is no bracket kernel (any more) on ``device``."""
        entry = self.brackets.get(device)
        if entry is None:
            return False
        ck, ctas = entry
        try:
            bracket.launch(ck, rows, ctas, stream)
        except Exception as e:  # never fail the program's launch because of us
            self.bracket_error = f"a bracket launch failed ({e})"[:300]
            self.brackets.clear()
            self.result.messages.append(f"warning: clock {self.bracket_error}; later launches have "
                                        "none")
            return False
        return True

    def stream_obj(self, stream: int, device: int):
        """A torch stream object for a launch's stream handle on ``device`` (made once for
        each; the default stream's handle is 0 on every device)."""
        s = self._streams.get((device, stream))
        if s is None:
            import torch

            cur = torch.cuda.current_stream(device)
            s = cur if cur.cuda_stream == stream else torch.cuda.ExternalStream(stream, device=device)
            self._streams[(device, stream)] = s
        return s

    def allocate(self, size: int, alignment: int, stream: int | None):
        """The profile allocator Triton calls for every launch of an instrumented build: the
        buffer the launch path prepared for a kept launch, else a throw-away one."""
        tls = self._tls
        buf = getattr(tls, "buffer", None)
        if buf is not None and buf.numel() >= size:
            tls.buffer = None
            return buf
        import torch

        device = torch._C._cuda_getDevice()
        buf = self.discard.find(size, device)
        if buf is None:
            # A global-mode capture forbids allocating from other threads: take the graph's pool.
            _, mode = getattr(tls, "capture", None) or (None, "global")
            buf = self.discard.get(size, device, torch.cuda.is_current_stream_capturing() and mode == "global")
        return buf

    def failed(self, e: Exception, what: str | None = None) -> None:
        """A kept launch's buffer could not be set up (it runs unprofiled), or ``what`` went
        wrong with kept launches; said once per kind."""
        head = what or "profile buffer allocation failed"
        with self._lock:
            if not any(m.startswith(head) for m in self.result.messages):
                self.result.messages.append(f"{head} ({e!r}); " + (
                    "they are not in the profile" if what else "those launches ran unprofiled"))

    def for_launch(self, pending: _Pending, size: int, early: bool = False) -> Any:
        """The zeroed buffer of ``size`` bytes a kept launch records into (its clock bracket's
        first side enqueued before it), or None when the launch cannot be kept (captured into
        a CUDA graph by an API we do not follow)."""
        import torch

        device = torch._C._cuda_getDevice()
        capturing = torch.cuda.is_current_stream_capturing()
        graph, mode = getattr(self._tls, "capture", None) or (None, "global")
        if capturing and graph is None:  # captured by an API we do not follow
            with self._lock:
                name = pending.info.name
                self.result.in_cuda_graphs[name] = self.result.in_cuda_graphs.get(name, 0) + 1
            return None
        s = self.stream_obj(pending.stream, device)
        # Outside a capture a clock bracket may ride in the buffer's tail (one buffer, one
        # copy); a captured launch has none (a bracket kernel would join the user's graph).
        ctas = 0 if capturing else self.bracket_ctas(device, early)
        at, total = clock_bracket.after_records(size, ctas)
        if capturing:
            # A global-mode capture forbids allocating from other threads: take the graph's pool.
            buf = _device_empty(total, device, inline=mode == "global")
            fresh = True
        else:
            buf, fresh = self.pool.take(total, device, self._capturing())
        pending.buffer = buf
        pending.nbytes = total
        pending.keep = True
        pending.graph = graph if capturing else None
        pending.fresh = fresh
        if ctas:
            pending.bracket = buf[at:total].view(torch.int64).view(2, -1)
            pending.bracket_at = (at, ctas)
        if getattr(self._tls, "measure", None) is not None:
            pending.deferred_stream = s.cuda_stream  # after --measure-overhead's gate (_measure_enter)
        else:
            self.before_kernel(pending, s.cuda_stream)
        return buf[:size]

    def bracket_ctas(self, device: int, early: bool = False) -> int:
        """The CTAs of the clock bracket this kept launch gets (``bracket_due``), 0 for none."""
        due = self.bracket_due(device, early)  # (first: it also schedules the next, kernel or not)
        entry = self.brackets.get(device)
        return entry[1] if entry is not None and due else 0

    def bracket_due(self, device: int, early: bool = False) -> bool:
        """Whether this kept launch gets its own clock bracket: each of the first
        ``BRACKETED_FIRST`` launches of a build (``early``), then at most one every
        ``BRACKET_EVERY_S`` on a device, so that brackets (two ~10 us kernels) stay a small
        share of a launch-bound program's GPU time; the other launches' clocks come from
        their own timer reads or the device's brackets."""
        now = time.perf_counter()
        if not early and now < self.bracket_after.get(device, 0.0):
            return False
        self.bracket_after[device] = now + BRACKET_EVERY_S
        return True
