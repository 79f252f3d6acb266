"""What MLIR refuses around an op but the grammar's coarse tokens take in: the parser never
accepts such text, since insert places records by the ops (a terminator above all)."""

from __future__ import annotations

import re
from bisect import bisect_right
from itertools import accumulate

from ..errors import ParseError
from .parse_errors import error_at
from .tree import TERMINATORS, Op

# An op's name: a dialect-prefixed word, or a quoted one (the generic form).
OP_NAME = re.compile(r'"[A-Za-z_][\w$.]*"|[A-Za-z_][\w$]*(?:\.[\w$]+)*')


def check_top_level(ops: list[Op], source: str, path: str) -> None:
    """Only a module (or, as MLIR allows, dialect ops it wraps in one) stands at the top:
    a file of words or noise parses as bare-named ops, and is not IR."""
    if not ops:
        raise error_at(source, path, 0, "no op in the file; expected TTGIR (a 'module "
                        "attributes {...} {' holding tt.func ops), e.g. from `proton-inject dump`")
    for op in ops:
        if op.name not in ("module", "builtin.module") and "." not in op.name:
            raise error_at(source, path, op.start, f"{op.name[:40]!r} is not an op that can "
                            "stand at the top level; expected a module like 'module "
                            "attributes {...} {' (is this a TTGIR file?)")


# ---- what MLIR refuses around an op ----------------------------------------------

# Ops of the builtin dialect, the only ones MLIR reads without a dialect prefix in TTGIR (no op
# of Triton's declares a default dialect for its regions).
_BUILTIN_OPS = frozenset({"module", "unrealized_conversion_cast"})
# What may follow a terminator's name: operands, an attribute dict, `(` (scf.condition, the
# generic form), a block (cf.br), its location, or nothing. A word there is stray: MLIR reads
# it as the name of another op and refuses it.
_TERMINATOR_HEAD = re.compile(r"[ \t]*(?://[^\r\n]*)?(?:[%{(^]|loc\(|\r?\n|$)")
_BLANKS = re.compile(r"[ \t]*")
_WORD = re.compile(r"\S{1,40}")
# A cheap first look at an op's own text (without its plain trailing loc(#locN)) for what
# _scan_op_text decides: a location, or a dialect-prefixed name standing as a word.
_SUSPECT = re.compile(r"[\s(\[{<,:=)\]}>](?:loc\(|[A-Za-z_][\w$]*\.[A-Za-z_$])")
# The tokens that decide it: strings, comments, `->` (no bracket), brackets, a location, and a
# dotted word standing on its own (not a type, attribute, value, symbol or block name).
_TOKENS = re.compile(r'"(?:[^"\\\r\n]++|\\.)*+"|//[^\r\n]*|->|(?<![\w$.])loc\(|[(\[{<)\]}>]'
                     r"|(?<![^\s(\[{<,:=)\]}>])[A-Za-z_][\w$]*(?:\.[\w$]+)+")
_NOTHING = re.compile(r"(?:\s+|//[^\r\n]*)*")


def check_ops(ops: list[Op], source: str, path: str) -> None:
    """Refuse what MLIR refuses around an op but the coarse tokens take in: a word where an
    op name goes (`J tt.return` parses as an op named J), a stray word after a terminator,
    text after an op's location, another op's name inside an op's text. The tree must never
    hide an op, a terminator above all: insert places records by them. The first problem in
    the text is reported.

    `head` is an op's text after its name, without its regions and a plain trailing loc; one
    search over all heads finds the few ops whose text needs a closer look (a call per op
    cost a third more)."""
    heads = "\0".join(op.head for op in ops)
    starts = list(accumulate((len(op.head) + 1 for op in ops[:-1]), initial=0))
    look = {bisect_right(starts, m.start()) - 1 for m in _SUSPECT.finditer(heads)}
    terminator_head = _TERMINATOR_HEAD.match
    odd = [op for i, op in enumerate(ops)
           if i in look or (op.regions and _tail_looks_odd(op, source))
           or ("." not in op.name and op.parent is not None and op.name not in _BUILTIN_OPS)
           or ((op.name in TERMINATORS or op.name.endswith(".return"))
               and not terminator_head(op.head))]
    errors = [e for e in (_op_problem(op, source, path) for op in odd) if e is not None]
    errors += _misplaced(ops, source, path)
    if errors:
        raise min(errors, key=lambda e: (e.line, e.column))


