"""What went wrong in one launch's data: kept as an ``Issue`` (one line per kernel and cause in
the report, ``formats/diagnostics.py``) and warned at once as a ``DecodeWarning``."""

from __future__ import annotations

import sys
import warnings

from proton_inject.formats.diagnostics import Issue

# The modules that decode a launch: a warning names the line that called into them.
_DECODING = {f"proton_inject.analyze.{m}" for m in ("decode", "clock", "direct_blocks", "issues")}


class DecodeWarning(UserWarning):
    """Damaged or partial profile data: decoding went on without the damaged part."""


def add_issue(out: list[Issue], cause: str, msg: str, why: str = "", then: str = "") -> None:
    """Keep one problem of a launch in ``out`` and warn it (``DecodeWarning``) at the line
    that called ``decode``, however deep in the decoding steps it was found."""
    out.append(Issue(cause, msg, why, then))
    level, frame = 2, sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__") in _DECODING:
        level, frame = level + 1, frame.f_back
    warnings.warn(msg, DecodeWarning, stacklevel=level)
