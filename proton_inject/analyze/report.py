"""The one analysis pipeline (``run_report``), used at the end of a run and by ``report``.

Inputs are raw launches (``traces/raw/`` directories or ``.json``/``.bin`` files written by
``formats.raw.save_raw``) or JSON traces (``formats/trace_json.py``). Raw launches are
decoded by a pool of worker processes (``-j``; in this process with one), each launch once
(``decode.py``, clocks by ``clock.py``): the worker writes its trace (a writer of
``formats/traces.py``) and picture (``plot.py``) and sends back what the summary needs of it
(``summary.launch_part``: no region instances), in launch order, a few launches ahead at
most, so memory does not grow with the launches; ``summary.Summary`` merges them and
``text.py`` gives the table. A merged trace is written here, as launches come back; the
HTML page (``html.py``) last, from the summary.
"""

from __future__ import annotations

import json
import os
import re
import sys
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from proton_inject.analyze import bracket_rate, hot_kernels, launch_origins, source_view
from proton_inject.analyze import html as page
from proton_inject.analyze.clock_sources import Clock, given_rate
from proton_inject.analyze.decode import Decoded, decode
from proton_inject.analyze.issues import DecodeWarning
from proton_inject.analyze.plot import need_matplotlib, picture_path, plot_timeline
from proton_inject.analyze.pool import Workers, capped_jobs, default_jobs
from proton_inject.analyze.summary import LaunchData, Summary, launch_part
from proton_inject.analyze.text import format_text
from proton_inject.analyze.uncertainty import add_perturbation
from proton_inject.errors import UserError
from proton_inject.formats import auto_report, calibration, run_index, trace_json
from proton_inject.formats import schema as validate
from proton_inject.formats.diagnostics import Issue
from proton_inject.formats.files import check_outputs, output_locks
from proton_inject.formats.raw import find_raw, is_raw_json, load_raw, read_launch_meta, refuse_same_labels, unify_locs
from proton_inject.formats.trace_writer import time_zero
from proton_inject.formats.traces import TRACE_FORMATS, trace_writer

# Launches per task at most: a worker merges their summary parts itself, so the report's own
# process merges one summary per task (it would else be the bottleneck past a few workers:
# ~0.2-2 ms a launch against ~10 ms to decode a small one). A merged trace takes 1 a task
# (its decoded launches come back whole).
CHUNK = 16
# A trace file with more JSON than this gets a warning: Perfetto's UI parses it inside the
# browser's memory (~2 GB), and JSON traces past a few hundred MB load slowly or not at all.
TRACE_WARN_BYTES = 500 * 2**20
_PERFETTO = TRACE_FORMATS["perfetto"].suffix  # a native trace: for its viewer, not for report


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
                        and not _is_run_index(q) and not q.name.endswith(AUTOTUNE_FILE)
                        and q.name not in (auto_report.AUTO_FILE, auto_report.DEVICE_FILE))
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
        elif p.name.endswith((_PERFETTO, _PERFETTO + ".gz")):
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
    for d in run_index.read_indexes(runs):
        got = d.get("messages")
        msgs += [m for m in got if isinstance(m, str)][:3] if isinstance(got, list) else []
        code = d["exit_code"] if validate.is_int(d.get("exit_code")) else code
    why = "; ".join(msgs) or "no instrumented launch was kept"
    ended = f" (the program exited with code {code})" if code else ""
    return f"{runs[0].parent}: the run kept no launches{ended}: {why}"


def iter_decoded(paths: Sequence[Path], clock_mhz: float | None = None,
                 raw: bool = False, skipped: list[str] | None = None) -> Iterator[Decoded]:
    """Decode raw launches one at a time in this process, in the order given; durations less
    the calibrated record cost (the run's, else this machine's cache for the launch's device)
    unless ``raw``. With ``skipped`` (a list) and several launches, a damaged launch is left
    out and its message appended there; the others are decoded (one bad file never hides a
    run)."""
    brackets = device_brackets([_facts(p) for p in paths])
    for p in paths:
        try:
            d = _decode_one(p, (Clock.CLOCK_MHZ, clock_mhz) if clock_mhz else None, raw, brackets)
        except UserError as e:
            if skipped is None or len(paths) < 2:
                raise
            skipped.append(f"left out: {e}")
            continue
        yield d


