"""Error bars on every region's duration.

A region's median is off from the code's own time by what its records cost (after the
calibrated cost is subtracted: what the calibration left), by the stores of loop iterations
recorded inside it (never subtracted), and, in ns, by what the clock that turned cycles into
ns is worth. Each region gets ``uncertainty``: a symmetric part (+-) and a one-sided bias from
recorded iterations, in cycles and ns, and ``below_uncertainty`` when its median is shorter
than the symmetric part.
"""

from __future__ import annotations

from typing import Any

from proton_inject.analyze.clock_sources import GIVEN, MEASURED
from proton_inject.analyze.overhead import DIRECT_ITERATION_CYCLES, RECORD_COST_ERROR
from proton_inject.analyze.summary_schema import KernelSummary, RegionRow
from proton_inject.formats.run_index import extra_bound_us

# Cycles a region's median may be off by, per buffer type, after the calibrated record cost
# is subtracted; without a calibration (nothing subtracted): the cost itself, as measured.
CALIBRATED = RECORD_COST_ERROR["calibrated"]
UNCALIBRATED = RECORD_COST_ERROR["uncalibrated"]


def region_uncertainty(region: RegionRow, buffer_type: str, calibrated: bool,
                       clock_pct: float | None, mhz: float | None) -> dict[str, Any]:
    """The error bar of one region row (``region`` as ``summary._region`` builds it)."""
    table = CALIBRATED if calibrated else UNCALIBRATED
    cyc = table.get(buffer_type, max(table.values()))
    held = region.get("recorded_iterations_inside") or 0.0
    bias = (held * DIRECT_ITERATION_CYCLES[0], held * DIRECT_ITERATION_CYCLES[1])
    out: dict[str, Any] = {
        "cycles": cyc,
        "bias_cycles": [round(bias[0], 1), round(bias[1], 1)] if held else None,
        "from": [f"record cost ({'after calibration' if calibrated else 'not calibrated'}, "
                 f"{buffer_type} buffer): +-{cyc:g} cycles"],
    }
    if held:
        out["from"].append(f"{held:g} recorded iterations inside: +{bias[0]:g}..+{bias[1]:g} cycles")
    if clock_pct is None or not mhz:
        out["ns"] = None  # the clock is a guess or a bound: ns carry no stated error bar
        out["from"].append("clock not measured: ns have no error bar")
    else:
        med_ns = region["ns"]["median"]
        out["ns"] = cyc * 1000.0 / mhz + abs(med_ns) * clock_pct / 100.0
        out["from"].append(f"clock: +-{clock_pct:.3g}%")
    region["uncertainty"] = out
    region["below_uncertainty"] = region["cycles"]["median"] < cyc
    return out


def add_uncertainty(kernel: KernelSummary) -> None:
    """Give each region of a kernel summary its error bar (in place)."""
    buffer_type = kernel["drops"].get("buffer_type") or "shared"
    costs = kernel.get("record_cost_cycles") or []
    calibrated = bool(costs) and all(costs)  # None: no calibration; 0: --raw
    groups = kernel["clock"].get("groups") or []
    clock_pct = None
    if groups and all(g["source"] in MEASURED for g in groups):
        clock_pct = max(float(g["highest"].get("uncertainty_pct") or 0.0) for g in groups)
    elif kernel["clock"].get("sources") and set(kernel["clock"]["sources"]) <= set(GIVEN):
        clock_pct = 0.0  # given: its error is the user's
    for r in kernel["regions"]:
        region_uncertainty(r, buffer_type, calibrated, clock_pct, kernel["clock"].get("mhz_median"))


def add_perturbation(kernel: KernelSummary, measured: dict[str, float] | None) -> None:
    """Widen each region's error bar by what ``--measure-overhead`` measured the records to add
    to the kernel (in place; ``measured``: ``run_index.perturbation_for``'s numbers, None when
    the kernel was not measured).

    The launch pairs' median instrumented - plain kernel time, plus its own uncertainty (the
    pairs' p10..p90 width over sqrt(pairs), ~2.5 standard errors), over the plain kernel's own
    time (its launches' wall time from the records, less the median extra) is how much slower
    the instrumented code ran: each region's bar grows by that share of its median. It is a
    share, not a bound: the extra time spread evenly over the kernel. Records that slow the
    loop they measure (Proton's every-warp lowering: +417 cycles on 7,228, H100) show here
    and in no record-cost bar."""
    launches = len(kernel.get("launches") or [])
    wall = (kernel.get("kernel_wall_ns") or 0.0) / launches if launches else 0.0
    if not measured or wall <= 0:
        return
    med = 1000.0 * measured["extra_us"]
    extra = 1000.0 * extra_bound_us(measured)
    plain = wall - med
    share = extra / plain if plain > 0 else 1.0
    kernel["perturbation_pct"] = round(100.0 * share, 3)
    for r in kernel["regions"]:
        u = r["uncertainty"]
        u["cycles"] += share * abs(r["cycles"]["median"])
        if u["ns"] is not None:
            u["ns"] += share * abs(r["ns"]["median"])
        u["from"].append(f"measured perturbation: the records added {med / 1000.0:.3g} us +-"
                         f"{(extra - abs(med)) / 1000.0:.2g} a launch: +-{100.0 * share:.2g}% of the "
                         "region")
        r["below_uncertainty"] = r["cycles"]["median"] < u["cycles"]
