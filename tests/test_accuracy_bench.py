"""benchmarks/accuracy.py on the CPU: its spin kernels compile for cuda:90 with the regions
the benchmark reads (scope ids in the order it assumes), and its per-CTA pick and table."""

from __future__ import annotations

import importlib.util
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import requires_gpu

from proton_inject.analyze.decode import decode
from proton_inject.analyze.issues import DecodeWarning
from proton_inject.formats.raw import load_raw

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data" / "h100-triton3.6"


@pytest.fixture(scope="module")
def acc():
    spec = importlib.util.spec_from_file_location("accuracy_bench", ROOT / "benchmarks" / "accuracy.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # (its dataclass looks its module up)
    spec.loader.exec_module(mod)
    return mod


def _scopes(kernel, signature, constexprs, tmp_path):
    from triton.compiler import ASTSource
    from ttgir_helpers import compile_with_hook

    from proton_inject.collect.compile_hook import CompileHook, as_rules

    sig = {**signature, **{k: "constexpr" for k in constexprs}}
    src = ASTSource(kernel, signature=sig, constexprs=constexprs)
    hook = CompileHook(as_rules({"loops": "outer"}), tmp_path / "ir")
    ck = compile_with_hook(src, tmp_path / "cache", hook)
    assert "cubin" in ck.asm
    (c,) = hook.compiled.values()
    assert c.instrumented, c.reason
    return [n for _, n in c.scope_names], dict(c.scope_parents)


def test_spin_kernels_have_the_regions_the_benchmark_reads(acc, tmp_path):
    names, parents = _scopes(acc.spin_kernel, {"out_ptr": "*i64", "n": "i32"}, {"TIMER": False},
                             tmp_path / "a")
    assert len(names) == 1 and names[0].startswith("loop")
    names, parents = _scopes(acc.nested_kernel, {"out_ptr": "*i64", "n": "i32", "reps": "i32"}, {},
                             tmp_path / "b")
    assert len(names) == 2 and parents == {1: 0}  # scope 0: the outer loop; 1: the spin in it
    names, parents = _scopes(acc.work_kernel, {"out_ptr": "*i64", "n": "i32"}, {},
                             tmp_path / "d")
    assert len(names) == 1 and names[0].startswith("loop")


def test_region_per_cta_takes_warp_0_and_the_last_instance(acc):
    buf, meta = load_raw(DATA / "profile_scratch_add.json")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DecodeWarning)
        d = decode(buf, meta)
    got = acc.region_per_cta(d, 1, "cycles", 1024)
    e = d.events
    m = (e.scope == 1) & (e.warp == 0) & (e.cta == 7)
    assert got[7] == e.cycles[m][np.argmax(e.start[m])]
    assert not np.isnan(got).any()
    case = acc.Case("x", "cycles", 100.0, np.array([30.0, 35, 40]), np.array([-1.0, 0, 2]), "fit", "direct")
    cal = {"direct": {"cycles": 2, "region": 1502, "plain": 1500, "instances": 9, "device": "H100",
                      "differences": [3.0, 2.0, -1.0]}}
    text = acc.table(cal, [case])
    assert "+35 (+30..+40)" in text and "+0 (-1..+2)" in text and "record cost, direct: 2 cycles" in text
    assert "region 1502, plain 1500, launch pairs -1..+3" in text and " direct " in text
    assert acc.clock_label(d.clock).startswith("globaltimer-fit 19") and "+-3.3%" in acc.clock_label(d.clock)


@pytest.fixture(scope="module")
def measured(acc):
    """One GPU run of the quick benchmark for both goals; the table is printed (pytest -s)."""
    cal, cases = acc.measure(quick=True)
    print(acc.table(cal, cases))
    return cal, cases


@requires_gpu
@pytest.mark.gpu
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


@requires_gpu
@pytest.mark.gpu
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


@requires_gpu
@pytest.mark.gpu
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


@requires_gpu
@pytest.mark.gpu
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
