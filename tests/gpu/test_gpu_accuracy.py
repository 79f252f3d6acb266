"""benchmarks/accuracy.py on a GPU: issue 10's goals (ns within 1% through a measured clock,
cycle regions within 5 cycles after compensation) and what holds for every lowering."""

from __future__ import annotations

import helpers
import numpy as np
import pytest
from helpers import load_module, requires_gpu

pytestmark = [pytest.mark.gpu, requires_gpu]


@pytest.fixture(scope="module")
def acc():
    return load_module(helpers.REPO / "benchmarks" / "accuracy.py", "accuracy_bench")


@pytest.fixture(scope="module")
def measured(acc):
    """One GPU run of the quick benchmark for both goals; the table is printed (pytest -s)."""
    cal, cases = acc.measure(quick=True)
    print(acc.table(cal, cases))
    return cal, cases


def test_ns_within_1pct_on_every_launch_with_a_measured_clock(acc, measured):
    """Issue 10's goal on the GPU: every globaltimer launch (short, long, right after a heavy
    matmul) within 1% of the truth (median per CTA), through a measured clock."""
    cal, cases = measured
    ns = [c for c in cases if c.unit == "ns"]
    assert len(ns) == 6, [c.name for c in ns]  # 3 cases x 2 launches
    for c in ns:
        assert len(c.comp) >= 200, c.name
        assert c.clock.split()[0] in ("globaltimer-fit", "clock-bracket"), (c.name, c.clock)
        assert abs(float(np.median(c.comp))) <= 0.01 * c.truth, (c.name, acc.table(cal, cases))


def _errors(cases, lowering=None):
    return [c for c in cases if c.unit == "cycles" and (lowering is None or c.lowering == lowering)]


def test_direct_cycle_regions_within_5_cycles_after_compensation(acc, measured):
    """Issue 10's goal on the GPU, for the records the defaults lower directly (each region
    around a top-level loop): within 5 cycles of the plain loop's cycles (median per CTA).
    Loops of fixed work take longer by what the records cost, so they are compared after
    compensation. A spin waits until the clock says N cycles passed: the records' cost does
    not add to it, so it is compared raw (H100: -3 raw in every run; with a direct cost of 3
    subtracted, calibrated once after 14 other GPU tests, it read -6)."""
    cal, cases = measured
    direct = _errors(cases, "direct")
    # 2 spins, 2 work loops; and a loop of spins with a region around each spin inside it
    # (records inside a loop, also lowered directly: not within 5, see the xfail below)
    assert len(direct) == 6, [c.name for c in direct]
    for c in direct:
        if c.name.startswith("4 x"):
            continue
        assert len(c.comp) >= 200, c.name
        error = c.raw if c.name.startswith("spin") else c.comp
        assert abs(float(np.median(error))) <= 5, (c.name, acc.table(cal, cases))


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=(
    "issue 10's 5-cycle goal is NOT met through Proton's lowerings (H100, Triton 3.6, "
    "2026-11-23): around a 1,000-iteration loop of multiply-adds, warp 0's records in Proton's "
    "global buffer read 60 cycles less than the plain loop (the compiler moves work out of "
    "the region; no per-record cost puts it back), every warp's in its shared buffer +371 "
    "after compensation (+420 when the calibration read 20-24); and a loop of 4 spins with "
    "a region around each spin (records "
    "inside a loop, lowered directly: each iteration's store adds ~27 cycles to the outer "
    "region, 2026-11-24) +108 around the loop, -11 around each spin"))
def test_every_cycle_region_within_5_cycles_after_compensation(acc, measured):
    cal, cases = measured
    for c in _errors(cases):
        assert len(c.comp) >= 200, c.name
        assert abs(float(np.median(c.comp))) <= 5, (c.name, acc.table(cal, cases))


def test_what_holds_for_every_lowering(acc, measured):
    """Every cycle region, whatever its lowering, within 10% of its plain loop (H100: at most
    5%, Proton's shared buffer with every warp recording), and the direct records' calibrated
    cost is a few cycles (H100: 0-3)."""
    cal, cases = measured
    errors = _errors(cases)
    assert len(errors) == 10, [c.name for c in errors]
    for c in errors:
        assert len(c.comp) >= 200, c.name
        assert abs(float(np.median(c.comp))) <= 0.1 * c.truth, (c.name, acc.table(cal, cases))
    assert all(c["cycles"] >= 0 for c in cal.values()), cal
    [direct] = [c for name, c in cal.items() if name.startswith("direct")]
    assert direct["cycles"] <= 5, cal


def test_every_truth_within_its_stated_uncertainty(acc, measured):
    """Issue 30's goal: every region's truth lies within the uncertainty report states for it
    (record cost, recorded iterations, the clock's, and the perturbation --measure-overhead
    measured)."""
    cal, cases = measured
    outside = [c.name for c in cases if acc._bar(c)[1] != "yes"]
    assert not outside, (outside, acc.table(cal, cases))