def _decode_one(p: str | Path, clock: tuple[str, Any] | None, raw: bool,
                brackets: dict[tuple[int | None, str | None], tuple[float, int]]) -> Decoded:
    """One raw launch read, its record cost found, decoded."""
    buf, meta = load_raw(p)
    cost = 0.0 if raw else meta.record_cost_cycles
    if cost is None:
        cost = calibration.lookup(meta.device, meta.clock_bits, meta.buffer_type,
                                  selective=bool(meta.sampled_warps))
    try:
        d = decode(buf, meta, clock=clock, record_cost=cost,
                   device_bracket=brackets.get((meta.rank, meta.device)))
    except MemoryError:
        raise UserError(f"{p}: not enough memory to decode this launch ({len(buf):,} bytes "
                        "of buffer); free some memory, or report it on a machine with "
                        "more") from None
    del buf
    return d


# launch, rank, device, bracket MHz, kernel, the program's frame that launched it, config
Facts = tuple[int, int | None, str | None, float | None, str, str | None, str | None, dict[str, Any] | None]


def _facts(p: str | Path) -> Facts | None:
    """What the report needs of a launch before decoding any: its number (to select and
    order launches) and its clock bracket's rate (``device_brackets``). None where its
    metadata cannot be read (decoding it says what is wrong)."""
    try:
        meta = read_launch_meta(p)
    except UserError:
        return None
    r = bracket_rate.rate(meta.clock_bracket)
    return (meta.launch, meta.rank, meta.device, None if r is None else r.mhz, meta.kernel, meta.launched_from,
            meta.config, meta.model_source)


def _origins(facts: Sequence[Facts | None]) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, list[str]]]]:
    """Who launched each kernel (``launch_origins.by_kernel``) and, for those Inductor
    generated, the model's source (``launch_origins.model_sources``)."""
    known = [f for f in facts if f is not None]
    return launch_origins.by_kernel(f[4:6] for f in known), launch_origins.model_sources((f[4], f[7]) for f in known)


def device_brackets(facts: Sequence[Facts | None]) -> dict[tuple[int | None, str | None], tuple[float, int]]:
    """Per (rank, device): the median rate the clock brackets of these launches measured, and
    how many had one. A CUDA-graph replay gets no bracket (a bracket kernel would join the
    program's graph), so its clock comes from these when its own timer reads cannot fit it."""
    rates: dict[tuple[int | None, str | None], list[float]] = {}
    for f in facts:
        if f is not None and f[3] is not None:
            rates.setdefault((f[1], f[2]), []).append(f[3])
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


def progress_bar(total: int, what: str, show: bool) -> tqdm:
    """A progress bar on stderr when ``show`` and stderr is a terminal; nothing otherwise
    (a pipe or a file gets no bar lines)."""
    return tqdm(total=total, desc=what, unit="launch", file=sys.stderr, leave=False,
                disable=None if show else True, dynamic_ncols=True)


