"""The report as text: a table per kernel, then its notes (what was sampled, what profiling
cost, dropped records, which clock turned cycles into ns and what that is worth).
"""

from __future__ import annotations

from typing import Any

from proton_inject.analyze.clock_sources import GIVEN, MEASURED, Clock, meaning
from proton_inject.analyze.overhead import DIRECT_ITERATION_CYCLES, overhead_class
from proton_inject.analyze.summary_schema import KernelSummary, ReportSummary
from proton_inject.formats.diagnostics import headline
from proton_inject.formats.raw import BufferType

# ... and said in the text when more than this share of CTAs is (a few are timer noise).
OVERLONG_SHARE = 0.05


def _rank_rows(r: dict[str, Any]) -> list[dict[str, Any]]:
    """A region's rows per rank, labelled; the slowest (by median ns) says how far it is over
    the fastest. Past RANK_ROWS ranks only the slowest and the fastest."""
    per = r.get("per_rank") or []
    slow = r.get("slowest_rank")
    if len(per) > RANK_ROWS:
        fast = min(per, key=lambda p: p["ns"]["median"])
        per = [p for p in per if p["rank"] in (fast["rank"], slow["rank"])]
    out = []
    for p in per:
        label = f"  rank {p['rank']}"
        if slow and p["rank"] == slow["rank"] and slow["over_fastest_pct"] is not None:
            label += f" (slowest: +{slow['over_fastest_pct']:.1f}%)"
        out.append({**p, "label": label})
    return out


def ranks_line(k: dict[str, Any]) -> str | None:
    """Across ranks: how many, and which one's launches took longest in all (wall time)."""
    slow = k.get("slowest_rank")
    if not slow:
        return None
    walls = [p["wall_ns"] for p in k["per_rank"]]
    over = "" if slow["over_fastest_pct"] is None else f", +{slow['over_fastest_pct']:.1f}% over the fastest"
    return (f"ranks: {len(walls)}; slowest rank {slow['rank']} (wall {_fmt(slow['ns'] / 1000, 1)} us "
            f"summed over its launches{over}; spread {_fmt(min(walls) / 1000, 1)}-"
            f"{_fmt(max(walls) / 1000, 1)} us)")


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
    if d.get("buffer_type") == BufferType.DIRECT:
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
    if d.get("buffer_type") == BufferType.GLOBAL:
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


def fitted_rates(summary: ReportSummary) -> dict[str | None, list[float]]:
    """Per device, the clocks of every launch in the report whose globaltimer fit held."""
    out: dict[str | None, list[float]] = {}
    for k in summary["kernels"]:
        for g in k["clock"]["groups"]:
            if g["source"] in MEASURED:
                out.setdefault(k.get("device"), []).extend(float(m) for m in g["mhz_median"] if m)
    return out


def _launches(groups: list[dict[str, Any]]) -> int:
    return sum(len(g["launches"]) for g in groups)