def _misplaced(ops: list[Op], source: str, path: str) -> list[ParseError]:
    """What MLIR's verifier refuses in the tree's shape, where insert would otherwise index
    past it (found by scripts/fuzz_parser.py): a labelled block with no op (not even a
    terminator), and a function inside another op's region."""
    errors = []
    for op in ops:
        for region in op.regions:
            errors += [error_at(source, path, b.start, f"block {b.label.rstrip(':')} holds no op; MLIR "
                                "expects at least a terminator in a block")
                       for b in region.blocks if b.label is not None and not b.ops]
        if op.name == "tt.func" and op.parent is not None and op.parent.parent is not None \
                and op.parent.parent.parent.name not in ("module", "builtin.module"):
            errors.append(error_at(source, path, op.start, "tt.func inside another op's region "
                                   f"({op.parent.parent.parent.name}); a function must stand "
                                   "in the module"))
    return errors


def _tail_looks_odd(op: Op, source: str) -> bool:
    """Whether the text after an op's regions (`} else {`, `} loc(#loc9)`) needs a closer look."""
    search, regions = _SUSPECT.search, op.regions
    for i in range(1, len(regions)):  # from the `}` on: a word right after it counts
        if search(source, regions[i - 1].end - 1, regions[i].start):
            return True
    stop = op.end
    if op.loc_ref is not None and source.endswith(")", 0, stop):  # a plain trailing loc(#locN)
        stop = max(regions[-1].end, source.rfind("loc(", regions[-1].end, stop))
    return search(source, regions[-1].end - 1, stop) is not None


def _op_problem(op: Op, source: str, path: str) -> ParseError | None:
    name = op.name
    if "." not in name and op.parent is not None and name not in _BUILTIN_OPS:
        return error_at(source, path, _name_at(op, source), f"{name[:40]!r} is not an op "
                         "name: an op name has a dialect, like 'tt.load' (is it stray text "
                         "before an op?)")
    if (name in TERMINATORS or name.endswith(".return")) and not _TERMINATOR_HEAD.match(op.head):
        pos = _BLANKS.match(source, _name_end(op, source)).end()
        return error_at(source, path, pos, f"unexpected {_WORD.match(source, pos).group(0)!r}"
                         f" after {name}; expected its operands or the end of the op")
    pieces, pos = [], _name_end(op, source)  # its own text: its regions left out
    for region in op.regions:
        pieces.append((pos, region.start))
        pos = region.end
    stop = op.end
    if not op.regions and op.loc_ref is not None and source.endswith(")", 0, stop):
        stop = source.rfind("loc(", pos, stop)  # its plain trailing loc(#locN)
    pieces.append((pos, stop))
    return _scan_op_text(op, pieces, source, path)


def _name_at(op: Op, source: str) -> int:
    if source[op.start] != "%":
        return op.start
    return _BLANKS.match(source, source.index("=", op.start) + 1).end()


def _name_end(op: Op, source: str) -> int:
    at = _name_at(op, source)
    return at + len(OP_NAME.match(source, at).group(0))


def _scan_op_text(op: Op, pieces: list[tuple[int, int]], source: str,
                  path: str) -> ParseError | None:
    """Bracket depth over the op's own text: at depth 0 a dotted word is another op's name,
    and the op's location must end it."""
    depth = 0
    in_loc = False
    for i, (a, b) in enumerate(pieces):
        for m in _TOKENS.finditer(source, a, b):
            tok = m.group(0)
            if tok[0] in '"/' or tok == "->":
                continue
            if tok == "loc(" or tok in "([{<":
                in_loc = in_loc or (tok == "loc(" and depth == 0)
                depth += 1
            elif tok in ")]}>":
                depth = max(0, depth - 1)
                if depth == 0 and in_loc:
                    end = _NOTHING.match(source, m.end(), b).end()
                    if end < b or i < len(pieces) - 1:  # more text, or a region, after it
                        return error_at(source, path, end, "unexpected text after the op's "
                                         "location loc(...), which ends an op; put the next "
                                         "op on a line of its own")
                    return None
            elif depth == 0:
                return error_at(source, path, m.start(), f"{tok[:40]!r} stands inside the "
                                 f"text of another op ({op.name} at line {op.line}): one op "
                                 "per line (is there stray text before it?)")
    return None

