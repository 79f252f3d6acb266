"""benchmarks/accuracy.py's error-bar check on the CPU: a region's stated median and
uncertainty taken from the report's own summary of a real H100 launch, the truth-within test
(with the one-sided bias of recorded iterations) and the count the table ends with."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from helpers import load_module

from proton_inject.analyze.decode import decode
from proton_inject.analyze.issues import DecodeWarning
from proton_inject.analyze.uncertainty import CALIBRATED, UNCALIBRATED
from proton_inject.formats.raw import load_raw

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "h100-triton3.6"


@pytest.fixture(scope="module")
def acc():
    return load_module(ROOT / "benchmarks" / "accuracy.py", "accuracy_bars")


def _add(cost: float):
    buf, meta = load_raw(DATA / "profile_scratch_add.json")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DecodeWarning)
        return decode(buf, meta, record_cost=cost)


def test_error_bar_is_the_reports(acc):
    d = _add(70.0)  # a calibrated cost: the shared buffer's bar after calibration
    e = d.events
    bar = acc.error_bar(d, 1, "cycles")
    assert bar.plus_minus == CALIBRATED["shared"] and bar.bias is None
    assert bar.median == float(np.median(e.cycles[e.scope == 1]))
    ns = acc.error_bar(d, 1, "ns")
    mhz = float(np.median(d.clock.segment_mhz))
    assert ns.median == pytest.approx(float(np.median(e.dur_ns[e.scope == 1])))
    # the record cost through the clock, plus the clock's stated uncertainty (3.3% here)
    assert ns.plus_minus == pytest.approx(50 * 1000 / mhz + ns.median * d.clock.uncertainty_pct / 100,
                                          rel=1e-3)
    assert acc.error_bar(_add(0.0), 1, "cycles").plus_minus == UNCALIBRATED["shared"]
    assert acc.error_bar(d, 7, "cycles") is None  # no such region


def test_truth_within(acc):
    bar = acc.ErrorBar(1000.0, 4.0, None)
    assert bar.holds(996.0) and bar.holds(1004.0) and not bar.holds(1004.5) and not bar.holds(995)
    # recorded iterations inside add 24..63 cycles: the truth may be that much lower
    biased = acc.ErrorBar(1000.0, 4.0, (24.0, 63.0))
    assert biased.holds(1000 - 63 - 4) and biased.holds(1000 - 24 + 4) and not biased.holds(1000)
    assert acc.ErrorBar(1000.0, None, None).holds(1000.0) is None
    # an ns truth is two %globaltimer reads apart, each rounded to the 32 ns tick: the H100 run
    # of 2026-11-26 stated 199,936 +-46 ns against a truth of 200,000
    ns = acc.ErrorBar(199_936.0, 46.0, None)
    assert not ns.holds(200_000.0) and ns.holds(200_000.0, 32.0) and not ns.holds(200_020.0, 32.0)


def test_table_says_per_region_and_counts(acc):
    z = np.zeros(3)
    cases = [acc.Case("in", "cycles", 1000.0, z, z, "fit", "direct", acc.ErrorBar(1002.0, 4.0, None)),
             acc.Case("out", "cycles", 1000.0, z, z, "fit", "direct", acc.ErrorBar(1100.0, 4.0, None)),
             acc.Case("guess", "ns", 1000.0, z, z, "device-clock (a guess)", "direct",
                      acc.ErrorBar(1000.0, None, None)),
             acc.Case("lost", "cycles", 1000.0, z, z, "fit", "direct"),
             acc.Case("timer", "ns", 200_000.0, z, z, "clock-bracket", "direct",
                      acc.ErrorBar(199_936.0, 46.0, None), 32.0)]
    cal = {"direct": {"cycles": 2, "region": 1502, "plain": 1500, "instances": 9, "device": "H100",
                      "differences": [3.0]}}
    lines = acc.table(cal, cases).splitlines()
    row = {ln.split()[0]: ln for ln in lines if ln.split()[0] in ("in", "out", "guess", "lost", "timer")}
    cells = {k: v.split("  ") for k, v in row.items()}
    assert [c.strip() for c in cells["in"] if c.strip()][-2:] == ["1,002 +-4", "yes"]
    assert [c.strip() for c in cells["out"] if c.strip()][-2:] == ["1,100 +-4", "NO"]
    assert [c.strip() for c in cells["guess"] if c.strip()][-2:] == ["1,000 (no error bar)", "no bar"]
    assert [c.strip() for c in cells["lost"] if c.strip()][-2:] == ["no region", "-"]
    assert [c.strip() for c in cells["timer"] if c.strip()][2] == "200,000 +-32 ns"
    assert [c.strip() for c in cells["timer"] if c.strip()][-2:] == ["199,936 +-46", "yes"]
    assert lines[-1] == ("truth within the stated uncertainty: 2 of 5 regions (1 outside, 1 without "
                         "an error bar, 1 without the region)")
