"""Bounded statistics of many values: a quantile sketch and count/total/min/max.

The report over thousands of launches must not hold every region instance (10^8 of them in
a few training steps: 14-16 bytes each kept them all before). A ``Sketch`` is a log-linear
histogram: each value falls into a bin named by its sign, its binary exponent and the top
``bits + 1`` bits of its mantissa. Integers below ``2 ** (bits + 1)`` (8,192 cycles at the
default) get a bin of their own, so their quantiles are exact; a larger value reads as its
bin's lower edge, less than ``2 ** -bits`` (0.025%) below it. Sketches merge by adding the
counts of equal bins. A sketch past ``MAX_BINS`` keeps one bit less (half the bins an
octave), so its size never grows with the values added: ns values (floats, on every launch's
own clock) spread over 4 octaves keep 11 bits (0.05%), over 8 octaves 10 bits (0.1%, about
what a fitted clock is worth).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

BITS = 12  # mantissa bits kept below the leading one
MAX_BINS = 8192  # 128 KiB a sketch at most
_EXP_OFFSET = 1100  # float64 exponents reach -1074: keeps every non-zero key positive


def keys(v: np.ndarray, bits: int = BITS) -> np.ndarray:
    """The bin of each value: ordered as the values are (negatives get negative keys)."""
    v = np.asarray(v, np.float64)
    m, e = np.frexp(np.abs(v))  # |v| = m * 2**e, m in [0.5, 1); (0, 0) for 0
    q = np.floor(m * float(1 << (bits + 1))).astype(np.int64)
    k = ((e.astype(np.int64) + _EXP_OFFSET) << (bits + 1)) | q
    k[q == 0] = 0
    return np.where(v < 0, -k, k)


def values(k: np.ndarray, bits: int) -> np.ndarray:
    """The value each bin stands for (its lower edge in magnitude)."""
    a = np.abs(k)
    e = (a >> (bits + 1)) - _EXP_OFFSET
    q = (a & ((1 << (bits + 1)) - 1)).astype(np.float64)
    v = np.ldexp(q, (e - bits - 1).astype(np.int32))
    return np.where(k < 0, -v, v)


def coarsen(k: np.ndarray, bits: int, to: int) -> np.ndarray:
    """Keys of ``bits`` precision as keys of ``to`` (<= bits) precision."""
    if to == bits:
        return k
    a = np.abs(k)
    drop = bits - to
    c = ((a >> (bits + 1)) << (to + 1)) | ((a & ((1 << (bits + 1)) - 1)) >> drop)
    return np.where(k < 0, -c, c)


@dataclass
class Sketch:
    """Counts per bin (``keys`` sorted, distinct) at ``bits`` of precision."""

    bits: int = BITS
    keys: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    counts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    @property
    def n(self) -> int:
        return int(self.counts.sum())

    def merge(self, other: Sketch) -> None:
        """Add another sketch's counts (at the lower precision of the two)."""
        if other.bits < self.bits:
            self.bits, k = other.bits, coarsen(self.keys, self.bits, other.bits)
            self._set(k, self.counts)
        k = coarsen(other.keys, other.bits, self.bits)
        if not len(self.keys):
            self._set(k, other.counts)
            return
        # Once a region's bins are known, a launch mostly adds to them: counted in place, and
        # new bins inserted where they go (no sort of the whole).
        i = np.minimum(np.searchsorted(self.keys, k), len(self.keys) - 1)
        hit = self.keys[i] == k
        if other.bits != self.bits:  # (coarsened keys may repeat: summed with add.at)
            np.add.at(self.counts, i[hit], other.counts[hit])
            if not hit.all():
                self._set(np.concatenate([self.keys, k[~hit]]),
                          np.concatenate([self.counts, other.counts[~hit]]))
            return
        self.counts[i[hit]] += other.counts[hit]
        if not hit.all():  # new bins go in place: both key lists are sorted and distinct
            at = np.searchsorted(self.keys, k[~hit])
            self.keys = np.insert(self.keys, at, k[~hit])
            self.counts = np.insert(self.counts, at, other.counts[~hit])
            if len(self.keys) > MAX_BINS:
                self._set(self.keys, self.counts)

    def _set(self, k: np.ndarray, c: np.ndarray) -> None:
        """Hold keys ``k`` (any order, repeats summed) with counts ``c``, in MAX_BINS bins."""
        u, inv = np.unique(k, return_inverse=True)
        self.keys, self.counts = u, np.bincount(inv, weights=c, minlength=len(u)).astype(np.int64)
        if len(u) > MAX_BINS:  # one bit less halves the bins of every octave
            self.bits -= 1
            self._set(coarsen(u, self.bits + 1, self.bits), self.counts)

    def quantiles(self, qs: tuple[float, ...]) -> list[float]:
        """Quantiles as ``np.quantile`` (linear) takes them over the values the bins stand for."""
        n = self.n
        if n == 0:
            return [0.0] * len(qs)
        cum = np.cumsum(self.counts)
        vals = values(self.keys, self.bits)
        out = []
        for q in qs:
            h = (n - 1) * q
            i = math.floor(h)
            lo = vals[np.searchsorted(cum, i, side="right")]
            hi = vals[np.searchsorted(cum, min(i + 1, n - 1), side="right")]
            out.append(float(lo + (h - i) * (hi - lo)))
        return out


FIXED = 2**20  # totals are summed as integers of 2**-20: the same in any order (any -j)


def fixed(v: float) -> int:
    """``v`` in the integer units totals are summed in."""
    return round(v * FIXED)


@dataclass
class Dist:
    """Count, total, min and max of some values (exact) and their quantiles (a ``Sketch``)."""

    n: int = 0
    sum_fixed: int = 0  # the total in units of 2**-20
    lo: float = math.inf
    hi: float = -math.inf
    sketch: Sketch = field(default_factory=Sketch)

    @property
    def total(self) -> float:
        return self.sum_fixed / FIXED

    def merge(self, o: Dist) -> None:
        self.n += o.n
        self.sum_fixed += o.sum_fixed
        self.lo, self.hi = min(self.lo, o.lo), max(self.hi, o.hi)
        self.sketch.merge(o.sketch)

    def stats(self) -> dict[str, Any]:
        """The report's numbers: total, mean, min, p5, median, p95, max."""
        if self.n == 0:
            return dict.fromkeys(("total", "mean", "min", "p5", "median", "p95", "max"), 0.0)
        p5, med, p95 = self.sketch.quantiles((0.05, 0.5, 0.95))
        # (a bin's lower edge can sit below the smallest value: the quantiles stay inside)
        p5, med, p95 = (min(max(v, self.lo), self.hi) for v in (p5, med, p95))
        return {"total": self.total, "mean": self.total / self.n, "min": self.lo, "p5": p5,
                "median": med, "p95": p95, "max": self.hi}
