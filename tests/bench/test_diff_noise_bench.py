"""benchmarks/diff_noise.py on the CPU: its arguments, the skip without a GPU, the loops it
slows, and its counting and table over diffs of the real H100 buffers (one loop's instances
made 5% longer through diff's own sides)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from helpers import load_module

from proton_inject.analyze.diff import diff_sides, load_side

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "h100-triton3.6"
pytestmark = pytest.mark.filterwarnings("ignore::proton_inject.analyze.issues.DecodeWarning")


@pytest.fixture(scope="module")
def bench():
    return load_module(ROOT / "benchmarks" / "diff_noise.py", "diff_noise_bench")


@pytest.fixture(scope="module")
def sides():
    base = load_side(DATA)
    slow = replace(base, kernels=[
        replace(k, regions=[replace(r, values=r.values * 1.05, median=r.median * 1.05, p95=r.p95 * 1.05)
                            if k.kernel == "mm_kernel" and r.name == "iter" else r for r in k.regions])
        for k in base.kernels])
    return base, slow


def test_arguments(bench, tmp_path):
    a = bench.parse_args(["--out", str(tmp_path / "log")])
    assert (a.trials, a.launches, a.body, a.extra, a.min_change) == (15, 2, 40, 2, 1.0)
    assert a.out == tmp_path / "log"
    for bad in (["--trials", "1"], ["--extra", "0"], []):
        with pytest.raises(SystemExit):
            bench.parse_args(bad + (["--out", "x"] if bad else []))


def test_skips_cleanly_without_a_gpu(bench, tmp_path, capsys):
    if bench.has_gpu():
        pytest.skip("a GPU is present: the benchmark would run")
    assert bench.main(["--out", str(tmp_path / "log")]) == 0
    assert "needs a CUDA GPU (none here); skipped" in capsys.readouterr().out
    assert not (tmp_path / "log").exists()


def test_loop_locations_name_the_two_loops(bench):
    locs = bench.loop_locs()
    text = (ROOT / "benchmarks" / "diff_noise.py").read_text().splitlines()
    for name in ("A", "B"):
        file, line = locs[name].split(":")
        assert file == "diff_noise.py"
        assert text[int(line) - 1].strip() == f"for _ in tl.range(0, n_iter):  # loop {name}"


def test_counts_and_table_over_real_diffs(bench, sides, tmp_path):
    base, slow = sides
    t = bench.Tally()
    same = diff_sides(base, base)
    assert bench.flagged(same) == (3, [])
    t.add_null(same)
    got = bench.injected(diff_sides(base, slow), "kernels.py:28")
    assert got["found"] and got["change"] == pytest.approx(5.0, abs=0.01)
    assert got["same_kind"] == [] and got["enclosing"] == []  # add_kernel's iter is not flagged
    t.add_injected(got)
    with pytest.raises(ValueError, match="0 regions at kernels.py:99"):
        bench.injected(same, "kernels.py:99")
    text = bench.table(t, 1.0)
    rows = {ln.split("  ")[0]: ln.split() for ln in text.splitlines()}
    assert rows["same program: regions flagged"][-6:] == ["0", "3", "0.0%", "<=", "1%", "yes"]
    assert rows["loop A slowed: loop A flagged slower"][-6:] == ["1", "1", "100.0%", ">=", "95%", "yes"]
    assert rows["loop A slowed: other loops flagged"][-3:] == ["0.0%", "0", "yes"]
    assert "loop A's change as diff measured it: median +5.00%" in text
    # a change flagged between two profiles of the same program fails the goal
    t.add_null(diff_sides(base, slow))
    text = bench.table(t, 1.0)
    assert "flagged in the same program: iter (kernels.py:28) +5.00%" in text
    assert [ln for ln in text.splitlines() if ln.startswith("same program")][0].endswith("NO")


def test_log_is_written_as_it_goes(bench, tmp_path):
    log = bench.Log(tmp_path / "log")
    log("one")
    assert (tmp_path / "log").read_text() == "one\n"
    log("two")
    assert (tmp_path / "log").read_text() == "one\ntwo\n"


@pytest.mark.parametrize("extra", [0, 2])
def test_kernel_compiles_with_the_regions_and_work_the_benchmark_reads(bench, tmp_path, extra):
    """For cuda:90 with the default rules: the kernel region and one region per loop at the
    lines ``loop_locs`` gives, and EXTRA_A more multiply-adds in the code, none folded away."""
    from helpers.ttgir import compile_with_hook
    from triton.compiler import ASTSource

    from proton_inject.collect.compile_hook import CompileHook, as_rules

    sig = {"x_ptr": "*fp32", "out_ptr": "*fp32", "n_iter": "i32",
           "BODY": "constexpr", "EXTRA_A": "constexpr", "BLOCK": "constexpr"}
    src = ASTSource(bench.two_loops_kernel, signature=sig,
                    constexprs={"BODY": 40, "EXTRA_A": extra, "BLOCK": 128})
    hook = CompileHook(as_rules(None), tmp_path / "ir")
    ck = compile_with_hook(src, tmp_path / "cache", hook, num_warps=4)
    (c,) = hook.compiled.values()
    assert c.instrumented, c.reason
    locs = bench.loop_locs()
    names = [n for _, n in c.scope_names]
    assert names[0] == "kernel" and len(names) == 3
    assert sorted(c.scope_locs[s] for s, n in c.scope_names if n.startswith("loop")) == \
        sorted([locs["A"], locs["B"]])
    ptx = ck.asm["ptx"]
    assert ptx.count("fma.rn.f32") == 2 * 40 + extra  # one element per thread


@pytest.mark.gpu
def test_runs_on_a_gpu(bench, tmp_path, capsys):
    """A short run on the GPU: every profile kept its launches, the table and the log came."""
    if not bench.has_gpu():
        pytest.skip("needs a CUDA GPU")
    assert bench.main(["--out", str(tmp_path / "log"), "--trials", "2", "--launches", "1"]) == 0
    out = capsys.readouterr().out
    assert "same program: regions flagged" in out and "loop A slowed: loop A flagged slower" in out
    log = (tmp_path / "log").read_text()
    assert log.count("profiled ") == 4 and "null base 0 vs base 1:" in log and "injected 1:" in log
