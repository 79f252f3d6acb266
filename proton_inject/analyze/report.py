"""The one analysis pipeline (``run_report``), used at the end of a run and by ``report``.

Inputs are raw launches (``traces/raw/`` directories or ``.json``/``.bin`` files written by
``formats.raw.save_raw``) or Chrome traces written by ``trace.write_trace``. Raw launches are
decoded one at a time (``decode.py``, clocks by ``clock.py``), each one's trace (``trace.py``)
and picture (``plot.py``) written, and kept as ``LaunchData``; ``summary.py`` then gives the
numbers per kernel and ``text.py`` the table.
"""

from __future__ import annotations

import json
import os
import re
import time
import warnings
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from proton_inject.analyze import perfetto, source_view
from proton_inject.analyze import trace as trace_mod
from proton_inject.analyze.decode import Decoded, decode
from proton_inject.analyze.issues import DecodeWarning
from proton_inject.analyze.plot import plot_timeline
from proton_inject.analyze.summary import LaunchData, summarize
from proton_inject.analyze.text import format_text
from proton_inject.errors import UserError
from proton_inject.formats import calibration, clock_bracket
from proton_inject.formats import schema as validate
from proton_inject.formats.diagnostics import Issue
from proton_inject.formats.files import check_outputs
from proton_inject.formats.raw import find_raw, is_raw_json, load_raw, read_launch_meta
from proton_inject.formats.schema import read_json

# Long work says how far it got on stderr this often (seconds).
PROGRESS_EVERY_S = 5.0
# A trace file with more JSON than this gets a warning: Perfetto's UI parses it inside the
# browser's memory (~2 GB), and JSON traces past a few hundred MB load slowly or not at all.
TRACE_WARN_BYTES = 500 * 2**20


# --- loading ---------------------------------------------------------------------------------


def expand_inputs(paths: Sequence[str | os.PathLike]) -> tuple[list[Path], list[Path]]:
    """Split user paths into raw launch ``.json`` files and trace files."""
    raws: list[Path] = []
    traces: list[Path] = []
    for p in map(Path, paths):
        if not p.is_file() and not p.is_dir():
            raise validate.not_found(p)
        if p.is_dir():
            found = find_raw(p) or (find_raw(p / "raw") if (p / "raw").is_dir() else [])
            if found:
                raws += found
                continue
            tr = sorted(q for q in p.iterdir() if q.name.endswith((".json", ".json.gz"))
                        and not _is_run_index(q) and not q.name.endswith(AUTOTUNE_FILE))
            if not tr:
                runs = sorted(q for q in p.glob("run*.json") if _is_run_index(q))
                if runs:
                    raise UserError(_empty_run(runs))
                raise UserError(f"{p}: holds neither raw launches (*.json + *.bin) nor traces")
            traces += tr
        elif _is_run_index(p):
            raise UserError(f"{p}: is the run's index; give its directory ({p.parent}) to report")
        elif p.name.endswith((".bin", ".bin.gz")) or (p.suffix == ".json" and is_raw_json(p)):
            raws.append(p)
        elif p.name.endswith((".json", ".json.gz")):
            traces.append(p)
        elif p.name.endswith((perfetto.SUFFIX, perfetto.SUFFIX + ".gz")):
            raise UserError(f"{p}: a native Perfetto trace: open it at ui.perfetto.dev; report "
                            "reads raw launches or JSON traces (--trace-format json)")
        else:
            raise UserError(f"{p}: expected a raw launch (.json/.bin), a trace (.json[.gz]) or a dir")
    return raws, traces


AUTOTUNE_FILE = "autotune.json"  # (rank<R>-)autotune.json: a run's autotuning choices, no trace


def _is_run_index(path: Path) -> bool:
    """Whether ``path`` is the run.json (run.rank<R>.json) that ``run`` writes."""
    if not (path.name.startswith("run") and path.name.endswith(".json")):
        return False
    head = validate.read_head(path, 256)
    return b'"format": "proton-inject-run"' in head or b'"instrumented_dir"' in head


def _empty_run(runs: Sequence[Path]) -> str:
    """Why a run directory holds no launch, from its run.json messages."""
    msgs: list[str] = []
    code = None
    for r in runs:
        try:
            d = read_json(r, "run index", "")
        except UserError:
            continue
        if not isinstance(d, dict):
            continue
        got = d.get("messages")
        msgs += [m for m in got if isinstance(m, str)][:3] if isinstance(got, list) else []
        code = d["exit_code"] if validate.is_int(d.get("exit_code")) else code
    why = "; ".join(msgs) or "no instrumented launch was kept"
    ended = f" (the program exited with code {code})" if code else ""
    return f"{runs[0].parent}: the run kept no launches{ended}: {why}"


