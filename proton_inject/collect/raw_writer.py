"""Kept launches from pinned host memory to disk, on a thread of their own.

The launch path only enqueues: the copy to the host on a side stream and an event after it.
This thread waits for each event in launch order (waiting releases the GIL), hands the device
and host buffers back to the pool, and saves the launch (``save``: raw file and metadata). The
bytes in flight are bounded: a launch that would pass the bound waits for older ones to land,
the only time the program's thread waits for the GPU because of us.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class InFlight:
    """A kept launch between its copy being enqueued and its raw file being written."""

    record: Any  # LaunchRecord
    device_buffer: Any
    host_buffer: Any
    nbytes: int
    done: Any  # CUDA event recorded after the copy (and the device buffer's zeroing)


class RawWriter:
    """One thread that saves kept launches in order; ``put`` enqueues, ``close`` drains."""

    def __init__(self, save: Callable[[Any, Any], None], give_back: Callable[[InFlight], None],
                 max_pending: int, on_error: Callable[[str], None]) -> None:
        self._save, self._give_back, self._on_error = save, give_back, on_error
        self.max_pending = max_pending
        self._queue: deque[InFlight] = deque()
        self._cond = threading.Condition()
        self._pending = 0
        self._closing = False
        self.failed = 0
        self._thread: threading.Thread | None = None

    def put(self, item: InFlight) -> None:
        """Queue ``item``; wait while more than ``max_pending`` bytes are in flight."""
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="proton-inject-writer", daemon=True)
                self._thread.start()
            while self._pending and self._pending + item.nbytes > self.max_pending and self._thread.is_alive():
                self._cond.wait(0.1)
            self._pending += item.nbytes
            self._queue.append(item)
            self._cond.notify_all()

    def wait_for_one(self) -> bool:
        """Wait until the oldest launch in flight has landed; False when none is in flight."""
        with self._cond:
            if not self._queue and not self._pending:
                return False
            before = self._pending
            while self._pending and self._pending == before and self._thread is not None and self._thread.is_alive():
                self._cond.wait(0.1)
            return True

    def close(self) -> None:
        """Write everything still in flight, then stop the thread."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue:
                    return
                item = self._queue[0]
            try:
                item.done.synchronize()
                self._give_back(item)
                self._save(item.record, item.host_buffer)
            except Exception as e:  # the GPU in an error state, a full disk: say so, go on
                self.failed += 1
                self._on_error(f"could not save launch {item.record.seq} of {item.record.kernel}: {e}")
            with self._cond:
                self._queue.popleft()
                self._pending -= item.nbytes
                self._cond.notify_all()
