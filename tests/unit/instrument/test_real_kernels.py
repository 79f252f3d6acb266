"""Kernels as people write them: an early return (several blocks, cf terminators) and a
call to a noinline function (several tt.func), compiled here for cuda:90 and gfx942, then
instrumented and compiled again with the Proton lowering; and trees where one file is bad."""

from __future__ import annotations

import json

import pytest
from helpers import SAMPLES
from helpers.cli import invoke
from helpers.real_kernels import SKIP_ROWS_REGIONS, calls_kernel, skip_calls_kernel, skip_rows_kernel
from helpers.ttgir import compile_ttgir
from triton.backends.compiler import GPUTarget

from proton_inject.errors import UserError
from proton_inject.formats.rules_file import LineRange
from proton_inject.instrument.insert import insert_text
from proton_inject.instrument.rules import Rules
from proton_inject.instrument.strip import strip_text
from proton_inject.lower.check import check_file
from proton_inject.lower.inline import inline_callees
from proton_inject.lower.options import LoweringOptions
from proton_inject.ttgir import parse

_SIG = {"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32"}
_TARGETS = {"cuda:90": GPUTarget("cuda", 90, 32), "hip:gfx942": GPUTarget("hip", "gfx942", 64)}
_BOTH = Rules(kernel_scope=True, loops="both", marks=False)


@pytest.fixture(scope="module")
def ir() -> dict[tuple[str, str], str]:
    return {(k.fn.__name__, t): compile_ttgir(k, _SIG, {"BLOCK": 128}, target)
            for k in (skip_rows_kernel, calls_kernel) for t, target in _TARGETS.items()}


@pytest.mark.parametrize("target", _TARGETS)
def test_early_return_kernel_gets_one_kernel_region_and_compiles(ir, target, tmp_path):
    """Issue 27 item 5: one `kernel` region from the entry to whichever return the CTA takes.
    The instrumented copy has a single exit block: each tt.return becomes `cf.br ^pi_exit`
    (its loc kept) and `^pi_exit` holds the end record and the one tt.return."""
    text = ir[("skip_rows_kernel", target)]
    module = parse(text)
    (fn,) = module.functions
    blocks = fn.op.regions[0].blocks
    assert [b.terminator.name for b in blocks] == ["cf.cond_br", "tt.return", "tt.return"]
    return_locs = [b.terminator.loc_ref for b in blocks[1:]]
    res = insert_text(text, _BOTH, "k.ttgir")
    (k,) = res.kernels
    names = [r.name for r in k.regions]
    assert names == SKIP_ROWS_REGIONS
    kernel = k.regions[0]
    assert (kernel.scope_id, kernel.parent) == (0, None)
    assert kernel.ir_lines == (blocks[0].ops[0].line, blocks[2].terminator.line)
    assert [r.parent for r in k.regions[1:]] == ["kernel", names[1]]

    out = parse(res.text)
    (fn_out,) = out.functions
    new_blocks = fn_out.op.regions[0].blocks
    assert [out.block_name(b) for b in new_blocks] == ["^bb0", "^bb1", "^bb2", "^pi_exit"]
    assert [b.terminator.name for b in new_blocks] == ["cf.cond_br", "cf.br", "cf.br",
                                                       "tt.return"]
    assert [b.terminator.head.split()[0] for b in new_blocks[1:3]] == ["^pi_exit"] * 2
    assert [b.terminator.loc_ref for b in new_blocks[1:3]] == return_locs
    assert [op.name for op in new_blocks[3].ops] == ["proton.record", "tt.return"]
    assert res.text.count('proton.record end "kernel"') == 1
    assert new_blocks[3].terminator.loc_ref == return_locs[-1]
    assert strip_text(res.text) == text
    assert insert_text(res.text, _BOTH, "k.ttgir", force=True).text == res.text

    path = tmp_path / "k.ttgir"
    path.write_text(res.text)
    for buffer_type in ("shared", "global")[: 1 if target.startswith("hip") else 2]:
        report = check_file(path, options=LoweringOptions(buffer_type=buffer_type))
        assert report.ok, report.error
        assert report.buffer_type == buffer_type
        assert sorted(report.regions) == sorted((r.scope_id, r.name) for r in k.regions)
        assert sorted(report.parents) == sorted((r.scope_id, r.parent_id) for r in k.regions
                                                if r.parent_id is not None)


