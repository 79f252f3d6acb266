"""Per-kernel numbers: ``LaunchData`` (one launch's region instances and CTA times),
``launch_part`` (what one launch adds to the summary, without its instances) and ``Summary``
(launches merged as they come, in memory that does not grow with their instances: quantiles
from ``sketch.py``), giving the JSON-ready summary: per region its launches, instances,
cycles and ns (p5, median, p95, total), share, and across ranks the slowest; per kernel its
CTAs, time, clocks, drops and issues. ``summarize`` does it all for a list of launches.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from proton_inject.analyze.clock_sources import MEASURED
from proton_inject.analyze.decode import Decoded
from proton_inject.analyze.launch_groups import LaunchGroups
from proton_inject.analyze.sketch import BITS, FIXED, Dist, Sketch, coarsen, fixed, keys
from proton_inject.analyze.summary_schema import KernelSummary, RegionRow, ReportSummary
from proton_inject.analyze.uncertainty import add_uncertainty
from proton_inject.formats import diagnostics
from proton_inject.formats.diagnostics import Issue
from proton_inject.formats.region_kinds import UNKNOWN

# Per-warp (or per-warp-group) medians differing by more than this get their own rows.
SPLIT_THRESHOLD = 0.10
# Per-warp (group) medians only decide whether those rows are shown and are printed to the
# cycle: 2**-9 (0.2%) of precision keeps their sketches at 512 bins an octave.
UNIT_BITS = 9
# A CTA whose records span more than this times its timer lifetime (plus a timer tick at each
# end) on the launch's clock is reported: on a guessed clock, the clock is then too slow.
OVERLONG_TOL = 1.02


@dataclass
class LaunchHead:
    """What names a launch and its regions: kernel, launch number, config, grid, warps, the
    scopes' names, parents and source locations, and the clock that turns cycles into ns."""

    kernel: str
    launch: int
    config: str | None
    grid: list[int]
    num_warps: int
    scopes: dict[int, str]
    scope_parents: dict[int, int]
    scope_locs: dict[int, str]
    clock: dict[str, Any]


@dataclass
class LaunchData(LaunchHead):
    """Region instances of one launch, in the form the report needs."""

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
    scope_kinds: dict[int, str] | None = None  # LaunchMeta.scope_kinds (None: not recorded)
    cta_time: tuple[float, int, int, float, int, int, float] | None = None  # _cta_time, once slimmed

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
            scope_kinds=m.scope_kinds,
        )


    def slim(self) -> LaunchData:
        """This launch as ``summarize`` needs it, in less memory: per-CTA numbers folded into
        ``cta_time``, start times and CTA/SM ids dropped, integers narrowed (16 bytes per
        region instance instead of ~120: ``diff`` keeps its launches so)."""
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


@dataclass
class UnitAcc:
    """One warp's (or warp group's) instances of a region: their count, cycles and ns."""

    n: int = 0
    cycles: Sketch = field(default_factory=lambda: Sketch(UNIT_BITS))
    ns: Sketch = field(default_factory=lambda: Sketch(UNIT_BITS))

    def merge(self, o: UnitAcc) -> None:
        self.n += o.n
        self.cycles.merge(o.cycles)
        self.ns.merge(o.ns)


@dataclass
class RegionAcc:
    """One region's instances over some launches, in bounded memory (``sketch.Dist``): a
    launch's own, or a kernel's launches ``add``ed (their objects are read, never kept)."""

    launches: int = 0
    cycles: Dist = field(default_factory=Dist)
    ns: Dist = field(default_factory=Dist)
    units: dict[int, UnitAcc] = field(default_factory=dict)
    ranks: dict[int, tuple[Dist, Dist]] = field(default_factory=dict)  # rank: cycles, ns

    def add(self, o: RegionAcc, rank: int | None) -> None:
        """Merge one launch's region (of ``rank``)."""
        self.launches += o.launches
        self.cycles.merge(o.cycles)
        self.ns.merge(o.ns)
        for u, acc in o.units.items():
            self.units.setdefault(u, UnitAcc()).merge(acc)
        if rank is not None:
            c, n = self.ranks.setdefault(rank, (Dist(), Dist()))
            c.merge(o.cycles)
            n.merge(o.ns)

    def merge(self, o: RegionAcc) -> None:
        """Merge another accumulator of the same region (its ranks with it)."""
        self.add(o, None)
        for r, (c, n) in o.ranks.items():
            mine = self.ranks.setdefault(r, (Dist(), Dist()))
            mine[0].merge(c)
            mine[1].merge(n)


