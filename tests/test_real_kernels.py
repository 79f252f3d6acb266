"""Kernels as people write them: an early return (several blocks, cf terminators) and a
call to a noinline function (several tt.func), compiled here for cuda:90 and gfx942, then
instrumented and compiled again with the Proton lowering; and trees where one file is bad."""

from __future__ import annotations

import json

import pytest
import triton
import triton.language as tl
from click.testing import CliRunner
from conftest import SAMPLES
from triton.backends.compiler import GPUTarget
from ttgir_helpers import compile_ttgir

from proton_inject.cli import main
from proton_inject.errors import UserError
from proton_inject.formats.rules_file import LineRange
from proton_inject.instrument.insert import insert_text, strip_text
from proton_inject.instrument.rules import Rules
from proton_inject.lower.check import check_file
from proton_inject.lower.inline import inline_callees
from proton_inject.ttgir import parse


@triton.jit
def skip_rows_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    if pid * BLOCK >= n:  # an early return: cf.cond_br, three blocks
        return
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    acc = tl.zeros([BLOCK], tl.float32)
    for i in range(4):
        acc += x * i
    tl.store(y_ptr + offs, acc, mask=offs < n)


@triton.jit(noinline=True)
def scale_of(n):
    return n * 2 + 1


@triton.jit
def calls_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, x * scale_of(n), mask=offs < n)


