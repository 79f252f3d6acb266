"""Parse TTGIR text into the op tree of ``tree.py`` with a Lark LALR parser.

The grammar is ``ttgir.lark`` beside this file. The tree is built while
parsing (an inline transformer), so no intermediate parse tree is kept.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from lark import Lark, Token, Transformer
from lark.exceptions import UnexpectedInput

from ..errors import ParseError
from .locations import all_ops, resolve_locations
from .op_checks import OP_NAME, check_ops, check_top_level
from .parse_errors import error_at, parse_error
from .tree import Block, Module, Op, Region

_GRAMMAR = Path(__file__).with_name("ttgir.lark")


_LOC_REF = re.compile(r"loc\((#loc\d*)\)$")


def _trailing_loc_ref(text: str) -> str | None:
    """`#loc12` when the text ends with `loc(#loc12)` (found from the end: lines are long)."""
    at = text.rfind("loc(#", max(0, len(text) - 24))
    if at < 0:
        return None
    m = _LOC_REF.match(text, at)
    return m.group(1) if m else None


_RESULT = re.compile(r"%[\w$.-]+(?::\d+)?")
_OP_NAME_AT = re.compile(r"(?:%[^=]*=[ \t]*)?")


class _LocSpan:
    """A parsed `loc(...)` with the span of its text."""

    __slots__ = ("node", "start", "end")

    def __init__(self, node: tuple, start: int, end: int):
        self.node = node
        self.start = start
        self.end = end


def _span(child) -> tuple[int, int]:
    if isinstance(child, Token):
        return child.start_pos, child.end_pos
    return child.start, child.end


class _Build(Transformer):
    """Builds Op/Region/Block objects as LALR reduces each rule."""

    # ---- ops and regions ----
    def op(self, children):
        if len(children) == 2 and children[1] is None:  # the common one-line op
            return self._simple_op(children[0])
        results: list[str] = []
        regions: list[Region] = []
        head_tok = None
        loc_ref = None
        loc_node = None
        for c in children:
            if c is None:
                continue
            if isinstance(c, Token):
                t = c.type
                if t == "OP_HEAD":
                    head_tok = c
                    loc_ref = _trailing_loc_ref(c) or loc_ref
                    if c[0] == "%":
                        results = _RESULT.findall(c, 0, c.index("="))
                elif t == "OP_REST":
                    loc_ref = _trailing_loc_ref(c) or loc_ref
                elif t == "TRAILING_LOC_REF":
                    loc_ref = str(c)[4:-1]
            elif isinstance(c, Region):
                c.index = len(regions)
                regions.append(c)
            elif isinstance(c, _LocSpan):
                loc_node = c.node
        first = head_tok
        last = next(c for c in reversed(children) if c is not None)
        name_at = _OP_NAME_AT.match(head_tok).end()
        name = OP_NAME.match(head_tok, name_at).group(0)
        head = head_tok[name_at + len(name):]
        if loc_ref is not None and not regions:
            head = head[: head.rfind("loc(")].rstrip()
        op = Op(
            name=name.strip('"'),
            results=results,
            start=first.start_pos,
            end=_span(last)[1],
            line=first.line,
            column=first.column,
            regions=regions,
            loc_ref=loc_ref,
            loc_node=loc_node,
            head=head,
        )
        for r in regions:
            r.parent = op
        return op

    def _simple_op(self, tok):
        return _line_op(tok, tok.start_pos, tok.line, tok.column)

    def region(self, children):
        lbrace, rbrace = children[0], children[-1]
        blocks = [b for b in children[1:-1] if b is not None]
        region = Region(start=lbrace.start_pos, end=rbrace.end_pos, blocks=blocks)
        for b in blocks:
            b.parent = region
        return region

    def entry_block(self, items):
        ops = _expand(items)
        block = Block(label=None, start=ops[0].start, end=ops[-1].end, ops=ops)
        for op in ops:
            op.parent = block
        return block

    def labeled_block(self, children):
        label, ops = children[0], _expand(children[1:])
        end = ops[-1].end if ops else label.end_pos
        block = Block(label=str(label), start=label.start_pos, end=end, ops=ops)
        for op in ops:
            op.parent = block
        return block

    # ---- locations ----
    def loc(self, children):
        return _LocSpan(children[1], children[0].start_pos, children[-1].end_pos)

    def file_loc(self, c):
        return ("file", _unquote(c[0]), _number(c[1], c[1].start_pos),
                _number(c[2], c[2].start_pos))

    def name_loc(self, c):
        child = c[2] if len(c) > 2 and c[2] is not None else None
        return ("name", _unquote(c[0]), child)

    def unknown_loc(self, c):
        return ("unknown",)

    def callsite_loc(self, c):
        return ("callsite", c[1], c[2])

    def fused_loc(self, c):
        return ("fused", [x for x in c if isinstance(x, tuple)])

    def loc_ref(self, c):
        return ("ref", str(c[0]), c[0].start_pos)

    def loc_alias(self, c):
        return ("loc_alias", c[0], c[1])

    def attr_alias(self, c):
        return ("attr_alias", c[0].start_pos, c[0].end_pos)

    def start(self, children):
        return children


_SIMPLE_LOC = re.compile(
    r'(#loc\d*)\s*=\s*loc\((?:(?P<str>"(?:[^"\\\r\n]++|\\.)*+")'
    r'(?::(?P<line>\d+):(?P<col>\d+)|\((?P<child>#loc\d*)\))?'
    r'|(?P<unknown>unknown)|callsite\((?P<callee>#loc\d*) at (?P<caller>#loc\d*)\)'
    r'|(?P<ref>#loc\d*))\)'
)


# A source line or column: a billion is far past any file (and int() of thousands of digits
# is refused by Python itself).
MAX_NUMBER_DIGITS = 9


class NumberTooLarge(Exception):
    """A line or column number of more than MAX_NUMBER_DIGITS digits, at ``pos``."""

    def __init__(self, text: str, pos: int):
        super().__init__(text)
        self.text, self.pos = text, pos


def _number(text: str, pos: int) -> int:
    if len(text) > MAX_NUMBER_DIGITS:
        raise NumberTooLarge(str(text), pos)
    return int(text)


def _simple_loc_def(m: re.Match, pos: int) -> tuple[str, tuple]:
    """Decode one plain loc alias definition of a LOC_DEFS token into (name, loc node)."""
    g = m.groupdict()
    if g["str"] is not None:
        if g["line"] is not None:
            node = ("file", _unquote(g["str"]), _number(g["line"], pos + m.start("line")),
                    _number(g["col"], pos + m.start("col")))
        else:
            child = ("ref", g["child"], pos + m.start("child")) if g["child"] else None
            node = ("name", _unquote(g["str"]), child)
    elif g["unknown"]:
        node = ("unknown",)
    elif g["callee"]:
        node = ("callsite", ("ref", g["callee"], pos + m.start("callee")),
                ("ref", g["caller"], pos + m.start("caller")))
    else:
        node = ("ref", g["ref"], pos + m.start("ref"))
    return m.group(1), node


# MLIR string escapes: \\, \", \n, \t and two hex digits for any other byte.
_ESCAPE = re.compile(r"\\(?:([0-9A-Fa-f]{2})|(.))")
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t"}


def _unquote(tok) -> str:
    s = str(tok)[1:-1]
    if "\\" in s:
        s = _ESCAPE.sub(lambda m: chr(int(m.group(1), 16)) if m.group(1)
                        else _SIMPLE_ESCAPES.get(m.group(2), m.group(2)), s)
    return s


def _line_op(text: str, start: int, line: int, column: int) -> Op:
    """An Op from the text of one whole one-line op (results, name, rest, plain loc)."""
    loc_ref = None
    end = len(text)
    if text[-1] == ")":
        loc_ref = _trailing_loc_ref(text)
        if loc_ref:
            end = text.rfind("loc(")
    if text[0] == "%":  # results: everything before the first '=' (SSA names hold none)
        eq = text.index("=")
        results = _RESULT.findall(text, 0, eq)
        name_at = eq + 1
        while text[name_at] in " \t":
            name_at += 1
    else:
        results, name_at = [], 0
    name = OP_NAME.match(text, name_at).group(0)
    head = text[name_at + len(name):end]
    return Op(
        name=name.strip('"') if name[0] == '"' else name,
        results=results,
        start=start,
        end=start + len(text),
        line=line,
        column=column,
        loc_ref=loc_ref,
        head=head.rstrip() if loc_ref else head,
    )


# An op goes on over a line break after these, or before a line that opens with one of
# `) : * ->` (the grammar's OP_HEAD says the same).
_GOES_ON = (",", "(", ":", "*", "->")
_GOES_ON_NEXT = re.compile(r"[ \t]*(?:[):*]|->)")


def _split_lines(tok: Token) -> list[Op]:
    """The ops of an OP_LINES token, one per non-blank line, except that an op goes on over
    the line break where the grammar lets it (strings in TTGIR hold no raw line breaks)."""
    ops = []
    text = str(tok)
    pos, line = 0, tok.line
    while pos < len(text):
        end = text.find("\n", pos)
        end = len(text) if end < 0 else end
        lines = 1
        while end < len(text) and (text[pos:end].rstrip(" \t\r").endswith(_GOES_ON)
                                   or _GOES_ON_NEXT.match(text, end + 1)):
            nxt = text.find("\n", end + 1)
            end = len(text) if nxt < 0 else nxt
            lines += 1
        body = text[pos:end].rstrip(" \t\r")
        if body.strip():
            indent = len(body) - len(body.lstrip(" \t"))
            column = tok.column + indent if pos == 0 else indent + 1
            ops.append(_line_op(body[indent:], tok.start_pos + pos + indent, line, column))
        pos = end + 1
        line += lines
    return ops


def _expand(items) -> list[Op]:
    out: list[Op] = []
    for it in items:
        if isinstance(it, Token):
            out.extend(_split_lines(it))
        else:
            out.append(it)
    return out


_parser: Lark | None = None


def _get_parser() -> Lark:
    # Built in each process, never loaded from a file: lark's on-disk cache unpickles whatever
    # file it finds (docs/host-performance.md: 26 ms a process).
    global _parser
    if _parser is None:
        _parser = Lark(
            _GRAMMAR.read_text(),
            parser="lalr",
            lexer="contextual",
            transformer=_Build(),
            maybe_placeholders=True,
        )
    return _parser


def parse(text: str | bytes, path: str = "<string>") -> Module:
    """Parse TTGIR; raises ParseError (with file:line:column and a caret) on malformed input."""
    if isinstance(text, bytes):
        text = text.decode("latin-1")
    if not text.strip():
        raise ParseError("the file is empty; expected TTGIR (a 'module attributes {...} {' "
                         "holding tt.func ops), e.g. from `proton-inject dump`", path, 1, 1, "")
    source = text if text.endswith("\n") else text + "\n"
    try:
        items = _get_parser().parse(source)
    except UnexpectedInput as e:
        raise parse_error(e, source, path) from None
    except RecursionError:
        raise ParseError("regions nested too deeply", path, 1, 1, "") from None
    except NumberTooLarge as e:
        raise _too_large(e, source, path) from None

    ops: list[Op] = []
    loc_aliases: dict[str, object] = {}
    attr_aliases: list[tuple[int, int]] = []
    for item in items:
        if isinstance(item, Op):
            ops.append(item)
        elif isinstance(item, tuple) and item[0] == "loc_alias":
            tok = item[1]
            if str(tok) in loc_aliases:
                raise error_at(source, path, tok.start_pos, f"loc alias {tok} is defined twice")
            loc_aliases[str(tok)] = item[2].node
        elif isinstance(item, Token):  # LOC_DEFS, OP_LINES or RESOURCES
            if item.type == "LOC_DEFS":
                for m in _SIMPLE_LOC.finditer(item):
                    try:
                        name, node = _simple_loc_def(m, item.start_pos)
                    except NumberTooLarge as e:
                        raise _too_large(e, source, path) from None
                    if name in loc_aliases:
                        raise error_at(source, path, item.start_pos + m.start(),
                                        f"loc alias {name} is defined twice")
                    loc_aliases[name] = node
            elif item.type == "OP_LINES":
                ops.extend(_split_lines(item))
        elif isinstance(item, tuple) and item[0] == "attr_alias":
            attr_aliases.append((item[1], item[2]))
    check_top_level(ops, source, path)
    module = Module(path=path, text=text, items=ops, loc_aliases=loc_aliases,
                    attr_aliases=attr_aliases)
    every_op = all_ops(module)
    check_ops(every_op, source, path)
    resolve_locations(module, source, every_op)
    return module


def _too_large(e: NumberTooLarge, source: str, path: str) -> ParseError:
    shown = e.text if len(e.text) <= 20 else f"{e.text[:12]}... ({len(e.text):,} digits)"
    return error_at(source, path, e.pos, f"line or column number {shown} in a loc is too "
                    f"large (more than {MAX_NUMBER_DIGITS} digits); not TTGIR from Triton")


def parse_file(path: str | os.PathLike) -> Module:
    """Read and parse a .ttgir file; a missing, special or huge file is a UserError."""
    from proton_inject.formats.schema import read_ttgir

    p = Path(path)
    return parse(read_ttgir(p), str(p))
