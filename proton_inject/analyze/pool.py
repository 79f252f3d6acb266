"""Worker processes for the report (``-j``): a pool sized to the machine, work handed out a
few tasks ahead and results taken back in order, so what waits in memory stays bounded.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import warnings
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import Any

from proton_inject.errors import UserError

# Tasks handed to each worker process ahead of the one the report waits for: keeps every
# worker busy while bounding what waits in memory (a merged trace's decoded launches).
AHEAD_PER_JOB = 2


def default_jobs() -> int:
    """Decoding processes when -j is not given: one per core this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # (macOS, Windows)
        return os.cpu_count() or 1


def capped_jobs(jobs: int | None) -> tuple[int | None, list[str]]:
    """``jobs`` at most one per core this process may run on (more only compete for the cores,
    each with its own memory: -j 1000 forked 1,000), and a note when it was more."""
    if jobs is None or jobs <= default_jobs():
        return jobs, []
    return default_jobs(), [f"-j {jobs}: decoding with {default_jobs()} processes, one per core "
                            "this process may run on"]


def keep_freed_memory() -> None:
    """In a worker: glibc's malloc keeps freed memory for the next launch's arrays instead of
    handing it back to the system (large arrays are mmap-ed and unmapped each time by default),
    so a worker does not fault in and zero fresh pages for every launch (page faults and system
    time measured in docs/host-performance.md). A worker's peak is then its largest launch's,
    as before. In the workers and in the ``report`` command's own process, never in
    ``run_report``'s caller: that may be the user's program (``profile()``)."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc: its allocator's own defaults
        return
    m_trim_threshold, m_mmap_threshold = -1, -3  # glibc's malloc.h
    mallopt(m_mmap_threshold, 512 << 20)
    mallopt(m_trim_threshold, 1 << 30)


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _start_worker(parent: int) -> None:
    """A worker's first act: die with the process that started it, however that one ends
    (SIGKILL, the OOM killer), rather than live on holding its stdout and stderr, on which a
    caller waits. Linux: the kernel sends SIGKILL at the parent's death (prctl); the parent
    may have died before that, so its pid is checked after."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # (not Linux: the pool's own checks only)
        pass
    if os.getppid() != parent:
        os._exit(1)
    keep_freed_memory()


class Workers:
    """``jobs`` worker processes, or none (``in_process``: the caller works) for one."""

    def __init__(self, jobs: int):
        self.jobs = jobs
        self._pool: ProcessPoolExecutor | None = None
        if jobs > 1:
            # fork: workers start at once with the modules already imported, and never run the
            # program's __main__ again (spawn would, where ``profile()`` sits in a script
            # without a main guard); they touch no GPU, so a CUDA context here is no matter.
            methods = multiprocessing.get_all_start_methods()
            ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
            self._pool = ProcessPoolExecutor(jobs, mp_context=ctx, initializer=_start_worker,
                                             initargs=(os.getpid(),))
            # Forking all workers now, with Python's warning about forking a process that
            # runs threads (torch's, in ``profile()``) silenced: the workers run only our
            # decoding, and a program run with -W error must not fail over it.
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", r"This process .* is multi-threaded", DeprecationWarning)
                with _dead_worker():
                    self._pool.submit(os.getpid).result()

    @property
    def in_process(self) -> bool:
        return self._pool is None

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
        """``fn`` of each item, in order (small results: all held)."""
        if self._pool is None or len(items) < 2:
            return [fn(x) for x in items]
        with _dead_worker():
            return list(self._pool.map(fn, items, chunksize=max(1, len(items) // (8 * self.jobs))))

    def stream(self, fn: Callable[[Sequence[Any]], Any], items: Sequence[Any], size: int) -> Iterator[Any]:
        """``fn`` of each run of ``size`` consecutive items, in order, in the workers, with at
        most AHEAD_PER_JOB runs per worker in flight or waiting."""
        if self._pool is None:
            yield from (fn(items[i:i + size]) for i in range(0, len(items), size))
            return
        chunks = (items[i:i + size] for i in range(0, len(items), size))
        ahead: deque[Future] = deque()
        with _dead_worker():
            for c in chunks:
                ahead.append(self._pool.submit(fn, c))
                if len(ahead) >= AHEAD_PER_JOB * self.jobs:
                    break
            while ahead:
                got = ahead.popleft().result()
                nxt = next(chunks, None)
                if nxt is not None:
                    ahead.append(self._pool.submit(fn, nxt))
                yield got


@contextmanager
def _dead_worker() -> Iterator[None]:
    """A worker process that died (killed for memory, most often) as a clear error."""
    try:
        yield
    except BrokenProcessPool:
        raise UserError("a decoding process ended abruptly (out of memory?): run the report "
                        "again with fewer processes (-j 2, or -j 1 to decode in one)") from None