_SIG = {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32"}
_TARGETS = {"cuda:90": GPUTarget("cuda", 90, 32), "hip:gfx942": GPUTarget("hip", "gfx942", 64)}
_BOTH = Rules(kernel_scope=True, loops="both", marks=False)


@pytest.fixture(scope="module")
def ir() -> dict[tuple[str, str], str]:
    return {(k.fn.__name__, t): compile_ttgir(k, _SIG, {"BLOCK": 128}, target)
            for k in (skip_rows_kernel, calls_kernel) for t, target in _TARGETS.items()}


@pytest.mark.parametrize("target", _TARGETS)
def test_early_return_kernel_gets_a_region_per_block_and_compiles(ir, target, tmp_path):
    text = ir[("skip_rows_kernel", target)]
    module = parse(text)
    (fn,) = module.functions
    assert [b.terminator.name for b in fn.op.regions[0].blocks] == ["cf.cond_br", "tt.return",
                                                                    "tt.return"]
    res = insert_text(text, _BOTH, "k.ttgir")
    (k,) = res.kernels
    names = [r.name for r in k.regions]
    assert names[:2] == ["kernel", "kernel ^bb2"] and len(names) == 4
    assert strip_text(res.text) == text
    path = tmp_path / "k.ttgir"
    path.write_text(res.text)
    report = check_file(path)
    assert report.ok, report.error
    assert sorted(n for _, n in report.regions) == sorted(names)


def test_a_range_across_blocks_is_refused(ir):
    text = ir[("skip_rows_kernel", "cuda:90")]
    pid_line = next(op.location.primary.line for op in parse(text).walk()
                    if op.result_name == "pid")
    rules = Rules(marks=False, ranges=[LineRange("r", "test_real_kernels.py", pid_line,
                                                 pid_line + 3)])
    with pytest.raises(UserError, match="different blocks"):
        insert_text(text, rules, "k.ttgir")


@pytest.mark.parametrize("target", _TARGETS)
def test_noinline_callee_is_inlined_into_the_instrumented_copy(ir, target, tmp_path):
    text = ir[("calls_kernel", target)]
    assert [f.name for f in parse(text).functions][0] == "calls_kernel"
    assert len(parse(text).functions) == 2 and "tt.call" in text
    with pytest.raises(UserError, match="inline_callees"):  # the text step alone runs no MLIR
        insert_text(text, _BOTH, "k.ttgir")
    res = insert_text(text, _BOTH, "k.ttgir", inline=inline_callees)
    out = parse(res.text)
    assert [f.name for f in out.functions] == ["calls_kernel"] and "tt.call" not in res.text
    path = tmp_path / "k.ttgir"
    path.write_text(res.text)
    report = check_file(path)  # without inlining: "only one function per module is supported"
    assert report.ok, report.error
    assert report.regions == [(0, "kernel")]
    assert "proton.record" not in strip_text(res.text)


def test_a_callee_that_stays_a_call_refuses_the_kernel(ir):
    text = ir[("calls_kernel", "cuda:90")]
    # Make the callee a declaration: nothing to inline.
    start = text.index("  tt.func private")
    end = text.index("  } loc(", start)
    head = text[start:text.index("{\n", start)].replace("attributes {noinline = true} ", "")
    decl = text[:start] + head.rstrip() + "\n" + text[text.index("\n", end) + 1:]
    with pytest.raises(UserError, match="scale_of"):
        insert_text(decl, _BOTH, "k.ttgir", inline=inline_callees)


def test_a_bad_file_in_a_tree_is_left_out_and_strict_refuses(ir, tmp_path):
    src = tmp_path / "dump"
    for i, name in enumerate(["add_kernel", "softmax_kernel"]):
        (src / f"h{i}").mkdir(parents=True)
        (src / f"h{i}" / f"{name}.ttgir").write_bytes((SAMPLES / "cuda-90" / f"{name}.ttgir")
                                                      .read_bytes())
    (src / "h2").mkdir()
    (src / "h2" / "skip.ttgir").write_text(ir[("skip_rows_kernel", "cuda:90")])
    (src / "h3").mkdir()
    (src / "h3" / "bad.ttgir").write_text("this is not IR\n")
    before = {p: p.read_bytes() for p in src.rglob("*") if p.is_file()}
    runner = CliRunner()
    res = runner.invoke(main, ["insert", str(src), "-o", str(tmp_path / "out"), "--no-marks"])
    assert res.exit_code == 0, res.output
    assert ("3 of 4 kernels instrumented; left out: h3/bad.ttgir:1:1: 'this' is not an op"
            in res.output)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert [x["file"] for x in manifest["left_out"]] == ["h3/bad.ttgir"]
    assert sorted(k["file"] for k in manifest["kernels"]) == [
        "h0/add_kernel.ttgir", "h1/softmax_kernel.ttgir", "h2/skip.ttgir"]
    assert not (tmp_path / "out" / "h3").exists()
    res = runner.invoke(main, ["insert", str(src), "-o", str(tmp_path / "out2"), "--strict"])
    assert res.exit_code == 2 and "left out: h3/bad.ttgir" in res.output
    assert not (tmp_path / "out2").exists()
    assert before == {p: p.read_bytes() for p in src.rglob("*") if p.is_file()}


def test_op_that_matches_nothing_names_the_kinds_there():
    text = (SAMPLES / "cuda-90/matmul_kernel.ttgir").read_text()
    res = insert_text(text, Rules(kernel_scope=True, marks=False, ops=["tt.load"]), "m.ttgir")
    (note,) = [n for n in res.notes if "--op tt.load" in n]
    assert "matched no op" in note and "ttg.async_copy_global_to_local" in note


def test_begin_and_end_marks_on_code_lines_are_refused(tmp_path):
    from proton_inject.instrument.rules import _marks_in

    src = tmp_path / "k.py"
    src.write_text("x = 1\ny = 2  # proton: begin part\nz = 3\n# proton: end part\n")
    with pytest.raises(UserError, match="on a line of its own"):
        _marks_in(src, "k.py")


def test_one_scope_closed_in_several_blocks_fails_check(ir, tmp_path):
    """Why kernel scope is one region per block: the issue's shape (a start at the top of the
    entry block, an end before every tt.return) is refused by Triton 3.6's scope analysis,
    and check says so instead of passing a file whose scope ids do not pair."""
    text = ir[("skip_rows_kernel", "cuda:90")]
    head = text.index("{\n", text.index("tt.func public")) + 2
    one_scope = text[:head] + '    proton.record start "kernel"\n' + text[head:]
    one_scope = one_scope.replace("    tt.return", '    proton.record end "kernel"\n    tt.return')
    path = tmp_path / "k.ttgir"
    path.write_text(one_scope)
    report = check_file(path)
    assert not report.ok
    assert "The scope name 'kernel' is closed without being opened" in report.error


def test_insert_check_leaves_out_a_file_that_does_not_compile(ir, tmp_path):
    src = tmp_path / "dump"
    (src / "a").mkdir(parents=True)
    (src / "b").mkdir()
    # An op no dialect knows: we keep it opaque, the compiler refuses it.
    bad = (SAMPLES / "cuda-90/add_kernel.ttgir").read_text().replace("tt.load %", "tt.load_x %")
    (src / "a" / "add_kernel.ttgir").write_text(bad)
    (src / "b" / "calls.ttgir").write_text(ir[("calls_kernel", "cuda:90")])
    res = CliRunner().invoke(main, ["insert", str(src), "-o", str(tmp_path / "out"), "--check",
                                    "--no-marks"])
    assert res.exit_code == 0, res.output
    assert ("1 of 2 kernels instrumented; left out: a/add_kernel.ttgir: its instrumented IR "
            "does not compile: loc(\"a/add_kernel.ttgir\"" in res.output)
    assert "custom op 'tt.load_x' is unknown" in res.output
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert [k["file"] for k in manifest["kernels"]] == ["b/calls.ttgir"]
    assert not (tmp_path / "out" / "a").exists()
