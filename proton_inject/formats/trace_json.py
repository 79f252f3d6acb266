"""Write decoded launches as Chrome trace JSON (opens in Perfetto and chrome://tracing).

Layout: a process per SM (per launch and SM when launches are merged), a thread per
CTA x warp named ``CTA c warp w`` and sorted by CTA then warp, a complete ("X") event per
region instance with args ``scope, loc, cycles, cta, warp, sm``, and a ``finalize`` slice
per CTA on its first warp's thread with ``finalize_ns`` (post-final minus pre-final),
``init_ns`` and ``first_record_ns``. Times are microseconds with ns resolution from the
launch's earliest CTA start or record (from the run's earliest launch when merged).

Speed: event lines are built column-wise with numpy (digits of every row at once) and
compacted with one boolean mask, instead of one ``json.dumps`` per event.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from proton_inject.errors import UserError
from proton_inject.formats.schema import (
    MAX_TRACE_BYTES,
    loads_json,
    read_bytes,
    read_gzip,
    read_head,
    trace_event_error,
    trace_launches,
)
from proton_inject.formats.trace_writer import TraceLaunch, TraceSink, cta_spans, time_zero

TRACE_FORMAT = "proton-inject-trace"
_CHUNK = 1 << 15  # rows per formatting pass: a few MB of scratch, cache friendly

# --- column-wise text building ---------------------------------------------------------------
# Every row of a chunk gets the same byte width: numbers are right-aligned in a column as wide
# as the chunk's widest value and padded with spaces, which JSON allows between tokens. So a
# chunk is one (rows x width) uint8 matrix filled column by column, with no per-row work.

_POW10 = 10 ** np.arange(1, 19, dtype=np.int64)


def _digits(v: np.ndarray) -> np.ndarray:
    """Decimal digit count of non-negative int64 values."""
    return np.searchsorted(_POW10, v, side="right") + 1


class _Rows:
    """Builds one space-padded text line per row from constant, number and choice columns."""

    def __init__(self, n: int):
        self.n = n
        self.cols: list[tuple[str, Any, int]] = []

    def const(self, s: str) -> None:
        b = np.frombuffer(s.encode(), np.uint8)
        self.cols.append(("c", b, len(b)))

    def choice(self, idx: np.ndarray, table: Sequence[str]) -> None:
        """Per-row string ``table[idx[row]]``, right-aligned (left-padded with spaces)."""
        enc = [t.encode() for t in table]
        w = max((len(e) for e in enc), default=0)
        tb = np.full((max(1, len(enc)), w), ord(" "), np.uint8)
        for i, e in enumerate(enc):
            if e:
                tb[i, w - len(e):] = np.frombuffer(e, np.uint8)
        if self.n and idx.min() == idx.max():  # one choice for the whole chunk: a constant
            self.cols.append(("c", tb[int(idx[0])], w))
        else:
            self.cols.append(("t", (tb, idx), w))

    def num(self, v: np.ndarray, width: int | None = None) -> None:
        """Decimal integers (negative allowed); ``width`` zero-pads to a fixed digit count."""
        v = np.asarray(v, np.int64)
        if width:
            self.cols.append(("z", np.abs(v), width))
        else:
            self._signed(np.abs(v), v < 0)

    def _signed(self, a: np.ndarray, neg: np.ndarray) -> None:
        nd = _digits(a) if self.n else a
        w = (int(nd.max()) if self.n else 1) + bool(neg.any())
        self.cols.append(("n", (a, nd, neg), w))

    def fixed3(self, v: np.ndarray) -> None:
        """Integer ``v`` / 1000 with three decimals: ns written as microseconds."""
        v = np.asarray(v, np.int64)
        a = np.abs(v)
        self._signed(a // 1000, v < 0)  # the sign belongs to the whole number: "-0.005"
        self.const(".")
        self.num(a % 1000, width=3)

    def build(self) -> np.ndarray:
        """The rows as one flat uint8 array (row after row)."""
        width = sum(w for _, _, w in self.cols)
        buf = np.empty((self.n, width), np.uint8)
        if self.n == 0:
            return buf.reshape(-1)
        b = 0
        for kind, data, w in self.cols:
            a, b = b, b + w
            if kind == "c":
                buf[:, a:b] = data
            elif kind == "t":
                tb, idx = data
                rowdt = np.dtype((np.void, w))
                buf[:, a:b] = tb.view(rowdt).reshape(-1)[idx].view(np.uint8).reshape(self.n, w)
            else:
                q = data if kind == "z" else data[0]
                q = q.astype(np.int32 if (len(q) and q.max() < 2**31) else np.int64)
                for k in range(w):
                    d = q // 10
                    r = q - d * 10 + 48
                    if kind == "n" and k:
                        r = np.where(q > 0, r, 32)  # leading spaces, not zeros
                    buf[:, b - 1 - k] = r
                    q = d
                if kind == "n":
                    _, nd, neg = data
                    if neg.any():
                        rows = np.nonzero(neg)[0]
                        buf[rows, b - 1 - nd[rows]] = ord("-")
        return buf.reshape(-1)


def _rows_in_chunks(n: int, make) -> list:
    """Run ``make(lo, hi)`` over row chunks (bounded scratch memory); returns byte arrays."""
    return [make(lo, min(n, lo + _CHUNK)) for lo in range(0, n, _CHUNK)]


# --- trace assembly --------------------------------------------------------------------------


def _json_str(s: str) -> str:
    return json.dumps(s)[1:-1]


def _launch_parts(d: TraceLaunch, pid_base: int, t0_ns: int, merged: bool) -> tuple[list, dict]:
    """Byte chunks of all events of one launch (each line ends with ',\\n'), and its summary."""
    ev = d.events
    shift = d.base_ns - t0_ns  # this launch's time 0 on the file's time axis
    ts = np.round(ev.start_ns).astype(np.int64) + shift
    te = np.round(ev.end_ns).astype(np.int64) + shift
    parts = _region_parts(d, pid_base, ts, te)
    fin, has = _finalize_parts(d, pid_base, shift, ts, te)
    parts += fin
    parts += _name_parts(d, pid_base, merged, has)
    return parts, _launch_summary(d, pid_base, shift)


def _region_parts(d: TraceLaunch, pid_base: int, ts: np.ndarray, te: np.ndarray) -> list:
    """A complete event per region instance (start ``ts``, end ``te``: ns on the file's axis)."""
    meta = d.meta
    ev = d.events
    W = meta.num_warps
    # Region events. Per-scope constant text goes into one table column.
    scopes = sorted(set(meta.scopes) | set(np.unique(ev.scope).tolist()))
    pos = {s: i for i, s in enumerate(scopes)}
    table = []
    for s in scopes:
        name = _json_str(d.scope_name(s))
        loc = meta.scope_locs.get(s)
        loc_part = f',"loc":"{_json_str(loc)}"' if loc else ""
        table.append(f'{{"name":"{name}","ph":"X","args":{{"scope":{s}{loc_part},"cycles":')
    lut = np.zeros(max(scopes) + 1 if scopes else 1, np.int64)
    for s, i in pos.items():
        lut[s] = i
    pid = pid_base + ev.sm
    tid = ev.cta * W + ev.warp + 1
    cycles = ev.cycles
    scope_idx = lut[ev.scope]

    def region_rows(lo: int, hi: int) -> np.ndarray:
        r = _Rows(hi - lo)
        r.choice(scope_idx[lo:hi], table)
        r.num(cycles[lo:hi])
        r.const(',"cta":')
        r.num(ev.cta[lo:hi])
        r.const(',"warp":')
        r.num(ev.warp[lo:hi])
        r.const(',"sm":')
        r.num(ev.sm[lo:hi])
        r.const('},"pid":')
        r.num(pid[lo:hi])
        r.const(',"tid":')
        r.num(tid[lo:hi])
        r.const(',"ts":')
        r.fixed3(ts[lo:hi])
        r.const(',"dur":')
        r.fixed3(te[lo:hi] - ts[lo:hi])
        r.const("},\n")
        return r.build()

    return _rows_in_chunks(len(ev), region_rows)


def _finalize_parts(d: TraceLaunch, pid_base: int, shift: int, ts: np.ndarray, te: np.ndarray
                    ) -> tuple[list, np.ndarray]:
    """A ``finalize`` slice per CTA with regions, and which CTAs have regions."""
    meta = d.meta
    ev = d.events
    W = meta.num_warps
    # Finalize slices: on the thread of the CTA's first profiled warp, after its last region.
    c = d.ctas
    first_warp = meta.segments[0]
    first_start, last_end = cta_spans(c.cta, ev.cta, ts, te)
    has = first_start < np.iinfo(np.int64).max
    init = c.init_ns[has] + shift
    pre = c.prefinal_ns[has] + shift
    fin = c.postfinal_ns[has] - c.prefinal_ns[has]
    f_start = np.maximum(pre, last_end[has])
    f_first = first_start[has]
    f_cta, f_sm = c.cta[has], c.sm[has]

    def fin_rows(lo: int, hi: int) -> np.ndarray:
        sl = slice(lo, hi)
        r = _Rows(hi - lo)
        r.const('{"name":"finalize","ph":"X","args":{"finalize_ns":')
        r.num(fin[sl])
        r.const(',"init_ns":')
        r.num(init[sl])
        r.const(',"first_record_ns":')
        r.num(f_first[sl])
        r.const(',"prefinal_ns":')
        r.num(pre[sl])
        r.const(',"cta":')
        r.num(f_cta[sl])
        r.const(',"sm":')
        r.num(f_sm[sl])
        r.const('},"pid":')
        r.num(pid_base + f_sm[sl])
        r.const(',"tid":')
        r.num(f_cta[sl] * W + first_warp + 1)
        r.const(',"ts":')
        r.fixed3(f_start[sl])
        r.const(',"dur":')
        r.fixed3(fin[sl])
        r.const("},\n")
        return r.build()

    return _rows_in_chunks(int(has.sum()), fin_rows), has


def _name_parts(d: TraceLaunch, pid_base: int, merged: bool, has: np.ndarray) -> list:
    """Names and sort order of the processes (SMs) and threads (CTA x warp) that have events."""
    meta = d.meta
    ev = d.events
    c = d.ctas
    W = meta.num_warps
    sms = np.unique(c.sm[has])
    label = f"{meta.kernel} #{meta.launch} " if merged else ""
    if meta.rank is not None:
        label = f"rank {meta.rank} {label}"
    lines = []
    for s in sms.tolist():
        p = pid_base + s
        lines.append(f'{{"ph":"M","name":"process_name","pid":{p},"args":{{"name":"{_json_str(label)}SM {s}"}}}},\n')
        lines.append(f'{{"ph":"M","name":"process_sort_index","pid":{p},"args":{{"sort_index":{p}}}}},\n')
    parts = ["".join(lines).encode()]
    if len(ev):
        key = np.unique(ev.cta * W + ev.warp)
        cta_t, warp_t = key // W, key % W
        sm_of = dict(zip(c.cta.tolist(), c.sm.tolist(), strict=False))
        sm_t = np.array([sm_of.get(x, 0) for x in cta_t.tolist()], np.int64)

        # Names are JSON strings (no padding allowed inside), so plain Python here; there
        # are only as many threads as CTAs x warps.
        pids = (pid_base + sm_t).tolist()
        tids = (key + 1).tolist()
        names = [
            f'{{"ph":"M","name":"thread_name","pid":{p},"tid":{t},"args":{{"name":"CTA {c} warp {w}"}}}},\n'
            f'{{"ph":"M","name":"thread_sort_index","pid":{p},"tid":{t},"args":{{"sort_index":{t}}}}},\n'
            for p, t, c, w in zip(pids, tids, cta_t.tolist(), warp_t.tolist(), strict=True)
        ]
        parts.append("".join(names).encode())
    return parts


def _launch_summary(d: TraceLaunch, pid_base: int, shift: int) -> dict[str, Any]:
    """What the trace's ``otherData`` keeps of one launch (``report`` rebuilds it from this)."""
    meta = d.meta
    W = meta.num_warps
    ev = d.events
    summary = {
        "kernel": meta.kernel,
        "launch": meta.launch,
        "hash": meta.hash,
        "config": meta.config,
        "grid": list(meta.grid),
        "num_warps": W,
        "device": meta.device,
        "base_globaltimer_ns": d.base_ns,
        "time_zero_ns": shift,
        "pid_base": pid_base,
        "clock": d.clock.summary(),
        "scopes": {str(k): v for k, v in sorted(meta.scopes.items())},
        "scope_parents": {str(k): v for k, v in sorted(meta.scope_parents.items())},
        "scope_locs": {str(k): v for k, v in sorted(meta.scope_locs.items())},
        "events": len(ev),
        "records_written": d.drops.records_written,
        "records_dropped": d.drops.dropped,
        "warps_with_drops": d.drops.warps_with_drops,
        "ctas_with_drops": d.drops.ctas_with_drops,
        "needed_buffer_size": d.drops.needed_buffer_size if d.drops.dropped else None,
        "unmatched_starts": d.unmatched_starts,
        "unmatched_ends": d.unmatched_ends,
        "warnings": d.warnings,
        "issues": [i.to_dict() for i in d.issues],
        "record_cost_cycles": d.record_cost,
        "buffer_size": d.drops.slots_per_warp * 8 * d.drops.segments,
        "sampled_warps": d.meta.sampled_warps,
        "sample_ctas": d.meta.sample_ctas,
        "sample_iterations": d.meta.sample_iterations,
        "loop_scopes": d.meta.loop_scopes,
    }
    if meta.scope_kinds is not None:
        summary["scope_kinds"] = {str(k): v for k, v in sorted(meta.scope_kinds.items())}
    if meta.rank is not None:
        summary["rank"] = meta.rank
    return summary


class TraceFile(TraceSink):
    """One trace written launch by launch, so a run of many launches never sits in memory.

    Events go out as each launch is added (gzip level ``level`` on the fly when ``gz``), into
    a temp file that ``commit`` renames over ``path``; ``abort`` removes it. The launches'
    summaries (``otherData``) follow the events: they are known only once all were added.
    ``t0_ns`` is the globaltimer value of time 0 and must not be later than any launch's
    ``time_zero``. ``path=None`` writes to memory
    (``commit`` then returns the bytes).
    """

    def __init__(self, path: str | os.PathLike | None, t0_ns: int, merged: bool,
                 gz: bool = False, level: int = 1):
        self.t0, self.merged = t0_ns, merged
        self.json_bytes = 0  # uncompressed bytes so far
        self.events = 0
        self._summaries: list[dict[str, Any]] = []
        self._pid_base = 1
        self._held: Any = b""  # the latest event chunk: the last one must lose its comma
        super().__init__(path, gz, level)
        self._write(b'{"displayTimeUnit":"ns","traceEvents":[\n')

    def _write(self, b: Any) -> None:
        self._f.write(b)
        self.json_bytes += len(b)

    def add(self, d: TraceLaunch) -> None:
        """Append one launch's events (its processes after those of the launches before)."""
        if time_zero(d) < self.t0:
            raise ValueError(f"launch {d.meta.label} starts before the trace's time 0")
        parts, summary = _launch_parts(d, self._pid_base, self.t0, self.merged)
        for p in parts:
            if len(p):
                if len(self._held):
                    self._write(self._held)
                self._held = p
        self._summaries.append(summary)
        self.events += len(d.events)
        self._pid_base += (int(d.ctas.sm.max()) if len(d.ctas.sm) else 0) + 1

    def commit(self) -> Any:
        """Finish the file; returns its path (the bytes when written to memory)."""
        last = bytes(self._held)
        self._write(last[:-2] + b"\n" if last.endswith(b",\n") else last)
        other = {"format": TRACE_FORMAT, "version": 1, "launches": self._summaries}
        self._write(b'],"otherData":' + json.dumps(other, separators=(",", ":")).encode() + b"}\n")
        return self._close()


def read_trace(path: str | os.PathLike) -> dict[str, Any]:
    """Load a trace file (plain or gzip, at most ``MAX_TRACE_BYTES`` of JSON) as a dict."""
    fix = "write it again with `proton-inject report RAW --trace DIR`"
    big = "too large to load whole; report the raw launches it was written from instead"
    if read_head(path, 2) == b"\x1f\x8b":
        raw = read_gzip(path, "trace", MAX_TRACE_BYTES, fix, huge_fix=big)
    else:
        raw = read_bytes(path, "trace", MAX_TRACE_BYTES, huge_fix=big)
    return loads_json(raw, path, fix)


def read_trace_launches(path: str | os.PathLike
                        ) -> tuple[list[dict[str, Any]], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """A proton-inject JSON trace as its launches' summaries (``otherData``, checked, by
    process id base) and the columns of its region events and ``finalize`` slices
    (``_trace_columns``); a user error for anything else."""
    try:
        doc = read_trace(path)
    except (OSError, ValueError, EOFError, zlib.error, RecursionError) as e:
        raise UserError(f"{path}: cannot read trace: {e}") from None
    except MemoryError:
        raise UserError(f"{path}: not enough memory to load this trace; report the raw "
                        "launches it came from instead (`proton-inject report RAW`)") from None
    other = doc.get("otherData") if isinstance(doc, dict) else None
    if not isinstance(other, dict) or other.get("format") != TRACE_FORMAT:
        raise UserError(f"{path}: not a proton-inject trace (write it with `report --trace` or `run`)")
    infos = sorted(trace_launches(other, path), key=lambda s: s["pid_base"])
    return (infos, *_trace_columns(doc, path))


# Any number of a trace event (times in us: 1e15 is 31 years; cycles, ids): past it, ns and
# fixed-point sums would overflow.
MAX_TRACE_NUMBER = 1e15


def _trace_columns(doc: dict[str, Any], path: str | os.PathLike) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """A trace's region events and ``finalize`` slices as numeric columns (process id, scope,
    cycles, CTA, warp, SM, start and duration; process id, CTA, SM, init and pre-final)."""
    cols: dict[str, list] = {k: [] for k in ("pid", "scope", "cycles", "cta", "warp", "sm", "ts", "dur")}
    fin: dict[str, list] = {k: [] for k in ("pid", "cta", "sm", "init", "pre")}
    events = doc.get("traceEvents", [])
    for i, ev in enumerate(events if isinstance(events, list) else [None]):
        try:
            if ev.get("ph") != "X":
                continue
            a = ev.get("args", {})
            if ev.get("name") == "finalize" and "finalize_ns" in a:
                for k, v in (("pid", ev["pid"]), ("cta", a["cta"]), ("sm", a["sm"]),
                             ("init", a["init_ns"]), ("pre", a["prefinal_ns"])):
                    fin[k].append(v)
            elif "cycles" in a:
                for k, v in (("pid", ev["pid"]), ("scope", a["scope"]), ("cycles", a["cycles"]),
                             ("cta", a["cta"]), ("warp", a["warp"]), ("sm", a["sm"]),
                             ("ts", ev["ts"]), ("dur", ev["dur"])):
                    cols[k].append(v)
        except (KeyError, TypeError, AttributeError) as e:
            raise trace_event_error(path, i, e) from None
    arr = {k: np.asarray(v) for k, v in cols.items()}
    farr = {k: np.asarray(v) for k, v in fin.items()}
    for k, v in [*arr.items(), *farr.items()]:
        if v.size and v.dtype.kind not in "iuf":
            raise UserError(f"{path}: trace events hold a non-numeric {k!r}; write the trace "
                            "again with `proton-inject report RAW --trace DIR`")
        bad = ~(np.abs(v) <= MAX_TRACE_NUMBER) if v.size else v  # (NaN compares false)
        if bad.any():
            raise UserError(f"{path}: trace events hold {k!r} = {v[bad.argmax()].item()!r}, not a finite "
                            f"number within {MAX_TRACE_NUMBER:g}; write the trace again with "
                            "`proton-inject report RAW --trace DIR`")
    return arr, farr
