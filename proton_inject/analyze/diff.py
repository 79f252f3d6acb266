"""`diff BASE NEW`: which region of which kernel got slower between two runs, and is it noise.

Each side is a run/profile output directory, a directory of raw launches, a trace, or a
``report --json`` file. Raw launches and traces are decoded by the report's own pipeline
(``report.iter_decoded``, ``LaunchData``, ``summarize``), so counts, medians and p95 are the
numbers ``report`` prints; their region instances also give a noise interval: a bootstrap of
the median over CTAs (over launches when a side has ``LAUNCH_CLUSTERS`` or more), each side
resampled on its own. A ``report --json`` file holds summaries only: no interval then, and
the output says so.

A region is identified by what survives an edit of the kernel: kernel name, config
(constexprs and launch options, order-free), the region's name (its kind, variable and
source line, as ``insert`` names it), its source location and the names of the regions
around it (loop nesting), never the IR hash or scope id. Regions left over are matched once
more without line numbers and nesting (a line inserted above moves every region below it),
in source order, then listed as present on one side only.
"""

from __future__ import annotations

import json
import os
import re
import warnings
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from proton_inject.analyze.report import (
    DecodeWarning,
    LaunchData,
    expand_inputs,
    iter_decoded,
    launches_from_trace,
    progress_bar,
)
from proton_inject.analyze.summary import summarize
from proton_inject.errors import UserError
from proton_inject.formats.schema import not_found, read_head, read_json

DIFF_FORMAT = "proton-inject-diff"
DIFF_VERSION = 1
RESAMPLES = 400  # bootstrap resamples per region and side
CONFIDENCE = 0.95
# Instances per region and side that the bootstrap draws from (a random subset, seeded, of
# more): bounds memory on runs of thousands of launches; the subset only widens the interval.
# 400 resamples of 200,000 instances in 1,024 CTAs take ~0.1 s (boot_medians).
MAX_BOOT_INSTANCES = 200_000
# With this many launches of a kernel or more, launches are resampled (their differences are
# noise too); with fewer, the CTAs of all launches are.
LAUNCH_CLUSTERS = 8
# A change smaller than this (%) is "within noise" whatever the interval says. Not measured
# yet (issue 30's H100 goal: two profiles of one program); docs/overhead.md saw short-CTA
# kernel times move by a few percent between runs, which one run's CTAs cannot show.
MIN_CHANGE_PCT = 1.0
UNITS = ("cycles", "ns")
SLOWER, FASTER, SAME, NA = "slower", "faster", "within noise", "n/a"
# The bootstrap's resolution: sorted instances in this many bins of equal rank (the median
# is interpolated inside its bin), clusters dealt into at most this many groups.
BINS = 2048
MAX_CLUSTERS = 4096


# --- one side --------------------------------------------------------------------------------


@dataclass
class RegionSide:
    """One region of one kernel on one side."""

    name: str
    loc: str | None
    path: tuple[str, ...]  # names of the enclosing regions, outermost first
    count: int
    median: float
    p95: float
    values: np.ndarray | None = None  # instances (a subset of at most MAX_BOOT_INSTANCES)
    clusters: np.ndarray | None = None  # per instance: its CTA (or launch), 0..n-1
    n_clusters: int = 0
    resampled: str | None = None  # "CTAs" | "launches"


@dataclass
class KernelSide:
    """One (kernel, config) of one side."""

    kernel: str
    config: str | None
    launches: list[int]
    grid: list[int]
    regions: list[RegionSide]


@dataclass
class Side:
    """What one input holds."""

    path: str
    instances: bool  # False: summaries only (a report --json file)
    kernels: list[KernelSide]


@dataclass
class _Acc:
    """Instances of one (kernel, config) collected launch by launch."""

    first: LaunchData
    slim: list[LaunchData] = field(default_factory=list)
    values: dict[int, list[np.ndarray]] = field(default_factory=dict)
    ctas: dict[int, list[np.ndarray]] = field(default_factory=dict)
    launch: dict[int, list[np.ndarray]] = field(default_factory=dict)


def is_report_json(path: Path) -> bool:
    """Whether ``path`` is a file written by ``report --json``."""
    if not (path.is_file() and path.suffix == ".json"):
        return False
    return b'"proton-inject-report"' in read_head(path, 4096)


