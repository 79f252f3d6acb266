"""benchmarks/measured_vs_overhead.py on the CPU: it picks the three workloads issue 30 names
from overhead.py's suite, and its verdict and table compare medians in percent of the
reference (the GPU run itself is in docs/overhead.md)."""

from __future__ import annotations

import re

from helpers import REPO, load_module

bench = load_module(REPO / "benchmarks" / "measured_vs_overhead.py", "measured_vs_overhead")


def test_default_workloads_are_matmul_layer_norm_and_attention():
    picked = [w.name for w in bench.overhead.SUITE if re.search(bench.DEFAULT_ONLY, w.name)]
    assert picked == ["matmul 4096^3 fp16", "attention 4x16x4096x64", "layer norm 8192^2 fp16"]


def test_verdict_and_table():
    assert bench.verdict([1.10, 1.12, 1.11], [1.12, 1.13, 1.11]) == (100 * (1.12 - 1.11) / 1.11, "within +-2%")
    diff, ok = bench.verdict([1.00, 1.00], [1.05, 1.03])
    assert round(diff, 6) == 4.0 and ok == "OUTSIDE +-2%"
    text = bench.table([("layer norm", [1.0, 1.02, 0.98], [1.03, 1.05, 1.04]), ("attention", [], [1.1])])
    assert "1.000 (0.980..1.020)" in text and "1.040 (1.030..1.050)" in text and "+4.00%" in text
    assert "attention" in text and "not measured on both sides" in text