def iter_decoded(paths: Sequence[Path], clock_mhz: float | None = None,
                 raw: bool = False, skipped: list[str] | None = None) -> Iterator[Decoded]:
    """Decode raw launches one at a time, in the order given; durations less the calibrated
    record cost (the run's, else this machine's cache for the launch's device) unless ``raw``.
    With ``skipped`` (a list) and several launches, a damaged launch is left out and its
    message appended there; the others are decoded (one bad file never hides a run)."""
    brackets = device_brackets(paths)
    for p in paths:
        try:
            d = _decode_one(p, clock_mhz, raw, brackets)
        except UserError as e:
            if skipped is None or len(paths) < 2:
                raise
            skipped.append(f"left out: {e}")
            continue
        yield d


def _decode_one(p: Path, clock_mhz: float | None, raw: bool,
                brackets: dict[tuple[int | None, str | None], tuple[float, int]]) -> Decoded:
    """One raw launch read, its record cost found, decoded."""
    buf, meta = load_raw(p)
    cost = 0.0 if raw else meta.record_cost_cycles
    if cost is None:
        cost = calibration.lookup(meta.device, meta.clock_bits, meta.buffer_type,
                                  selective=bool(meta.sampled_warps))
    try:
        d = decode(buf, meta, clock_mhz=clock_mhz, record_cost=cost,
                   device_bracket=brackets.get((meta.rank, meta.device)))
    except MemoryError:
        raise UserError(f"{p}: not enough memory to decode this launch ({len(buf):,} bytes "
                        "of buffer); free some memory, or report it on a machine with "
                        "more") from None
    del buf
    return d


def device_brackets(paths: Sequence[Path]) -> dict[tuple[int | None, str | None], tuple[float, int]]:
    """Per (rank, device): the median rate the clock brackets of these launches measured, and
    how many had one. A CUDA-graph replay gets no bracket (a bracket kernel would join the
    program's graph), so its clock comes from these when its own timer reads cannot fit it."""
    rates: dict[tuple[int | None, str | None], list[float]] = {}
    for p in paths:
        try:
            meta = read_launch_meta(p)
        except UserError:
            continue  # decoding it says what is wrong
        r = clock_bracket.rate(meta.clock_bracket)
        if r is not None:
            rates.setdefault((meta.rank, meta.device), []).append(r.mhz)
    return {k: (float(np.median(v)), len(v)) for k, v in rates.items()}


def decode_raw(paths: Sequence[Path], clock_mhz: float | None = None, raw: bool = False) -> list[Decoded]:
    """All of ``iter_decoded``, in launch order (holds every launch: for a few)."""
    return sorted(iter_decoded(paths, clock_mhz, raw), key=lambda d: d.meta.launch)


def parse_launches(spec: str) -> list[tuple[int, int]]:
    """``--launches`` ranges: "0-99,250,400-" -> [(0, 99), (250, 250), (400, max)]."""
    out = []
    for part in spec.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:(-)\s*(\d*)\s*)?", part)
        if not m:
            raise UserError(f"--launches {spec!r}: {part.strip()!r} is not a launch number or a "
                            "range; give e.g. --launches 0-99,250,400- (launch numbers of the run)")
        lo = int(m.group(1))
        hi = (int(m.group(3)) if m.group(3) else 2**62) if m.group(2) else lo
        if hi < lo:
            raise UserError(f"--launches {spec!r}: range {part.strip()} ends before it starts")
        out.append((lo, hi))
    return out


def _raw_launch(path: Path) -> int:
    """The launch number in a raw launch's metadata (load_raw reports what is wrong with it)."""
    try:
        n = read_json(path.with_name(re.sub(r"\.bin(\.gz)?$", ".json", path.name)),
                      "launch metadata", "", validate.MAX_META_BYTES).get("launch", 0)
    except (UserError, AttributeError):
        return 0
    return n if validate.is_int(n) else 0


