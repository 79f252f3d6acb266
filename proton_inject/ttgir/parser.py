"""Parse TTGIR text into the op tree of ``tree.py`` with a Lark LALR parser.

The grammar is ``ttgir.lark`` beside this file. The tree is built while
parsing (an inline transformer), so no intermediate parse tree is kept.
"""

from __future__ import annotations

import os
import re
from bisect import bisect_right
from itertools import accumulate
from pathlib import Path

from lark import Lark, Token, Transformer
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from ..errors import ParseError
from .tree import TERMINATORS, UNKNOWN, Block, FileLoc, Location, Module, Op, Region

_GRAMMAR = Path(__file__).with_name("ttgir.lark")

# What a person should read instead of a terminal's name in an error message.
_DESCRIBE = {
    "_NL": "end of line",
    "CONT_NL": "end of line",
    "LBRACE": "'{' opening a region",
    "RBRACE": "'}' closing a region",
    "LOC_ID": "a loc alias like #loc3",
    "LOC_DEFS": "a loc alias definition",
    "OP_LINES": "an op like '%x = tt.load ...'",
    "ATTR_ALIAS_DEF": "an alias definition like '#blocked = ...'",
    "RESOURCES": "a '{-# ... #-}' resource section",
    "OP_HEAD": "an op like '%x = tt.load ...'",
    "BLOCK_LABEL": "a block label like '^bb0(...):'",
    "TRAILING_LOC_REF": "a location like loc(#loc3)",
    "OP_REST": "the op's operands, attributes and types",
    "LOC_OPEN": "'loc('",
    "LPAREN": "'('",
    "RPAREN": "')'",
    "STRING": "a quoted string",
    "INT": "an integer",
    "FUSED_META": "fused metadata '<...>'",
    "EQUAL": "'='",
    "COMMA": "','",
    "COLON": "':'",
    "LSQB": "'['",
    "RSQB": "']'",
    "$END": "end of file",
}


_LOC_REF = re.compile(r"loc\((#loc\d*)\)$")


def _trailing_loc_ref(text: str) -> str | None:
    """`#loc12` when the text ends with `loc(#loc12)` (found from the end: lines are long)."""
    at = text.rfind("loc(#", max(0, len(text) - 24))
    if at < 0:
        return None
    m = _LOC_REF.match(text, at)
    return m.group(1) if m else None
_RESULT = re.compile(r"%[\w$.-]+(?::\d+)?")
_RESULTS_PREFIX = re.compile(r"%[\w$.-]+(?::\d+)?(?:[ \t]*,[ \t]*%[\w$.-]+(?::\d+)?)*[ \t]*=[ \t]*")
_OP_NAME_AT = re.compile(r"(?:%[^=]*=[ \t]*)?")
_OP_NAME = re.compile(r'"[A-Za-z_][\w$.]*"|[A-Za-z_][\w$]*(?:\.[\w$]+)*')


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
        name = _OP_NAME.match(head_tok, name_at).group(0)
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
        return ("file", _unquote(c[0]), int(c[1]), int(c[2]))

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
    r'(#loc\d*)\s*=\s*loc\((?:(?P<str>"(?:[^"\\\r\n]|\\.)*")'
    r'(?::(?P<line>\d+):(?P<col>\d+)|\((?P<child>#loc\d*)\))?'
    r'|(?P<unknown>unknown)|callsite\((?P<callee>#loc\d*) at (?P<caller>#loc\d*)\)'
    r'|(?P<ref>#loc\d*))\)'
)


