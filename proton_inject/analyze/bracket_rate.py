"""The clock a launch's bracket measured (the sides ``formats/clock_bracket.py`` keeps in its
metadata), and what it is worth."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from proton_inject.formats.schema import measured

# Before and after further apart than this (relative) are said to differ: the clock changed
# around the launch and the mean of the two is only as good as their difference.
MAX_SIDE_DIFF = 0.01
# What the bracket misses of the clock a launch ran at, beyond its sides' difference and
# standard errors, % (measured: proton_inject/data/measured.json).
SYSTEMATIC_PCT = measured()["clock_bracket_systematic_pct"]["pct"]


@dataclass
class BracketRate:
    """The clock a bracket measured: mean of the sides, and what it is worth."""

    mhz: float
    # the sides' difference plus 2 standard errors, relative, plus SYSTEMATIC_PCT
    uncertainty_pct: float
    before: dict[str, Any] | None
    after: dict[str, Any] | None

    @property
    def sides_differ_pct(self) -> float | None:
        """How far after is from before, relative (None with one side)."""
        if not (self.before and self.after):
            return None
        return 100.0 * (self.after["mhz"] - self.before["mhz"]) / self.mhz


def rate(bracket: dict[str, Any] | None) -> BracketRate | None:
    """The clock of a launch's bracket (``LaunchMeta.clock_bracket``), None when it has none."""
    if not bracket:
        return None
    sides = [s for s in (bracket.get("before"), bracket.get("after")) if s]
    if not sides:
        return None
    mhz = sum(s["mhz"] for s in sides) / len(sides)
    sem = math.sqrt(sum(s["sem_mhz"] ** 2 for s in sides)) / len(sides)
    differ = abs(sides[0]["mhz"] - sides[-1]["mhz"])
    return BracketRate(mhz, 100.0 * (differ + 2 * sem) / mhz + SYSTEMATIC_PCT, bracket.get("before"),
                       bracket.get("after"))


def missing_reason(bracket: dict[str, Any] | None) -> str:
    """Why a launch has no bracket, in the report's words."""
    if bracket is None:
        return "older run (its metadata has none)"
    return str(bracket.get("missing") or "bracket kernel did not run")
