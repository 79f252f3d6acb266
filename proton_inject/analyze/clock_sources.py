"""Where a launch's clock rate comes from, by the name reports and traces carry.

``clock.fit_clock`` tries them in this order: a source the user gave (``rate`` set: the
report's option names it, e.g. ``--clock-mhz``), then the measured ones (the globaltimer fit,
the clock bracket around the launch), then the fallbacks (the brackets of the run's other
launches on the device, the device's max clock, the within-CTA bound, 1 GHz). The report says
each source's ``meaning``; the error bar trusts the measured ones and takes a given one as
exact (its error is the user's).

A given source is one entry here with its ``rate`` (what MHz the option's value and the
launch's device give) and the report option that sets it (``report``'s ``clock`` argument
carries ``(name, value)``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Clock(StrEnum):
    """The names of the built-in clock sources (a source's name is what reports and traces
    carry)."""

    GLOBALTIMER_FIT = "globaltimer-fit"
    CLOCK_BRACKET = "clock-bracket"
    CLOCK_MHZ = "--clock-mhz"
    CLOCKS_LOCKED = "--clocks-locked"
    DEVICE_BRACKET = "device-bracket"
    DEVICE_CLOCK = "device-clock"
    WITHIN_CTA = "within-cta"
    ASSUMED_1GHZ = "assumed-1GHz"
    NONE = "none"


@dataclass(frozen=True)
class ClockSource:
    """A clock source: its name, what its ns are worth, and, for one the user gives, how its
    rate is found (option value, the launch's device max MHz or None) -> MHz or None."""

    name: str
    meaning: str
    measured: bool = False  # measured the launch's own clock (the others are given or guessed)
    rate: Callable[[Any, float | None], float | None] | None = None

    @property
    def given(self) -> bool:
        return self.rate is not None


CLOCK_SOURCES: dict[str, ClockSource] = {s.name: s for s in (
    ClockSource(Clock.GLOBALTIMER_FIT, "fitted to the launch's globaltimer reads: a measurement",
                measured=True),
    ClockSource(Clock.CLOCK_BRACKET, "measured on every SM right before and right after the launch: "
                "a measurement", measured=True),
    ClockSource(Clock.CLOCK_MHZ, "given by --clock-mhz", rate=lambda mhz, _device: mhz),
    ClockSource(Clock.CLOCKS_LOCKED, "the device's max clock, given by --clocks-locked",
                rate=lambda _locked, device_mhz: device_mhz),
    ClockSource(Clock.DEVICE_BRACKET, "the median rate clock brackets measured around this run's "
                "other launches on the device: a measurement near this launch, not of it"),
    ClockSource(Clock.DEVICE_CLOCK, "device max clock: a guess, not a measurement; ns are lower "
                "bounds if the SMs ran slower"),
    ClockSource(Clock.WITHIN_CTA, "slowest clock that fits 95% of CTAs' records in their lifetime: a "
                "bound, not a measurement; ns are upper bounds"),
    ClockSource(Clock.ASSUMED_1GHZ, "1 GHz: a guess, not a measurement"),
    ClockSource(Clock.NONE, "no records"),
)}
MEASURED = tuple(n for n, s in CLOCK_SOURCES.items() if s.measured)
GIVEN = tuple(n for n, s in CLOCK_SOURCES.items() if s.given)


def meaning(name: str) -> str:
    """What the ns of source ``name`` are worth (the name itself for one this build lacks)."""
    s = CLOCK_SOURCES.get(name)
    return s.meaning if s is not None else name


def given_rate(clock: tuple[str, Any] | None, device_mhz: float | None) -> tuple[str, float] | None:
    """The (source, MHz) that the user's ``clock`` choice, ``(source name, option value)``,
    gives a launch on a device of max clock ``device_mhz``; None without a choice or where
    the source has no rate for this launch."""
    if clock is None:
        return None
    name, value = clock
    mhz = CLOCK_SOURCES[name].rate(value, device_mhz)
    return (name, float(mhz)) if mhz else None
