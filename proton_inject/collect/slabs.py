"""Kept launches recorded into device slabs: one copy to the host for many launches.

A kept launch records into the next free bytes of its device's open slab (a pooled device
buffer, already zeroed) and gets them as a plain address: no buffer of its own, no event, no
copy and no zeroing per launch. A slab is shipped when the next launch does not fit in it,
when it has been open ``SHIP_AFTER_S``, and when the session stops: on the device's copy
stream, after one event per stream that launched into it, its used bytes are copied to pinned
memory and zeroed, and one event after them hands it to the raw writer; the sink cuts the
landed bytes into launches when it saves them. A slab goes back to the pool once that event
has passed.
"""

from __future__ import annotations

import threading
import time
from typing import Any, NamedTuple

from proton_inject.formats import clock_bracket

# A slab's bytes, at most a quarter of the pool's (--max-pending-mb).
SLAB_BYTES = 8 << 20
SHIP_AFTER_S = 0.05  # so that a slow trickle of kept launches still reaches the host
ALIGN = 128  # each launch's records start on this boundary (Triton asks 128 or less)


class SlabLaunch(NamedTuple):
    """A kept launch in a slab (made as a plain tuple on the launch path, read as this)."""

    seq: int  # LaunchRecord.seq, drawn as it launched
    info: Any  # _KernelInfo
    grid: tuple[int, int, int]
    stream: int
    device: int
    config: dict[str, Any]
    tuning: bool
    launched_from: str | None
    offset: int  # of its bytes in the slab
    nbytes: int  # records and, after them, its clock bracket's rows
    bracket_at: tuple[int, int] | None  # (byte offset in its bytes, CTAs per side)


class SlabBatch:
    """The launches of one shipped slab, as the raw writer carries them."""

    __slots__ = ("launches",)

    def __init__(self, launches: list[tuple]) -> None:
        self.launches = [SlabLaunch._make(e) for e in launches]

    @property
    def label(self) -> str:
        names = sorted({e.info.name for e in self.launches})
        return f"{len(self.launches)} launches of {', '.join(names)}"


class Slab:
    __slots__ = ("buf", "base", "device", "size", "used", "streams", "launches", "opened", "enqueuing",
                 "closed")

    def __init__(self, buf: Any, device: int) -> None:
        self.buf, self.device = buf, device
        self.base = buf.data_ptr()
        self.size = buf.numel()
        self.used = 0
        self.streams: set[int] = set()
        self.launches: list[tuple] = []
        self.opened = time.perf_counter()
        self.enqueuing = 0  # launches given bytes here whose kernels are not enqueued yet
        self.closed = False  # no more launches: shipped once ``enqueuing`` is back to 0