def load_side(path: str | os.PathLike, unit: str = "cycles", seed: int = 0,
              progress: bool = False) -> Side:
    """Decode one input (raw launches or traces) or read a ``report --json`` file;
    ``progress``: a bar on stderr while decoding, when stderr is a terminal."""
    p = Path(path)
    if not p.is_file() and not p.is_dir():
        raise not_found(p)
    if is_report_json(p):
        return _side_from_summary(p, read_json(p, "report", "write it again with "
                                               "`proton-inject report RUN --json > FILE`"), unit)
    raws, traces = expand_inputs([p])
    rng = np.random.default_rng(seed)
    per_launch = max(256, 4 * MAX_BOOT_INSTANCES // max(1, len(raws) + len(traces)))
    groups: dict[tuple[str, str | None], _Acc] = {}

    def take(x: LaunchData) -> None:
        acc = groups.setdefault((x.kernel, x.config), _Acc(x))
        v = x.cycles if unit == "cycles" else x.dur_ns
        for s in np.unique(x.scope).tolist():
            k = np.flatnonzero(x.scope == s)
            if len(k) > per_launch:
                k = np.sort(rng.choice(k, per_launch, replace=False))
            acc.values.setdefault(s, []).append(np.asarray(v[k], np.float64))
            acc.ctas.setdefault(s, []).append(np.asarray(x.cta[k], np.int64))
            # the launch's place among this kernel's (launch numbers repeat across ranks)
            acc.launch.setdefault(s, []).append(np.full(len(k), len(acc.slim), np.int64))
        acc.slim.append(x.slim())

    with warnings.catch_warnings():  # report says them; diff is about timings
        warnings.simplefilter("ignore", DecodeWarning)
        with progress_bar(len(raws), f"{p.name}: decoding", progress) as bar:
            for d in iter_decoded(raws):
                x = LaunchData.from_decoded(d)
                del d
                take(x)
                bar.update()
        for t in traces:
            for x in launches_from_trace(t):
                take(x)
    if not groups:
        raise UserError(f"{p}: no launches found")
    kernels = []
    for acc in groups.values():
        [k] = summarize(acc.slim)["kernels"]
        first = acc.first
        regions = []
        for r in k["regions"]:
            s = r["scope"]
            st = r[unit]
            rs = RegionSide(name=_plain_name(r["name"]), loc=r.get("loc"),
                            path=_path(s, first.scopes, first.scope_parents), count=r["count"],
                            median=st["median"], p95=st["p95"])
            if s in acc.values:
                _attach_instances(rs, acc, s, len(acc.slim), rng)
            regions.append(rs)
        kernels.append(KernelSide(kernel=k["kernel"], config=k["config"], launches=k["launches"],
                                  grid=k["grid"], regions=regions))
    return Side(path=str(p), instances=True, kernels=kernels)


def _attach_instances(rs: RegionSide, acc: _Acc, s: int, n_launches: int,
                      rng: np.random.Generator) -> None:
    values = np.concatenate(acc.values[s])
    launch = np.concatenate(acc.launch[s])
    if n_launches >= LAUNCH_CLUSTERS:
        key, rs.resampled = launch, "launches"
    else:
        key, rs.resampled = launch * (1 << 32) + np.concatenate(acc.ctas[s]), "CTAs"
    if len(values) > MAX_BOOT_INSTANCES:
        k = rng.choice(len(values), MAX_BOOT_INSTANCES, replace=False)
        values, key = values[k], key[k]
    ids, clusters = np.unique(key, return_inverse=True)
    rs.values, rs.clusters, rs.n_clusters = values, clusters.astype(np.int64), len(ids)


def _side_from_summary(p: Path, doc: Any, unit: str) -> Side:
    """A ``report --json`` file: numbers per region, no instances."""
    if not isinstance(doc, dict) or not isinstance(doc.get("kernels"), list):
        raise UserError(f"{p}: not a `report --json` file (no 'kernels' list)")
    kernels = []
    try:
        for k in doc["kernels"]:
            by_scope = {r["scope"]: r for r in k["regions"]}
            names = {s: _plain_name(r["name"]) for s, r in by_scope.items()}
            parents = {s: r["parent"] for s, r in by_scope.items() if r.get("parent") is not None}
            regions = [RegionSide(name=names[s], loc=r.get("loc"), path=_path(s, names, parents),
                                  count=r["count"], median=r[unit]["median"], p95=r[unit]["p95"])
                       for s, r in by_scope.items()]
            kernels.append(KernelSide(kernel=k["kernel"], config=k.get("config"),
                                      launches=list(k.get("launches") or []),
                                      grid=list(k.get("grid") or []), regions=regions))
    except (KeyError, TypeError, AttributeError) as e:
        raise UserError(f"{p}: a kernel or region of this report lacks {e}; write it again with "
                        "`proton-inject report RUN --json > FILE`") from None
    return Side(path=str(p), instances=False, kernels=kernels)


def _plain_name(name: str) -> str:
    """A region's name without the report's ``[scope id]`` suffix (ids move between builds)."""
    return re.sub(r" \[\d+\]$", "", name)


def _path(s: int, names: dict[int, str], parents: dict[int, int]) -> tuple[str, ...]:
    out: list[str] = []
    seen = {s}
    p = parents.get(s)
    while p is not None and p not in seen and p in names:
        seen.add(p)
        out.append(_plain_name(names[p]))
        p = parents.get(p)
    return tuple(reversed(out))


# --- matching --------------------------------------------------------------------------------


def config_key(config: str | None) -> str:
    """A config name order-free ("BLOCK=64, num_warps=4" == "num_warps=4, BLOCK=64")."""
    if not config:
        return ""
    tuning = config.startswith("[tuning] ")
    parts = sorted(p.strip() for p in config.removeprefix("[tuning] ").split(",") if p.strip())
    return ("[tuning] " if tuning else "") + ", ".join(parts)


def _exact_keys(regions: list[RegionSide]) -> list[tuple]:
    seen: dict[tuple, int] = {}
    out = []
    for r in regions:
        k = (r.name, r.loc, r.path)
        seen[k] = seen.get(k, 0) + 1
        out.append((*k, seen[k]))
    return out


_LINE = re.compile(r"(@?[\w./-]+\.\w+):\d+")


def _loose(r: RegionSide) -> tuple:
    """A region's identity without line numbers, ``#n`` or nesting (a report --json file
    knows no enclosing region that had no complete instance)."""
    def strip(s: str | None) -> str:
        return re.sub(r" #\d+$", "", _LINE.sub(r"\1", s or ""))
    return strip(r.name), strip(r.loc)


def _line_of(r: RegionSide) -> int:
    m = re.search(r":(\d+)$", r.loc or "")
    return int(m.group(1)) if m else 0


def match_regions(base: list[RegionSide], new: list[RegionSide]
                  ) -> tuple[list[tuple[RegionSide, RegionSide, bool]], list[RegionSide], list[RegionSide]]:
    """Pairs (base, new, moved), then regions of base only and of new only."""
    nk = dict(zip(_exact_keys(new), new, strict=True))
    pairs: list[tuple[RegionSide, RegionSide, bool]] = []
    left_b: list[RegionSide] = []
    for k, r in zip(_exact_keys(base), base, strict=True):
        if k in nk:
            pairs.append((r, nk.pop(k), False))
        else:
            left_b.append(r)
    left_n = [r for r in new if any(r is v for v in nk.values())]
    # again without line numbers: pair in source order within each name
    gb: dict[tuple, list[RegionSide]] = {}
    gn: dict[tuple, list[RegionSide]] = {}
    for r in left_b:
        gb.setdefault(_loose(r), []).append(r)
    for r in left_n:
        gn.setdefault(_loose(r), []).append(r)
    only_b, only_n = [], []
    for key, rb in gb.items():
        rn = gn.pop(key, [])
        if len(rb) == len(rn):
            for a, b in zip(sorted(rb, key=_line_of), sorted(rn, key=_line_of), strict=True):
                pairs.append((a, b, True))
        else:
            only_b += rb
            only_n += rn
    for rn in gn.values():
        only_n += rn
    order = {id(r): i for i, r in enumerate(base)}
    pairs.sort(key=lambda t: order[id(t[0])])
    return pairs, only_b, only_n


def match_kernels(base: Side, new: Side
                  ) -> tuple[list[tuple[KernelSide, KernelSide]], list[KernelSide], list[KernelSide]]:
    """(kernel, config) pairs; a kernel left with one config on each side is paired anyway
    (its configs differ: said in the output)."""
    nk: dict[tuple[str, str], KernelSide] = {(k.kernel, config_key(k.config)): k for k in new.kernels}
    pairs, left_b = [], []
    for k in base.kernels:
        got = nk.pop((k.kernel, config_key(k.config)), None)
        if got is not None:
            pairs.append((k, got))
        else:
            left_b.append(k)
    only_b = []
    for k in left_b:
        same_b = [b for b in left_b if b.kernel == k.kernel]
        same_n = [key for key in nk if key[0] == k.kernel]
        if len(same_b) == 1 and len(same_n) == 1:
            pairs.append((k, nk.pop(same_n[0])))
        else:
            only_b.append(k)
    return pairs, only_b, list(nk.values())


# --- statistics ------------------------------------------------------------------------------


def boot_medians(values: np.ndarray, clusters: np.ndarray, n_clusters: int, resamples: int,
                 rng: np.random.Generator) -> np.ndarray:
    """Medians of ``resamples`` cluster-bootstrap resamples: each draws ``n_clusters``
    clusters with replacement and takes the median of their instances.

    Vectorized: the sorted instances fall into ``BINS`` bins of equal rank; a table holds how
    many instances of each cluster lie in each bin, so one matrix product gives every
    resample's histogram, and its median is read where the cumulated count passes half,
    interpolated by rank inside that bin. More than ``MAX_CLUSTERS`` clusters are first
    dealt at random into that many groups (independent clusters grouped keep their variance)."""
    n = len(values)
    v = np.sort(values, kind="stable")
    c = clusters[np.argsort(values, kind="stable")]
    k = n_clusters
    if k > MAX_CLUSTERS:
        c = rng.permutation(k)[c] % MAX_CLUSTERS
        k = MAX_CLUSTERS
    nb = min(n, BINS)
    start = (np.arange(nb + 1) * n) // nb  # bin j holds sorted instances start[j]..start[j+1]-1
    bin_of = np.repeat(np.arange(nb), np.diff(start))
    table = np.bincount(c * nb + bin_of, minlength=k * nb).reshape(k, nb).astype(np.float32)
    draws = rng.integers(0, k, (resamples, k))
    counts = np.bincount((draws + np.arange(resamples)[:, None] * k).ravel(),
                         minlength=resamples * k).reshape(resamples, k).astype(np.float32)
    hist = counts @ table  # resamples x bins (exact: integers below 2^24)
    cum = np.cumsum(hist, axis=1)
    half = cum[:, -1] / 2
    j = np.minimum((cum < half[:, None]).sum(axis=1), nb - 1)
    rows = np.arange(resamples)
    before = np.where(j > 0, cum[rows, np.maximum(j - 1, 0)], 0.0)
    inside = np.clip((half - before) / np.maximum(hist[rows, j], 1.0), 0.0, 1.0)
    rank = start[j] + inside * (start[j + 1] - start[j]) - 0.5
    return np.interp(np.clip(rank, 0, n - 1), np.arange(n), v)


def _seed_of(seed: int, *parts: Any) -> int:
    """A region's own seed: its numbers do not depend on which other regions are compared."""
    return zlib.crc32(repr((seed, *parts)).encode())


def compare(a: RegionSide, b: RegionSide, resamples: int, seed: int, key: tuple,
            threshold: float) -> dict[str, Any]:
    """Change of the median in %, its interval and the verdict for one matched region."""
    change = (b.median / a.median - 1) * 100 if a.median > 0 else None
    interval = None
    why = None
    if change is not None and a.values is not None and b.values is not None:
        if min(a.n_clusters, b.n_clusters) < 2:
            why = "one CTA or launch on a side: nothing to resample"
        else:
            rng = np.random.default_rng(_seed_of(seed, *key))
            ma = boot_medians(a.values, a.clusters, a.n_clusters, resamples, rng)
            mb = boot_medians(b.values, b.clusters, b.n_clusters, resamples, rng)
            ok = ma > 0
            r = (mb[ok] / ma[ok] - 1) * 100
            if len(r) >= resamples // 2:
                q = (1 - CONFIDENCE) / 2
                centre = float(np.median(r))
                lo, hi = np.quantile(r - centre, [q, 1 - q])
                interval = [change + float(lo), change + float(hi)]
            else:
                why = "base medians of 0 in the resamples"
    elif change is None:
        why = "base median is 0"
    else:
        why = "summary only"
    return {"change_pct": change, "interval_pct": interval, "no_interval": why,
            "verdict": verdict(change, interval, threshold)}


def verdict(change: float | None, interval: list[float] | None, threshold: float) -> str:
    """Slower when the whole interval (or the change, without one) lies above ``threshold``
    percent, faster when below ``-threshold``, else within noise."""
    if change is None:
        return NA
    lo, hi = interval if interval is not None else (change, change)
    if lo > threshold:
        return SLOWER
    if hi < -threshold:
        return FASTER
    return SAME


def _lower_bound(row: dict[str, Any]) -> float | None:
    if row["change_pct"] is None:
        return None
    return row["interval_pct"][0] if row["interval_pct"] is not None else row["change_pct"]


# --- the command -----------------------------------------------------------------------------


@dataclass
class DiffResult:
    """What ``diff`` produced: the comparison as a JSON-ready dict, rendered, and its exit
    code (1: a region slower than ``--fail-above`` beyond noise)."""

    data: dict[str, Any]
    text: str
    exit_code: int


def run_diff(base: str | os.PathLike, new: str | os.PathLike, unit: str = "cycles",
             fail_above: float | None = None, min_change: float = MIN_CHANGE_PCT,
             resamples: int = RESAMPLES, seed: int = 0, fmt: str = "text",
             progress: bool = False) -> DiffResult:
    """Compare two runs region by region (see the module's docstring)."""
    if unit not in UNITS:
        raise UserError(f"--unit {unit}: give one of {', '.join(UNITS)}")
    if resamples < 20:
        raise UserError(f"--resamples {resamples}: give at least 20 (the default is {RESAMPLES})")
    if fail_above is not None and fail_above < 0:
        raise UserError(f"--fail-above {fail_above}: give a percentage >= 0 (e.g. 5)")
    if min_change < 0:
        raise UserError(f"--min-change {min_change}: give a percentage >= 0")
    sides = [load_side(p, unit, seed, progress) for p in (base, new)]
    data = diff_sides(*sides, unit=unit, fail_above=fail_above, min_change=min_change,
                      resamples=resamples, seed=seed)
    return render(data, fmt)


def render(data: dict[str, Any], fmt: str = "text") -> DiffResult:
    """``diff_sides``' comparison as text, Markdown or JSON, with its exit code."""
    text = (json.dumps(data, indent=1) if fmt == "json" else format_markdown(data)
            if fmt == "markdown" else format_text(data))
    return DiffResult(data=data, text=text, exit_code=1 if data["failed"] else 0)


def diff_sides(base: Side, new: Side, unit: str = "cycles", fail_above: float | None = None,
               min_change: float = MIN_CHANGE_PCT, resamples: int = RESAMPLES,
               seed: int = 0) -> dict[str, Any]:
    """The comparison of two loaded sides as a JSON-ready dict."""
    pairs, kb, kn = match_kernels(base, new)
    kernels = []
    failed = []
    counts = {SLOWER: 0, FASTER: 0, SAME: 0, NA: 0, "only_base": 0, "only_new": 0}
    for a, b in pairs:
        rp, ob, on = match_regions(a.regions, b.regions)
        rows = []
        for ra, rb, moved in rp:
            key = (a.kernel, config_key(a.config), rb.name, rb.loc, rb.path)
            cmp = compare(ra, rb, resamples, seed, key, min_change)
            row = {
                "name": rb.name, "loc": rb.loc, "path": list(rb.path),
                "kind": rb.name.split(" ")[0],
                "moved_from": ra.loc if moved and ra.loc != rb.loc else None,
                "base": _side_json(ra), "new": _side_json(rb), **cmp,
            }
            counts[row["verdict"]] += 1
            lo = _lower_bound(row)
            if fail_above is not None and lo is not None and lo > fail_above:
                failed.append(f"{a.kernel}: {rb.name}" + (f" ({rb.loc})" if rb.loc else "") +
                              f" {row['change_pct']:+.1f}%")
            rows.append(row)
        counts["only_base"] += len(ob)
        counts["only_new"] += len(on)
        kernels.append({
            "kernel": a.kernel, "config_base": a.config, "config_new": b.config,
            "configs_differ": config_key(a.config) != config_key(b.config),
            "launches_base": len(a.launches), "launches_new": len(b.launches),
            "grid_base": a.grid, "grid_new": b.grid,
            "regions": rows,
            "only_base": [_only_json(r) for r in ob], "only_new": [_only_json(r) for r in on],
        })
    notes = []
    summary_only = [s.path for s in (base, new) if not s.instances]
    if summary_only:
        notes.append(f"summary data only for {' and '.join(summary_only)} (a report --json "
                     "file holds no region instances): no noise interval; verdicts compare "
                     "the change itself. Give the run directories for intervals.")
    return {
        "format": DIFF_FORMAT, "version": DIFF_VERSION,
        "base": base.path, "new": new.path, "unit": unit,
        "statistic": "median per region instance",
        "interval": {"confidence": CONFIDENCE, "resamples": resamples, "seed": seed,
                     "method": "bootstrap of each side's median over its CTAs (launches when "
                               f"a kernel has {LAUNCH_CLUSTERS} or more), sides resampled "
                               "independently",
                     "instances": base.instances and new.instances},
        "min_change_pct": min_change, "fail_above_pct": fail_above,
        "kernels": kernels,
        "kernels_only_base": [_kernel_only(k) for k in kb],
        "kernels_only_new": [_kernel_only(k) for k in kn],
        "counts": counts, "failed": failed, "notes": notes,
    }


def _side_json(r: RegionSide) -> dict[str, Any]:
    return {"count": r.count, "median": r.median, "p95": r.p95,
            "resampled": None if r.values is None else f"{r.n_clusters} {r.resampled}"}


def _only_json(r: RegionSide) -> dict[str, Any]:
    return {"name": r.name, "loc": r.loc, "path": list(r.path), "count": r.count,
            "median": r.median, "p95": r.p95}


def _kernel_only(k: KernelSide) -> dict[str, Any]:
    return {"kernel": k.kernel, "config": k.config, "launches": len(k.launches),
            "regions": len(k.regions)}


# --- text and Markdown -----------------------------------------------------------------------


def _num(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:,.1f}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:+.1f}%"


