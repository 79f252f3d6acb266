"""What went wrong in one launch's data: kept as an ``Issue`` (one line per kernel and cause in
the report, ``formats/diagnostics.py``) and warned at once as a ``DecodeWarning``."""

from __future__ import annotations

import warnings

from proton_inject.formats.diagnostics import Issue


class DecodeWarning(UserWarning):
    """Damaged or partial profile data: decoding went on without the damaged part."""


def add_issue(out: list[Issue], cause: str, msg: str, why: str = "", then: str = "") -> None:
    """Keep one problem of a launch in ``out`` and warn it (``DecodeWarning``)."""
    out.append(Issue(cause, msg, why, then))
    warnings.warn(msg, DecodeWarning, stacklevel=3)
