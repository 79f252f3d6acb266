"""A kernel that calls a ``@triton.jit(noinline=True)`` function, compiled here for cuda:90 (no
GPU): the compiler prints it as two functions. `check` compiles that plain dump (its callee
inlined, as insert does, since Proton's lowering takes one function per module), and `strip`
after an insert that inlined the callee says in one line that the original bytes cannot come
back."""

from __future__ import annotations

import pytest
import triton
import triton.language as tl
from helpers.cli import invoke
from helpers.real_kernels import calls_kernel
from helpers.ttgir import H100, compile_ttgir

from proton_inject.lower.check import check_file
from proton_inject.ttgir import parse


@triton.jit
def _plain_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, x * 3.0, mask=offs < n)


def _dump(fn, path):
    """The plain TTGIR of ``fn`` for cuda:90, as `dump` keeps it, written to ``path``."""
    path.write_text(compile_ttgir(fn, {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32"},
                                  {"BLOCK": 128}, H100))
    return path


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    d = tmp_path_factory.mktemp("noinline")
    calls = _dump(calls_kernel, d / "calls.ttgir")
    assert len(parse(calls.read_text()).functions) == 2  # the kernel and its callee
    return {"calls": calls, "plain": _dump(_plain_kernel, d / "plain.ttgir")}


def test_check_compiles_a_plain_dump_of_a_kernel_with_a_noinline_callee(dumps):
    report = check_file(dumps["calls"])
    assert report.ok, report.error
    assert report.kernel == "calls_kernel" and report.target == "cuda:90"
    assert report.binary_bytes > 0


def test_check_compiles_it_instrumented_too(dumps, tmp_path):
    out = tmp_path / "calls.ttgir"
    invoke(["insert", dumps["calls"], "-o", out, "--kernel-scope", "--no-marks"], code=0)
    assert len(parse(out.read_text()).functions) == 1
    report = check_file(out)
    assert report.ok, report.error
    assert report.regions == [(0, "kernel")]


def test_strip_after_inlining_says_the_bytes_cannot_come_back(dumps, tmp_path):
    for name in ("calls", "plain"):
        inst, back = tmp_path / f"{name}.inst.ttgir", tmp_path / f"{name}.back.ttgir"
        invoke(["insert", dumps[name], "-o", inst, "--kernel-scope", "--no-marks"], code=0)
        res = invoke(["strip", inst, "-o", back], code=0)
        notes = [ln for ln in res.stderr.splitlines() if "noinline" in ln]
        if name == "plain":
            assert notes == [] and back.read_bytes() == dumps[name].read_bytes()
        else:
            (note,) = notes
            assert note.startswith(f"note: {inst}: insert inlined") and "original bytes" in note
            assert back.read_bytes() != dumps[name].read_bytes()
            assert len(parse(back.read_text()).functions) == 1  # the callee stays inlined
