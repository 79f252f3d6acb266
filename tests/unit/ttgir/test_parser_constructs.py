"""One small hand-written case per construct MLIR prints or accepts, checked against
Triton's own parser (op counts of its walk) and for a byte-exact round trip; plus what
must be refused: empty files, noise, and lines too long to echo."""

from __future__ import annotations

from collections import Counter

import pytest

from proton_inject.errors import ParseError
from proton_inject.ttgir import parse
from proton_inject.ttgir.tree import mlir_op_counts

_MODULE = "module {{\n{body}}}\n{tail}"

CASES = {
    # An early return: blocks with labels, block arguments with their own locs, `// pred:`
    # comments as MLIR prints them, and the cf terminators.
    "blocks and cf": ('''  tt.func public @k(%n: i32 loc("n"(#loc))) {
    %c0 = arith.constant 0 : i32 loc(#loc1)
    %0 = arith.cmpi sgt, %n, %c0 : i32 loc(#loc1)
    cf.cond_br %0, ^bb1(%n : i32), ^bb2 loc(#loc1)
  ^bb1(%a: i32 loc("a"(#loc))):  // pred: ^bb0
    %1 = arith.addi %a, %a : i32 loc(#loc1)
    cf.br ^bb2 loc(#loc1)
  ^bb2:  // 2 preds: ^bb0, ^bb1
    tt.return loc(#loc1)
  } loc(#loc)
''', '#loc1 = loc("k.py":2:3)\n'),
    # Comments wherever a person may write them: own lines, after a region's brace, at the end.
    "comments": ('''  // a comment on its own line
  tt.func public @k() {  // after the brace that opens a region
    // between ops, with { braces } and "quotes
    %c0 = arith.constant 0 : i32
    scf.if %true {  // opens an scf.if
      // only a comment in here
    }
    tt.return
  }
  // at the end
''', "// after the module\n"),
    "several functions": ('''  tt.func public @k(%x: i32) {
    %0 = tt.call @helper(%x) : (i32) -> i32
    tt.return
  }
  tt.func private @helper(%x: i32) -> i32 attributes {noinline = true} {
    tt.return %x : i32
  }
''', ""),
    # The generic form, with a region and block arguments, and with properties.
    "generic form": ('''  tt.func public @k(%t: tensor<4xf32>) {
    %r = "tt.reduce"(%t) <{axis = 0 : i32}> ({
    ^bb0(%a: f32, %b: f32):
      %s = "arith.addf"(%a, %b) <{fastmath = #arith.fastmath<none>}> : (f32, f32) -> f32
      "tt.reduce.return"(%s) : (f32) -> ()
    }) : (tensor<4xf32>) -> f32
    "tt.return"() : () -> ()
  }
''', ""),
}
# Hand-written IR breaks long attribute dicts and signatures after a comma.
CASES["op over several lines"] = ('''  tt.func public @k(%a: i32 {tt.divisibility = 16 : i32},
                    %b: i32) attributes {noinline = false,
                                         tt.x = 1 : i32} {
    %0 = arith.addi %a,
                    %b : i32
    tt.return
  }
''', "")
# Triton's lit tests also break an op after `(` `:` `*` `->` and before `)` `:` `*` `->`: in an
# op with a region (the function, the loop) and in one without.
CASES["op broken after '('"] = ('''  tt.func public @k(
      %a: i32, %b: i32) {
    %0 = "arith.addi"(
        %a, %b) : (i32, i32) -> i32
    tt.return
  }
''', "")
CASES["op broken before ')'"] = ('''  tt.func public @k(%a: i32,
      %b: i32
  ) {
    %0 = "arith.addi"(%a, %b
    ) : (i32, i32) -> i32
    tt.return
  }
''', "")
CASES["op broken around ':'"] = ('''  tt.func public @k(%a: i32, %b: i32) {
    %0 = scf.for %i = %a to %b step %a iter_args(%s = %a) -> (i32) :
        i32 {
      %1 = arith.addi %s, %i :
          i32
      %2 = arith.addi %1, %i
          : i32
      scf.yield %2 : i32
    }
    tt.return
  }
''', "")
CASES["op broken around '->'"] = ('''  tt.func public @k(%a: i32)
      -> i32 {
    %0 = "arith.addi"(%a, %a) : (i32, i32) ->
        i32
    %1 = "arith.addi"(%0, %a) : (i32, i32)
        -> i32
    tt.return %1 : i32
  }
''', "")
CASES["op broken around '*'"] = ('''  tt.func public @k(%a: tensor<16x16xf16>, %c: tensor<16x16xf32>) {
    %0 = tt.dot %a, %a, %c : tensor<16x16xf16> *
        tensor<16x16xf16> -> tensor<16x16xf32>
    %1 = tt.dot %a, %a, %0 : tensor<16x16xf16>
        * tensor<16x16xf16> -> tensor<16x16xf32>
    tt.return
  }
''', "")
# An attribute dict right after the brace that closes a region, with no blank.
CASES["attributes after a region's brace"] = ('''  tt.func public @k(%n: i32) {
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i32
    scf.for %i = %c0 to %n step %c1 : i32 {
      %0 = arith.addi %i, %i : i32
    }{tt.num_stages = 3 : i32}
    tt.return
  }
''', "")
# A lit file may hold several modules: MLIR wraps them in one of its own.
CASES["two modules"] = ('''  tt.func public @k() {
    tt.return
  }
''', "module {\n  tt.func public @j() {\n    tt.return\n  }\n}\n")
# Alias definitions come before the module; a type alias is used in a signature.
_ALIASES = "#attr = {tt.divisibility = 16 : i32}\n!fptr = !tt.ptr<f32>\n"
CASES["aliases"] = ('''  tt.func public @k(%p: !fptr {tt.divisibility = 16 : i32}) {
    %0 = tt.addptr %p, %c : !fptr, i32
    tt.return
  }
''', "")