@dataclass
class LaunchPart(LaunchHead):
    """What one launch adds to its kernel's summary: small (no per-instance arrays), so a
    worker process sends it back cheaply and the report keeps none of them."""

    drops: dict[str, Any]
    issues: list[Issue]
    device: str | None
    rank: int | None
    record_cost: float | None
    sampled_warps: list[int] | None
    sample_ctas: int
    sample_iterations: int
    loop_scopes: list[list[int]]
    scope_kinds: dict[int, str] | None
    cta_time: tuple[float, int, int, float, int, int, float]
    regions: dict[int, RegionAcc]


def launch_part(x: LaunchData) -> LaunchPart:
    """One launch's contribution to ``Summary``: per region its statistics, per warp (group)
    sketches, and the launch's CTA time, clock, drops and issues."""
    kept = {f.name: getattr(x, f.name) for f in fields(LaunchPart) if f.name not in ("cta_time", "regions")}
    return LaunchPart(**kept, cta_time=_cta_time(x), regions=_launch_regions(x))


def _group(num_warps: int) -> int:
    """Warps per row of ``per_unit``: warp groups (partitions) for wide CTAs, else warps."""
    return 4 if num_warps > 4 else 1


def _launch_regions(x: LaunchData) -> dict[int, RegionAcc]:
    """Per scope of one launch: its statistics, in a few passes over all its instances (a
    launch may hold a million; a loop per scope would cost more than decoding small ones).
    One sort per measure, of (scope, warp group, bin): the warp groups' coarser bins follow
    in order, and the region's own bins from the distinct triples (far fewer)."""
    if len(x.scope) == 0:
        return {}
    scope = x.scope.astype(np.int64)
    lo = int(scope.min())  # scope ids: small integers, so their index comes from a table
    ids = np.flatnonzero(np.bincount(scope - lo)) + lo
    table = np.zeros(int(ids[-1]) - lo + 1, np.int64)
    table[ids - lo] = np.arange(len(ids))
    sidx = table[scope - lo]
    unit = x.warp.astype(np.int64) // _group(x.num_warps)
    nu = int(unit.max()) + 1
    out = {int(s): RegionAcc(1) for s in ids.tolist()}
    n = np.bincount(sidx, minlength=len(ids)).tolist()
    for attr, v in (("cycles", x.cycles.astype(np.float64)), ("ns", np.asarray(x.dur_ns, np.float64))):
        total = np.bincount(sidx, weights=v, minlength=len(ids)).tolist()
        lo_v, hi_v = np.full(len(ids), np.inf), np.full(len(ids), -np.inf)
        np.minimum.at(lo_v, sidx, v)
        np.maximum.at(hi_v, sidx, v)
        g, k, c = _split(np.unique(_join(sidx * nu + unit, keys(v)), return_counts=True))
        uk = coarsen(k, BITS, UNIT_BITS)  # (in order within each group: coarsening keeps it)
        first = np.flatnonzero(np.r_[True, (g[1:] != g[:-1]) | (uk[1:] != uk[:-1])])
        per_unit = _groups(g[first], uk[first], np.add.reduceat(c, first), len(ids) * nu)
        both, inv = np.unique(_join(g // nu, k), return_inverse=True)
        whole = _groups(*_split((both, np.bincount(inv, weights=c).astype(np.int64))), len(ids))
        for i, s in enumerate(ids.tolist()):
            acc = out[s]
            setattr(acc, attr, Dist(n[i], fixed(total[i]), float(lo_v[i]), float(hi_v[i]),
                                    Sketch(BITS, *whole[i])))
            for u in range(nu):
                k_u, c_u = per_unit[i * nu + u]
                if len(k_u):
                    ua = acc.units.setdefault(u, UnitAcc())
                    ua.n = int(c_u.sum())
                    setattr(ua, attr, Sketch(UNIT_BITS, k_u, c_u))
    return out


_KEY_BITS = 26  # sketch keys lie within +-2**25: a group id above them makes one integer


def _join(group: np.ndarray, k: np.ndarray) -> np.ndarray:
    return (group << _KEY_BITS) | (k + (1 << (_KEY_BITS - 1)))


def _split(uc: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(joined, counts) -> group, key, count."""
    both, counts = uc
    return both >> _KEY_BITS, (both & ((1 << _KEY_BITS) - 1)) - (1 << (_KEY_BITS - 1)), counts


def _groups(g: np.ndarray, k: np.ndarray, c: np.ndarray, n_groups: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per group 0..n_groups-1 (``g`` sorted): its keys and counts."""
    cut = np.searchsorted(g, np.arange(n_groups + 1)).tolist()
    return [(k[a:b], c[a:b]) for a, b in zip(cut[:-1], cut[1:], strict=True)]


class KernelAcc:
    """One (kernel, config)'s launches merged as they come: memory bounded by its regions,
    warps and ranks, plus a few bytes per launch (its number and clock rate: ``LaunchGroups``
    keeps clocks and issues once per group of launches that share them). Sums are
    integers (``sketch.fixed``), so any grouping of the launches gives the same numbers."""

    def __init__(self, first: LaunchPart):
        self.first = replace(first, regions={})  # the kernel's grid, warps, scopes, ...
        self.launches = array("q")
        self.groups = LaunchGroups()  # clocks and issues
        self.costs: set[float | None] = set()
        self.regions: dict[int, RegionAcc] = {}
        self.cta_fixed = self.wall_fixed = 0
        self.ctas = self.ctas_with_records = 0
        # CTAs whose records outlast their timer reads: on guessed / measured clocks, CTAs
        # checked, worst ratio
        self.overlong = [0, 0, 0, 0.0]
        self.rank_wall: dict[int, list[int]] = {}  # rank: launches, wall (fixed) summed
        self.drops = dict.fromkeys(_DROP_SUMS, 0)
        self.needed: int | None = None
        self.buffer_size = 0
        self.buffer_types: set[str | None] = set()

    def add(self, p: LaunchPart) -> None:
        """Merge one launch."""
        self.launches.append(p.launch)
        self.groups.add(p.launch, p.clock, p.issues)
        self.costs.add(p.record_cost)
        t = p.cta_time
        self.cta_fixed += fixed(t[0])
        self.wall_fixed += fixed(t[6])
        self.overlong[1 if p.clock.get("source") in MEASURED else 0] += t[1]
        self.overlong[2] += t[2]
        self.overlong[3] = max(self.overlong[3], t[3])
        self.ctas_with_records += t[4]
        self.ctas += t[5]
        if p.rank is not None:
            w = self.rank_wall.setdefault(p.rank, [0, 0])
            w[0] += 1
            w[1] += fixed(t[6])
        for k in _DROP_SUMS:
            self.drops[k] += p.drops.get(k) or 0
        if p.drops.get("needed_buffer_size"):
            self.needed = max(self.needed or 0, p.drops["needed_buffer_size"])
        self.buffer_size = max(self.buffer_size, p.drops.get("buffer_size") or 0)
        self.buffer_types.add(p.drops.get("buffer_type"))
        for s, r in p.regions.items():
            self.regions.setdefault(s, RegionAcc()).add(r, p.rank)

    def merge(self, o: KernelAcc) -> None:
        """Merge the launches of another accumulator of this kernel, as if added after ours."""
        self.launches += o.launches
        self.groups.merge(o.groups)
        self.costs |= o.costs
        self.cta_fixed += o.cta_fixed
        self.wall_fixed += o.wall_fixed
        self.overlong = [self.overlong[0] + o.overlong[0], self.overlong[1] + o.overlong[1],
                         self.overlong[2] + o.overlong[2], max(self.overlong[3], o.overlong[3])]
        self.ctas_with_records += o.ctas_with_records
        self.ctas += o.ctas
        for r, (n, w) in o.rank_wall.items():
            mine = self.rank_wall.setdefault(r, [0, 0])
            mine[0] += n
            mine[1] += w
        for k in _DROP_SUMS:
            self.drops[k] += o.drops[k]
        if o.needed:
            self.needed = max(self.needed or 0, o.needed)
        self.buffer_size = max(self.buffer_size, o.buffer_size)
        self.buffer_types |= o.buffer_types
        for s, r in o.regions.items():
            self.regions.setdefault(s, RegionAcc()).merge(r)

    def summary(self) -> KernelSummary:
        """The kernel's entry of the report (JSON-ready)."""
        first = self.first
        ranks = sorted(self.rank_wall)
        mhz = self.groups.mhz()
        mhz = mhz[np.isfinite(mhz) & (mhz != 0)]
        clocks = self.groups.clock_groups()
        drops = dict(self.drops, needed_buffer_size=self.needed, buffer_size=self.buffer_size or None,
                     buffer_type=next(iter(self.buffer_types)) if len(self.buffer_types) == 1 else None)
        o = self.overlong
        issues = self.groups.issue_groups()
        out = {
            "kernel": first.kernel,
            "config": first.config,
            "launches": sorted(self.launches),
            "ranks": ranks or None,
            "device": first.device,
            "grid": first.grid,
            "num_warps": first.num_warps,
            "ctas": self.ctas,
            "clock": {
                "sources": sorted({c["source"] for c in clocks}),
                "mhz_median": float(np.median(mhz)) if len(mhz) else None,
                "groups": clocks,
            },
            "kernel_wall_ns": self.wall_fixed / FIXED,
            "cta_time_sum_ns": self.cta_fixed / FIXED,
            "ctas_overlong": {"count": o[0] + o[1], "of": o[2], "on_measured_clock": o[1],
                              "max_ratio": round(o[3], 3) if o[0] + o[1] else None},
            "events": sum(r.cycles.n for r in self.regions.values()),
            "sampled": {
                "warps": first.sampled_warps,
                "every_nth_cta": first.sample_ctas,
                "every_nth_iteration": first.sample_iterations,
                "ctas_with_records": self.ctas_with_records,
            },
            "per_rank": [{"rank": r, "launches": self.rank_wall[r][0],
                          "wall_ns": self.rank_wall[r][1] / FIXED} for r in ranks] or None,
            "slowest_rank": _slowest([(r, self.rank_wall[r][1] / FIXED) for r in ranks]),
            "regions": self._regions(),
            "drops": drops,
            "record_cost_cycles": sorted(self.costs, key=lambda c: -1 if c is None else c),
            "warnings": diagnostics.summarize({first.kernel: len(self.launches)},
                                              [(first.kernel, g.issue) for g in issues
                                               for _ in g.launches]),
            "issues": [g.to_json() for g in issues],
        }
        add_uncertainty(out)
        return out

    def _regions(self) -> list[RegionRow]:
        """A row per region, the longest in total first."""
        first = self.first
        scopes = dict(first.scopes)
        for s in self.regions:
            scopes.setdefault(s, f"scope_{s}")
        counts = {n: list(scopes.values()).count(n) for n in scopes.values()}
        n_of = {s: r.cycles.n for s, r in self.regions.items()}
        held = _iterations_held(first.scope_parents, first.loop_scopes, n_of)
        group = _group(first.num_warps)
        rows = []
        for s in sorted(self.regions):
            r = self.regions[s]
            name = scopes[s] if counts[scopes[s]] == 1 else f"{scopes[s]} [{s}]"
            per_unit = [{
                "unit": f"warp {u}" if group == 1 else f"warps {u * 4}-{u * 4 + 3}",
                "count": acc.n,
                "median_cycles": acc.cycles.quantiles((0.5,))[0],
                "median_ns": acc.ns.quantiles((0.5,))[0],
            } for u, acc in sorted(r.units.items())]
            meds = [p["median_cycles"] for p in per_unit]
            differs = len(meds) > 1 and (max(meds) - min(meds)) > SPLIT_THRESHOLD * max(1.0, max(meds))
            per_rank = [{"rank": k, "count": c.n, "cycles": c.stats(), "ns": n.stats()}
                        for k, (c, n) in sorted(r.ranks.items())] if r.ranks else None
            rows.append({
                "scope": int(s),
                "name": name,
                "loc": first.scope_locs.get(int(s)),
                "parent": first.scope_parents.get(int(s)),
                "launches": r.launches,
                "count": r.cycles.n,
                "cycles": r.cycles.stats(),
                "ns": r.ns.stats(),
                "share": r.ns.sum_fixed / self.cta_fixed if self.cta_fixed > 0 else None,
                "per_unit": per_unit if differs else None,
                "per_rank": per_rank,
                "slowest_rank": _slowest([(p["rank"], p["ns"]["median"]) for p in per_rank or []]),
                "recorded_iterations_inside": held.get(s),
            })
            if first.scope_kinds is not None:  # (launches recorded before kinds were: no key)
                rows[-1]["kind"] = first.scope_kinds.get(int(s), UNKNOWN)
        rows.sort(key=lambda row: -row["ns"]["total"])
        return rows


def _slowest(per_rank: list[tuple[int, float]]) -> dict[str, Any] | None:
    """Across ranks (rank, time): the slowest and how far it is over the fastest, in %; None
    with fewer than two ranks."""
    if len(per_rank) < 2:
        return None
    rank, slow = max(per_rank, key=lambda rt: rt[1])
    fast = min(t for _, t in per_rank)
    return {"rank": rank, "ns": slow, "over_fastest_pct": 100.0 * (slow - fast) / fast if fast > 0 else None}


_DROP_SUMS = ("records_written", "records_dropped", "warps_with_drops", "ctas_with_drops",
              "unmatched_starts", "unmatched_ends")


class Summary:
    """The report built launch by launch: ``add`` each launch's ``LaunchPart`` (any order),
    then ``result``."""

    def __init__(self) -> None:
        self.kernels: dict[tuple[str, str | None], KernelAcc] = {}

    def add(self, p: LaunchPart) -> None:
        acc = self.kernels.get((p.kernel, p.config))
        if acc is None:
            acc = self.kernels[(p.kernel, p.config)] = KernelAcc(p)
        acc.add(p)

    def merge(self, o: Summary) -> None:
        """Add the launches another summary holds (as if added after these)."""
        for key, acc in o.kernels.items():
            if key in self.kernels:
                self.kernels[key].merge(acc)
            else:
                self.kernels[key] = acc

    def result(self) -> ReportSummary:
        """One entry per (kernel, config), in the order of their first launches."""
        accs = sorted(self.kernels.values(), key=lambda a: min(a.launches))
        return {"format": "proton-inject-report", "version": 1,
                "kernels": [a.summary() for a in accs]}


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


def _cta_time(x: LaunchData) -> tuple[float, int, int, float, int, int, float]:
    """One launch's part of its kernel's numbers: CTA time (sum over profiled (CTA, warp)
    of that CTA's lifetime), CTAs whose records outlast them, CTAs checked for that, the worst
    ratio, CTAs with records, CTAs, and the launch's wall time (``_wall_ns``)."""
    if x.cta_time is not None:
        return x.cta_time
    # a sampled launch ran the whole grid; the direct lowering's unsampled CTAs left no block
    ctas = max(len(x.cta_ids), math.prod(x.grid)) if x.sample_ctas > 1 else len(x.cta_ids)
    if len(x.cta) == 0:
        return 0.0, 0, 0, 0.0, 0, ctas, _wall_ns(x)
    ids, life, n_over, n_checked, worst = _cta_lifetimes(x)
    stride = int(x.warp.max()) + 1
    pairs = np.unique(x.cta * stride + x.warp)  # profiled (CTA, warp) streams
    return (float(life[np.searchsorted(ids, pairs // stride)].sum()), n_over, n_checked, worst,
            len(ids), ctas, _wall_ns(x))


def _wall_ns(x: LaunchData) -> float:
    """The launch's wall time: from its first CTA's start to its last CTA's end (their timer
    reads, init and pre-final; a direct block's start is its first record); in a trace
    without CTA times, from its first region's start to its last region's end."""
    if len(x.cta_ids):
        return float(x.cta_prefinal_ns.max() - x.cta_init_ns.min())
    if len(x.start_ns):
        return float((x.start_ns + x.dur_ns).max() - x.start_ns.min())
    return 0.0


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


def kernel_summary(launches: Sequence[LaunchData]) -> dict[str, Any]:
    """Numbers of one kernel (one or more launches of the same kernel and config)."""
    parts = [launch_part(x) for x in launches]
    acc = KernelAcc(parts[0])
    for p in parts:
        acc.add(p)
    return acc.summary()


def summarize(launches: Sequence[LaunchData]) -> dict[str, Any]:
    """The whole report as a JSON-ready dict: one entry per (kernel, config)."""
    s = Summary()
    for x in launches:
        s.add(launch_part(x))
    return s.result()
