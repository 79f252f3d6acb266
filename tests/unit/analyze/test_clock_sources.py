"""Clock sources a user gives: --clocks-locked takes each launch's recorded device max clock."""

from __future__ import annotations

import json

import helpers
import pytest
from helpers.cli import invoke

from proton_inject.formats.raw import load_raw, save_raw

SHORT = helpers.DATA / "h100-shortlaunch"


def _raws(tmp_path):
    """The two short launches, the first with the device max clock recorded (as runs now
    write it), the second without (an older run)."""
    out = tmp_path / "raw"
    for name, mhz in (("00000-matmul_kernel", 1980.0), ("00001-matmul_kernel", None)):
        buf, meta = load_raw(SHORT / f"{name}.json")
        meta.sm_clock_mhz = mhz
        save_raw(out / name, buf, meta)
    return out


def test_clocks_locked_converts_at_the_recorded_max_clock(tmp_path):
    res = invoke(["report", _raws(tmp_path), "--clocks-locked", "--json", "-j", "1"], code=0)
    first, second = json.loads(res.stdout)["kernels"]
    assert first["clock"]["sources"] == ["--clocks-locked"] and first["clock"]["mhz_median"] == 1980
    it = next(r for r in first["regions"] if r["name"] == "kernel")
    assert it["ns"]["median"] == pytest.approx(it["cycles"]["median"] * 1000 / 1980, rel=1e-3)
    # no max clock recorded: the launch's clock is found as without the option
    assert second["clock"]["sources"] == ["globaltimer-fit"]
    assert "globaltimer fit rejected" not in res.stderr  # the given clock replaced the rejected fit
    text = invoke(["report", _raws(tmp_path), "--clocks-locked", "-j", "1"], code=0).stdout
    assert "--clocks-locked 1,980 MHz on 1 of 1 launch (the device's max clock, given by " in text


def test_clocks_locked_and_clock_mhz_exclude_each_other(tmp_path):
    res = invoke(["report", _raws(tmp_path), "--clocks-locked", "--clock-mhz", "1500"], code=2)
    assert "give --clock-mhz or --clocks-locked, not both" in res.output
