"""Summaries of profiled launches: a table per kernel, JSON for CI, and a timeline picture.

Inputs are raw launches (``traces/raw/`` directories or ``.json``/``.bin`` files written by
``decode.save_raw``) or Chrome traces written by ``trace.write_trace``. Both become
``LaunchData`` (arrays of region instances plus per-CTA spans), grouped per kernel.
"""

from __future__ import annotations

import io
import json
import os
import re
import time
import warnings
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from proton_inject.analyze import perfetto
from proton_inject.analyze import trace as trace_mod
from proton_inject.analyze.decode import CLOCK_MEANING, Decoded, DecodeWarning, decode
from proton_inject.errors import UserError
from proton_inject.formats import calibration, diagnostics
from proton_inject.formats import schema as validate
from proton_inject.formats.diagnostics import Issue
from proton_inject.formats.files import check_outputs, write_atomic
from proton_inject.formats.raw import find_raw, is_raw_json, load_raw
from proton_inject.formats.schema import read_json

# Per-warp (or per-warp-group) medians differing by more than this get their own rows.
SPLIT_THRESHOLD = 0.10
# A CTA whose records span more than this times its timer lifetime (plus a timer tick at each
# end) on the launch's clock is reported: on a guessed clock, the clock is then too slow.
OVERLONG_TOL = 1.02
# ... and said in the text when more than this share of CTAs is (a few are timer noise).
OVERLONG_SHARE = 0.05
# Clock sources that measured the launch's clock (the others are given or guessed).
MEASURED = ("globaltimer-fit", "clock-bracket")
# Long work says how far it got on stderr this often (seconds).
PROGRESS_EVERY_S = 5.0
# A trace file with more JSON than this gets a warning: Perfetto's UI parses it inside the
# browser's memory (~2 GB), and JSON traces past a few hundred MB load slowly or not at all.
TRACE_WARN_BYTES = 500 * 2**20

# What profiling cost, kernel time with records / without: ``benchmarks/overhead.py`` (median
# of 7 interleaved rounds, L2 flushed), keyed by the rule kind, who records and the record
# buffer per CTA: global, or shared with its size (its final copy costs ~16 SM-cycles per KiB,
# benchmarks/overhead_parts.py). Only what was measured; other combinations say so.
OVERHEAD_MEASURED_ON = "H100, Triton 3.6, 2026-11-24"
# What a recorded iteration of a loop lowered directly added to the loop around it on an
# H100, 2026-11-24: 4 spins of 2,000 cycles 24 each, 16 spins of 500 cycles 63, 256
# dependent multiply-adds 38 (the gap between iterations was 59, 59 and 42: it does not
# tell the cost either).
DIRECT_ITERATION_CYCLES = (24, 63)
WHOLE, ITER = "kernel + whole loops", "every iteration"
SHARED_BIG, SHARED_SMALL, GLOBAL = "shared buffer > 1 KiB", "shared buffer <= 1 KiB", "global buffer"
DIRECT = "direct stores"  # --buffer-type direct: our own lowering (direct.py)
OVERHEAD_CLASSES = {
    # the defaults where each record runs once per CTA: direct.py's lowering, warp 0
    (WHOLE, "one warp", DIRECT):
        "1.00-1.01 (Inductor rmsnorm 1.00, layer norm 8192^2 1.00, Inductor gelu 1.008; with the "
        "earlier 32-byte block: Liger RMSNorm 1.01, attention 1.00)",
    # the defaults with records inside top-level loops without dots or async copies
    (ITER, "one warp", DIRECT):
        "1.00-1.12 (layer norm 8192^2 1.11-1.12 against 1.16 in Proton's shared buffer, vector add "
        "1.00, softmax 1.01, Liger RMSNorm 1.00; loops of dots or async copies keep Proton's "
        "shared buffer: matmul 0.97-1.01, attention 1.00)",
    # records outside loops in Proton's global buffer, one warp (every warp when persistent)
    (WHOLE, "one warp", GLOBAL):
        "0.99-1.04 (Inductor gelu 1.04, Liger RMSNorm 1.02, Inductor rmsnorm 1.02, vector add 1.01, "
        "layer norm 8192^2 1.00-1.02, attention 1.00, matmul 0.99)",
    (WHOLE, "every warp", GLOBAL):
        "1.00-1.10 (persistent softmax 1.00, the default there; short CTAs: layer norm 8192^2 1.10, "
        "Inductor gelu 1.05, vector add 1.05; attention, matmul, Inductor rmsnorm 1.01)",
    # the defaults with records inside loops: shared memory (its size follows the kernel)
    **dict.fromkeys([(ITER, "one warp", SHARED_SMALL), (ITER, "one warp", SHARED_BIG)],
                    "0.99-1.20 (layer norm 8192^2 1.10-1.20, Liger RMSNorm 1.02, attention 1.00, "
                    "matmul 0.99)"),
    (ITER, "every warp", SHARED_BIG):
        "1.00-1.32 (persistent softmax 1.01; matmul/attention 1.00-1.02; layer norm 8192^2 1.28-1.32, "
        "Proton's default buffer)",
    (ITER, "one warp", GLOBAL): "1.06-1.25 (layer norm 8192^2 1.25, softmax 1.06): shared costs less in loops",
    (ITER, "every warp", GLOBAL): "1.02-1.55 (layer norm 8192^2 1.55, matmul/attention/softmax 1.02)",
    # shared memory for records outside loops (--buffer-type shared)
    (WHOLE, "one warp", SHARED_SMALL):
        "0.99-1.06 (layer norm 8192^2 1.04-1.06, softmax 1.05 with one warp, Inductor gelu 1.04, "
        "attention 1.02, Liger RMSNorm 1.02, vector add 1.01, Inductor rmsnorm 1.01, matmul 0.99)",
    (WHOLE, "one warp", SHARED_BIG):
        "1.02-1.05 (8 KiB buffer; layer norm 1.05, Inductor gelu 1.05, Inductor rmsnorm 1.02, vector add 1.02)",
    (WHOLE, "every warp", SHARED_SMALL):
        "1.00-1.08 (layer norm 1.08, Inductor gelu 1.04, Inductor rmsnorm 1.02, vector add 1.04, softmax 1.00)",
    (WHOLE, "every warp", SHARED_BIG):
        "1.00-1.15 (Proton's default 8 KiB buffer; short CTAs: layer norm 8192^2 1.09-1.14, Liger RMSNorm 1.11, "
        "Inductor gelu 1.15, Inductor rmsnorm 1.04; vector add 1.04, softmax 1.00, matmul/attention <= 1.03)",
}
# --sample-ctas 8, every iteration: loops with records run in two copies (benchmarks/overhead.py
# "loops both cta/8").
SAMPLED_ITER_CLASS = ("0.99-1.06 with 1 CTA in 8 (layer norm 8192^2 0.995 against 1.12 in every CTA; "
                      "matmul/attention 1.05-1.06 against 0.97-1.00: their main loop runs in two "
                      "copies, so do not sample big loops; softmax 1.01, vector add 1.04, Liger "
                      "RMSNorm 1.03)")