class Progress:
    """A line for ``say`` (stderr) every PROGRESS_EVERY_S seconds while ``total`` launches are
    worked on, and one at the end if any was said; call it with the number done so far."""

    def __init__(self, total: int, say: Callable[[str], None] | None, verb: str = "decoded"):
        self.total, self.say, self.verb = total, say, verb
        self.t0 = self.last = time.monotonic()
        self.said = False

    def __call__(self, done: int) -> None:
        now = time.monotonic()
        if self.say is None or not 0 < done < self.total or now - self.last < PROGRESS_EVERY_S:
            return
        self.last, self.said = now, True
        left = (self.total - done) * (now - self.t0) / max(done, 1)
        self.say(f"{self.verb} {done:,} of {self.total:,} launches ({now - self.t0:,.0f} s, "
                 f"about {left:,.0f} s to go)")

    def end(self) -> None:
        if self.said and self.say is not None:
            self.say(f"{self.verb} {self.total:,} launches in {time.monotonic() - self.t0:,.0f} s")


def launches_from_trace(path: Path, clock_mhz: float | None = None) -> list[LaunchData]:
    """Rebuild LaunchData from a trace written by ``trace.write_trace``."""
    try:
        doc = trace_mod.read_trace(path)
    except (OSError, ValueError, EOFError, zlib.error, RecursionError) as e:
        raise UserError(f"{path}: cannot read trace: {e}") from None
    except MemoryError:
        raise UserError(f"{path}: not enough memory to load this trace; report the raw "
                        "launches it came from instead (`proton-inject report RAW`)") from None
    other = doc.get("otherData") if isinstance(doc, dict) else None
    if not isinstance(other, dict) or other.get("format") != trace_mod.TRACE_FORMAT:
        raise UserError(f"{path}: not a proton-inject trace (write it with `report --trace` or `run`)")
    infos = sorted(validate.trace_launches(other, path), key=lambda s: s["pid_base"])
    bases = np.array([s["pid_base"] for s in infos])
    arr, farr = _trace_columns(doc, path)
    which = np.searchsorted(bases, arr["pid"], side="right") - 1 if len(arr["pid"]) else arr["pid"]
    fwhich = np.searchsorted(bases, farr["pid"], side="right") - 1 if len(farr["pid"]) else farr["pid"]
    out = []
    for i, s in enumerate(infos):
        m = which == i
        fm = fwhich == i
        cycles = arr["cycles"][m].astype(np.int64) if m.any() else np.zeros(0, np.int64)
        clock = dict(s["clock"])
        if clock_mhz:
            dur = cycles * 1000.0 / clock_mhz
            clock.update(source="--clock-mhz", mhz_median=clock_mhz, mhz_min=clock_mhz,
                         mhz_max=clock_mhz, reason=None,
                         uncertainty_pct=None)
        else:
            dur = np.round(arr["dur"][m] * 1000.0) if m.any() else np.zeros(0)
        out.append(LaunchData(
            kernel=s["kernel"], launch=s["launch"], config=s.get("config"), grid=s["grid"],
            num_warps=s["num_warps"], scopes={int(k): v for k, v in s["scopes"].items()},
            scope_parents={int(k): int(v) for k, v in s["scope_parents"].items()},
            scope_locs={int(k): v for k, v in s.get("scope_locs", {}).items()},
            clock=clock, scope=arr["scope"][m].astype(np.int64), cycles=cycles,
            dur_ns=np.asarray(dur, np.float64),
            start_ns=np.round(arr["ts"][m] * 1000.0) if m.any() else np.zeros(0),
            cta=arr["cta"][m].astype(np.int64) if m.any() else np.zeros(0, np.int64),
            warp=arr["warp"][m].astype(np.int64) if m.any() else np.zeros(0, np.int64),
            sm=arr["sm"][m].astype(np.int64) if m.any() else np.zeros(0, np.int64),
            cta_ids=farr["cta"][fm].astype(np.int64) if fm.any() else np.zeros(0, np.int64),
            cta_sm=farr["sm"][fm].astype(np.int64) if fm.any() else np.zeros(0, np.int64),
            cta_init_ns=farr["init"][fm].astype(np.float64) if fm.any() else np.zeros(0),
            cta_prefinal_ns=farr["pre"][fm].astype(np.float64) if fm.any() else np.zeros(0),
            sampled_warps=s.get("sampled_warps") if isinstance(s.get("sampled_warps"), list) else None,
            sample_ctas=s["sample_ctas"] if validate.is_int(s.get("sample_ctas")) else 1,
            sample_iterations=(s["sample_iterations"] if validate.is_int(s.get("sample_iterations"))
                               else 1),
            loop_scopes=_loop_scopes(s.get("loop_scopes")),
            drops={
                "records_written": s.get("records_written", 0),
                "records_dropped": s.get("records_dropped", 0),
                "warps_with_drops": s.get("warps_with_drops", 0),
                "ctas_with_drops": s.get("ctas_with_drops", 0),
                "needed_buffer_size": s.get("needed_buffer_size"),
                "buffer_size": s["buffer_size"] if validate.is_int(s.get("buffer_size")) else None,
                "unmatched_starts": s.get("unmatched_starts", 0),
                "unmatched_ends": s.get("unmatched_ends", 0),
            },
            issues=[Issue.from_json(v) for v in s.get("issues", s.get("warnings", []))],
            device=s.get("device"), rank=s.get("rank"),
            record_cost=s.get("record_cost_cycles"),
        ))
    return out