def _interval(row: dict[str, Any]) -> str:
    iv = row["interval_pct"]
    if iv is None:
        return f"({row['no_interval']})" if row.get("no_interval") else "-"
    return f"[{iv[0]:+.1f}, {iv[1]:+.1f}]%"


def _label(row: dict[str, Any]) -> str:
    indent = "  " * len(row["path"])
    loc = row["loc"] if row["loc"] and row["loc"] not in row["name"] else None
    moved = f", was {row['moved_from']}" if row.get("moved_from") else ""
    return indent + row["name"] + (f" ({loc}{moved})" if loc else f" ({moved[2:]})" if moved else "")


def _kernel_title(k: dict[str, Any]) -> str:
    cfg = k["config_new"] or k["config_base"]
    head = k["kernel"] + (f" [{cfg}]" if cfg else "")
    nb, nn = k["launches_base"], k["launches_new"]
    head += f": {nb} launch{'es' if nb != 1 else ''} -> {nn}"
    notes = []
    if k["configs_differ"]:
        notes.append(f"configs differ: base [{k['config_base'] or '-'}], new [{k['config_new'] or '-'}]")
    if k["grid_base"] and k["grid_new"] and k["grid_base"] != k["grid_new"]:
        notes.append(f"grids differ: {'x'.join(map(str, k['grid_base']))} -> "
                     f"{'x'.join(map(str, k['grid_new']))}")
    return head + ("; " + "; ".join(notes) if notes else "")