# --sample-iterations 4 with every iteration: no cheaper than every iteration, since the
# store stays in the loop's code (benchmarks/overhead.py "loops both:iter/4", 2026-11-24).
SAMPLED_ITERATIONS_CLASS = ("1.00-1.13 (layer norm 8192^2 1.125 against 1.116 for every iteration; "
                            "vector add 1.00, Inductor gelu 1.01, attention 1.00, matmul 0.98)")
# --sample-ctas 8 with the defaults: no cheaper, since every CTA still runs Proton's set-up and
# finalize and the sampled ones add a program-id test.
SAMPLED_CTAS_CLASS = ("1.00-1.04 with 1 CTA in 8 (Inductor gelu 1.04, Inductor rmsnorm 1.03, vector add 1.03, "
                      "Liger RMSNorm 1.03, matmul 1.01, softmax 1.01; no cheaper than recording every CTA: "
                      "each still runs Proton's set-up and finalize)")


@dataclass
class LaunchData:
    """Region instances of one launch, in the form the report needs."""

    kernel: str
    launch: int
    config: str | None
    grid: list[int]
    num_warps: int
    scopes: dict[int, str]
    scope_parents: dict[int, int]
    scope_locs: dict[int, str]
    clock: dict[str, Any]
    scope: np.ndarray
    cycles: np.ndarray
    dur_ns: np.ndarray
    start_ns: np.ndarray
    cta: np.ndarray
    warp: np.ndarray
    sm: np.ndarray
    cta_ids: np.ndarray  # per CTA: id, SM, init and pre-final ns (same time axis as start_ns)
    cta_sm: np.ndarray
    cta_init_ns: np.ndarray
    cta_prefinal_ns: np.ndarray
    drops: dict[str, Any]
    issues: list[Issue] = field(default_factory=list)
    device: str | None = None
    rank: int | None = None
    record_cost: float | None = None  # cycles subtracted per record (0: --raw; None: unknown)
    sampled_warps: list[int] | None = None  # the warps that recorded (None: every warp)
    sample_ctas: int = 1  # records in every Nth CTA only
    sample_iterations: int = 1  # records inside loops lowered directly: every Nth iteration only
    loop_scopes: list[list[int]] = field(default_factory=list)  # LaunchMeta.loop_scopes
    cta_time: tuple[float, int, int, float, int, int] | None = None  # _cta_time, once slimmed

    @classmethod
    def from_decoded(cls, d: Decoded) -> LaunchData:
        """Wrap a decoded launch."""
        m, e = d.meta, d.events
        return cls(
            kernel=m.kernel, launch=m.launch, config=m.config, grid=list(m.grid),
            num_warps=m.num_warps, scopes=dict(m.scopes), scope_parents=dict(m.scope_parents),
            scope_locs=dict(m.scope_locs), clock=d.clock.summary(), scope=e.scope,
            cycles=e.cycles, dur_ns=e.dur_ns, start_ns=e.start_ns, cta=e.cta, warp=e.warp,
            sm=e.sm, cta_ids=d.ctas.cta, cta_sm=d.ctas.sm,
            cta_init_ns=d.ctas.init_ns.astype(np.float64),
            cta_prefinal_ns=d.ctas.prefinal_ns.astype(np.float64),
            drops=_drops_dict(d), issues=list(d.issues), device=m.device, rank=m.rank,
            record_cost=d.record_cost, sampled_warps=m.sampled_warps, sample_ctas=m.sample_ctas,
            sample_iterations=m.sample_iterations, loop_scopes=m.loop_scopes,
        )


    def slim(self) -> LaunchData:
        """This launch as ``summarize`` needs it, in less memory: per-CTA numbers folded into
        ``cta_time``, start times and CTA/SM ids dropped, integers narrowed. A report over
        thousands of launches then keeps 16 bytes per region instance instead of ~120."""
        none = np.zeros(0, np.int64)
        return replace(self, cta_time=_cta_time(self), scope=_narrow(self.scope),
                       warp=_narrow(self.warp), cycles=_narrow(self.cycles), start_ns=np.zeros(0),
                       cta=none, sm=none, cta_ids=none, cta_sm=none, cta_init_ns=np.zeros(0),
                       cta_prefinal_ns=np.zeros(0))


def _narrow(v: np.ndarray) -> np.ndarray:
    """Integers in the smallest of int16/int32/int64 that holds them."""
    if len(v) == 0:
        return v
    lo, hi = int(v.min()), int(v.max())
    for t in (np.int16, np.int32):
        if np.iinfo(t).min <= lo and hi <= np.iinfo(t).max:
            return v.astype(t)
    return v.astype(np.int64)


def _drops_dict(d: Decoded) -> dict[str, Any]:
    s = d.drops
    return {
        "records_written": s.records_written,
        "records_dropped": s.dropped,
        "warps_with_drops": s.warps_with_drops,
        "ctas_with_drops": s.ctas_with_drops,
        "needed_buffer_size": s.needed_buffer_size if s.dropped else None,
        "buffer_size": s.slots_per_warp * 8 * s.segments,
        "buffer_type": d.meta.buffer_type,
        "unmatched_starts": d.unmatched_starts,
        "unmatched_ends": d.unmatched_ends,
    }


# --- loading ---------------------------------------------------------------------------------


