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
        caret = " " * (column - 1) + "^"
        super().__init__(f"{path}:{line}:{column}: {message}\n  {source_line}\n  {caret}")
