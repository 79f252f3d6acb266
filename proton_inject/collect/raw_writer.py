"""Kept launches from the GPU to host memory to disk, off the program's thread.

The launch path only enqueues: the copy to pinned memory on a side stream and an event after
it. This thread waits for each event in launch order (waiting releases the GIL), hands the
device buffer back to the pool and moves the bytes out of the pinned buffer (``land``). Saving
(metadata, gzip, two files a launch) is Python work that would take the GIL from the program's
thread for milliseconds at a time, so it waits: it runs when the landed bytes pass
``max_pending``, and at ``close``. Bytes in flight are bounded the same way: a launch that
would pass the bound waits for older ones to land, the only time the program's thread waits
for the GPU because of us.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

# How often the writer looks for landed copies: woken for every kept launch, it would take the
# GIL from the program's thread once a launch; in batches, once in a while.
WAKE_S = 0.05


@dataclass
class InFlight:
    """A kept launch between its copy being enqueued and its raw file being written."""

    record: Any  # a LaunchRecord, or a SlabBatch (the launches of one slab); ``label`` names it
    host_buffer: Any  # pinned memory of its own, or None: at host_offset in the session's ring
    host_offset: int | None
    nbytes: int
    done: Any  # CUDA event recorded after the copy (and the device buffer's zeroing)


class RawWriter:
    """One thread that saves kept launches in order; ``put`` enqueues, ``close`` drains."""

    def __init__(self, land: Callable[[InFlight], Any], save: Callable[[Any, Any], None],
                 max_pending: int, on_error: Callable[[str], None],
                 capturing: Callable[[], bool] = lambda: False) -> None:
        self._land, self._save, self._on_error = land, save, on_error
        # A CUDA-graph capture under way: event calls from this thread would break it (CUDA
        # refuses them during a global-mode capture), so the writer waits it out. ``gpu_lock``
        # is held around its event calls: a capture begins only once it has it.
        self._capturing = capturing
        self.gpu_lock = threading.Lock()
        self.max_pending = max_pending
        self._queue: deque[InFlight] = deque()
        self._landed: list[tuple[Any, Any]] = []  # (record, bytes) not saved yet
        self._landed_bytes = 0
        self._cond = threading.Condition()
        self._pending = 0
        self._closing = False
        self._holds = 0  # autotuners timing configs: the writer keeps off the GIL meanwhile
        self._urgent = False  # pinned memory ran short: land now, held or not
        self._thread: threading.Thread | None = None

    def put(self, item: InFlight) -> None:
        """Queue ``item``; wait while more than ``max_pending`` bytes are in flight."""
        with self._cond:
            self._start()
            while self._pending and self._pending + item.nbytes > self.max_pending and self._thread.is_alive():
                self._cond.wait(0.1)
            self._pending += item.nbytes
            self._queue.append(item)
            if self._pending > self.max_pending // 2:  # else it wakes on its own (WAKE_S)
                self._cond.notify_all()

    def start(self) -> None:
        """The thread started now, ahead of the first ``put``."""
        with self._cond:
            if not self._closing:
                self._start()

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="proton-inject-writer", daemon=True)
            self._thread.start()

    def wake(self) -> None:
        """Land what is queued now (pinned memory ran short)."""
        with self._cond:
            self._urgent = True
            self._cond.notify_all()

    @contextmanager
    def held(self) -> Iterator[None]:
        """No landing in the block unless memory runs short: an autotuner times configs in
        it, and the writer's share of the GIL would delay the launches it times (a tuner then
        chooses by our host time, not by the kernels')."""
        with self._cond:
            self._holds += 1
        try:
            yield
        finally:
            with self._cond:
                self._holds -= 1
                self._cond.notify_all()

    def _idle(self) -> bool:
        if self._closing:
            return False
        if self._capturing():
            return True
        held = self._holds and not self._urgent and self._pending <= self.max_pending // 2
        return not self._queue or bool(held)

    def close(self) -> None:
        """Land everything still in flight, save everything landed, stop the thread."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._save_landed()

    def _save_landed(self) -> None:
        batch, self._landed, self._landed_bytes = self._landed, [], 0
        for rec, data in batch:
            try:
                self._save(rec, data)
            except Exception as e:  # a full disk: say so, go on
                self._on_error(f"could not save {rec.label}: {e}")

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._idle():
                    self._cond.wait(WAKE_S)
                if not self._queue:
                    return
                item = self._queue[0]
            try:
                with self.gpu_lock:
                    if self._capturing() and not self._closing:  # (began since: wait it out)
                        continue
                    item.done.synchronize()
                data = self._land(item)
                self._landed.append((item.record, data))
                self._landed_bytes += len(data)
                if self._landed_bytes > self.max_pending:
                    self._save_landed()
            except Exception as e:  # the GPU in an error state: say so, go on
                self._on_error(f"could not read back {item.record.label}: {e}")
            with self._cond:
                self._queue.popleft()
                self._pending -= item.nbytes
                self._urgent = self._urgent and bool(self._queue)
                self._cond.notify_all()
