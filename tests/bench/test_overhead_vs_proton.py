"""benchmarks/overhead_vs_proton.py: its kernels with Proton's own scopes (``pl.enter_scope``)
hold the records our insert puts into the examples' kernels with the default rules (cuda:90,
no GPU, no timing)."""

from __future__ import annotations

import importlib.util
import re
import sys
from contextlib import contextmanager
from pathlib import Path

import helpers
import pytest
import triton.profiler.language as pl
from helpers.ttgir import H100
from triton.profiler.flags import flags

from proton_inject.dump.aot import compile_aot
from proton_inject.instrument.insert import insert_text
from proton_inject.lower.proton import installed

ROOT = helpers.REPO
BENCH = ROOT / "benchmarks" / "overhead_vs_proton.py"
RECORD = re.compile(r'proton\.record (start|end) "([^"]*)"')
LOC = re.compile(r'\s*loc\((?:[^()]|\([^()]*\))*\)')


def _ops(ttgir: str, kernel: str) -> list[str]:
    """The TTGIR's lines without source locations, the kernel's name replaced."""
    return [LOC.sub("", line).replace(kernel, "K") for line in ttgir.splitlines()
            if not line.startswith("#loc")]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


bench = _load("overhead_vs_proton_bench", BENCH)


@contextmanager
def _proton_scopes_on():
    """What ``proton.start(backend="instrumentation")`` turns on before pl scopes emit records
    (its hook's flag), plus the Triton DSL, which Triton 3.6 leaves off (Gluon only)."""
    triton_dsl = pl._ALL_SEMANTICS["triton"]
    had, prev = triton_dsl in pl._SEMANTICS, flags.instrumentation_on
    pl.enable_semantic("triton")
    flags.instrumentation_on = True
    try:
        yield
    finally:
        flags.instrumentation_on = prev
        if not had:
            pl.disable_semantic("triton")


def _compile(path: Path, example: str, kernel: str | None = None):
    spec = _load(f"ovp_{example}", ROOT / "examples" / f"{example}.py").SAMPLE_SPECS[0]
    return compile_aot(path, kernel or spec["kernel"], spec["signature"], spec["constexprs"], H100,
                       spec["num_warps"], spec.get("num_stages", 3))


@pytest.mark.parametrize("example", sorted(bench.PL_KERNELS))
def test_pl_scopes_match_our_default_regions(example):
    plain = _compile(ROOT / "examples" / f"{example}.py", example)
    ours = RECORD.findall(insert_text(plain.ttgir, bench.RULES, f"{example}.ttgir").text)
    assert ours[0] == ("start", "kernel") and ours[-1] == ("end", "kernel")
    assert any(name.startswith("loop ") for _, name in ours)
    kernel = bench.PL_KERNELS[example].__name__
    # Without Proton's hook the scopes emit nothing: the benchmark's plain build is the
    # example's kernel, op for op.
    bare = _compile(BENCH, example, kernel)
    assert not RECORD.findall(bare.ttgir)
    assert _ops(bare.ttgir, kernel) == _ops(plain.ttgir, plain.kernel_name)
    with _proton_scopes_on(), installed(bench.OPTIONS["all+pbuf"], target=H100):
        theirs = _compile(BENCH, example, kernel)
    # The same records, names and order as our insert: kernel scope + each loop as a whole.
    assert RECORD.findall(theirs.ttgir) == ours
    assert theirs.metadata["profile_scratch_size"] > 0  # lowered by Proton's passes
