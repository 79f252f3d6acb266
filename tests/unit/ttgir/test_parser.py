"""The TTGIR parser: lossless round trip, structure, locations and errors on real samples."""

from __future__ import annotations

import os
from collections import Counter

import pytest
from helpers import DATA, REPO, sample_files
from helpers.cli import invoke
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proton_inject.errors import ParseError
from proton_inject.ttgir import parse, parse_file
from proton_inject.ttgir.outline import outline
from proton_inject.ttgir.tree import mlir_op_counts

SAMPLES = sample_files()
FIXTURES = sorted((DATA / "h100-triton3.6").glob("*.ttgir"))


def test_corpus_is_big_enough():
    assert len(SAMPLES) >= 30


@pytest.mark.parametrize("path", SAMPLES + FIXTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_round_trip_is_byte_exact(path):
    raw = path.read_bytes()
    module = parse_file(path)
    assert module.render() == raw
    # Spans nest: every op lies inside its parent region, in order.
    for op in module.walk():
        assert raw[op.start:op.end].decode("latin-1").lstrip('%"').startswith(
            op.name if not op.results else op.results[0].lstrip("%"))
        for region in op.regions:
            assert op.start < region.start < region.end <= op.end
            assert raw[region.start:region.start + 1] == b"{"
            assert raw[region.end - 1:region.end] == b"}"


@pytest.mark.parametrize("path", SAMPLES + FIXTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_op_counts_match_mlir(path, mlir_context):
    from triton._C.libtriton import ir

    theirs: Counter = Counter()
    ir.parse_mlir_module(str(path), mlir_context).walk(lambda op: theirs.update([op.get_name()]))
    assert mlir_op_counts(parse_file(path)) == dict(theirs)


def _kernels(target: str, name: str):
    return outline(parse_file(REPO / "ttgir_samples" / target / f"{name}.ttgir"))


@pytest.mark.parametrize("target", ["cuda-80", "cuda-90", "cuda-100", "hip-gfx942"])
def test_outline_matches_example_sources(target):
    (add,) = _kernels(target, "add_kernel")
    assert add.name == "add_kernel" and add.visibility == "public"
    assert [(lp.op, lp.source) for lp in add.loops] == [("scf.for", "examples/vector_add.py:17")]
    assert add.loops[0].induction_var == "%i"

    (ln,) = _kernels(target, "layernorm_fwd_kernel")
    assert [lp.source for lp in ln.loops] == [f"examples/layernorm.py:{n}" for n in (20, 26, 35)]
    assert all(lp.depth == 1 for lp in ln.loops)

    (seg,) = _kernels(target, "segment_mean_kernel")
    assert [(lp.op, lp.source) for lp in seg.loops] == [("scf.while", "examples/control_flow.py:23")]
    assert seg.op_counts["scf.if"] >= 1

    (sm,) = _kernels(target, "softmax_kernel")
    assert sm.op_counts["tt.reduce"] == 2 and sm.op_counts["tt.reduce.return"] == 2
    (mm,) = _kernels(target, "matmul_kernel")
    assert [lp.source for lp in mm.loops] == ["examples/matmul.py:36"]
    assert "examples/matmul.py:40" in mm.source_lines  # the tl.dot line


def test_warp_specialize_partitions_are_regions():
    (k,) = _kernels("cuda-100", "attn_fwd_ws_kernel")
    parts = [lp.partition for lp in k.loops]
    assert parts[0] == "default" and "partition0" in parts
    module = parse_file(REPO / "ttgir_samples/cuda-100/attn_fwd_ws_kernel.ttgir")
    (ws,) = [op for op in module.walk() if op.name == "ttg.warp_specialize"]
    assert len(ws.regions) >= 2
    assert ws.regions[0].blocks[0].ops[-1].name == "ttg.warp_yield"
    assert all(r.blocks[0].ops[-1].name == "ttg.warp_return" for r in ws.regions[1:])


def test_locations_resolve_through_aliases():
    module = parse_file(DATA / "h100-triton3.6" / "add_kernel.ttgir")
    loads = [op for op in module.walk() if op.name == "tt.load"]
    assert [(op.location.primary.line, op.location.name) for op in loads] == [(10, "x"), (11, "y")]
    (fn,) = module.functions
    assert (fn.name, fn.visibility) == ("add_kernel", "public")


def test_callsite_and_fused_locations():
    text = (
        '#loc = loc("k.py":1:0)\n#loc1 = loc("lib.py":7:3)\n#loc2 = loc("k.py":5:9)\n'
        '#loc3 = loc(callsite(#loc1 at #loc2))\n#loc4 = loc(fused[#loc2, "k.py":6:1])\n'
        'module {\n  tt.func public @k() {\n    %a = arith.constant 0 : i32 loc(#loc3)\n'
        '    %b = arith.constant 1 : i32 loc("v"(#loc4))\n    tt.return loc(#loc)\n'
        '  } loc(#loc)\n} loc(#loc)\n')
    a, b = [op for op in parse(text).walk() if op.name == "arith.constant"]
    assert [str(f) for f in a.location.frames] == ["lib.py:7:3", "k.py:5:9"]
    assert b.location.name == "v" and [f.line for f in b.location.frames] == [5, 6]


BASE = """#blocked = #ttg.blocked<{sizePerThread = [4], threadsPerWarp = [32], warpsPerCTA = [4], order = [0]}>
#loc = loc("k.py":4:0)
#loc1 = loc("x"(#loc))
module attributes {"ttg.num-warps" = 4 : i32, ttg.target = "cuda:90"} {
  tt.func public @k(%x: !tt.ptr<f32> loc("x"(#loc))) attributes {noinline = false} {
    %c0_i32 = arith.constant 0 : i32 loc(#loc1)
    %r = scf.for %i = %c0_i32 to %c0_i32 step %c0_i32 iter_args(%a = %c0_i32) -> (i32)  : i32 {
      %s = arith.addi %a, %i : i32 loc(#loc1)
      scf.yield %s : i32 loc(#loc1)
    } loc(#loc1)
    tt.return loc(#loc)
  } loc(#loc)
} loc(#loc)
"""

MALFORMED = [
    # (what, old, new, line, column, words in the message)
    ("double equals", "%c0_i32 = arith", "%c0_i32 = = arith", 6, 15, "unexpected '='; expected an op name"),
    ("missing close brace", "    } loc(#loc1)\n", "    loc(#loc1)\n", 10, 5, "unexpected 'loc(#loc1)'"),
    ("undefined loc alias", "%i : i32 loc(#loc1)", "%i : i32 loc(#loc9)", 8, 40, "#loc9 is never defined"),
    ("bad loc body", '#loc1 = loc("x"(#loc))', "#loc1 = loc(42)", 3, 13, "unexpected '42'"),
    ("unterminated string", '#loc = loc("k.py":4:0)', '#loc = loc("k.py:4:0)', 2, 12, "unexpected '\"'"),
    ("stray close brace", "    tt.return loc(#loc)\n", "    tt.return loc(#loc)\n    }\n", 14, 1,
     "unexpected '}'"),
    ("results without op", "    %c0_i32 = arith.constant 0 : i32 loc(#loc1)", "    %c0_i32 =", 6, 14,
     "expected an op name"),
    ("unclosed block label", "      %s = arith.addi", "      ^bb0(%a: i32\n      %s = arith.addi", 8,
     7, "unexpected '^'"),
    ("loc alias defined twice", '#loc1 = loc("x"(#loc))',
     '#loc1 = loc("x"(#loc))\n#loc1 = loc("y"(#loc))', 4, 1, "#loc1 is defined twice"),
    ("number for an op", "    tt.return loc(#loc)", "    42", 11, 5, "unexpected '42'"),
    ("op name with a leading dot", "    tt.return loc(#loc)", "    .return loc(#loc)", 11, 5,
     "unexpected '.'"),
    ("missing last brace", "} loc(#loc)\n", "", 12, 14, "'}' missing"),
    ("bad fused loc", '#loc1 = loc("x"(#loc))', "#loc1 = loc(fused[#loc,])", 3, 24,
     "unexpected ']'"),
]


@pytest.mark.parametrize("what,old,new,line,column,words", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_input_is_located(what, old, new, line, column, words):
    text = BASE.replace(old, new, 1)
    assert text != BASE
    with pytest.raises(ParseError) as err:
        parse(text, "bad.ttgir")
    e = err.value
    assert (e.path, e.line, e.column) == ("bad.ttgir", line, column), str(e)
    assert words in e.reason
    # The message shows the offending line and a caret under the column.
    msg_lines = str(e).splitlines()
    assert msg_lines[0].startswith(f"bad.ttgir:{line}:{column}: ")
    assert msg_lines[2].index("^") - 2 == column - 1


def test_cli_inspect_prints_outline_and_exits_2_on_bad_input(tmp_path):

    res = invoke(["inspect", str(REPO / "ttgir_samples/cuda-90/matmul_kernel.ttgir")], code=0)
    assert "kernel matmul_kernel" in res.output and "examples/matmul.py:36" in res.output
    bad = tmp_path / "bad.ttgir"
    bad.write_text(BASE.replace("%c0_i32 = arith", "%c0_i32 = = arith"))
    res = invoke(["inspect", str(bad)], code=2)
    assert f"{bad}:6:15: unexpected '='" in res.output
    assert "Traceback" not in res.output


_SMALL = [p for p in SAMPLES if p.stat().st_size < 20000][:8]
# CI runs 150; a longer local run: PI_PARSER_EXAMPLES=20000 .venv/bin/python -m pytest -q \
#   tests/unit/ttgir/test_parser.py -k damage
_DAMAGE_EXAMPLES = int(os.environ.get("PI_PARSER_EXAMPLES", "150"))


@settings(max_examples=_DAMAGE_EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_damage_raises_only_parse_errors(data):
    path = data.draw(st.sampled_from(_SMALL))
    raw = bytearray(path.read_bytes())
    kind = data.draw(st.sampled_from(["truncate", "edit", "insert", "delete", "word"]))
    pos = data.draw(st.integers(0, len(raw) - 1))
    if kind == "truncate":
        raw = raw[:pos]
    elif kind == "edit":
        raw[pos] = data.draw(st.sampled_from(b'{}()[]<>"%#^=:,\n x0\\'))
    elif kind == "insert":
        raw[pos:pos] = data.draw(st.binary(min_size=1, max_size=4))
    elif kind == "delete":
        raw[pos:pos + data.draw(st.integers(1, 40))] = b""
    else:  # a stray word where a line's text starts (issue 31)
        at = raw.rfind(b"\n", 0, pos) + 1
        at += len(raw[at:]) - len(raw[at:].lstrip(b" "))
        raw[at:at] = data.draw(st.sampled_from([b"J ", b"J", b"foo.bar ", b"} "]))
    try:
        module = parse(bytes(raw), "damaged.ttgir")
    except ParseError:
        return
    assert module.render() == bytes(raw)  # whatever parses still round-trips
    # ... and names no op without a dialect (a stray word) inside the module
    assert all("." in op.name or op.name == "module"
               for item in module.items for op in item.walk() if op is not item)
