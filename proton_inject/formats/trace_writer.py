"""The interface every trace writer implements, what it reads of a launch, and the file sink
the writers share. ``traces.py`` lists the writers by format name.

A writer is a class called as ``Writer(path, t0_ns, merged, gz=False, level=1)``:

- ``path``: the file to write (a temp file renamed over it by ``commit``), or None to write
  to memory (``commit`` then returns the bytes);
- ``t0_ns``: the globaltimer ns of the file's time 0, not later than any added launch's
  ``time_zero``; ``merged``: the file holds several launches on that one time axis;
- ``gz``: gzip on the fly at ``level``.

It then takes launches one at a time (``add``), so a run of many launches never sits in
memory, and ``commit`` (finish; returns the path, or the bytes) or ``abort`` (remove the temp
file; an old file at ``path`` stays). ``events`` counts the regions written; ``json_bytes``
is the uncompressed size of JSON written (0 for other formats: the report warns about JSON
too big for Perfetto's UI). ``t0`` is ``t0_ns``.

A launch (``TraceLaunch``) is the analysis's decoded launch; a writer reads only the fields
listed there, so this layer needs nothing of the analysis.
"""

from __future__ import annotations

import gzip as _gzip
import io
import math
import os
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from proton_inject.formats.diagnostics import Issue
from proton_inject.formats.files import atomic_writer
from proton_inject.formats.raw import LaunchMeta


class TraceEvents(Protocol):
    """A launch's region instances, one row each (numpy columns of one length)."""

    scope: np.ndarray  # region id (``LaunchMeta.scopes``)
    cta: np.ndarray
    warp: np.ndarray
    sm: np.ndarray
    start_ns: np.ndarray  # float ns from the launch's ``base_ns``
    end_ns: np.ndarray
    cycles: np.ndarray  # int64 cycles between the two records

    def __len__(self) -> int: ...


class TraceCtas(Protocol):
    """A launch's CTAs, one row each: its SM and its timer reads (ns from ``base_ns``)."""

    cta: np.ndarray
    sm: np.ndarray
    init_ns: np.ndarray
    prefinal_ns: np.ndarray
    postfinal_ns: np.ndarray


class TraceLaunch(Protocol):
    """What a writer reads of one decoded launch (``analyze.decode.Decoded`` is one). The
    JSON trace also keeps, for ``report`` to read back, the launch's ``clock.summary()``,
    its ``drops``, ``unmatched_starts``/``unmatched_ends``, ``issues`` and ``record_cost``."""

    meta: LaunchMeta
    events: TraceEvents
    ctas: TraceCtas
    base_ns: int  # globaltimer ns of the launch's own time 0
    clock: Any
    drops: Any
    unmatched_starts: int
    unmatched_ends: int
    issues: list[Issue]
    record_cost: Any

    def scope_name(self, scope: int) -> str: ...


class TraceWriter(Protocol):
    """One trace file written launch by launch (see the module's docstring)."""

    t0: int
    events: int
    json_bytes: int

    def __init__(self, path: str | os.PathLike | None, t0_ns: int, merged: bool,
                 gz: bool = False, level: int = 1) -> None: ...

    def add(self, d: TraceLaunch) -> None: ...

    def commit(self) -> Any: ...

    def abort(self) -> None: ...


def time_zero(d: TraceLaunch) -> int:
    """Globaltimer ns of a launch's time 0: its earliest CTA start, or its earliest record
    where the clock places one before that (Perfetto rejects negative timestamps)."""
    first = float(d.events.start_ns.min()) if len(d.events) else 0.0
    return d.base_ns + min(0, math.floor(first))


class TraceSink:
    """Where a trace file's bytes go: a temp file renamed over ``path`` by ``_close`` (gzip
    level ``level`` on the fly when ``gz``) and removed by ``abort``, or memory when ``path``
    is None (``_close`` then returns the bytes). The base of the writers."""

    def __init__(self, path: str | os.PathLike | None, gz: bool, level: int):
        self._stack = ExitStack()
        self.path = None if path is None else Path(path)
        if path is None:
            self._f: Any = self._stack.enter_context(io.BytesIO())
            self._mem = self._f
        else:
            self._f = self._stack.enter_context(atomic_writer(path))
            self._mem = None
            if gz:  # (no file name in the header: it would be the temp file's)
                self._f = self._stack.enter_context(
                    _gzip.GzipFile(filename="", mode="wb", fileobj=self._f, compresslevel=level,
                                   mtime=0))

    def _close(self) -> Any:
        """Finish the file; returns its path (the bytes when written to memory)."""
        data = self._mem.getvalue() if self._mem is not None else None
        self._stack.close()
        return data if data is not None else self.path

    def abort(self) -> None:
        """Drop the file (an old one at ``path`` stays)."""
        err = RuntimeError("trace aborted")
        self._stack.__exit__(type(err), err, None)


def cta_spans(cta_ids: np.ndarray, ev_cta: np.ndarray, ts: np.ndarray, te: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
    """Per CTA of ``cta_ids`` (its row order): the start of its first region and the end of
    its last (int64 max and min where it has none), from the regions' CTAs, starts and ends;
    what both trace formats place each CTA's finalize slice by."""
    last_end = np.full(len(cta_ids), np.iinfo(np.int64).min)
    first_start = np.full(len(cta_ids), np.iinfo(np.int64).max)
    if len(ev_cta):
        order = np.argsort(cta_ids, kind="stable")
        k = np.searchsorted(cta_ids[order], ev_cta)
        k = order[np.clip(k, 0, len(order) - 1)]
        np.maximum.at(last_end, k, te)
        np.minimum.at(first_start, k, ts)
    return first_start, last_end
