"""Write decoded launches as a CSV table: one row per region instance, for a spreadsheet,
pandas or DuckDB.

Columns: ``rank`` (empty without one), ``launch``, ``kernel``, ``region`` (its name),
``scope`` (its id), ``loc`` (source ``file:line``, empty if none), ``sm``, ``cta``, ``warp``,
``start_ns`` and ``end_ns`` (integer ns on the file's time axis: from the launch's time 0,
or the run's earliest launch when merged, as in the other traces), ``dur_ns`` and
``cycles``. Rows come launch by launch in the decoder's order (by CTA, warp, then time);
the header comes first.
"""

from __future__ import annotations

import csv
import io
import os
from typing import Any

import numpy as np

from proton_inject.formats.trace_writer import TraceLaunch, TraceSink, time_zero

COLUMNS = ("rank", "launch", "kernel", "region", "scope", "loc", "sm", "cta", "warp",
           "start_ns", "end_ns", "dur_ns", "cycles")
_CHUNK = 1 << 16  # rows formatted at a time: bounded scratch memory


class CsvFile(TraceSink):
    """One CSV table written launch by launch (the interface of ``trace_writer.py``)."""

    def __init__(self, path: str | os.PathLike | None, t0_ns: int, merged: bool,
                 gz: bool = False, level: int = 1):
        self.t0, self.merged = t0_ns, merged
        self.events = 0
        self.json_bytes = 0  # not JSON
        super().__init__(path, gz, level)
        self._write([COLUMNS])

    def _write(self, rows: Any) -> None:
        text = io.StringIO()
        csv.writer(text, lineterminator="\n").writerows(rows)
        self._f.write(text.getvalue().encode())

    def add(self, d: TraceLaunch) -> None:
        """Append one launch's region instances."""
        if time_zero(d) < self.t0:
            raise ValueError(f"launch {d.meta.label} starts before the trace's time 0")
        ev, meta = d.events, d.meta
        shift = d.base_ns - self.t0
        ts = np.round(ev.start_ns).astype(np.int64) + shift
        te = np.round(ev.end_ns).astype(np.int64) + shift
        names = {int(s): d.scope_name(int(s)) for s in np.unique(ev.scope)}
        head = ("" if meta.rank is None else meta.rank, meta.launch, meta.kernel)
        for lo in range(0, len(ev), _CHUNK):
            sl = slice(lo, lo + _CHUNK)
            cols = (ev.scope[sl].tolist(), ev.sm[sl].tolist(), ev.cta[sl].tolist(),
                    ev.warp[sl].tolist(), ts[sl].tolist(), te[sl].tolist(),
                    (te[sl] - ts[sl]).tolist(), ev.cycles[sl].tolist())
            self._write((*head, names[s], s, meta.scope_locs.get(s, ""), sm, cta, warp, t0, t1, dt, c)
                        for s, sm, cta, warp, t0, t1, dt, c in zip(*cols, strict=True))
        self.events += len(ev)

    def commit(self) -> Any:
        """Finish the file; returns its path (the bytes when written to memory)."""
        return self._close()