def test_early_return_kernel_scope_alone_and_sampled_compile(ir, tmp_path):
    text = ir[("skip_rows_kernel", "cuda:90")]
    for i, rules in enumerate([Rules(kernel_scope=True, marks=False),
                               Rules(kernel_scope=True, loops="both", marks=False,
                                     sample_ctas=4)]):
        res = insert_text(text, rules, "k.ttgir")
        assert [r.name for r in res.kernels[0].regions][0] == "kernel"
        assert "kernel ^" not in res.text
        assert strip_text(res.text) == text
        path = tmp_path / f"k{i}.ttgir"
        path.write_text(res.text)
        report = check_file(path)
        assert report.ok, report.error
        assert [n for _, n in report.regions].count("kernel") == 1
        if i == 0:  # records outside loops only: Proton's global buffer
            assert report.buffer_type == "global"
    # sampled: the exit block's end record runs under the predicate from the entry block
    exit_block = res.text[res.text.index("  ^pi_exit:"):]
    assert exit_block.startswith('  ^pi_exit:\n    scf.if %pi_cta0 {\n      proton.record end '
                                 '"kernel"\n    }\n    tt.return loc(')


def test_early_return_kernel_is_lowered_by_proton_not_directly(ir):
    """The direct lowering stores each record once per CTA in text order, before the one
    tt.return of a one-block body: it says why it does not apply, and Proton's is used."""
    from proton_inject.lower import direct

    res = insert_text(ir[("skip_rows_kernel", "cuda:90")], Rules(kernel_scope=True,
                                                                  marks=False), "k.ttgir")
    why = direct.eligible(res.text)
    assert why is not None and "several blocks (an early return)" in why
    opts = LoweringOptions(buffer_type="auto").for_kernel(res.text)
    assert opts.buffer_type != "direct"
    single = insert_text((SAMPLES / "cuda-90/add_kernel.ttgir").read_text(),
                         Rules(kernel_scope=True, marks=False), "add.ttgir")
    assert direct.eligible(single.text) is None  # a one-block kernel still is


def test_decoder_sees_one_kernel_scope_on_both_paths(ir, tmp_path):
    """CTA 0 takes the early return (kernel start, kernel end), CTA 1 the whole body: each
    warp of each CTA has one `kernel` event, and only CTA 1 has the loop's."""
    import numpy as np
    from helpers import profbuf

    from proton_inject.analyze.decode import decode, scopes_from_ttgir

    res = insert_text(ir[("skip_rows_kernel", "cuda:90")], _BOTH, "k.ttgir")
    path = tmp_path / "k.ttgir"
    path.write_text(res.text)
    names, parents = scopes_from_ttgir(path)
    ids = {n: i for i, n in names.items()}
    assert sorted(names.values()) == sorted(r.name for r in res.kernels[0].regions)
    kernel, loop, it = (ids[n] for n in SKIP_ROWS_REGIONS)
    assert parents == {loop: kernel, it: loop}
    early = [(False, kernel, 1000), (True, kernel, 1040)]
    full = [(False, kernel, 1000), (False, loop, 1100)]
    for i in range(4):
        full += [(False, it, 1110 + 50 * i), (True, it, 1150 + 50 * i)]
    full += [(True, loop, 1320), (True, kernel, 1500)]
    ctas = [profbuf.Cta(pid=pid, sm=pid, init=10**9, pre=10**9 + 2000, post=10**9 + 2100,
                        warps={w: recs for w in range(4)})
            for pid, recs in ((0, early), (1, full))]
    buf, meta = profbuf.write(ctas, num_warps=4, slots=16, scopes=names)
    d = decode(buf, meta, clock_mhz=1000)
    assert d.unmatched_starts == d.unmatched_ends == 0
    e = d.events
    k = e.scope == kernel
    pairs = sorted(zip(e.cta[k].tolist(), e.warp[k].tolist(), strict=True))
    assert pairs == [(c, w) for c in (0, 1) for w in range(4)]
    assert e.cycles[k & (e.cta == 0)].tolist() == [40] * 4
    assert e.cycles[k & (e.cta == 1)].tolist() == [500] * 4
    assert set(np.unique(e.cta[e.scope == it]).tolist()) == {1}


