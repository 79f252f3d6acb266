"""What MLIR refuses around an op is refused here too (issue 31 item 3): stray text before or
after an op is a ParseError naming file, line and column, never an op the tree makes up (a
`J tt.return` read as an op named `J` hid the function's terminator, and `insert
--kernel-scope` then put the end record after it). Each case is a real sample with one edit,
and Triton's own parser refuses each one too."""

from __future__ import annotations

import pytest
from helpers import SAMPLES

from proton_inject.errors import ParseError
from proton_inject.ttgir import parse

TEXT = (SAMPLES / "cuda-90/add_kernel.ttgir").read_text()
RET = "    tt.return loc(#loc17)\n"
LOOP_END = "    } loc(#loc9)\n"  # closes the kernel's scf.for; the tt.return follows it

NOT_AN_OP = "is not an op name: an op name has a dialect, like 'tt.load'"
SECOND_OP = "stands inside the text of another op"
AFTER_LOC = "after the op's location"

# (what, old, new, where the caret points in `new`, words in the message)
STRAY = [
    ("word before an op", RET, "    J tt.return loc(#loc17)\n", "J tt", f"'J' {NOT_AN_OP}"),
    ("word glued to a region's brace", LOOP_END + RET, "    }J tt.return loc(#loc17)\n", "J tt",
     f"'J' {NOT_AN_OP}"),
    ("word glued to a region's location", LOOP_END + RET,
     "    } loc(#loc9)J tt.return loc(#loc17)\n", "J tt", f"'J' {NOT_AN_OP}"),
    ("word after a region's brace", LOOP_END + RET, "    } J tt.return loc(#loc17)\n",
     "tt.return", f"'tt.return' {SECOND_OP} (scf.for at line 21)"),
    ("op name as results' op", "%pid = tt.get_program_id", "%pid = J tt.get_program_id", "J tt",
     f"'J' {NOT_AN_OP}"),
    ("dotted word before an op", RET, "    foo.bar tt.return loc(#loc17)\n", "tt.return",
     f"'tt.return' {SECOND_OP} (foo.bar at line 35)"),
    ("word after an op's location", RET, "    tt.return loc(#loc17) J\n", "J\n", AFTER_LOC),
    ("op after an op's location", RET, "    tt.return loc(#loc17) tt.return loc(#loc17)\n",
     "tt.return loc(#loc17)\n", AFTER_LOC),
    ("word after a region op's location", LOOP_END, "    } loc(#loc9) J\n", "J\n",
     f"'J' {NOT_AN_OP}"),
    ("word after a terminator", RET, "    tt.return J loc(#loc17)\n", "J loc",
     "unexpected 'J' after tt.return"),
    ("word after a yield", "%2 = arith.addf", "scf.yield J\n      %2 = arith.addf", "J\n",
     "unexpected 'J' after scf.yield"),
]


def _case(old: str, new: str) -> str:
    assert TEXT.count(old) == 1
    return TEXT.replace(old, new)


@pytest.mark.parametrize("what,old,new,at,words", STRAY, ids=[s[0] for s in STRAY])
def test_stray_text_around_an_op_is_located(what, old, new, at, words):
    text = _case(old, new)
    pos = text.index(new) + new.index(at)
    line = text.count("\n", 0, pos) + 1
    column = pos - text.rfind("\n", 0, pos)
    with pytest.raises(ParseError) as err:
        parse(text, "k.ttgir")
    e = err.value
    assert words in e.reason, str(e)
    assert (e.path, e.line, e.column) == ("k.ttgir", line, column), str(e)
    assert str(e).splitlines()[2].index("^") - 2 == column - 1


@pytest.mark.parametrize("what,old,new,at,words", STRAY, ids=[s[0] for s in STRAY])
def test_mlir_refuses_the_same(what, old, new, at, words, tmp_path, mlir_context):
    from triton._C.libtriton import ir

    path = tmp_path / "k.ttgir"
    path.write_text(_case(old, new))
    with pytest.raises(RuntimeError):
        ir.parse_mlir_module(str(path), mlir_context)


# MLIR reads these as they are meant; they must stay accepted.
ACCEPTED = [
    ("op glued to a region's brace", LOOP_END + RET, "    }tt.return loc(#loc17)\n"),
    ("comment after an op", RET, "    tt.return loc(#loc17)  // tt.return J\n"),
    ("comment after a terminator", RET, "    tt.return  // J\n"),
    ("dotted attribute keys", "%c4_i32 = arith.constant 4 : i32",
     "%c4_i32 = arith.constant {tt.a = 1 : i32, tt.b = \"x) tt.c\"} 4 : i32"),
]


@pytest.mark.parametrize("what,old,new", ACCEPTED, ids=[a[0] for a in ACCEPTED])
def test_what_mlir_accepts_still_parses(what, old, new, tmp_path, mlir_context):
    from triton._C.libtriton import ir

    text = _case(old, new)
    path = tmp_path / "k.ttgir"
    path.write_text(text)
    ir.parse_mlir_module(str(path), mlir_context)
    module = parse(text, "k.ttgir")
    assert module.render() == text.encode()
    (fn,) = module.functions
    assert fn.op.regions[0].blocks[0].ops[-1].name == "tt.return"


