"""What a kernel's launches say about their clocks and problems, kept once per group of
launches that say the same thing (for ``summary.KernelAcc``): each group lists its launches,
so a report over 10^4 launches keeps a few bytes per launch instead of a clock summary
(~1.3 KB) and an issue (~0.7 KB) each. Each launch's whole clock stays in its trace's
metadata."""

from __future__ import annotations

import math
from array import array
from typing import Any

import numpy as np

from proton_inject.formats.diagnostics import Issue

# Numbers of a launch's clock summary (``clock.ClockFit.summary``) that a group keeps as the
# lowest or the highest over its launches: the worst of each, as the report's clock line says it.
LOWEST = ("mhz_min", "fit_r2")
HIGHEST = ("mhz_max", "sms", "sms_with_own_rate", "sm_rate_spread_pct", "residual_ns",
           "first_record_gap_ns", "timer_tick_ns", "anchor_spread_ns", "uncertainty_pct",
           "bracket_sides_differ_pct")


def _worse(a: float | None, b: float | None, pick: Any) -> float | None:
    return b if a is None else a if b is None else pick(a, b)


class ClockGroup:
    """Launches whose clock came from one source (and that lacked a clock bracket for one
    reason): each launch's number and median rate, the worst of their other numbers, and why
    the first launch got that source (reasons hold numbers: a group for each would be a group
    for each launch)."""

    def __init__(self, source: str, bracket_missing: str | None):
        self.source, self.bracket_missing = source, bracket_missing
        self.first, self.reason = -1, None
        self.launches = array("q")
        self.mhz = array("d")  # each launch's mhz_median (nan: none)
        self.lowest: dict[str, float | None] = dict.fromkeys(LOWEST)
        self.highest: dict[str, float | None] = dict.fromkeys(HIGHEST)

    def add(self, launch: int, clock: dict[str, Any]) -> None:
        if not self.launches or launch < self.first:
            self.first, self.reason = launch, clock.get("reason")
        self.launches.append(launch)
        m = clock.get("mhz_median")
        self.mhz.append(math.nan if m is None else float(m))
        br = clock.get("bracket")
        got = dict(clock, bracket_sides_differ_pct=abs(br.get("sides_differ_pct") or 0)
                   if isinstance(br, dict) else None)
        self._fold({k: got.get(k) for k in LOWEST}, {k: got.get(k) for k in HIGHEST})

    def merge(self, o: ClockGroup) -> None:
        if o.first < self.first:
            self.first, self.reason = o.first, o.reason
        self.launches += o.launches
        self.mhz += o.mhz
        self._fold(o.lowest, o.highest)

    def _fold(self, lowest: dict[str, Any], highest: dict[str, Any]) -> None:
        for k, v in lowest.items():
            self.lowest[k] = _worse(self.lowest[k], v, min)
        for k, v in highest.items():
            self.highest[k] = _worse(self.highest[k], v, max)

    def to_json(self) -> dict[str, Any]:
        order = np.argsort(np.frombuffer(self.launches, np.int64), kind="stable")
        mhz = np.frombuffer(self.mhz, np.float64)[order]
        return {"source": self.source, "bracket_missing": self.bracket_missing, "first_reason": self.reason,
                "launches": np.frombuffer(self.launches, np.int64)[order].tolist(),
                "mhz_median": [None if math.isnan(m) else m for m in mhz.tolist()],
                "lowest": dict(self.lowest), "highest": dict(self.highest)}


class IssueGroup:
    """Launches that had the same problem (cause, why and what was done about it): their
    numbers and the first one's full sentence."""

    def __init__(self, issue: Issue, launch: int):
        self.issue, self.first = issue, launch
        self.launches = array("q")

    def add(self, issue: Issue, launch: int) -> None:
        self.launches.append(launch)
        if launch < self.first:
            self.issue, self.first = issue, launch

    def merge(self, o: IssueGroup) -> None:
        self.launches += o.launches
        if o.first < self.first:
            self.issue, self.first = o.issue, o.first

    def to_json(self) -> dict[str, Any]:
        i = self.issue
        return {"cause": i.cause, "why": i.why, "then": i.then, "launches": sorted(self.launches),
                "detail": i.detail}


class LaunchGroups:
    """One kernel's clock and issue groups, launches added one by one or merged."""

    def __init__(self) -> None:
        self.clocks: dict[tuple[str, str | None], ClockGroup] = {}
        self.issues: dict[tuple[str, str, str], IssueGroup] = {}

    def add(self, launch: int, clock: dict[str, Any], issues: list[Issue]) -> None:
        br = clock.get("bracket")
        key = (str(clock.get("source")), br.get("missing") if isinstance(br, dict) else None)
        if key not in self.clocks:
            self.clocks[key] = ClockGroup(*key)
        self.clocks[key].add(launch, clock)
        for i in issues:
            key = (i.cause, i.why, i.then)
            if key not in self.issues:
                self.issues[key] = IssueGroup(i, launch)
            self.issues[key].add(i, launch)

    def merge(self, o: LaunchGroups) -> None:
        for key, g in o.clocks.items():
            if key in self.clocks:
                self.clocks[key].merge(g)
            else:
                self.clocks[key] = g
        for key, ig in o.issues.items():
            if key in self.issues:
                self.issues[key].merge(ig)
            else:
                self.issues[key] = ig

    def clock_groups(self) -> list[dict[str, Any]]:
        """The clock groups, JSON-ready, in the order of their first launches."""
        return sorted((g.to_json() for g in self.clocks.values()), key=lambda g: g["launches"][0])

    def issue_groups(self) -> list[IssueGroup]:
        """The issue groups in the order of their first launches (ties: as they came)."""
        return sorted(self.issues.values(), key=lambda g: g.first)

    def mhz(self) -> np.ndarray:
        """Every launch's median rate (nan: none)."""
        return np.concatenate([np.frombuffer(g.mhz, np.float64) for g in self.clocks.values()] or
                              [np.zeros(0)])