def _head_line(d: dict[str, Any]) -> str:
    iv = d["interval"]
    how = (f"{int(iv['confidence'] * 100)}% interval of the change: {iv['resamples']} bootstrap "
           f"resamples per side (seed {iv['seed']})" if iv["instances"] else "no noise interval")
    fail = f"; fails above +{d['fail_above_pct']:g}% beyond noise" if d["fail_above_pct"] is not None else ""
    return (f"{d['base']} -> {d['new']}: median {d['unit']} per region instance; {how}; "
            f"changes within +-{d['min_change_pct']:g}% are within noise{fail}")


def _counts_line(d: dict[str, Any]) -> str:
    c = d["counts"]
    parts = [f"{c[SLOWER]} slower", f"{c[FASTER]} faster", f"{c[SAME]} within noise"]
    if c[NA]:
        parts.append(f"{c[NA]} not comparable")
    parts += [f"{c['only_base']} only in base", f"{c['only_new']} only in new"]
    if d["kernels_only_base"] or d["kernels_only_new"]:
        parts.append(f"kernels only in base {len(d['kernels_only_base'])}, only in new "
                     f"{len(d['kernels_only_new'])}")
    return "regions: " + ", ".join(parts)


HEADER = ["region", "base n", "new n", "base median", "new median", "base p95", "new p95",
          "change", "interval", "verdict"]