def expand_inputs(paths: Sequence[str | os.PathLike]) -> tuple[list[Path], list[Path]]:
    """Split user paths into raw launch ``.json`` files and trace files."""
    raws: list[Path] = []
    traces: list[Path] = []
    for p in map(Path, paths):
        if not p.exists():
            raise UserError(f"{p}: no such file or directory")
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
    try:
        with open(path, "rb") as f:
            head = f.read(256)
    except OSError:
        return False
    return b'"format": "proton-inject-run"' in head or b'"instrumented_dir"' in head


def _empty_run(runs: Sequence[Path]) -> str:
    """Why a run directory holds no launch, from its run.json messages."""
    msgs: list[str] = []
    code = None
    for r in runs:
        try:
            d = json.loads(r.read_text())
        except (OSError, ValueError):
            continue
        msgs += [str(m) for m in d.get("messages", [])][:3]
        code = d.get("exit_code", code)
    why = "; ".join(msgs) or "no instrumented launch was kept"
    ended = f" (the program exited with code {code})" if code else ""
    return f"{runs[0].parent}: the run kept no launches{ended}: {why}"


def iter_decoded(paths: Sequence[Path], clock_mhz: float | None = None,
                 raw: bool = False) -> Iterator[Decoded]:
    """Decode raw launches one at a time, in the order given; durations less the calibrated
    record cost (the run's, else this machine's cache for the launch's device) unless ``raw``."""
    for p in paths:
        buf, meta = load_raw(p)
        cost = 0.0 if raw else meta.record_cost_cycles
        if cost is None:
            cost = calibration.lookup(meta.device, meta.clock_bits, meta.buffer_type,
                                    selective=bool(meta.sampled_warps))
        yield decode(buf, meta, clock_mhz=clock_mhz, record_cost=cost)
        del buf


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
                      "launch metadata", "").get("launch", 0)
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
    other = doc.get("otherData") if isinstance(doc, dict) else None
    if not isinstance(other, dict) or other.get("format") != trace_mod.TRACE_FORMAT:
        raise UserError(f"{path}: not a proton-inject trace (write it with `report --trace` or `run`)")
    infos = sorted(validate.trace_launches(other, path), key=lambda s: s["pid_base"])
    bases = np.array([s["pid_base"] for s in infos])
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


def _loop_scopes(v: Any) -> list[list[int]]:
    """A trace's ``loop_scopes``, or none where it is missing or malformed (older traces)."""
    ok = isinstance(v, list) and all(isinstance(g, list) and all(map(validate.is_int, g)) for g in v)
    return v if ok else []


# --- statistics ------------------------------------------------------------------------------


def _stats(v: np.ndarray, scratch: bool = False) -> dict[str, float]:
    """``scratch``: ``v`` is ours to reorder (the quantiles then need no copy of it)."""
    if len(v) == 0:
        return {"total": 0.0, "mean": 0.0, "median": 0.0, "p95": 0.0, "max": 0.0}
    out = {"total": float(v.sum()), "mean": float(v.mean()), "max": float(v.max())}
    out["median"] = float(np.median(v, overwrite_input=scratch))
    out["p95"] = float(np.percentile(v, 95, overwrite_input=scratch))
    return {k: out[k] for k in ("total", "mean", "median", "p95", "max")}


