"""Kept launches recorded into device slabs: one copy to the host for many launches.

A kept launch records into the next free bytes of its device's open slab (a pooled device
buffer, already zeroed) and gets them as a plain address: no buffer of its own, no event, no
copy and no zeroing per launch. A slab is shipped when the next launch does not fit in it,
when it has been open ``SHIP_AFTER_S``, and when the session stops: on the device's copy
stream, after one event per stream that launched into it, its used bytes are copied to pinned
memory and zeroed, and one event after them hands it to the raw writer; the sink cuts the
landed bytes into launches when it saves them. A slab goes back to the pool once that event
has passed.

Launches are enqueued under the slabs' lock, so a slab closed under it has every launch it
was given enqueued already and can be shipped at once. All of it is Python on the program's
thread for every kept launch: each call and attribute here costs a launch-bound program.
"""

from __future__ import annotations

import threading
import time
from typing import Any, NamedTuple

from proton_inject.collect.buffers import BRACKETED_FIRST
from proton_inject.formats import clock_bracket

# A slab's bytes, at most a quarter of the pool's (--max-pending-mb).
SLAB_BYTES = 8 << 20
NOT_TAKEN = object()  # Slabs.launch's answer when no slab takes a launch
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
    launched_from: tuple[str, int, str] | None  # call_site.program_frame (site_text formats it)
    offset: int  # of its bytes in the slab
    nbytes: int  # records and, after them, its clock bracket's rows
    bracket_at: tuple[int, int] | None  # (byte offset in its bytes, CTAs per side)


class SlabBatch:
    """The launches of one shipped slab, as the raw writer carries them. Read only when saved:
    at the ship, on the program's thread, making them cost ~0.5 us a kept launch on the CPU VM
    (the C path's entries as tuples, then each as a ``SlabLaunch``)."""

    __slots__ = ("_slab", "_launches")

    def __init__(self, slab: Any) -> None:
        self._slab, self._launches = slab, None  # (a closed slab: nothing is added to it)

    @property
    def launches(self) -> list[SlabLaunch]:
        if self._launches is None:
            self._launches = [SlabLaunch._make(e) for e in self._slab.launches]
            self._slab = None
        return self._launches

    @property
    def label(self) -> str:
        names = sorted({e.info.name for e in self.launches})
        return f"{len(self.launches)} launches of {', '.join(names)}"


class Slab:
    __slots__ = ("buf", "base", "device", "size", "used", "streams", "launches", "opened")

    def __init__(self, buf: Any, device: int) -> None:
        self.buf, self.device = buf, device
        self.base = buf.data_ptr()
        self.size = buf.numel()
        self.used = 0
        self.streams: set[int] = set()
        self.launches: list[tuple] = []
        self.opened = time.perf_counter()


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
        # Re-entrant: Triton's launcher calls the program's launch hooks, and a hook may launch.
        self._lock = threading.RLock()
        self._depth = 0  # launches being enqueued under the lock on this thread (a hook's inside one)
        self._stopped = False
        # What a new slab is made as: ``Slab``, or its C twin when the C launchers are on (they
        # read its fields directly; LaunchPath.install sets it before any slab opens).
        self.slab_type: Any = Slab

    def launch(self, w: Any, gx: int, gy: int, gz: int, stream: int, function: Any, args: tuple,
               size: int, head: tuple) -> Any:
        """Enqueue kept launch ``w`` (a ``KernelLauncher`` with a C entry point) recording its
        ``size`` record bytes (at most ``largest``) into its device's open slab, with a clock
        bracket when one is due; Triton's launcher's return value, or ``NOT_TAKEN`` when no slab
        can take it (the session stopped, a slab could not be made): the caller launches it
        unprofiled. ``head``: the launch's first ``SlabLaunch`` fields (seq .. launched_from).
        The program's own launch error is raised, and nothing of that launch is kept."""
        device = head[4]
        now = time.perf_counter()
        early = w.counts.seen <= BRACKETED_FIRST
        buffers = self.buffers
        ctas = (buffers.bracket_ctas(device, early)
                if early or now >= buffers.bracket_after.get(device, 0.0) else 0)
        at, total = clock_bracket.after_records(size, ctas) if ctas else (size, size)
        step = -(-total // ALIGN) * ALIGN
        shipping = None
        try:
            with self._lock:
                slab = self._open.get(device)
                if self._depth:  # (a hook's launch inside one: unprofiled, the slab stays as it is)
                    return NOT_TAKEN
                if slab is None or slab.used + step > slab.size or now - slab.opened > SHIP_AFTER_S:
                    slab, shipping = self._renew(device, slab, step)
                    if slab is None:
                        return NOT_TAKEN
                address = slab.base + slab.used
                slab.used += step
                slab.streams.add(stream)
                self._depth += 1  # (the bracket kernel's launches call the program's hooks too)
                try:
                    if ctas and not buffers.launch_bracket(device, address + at, stream):
                        ctas = 0
                    ret = w.direct(gx, gy, gz, stream, function, w.coop, w.pdl, None, address, *args)
                    if ctas:
                        buffers.launch_bracket(device, address + at + clock_bracket.bracket_bytes(ctas) // 2,
                                               stream)
                finally:
                    self._depth -= 1
                slab.launches.append((*head, address - slab.base, total, (at, ctas) if ctas else None))
        finally:
            if shipping is not None:
                self._ship(shipping)
        return ret

    def _renew(self, device: int, slab: Slab | None, step: int) -> tuple[Slab | None, Slab | None]:
        """(under the lock) The device's slab for a launch of ``step`` bytes when ``slab`` is
        absent, full or open too long: (the new one, or None when there is none to be had;
        ``slab``, closed, to ship)."""
        if slab is not None:
            del self._open[device]
        if self._stopped:
            return None, slab
        try:
            new = self._open[device] = self._new(device, max(self.slab_bytes, step))  # (a tiny bound)
        except Exception as e:  # never fail the program's launch because of us
            self.buffers.failed(e)
            return None, slab
        return new, slab

    def ship_all(self) -> None:
        """Ship every open slab (the session stops: no launch is kept any more)."""
        with self._lock:
            self._stopped = True
            ready = list(self._open.values())
            self._open.clear()  # (in place: the C fast path holds this dict)
        for slab in ready:
            self._ship(slab)

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
            self.sink.prepare(device)  # (this launch is already slow: the next ones stay quick)
        return self.slab_type(buf, device)

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
                self.sink.ship(SlabBatch(slab), slab.buf, slab.used, copy_stream)
        except Exception as e:  # a GPU in an error state, a stream the program destroyed
            self.buffers.failed(e, what="some kept launches could not be copied out")