def _row_cells(row: dict[str, Any]) -> list[str]:
    a, b = row["base"], row["new"]
    return [_label(row), f"{a['count']:,}", f"{b['count']:,}", _num(a["median"]),
            _num(b["median"]), _num(a["p95"]), _num(b["p95"]), _pct(row["change_pct"]),
            _interval(row), row["verdict"]]


def _only_lines(k: dict[str, Any], side: str) -> list[str]:
    return [f"only in {side}: {r['name']}" + (f" ({r['loc']})" if r["loc"] and r["loc"] not in r["name"]
                                              else "") +
            f": {r['count']:,} instances, median {_num(r['median'])}"
            for r in k[f"only_{side}"]]


def format_text(d: dict[str, Any]) -> str:
    """Tables, one per kernel, with the verdict of each region."""
    out = [_head_line(d), ""]
    for k in d["kernels"]:
        out.append(_kernel_title(k))
        rows = [_row_cells(r) for r in k["regions"]]
        widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(HEADER)]
        for cells in [HEADER, *rows]:
            out.append("  " + "  ".join(v.ljust(w) if i in (0, 9) else v.rjust(w)
                                        for i, (v, w) in enumerate(zip(cells, widths, strict=True))
                                        ).rstrip())
        out += ["  " + line for side in ("base", "new") for line in _only_lines(k, side)]
        out.append("")
    for side in ("base", "new"):
        for k in d[f"kernels_only_{side}"]:
            cfg = f" [{k['config']}]" if k["config"] else ""
            out.append(f"kernel only in {side}: {k['kernel']}{cfg} ({k['launches']} launches, "
                       f"{k['regions']} regions)")
    out.append(_counts_line(d))
    out += [f"note: {n}" for n in d["notes"]]
    if d["failed"]:
        out.append(f"FAILED: {len(d['failed'])} region(s) slower than +{d['fail_above_pct']:g}% "
                   f"beyond noise: {'; '.join(d['failed'])}")
    return "\n".join(out)


