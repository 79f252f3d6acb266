"""A clock bracket's rows (smid, clock and globaltimer at two timer edges, per CTA) and the few
numbers kept from them in a launch's metadata; ``collect/bracket.py`` runs the kernel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np


def bracket_bytes(ctas: int) -> int:
    """Device bytes for both sides of one bracket of ``ctas`` CTAs."""
    return 2 * ctas * WORDS * 8


def summarize(rows: np.ndarray) -> dict[str, Any] | None:
    """One side's rows ``(ctas, 5)`` int64 -> what the metadata keeps (None: nothing ran).

    ``mhz`` is total cycles / total ns over CTAs; ``sem_mhz`` the standard error of the
    per-CTA rates; ``t0``/``t1`` the absolute globaltimer span of the side.
    """
    r = np.asarray(rows, np.int64).reshape(-1, WORDS)
    dc, dt = r[:, 3] - r[:, 1], r[:, 4] - r[:, 2]
    ok = (r[:, 2] > 0) & (dt > 0) & (dc > 0)
    if not ok.any():
        return None
    dc, dt = dc[ok].astype(np.float64), dt[ok].astype(np.float64)
    per = dc / dt * 1000.0
    n = int(ok.sum())
    return {
        "mhz": round(float(dc.sum() / dt.sum() * 1000.0), 3),
        "sem_mhz": round(float(per.std(ddof=1) / math.sqrt(n)) if n > 1 else float(per[0]), 4),
        "ctas": n,
        "sms": int(len(np.unique(r[ok, 0]))),
        "spin_ns": int(np.median(dt)),
        "t0": int(r[ok, 2].min()),
        "t1": int(r[ok, 4].max()),
    }


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


WORDS = 5  # per CTA: smid, c0, t0, c1, t1 (int64)


# Before and after further apart than this (relative) are said to differ: the clock changed
# around the launch and the mean of the two is only as good as their difference.
MAX_SIDE_DIFF = 0.01
# What the bracket misses of the clock a launch ran at, beyond its sides' difference and
# standard errors (benchmarks/bracket_vs_launch.py, H100, 2026-11-27: 78 launches of 200 us
# and 2 ms, idle and after matmuls, against each launch's own clock read at timer edges: up
# to 0.08% beyond the sides' half difference plus 2 standard errors; a 200 us launch whose
# sides read 1,493 and 1,498 MHz ran at 1,491, outside both, hence their whole difference).
SYSTEMATIC_PCT = 0.1
