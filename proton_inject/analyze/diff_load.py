"""One side of ``diff``: an input decoded (by the report's own pipeline) or a ``report --json``
file read, as its kernels and regions with their counts, medians, p95 and, from raw launches
or traces, a bounded sample of region instances for the bootstrap."""

from __future__ import annotations

import os
import re
import warnings
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
from proton_inject.formats.raw import unify_locs
from proton_inject.formats.schema import is_number, not_found, read_head, read_json, shown

# Instances per region and side that the bootstrap draws from (a random subset, seeded, of
# more): bounds memory on runs of thousands of launches; the subset only widens the interval.
# 400 resamples of 200,000 instances in 1,024 CTAs take ~0.1 s (boot_medians).
MAX_BOOT_INSTANCES = 200_000
# With this many launches of a kernel or more, launches are resampled (their differences are
# noise too); with fewer, the CTAs of all launches are.
LAUNCH_CLUSTERS = 8


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
    kind: str | None = None  # its region kind, where its launches recorded it


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
                            median=st["median"], p95=st["p95"], kind=r.get("kind"))
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
            locs = unify_locs({s: r["loc"] for s, r in by_scope.items() if r.get("loc")})
            parents = {s: r["parent"] for s, r in by_scope.items() if r.get("parent") is not None}
            regions = [RegionSide(name=names[s], loc=locs.get(s), path=_path(s, names, parents),
                                  count=r["count"], median=_finite(p, k, r, unit, "median"),
                                  p95=_finite(p, k, r, unit, "p95"),
                                  kind=r["kind"] if isinstance(r.get("kind"), str) else None)
                       for s, r in by_scope.items()]
            kernels.append(KernelSide(kernel=k["kernel"], config=k.get("config"),
                                      launches=list(k.get("launches") or []),
                                      grid=list(k.get("grid") or []), regions=regions))
    except (KeyError, TypeError, AttributeError) as e:
        raise UserError(f"{p}: a kernel or region of this report lacks {e}; write it again with "
                        "`proton-inject report RUN --json > FILE`") from None
    return Side(path=str(p), instances=False, kernels=kernels)


def _finite(p: Path, k: dict, r: dict, unit: str, key: str) -> float:
    """``r[unit][key]``, a region's number in a ``report --json`` file, checked finite."""
    v = r[unit][key]
    if not is_number(v):
        raise UserError(f"{p}: kernel {k['kernel']}, region {r['name']}: {unit} {key} = {shown(v)} "
                        "must be a finite number; write it again with `proton-inject report RUN "
                        "--json > FILE`")
    return float(v)


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

