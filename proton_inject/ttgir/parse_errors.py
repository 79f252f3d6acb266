"""Parse errors a person can act on: file:line:column, the line with a caret, and what was
expected in words rather than the grammar's terminal names."""

from __future__ import annotations

import re

from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from ..errors import ParseError

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

_RESULTS_PREFIX = re.compile(r"%[\w$.-]+(?::\d+)?(?:[ \t]*,[ \t]*%[\w$.-]+(?::\d+)?)*[ \t]*=[ \t]*")


def _line_at(source: str, line: int) -> str:
    lines = source.split("\n", line)
    return lines[line - 1].rstrip("\r") if 0 < line <= len(lines) else ""


def error_at(source: str, path: str, pos: int, message: str) -> ParseError:
    line = source.count("\n", 0, pos) + 1
    column = pos - (source.rfind("\n", 0, pos) + 1) + 1
    return ParseError(message, path, line, column, _line_at(source, line))


def _describe_expected(expected) -> str:
    names = sorted({_DESCRIBE.get(e, repr(e.lower()) if e.isupper() else e) for e in expected})
    if len(names) > 6:
        names = names[:6] + ["..."]
    return ", ".join(names)


def parse_error(e: UnexpectedInput, source: str, path: str) -> ParseError:
    if isinstance(e, UnexpectedToken) and e.token.type == "$END":
        pos = len(source.rstrip("\n"))
        return error_at(source, path, pos,
                         f"unexpected end of file; expected {_describe_expected(e.expected)}"
                         " (is a '}' missing?)")
    if isinstance(e, UnexpectedEOF):
        pos = len(source.rstrip("\n"))
        return error_at(source, path, pos, "unexpected end of file (is a '}' missing?)")
    if isinstance(e, UnexpectedCharacters):
        if e.allowed and "OP_HEAD" in e.allowed:
            m = _RESULTS_PREFIX.match(source, e.pos_in_stream)
            if m:  # results parsed fine: point at what stands where the op name should be
                pos = m.end()
                ch = source[pos] if pos < len(source) else ""
                what = "end of line" if ch in "\r\n" else repr(ch)
                return error_at(source, path, pos, f"unexpected {what}; expected an op name "
                                 "after the results, like 'tt.load'")
        ch = source[e.pos_in_stream] if e.pos_in_stream < len(source) else ""
        what = "end of line" if ch in "\r\n" else repr(ch)
        allowed = _describe_expected(e.allowed) if e.allowed else "nothing"
        return error_at(source, path, e.pos_in_stream,
                         f"unexpected {what}; expected {allowed}")
    if isinstance(e, UnexpectedToken):
        tok = e.token
        shown = _DESCRIBE.get(tok.type) if tok.type in ("_NL", "CONT_NL") else repr(str(tok)[:40])
        return error_at(source, path, tok.start_pos,
                         f"unexpected {shown}; expected {_describe_expected(e.expected)}")
    return error_at(source, path, getattr(e, "pos_in_stream", 0) or 0, str(e))