def kernel_summary(launches: Sequence[LaunchData]) -> dict[str, Any]:
    """Numbers of one kernel (one or more launches of the same kernel and config)."""
    first = launches[0]
    ranks = sorted({x.rank for x in launches if x.rank is not None})
    # Kernel time = sum over profiled (launch, CTA, warp) of that CTA's lifetime.
    kernel_ns = 0.0
    # CTAs whose records outlast their timer reads: on guessed / measured clocks, CTAs
    # checked, worst ratio
    overlong = [0, 0, 0, 0.0]
    for x in launches:
        t = _cta_time(x)
        kernel_ns += t[0]
        overlong[1 if x.clock.get("source") in MEASURED else 0] += t[1]
        overlong[2] += t[2]
        overlong[3] = max(overlong[3], t[3])
    W = first.num_warps
    group = 4 if W > 4 else 1  # warp groups (partitions) for wide CTAs, warps otherwise
    scopes = dict(first.scopes)
    present = sorted({int(s) for x in launches for s in _scope_ids(x.scope)})
    for s in present:
        scopes.setdefault(s, f"scope_{s}")
    counts = {n: list(scopes.values()).count(n) for n in scopes.values()}
    n_of = {s: sum(int(np.count_nonzero(x.scope == s)) for x in launches) for s in present}
    held = _iterations_held(first.scope_parents, first.loop_scopes, n_of)
    regions = []
    n_events = 0
    for s in present:
        # One scope's instances at a time, not every event of the kernel at once (a run of
        # thousands of launches may hold a hundred million), filled launch by launch into
        # arrays of the launches' own types (no per-launch copies to concatenate).
        n = n_of[s]
        cycles = np.empty(n, np.result_type(*(x.cycles.dtype for x in launches)))
        dur = np.empty(n, np.result_type(*(x.dur_ns.dtype for x in launches)))
        warp = np.empty(n, np.result_type(*(x.warp.dtype for x in launches)))
        rank_ev = np.empty(n, np.int32) if ranks else None
        i = 0
        for x in launches:
            k = x.scope == s
            j = i + int(np.count_nonzero(k))
            cycles[i:j], dur[i:j], warp[i:j] = x.cycles[k], x.dur_ns[k], x.warp[k]
            if rank_ev is not None:
                rank_ev[i:j] = -1 if x.rank is None else x.rank
            i = j
        n_events += n
        name = scopes[s] if counts[scopes[s]] == 1 else f"{scopes[s]} [{s}]"
        unit = warp // group if group > 1 else warp
        per_unit = []
        for u in np.unique(unit).tolist():
            um = unit == u
            per_unit.append({
                "unit": f"warp {u}" if group == 1 else f"warps {u * 4}-{u * 4 + 3}",
                "count": int(um.sum()),
                "median_cycles": float(np.median(cycles[um], overwrite_input=True)),
                "median_ns": float(np.median(dur[um], overwrite_input=True)),
            })
        meds = [p["median_cycles"] for p in per_unit]
        differs = len(meds) > 1 and (max(meds) - min(meds)) > SPLIT_THRESHOLD * max(1.0, max(meds))
        share = float(dur.sum() / kernel_ns) if kernel_ns > 0 else None
        per_rank = [
            {"rank": r, "count": int((rank_ev == r).sum()),
             "cycles": _stats(cycles[rank_ev == r], True), "ns": _stats(dur[rank_ev == r], True)}
            for r in ranks
        ] if ranks else None
        regions.append({
            "scope": int(s),
            "name": name,
            "loc": first.scope_locs.get(int(s)),
            "parent": first.scope_parents.get(int(s)),
            "count": len(cycles),
            "cycles": _stats(cycles, True),  # (last use of these arrays: reordered in place)
            "ns": _stats(dur, True),
            "share": share,
            "per_unit": per_unit if differs else None,
            "per_rank": per_rank,
            "recorded_iterations_inside": held.get(s),
        })
    drops = {k: sum((x.drops.get(k) or 0) for x in launches)
             for k in ("records_written", "records_dropped", "warps_with_drops", "ctas_with_drops",
                       "unmatched_starts", "unmatched_ends")}
    need = [x.drops.get("needed_buffer_size") for x in launches if x.drops.get("needed_buffer_size")]
    drops["needed_buffer_size"] = max(need) if need else None
    drops["buffer_size"] = max((x.drops.get("buffer_size") or 0) for x in launches) or None
    kinds = {x.drops.get("buffer_type") for x in launches}
    drops["buffer_type"] = kinds.pop() if len(kinds) == 1 else None  # None: unknown or mixed
    mhz = [x.clock.get("mhz_median") for x in launches if x.clock.get("mhz_median")]
    return {
        "kernel": first.kernel,
        "config": first.config,
        "launches": [x.launch for x in launches],
        "ranks": ranks or None,
        "device": first.device,
        "grid": first.grid,
        "num_warps": W,
        "ctas": int(sum(_cta_time(x)[5] for x in launches)),
        "clock": {
            "sources": sorted({str(x.clock.get("source")) for x in launches}),
            "mhz_median": float(np.median(mhz)) if mhz else None,
            "per_launch": [x.clock for x in launches],
        },
        "kernel_time_ns": kernel_ns,
        "ctas_overlong": {"count": overlong[0] + overlong[1], "of": overlong[2],
                          "on_measured_clock": overlong[1],
                          "max_ratio": round(overlong[3], 3) if overlong[0] + overlong[1] else None},
        "events": n_events,
        "sampled": {
            "warps": first.sampled_warps,
            "every_nth_cta": first.sample_ctas,
            "every_nth_iteration": first.sample_iterations,
            "ctas_with_records": int(sum(_cta_time(x)[4] for x in launches)),
        },
        "regions": regions,
        "drops": drops,
        "record_cost_cycles": sorted({x.record_cost for x in launches}, key=lambda c: -1 if c is None else c),
        "warnings": diagnostics.summarize({first.kernel: len(launches)},
                                          [(first.kernel, i) for x in launches for i in x.issues]),
        "issues": [{"launch": x.launch, **i.to_dict()} for x in launches for i in x.issues],
    }


def _iterations_held(parents: dict[int, int], loops: list[list[int]],
                     n_of: dict[int, int]) -> dict[int, float]:
    """Per region outside the loops lowered directly: how many of their kept iterations ran
    inside one of its instances (on average). Each such iteration stores its clocks as it
    ends, inside the loop, so the region holds that store's time."""
    inside = {d for group in loops for d in group}
    out: dict[int, float] = {}
    for group in loops:
        d = next((d for d in group if n_of.get(d)), None)  # once per kept iteration
        seen: list[int] = []
        p = parents.get(d) if d is not None else None
        while p is not None and p not in seen:
            seen.append(p)
            if p not in inside and n_of.get(p):
                out[p] = out.get(p, 0.0) + n_of[d] / n_of[p]
            p = parents.get(p)
    return out


def _scope_ids(scope: np.ndarray) -> np.ndarray:
    """The distinct scope ids of one launch's events (small non-negative integers)."""
    if len(scope) == 0:
        return scope
    lo = int(scope.min())
    return np.flatnonzero(np.bincount(scope - lo)) + lo