def _trace_columns(doc: dict[str, Any], path: Path) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
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
            raise validate.trace_event_error(path, i, e) from None
    arr = {k: np.asarray(v) for k, v in cols.items()}
    farr = {k: np.asarray(v) for k, v in fin.items()}
    for k, v in [*arr.items(), *farr.items()]:
        if v.size and v.dtype.kind not in "iuf":
            raise UserError(f"{path}: trace events hold a non-numeric {k!r}; write the trace "
                            "again with `proton-inject report RAW --trace DIR`")
    return arr, farr


def _loop_scopes(v: Any) -> list[list[int]]:
    """A trace's ``loop_scopes``, or none where it is missing or malformed (older traces)."""
    ok = isinstance(v, list) and all(isinstance(g, list) and all(map(validate.is_int, g)) for g in v)
    return v if ok else []


# --- the command -----------------------------------------------------------------------------


@dataclass
class ReportResult:
    """What ``report`` produced: text for stdout, warnings for stderr, files written."""

    text: str
    warnings: list[str]  # one line per kernel and cause
    files: list[Path]
    summary: dict[str, Any]
    details: list[str] = field(default_factory=list)  # the same, per launch (--verbose)


def run_report(inputs: Sequence[str | os.PathLike], plot: str | os.PathLike | None = None,
               as_json: bool = False, clock_mhz: float | None = None,
               trace_dir: str | os.PathLike | None = None, merge: bool = False,
               gz: bool = False, raw: bool = False, launches: str | None = None,
               progress: Callable[[str], None] | None = None,
               trace_format: str = "perfetto", source: bool = False,
               source_root: str | os.PathLike | None = None) -> ReportResult:
    """Load raw launches or traces, summarize, and optionally plot and write traces
    (``trace_format`` "perfetto": native ``.pftrace``; "json": Chrome JSON). ``source``: each
    kernel's source lines with the regions covering them (``source_view.py``; relative source
    paths under ``source_root``).

    Raw launches are decoded one at a time: each one's trace and plot are written and what the
    summary needs is kept, so memory does not hold whole launches. ``launches`` keeps only
    the launches whose numbers it names ("0-99,250"); ``progress`` receives a line every
    ``PROGRESS_EVERY_S`` seconds of decoding."""
    validate.report_options(clock_mhz, trace_dir, merge, gz, plot)
    writer, ext = perfetto.trace_writer(trace_format, gz)
    if plot is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError as e:
            raise UserError("--plot needs matplotlib, which is not installed: "
                            "pip install 'proton-inject[plot]' (or pip install matplotlib)") from e
    wanted = parse_launches(launches) if launches is not None else None
    raws, traces = expand_inputs(inputs)
    check_outputs([("input", p) for p in raws + traces],
                  [(o, p, k) for o, p, k in (("--trace", trace_dir, "dir"), ("--plot", plot, "file"))
                   if p is not None])
    if wanted is not None or (merge and len(raws) > 1):
        numbered = sorted(((_raw_launch(p), p) for p in raws), key=lambda t: t[0])
        raws = [p for n, p in numbered if wanted is None or any(lo <= n <= hi for lo, hi in wanted)]
    from_traces = [x for t in traces for x in launches_from_trace(t, clock_mhz)
                   if wanted is None or any(lo <= x.launch <= hi for lo, hi in wanted)]
    if not raws and not from_traces:
        raise UserError(f"no launches numbered {launches} in the inputs" if wanted is not None
                        else "no launches found in the inputs")
    if trace_dir is not None and not raws:
        raise UserError("--trace needs raw launches as input (traces are already traces)")
    n_all = len(raws) + len(from_traces)
    plots: list[Path] = []

    def draw(x: LaunchData) -> None:
        if plot is not None:
            p = Path(plot)
            plots.append(plot_timeline(x, p if n_all == 1 else p.with_name(
                f"{p.stem}.{x.launch:05d}-{x.kernel}{p.suffix}")))

    skipped: list[str] = []
    kept, traced = _decode_all(raws, clock_mhz, raw, trace_dir, merge, gz, draw, progress, writer, ext,
                               skipped)
    if raws and not kept and skipped:  # nothing decoded: the first reason is the error
        raise UserError(skipped[0].removeprefix("left out: "))
    for x in sorted(from_traces, key=lambda x: x.launch):
        draw(x)
    launches_data = kept + from_traces
    summary = summarize(launches_data)
    if source:  # the source view: its own module, over the summary and the raw launches
        source_view.attach(summary, raws, source_root)
    text = json.dumps(summary, indent=1) if as_json else format_text(summary)
    if source and not as_json:
        text += "\n\n" + source_view.format_source(summary)
    warn = [w for k in summary["kernels"] for w in k["warnings"]]
    warn += [_big_trace(p, b, n, merge) for p, b, n in traced if b > TRACE_WARN_BYTES]
    warn += skipped
    details = [i.detail for x in sorted(launches_data, key=lambda x: x.launch) for i in x.issues]
    files = [p for p, _, _ in traced] + sorted(plots)
    return ReportResult(text=text, warnings=warn, files=files, summary=summary, details=details)