class Slabs:
    """A session's collaborator for kept launches' device bytes (the usual case: not captured
    into a CUDA graph, not timed by ``--measure-overhead``, a CUDA launcher that takes the
    address). It needs the pool (slabs are its buffers), the sink (copy streams, the pinned
    ring, the writer) and the launch side's ``LaunchBuffers`` (stream objects, the clock
    bracket and when one is due)."""

    def __init__(self, pool: Any, sink: Any, buffers: Any) -> None:
        self.pool, self.sink, self.buffers = pool, sink, buffers
        self.slab_bytes = min(SLAB_BYTES, pool.limit // 4)
        # The largest launch a slab takes (its clock bracket fits beside it); a larger one gains
        # nothing from sharing a copy and keeps a buffer of its own (LaunchBuffers).
        self.largest = self.slab_bytes // 2
        self._open: dict[int, Slab] = {}
        self._lock = threading.Lock()
        self._stopped = False

    def take(self, device: int, stream: int, size: int, head: tuple, early: bool = False
             ) -> tuple[Slab, int, tuple[int, int] | None] | None:
        """Bytes for a kept launch of ``size`` (at most ``largest``) record bytes on ``device``: its
        slab, their address and, when a clock bracket is due, the address of the bracket's rows and its
        CTAs (side 0's rows; side 1's follow them). ``head``: the launch's first ``SlabLaunch``
        fields (seq .. launched_from); ``early``: one of its build's first launches (bracketed).
        Call ``done`` once the launch is enqueued. None once the session has stopped."""
        ctas = self.buffers.bracket_ctas(device, early)
        at, total = clock_bracket.after_records(size, ctas)
        step = -(-total // ALIGN) * ALIGN
        shipping = None
        try:
            with self._lock:
                if self._stopped:
                    return None
                slab = self._open.get(device)
                if slab is not None and (slab.used + step > slab.size
                                         or time.perf_counter() - slab.opened > SHIP_AFTER_S):
                    shipping = self._close(slab)
                    slab = None
                if slab is None:  # (a slab closed above is shipped even if this one cannot be made)
                    slab = self._open[device] = self._new(device, max(self.slab_bytes, step))  # (a tiny bound)
                off = slab.used
                slab.used += step
                slab.streams.add(stream)
                slab.enqueuing += 1
                slab.launches.append((*head, off, total, (at, ctas) if ctas else None))
        finally:
            if shipping is not None:
                self._ship(shipping)
        return slab, slab.base + off, (slab.base + off + at, ctas) if ctas else None

    def done(self, slab: Slab, failed_at: int | None = None) -> None:
        """A launch given bytes in ``slab`` is enqueued (``failed_at``: its address, when its
        launch raised instead: nothing of it is saved)."""
        with self._lock:
            if failed_at is not None:
                slab.launches = [e for e in slab.launches if slab.base + e[-3] != failed_at]
            slab.enqueuing -= 1
            ready = slab.closed and slab.enqueuing == 0
        if ready:
            self._ship(slab)

    def ship_all(self) -> None:
        """Ship every open slab (the session stops: no launch is kept any more; one still
        being enqueued ships its slab when it is done)."""
        with self._lock:
            self._stopped = True
            ready = [s for s in (self._close(s) for s in list(self._open.values())) if s is not None]
        for slab in ready:
            self._ship(slab)

    def _close(self, slab: Slab) -> Slab | None:
        """(under the lock) No more launches go to ``slab``; it is returned when it can be
        shipped now, else the last of its launches to be enqueued ships it."""
        if self._open.get(slab.device) is slab:
            del self._open[slab.device]
        slab.closed = True
        return slab if slab.enqueuing == 0 else None

    def _new(self, device: int, size: int) -> Slab:
        buf, fresh = self.pool.take(size, device)
        if fresh:  # zeroed before any launch uses it, on the tool's own stream (see _device_empty)
            from proton_inject.collect.buffers import tool_stream
            from proton_inject.collect.device_ops import zero

            # With a spare: the next slab is needed while this one's copy is still under way,
            # and an allocation then would cost the program's thread milliseconds (the pool
            # reuses a slab once its copy is done, so two are enough while launches keep coming).
            roomy = size == self.slab_bytes and self.pool.held + buf.numel() <= self.pool.limit
            spare = self.pool.take(size, device)[0] if roomy else None
            zs = tool_stream(device)
            for b in (buf, spare):
                if b is not None:
                    zero(b, zs.cuda_stream)
            zs.synchronize()
            if spare is not None:
                self.pool.give_back(spare)
        return Slab(buf, device)

    def _ship(self, slab: Slab) -> None:
        """Enqueue ``slab``'s copy to the host after every stream's launches into it. Never
        raises: a slab that cannot be shipped is lost (said once) and its buffer not reused."""
        if not slab.used:
            self.pool.give_back(slab.buf)
            return
        import torch

        from proton_inject.collect.device_ops import tool_work

        try:
            with tool_work():
                copy_stream = self.sink.copy_stream(slab.device)
                for s in slab.streams:
                    launched = torch.cuda.Event()
                    launched.record(self.buffers.stream_obj(s, slab.device))
                    copy_stream.wait_event(launched)
                # (a slab whose launches all failed is zeroed all the same: a bracket may have run)
                self.sink.ship(SlabBatch(slab.launches), slab.buf, slab.used, copy_stream)
        except Exception as e:  # a GPU in an error state, a stream the program destroyed
            self.buffers.failed(e, what="some kept launches could not be copied out")
