"""Errors a user can cause. The CLI prints them in one line and exits 2."""

from __future__ import annotations


class UserError(Exception):
    """A problem with the user's input (bad IR, bad rule, missing file...).

    The message is complete on its own: what went wrong, where, and what to do.
    """

    exit_code = 2


class ParseError(UserError):
    """Malformed TTGIR, located to file:line:column with the line and a caret."""

    def __init__(self, message: str, path: str, line: int, column: int, source_line: str):
        self.reason = message
        self.path = path
        self.line = line
        self.column = column
        self.source_line = source_line
        shown, at = excerpt(source_line, column - 1)
        caret = " " * at + "^"
        super().__init__(f"{path}:{line}:{column}: {message}\n  {shown}\n  {caret}")


EXCERPT = 200  # characters of an offending line shown in a message: lines can be megabytes


def excerpt(line: str, at: int) -> tuple[str, int]:
    """At most about EXCERPT characters of `line` around index `at`, and `at` in them."""
    full = len(line)
    line = "".join(c if c.isprintable() or c == "\t" else "?" for c in line[: at + EXCERPT])
    if full <= EXCERPT:
        return line, at
    lo = max(0, min(at - EXCERPT // 2, full - EXCERPT))
    hi = lo + EXCERPT
    shown = ("..." if lo else "") + line[lo:hi] + ("..." if hi < full else "")
    return shown, at - lo + (3 if lo else 0)
