"""The kernels of benchmarks/overhead.py compile instrumented for cuda:90 (no GPU, no timing)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import helpers
import pytest
from helpers.ttgir import H100, compile_lowered

from proton_inject.dump.aot import compile_aot
from proton_inject.instrument.insert import insert_text

ROOT = helpers.REPO


def _bench():
    spec = importlib.util.spec_from_file_location("overhead_bench", ROOT / "benchmarks" / "overhead.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


bench = _bench()


def _ttgir(kernel: str, tmp_path: Path) -> str:
    """TTGIR of a suite kernel for cuda:90, compiled as the benchmark launches it."""
    if kernel in bench.INDUCTOR_SPECS:
        s = bench.INDUCTOR_SPECS[kernel]
        bench.load_inductor(kernel, tmp_path)
        path, name = tmp_path / f"{kernel}.py", kernel
    else:  # the examples' first sample spec is the launch the benchmark makes
        path = ROOT / "examples" / f"{kernel}.py"
        s = bench.load_example(kernel).SAMPLE_SPECS[0]
        name = s["kernel"]
    return compile_aot(path, name, s["signature"], s["constexprs"], H100, s["num_warps"],
                       s.get("num_stages", 3)).ttgir


def _compile_instrumented(text: str, options, tmp_path: Path):
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "k.ttgir"
    path.write_text(text)
    return compile_lowered(path, options, tmp_path / "cache", H100)


@pytest.mark.parametrize("kernel", ["matmul", "attention", "layernorm", "softmax", "vector_add",
                                    bench.POINTWISE, bench.REDUCTION])
def test_suite_kernel_compiles_instrumented(kernel, tmp_path):
    text = _ttgir(kernel, tmp_path)
    placed = {}
    for name, rules in bench.RULES.items():
        res = insert_text(text, rules, f"{kernel}.ttgir")
        placed[name] = [r.name for k in res.kernels for r in k.regions]
    assert "kernel" in placed["default"] and "kernel" in placed["loops both"]
    assert placed["op tt.load"], "every kernel of the suite loads"
    # The richest rule set is the one that could fail to lower: compile it down to cubin.
    res = insert_text(text, bench.RULES["loops both"], f"{kernel}.ttgir")
    k = _compile_instrumented(res.text, bench.OPTIONS["proton"], tmp_path)
    assert k.metadata.profile_scratch_size > 0 and k.asm["cubin"]


def test_every_lowering_option_of_the_suite_compiles(tmp_path):
    text = insert_text(_ttgir("layernorm", tmp_path), bench.RULES["default"], "ln.ttgir").text
    sizes = {name: _compile_instrumented(text, opts, tmp_path / name).metadata.profile_scratch_size
             for name, opts in bench.OPTIONS.items()}
    assert all(sizes.values())
    # The defaults keep the 8 records (kernel + 3 loops) of warp 0, lowered directly (5 header
    # words, a clock word per record); Proton's global buffer keeps 8-byte records after its
    # header and a word per warp, rounded up to 128 B; auto with every warp keeps those of 8
    # warps; one recording warp at Proton's size keeps its bytes in one segment.
    assert sizes["default"] == sizes["clock32"] == 40 < sizes["global"]
    assert sizes["global"] < sizes["auto all"]
    assert sizes["auto all"] < sizes["warps 0"] == sizes["proton"]


def test_inductor_kernel_loses_only_its_fixed_size(tmp_path):
    fn = bench.load_inductor(bench.POINTWISE, tmp_path)
    src = (tmp_path / f"{bench.POINTWISE}.py").read_text()
    assert "xnumel = 32768" not in src and "triton_heuristics" not in src
    assert "tl.load(in_ptr0 + (x0), None)" in fn.src
