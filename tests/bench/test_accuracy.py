"""benchmarks/accuracy.py on the CPU: its spin kernels compile for cuda:90 with the regions
the benchmark reads (scope ids in the order it assumes), and its per-CTA pick and table.
Its measurements on the GPU are tests/gpu/test_gpu_accuracy.py."""

from __future__ import annotations

import warnings

import helpers
import numpy as np
import pytest
from helpers import load_module

from proton_inject.analyze.decode import decode
from proton_inject.analyze.issues import DecodeWarning
from proton_inject.formats.raw import load_raw

ROOT = helpers.REPO
DATA = helpers.DATA / "h100-triton3.6"


@pytest.fixture(scope="module")
def acc():
    return load_module(ROOT / "benchmarks" / "accuracy.py", "accuracy_bench")


def _scopes(kernel, signature, constexprs, tmp_path):
    from helpers.ttgir import compile_with_hook
    from triton.compiler import ASTSource

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