def test_two_ops_on_one_line_are_refused_though_mlir_reads_them():
    """MLIR reads `%c = arith.constant 0 : i32 tt.return` as two ops; the tree would hold one
    (its terminator hidden in the constant's text), so it is refused: MLIR never prints it."""
    text = _case("    %c1_i32 = arith.constant 1 : i32 loc(#loc1)\n",
                 "    %c1_i32 = arith.constant 1 : i32 tt.get_program_id x : i32\n")
    with pytest.raises(ParseError) as err:
        parse(text, "k.ttgir")
    assert f"'tt.get_program_id' {SECOND_OP} (arith.constant at line 13)" in err.value.reason


# --- insert never places a record after a terminator -------------------------------------------

MATMUL = (SAMPLES / "cuda-90/matmul_kernel.ttgir").read_text()
YIELD = MATMUL[MATMUL.index("      scf.yield %acc_105#0"):]
YIELD = YIELD[: YIELD.index("\n") + 1]

# (what, sample text, old, new, rules, words): terminators with ops after them in their block,
# which MLIR's parser takes and its verifier refuses ("must be the last operation").
AFTER_TERMINATOR = [
    ("kernel scope ends after the first of two returns", TEXT, RET, RET + RET,
     dict(kernel_scope=True), "k.ttgir:35: kernel add_kernel: kernel-scope region 'kernel': its "
     "end record would go after tt.return, which must end its block"),
    ("loop starts after a return", TEXT, "    scf.for %i", "    tt.return\n    scf.for %i",
     dict(loops="outer"), "k.ttgir:21: kernel add_kernel: loops region 'loop i @vector_add.py:17': "
     "its start record would go after tt.return"),
    ("iteration ends after the first of two yields", MATMUL, YIELD, YIELD + YIELD,
     dict(loops="iteration"), "k.ttgir:159: kernel matmul_kernel: loops region 'iter acc "
     "@matmul.py:36': its end record would go after scf.yield"),
    ("op region after a yield", TEXT, "      tt.store %1", "      scf.yield\n      tt.store %1",
     dict(ops=["tt.store"]), "k.ttgir:33: kernel add_kernel: op tt.store region 'tt.store "
     "@vector_add.py:22': its start record would go after scf.yield"),
]


@pytest.mark.parametrize("what,text,old,new,rules,words", AFTER_TERMINATOR,
                         ids=[a[0] for a in AFTER_TERMINATOR])
def test_insert_never_places_a_record_after_a_terminator(what, text, old, new, rules, words,
                                                         tmp_path, mlir_context):
    from triton._C.libtriton import ir

    from proton_inject.errors import UserError
    from proton_inject.instrument.insert import insert_text
    from proton_inject.instrument.rules import Rules

    assert text.count(old) == 1
    broken = text.replace(old, new)
    path = tmp_path / "k.ttgir"
    path.write_text(broken)
    with pytest.raises(RuntimeError):  # MLIR: the terminator must end its block
        ir.parse_mlir_module(str(path), mlir_context)
    parse(broken, "k.ttgir")  # our parser keeps such a file: strip and inspect still read it
    with pytest.raises(UserError) as err:
        insert_text(broken, Rules(marks=False, **rules), "k.ttgir")
    msg = str(err.value)
    assert msg.startswith(words), msg
    assert "\n" not in msg


def test_insert_refuses_an_end_record_after_an_op_sharing_the_line():
    """`} loc(#loc9)  tt.return` is two ops to MLIR and to the parser; the loop's end record goes
    after its line, which would put it after the tt.return: refused."""
    from proton_inject.errors import UserError
    from proton_inject.instrument.insert import insert_text
    from proton_inject.instrument.rules import Rules

    text = _case(LOOP_END + RET, "    } loc(#loc9)  tt.return loc(#loc17)\n")
    (fn,) = parse(text, "k.ttgir").functions
    assert [op.name for op in fn.op.regions[0].blocks[0].ops[-2:]] == ["scf.for", "tt.return"]
    for rules in (Rules(kernel_scope=True, marks=False), Rules(loops="outer", marks=False)):
        with pytest.raises(UserError, match=r"k.ttgir:34: 'tt.return loc\(#loc17\)' follows "
                                            "scf.for on its line; cannot insert a record"):
            insert_text(text, rules, "k.ttgir")


def test_an_end_record_after_an_op_not_starting_its_line_is_indented_with_blanks(tmp_path,
                                                                                 mlir_context):
    from triton._C.libtriton import ir

    from proton_inject.instrument.insert import insert_text
    from proton_inject.instrument.rules import Rules
    from proton_inject.instrument.strip import strip_text

    text = _case(LOOP_END, "    } loc(#loc9)%z = arith.constant 0 : i32\n")
    out = insert_text(text, Rules(kernel_scope=True, marks=False), "k.ttgir").text
    assert '\n    } loc(#loc9)%z = arith.constant 0 : i32\n    proton.record end "kernel"\n' in out
    path = tmp_path / "k.ttgir"
    path.write_text(out)
    ir.parse_mlir_module(str(path), mlir_context)
    assert strip_text(out) == text


def test_sampling_refuses_a_loop_whose_last_line_holds_another_op():
    """--sample-ctas copies a loop with records inside whole lines: a tt.return on the loop's
    last line would be copied into both branches of the scf.if."""
    from proton_inject.errors import UserError
    from proton_inject.instrument.insert import insert_text
    from proton_inject.instrument.rules import Rules

    text = _case(LOOP_END + RET, "    } loc(#loc9)  tt.return loc(#loc17)\n")
    with pytest.raises(UserError, match="does not sit on lines of its own"):
        insert_text(text, Rules(loops="iteration", marks=False, sample_ctas=4), "k.ttgir")
