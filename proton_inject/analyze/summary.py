"""Per-kernel numbers: ``LaunchData`` (one launch's region instances and CTA times, as the
report keeps them) and ``summarize`` (the JSON-ready summary: per region count, cycles, ns and
share; per kernel its CTAs, time, clocks, drops and issues).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from proton_inject.analyze.clock import MEASURED
from proton_inject.analyze.decode import Decoded
from proton_inject.analyze.uncertainty import add_uncertainty
from proton_inject.formats import diagnostics
from proton_inject.formats.diagnostics import Issue

# Per-warp (or per-warp-group) medians differing by more than this get their own rows.
SPLIT_THRESHOLD = 0.10
# A CTA whose records span more than this times its timer lifetime (plus a timer tick at each
# end) on the launch's clock is reported: on a guessed clock, the clock is then too slow.
OVERLONG_TOL = 1.02


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
    # CTA time = sum over profiled (launch, CTA, warp) of that CTA's lifetime: the shares'
    # denominator, not the kernel's duration (that is the wall time, per launch, summed).
    cta_ns = 0.0
    wall_ns = 0.0
    # CTAs whose records outlast their timer reads: on guessed / measured clocks, CTAs
    # checked, worst ratio
    overlong = [0, 0, 0, 0.0]
    for x in launches:
        t = _cta_time(x)
        cta_ns += t[0]
        wall_ns += t[6]
        overlong[1 if x.clock.get("source") in MEASURED else 0] += t[1]
        overlong[2] += t[2]
        overlong[3] = max(overlong[3], t[3])
    regions, n_events = _regions(launches, ranks, cta_ns)
    mhz = [x.clock.get("mhz_median") for x in launches if x.clock.get("mhz_median")]
    out = {
        "kernel": first.kernel,
        "config": first.config,
        "launches": [x.launch for x in launches],
        "ranks": ranks or None,
        "device": first.device,
        "grid": first.grid,
        "num_warps": first.num_warps,
        "ctas": int(sum(_cta_time(x)[5] for x in launches)),
        "clock": {
            "sources": sorted({str(x.clock.get("source")) for x in launches}),
            "mhz_median": float(np.median(mhz)) if mhz else None,
            "per_launch": [x.clock for x in launches],
        },
        "kernel_wall_ns": wall_ns,
        "cta_time_sum_ns": cta_ns,
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
        "drops": _kernel_drops(launches),
        "record_cost_cycles": sorted({x.record_cost for x in launches}, key=lambda c: -1 if c is None else c),
        "warnings": diagnostics.summarize({first.kernel: len(launches)},
                                          [(first.kernel, i) for x in launches for i in x.issues]),
        "issues": [{"launch": x.launch, **i.to_dict()} for x in launches for i in x.issues],
    }
    add_uncertainty(out)
    return out


def _regions(launches: Sequence[LaunchData], ranks: list[int],
             cta_ns: float) -> tuple[list[dict[str, Any]], int]:
    """One entry per region (scope) of a kernel's launches, and their instances in all."""
    first = launches[0]
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
        n_events += n_of[s]
        name = scopes[s] if counts[scopes[s]] == 1 else f"{scopes[s]} [{s}]"
        regions.append(_region(launches, s, n_of[s], name, group, ranks, cta_ns, held.get(s)))
    return regions, n_events


def _region(launches: Sequence[LaunchData], s: int, n: int, name: str, group: int,
            ranks: list[int], cta_ns: float, held: float | None) -> dict[str, Any]:
    """The numbers of region ``s`` (``n`` instances) over a kernel's launches."""
    first = launches[0]
    # One scope's instances at a time, not every event of the kernel at once (a run of
    # thousands of launches may hold a hundred million), filled launch by launch into
    # arrays of the launches' own types (no per-launch copies to concatenate).
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
    share = float(dur.sum() / cta_ns) if cta_ns > 0 else None
    per_rank = [
        {"rank": r, "count": int((rank_ev == r).sum()),
         "cycles": _stats(cycles[rank_ev == r], True), "ns": _stats(dur[rank_ev == r], True)}
        for r in ranks
    ] if ranks else None
    return {
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
        "recorded_iterations_inside": held,
    }


def _kernel_drops(launches: Sequence[LaunchData]) -> dict[str, Any]:
    """What the buffers of a kernel's launches lost, together."""
    drops = {k: sum((x.drops.get(k) or 0) for x in launches)
             for k in ("records_written", "records_dropped", "warps_with_drops", "ctas_with_drops",
                       "unmatched_starts", "unmatched_ends")}
    need = [x.drops.get("needed_buffer_size") for x in launches if x.drops.get("needed_buffer_size")]
    drops["needed_buffer_size"] = max(need) if need else None
    drops["buffer_size"] = max((x.drops.get("buffer_size") or 0) for x in launches) or None
    kinds = {x.drops.get("buffer_type") for x in launches}
    drops["buffer_type"] = kinds.pop() if len(kinds) == 1 else None  # None: unknown or mixed
    return drops


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


def _cta_time(x: LaunchData) -> tuple[float, int, int, float, int, int, float]:
    """One launch's part of its kernel's numbers: CTA time (sum over profiled (CTA, warp)
    of that CTA's lifetime), CTAs whose records outlast them, CTAs checked for that, the worst
    ratio, CTAs with records, CTAs, and the launch's wall time (``_wall_ns``)."""
    if x.cta_time is not None:
        return x.cta_time
    if len(x.cta) == 0:
        return 0.0, 0, 0, 0.0, 0, len(x.cta_ids), _wall_ns(x)
    ids, life, n_over, n_checked, worst = _cta_lifetimes(x)
    stride = int(x.warp.max()) + 1
    pairs = np.unique(x.cta * stride + x.warp)  # profiled (CTA, warp) streams
    return (float(life[np.searchsorted(ids, pairs // stride)].sum()), n_over, n_checked, worst,
            len(ids), len(x.cta_ids), _wall_ns(x))


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


def summarize(launches: Sequence[LaunchData]) -> dict[str, Any]:
    """The whole report as a JSON-ready dict: one entry per (kernel, config)."""
    groups: dict[tuple[str, str | None], list[LaunchData]] = {}
    for x in sorted(launches, key=lambda x: x.launch):
        groups.setdefault((x.kernel, x.config), []).append(x)
    return {"format": "proton-inject-report", "version": 1,
            "kernels": [kernel_summary(g) for g in groups.values()]}