def _decode_all(raws: Sequence[Path], clock_mhz: float | None, raw: bool,
                trace_dir: str | os.PathLike | None, merge: bool, gz: bool,
                draw: Callable[[LaunchData], None], progress: Callable[[str], None] | None,
                writer: Callable[..., Any] = trace_mod.TraceFile, ext: str = ".json",
                skipped: list[str] | None = None,
                ) -> tuple[list[LaunchData], list[tuple[Path, int, int]]]:
    """Decode the raw launches one at a time: write each one's trace (or add it to the merged
    trace), ``draw`` it, and keep what the summary needs. Returns the kept launches and, per
    trace file written, its path, JSON bytes and events."""
    kept: list[LaunchData] = []
    traced: list[tuple[Path, int, int]] = []  # trace file, JSON bytes, events
    merged = merged_path = None
    if trace_dir is not None and merge:
        merged_path = Path(trace_dir) / f"merged{ext}"
    redo = False  # a launch started before the merged file's time 0: write it again
    t_min = None
    tick = Progress(len(raws), progress)
    try:
        with warnings.catch_warnings():  # said once per kernel and cause below instead
            warnings.simplefilter("ignore", DecodeWarning)
            for i, d in enumerate(iter_decoded(raws, clock_mhz, raw, skipped)):
                if merged_path is not None:
                    t = trace_mod.time_zero(d)
                    t_min = t if t_min is None else min(t_min, t)
                    if merged is None:
                        merged = writer(merged_path, t, len(raws) > 1, gz)
                    redo |= t < merged.t0
                    if not redo:
                        merged.add(d)
                elif trace_dir is not None:
                    w = writer(Path(trace_dir) / f"{d.meta.label}{ext}",
                               trace_mod.time_zero(d), False, gz)
                    try:
                        w.add(d)
                        traced.append((w.commit(), w.json_bytes, w.events))
                    except BaseException:
                        w.abort()  # (no temp file left behind)
                        raise
                x = LaunchData.from_decoded(d)
                del d
                draw(x)
                kept.append(x.slim())
                tick(i + 1)
        tick.end()
        if redo:  # rare (several streams or ranks): a second pass from the earliest launch
            merged.abort()
            merged = writer(merged_path, t_min, len(raws) > 1, gz)
            again = Progress(len(raws), progress, "wrote the merged trace of")
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DecodeWarning)
                for i, d in enumerate(iter_decoded(raws, clock_mhz, raw, [])):
                    merged.add(d)
                    again(i + 1)
            again.end()
        if merged is not None:
            traced.append((merged.commit(), merged.json_bytes, merged.events))
            merged = None
    finally:
        if merged is not None:
            merged.abort()
    return kept, traced


def _big_trace(path: Path, size: int, events: int, merged: bool) -> str:
    """What to do about a trace too big for Perfetto's UI."""
    fix = ("select launches with --launches (e.g. --launches 0-99) or drop --merge (a file per "
           "launch)" if merged else "record fewer warps (--warps 0) or regions")
    return (f"{path}: {size / 2**20:,.0f} MiB of JSON ({events:,} regions), more than Perfetto's "
            f"UI handles well (it parses traces in the browser's memory, ~2 GB): {fix}, or open "
            "it with `trace_processor --httpd FILE` and ui.perfetto.dev "
            "(perfetto.dev/docs/visualization/large-traces)")