def _cta_time(x: LaunchData) -> tuple[float, int, int, float, int, int]:
    """One launch's part of its kernel's numbers: kernel time (sum over profiled (CTA, warp)
    of that CTA's lifetime), CTAs whose records outlast them, CTAs checked for that, the worst
    ratio, CTAs with records, and CTAs."""
    if x.cta_time is not None:
        return x.cta_time
    if len(x.cta) == 0:
        return 0.0, 0, 0, 0.0, 0, len(x.cta_ids)
    ids, life, n_over, n_checked, worst = _cta_lifetimes(x)
    stride = int(x.warp.max()) + 1
    pairs = np.unique(x.cta * stride + x.warp)  # profiled (CTA, warp) streams
    return (float(life[np.searchsorted(ids, pairs // stride)].sum()), n_over, n_checked, worst,
            len(ids), len(x.cta_ids))


def _cta_lifetimes(x: LaunchData) -> tuple[np.ndarray, np.ndarray, int, int, float]:
    """Per CTA with events: sorted ids, lifetime in ns; how many CTAs are overlong, how many
    could be checked, the worst ratio.

    The lifetime is the CTA's init..pre-final span, or its records' span on the launch's
    clock where that is longer. Every region instance of a warp lies inside its CTA's record
    span, so a region's share can then never pass 100%, even when the clock is off.

    The check that the timer reads bound the records: Proton's lowering reads the init time
    in the first thread of each 4-warp group, with no barrier after it (other warps may
    record before it: by 80 ns on the add fixture, more in a memory-bound kernel whose
    header stores stall), and the pre-final time after a barrier that follows every warp's
    last record. So the span checked runs from the first record of warp 0 (of the latest of
    warps 0, 4, ... that has one: any of them may have written the init time last) to the
    CTA's last record, against pre-final - init plus a timer tick at each end (both reads are
    quantized: 32 ns on the H100, 3% of a 1 us CTA at each end).
    """
    ids, k = np.unique(x.cta, return_inverse=True)
    lo = np.full(len(ids), np.inf)
    hi = np.full(len(ids), -np.inf)
    np.minimum.at(lo, k, x.start_ns)
    np.maximum.at(hi, k, x.start_ns + x.dur_ns)
    rec = hi - lo
    # per CTA, the latest over init-writing warps of their first record
    anchor = np.full(len(ids), -np.inf)
    for w in np.unique(x.warp[x.warp % 4 == 0]).tolist():
        first = np.full(len(ids), np.inf)
        m = x.warp == w
        np.minimum.at(first, k[m], x.start_ns[m])
        anchor = np.where(np.isfinite(first), np.maximum(anchor, first), anchor)
    life = np.full(len(ids), np.nan)
    order = np.argsort(x.cta_ids)
    j = np.clip(np.searchsorted(x.cta_ids[order], ids), 0, max(0, len(order) - 1))
    known = np.zeros(len(ids), bool)
    if len(order):
        known = x.cta_ids[order][j] == ids
        jj = order[j[known]]
        life[known] = x.cta_prefinal_ns[jj] - x.cta_init_ns[jj]
    tick = float(x.clock.get("timer_tick_ns") or 0)
    checked = known & np.isfinite(anchor)
    span = np.where(checked, hi - anchor, 0.0)
    over = checked & (span > OVERLONG_TOL * (np.where(checked, life, 0.0) + 2 * tick))
    worst = float((span[over] / np.maximum(life[over], 1.0)).max()) if over.any() else 1.0
    # A CTA without timer reads (a trace that lost them) counts its record span.
    return ids, np.fmax(life, rec), int(over.sum()), int(checked.sum()), worst


def summarize(launches: Sequence[LaunchData]) -> dict[str, Any]:
    """The whole report as a JSON-ready dict: one entry per (kernel, config)."""
    groups: dict[tuple[str, str | None], list[LaunchData]] = {}
    for x in sorted(launches, key=lambda x: x.launch):
        groups.setdefault((x.kernel, x.config), []).append(x)
    return {"format": "proton-inject-report", "version": 1,
            "kernels": [kernel_summary(g) for g in groups.values()]}


# --- text ------------------------------------------------------------------------------------


def _fmt(v: float | None, digits: int = 0) -> str:
    if v is None:
        return "-"
    return f"{v:,.{digits}f}"


def drop_warning(k: dict[str, Any]) -> str | None:
    """The dropped-record sentence for one kernel, or None when nothing was lost."""
    d = k["drops"]
    if not d["records_dropped"]:
        return None
    pct = 100.0 * d["records_dropped"] / max(1, d["records_written"])
    need = d["needed_buffer_size"]
    if d.get("buffer_type") == "direct":
        return (f"WARNING: {d['records_dropped']:,} of {d['records_written']:,} records ({pct:.1f}%) "
                f"were not kept: in {d['ctas_with_drops']:,} CTAs a loop ran more iterations than "
                "it keeps, so only its first iterations have regions. "
                f"--buffer-size {need} (bytes per CTA for records inside loops) would have held "
                "them all; --sample-iterations N keeps iterations 0, N, 2N, ... instead.")
    per_warp = need // max(1, k["num_warps"]) if need else None
    head = (
        f"WARNING: {d['records_dropped']:,} of {d['records_written']:,} records ({pct:.1f}%) were "
        f"dropped: the circular buffer wrapped in {d['warps_with_drops']:,} warps of "
        f"{d['ctas_with_drops']:,} CTAs, so the oldest regions are missing. --buffer-size {need} "
        f"({per_warp} bytes per warp)"
    )
    if d.get("buffer_type") == "global":
        return f"{head} with --buffer-type global would have held them all."
    return (
        f"{head} would have held them all, if the kernel leaves that much shared memory free "
        "(`proton-inject check` shows it); else add --buffer-type global (records in global "
        "memory, no shared-memory limit) or record fewer regions or warps (--loop-depth, --warps)."
    )


def sampled_line(k: dict[str, Any]) -> str | None:
    """What the profile sampled (which warps, every Nth CTA); counts and totals are of the
    sampled records only, never scaled up."""
    smp = k.get("sampled") or {}
    parts = []
    warps = smp.get("warps")
    if warps:
        parts.append(f"warps {','.join(map(str, warps))} of {k['num_warps']} recorded "
                     "(the first of each partition unless --warps named them; --warps all: every warp)")
    n = smp.get("every_nth_cta") or 1
    if n > 1:
        parts.append(f"1 CTA in {n} recorded (--sample-ctas {n}): "
                     f"{smp.get('ctas_with_records', 0):,} of {k['ctas']:,} CTAs have regions")
    n = smp.get("every_nth_iteration") or 1
    if n > 1:
        parts.append(f"iterations 0, {n}, {2 * n}, ... of each loop lowered directly recorded "
                     f"(--sample-iterations {n})")
    if not parts:
        return None
    return "sampled: " + "; ".join(parts) + "; counts and totals are of these only, not scaled"


def held_iterations_note(k: dict[str, Any]) -> str | None:
    """One note naming the regions around loops whose iterations were recorded directly: each
    kept iteration's store is in their durations, and nothing subtracts it."""
    lo, hi = DIRECT_ITERATION_CYCLES
    held = [(r, r["recorded_iterations_inside"]) for r in k["regions"]
            if r.get("recorded_iterations_inside")]
    if not held:
        return None
    worst, n = max(held, key=lambda h: h[1] / max(1.0, h[0]["cycles"]["median"]))
    med = max(1.0, worst["cycles"]["median"])
    names = ", ".join(f"{r['name']} ({n:,.1f} per instance)" for r, n in held)
    return (f"note: recorded loop iterations run inside {names}: each stored its clocks as it "
            f"ended, inside its loop, and nothing subtracts those stores from the regions around "
            f"them (on an H100 a recorded iteration added {lo}-{hi} cycles to its loop, depending "
            f"on the loop body): up to ~{hi * n:,.0f} of {worst['name']}'s {med:,.0f} median "
            f"cycles ({100 * hi * n / med:.1f}%); time those regions with no records inside their "
            "loops (e.g. --loops outer) for their plain length")


def overhead_class(k: dict[str, Any]) -> str:
    """What these options cost in the measurements (``OVERHEAD_CLASSES``), or that they were
    not measured."""
    names = [r["name"] for r in k["regions"]]
    # Region names as insert writes them: "kernel", "loop X @f.py:3", "iter X @f.py:3".
    kind = [n.split(" ")[0] for n in names]
    if "iter" in kind:
        rules = ITER
    elif kind and set(kind) <= {"kernel", "loop"}:
        rules = WHOLE
    else:
        return "overhead: not measured for these regions (marks, ops or line ranges)"
    warps = (k.get("sampled") or {}).get("warps")
    who = "every warp" if not warps else "one warp" if len(warps) == 1 else f"{len(warps)} warps"
    drops = k.get("drops") or {}
    size = drops.get("buffer_size") or 0
    if drops.get("buffer_type") == "direct":
        buf = DIRECT
    elif drops.get("buffer_type") == "global":
        buf = GLOBAL
    else:
        buf = SHARED_SMALL if 0 < size <= 1024 else SHARED_BIG
    got = OVERHEAD_CLASSES.get((rules, who, buf))
    what = f"{rules}, {who}, {buf}"
    smp = (k.get("sampled") or {}).get("every_nth_cta") or 1
    if smp > 1:
        what += f", 1 CTA in {smp}"
        got = (SAMPLED_CTAS_CLASS if rules == WHOLE and buf == GLOBAL
               else SAMPLED_ITER_CLASS if rules == ITER else None)
    nth = (k.get("sampled") or {}).get("every_nth_iteration") or 1
    if nth > 1:
        what += f", iterations 0, {nth}, {2 * nth}, ..."
        got = SAMPLED_ITERATIONS_CLASS if rules == ITER and smp == 1 else None
    if got is None:
        return (f"overhead: {what}: not measured yet ({OVERHEAD_MEASURED_ON}: "
                "benchmarks/overhead.py measures it)")
    return f"overhead: {what}: kernel time x {got} (measured on {OVERHEAD_MEASURED_ON})"


def fitted_rates(summary: dict[str, Any]) -> dict[str | None, list[float]]:
    """Per device, the clocks of every launch in the report whose globaltimer fit held."""
    out: dict[str | None, list[float]] = {}
    for k in summary["kernels"]:
        for c in k["clock"]["per_launch"]:
            if c.get("source") in MEASURED and c.get("mhz_median"):
                out.setdefault(k.get("device"), []).append(float(c["mhz_median"]))
    return out


def clock_line(k: dict[str, Any], fitted: dict[str | None, list[float]] | None = None) -> str:
    """Which clock turned this kernel's cycles into ns, and what that is worth: a fit's
    quality, or that a fallback is a guess, never presented as a measurement. ``fitted``
    (``fitted_rates``): what other launches on the device measured, as a hint for a guess."""
    per = k["clock"]["per_launch"]
    by_source: dict[str, list[dict[str, Any]]] = {}
    for c in per:
        by_source.setdefault(str(c.get("source")), []).append(c)
    parts = []
    for source, cs in sorted(by_source.items(), key=lambda kv: -len(kv[1])):
        mhz = sorted({c["mhz_median"] for c in cs if c.get("mhz_median")})
        rate = ("-" if not mhz else f"{mhz[0]:,.0f}" if len(mhz) == 1
                else f"{mhz[0]:,.0f}-{mhz[-1]:,.0f}") + " MHz"
        head = f"{source} {rate} on {len(cs)} of {len(per)} launch{'es' if len(per) != 1 else ''}"
        if source == "globaltimer-fit":
            r2 = [c["fit_r2"] for c in cs if c.get("fit_r2") is not None]
            res = [c["residual_ns"] for c in cs if c.get("residual_ns") is not None]
            q = []
            if r2:
                q.append(f"R^2 >= {min(r2):.3f}")
            if res:
                q.append(f"residual <= {max(res):,.0f} ns RMS")
            parts.append(f"{head} (measured: {', '.join(q) or 'fit'}{_within(cs)})")
        elif source == "clock-bracket":
            differ = [abs(c["bracket"].get("sides_differ_pct") or 0) for c in cs
                      if isinstance(c.get("bracket"), dict)]
            note = (f", before and after differ by up to {max(differ):.1f}%"
                    if differ and max(differ) > 0.1 else "")
            parts.append(f"{head} ({CLOCK_MEANING[source]}{_within(cs)}{note})")
        else:
            why = f"; globaltimer fit rejected: {cs[0]['reason']}" if cs[0].get("reason") else ""
            br = cs[0].get("bracket")
            if isinstance(br, dict) and br.get("missing") and source != "--clock-mhz":
                why += f"; no clock bracket: {br['missing']}"
            parts.append(f"{head} ({CLOCK_MEANING.get(source, source)}{why})")
    near = (fitted or {}).get(k.get("device"))
    if near and set(by_source) - {*MEASURED, "--clock-mhz"}:
        lo, hi = min(near), max(near)
        rate = f"{lo:,.0f}" if round(lo) == round(hi) else f"{lo:,.0f}-{hi:,.0f}"
        parts.append(f"launches of these inputs whose fit held ran at {rate} MHz "
                     f"({len(near)} launch{'es' if len(near) != 1 else ''}; --clock-mhz takes one)")
    return "clock: " + "; ".join(parts)


def _within(cs: list[dict[str, Any]]) -> str:
    """The largest stated uncertainty of some launches' clocks, as ``: +-0.05%``."""
    u = [c["uncertainty_pct"] for c in cs if c.get("uncertainty_pct") is not None]
    return f"; ns within +-{max(u):.2g}%" if u else ""


def clock_notes(k: dict[str, Any], fitted: dict[str | None, list[float]] | None = None) -> list[str]:
    """The clock line, the record-cost line, and whether the clock stretched records past
    their CTA's lifetime."""
    out = [clock_line(k, fitted)]
    costs = k.get("record_cost_cycles") or []
    cost = [c for c in costs if c]
    if cost:
        out.append(f"record cost: {', '.join(f'{c:g}' for c in cost)} cycles per record subtracted "
                   "(calibrated; nested regions shifted with it; --raw shows raw durations)")
    if None in costs:
        out.append(f"record cost: not calibrated for {k.get('device') or 'this device'}: durations "
                   "may include the records' own cost (on an H100 none lowered directly, "
                   "70 per record with every warp in Proton's shared buffer); "
                   "`proton-inject calibrate` on that GPU measures it")
    o = k.get("ctas_overlong") or {}
    n, measured = o.get("count", 0), o.get("on_measured_clock", 0)
    if n > OVERLONG_SHARE * o.get("of", 0):
        head = (f"note: the records of {n:,} of {o['of']:,} CTAs span longer than the CTA lived "
                f"(its timer reads, +-1 tick; up to {o['max_ratio']:.2f}x)")
        if n - measured > OVERLONG_SHARE * o.get("of", 0):
            out.append(f"{head}: the clock is too slow for them; shares count their record "
                       "span as their lifetime")
        else:  # a measured clock is not to blame
            out.append(f"{head} on a measured clock: their timer reads do not bound their records; "
                       "shares count their record span as their lifetime")
    return out


def format_text(summary: dict[str, Any]) -> str:
    """Human-readable tables, one per kernel."""
    out = []
    fitted = fitted_rates(summary)
    for k in summary["kernels"]:
        launches = k["launches"]
        clk = k["clock"]
        grid = "x".join(str(g) for g in k["grid"])
        title = (f"{k['kernel']}" + (f" [{k['config']}]" if k["config"] else "") +
                 f": {len(launches)} launch{'es' if len(launches) != 1 else ''}, grid {grid}, "
                 f"{k['num_warps']} warps, {k['ctas']:,} CTAs, {k['events']:,} regions; clock "
                 f"{_fmt(clk['mhz_median'])} MHz ({', '.join(clk['sources'])})")
        out.append(title)
        hdr = ["region", "count", "total cyc", "mean cyc", "median cyc", "p95 cyc", "max cyc",
               "total us", "mean ns", "median ns", "p95 ns", "max ns", "share"]
        rows = []
        for r in k["regions"]:
            c, n = r["cycles"], r["ns"]
            rows.append([
                r["name"], f"{r['count']:,}", _fmt(c["total"]), _fmt(c["mean"], 1),
                _fmt(c["median"]), _fmt(c["p95"]), _fmt(c["max"]), _fmt(n["total"] / 1000, 1),
                _fmt(n["mean"], 1), _fmt(n["median"], 1), _fmt(n["p95"], 1), _fmt(n["max"], 1),
                "-" if r["share"] is None else f"{100 * r['share']:.1f}%",
            ])
            for pr in r.get("per_rank") or []:
                c, n = pr["cycles"], pr["ns"]
                rows.append([
                    f"  rank {pr['rank']}", f"{pr['count']:,}", _fmt(c["total"]), _fmt(c["mean"], 1),
                    _fmt(c["median"]), _fmt(c["p95"]), _fmt(c["max"]), _fmt(n["total"] / 1000, 1),
                    _fmt(n["mean"], 1), _fmt(n["median"], 1), _fmt(n["p95"], 1), _fmt(n["max"], 1), "",
                ])
            for u in r["per_unit"] or []:
                rows.append([f"  {u['unit']}", f"{u['count']:,}", "", "", _fmt(u["median_cycles"]),
                             "", "", "", "", _fmt(u["median_ns"], 1), "", "", ""])
        widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h)
                  for i, h in enumerate(hdr)]
        out.append("  " + "  ".join(h.ljust(w) if i == 0 else h.rjust(w)
                                    for i, (h, w) in enumerate(zip(hdr, widths, strict=True))))
        for row in rows:
            out.append("  " + "  ".join(v.ljust(w) if i == 0 else v.rjust(w)
                                        for i, (v, w) in enumerate(zip(row, widths, strict=True))))
        if not rows:
            out.append("  (no complete regions)")
        line = sampled_line(k)
        if line:
            out.append("  " + line)
        out.append("  " + overhead_class(k))
        w = drop_warning(k)
        if w:
            out.append("  " + w)
        w = held_iterations_note(k)
        if w:
            out.append("  " + w)
        out += [f"  {n}" for n in clock_notes(k, fitted)]
        d = k["drops"]
        if d["unmatched_starts"] or d["unmatched_ends"]:
            out.append(f"  note: {d['unmatched_starts']:,} start and {d['unmatched_ends']:,} end "
                       "records had no partner (regions cut by the buffer window, or left early)")
        out.append("  share = region time / sum over profiled warps of their CTA's lifetime "
                   "(init to pre-final, or its records' span where longer); nested regions "
                   "overlap their parents")
        out.append("")
    return "\n".join(out)


# --- timeline picture ------------------------------------------------------------------------


def _depths(scopes: Sequence[int], parents: dict[int, int]) -> dict[int, int]:
    depth = {}
    for s in scopes:
        d, p, seen = 0, s, set()
        while p in parents and p not in seen:
            seen.add(p)
            p = parents[p]
            d += 1
        depth[s] = d
    return depth


def plot_timeline(x: LaunchData, path: str | os.PathLike, max_sms: int = 16) -> Path:
    """PNG of one launch: a lane per concurrently resident CTA on each SM (SMs top to bottom),
    time across, a colour per region; the CTA's first profiled warp is drawn, nested regions
    as thinner bars on top of their parents, the CTA lifetime as a grey band. At most
    ``max_sms`` SMs, evenly picked, so that bars stay readable."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Patch

    all_sms = np.unique(x.cta_sm)
    shown = all_sms
    if len(all_sms) > max_sms:
        shown = all_sms[np.unique(np.linspace(0, len(all_sms) - 1, max_sms).round().astype(int))]
    on = np.isin(x.cta_sm, shown)
    # Lanes: per SM, CTAs that overlap in time get separate lanes.
    order = np.nonzero(on)[0][np.lexsort((x.cta_init_ns[on], x.cta_sm[on]))]
    lane_of: dict[int, int] = {}
    sm_rows: list[tuple[int, int, int]] = []  # (sm, first row, n rows)
    row = 0
    cur_sm = None
    ends: list[float] = []
    for i in order.tolist():
        sm = int(x.cta_sm[i])
        if sm != cur_sm:
            if cur_sm is not None:
                sm_rows.append((cur_sm, row, len(ends)))
                row += len(ends)
            cur_sm, ends = sm, []
        init, pre = float(x.cta_init_ns[i]), float(x.cta_prefinal_ns[i])
        for lane, e in enumerate(ends):
            if e <= init:
                ends[lane] = pre
                break
        else:
            lane = len(ends)
            ends.append(pre)
        lane_of[int(x.cta_ids[i])] = row + lane
    if cur_sm is not None:
        sm_rows.append((cur_sm, row, len(ends)))
        row += len(ends)
    n_rows = max(1, row)

    first_warp = int(x.warp.min()) if len(x.warp) else 0
    m = x.warp == first_warp
    scope = x.scope[m]
    t0 = x.start_ns[m] / 1000.0
    t1 = (x.start_ns[m] + x.dur_ns[m]) / 1000.0
    y = np.array([lane_of.get(int(c), -1) for c in x.cta[m].tolist()], np.float64)
    keep = y >= 0
    scope, t0, t1, y = scope[keep], t0[keep], t1[keep], y[keep]

    names = sorted(set(np.unique(scope).tolist()))
    depth = _depths(names, x.scope_parents)
    cmap = plt.get_cmap("tab10" if len(names) <= 10 else "tab20")
    colors = {s: cmap(i % cmap.N) for i, s in enumerate(names)}

    height = min(12.0, max(4.0, 1.5 + n_rows * 0.09))
    fig, ax = plt.subplots(figsize=(14, height), dpi=150)
    # CTA lifetimes as grey bands.
    cy = np.array([lane_of[int(c)] for c in x.cta_ids[on].tolist()], np.float64)
    ci, cp = x.cta_init_ns[on] / 1000.0, x.cta_prefinal_ns[on] / 1000.0
    band = np.stack([np.stack([ci, cy + 0.05], 1), np.stack([cp, cy + 0.05], 1),
                     np.stack([cp, cy + 0.95], 1), np.stack([ci, cy + 0.95], 1)], 1)
    ax.add_collection(PolyCollection(band, facecolors="0.88", edgecolors="none", rasterized=True))
    max_depth = max(depth.values(), default=0)
    for s in sorted(names, key=lambda s: depth[s]):
        k = scope == s
        inset = 0.1 + 0.3 * depth[s] / max(1, max_depth) if max_depth else 0.1
        lo, hi = y[k] + inset, y[k] + 1 - inset
        verts = np.stack([np.stack([t0[k], lo], 1), np.stack([t1[k], lo], 1),
                          np.stack([t1[k], hi], 1), np.stack([t0[k], hi], 1)], 1)
        ax.add_collection(PolyCollection(verts, facecolors=[colors[s]], edgecolors="none",
                                         rasterized=True))
    xmax = float(max(cp.max() if len(cp) else 1.0, t1.max() if len(t1) else 1.0))
    xmin = float(min(ci.min() if len(ci) else 0.0, t0.min() if len(t0) else 0.0))
    ax.set_xlim(xmin, xmin + (xmax - xmin) * 1.01)
    ax.set_ylim(n_rows, 0)
    for _, r0, _ in sm_rows[1:]:
        ax.axhline(r0, color="0.6", lw=0.5)
    ax.set_yticks([r0 + n / 2 for _, r0, n in sm_rows], [f"SM {sm}" for sm, _, _ in sm_rows],
                  fontsize=8)
    ax.set_xlabel("time since the launch's first CTA started (us)")
    ax.set_ylabel("SM (one lane per resident CTA)")
    mhz = x.clock.get("mhz_median")
    ax.set_title(
        f"{x.kernel} launch {x.launch}: {len(x.cta_ids):,} CTAs on {len(all_sms)} SMs "
        f"({len(shown)} shown), warp {first_warp} of each CTA; clock {mhz:.0f} MHz "
        f"({x.clock.get('source')})"
        if mhz else f"{x.kernel} launch {x.launch}", fontsize=10)
    handles = [Patch(color="0.88", label="CTA lifetime (init..pre-final)")]
    handles += [Patch(color=colors[s], label=x.scopes.get(s, f"scope_{s}")) for s in names]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8,
              frameon=False)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return write_atomic(path, buf.getvalue())


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
               trace_format: str = "perfetto") -> ReportResult:
    """Load raw launches or traces, summarize, and optionally plot and write traces
    (``trace_format`` "perfetto": native ``.pftrace``; "json": Chrome JSON).

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
            for i, d in enumerate(iter_decoded(raws, clock_mhz, raw)):
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
                    w.add(d)
                    traced.append((w.commit(), w.json_bytes, w.events))
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
                for i, d in enumerate(iter_decoded(raws, clock_mhz, raw)):
                    merged.add(d)
                    again(i + 1)
            again.end()
        if merged is not None:
            traced.append((merged.commit(), merged.json_bytes, merged.events))
            merged = None
    finally:
        if merged is not None:
            merged.abort()
    for x in sorted(from_traces, key=lambda x: x.launch):
        draw(x)
    launches_data = kept + from_traces
    summary = summarize(launches_data)
    text = json.dumps(summary, indent=1) if as_json else format_text(summary)
    warn = [w for k in summary["kernels"] for w in k["warnings"]]
    warn += [_big_trace(p, b, n, merge) for p, b, n in traced if b > TRACE_WARN_BYTES]
    details = [i.detail for x in sorted(launches_data, key=lambda x: x.launch) for i in x.issues]
    files = [p for p, _, _ in traced] + sorted(plots)
    return ReportResult(text=text, warnings=warn, files=files, summary=summary, details=details)


def _big_trace(path: Path, size: int, events: int, merged: bool) -> str:
    """What to do about a trace too big for Perfetto's UI."""
    fix = ("select launches with --launches (e.g. --launches 0-99) or drop --merge (a file per "
           "launch)" if merged else "record fewer warps (--warps 0) or regions")
    return (f"{path}: {size / 2**20:,.0f} MiB of JSON ({events:,} regions), more than Perfetto's "
            f"UI handles well (it parses traces in the browser's memory, ~2 GB): {fix}, or open "
            "it with `trace_processor --httpd FILE` and ui.perfetto.dev "
            "(perfetto.dev/docs/visualization/large-traces)")
