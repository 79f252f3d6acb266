"""Record-cost compensation (decode), its calibration cache and kernel, on real H100 buffers."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import helpers
import numpy as np
import pytest
from helpers.cli import invoke

from proton_inject import calibrate
from proton_inject.analyze.decode import decode
from proton_inject.analyze.issues import DecodeWarning
from proton_inject.analyze.report import run_report
from proton_inject.errors import UserError
from proton_inject.formats import calibration
from proton_inject.formats.raw import load_raw, save_raw

DATA = helpers.DATA / "h100-triton3.6"
H100 = "NVIDIA H100 80GB HBM3"  # the device the fixtures were recorded on
COST = 35.0  # cycles per record measured on that H100 (spin loops of 2k-200k cycles)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "proton-inject" / "record_cost.json"


def _decode(name: str, cost: float | None):
    buf, meta = load_raw(DATA / f"profile_scratch_{name}.json")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DecodeWarning)
        return decode(buf, meta, record_cost=cost)


def _by_key(d, order):
    return {k: getattr(d.events, k)[order] for k in ("cta", "warp", "scope", "start", "end")}


def test_each_region_loses_one_cost_per_record_inside_it():
    """add_kernel: per warp a kernel region around 8 back-to-back iterations (18 records)."""
    d_raw, d_comp = _decode("add", None), _decode("add", COST)
    e = d_raw.events
    order = np.lexsort((e.start, e.warp, e.cta))  # per warp, chronological (raw clock)
    raw, comp = _by_key(d_raw, order), _by_key(d_comp, order)
    assert all(np.array_equal(raw[k], comp[k]) for k in ("cta", "warp", "scope"))
    lost = (raw["end"] - raw["start"]) - (comp["end"] - comp["start"])
    names = {0: "kernel", 1: "iter"}
    scope = raw["scope"]
    assert names[int(scope[0])] == "kernel"
    # an innermost region: its own two records (never below zero: some iterations read 31)
    dur = raw["end"] - raw["start"]
    assert np.array_equal(lost[scope == 1], np.minimum(35, dur[scope == 1]))
    assert (lost[scope == 1] == 35).mean() > 0.9
    assert set(lost[scope == 0].tolist()) == {35 * 17}  # the kernel region: 17 record steps
    # back-to-back iterations: the gap between one's end and the next one's start is one record
    it = scope == 1
    same = (raw["cta"][it][1:] == raw["cta"][it][:-1]) & (raw["warp"][it][1:] == raw["warp"][it][:-1])
    gap_raw = raw["start"][it][1:] - raw["end"][it][:-1]
    gap_comp = comp["start"][it][1:] - comp["end"][it][:-1]
    whole = lost[it][:-1] == 35  # (a region cut at zero moves its end less)
    assert set((gap_raw - gap_comp)[same & whole].tolist()) == {35}
    # nested regions stay inside their parent after the shift
    k = scope == 0
    assert comp["start"][k].min() <= comp["start"][it].min()


def test_wrapped_buffer_counts_lost_records_and_never_goes_negative():
    d_raw, d = _decode("mm", None), _decode("mm", COST)
    assert d.drops.dropped > 0  # the buffer wrapped: positions start after the lost records
    assert len(d.events.scope) == len(d_raw.events.scope)
    assert (d.events.cycles >= 0).all()
    assert (d.events.cycles <= d_raw.events.cycles).all()
    assert d.record_cost == COST and d_raw.record_cost is None


def test_a_cache_directory_that_is_not_the_users_is_one_line(cache):
    cache.parent.parent.mkdir(parents=True)
    cache.parent.write_text("a file where the directory belongs")
    with pytest.raises(UserError, match="cannot keep the measured cost there"):
        calibration.store(H100, 34.5)


def test_cache_round_trip_and_keys(cache):
    assert calibration.lookup(H100) is None and not cache.exists()
    calibration.store(H100, 34.5, detail={"p5": 33.0})
    calibration.store(H100, 61.0, clock_bits=32, buffer_type="global")
    assert calibration.lookup(H100) == 34.5
    assert calibration.lookup(H100, 32, "global") == 61.0
    assert calibration.lookup(H100, 64, "global") is None and calibration.lookup(None) is None
    # Only some warps recording (the default) is calibrated on its own: its records differ.
    assert calibration.lookup(H100, selective=True) is None
    calibration.store(H100, 40.0, selective=True)
    assert calibration.lookup(H100, selective=True) == 40.0 and calibration.lookup(H100) == 34.5
    doc = json.loads(cache.read_text())
    assert doc["entries"][calibration.cache_key(H100)] == {"cycles": 34.5, "p5": 33.0}
    cache.write_text("{not json")  # a damaged cache means: not calibrated
    assert calibration.lookup(H100) is None
    cache.write_text(json.dumps({"version": 1, "entries": {calibration.cache_key(H100): {"cycles": -3}}}))
    assert calibration.lookup(H100) is None


def test_cost_from_is_the_median_over_launch_pairs_of_region_less_plain_loop():
    d = _decode("add", None)
    d.meta.scopes = {0: "kernel", 1: "loop i @k.py:3"}
    region = float(np.median(d.events.cycles[d.events.scope == 1]))
    # three pairs: the plain loop drifts between them; each region is compared with its own
    got = calibrate.cost_from([d, d, d], [np.array([region - 7, region - 9]), np.array([region - 3]),
                                          np.array([region + 20, region - 2, region - 2])])
    assert got["cycles"] == 3.0 and got["differences"] == [8.0, 3.0, 2.0]
    assert got["region"] == region and got["plain"] == region - 2.5
    assert got["instances"] == 3 * 32768 and got["p5"] <= got["region"] <= got["p95"]
    # a region shorter than the plain loop (the compiler moved work out of it): nothing to take
    assert calibrate.cost_from([d], [np.array([region + 60.0])])["cycles"] == 0.0
    with pytest.raises(RuntimeError, match="no plain"):
        calibrate.cost_from([d], [np.zeros(0)])
    d.meta.scopes = {0: "kernel", 1: "iter"}
    with pytest.raises(RuntimeError, match="no loop region"):
        calibrate.cost_from([d], [np.array([1.0])])


def _raw_dir(tmp_path: Path, cost: float | None) -> Path:
    buf, meta = load_raw(DATA / "profile_scratch_add.json")
    meta.record_cost_cycles = cost
    save_raw(tmp_path / "raw" / "00000-add_kernel", buf, meta)
    return tmp_path


def test_report_compensates_by_default_and_says_so(tmp_path, cache):
    plain = run_report([_raw_dir(tmp_path / "a", None)], as_json=True)
    [k] = plain.summary["kernels"]
    assert k["record_cost_cycles"] == [None]
    assert "record cost: not calibrated for NVIDIA H100" in run_report([tmp_path / "a"], verbose=True).text
    calibration.store(H100, COST)  # this machine's cache knows the device
    comp = run_report([tmp_path / "a"], as_json=True).summary["kernels"][0]
    it = {r["name"]: r for r in comp["regions"]}["iter"]
    it_raw = {r["name"]: r for r in k["regions"]}["iter"]
    assert it["cycles"]["median"] == it_raw["cycles"]["median"] - 35
    assert comp["record_cost_cycles"] == [35.0]
    text = run_report([tmp_path / "a"], verbose=True).text
    assert "record cost: 35 cycles per record subtracted" in text and "--raw" in text
    raw = run_report([tmp_path / "a"], as_json=True, raw=True).summary["kernels"][0]
    assert {r["name"]: r for r in raw["regions"]}["iter"]["cycles"] == it_raw["cycles"]
    assert raw["record_cost_cycles"] == [0.0]
    # the run's own value (measured on the GPU that ran it) wins over this machine's cache
    own = run_report([_raw_dir(tmp_path / "b", 20.0)], as_json=True).summary["kernels"][0]
    assert {r["name"]: r for r in own["regions"]}["iter"]["cycles"]["median"] == it_raw["cycles"]["median"] - 20
    # and a trace written from it carries the compensated numbers and the cost
    res = run_report([tmp_path / "b"], trace_dir=tmp_path / "tr", trace_format="json", verbose=True)
    again = run_report(res.files, as_json=True).summary["kernels"][0]
    assert again["record_cost_cycles"] == [20.0]
    assert {r["name"]: r for r in again["regions"]}["iter"]["cycles"] == \
        {r["name"]: r for r in own["regions"]}["iter"]["cycles"]


def test_cli_raw_flag_and_bad_cost_in_metadata(tmp_path, cache):
    calibration.store(H100, COST)
    d = _raw_dir(tmp_path, None)
    r = invoke(["report", str(d), "--raw"])
    assert r.exit_code == 0 and "record cost" not in r.output
    meta = json.loads((d / "raw" / "00000-add_kernel.json").read_text())
    meta["record_cost_cycles"] = "a lot"
    (d / "raw" / "00000-add_kernel.json").write_text(json.dumps(meta))
    r = invoke(["report", str(d)])
    assert r.exit_code == 2 and "record_cost_cycles" in r.output and "Traceback" not in r.output


def test_calibration_kernel_has_one_region_right_around_its_loop(tmp_path):
    """The calibration kernel compiles for cuda:90 with its one region (``--loops outer``)
    right around the loop, between the kernel's own two clock reads; its plain reference is
    the same code under another name, which the calibration's rule leaves alone."""
    from helpers.ttgir import compile_with_hook
    from triton.compiler import ASTSource

    from proton_inject._calibration_kernel import plain_reference, record_cost_calibration
    from proton_inject.collect.compile_hook import CompileHook
    from proton_inject.instrument.rules import Rules

    src = ASTSource(record_cost_calibration, signature={"out_ptr": "*i64", "n": "i32"})
    rules = Rules(loops="outer", marks=False, kernel="^record_cost_calibration$")
    hook = CompileHook(rules, tmp_path / "ir")
    ck = compile_with_hook(src, tmp_path / "cache", hook)
    ref = ASTSource(plain_reference, signature={"out_ptr": "*i64", "n": "i32"})
    plain = compile_with_hook(ref, tmp_path / "cache", CompileHook(rules, tmp_path / "ir2"))
    assert "proton.record" not in plain.asm["ttgir"]
    # the same code: the calibration kernel compiled without the hook differs in its name and
    # source locations only
    def code(text: str) -> list[str]:
        return [re.sub(r"\s*loc\(#loc\d*\)", "", x) for x in text.splitlines() if not x.startswith("#loc")]

    same = compile_with_hook(src, tmp_path / "cache2", None).asm["ttgir"]
    assert code(plain.asm["ttgir"].replace("plain_reference", "record_cost_calibration")) == code(same)
    lines = [x.strip() for x in ck.asm["ttgir"].splitlines()]
    starts = [i for i, x in enumerate(lines) if x.startswith('proton.record start "loop')]
    ends = [i for i, x in enumerate(lines) if x.startswith('proton.record end "loop')]
    assert len(starts) == len(ends) == 1
    assert " scf.for " in f" {lines[starts[0] + 1]}" or "= scf.for" in lines[starts[0] + 1]
    assert lines[ends[0] - 1].startswith("}") and "%clock64" in lines[ends[0] + 1]
    assert "%clock64" in lines[starts[0] - 1]
    assert "cubin" in ck.asm


def test_calibrate_without_a_gpu_is_a_clear_error(cache):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    r = invoke(["calibrate"])
    assert r.exit_code == 2 and "needs a CUDA GPU" in r.output and "Traceback" not in r.output
    assert not cache.exists()