def format_markdown(d: dict[str, Any]) -> str:
    """The same as a pull-request comment: a table per kernel."""
    def cell(s: str) -> str:
        return s.replace("|", "\\|")

    out = ["### proton-inject diff", "", cell(_head_line(d)), ""]
    if d["failed"]:
        out += [f"**FAILED**: {len(d['failed'])} region(s) slower than +{d['fail_above_pct']:g}% "
                f"beyond noise: {cell('; '.join(d['failed']))}", ""]
    out += [_counts_line(d), ""]
    for k in d["kernels"]:
        out += [f"#### {cell(_kernel_title(k))}", "",
                "| " + " | ".join(HEADER) + " |", "|" + "|".join(
                    ["---"] + ["---:"] * 8 + ["---"]) + "|"]
        for r in k["regions"]:
            cells = _row_cells(r)
            cells[0] = "&nbsp;" * 2 * len(r["path"]) + cells[0].strip()
            if r["verdict"] in (SLOWER, FASTER):
                cells[9] = f"**{cells[9]}**"
            out.append("| " + " | ".join(cell(c) for c in cells) + " |")
        only = [line for side in ("base", "new") for line in _only_lines(k, side)]
        if only:
            out += [""] + [f"- {cell(line)}" for line in only]
        out.append("")
    for side in ("base", "new"):
        for k in d[f"kernels_only_{side}"]:
            cfg = f" [{k['config']}]" if k["config"] else ""
            out.append(f"- kernel only in {side}: `{k['kernel']}`{cell(cfg)} ({k['launches']} "
                       f"launches, {k['regions']} regions)")
    out += [f"> note: {cell(n)}" for n in d["notes"]]
    return "\n".join(out).rstrip() + "\n"