def _text(name: str) -> str:
    body, tail = CASES[name]
    head = {"aliases": _ALIASES, "blocks and cf": '#loc = loc("k.py":1:0)\n'}.get(name, "")
    if name == "comments":
        head = "// before everything\n"
        body = body.replace("    %c0 = arith", "    %true = arith.constant true\n    %c0 = arith")
    if name == "aliases":
        body = body.replace("    %0 = tt.addptr", "    %c = arith.constant 1 : i32\n    %0 = tt.addptr")
    return head + _MODULE.format(body=body, tail=tail)


@pytest.mark.parametrize("name", sorted(CASES))
def test_construct_round_trips_and_counts_like_mlir(name, tmp_path, mlir_context):
    from triton._C.libtriton import ir

    text = _text(name)
    path = tmp_path / "case.mlir"
    path.write_text(text)
    theirs: Counter = Counter()
    ir.parse_mlir_module(str(path), mlir_context).walk(lambda op: theirs.update([op.get_name()]))
    module = parse(text, str(path))
    assert module.render() == text.encode()
    assert mlir_op_counts(module) == dict(theirs)


def test_blocks_labels_and_functions():
    module = parse(_text("blocks and cf"))
    (fn,) = module.functions
    blocks = fn.op.regions[0].blocks
    assert [module.block_name(b) for b in blocks] == ["^bb0", "^bb1", "^bb2"]
    assert [b.terminator.name for b in blocks] == ["cf.cond_br", "cf.br", "tt.return"]
    assert blocks[1].ops[0].location.primary.line == 2
    module = parse(_text("several functions"))
    assert [(f.name, f.visibility) for f in module.functions] == [("k", "public"),
                                                                  ("helper", "private")]


def test_an_op_over_several_lines_is_one_op():
    module = parse(_text("op over several lines"))
    (fn,) = module.functions
    add, ret = fn.op.regions[0].blocks[0].ops
    assert (add.name, add.line, ret.line) == ("arith.addi", 5, 7)
    (fn,) = parse(_text("op broken around '->'")).functions
    ops = fn.op.regions[0].blocks[0].ops
    assert [(op.name, op.line) for op in ops] == [("arith.addi", 4), ("arith.addi", 6),
                                                  ("tt.return", 8)]


def test_ops_of_unknown_dialects_are_kept_opaque():
    text = ('module {\n  tt.func public @k() {\n    %0 = acme.frob %x [1, 2] {weird = "{"} : i32\n'
            '    acme.scope {\n      acme.inner\n    } => odd syntax\n    tt.return\n  }\n}\n')
    module = parse(text)
    assert module.render() == text.encode()
    assert [op.name for op in module.walk()] == ["module", "tt.func", "acme.frob", "acme.scope",
                                                "acme.inner", "tt.return"]


def test_deep_nesting_has_no_recursion_limit():
    depth = 3000
    text = "".join("  " * i + "scf.if %c {\n" for i in range(depth))
    text = "module {\n" + text + "".join("  " * i + "}\n" for i in reversed(range(depth))) + "}\n"
    module = parse(text)
    assert sum(1 for _ in module.walk()) == depth + 1
    assert module.render() == text.encode()


@pytest.mark.parametrize("text,words", [
    ("", "the file is empty"),
    ("  \n\t\n", "the file is empty"),
    ("// only a comment\n", "no op in the file"),
    ("hello world, this is a letter\n", "'hello' is not an op that can stand at the top level"),
    ("x" * 10_000_000, "is not an op that can stand at the top level"),
    ("module {\n" + " " * 5_000_000 + "%0 = = x\n}\n", "unexpected '='"),
])
def test_not_ir_is_refused_with_a_short_message(text, words):
    with pytest.raises(ParseError) as err:
        parse(text, "bad.ttgir")
    msg = str(err.value)
    assert words in msg
    assert len(msg) < 600  # the offending line is cut to an excerpt
    shown, caret = msg.splitlines()[1:3]
    assert caret.strip() == "^" and len(shown) < 220


def test_lit_coverage_script_splits_cases_and_counts(tmp_path):
    import subprocess
    import sys

    from helpers import REPO

    lit = tmp_path / "lit"
    lit.mkdir()
    cases = [_text("blocks and cf"), _text("generic form"), "module {\n  not valid ((\n}\n",
             "// CHECK: only comments\n"]
    (lit / "t.mlir").write_text("// RUN: x\n\n// -----\n".join(cases))
    out = subprocess.run([sys.executable, str(REPO / "scripts/lit_coverage.py"), str(lit)],
                         capture_output=True, text=True, check=True).stdout
    assert ("4 cases in 1 files; Triton's parser accepts 2; 1 mlir-rejects; "
            "1 no op (only comments or aliases)") in out
    assert "ours: 2/2 = 100.0%" in out