def _simple_loc_def(m: re.Match, pos: int) -> tuple[str, tuple]:
    """Decode one plain loc alias definition of a LOC_DEFS token into (name, loc node)."""
    g = m.groupdict()
    if g["str"] is not None:
        if g["line"] is not None:
            node = ("file", _unquote(g["str"]), int(g["line"]), int(g["col"]))
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
    name = _OP_NAME.match(text, name_at).group(0)
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
    global _parser
    if _parser is None:
        cache_dir = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "proton-inject"
        try:
            cache_dir.mkdir(parents=True, exist_ok=True)
            cache: bool | str = str(cache_dir / "ttgir-grammar.lark-cache")
        except OSError:
            cache = False
        _parser = Lark(
            _GRAMMAR.read_text(),
            parser="lalr",
            lexer="contextual",
            transformer=_Build(),
            maybe_placeholders=True,
            cache=cache,
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
        raise _parse_error(e, source, path) from None
    except RecursionError:
        raise ParseError("regions nested too deeply", path, 1, 1, "") from None

    ops: list[Op] = []
    loc_aliases: dict[str, object] = {}
    attr_aliases: list[tuple[int, int]] = []
    for item in items:
        if isinstance(item, Op):
            ops.append(item)
        elif isinstance(item, tuple) and item[0] == "loc_alias":
            tok = item[1]
            if str(tok) in loc_aliases:
                raise _error_at(source, path, tok.start_pos, f"loc alias {tok} is defined twice")
            loc_aliases[str(tok)] = item[2].node
        elif isinstance(item, Token):  # LOC_DEFS, OP_LINES or RESOURCES
            if item.type == "LOC_DEFS":
                for m in _SIMPLE_LOC.finditer(item):
                    name, node = _simple_loc_def(m, item.start_pos)
                    if name in loc_aliases:
                        raise _error_at(source, path, item.start_pos + m.start(),
                                        f"loc alias {name} is defined twice")
                    loc_aliases[name] = node
            elif item.type == "OP_LINES":
                ops.extend(_split_lines(item))
        elif isinstance(item, tuple) and item[0] == "attr_alias":
            attr_aliases.append((item[1], item[2]))
    _check_top_level(ops, source, path)
    module = Module(path=path, text=text, items=ops, loc_aliases=loc_aliases,
                    attr_aliases=attr_aliases)
    every_op = _all_ops(module)
    _check_ops(every_op, source, path)
    _resolve_locations(module, source, every_op)
    return module


def _check_top_level(ops: list[Op], source: str, path: str) -> None:
    """Only a module (or, as MLIR allows, dialect ops it wraps in one) stands at the top:
    a file of words or noise parses as bare-named ops, and is not IR."""
    if not ops:
        raise _error_at(source, path, 0, "no op in the file; expected TTGIR (a 'module "
                        "attributes {...} {' holding tt.func ops), e.g. from `proton-inject dump`")
    for op in ops:
        if op.name not in ("module", "builtin.module") and "." not in op.name:
            raise _error_at(source, path, op.start, f"{op.name[:40]!r} is not an op that can "
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
_TOKENS = re.compile(r'"(?:[^"\\\r\n]|\\.)*"|//[^\r\n]*|->|(?<![\w$.])loc\(|[(\[{<)\]}>]'
                     r"|(?<![^\s(\[{<,:=)\]}>])[A-Za-z_][\w$]*(?:\.[\w$]+)+")
_NOTHING = re.compile(r"(?:\s+|//[^\r\n]*)*")


def _check_ops(ops: list[Op], source: str, path: str) -> None:
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
    if errors:
        raise min(errors, key=lambda e: (e.line, e.column))


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
        return _error_at(source, path, _name_at(op, source), f"{name[:40]!r} is not an op "
                         "name: an op name has a dialect, like 'tt.load' (is it stray text "
                         "before an op?)")
    if (name in TERMINATORS or name.endswith(".return")) and not _TERMINATOR_HEAD.match(op.head):
        pos = _BLANKS.match(source, _name_end(op, source)).end()
        return _error_at(source, path, pos, f"unexpected {_WORD.match(source, pos).group(0)!r}"
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
    return at + len(_OP_NAME.match(source, at).group(0))


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
                        return _error_at(source, path, end, "unexpected text after the op's "
                                         "location loc(...), which ends an op; put the next "
                                         "op on a line of its own")
                    return None
            elif depth == 0:
                return _error_at(source, path, m.start(), f"{tok[:40]!r} stands inside the "
                                 f"text of another op ({op.name} at line {op.line}): one op "
                                 "per line (is there stray text before it?)")
    return None


def parse_file(path: str | os.PathLike) -> Module:
    """Read and parse a .ttgir file; a missing, special or huge file is a UserError."""
    from proton_inject.formats.schema import read_ttgir

    p = Path(path)
    return parse(read_ttgir(p), str(p))


# ---- location resolution ---------------------------------------------------

def _all_ops(module: Module) -> list[Op]:
    """Every op, without the cost of nested generators (order does not matter here)."""
    out: list[Op] = []
    stack = list(module.items)
    while stack:
        op = stack.pop()
        out.append(op)
        for region in op.regions:
            for block in region.blocks:
                stack.extend(block.ops)
    return out


def _resolve_locations(module: Module, source: str, ops: list[Op]) -> None:
    aliases = module.loc_aliases
    memo: dict[str, Location] = {}
    path = module.path

    def check_refs(node, pos_hint: int) -> None:
        kind = node[0]
        if kind == "ref":
            if node[1] not in aliases:
                raise _error_at(source, path, node[2], f"loc alias {node[1]} is never defined")
        elif kind == "name" and node[2] is not None:
            check_refs(node[2], pos_hint)
        elif kind == "callsite":
            check_refs(node[1], pos_hint)
            check_refs(node[2], pos_hint)
        elif kind == "fused":
            for c in node[1]:
                check_refs(c, pos_hint)

    for node in aliases.values():
        check_refs(node, 0)

    def resolve_alias(name: str, stack: tuple[str, ...]) -> Location:
        if name in memo:
            return memo[name]
        if name in stack:
            return UNKNOWN  # a cycle MLIR would reject; keep going without a location
        loc = resolve(aliases[name], stack + (name,))
        memo[name] = loc
        return loc

    def resolve(node, stack: tuple[str, ...] = ()) -> Location:
        kind = node[0]
        if kind == "file":
            return Location((FileLoc(node[1], node[2], node[3]),), ())
        if kind == "ref":
            return resolve_alias(node[1], stack)
        if kind == "name":
            inner = resolve(node[2], stack) if node[2] is not None else UNKNOWN
            return Location(inner.frames, (node[1],) + inner.names)
        if kind == "callsite":
            callee, caller = resolve(node[1], stack), resolve(node[2], stack)
            return Location(callee.frames + caller.frames, callee.names + caller.names)
        if kind == "fused":
            parts = [resolve(c, stack) for c in node[1]]
            return Location(tuple(f for p in parts for f in p.frames),
                            tuple(n for p in parts for n in p.names))
        return UNKNOWN

    for op in ops:
        if op.loc_ref is not None:
            if op.loc_ref not in aliases:
                raise _error_at(source, path, op.end - len(op.loc_ref) - 1,
                                f"loc alias {op.loc_ref} is never defined")
            op.location = resolve_alias(op.loc_ref, ())
        elif op.loc_node is not None:
            check_refs(op.loc_node, op.start)
            op.location = resolve(op.loc_node)


# ---- errors -------------------------------------------------------------------

def _line_at(source: str, line: int) -> str:
    lines = source.split("\n", line)
    return lines[line - 1].rstrip("\r") if 0 < line <= len(lines) else ""


def _error_at(source: str, path: str, pos: int, message: str) -> ParseError:
    line = source.count("\n", 0, pos) + 1
    column = pos - (source.rfind("\n", 0, pos) + 1) + 1
    return ParseError(message, path, line, column, _line_at(source, line))


def _describe_expected(expected) -> str:
    names = sorted({_DESCRIBE.get(e, repr(e.lower()) if e.isupper() else e) for e in expected})
    if len(names) > 6:
        names = names[:6] + ["..."]
    return ", ".join(names)


def _parse_error(e: UnexpectedInput, source: str, path: str) -> ParseError:
    if isinstance(e, UnexpectedToken) and e.token.type == "$END":
        pos = len(source.rstrip("\n"))
        return _error_at(source, path, pos,
                         f"unexpected end of file; expected {_describe_expected(e.expected)}"
                         " (is a '}' missing?)")
    if isinstance(e, UnexpectedEOF):
        pos = len(source.rstrip("\n"))
        return _error_at(source, path, pos, "unexpected end of file (is a '}' missing?)")
    if isinstance(e, UnexpectedCharacters):
        if e.allowed and "OP_HEAD" in e.allowed:
            m = _RESULTS_PREFIX.match(source, e.pos_in_stream)
            if m:  # results parsed fine: point at what stands where the op name should be
                pos = m.end()
                ch = source[pos] if pos < len(source) else ""
                what = "end of line" if ch in "\r\n" else repr(ch)
                return _error_at(source, path, pos, f"unexpected {what}; expected an op name "
                                 "after the results, like 'tt.load'")
        ch = source[e.pos_in_stream] if e.pos_in_stream < len(source) else ""
        what = "end of line" if ch in "\r\n" else repr(ch)
        allowed = _describe_expected(e.allowed) if e.allowed else "nothing"
        return _error_at(source, path, e.pos_in_stream,
                         f"unexpected {what}; expected {allowed}")
    if isinstance(e, UnexpectedToken):
        tok = e.token
        shown = _DESCRIBE.get(tok.type) if tok.type in ("_NL", "CONT_NL") else repr(str(tok)[:40])
        return _error_at(source, path, tok.start_pos,
                         f"unexpected {shown}; expected {_describe_expected(e.expected)}")
    return _error_at(source, path, getattr(e, "pos_in_stream", 0) or 0, str(e))