def launches_from_trace(path: Path, clock: tuple[str, Any] | None = None) -> list[LaunchData]:
    """Rebuild LaunchData from a JSON trace (``formats/trace_json.py``); ``clock``: a clock
    source the user chose and its value (``clock_sources.py``), used instead of the trace's
    where it gives a rate (the trace keeps no device max clock)."""
    infos, arr, farr = trace_json.read_trace_launches(path)
    bases = np.array([s["pid_base"] for s in infos])
    which = np.searchsorted(bases, arr["pid"], side="right") - 1 if len(arr["pid"]) else arr["pid"]
    fwhich = np.searchsorted(bases, farr["pid"], side="right") - 1 if len(farr["pid"]) else farr["pid"]
    out = []
    for i, s in enumerate(infos):
        m = which == i
        fm = fwhich == i
        cycles = arr["cycles"][m].astype(np.int64) if m.any() else np.zeros(0, np.int64)
        fit = dict(s["clock"])
        given = given_rate(clock, None)
        if given:
            source, mhz = given
            dur = cycles * 1000.0 / mhz
            fit.update(source=source, mhz_median=mhz, mhz_min=mhz, mhz_max=mhz, reason=None,
                       uncertainty_pct=None)
        else:
            dur = np.round(arr["dur"][m] * 1000.0) if m.any() else np.zeros(0)
        out.append(LaunchData(
            kernel=s["kernel"], launch=s["launch"], config=s.get("config"), grid=s["grid"],
            num_warps=s["num_warps"], scopes={int(k): v for k, v in s["scopes"].items()},
            scope_parents={int(k): int(v) for k, v in s["scope_parents"].items()},
            scope_locs=unify_locs({int(k): v for k, v in s.get("scope_locs", {}).items()}),
            clock=fit, scope=arr["scope"][m].astype(np.int64), cycles=cycles,
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
            scope_kinds=({int(k): str(v) for k, v in s["scope_kinds"].items()}
                         if isinstance(s.get("scope_kinds"), dict) else None),
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
    details: list[str] = field(default_factory=list)  # the same, per launch (verbose only)


def run_report(inputs: Sequence[str | os.PathLike], plot: str | os.PathLike | None = None,
               as_json: bool = False, clock_mhz: float | None = None,
               trace_dir: str | os.PathLike | None = None, merge: bool = False,
               gz: bool | None = None, raw: bool = False, launches: str | None = None,
               progress: bool = False, trace_format: str = "perfetto", source: bool = False,
               source_root: str | os.PathLike | None = None, jobs: int | None = None,
               verbose: bool = False, clock: tuple[str, Any] | None = None,
               html: str | os.PathLike | None = None) -> ReportResult:
    """Load raw launches or traces, summarize, and optionally plot and write traces
    (``trace_format``: a name of ``formats/traces.py``). ``clock``: a clock source the user
    chose and its option's value (``clock_sources.py``; ``clock_mhz`` N is
    ``("--clock-mhz", N)``), used instead of the fit and the bracket. ``source``: each
    kernel's source lines with the regions covering them (``source_view.py``; relative source
    paths under ``source_root``); ``html``: write them all as one page (``html.py``) there.

    Raw launches are decoded by ``jobs`` worker processes (None: one per core; 1: in this
    process), each launch once: its trace and plot are written there and only its summary part
    comes back, so memory does not hold whole launches. ``launches`` keeps only the launches
    whose numbers it names ("0-99,250"); ``progress``: a bar on stderr when it is a terminal;
    ``verbose``: the notes whole and each launch's issues in ``details``."""
    validate.report_options(clock_mhz, trace_dir, merge, gz, plot, html)
    if clock_mhz:
        clock = (Clock.CLOCK_MHZ, clock_mhz)
    gz = gz is not False  # traces are gzipped unless asked not to, as raw buffers are
    writer, ext = trace_writer(trace_format, gz)
    jobs, capped = _check_jobs_and_plot(jobs, plot)
    wanted = parse_launches(launches) if launches is not None else None
    paths, traces = expand_inputs(inputs)
    outs = (("--trace", trace_dir, "dir"), ("--plot", plot, "files"), ("--html", html, "file"))
    check_outputs([("input", p) for p in paths + traces], [o for o in outs if o[1] is not None])
    # kept as strings: a Path is ~540 bytes (with its parts), 5 MiB over 10^4 launches
    raws = [os.fspath(p) for p in paths]
    del paths
    from_traces = [x for t in traces for x in launches_from_trace(t, clock)
                   if wanted is None or any(lo <= x.launch <= hi for lo, hi in wanted)]
    # Outputs held against other processes (formats/files.output_lock) until they are written.
    with Workers(min(jobs or default_jobs(), max(1, len(raws)))) as workers, \
            output_locks(("--trace", trace_dir), ("--plot", plot), ("--html", html)):
        # Each launch's metadata is read once before decoding: to select and order launches
        # and for the clock brackets of its device (``device_brackets``).
        facts = workers.map(_facts, raws)
        if wanted is not None or (merge and len(raws) > 1):
            numbered = sorted(zip(raws, facts, strict=True), key=lambda pf: pf[1][0] if pf[1] else 0)
            numbered = [(p, f) for p, f in numbered if wanted is None
                        or any(lo <= (f[0] if f else 0) <= hi for lo, hi in wanted)]
            raws, facts = [p for p, _ in numbered], [f for _, f in numbered]
        if not raws and not from_traces:
            raise UserError(f"no launches numbered {launches} in the inputs" if wanted is not None
                            else "no launches found in the inputs")
        if trace_dir is not None and not raws:
            raise UserError("--trace needs raw launches as input (traces are already traces)")
        refuse_same_labels(raws, [f and (f[0], f[1], f[4]) for f in facts], None if merge else trace_dir, plot)
        job = _Job(clock, raw, device_brackets(facts), None if trace_dir is None else Path(trace_dir),
                   merge, writer, ext, gz, None if plot is None else Path(plot),
                   raws[0] if raws else None)
        origins, sources = _origins(facts)
        pictures = _pictures(raws, facts, job, workers) if html is not None else []
        del facts
        got = _decode_all(raws, job, workers, progress, verbose)
    if raws and not got.summary.kernels and got.skipped:  # nothing decoded: the first reason is the error
        raise UserError(got.skipped[0].removeprefix("left out: "))
    for i, x in enumerate(sorted(from_traces, key=lambda x: x.launch)):
        if plot is not None:
            first = i == 0 and not raws
            got.plots.append(plot_timeline(x, picture_path(job.plot, x, first)))
        got.summary.add(launch_part(x))
        if verbose:
            got.details += [(x.launch, i.detail) for i in x.issues]
    summary = launch_origins.attach(got.summary.result(), origins, raws, sources)
    _add_measured_perturbation(summary, raws)
    if source or html is not None:  # the source view: its own module, over the summary and raws
        source_view.attach(summary, raws, source_root)
    warn = [w for k in summary["kernels"] for w in k["warnings"]] + hot_kernels.attach_auto(summary, inputs)
    warn += [_big_trace(p, b, n, merge) for p, b, n in got.traced if b > TRACE_WARN_BYTES]
    warn += got.skipped + capped
    got.plots += [_page(html, summary, pictures, from_traces, warn, inputs, source)] if html is not None else []
    text = json.dumps(summary, indent=1) if as_json else _text(summary, verbose, source)
    details = [d for _, d in sorted(got.details, key=lambda ld: ld[0])]
    files = [p for p, _, _ in got.traced] + sorted(got.plots)
    return ReportResult(text=text, warnings=warn, files=files, summary=summary, details=details)


def _text(summary: dict[str, Any], verbose: bool, source: bool) -> str:
    """The report as text: the ranking of ``profile --auto`` where it ran, the tables, who
    launched the kernels, the source view if asked."""
    text = hot_kernels.format_auto(summary["auto"]) + "\n\n" if "auto" in summary else ""
    text += format_text(summary, verbose)
    text += launch_origins.format_launches(summary)
    return text + ("\n\n" + source_view.format_source(summary) if source else "")


def _check_jobs_and_plot(jobs: int | None, plot: Any) -> tuple[int | None, list[str]]:
    """``-j`` is a count of processes, at most one per core (and a note if more: ``capped_jobs``);
    ``--plot`` needs matplotlib."""
    if jobs is not None and jobs < 1:
        raise UserError(f"-j {jobs}: give the number of decoding processes, 1 or more")
    if plot is not None:
        need_matplotlib("--plot")
    return capped_jobs(jobs)


def _pictures(raws: Sequence[str], facts: Sequence[Facts | None], job: _Job, workers: Workers
              ) -> list[page.Picture]:
    """The page's picture of each kernel's first raw launch, drawn in the workers."""
    decode = partial(_decode_one, clock=job.clock, raw=job.raw, brackets=job.brackets)
    firsts = page.first_launches(raws, facts)
    return [p for p in workers.map(partial(page.picture_of, decode), firsts) if p is not None]


def _page(path: str | os.PathLike, summary: dict[str, Any], pictures: list[page.Picture],
          from_traces: Sequence[LaunchData], notices: Sequence[str], inputs: Sequence[str | os.PathLike],
          source: bool) -> Path:
    """Write the page (the first launch of each kernel read from a trace gets its picture
    here); the summary keeps the source view only when ``source`` asked for it."""
    have = {(p.kernel, p.config) for p in pictures}
    for x in sorted(from_traces, key=lambda x: x.launch):
        if (x.kernel, x.config) not in have:
            have.add((x.kernel, x.config))
            pictures.append(page.picture(x))
    out = page.write_page(path, summary, pictures, notices, [os.fspath(i) for i in inputs])
    for k in summary["kernels"] if not source else []:
        del k["source"]
    return out


def _add_measured_perturbation(summary: dict[str, Any], raws: Sequence[str]) -> None:
    """Widen the error bars of the kernels ``--measure-overhead`` measured (their runs' index)."""
    measured = run_index.measured_overheads(run_index.index_files_of(raws))
    for k in summary["kernels"]:
        add_perturbation(k, run_index.perturbation_for(measured, k["kernel"], k["config"]))


@dataclass(frozen=True)
class _Job:
    """What a worker does with each launch (sent with every task: a few hundred bytes)."""

    clock: tuple[str, Any] | None  # a clock source the user chose, and its value
    raw: bool
    brackets: dict[tuple[int | None, str | None], tuple[float, int]]
    trace_dir: Path | None
    merge: bool  # the trace is one file written by the report: send the decoded launch back
    writer: Any
    ext: str
    gz: bool
    plot: Path | None
    first: str | None  # the report's first raw launch (its plot is ``plot`` itself)
    again: bool = False  # the merged trace's second pass: decode only


@dataclass
class _Done:
    """One launch as a worker leaves it."""

    error: str | None = None
    details: list[tuple[int, str]] = field(default_factory=list)  # launch, issue
    traced: tuple[Path, int, int] | None = None  # trace file, JSON bytes, events
    plot: Path | None = None
    decoded: Decoded | None = None  # for the merged trace


def _work(job: _Job, path: str, summary: Summary) -> _Done:
    """Decode one launch, write its trace and plot, and add its part to ``summary``."""
    with warnings.catch_warnings():  # the report says them once per kernel and cause
        warnings.simplefilter("ignore", DecodeWarning)
        try:
            d = _decode_one(path, job.clock, job.raw, job.brackets)
        except UserError as e:
            return _Done(error=str(e))
    if job.again:
        return _Done(decoded=d)
    out = _Done(decoded=d if job.merge else None)
    if job.trace_dir is not None and not job.merge:
        w = job.writer(job.trace_dir / f"{d.meta.label}{job.ext}", time_zero(d), False, job.gz)
        try:
            w.add(d)
            out.traced = (w.commit(), w.json_bytes, w.events)
        except BaseException:
            w.abort()  # (no temp file left behind)
            raise
    x = LaunchData.from_decoded(d)
    del d
    if job.plot is not None:
        out.plot = plot_timeline(x, picture_path(job.plot, x, path == job.first))
    out.details = [(x.launch, i.detail) for i in x.issues]
    summary.add(launch_part(x))
    return out


def _work_chunk(job: _Job, paths: Sequence[str]) -> tuple[list[_Done], Summary]:
    """``_work`` of some consecutive launches (in a worker): one summary for them all."""
    summary = Summary()
    return [_work(job, p, summary) for p in paths], summary


def _results(job: _Job, paths: Sequence[str], workers: Workers, summary: Summary) -> Iterator[_Done]:
    """``_work`` of each launch, in order, their parts added to ``summary``: in the workers,
    in chunks of consecutive launches (one summary each, merged here)."""
    if workers.in_process:
        yield from (_work(job, p, summary) for p in paths)
        return
    size = 1 if job.merge or job.again else max(1, min(CHUNK, len(paths) // (4 * workers.jobs)))
    for done, part in workers.stream(partial(_work_chunk, job), paths, size):
        summary.merge(part)
        yield from done


@dataclass
class _Decoded:
    """What the pass over the raw launches gave the report."""

    summary: Summary = field(default_factory=Summary)
    traced: list[tuple[Path, int, int]] = field(default_factory=list)  # trace, JSON bytes, events
    plots: list[Path] = field(default_factory=list)
    details: list[tuple[int, str]] = field(default_factory=list)  # launch, issue
    skipped: list[str] = field(default_factory=list)


def _decode_all(raws: Sequence[str], job: _Job, workers: Workers, progress: bool,
                verbose: bool) -> _Decoded:
    """Decode the raw launches (``workers``), merge their summaries in launch order, and
    write the merged trace if asked (from the decoded launches the workers send back).
    ``verbose``: keep each launch's issues in full (else only their groups, in the summary)."""
    got = _Decoded()
    merged = merged_path = None
    if job.trace_dir is not None and job.merge:
        merged_path = job.trace_dir / f"merged{job.ext}"
    redo = False  # a launch started before the merged file's time 0: write it again
    t_min = None
    try:
        with progress_bar(len(raws), "decoding", progress) as bar:
            for done in _results(job, raws, workers, got.summary):
                bar.update()
                if done.error is not None:
                    if len(raws) < 2:
                        raise UserError(done.error)
                    got.skipped.append(f"left out: {done.error}")
                    continue
                d = done.decoded
                if d is not None:
                    t = time_zero(d)
                    t_min = t if t_min is None else min(t_min, t)
                    if merged is None:
                        merged = job.writer(merged_path, t, len(raws) > 1, job.gz)
                    redo |= t < merged.t0
                    if not redo:
                        merged.add(d)
                    done.decoded = d = None
                if done.traced is not None:
                    got.traced.append(done.traced)
                if done.plot is not None:
                    got.plots.append(done.plot)
                if verbose:
                    got.details += done.details
        if redo:  # rare (several streams or ranks): a second pass from the earliest launch
            merged.abort()
            merged = job.writer(merged_path, t_min, len(raws) > 1, job.gz)
            again = replace(job, again=True)
            with progress_bar(len(raws), "merged trace", progress) as bar:
                for done in _results(again, raws, workers, Summary()):
                    bar.update()
                    if done.decoded is not None:
                        merged.add(done.decoded)
        if merged is not None:
            got.traced.append((merged.commit(), merged.json_bytes, merged.events))
            merged = None
    finally:
        if merged is not None:
            merged.abort()
    return got


def _big_trace(path: Path, size: int, events: int, merged: bool) -> str:
    """What to do about a trace too big for Perfetto's UI."""
    fix = ("select launches with --launches (e.g. --launches 0-99) or drop --merge (a file per "
           "launch)" if merged else "record fewer warps (--warps 0) or regions")
    return (f"{path}: {size / 2**20:,.0f} MiB of JSON ({events:,} regions), more than Perfetto's "
            f"UI handles well (it parses traces in the browser's memory, ~2 GB): {fix}, or open "
            "it with `trace_processor --httpd FILE` and ui.perfetto.dev "
            "(perfetto.dev/docs/visualization/large-traces)")