def clock_line(k: KernelSummary, fitted: dict[str | None, list[float]] | None = None) -> str:
    """Which clock turned this kernel's cycles into ns, and what that is worth: a fit's
    quality, or that a fallback is a guess, never presented as a measurement. ``fitted``
    (``fitted_rates``): what other launches on the device measured, as a hint for a guess."""
    groups = k["clock"]["groups"]  # in the order of their first launches
    n_all = _launches(groups)
    by_source: dict[str, list[dict[str, Any]]] = {}
    for g in groups:
        by_source.setdefault(g["source"], []).append(g)
    parts = []
    for source, gs in sorted(by_source.items(), key=lambda kv: -_launches(kv[1])):
        mhz = sorted({m for g in gs for m in g["mhz_median"] if m})
        rate = ("-" if not mhz else f"{mhz[0]:,.0f}" if len(mhz) == 1
                else f"{mhz[0]:,.0f}-{mhz[-1]:,.0f}") + " MHz"
        head = f"{source} {rate} on {_launches(gs)} of {n_all} launch{'es' if n_all != 1 else ''}"
        if source == Clock.GLOBALTIMER_FIT:
            r2 = _worst(gs, "lowest", "fit_r2", min)
            res = _worst(gs, "highest", "residual_ns", max)
            q = []
            if r2 is not None:
                q.append(f"R^2 >= {r2:.3f}")
            if res is not None:
                q.append(f"residual <= {res:,.0f} ns RMS")
            parts.append(f"{head} (measured: {', '.join(q) or 'fit'}{_within(gs)})")
        elif source == Clock.CLOCK_BRACKET:
            differ = _worst(gs, "highest", "bracket_sides_differ_pct", max)
            note = (f", before and after differ by up to {differ:.1f}%"
                    if differ is not None and differ > 0.1 else "")
            parts.append(f"{head} ({meaning(source)}{_within(gs)}{note})")
        else:
            why = (f"; globaltimer fit rejected: {gs[0]['first_reason']}" if gs[0].get("first_reason")
                   else "")
            if gs[0].get("bracket_missing") and source not in GIVEN:
                why += f"; no clock bracket: {gs[0]['bracket_missing']}"
            parts.append(f"{head} ({meaning(source)}{why})")
    near = (fitted or {}).get(k.get("device"))
    if near and set(by_source) - {*MEASURED, *GIVEN}:
        lo, hi = min(near), max(near)
        rate = f"{lo:,.0f}" if round(lo) == round(hi) else f"{lo:,.0f}-{hi:,.0f}"
        parts.append(f"launches of these inputs whose fit held ran at {rate} MHz "
                     f"({len(near)} launch{'es' if len(near) != 1 else ''}; --clock-mhz takes one)")
    return "clock: " + "; ".join(parts)


def _worst(groups: list[dict[str, Any]], side: str, name: str, pick: Any) -> float | None:
    """The lowest or highest of a clock number over some groups (None: none had it)."""
    got = [g[side][name] for g in groups if g[side].get(name) is not None]
    return pick(got) if got else None


def _within(groups: list[dict[str, Any]]) -> str:
    """The largest stated uncertainty of some launches' clocks, as ``: +-0.05%``."""
    u = _worst(groups, "highest", "uncertainty_pct", max)
    return f"; ns within +-{u:.2g}%" if u is not None else ""


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


def kernel_title(k: dict[str, Any]) -> str:
    """A kernel's heading: name and config, launches, grid, warps, CTAs, regions, wall time, clock."""
    launches = k["launches"]
    clk = k["clock"]
    grid = "x".join(str(g) for g in k["grid"])
    wall = _fmt(k["kernel_wall_ns"] / 1000, 1) + " us" + (" summed" if len(launches) > 1 else "")
    return (f"{k['kernel']}" + (f" [{k['config']}]" if k["config"] else "") +
            f": {len(launches)} launch{'es' if len(launches) != 1 else ''}, grid {grid}, "
            f"{k['num_warps']} warps, {k['ctas']:,} CTAs, {k['events']:,} regions, wall "
            f"{wall}; clock {_fmt(clk['mhz_median'])} MHz ({', '.join(clk['sources'])})")


def kernel_notes(k: dict[str, Any], fitted: dict[str | None, list[float]] | None = None) -> list[str]:
    """The notes under a kernel's table, whole: what was sampled, what profiling cost, what was
    lost, the clock and the record cost, the measured perturbation, what the columns mean."""
    notes = [ranks_line(k), sampled_line(k), overhead_class(k), drop_warning(k),
             held_iterations_note(k), *clock_notes(k, fitted)]
    if k.get("perturbation_pct") is not None:
        notes.append(f"measured perturbation: the records made the kernel up to "
                     f"{k['perturbation_pct']:.2g}% slower (--measure-overhead); +-cyc and +-ns "
                     "include that share of each region")
    if any((r.get("uncertainty") or {}).get("cycles") is not None
           and r["uncertainty"].get("ns") is None for r in k["regions"]):
        notes.append("+-ns is '-': the clock that turned cycles into ns was not measured "
                     "(see clock:), so ns carry no error bar; +-cyc still holds")
    small = [r["name"] for r in k["regions"] if r.get("below_uncertainty")]
    if small:
        notes.append(f"(!) shorter than their error bar (+-cyc: what the records may still add "
                     f"or remove): {', '.join(small[:6])}{', ...' if len(small) > 6 else ''}")
    d = k["drops"]
    if d["unmatched_starts"] or d["unmatched_ends"]:
        notes.append(f"note: {d['unmatched_starts']:,} start and {d['unmatched_ends']:,} end "
                     "records had no partner (regions cut by the buffer window, or left early)")
    notes.append("wall = first CTA start to last CTA end, per launch; share = region time / "
                 f"CTA time ({_fmt(k['cta_time_sum_ns'] / 1000, 1)} us: the sum over profiled "
                 "warps of their CTA's lifetime, init to pre-final or its records' span where "
                 "longer); nested regions overlap their parents")
    return [n for n in notes if n]


