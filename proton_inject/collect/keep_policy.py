"""Which launches a session keeps: the first of each build, then one in N, up to a total.

A long program launches a kernel millions of times; keeping each launch would cost host time,
disk and report time in proportion. The policy keeps the first ``first`` launches of every
instrumented build (a build is one kernel and config), then every ``every``-th launch of it,
at most ``rate`` of those a second of the run (each kept launch costs ~1.6 ms after the run,
saving and decoding it, on the H200: 20 a second is ~3% of the run), and never more than
``total`` in all; every launch is still counted, so the report can say how many ran and how
many it holds. ``all`` keeps every launch (bounded by ``--max-launches`` alone).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from proton_inject.errors import UserError

NEVER = float("inf")


@dataclass(frozen=True)
class KeepPolicy:
    """``first`` launches of each build, then one in ``every`` (0: no more) but at most ``rate``
    of those a second of the run (None: no bound), at most ``total`` in all (None: no bound)."""

    first: int = 20
    every: int = 100
    total: int | None = 2000
    rate: int | None = 20

    @classmethod
    def parse(cls, spec: str) -> KeepPolicy:
        """``all``, or ``KEY=N`` pairs separated by commas (keys: first, every, rate, max; ``max=none``
        and ``rate=none`` lift their bounds), e.g. ``first=10,every=1000,max=500``. A bad spec is a
        UserError."""
        text = spec.strip().lower()
        if text == "all":
            return cls(first=0, every=1, total=None, rate=None)
        policy = cls()
        for part in filter(None, (p.strip() for p in text.split(","))):
            m = re.fullmatch(r"(first|every|rate|max)=(\d{1,9}|none)", part)
            if m is None or (m[2] == "none" and m[1] not in ("max", "rate")):
                raise UserError(f"--keep-launches {spec!r}: expected 'all' or first=N,every=N,rate=N,max=N "
                                f"(rate: kept a second past the first ones; max=none, rate=none: no bound), "
                                f"got {part!r}")
            key, value = m[1], None if m[2] == "none" else int(m[2])
            policy = replace(policy, **{"total" if key == "max" else key: value})
        return policy

    def spec(self) -> str:
        """This policy as ``--keep-launches`` takes it (``parse`` reads it back)."""
        return (f"first={self.first},every={self.every},rate={'none' if self.rate is None else self.rate},"
                f"max={'none' if self.total is None else self.total}")

    @classmethod
    def from_options(cls, spec: str | None, sample: int | None) -> KeepPolicy | None:
        """The policy of --keep-launches SPEC and --sample-launches N (None: the default). One
        in N asked for is one in N: the rate's bound is lifted (an always-on profile of a
        server)."""
        if spec is None and sample is None:
            return None
        policy = cls.parse(spec) if spec is not None else cls()
        return policy if sample is None else replace(policy, every=sample, rate=None)

    def with_total(self, total: int | None) -> KeepPolicy:
        """The same policy bounded by ``total`` (``--max-launches``; None keeps this bound)."""
        return self if total is None else replace(self, total=total)

    def next_after(self, seen: int) -> float:
        """After ``seen`` launches of one build, the launch count at which it is next kept."""
        if seen < self.first:
            return seen + 1
        if self.every <= 0:
            return NEVER
        return (seen // self.every + 1) * self.every

    def within_rate(self, sampled: int, elapsed: float) -> bool:
        """Whether one more launch past a build's first ones is kept, ``sampled`` of them kept
        so far in ``elapsed`` seconds of the run: a second's worth at once, then ``rate`` a
        second (the C launchers' twin: ``count_launch`` in fast_launch_state.c)."""
        return self.rate is None or sampled + 1 <= self.rate * (elapsed + 1.0)

    def keeps_replay(self, replay: int) -> bool:
        """Whether replay number ``replay`` (from 1) of a CUDA graph is kept: the graph's
        captured launches are one build's launches to the policy (its rate does not apply)."""
        return replay <= self.first or (self.every > 0 and replay % self.every == 0)

    def describe(self) -> str:
        if self.first == 0 and self.every == 1 and self.total is None:
            return "every launch"
        rate = "" if self.rate is None else f" up to {self.rate} a second"  # (no aside: a note's headline drops those)
        tail = "" if self.every <= 0 else f", then 1 in {self.every}{rate}"
        bound = "" if self.total is None else f", at most {self.total} in all"
        return f"the first {self.first} launches of each kernel and config{tail}{bound}"


class LaunchCounts:
    """Launches seen by one instrumented build (a kernel and config) and the count at which the
    policy keeps its next one. Updated on the launch path with no lock: one compare a launch."""

    __slots__ = ("name", "seen", "next_keep")

    def __init__(self, name: str, policy: KeepPolicy) -> None:
        self.name = name
        self.seen = 0
        self.next_keep = policy.next_after(0)
