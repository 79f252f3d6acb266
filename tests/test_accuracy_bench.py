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

from proton_inject.decode import DecodeWarning, decode, load_raw

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

    from proton_inject.compile_hook import CompileHook, as_rules

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
    names, parents = _scopes(acc.back_to_back_kernel, {"out_ptr": "*i64", "n": "i32"}, {}, tmp_path / "c")
    assert len(names) == 2 and parents == {}  # two siblings, in source order


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
    # the kernel region minus its 8 loop iterations, warp 0 of CTA 7: the kernel's self time
    me = (e.warp == 0) & (e.cta == 7)
    own = e.cycles[me & (e.scope == 0)].sum() - e.cycles[me & (e.scope == 1)].sum()
    selft = acc.self_per_cta(d, 0, 1, 1024)
    assert selft[7] == own and 0 < own < e.cycles[me & (e.scope == 0)].sum()
    case = acc.Case("x", "cycles", 100.0, np.array([30.0, 35, 40]), np.array([-1.0, 0, 2]), "fit")
    text = acc.table({"shared": {"cycles": 35, "p5": 31, "p95": 40, "instances": 9, "device": "H100"}}, [case])
    assert "+35 (+30..+40)" in text and "+0 (-1..+2)" in text and "record cost, shared: 35 cycles" in text
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


def _errors(cases):
    return [c for c in cases if c.unit == "cycles" and c.kind == "error"]


@requires_gpu
@pytest.mark.gpu
@pytest.mark.xfail(strict=True, raises=AssertionError, reason=(
    "issue 10's 5-cycle goal is NOT met (H100, Triton 3.6, 2026-11-23): lone spin +12 "
    "(+9..+21), warp 0 only +10 (+3..+17), warp 0 in Proton's global buffer +6 (+4..+17), the "
    "defaults (direct.py: a record is one clock read, 11 cycles calibrated) +24 (+24..+29) "
    "cycles after compensation (raw +47 / +50 / +47 / +35). In SASS "
    "the spin loop's exit (64-bit subtract, two compares and the branch on its last clock "
    "read, then register moves; 5-9 instructions depending on the code after the loop) runs "
    "between the kernel's last read (its truth) and the end record's read, while the start "
    "record's cost, which compensation subtracts, lies inside the truth (a loop that spins on "
    "the clock absorbs it); so region - truth is that exit path minus one record cost"))
def test_cycle_regions_within_5_cycles_after_compensation(acc, measured):
    """Issue 10's goal on the GPU: cycle regions within 5 cycles of the truth (median per CTA)."""
    cal, cases = measured
    for c in _errors(cases):
        assert len(c.comp) >= 200, c.name
        assert abs(float(np.median(c.comp))) <= 5, (c.name, acc.table(cal, cases))


@requires_gpu
@pytest.mark.gpu
def test_compensation_brings_every_cycle_region_closer_and_within_20_cycles(acc, measured):
    """What is met today (H100, 2026-11-23: compensated -2..+12 with Proton's lowering, +24
    with the direct one, raw +33..+50): every cycle region's compensated median within 30
    cycles of its truth, and closer than the raw one. (The direct records cost 11 cycles, so
    compensation removes less of the spin loop's exit path, which the truth leaves out.)"""
    cal, cases = measured
    errors = _errors(cases)
    assert len(errors) == 8, [c.name for c in errors]
    for c in errors:
        assert len(c.comp) >= 200, c.name
        comp, raw = abs(float(np.median(c.comp))), abs(float(np.median(c.raw)))
        assert comp <= 30 and comp < raw, (c.name, acc.table(cal, cases))


@requires_gpu
@pytest.mark.gpu
def test_a_loop_around_nested_regions_is_not_over_corrected(acc, measured):
    """The outer loop of 4 spins loses 9 record costs (its own pair and the 8 records inside);
    its self time (itself minus its inner regions, both compensated) keeps 5 of those records'
    work less 5 costs: the loop's own code, which cannot be negative."""
    cal, cases = measured
    [c] = [c for c in cases if c.kind == "self"]
    assert len(c.comp) >= 200
    assert float(np.median(c.comp)) >= -5, acc.table(cal, cases)