def format_text(summary: ReportSummary, verbose: bool = False) -> str:
    """Human-readable tables, one per kernel; the notes under each one line (``headline``)
    unless ``verbose``."""
    out: list[str] = []
    fitted = fitted_rates(summary)
    for k in summary["kernels"]:
        out.append(kernel_title(k))
        out += _table(k)
        out += ["  " + (n if verbose else headline(n)) for n in kernel_notes(k, fitted)]
        out.append("")
    return "\n".join(out)


# Per-rank rows under each region: every rank up to this many, else the slowest and fastest.
RANK_ROWS = 4


def _table(k: dict[str, Any]) -> list[str]:
    """One kernel's table: a row per region, longest in total first, then per rank and per
    warp (group) where given."""
    hdr = ["region", "launches", "count", "total cyc", "mean cyc", "p5 cyc", "median cyc", "+-cyc",
           "p95 cyc", "max cyc", "total us", "mean ns", "p5 ns", "median ns", "+-ns", "p95 ns",
           "max ns", "share"]
    rows = []
    for r in k["regions"]:
        c, n = r["cycles"], r["ns"]
        u = r.get("uncertainty") or {}
        rows.append([
            r["name"] + (" (!)" if r.get("below_uncertainty") else ""), f"{r['launches']:,}",
            f"{r['count']:,}", _fmt(c["total"]), _fmt(c["mean"], 1), _fmt(c["p5"]), _fmt(c["median"]),
            _fmt(u.get("cycles")), _fmt(c["p95"]), _fmt(c["max"]), _fmt(n["total"] / 1000, 1),
            _fmt(n["mean"], 1), _fmt(n["p5"], 1), _fmt(n["median"], 1), _fmt(u.get("ns"), 1),
            _fmt(n["p95"], 1), _fmt(n["max"], 1),
            "-" if r["share"] is None else f"{100 * r['share']:.1f}%",
        ])
        for pr in _rank_rows(r):
            c, n = pr["cycles"], pr["ns"]
            rows.append([
                pr["label"], "", f"{pr['count']:,}", _fmt(c["total"]), _fmt(c["mean"], 1),
                _fmt(c["p5"]), _fmt(c["median"]), "", _fmt(c["p95"]), _fmt(c["max"]),
                _fmt(n["total"] / 1000, 1), _fmt(n["mean"], 1), _fmt(n["p5"], 1), _fmt(n["median"], 1),
                "", _fmt(n["p95"], 1), _fmt(n["max"], 1), "",
            ])
        for u in r["per_unit"] or []:
            rows.append([f"  {u['unit']}", "", f"{u['count']:,}", "", "", "", _fmt(u["median_cycles"]),
                         "", "", "", "", "", "", _fmt(u["median_ns"], 1), "", "", "", ""])
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h)
              for i, h in enumerate(hdr)]
    out = ["  " + "  ".join(h.ljust(w) if i == 0 else h.rjust(w)
                            for i, (h, w) in enumerate(zip(hdr, widths, strict=True)))]
    for row in rows:
        out.append("  " + "  ".join(v.ljust(w) if i == 0 else v.rjust(w)
                                    for i, (v, w) in enumerate(zip(row, widths, strict=True))))
    if not rows:
        out.append("  (no complete regions)")
    return out