def test_early_return_kernel_with_a_noinline_callee(tmp_path):
    """Inlining runs on the instrumented copy, exit block included; MLIR prints it back."""
    text = compile_ttgir(skip_calls_kernel, _SIG, {"BLOCK": 128}, _TARGETS["cuda:90"])
    res = insert_text(text, _BOTH, "k.ttgir", inline=inline_callees)
    assert [r.name for r in res.kernels[0].regions] == ["kernel"]
    path = tmp_path / "k.ttgir"
    path.write_text(res.text)
    report = check_file(path)
    assert report.ok, report.error
    assert report.regions == [(0, "kernel")]
    assert "proton.record" not in strip_text(res.text)


def test_a_range_across_blocks_is_refused(ir):
    text = ir[("skip_rows_kernel", "cuda:90")]
    pid_line = next(op.location.primary.line for op in parse(text).walk()
                    if op.result_name == "pid")
    rules = Rules(marks=False, ranges=[LineRange("r", "real_kernels.py", pid_line,
                                                 pid_line + 3)])
    with pytest.raises(UserError, match="both sides of an early return .* a region cannot "
                       "span a return.* --kernel-scope for the whole kernel"):
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
    res = invoke(["insert", str(src), "-o", str(tmp_path / "out"), "--no-marks"], code=0)
    assert ("3 of 4 kernels instrumented; left out: h3/bad.ttgir:1:1: 'this' is not an op"
            in res.output)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert [x["file"] for x in manifest["left_out"]] == ["h3/bad.ttgir"]
    assert sorted(k["file"] for k in manifest["kernels"]) == [
        "h0/add_kernel.ttgir", "h1/softmax_kernel.ttgir", "h2/skip.ttgir"]
    assert not (tmp_path / "out" / "h3").exists()
    res = invoke(["insert", str(src), "-o", str(tmp_path / "out2"), "--strict"])
    assert res.exit_code == 2 and "left out: h3/bad.ttgir" in res.output
    assert not (tmp_path / "out2").exists()
    assert before == {p: p.read_bytes() for p in src.rglob("*") if p.is_file()}


def test_op_that_matches_nothing_names_the_kinds_there():
    text = (SAMPLES / "cuda-90/matmul_kernel.ttgir").read_text()
    res = insert_text(text, Rules(kernel_scope=True, marks=False, ops=["tt.load"]), "m.ttgir")
    (note,) = [n for n in res.notes if "--op tt.load" in n]
    assert "matched no op" in note and "ttg.async_copy_global_to_local" in note


def test_begin_and_end_marks_on_code_lines_are_refused(tmp_path):
    from proton_inject.instrument.marks import marks_in

    src = tmp_path / "k.py"
    src.write_text("x = 1\ny = 2  # proton: begin part\nz = 3\n# proton: end part\n")
    with pytest.raises(UserError, match="on a line of its own"):
        marks_in(src, "k.py")


def test_one_scope_closed_in_several_blocks_fails_check(ir, tmp_path):
    """Why kernel scope adds a single exit block: the naive shape (a start at the top of the
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
    res = invoke(["insert", str(src), "-o", str(tmp_path / "out"), "--check",
                  "--no-marks"], code=0)
    assert ("1 of 2 kernels instrumented; left out: a/add_kernel.ttgir: its instrumented IR "
            "does not compile: loc(\"a/add_kernel.ttgir\"" in res.output)
    assert "custom op 'tt.load_x' is unknown" in res.output
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert [k["file"] for k in manifest["kernels"]] == ["b/calls.ttgir"]
    assert not (tmp_path / "out" / "a").exists()
