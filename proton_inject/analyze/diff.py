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
from dataclasses import dataclass
from typing import Any

from proton_inject.analyze.diff_load import (
    LAUNCH_CLUSTERS,
    KernelSide,
    RegionSide,
    Side,
    load_side,
)
from proton_inject.analyze.diff_stats import (
    CONFIDENCE,
    FASTER,
    MIN_CHANGE_PCT,
    NA,
    RESAMPLES,
    SAME,
    SLOWER,
    compare,
)
from proton_inject.analyze.diff_text import format_markdown, format_text
from proton_inject.errors import UserError

DIFF_FORMAT = "proton-inject-diff"
DIFF_VERSION = 1
UNITS = ("cycles", "ns")


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


def _lower_bound(row: dict[str, Any]) -> float | None:
    if row["change_pct"] is None:
        return None
    return row["interval_pct"][0] if row["interval_pct"] is not None else row["change_pct"]


# --- the command -----------------------------------------------------------------------------


@dataclass
class DiffResult:
    """What ``diff`` produced: the comparison as a JSON-ready dict, rendered, and its exit
    code (1: a region slower than ``--fail-above`` beyond noise; 2: no region in both runs,
    with ``error`` saying so: a gate that compared nothing must not pass)."""

    data: dict[str, Any]
    text: str
    exit_code: int
    error: str | None = None


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
    error = nothing_compared(data)
    return DiffResult(data=data, text=text, exit_code=2 if error else 1 if data["failed"] else 0,
                      error=error)


def nothing_compared(data: dict[str, Any]) -> str | None:
    """Why nothing was compared, when no region ran in both runs, else None."""
    if any(k["regions"] for k in data["kernels"]):
        return None

    def names(side: str) -> str:
        got = sorted({k["kernel"] for k in data[f"kernels_only_{side}"]}
                     | {k["kernel"] for k in data["kernels"] if k[f"only_{side}"]})
        return ", ".join(got) or "none"
    return (f"diff: {data['base']} and {data['new']} have no region in common, so nothing was "
            f"compared (kernels in base: {names('base')}; in new: {names('new')}); give two runs "
            "of the same program and rules")


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
                # its region kind; for launches recorded without kinds, its name's first word
                "kind": rb.kind or rb.name.split(" ")[0],
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

