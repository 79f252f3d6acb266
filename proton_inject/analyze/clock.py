"""How a cycle becomes a nanosecond: the clock fit of one launch.

Each SM counts cycles from its own origin at a rate that follows DVFS; each CTA also reads the
globaltimer (ns). ``fit_clock`` turns those (time, cycles) anchors into a ``ClockFit``: a
piecewise-linear rate curve through the launch plus each SM's offset (and own rate). Where the
anchors cannot pin the rate (a short launch), the clock bracket measured around the launch
(``bracket_rate.py``) gives it, else the device's max clock, the within-CTA bound or
a rate the user gave (``--clock-mhz``); ``clock_sources.py`` names each source and says what
it is worth.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from proton_inject.analyze import bracket_rate
from proton_inject.analyze.clock_sources import Clock, meaning
from proton_inject.analyze.issues import add_issue
from proton_inject.formats.diagnostics import Issue

# An SM's own rate is fitted only when its timer anchors span at least this long.
MIN_OWN_RATE_SPAN_NS = 50_000
# A globaltimer fit is trusted only when anchor times within an SM spread at least this many
# timer ticks (RMS; the H100 timer ticks every 32 ns) ...
MIN_SPREAD_TICKS = 4
# ... one rate explains this much of their cycle variance (1 - R^2 bounds how far timer jitter
# pulls the rate down) ...
MIN_FIT_R2 = 0.9
# ... the rate is plausible (the upper end becomes 1.05 x the device's max clock if known) ...
PLAUSIBLE_MHZ = (200.0, 3000.0)
# ... and at most this share of CTAs get records spanning > OVERLONG_TOL x their lifetime.
MAX_OVERLONG_CTAS = 0.05
OVERLONG_TOL = 1.02


@dataclass
class ClockFit:
    """How cycles on SM ``sm[i]`` become ns: ``t = G^-1((cycles - offset[i]) / scale[i])``.

    ``G`` is the launch's cycle count as a function of time (its rate follows DVFS), piecewise
    linear through (``knot_ns``, ``knot_cycles``) and extended linearly at both ends;
    ``offset`` is each SM's counter origin and ``scale`` its rate relative to ``G`` (1 where
    the SM's anchors span too little time to tell).
    """

    sm: np.ndarray
    offset: np.ndarray  # float64 cycles, per SM
    scale: np.ndarray  # per SM
    knot_ns: np.ndarray
    knot_cycles: np.ndarray
    source: str  # a name of clock_sources.CLOCK_SOURCES
    residual_ns: float | None = None
    gap_ns: float | None = None
    reason: str | None = None  # why the globaltimer fit was not used
    tick_ns: int | None = None  # globaltimer resolution seen in the data
    spread_ns: float | None = None  # within-SM RMS spread of anchor times (carries the rate)
    r2: float | None = None  # share of that spread's cycle variance one rate explains
    # What the ns are worth, relative: a bracket's (its sides' difference + 2 standard
    # errors + what brackets were seen to miss), a fit's bias bound (1 - R^2); None for a
    # guess or a given clock.
    uncertainty_pct: float | None = None
    # The clock bracket around the launch (its sides and their distance from the launch), or
    # {"missing": why}; None where none was looked at.
    bracket: dict[str, Any] | None = None

    @property
    def segment_mhz(self) -> np.ndarray:
        """Clock rate of each piece of G, in MHz."""
        return np.diff(self.knot_cycles) / np.diff(self.knot_ns) * 1000.0

    def to_ns(self, cycles: np.ndarray, sm_index: np.ndarray) -> np.ndarray:
        """Cycles of events on SMs ``self.sm[sm_index]`` -> ns on the launch's time axis."""
        u = (cycles.astype(np.float64) - self.offset[sm_index]) / self.scale[sm_index]
        kc, kt = self.knot_cycles, self.knot_ns
        t = np.interp(u, kc, kt)
        r = self.segment_mhz / 1000.0
        lo, hi = u < kc[0], u > kc[-1]
        t[lo] = kt[0] + (u[lo] - kc[0]) / r[0]
        t[hi] = kt[-1] + (u[hi] - kc[-1]) / r[-1]
        return t

    def summary(self) -> dict[str, Any]:
        """Compact JSON-ready description for trace metadata and reports."""
        mhz = self.segment_mhz if len(self.knot_ns) > 1 else np.zeros(0)
        return {
            "source": self.source,
            "mhz_median": round(float(np.median(mhz)), 2) if len(mhz) else None,
            "mhz_min": round(float(mhz.min()), 2) if len(mhz) else None,
            "mhz_max": round(float(mhz.max()), 2) if len(mhz) else None,
            "mhz_by_time": [[round(float(t) / 1000, 1), round(float(m), 1)]
                            for t, m in zip(self.knot_ns[:-1], mhz, strict=True)],
            "sms": int(len(self.sm)),
            "sms_with_own_rate": int((self.scale != 1.0).sum()),
            "sm_rate_spread_pct": round(float(np.std(self.scale) * 100), 3) if len(self.sm) else None,
            "residual_ns": None if self.residual_ns is None else round(self.residual_ns, 1),
            "first_record_gap_ns": None if self.gap_ns is None else round(self.gap_ns, 1),
            "timer_tick_ns": self.tick_ns,
            "anchor_spread_ns": None if self.spread_ns is None else round(self.spread_ns, 1),
            "fit_r2": None if self.r2 is None else round(self.r2, 4),
            "reason": self.reason,
            "uncertainty_pct": None if self.uncertainty_pct is None else round(self.uncertainty_pct, 3),
            "bracket": self.bracket,
        }


def timer_tick(values: np.ndarray) -> int:
    """The globaltimer's resolution read off the data: gcd of the steps between distinct values.

    32 ns on the H100 (every value a multiple of 32); 1 where the values are not quantized.
    """
    v = np.unique(values)
    if len(v) < 2:
        return 1
    return max(1, min(int(np.gcd.reduce(np.diff(v))), 1000))


@dataclass
class _Anchors:
    """(globaltimer ns, cycles) pairs of one launch: their SM, time, cycles and kind."""

    sm: np.ndarray  # index into the launch's sorted SM ids
    t: np.ndarray  # ns, float64
    c: np.ndarray  # cycles, int64
    y: np.ndarray  # cycles minus the SM's smallest anchor (keeps float64 exact)
    start: np.ndarray  # 1.0 for (init, first record), 0.0 for (pre-final, last record)
    cref: np.ndarray  # per SM: its smallest anchor cycle count
    n: np.ndarray  # per SM: number of anchors

    def mean(self, v: np.ndarray) -> np.ndarray:
        """Per-SM mean of ``v``."""
        return np.bincount(self.sm, v, len(self.n)) / self.n

    def demean(self, v: np.ndarray) -> np.ndarray:
        """``v`` minus its SM's mean: what is left once per-SM counter origins are unknown."""
        return v - self.mean(v)[self.sm]


def fit_clock(sm: np.ndarray, has: np.ndarray, nodrop: np.ndarray, c_first: np.ndarray,
               c_last: np.ndarray, init: np.ndarray, pre: np.ndarray, given: tuple[str, float] | None,
               device_mhz: float | None, tick: int, warn: list[Issue], where: str,
               bracket: dict[str, Any] | None = None,
               span: tuple[int, int] | None = None,
               device_bracket: tuple[float, int] | None = None) -> ClockFit:
    """Fit cycles = offset[SM] + G(t) to the timer anchors every CTA gives.

    Anchors: (pre-final time, last record) of every CTA that has records - the pre-final time
    is read right after the barrier that follows the last record, so it holds even when the
    buffer wrapped - and (init time, first record) of CTAs that kept their first record, with
    one extra constant for that kind. Per-SM offsets are eliminated by demeaning within each
    SM, G is piecewise linear in time with knots every >= 25 us of anchors (the SM clock
    changes during long launches: 1.58 -> 1.44 -> 1.58 GHz within 0.22 ms on the H100 matmul
    fixture), then each SM's own rate relative to G is fitted where its anchors span enough
    time. Records are then placed half the start/end gap inside the CTA's timer reads.

    The rate comes only from how anchor times differ WITHIN an SM. On a short launch with
    one CTA per SM those differences are a few 32 ns timer ticks of jitter and the fit is
    noise (1,275 MHz for a 1,980 MHz H100). Such fits are rejected (``_doubts``) and the
    rate comes from the launch's clock bracket (``bracket``: measured right before and after
    it; ``span`` is the launch's absolute init..post-final time), else from the brackets of
    the run's other launches on the device (``device_bracket``: median MHz and how many; a
    CUDA-graph replay has no bracket of its own), else falls back to the device's max SM
    clock (a guess), else to the within-CTA bound. ``given`` (source, MHz), a rate the user
    gave, comes before all of them.
    """
    s_ids, inv = np.unique(sm[has], return_inverse=True)
    if len(s_ids) == 0:
        return ClockFit(sm=s_ids, offset=np.zeros(0), scale=np.ones(0),
                        knot_ns=np.array([0.0, 1.0]),
                        knot_cycles=np.array([0.0, 1.0]), source=Clock.NONE, tick_ns=tick)
    a, cta = _anchors(inv, len(s_ids), has, nodrop, c_first, c_last, init, pre)
    st = cta[5]
    spread, r2 = _identifiability(a, bool(st.any()))

    def build(fit: tuple[np.ndarray, np.ndarray, float], source: str) -> ClockFit:
        clock = _place(a, fit, source, cta, s_ids)
        clock.tick_ns, clock.spread_ns, clock.r2 = tick, spread, r2
        return clock

    if given:  # (source, MHz): a rate the user gave
        return build(_fixed_rate(a, given[1]), given[0])
    br = bracket_rate.rate(bracket)
    detail = _bracket_detail(br, bracket, span)
    fit = _fit_rate_curve(a, bool(st.any()))
    if fit is None:
        doubts = ["too few timer anchors"]
    else:
        clock = build(fit, Clock.GLOBALTIMER_FIT)
        doubts = _doubts(clock, spread, r2, tick, device_mhz, cta)
        bound = 100.0 * (1.0 - r2)
        if not doubts and br is not None and len(fit[0]) == 2:
            # A one-rate fit (no clock change seen in the launch) yields to the bracket, which
            # measured that rate on every SM: the launch's own timer reads can lag by amounts
            # that change through it, and R^2 does not show it (H100 layer norm, 1,151 CTAs:
            # fit 1,942 MHz at R^2 0.99994, bracket 1,979 +-0.02%; the add fixture: R^2
            # 0.967, 1,960). A fit that follows the clock through a long launch is kept: the
            # bracket sees only its two ends (the matmul fixture dips to 1,441 MHz).
            mhz = float(np.median(clock.segment_mhz))
            doubts = [f"one-rate fit ({mhz:.0f} MHz, bias bound {bound:.2f}%) where the clock "
                      f"bracket measured the rate on every SM"]
        if not doubts:
            clock.uncertainty_pct, clock.bracket = bound, detail
            return clock
    return _fallback_clock(build, a, cta, doubts, br, bracket, detail, device_bracket,
                           device_mhz, tick, warn, where)


def _fallback_clock(build: Callable[[tuple, str], ClockFit], a: _Anchors, cta: tuple,
                    doubts: list[str], br: bracket_rate.BracketRate | None,
                    bracket: dict[str, Any] | None, detail: dict[str, Any],
                    device_bracket: tuple[float, int] | None, device_mhz: float | None,
                    tick: int, warn: list[Issue], where: str) -> ClockFit:
    """``fit_clock`` when the globaltimer fit is rejected (``doubts``): the launch's own clock
    bracket (``br``), else the other launches' brackets on the device, else the device's max
    clock or the within-CTA bound; each but the first with its warning."""
    reason = "; ".join(doubts)
    if br is not None:
        clock = build(_fixed_rate(a, br.mhz), Clock.CLOCK_BRACKET)
        clock.reason, clock.uncertainty_pct, clock.bracket = reason, br.uncertainty_pct, detail
        _check_sides(br, warn, where)
        return clock
    missing = bracket_rate.missing_reason(bracket)
    if device_bracket is not None:
        mhz, n = device_bracket
        add_issue(warn, "clock from the device's other launches",
                  f"{where}: no clock bracket ({missing}) and the globaltimer fit was rejected "
                  f"({reason}); used the median rate the brackets of {n} other launch(es) on "
                  f"this device measured ({mhz:.0f} MHz)",
                  why=f"no clock bracket: {_short(missing)}",
                  then=f"cycles converted at {mhz:.0f} MHz ({meaning(Clock.DEVICE_BRACKET)})")
        clock = build(_fixed_rate(a, mhz), Clock.DEVICE_BRACKET)
        clock.reason, clock.bracket = reason, detail
        return clock
    mhz, source = _fallback_rate(cta, device_mhz, tick)
    # (launches that got the same treatment share ``then``: a per-launch bound stays out of
    # it, or 10^4 launches would make 10^4 report lines)
    rate = "a per-launch bound" if source == Clock.WITHIN_CTA else f"{mhz:.0f} MHz"
    add_issue(warn, "globaltimer fit rejected",
              f"{where}: globaltimer clock fit rejected ({reason}); no clock bracket: {missing}; "
              f"used {source} "
              f"({mhz:.0f} MHz); pass --clock-mhz to set it",
              why=", ".join([_why(d) for d in doubts] + [f"no clock bracket: {_short(missing)}"]),
              then=f"cycles converted at {rate} "
                   f"({meaning(source)}); pass --clock-mhz to set it")
    clock = build(_fixed_rate(a, mhz), source)
    clock.reason, clock.bracket = reason, detail
    return clock


def _anchors(inv: np.ndarray, n_sm: int, has: np.ndarray, nodrop: np.ndarray,
             c_first: np.ndarray, c_last: np.ndarray, init: np.ndarray, pre: np.ndarray
             ) -> tuple[_Anchors, tuple]:
    """The anchors of the CTAs with records (``has``; ``inv``: their SM's index, of ``n_sm``),
    and per such CTA its first/last record cycles, init/pre-final times and whether it gives a
    start anchor (the ``cta`` tuple that ``_doubts``, ``_place`` and ``_fallback_rate`` read)."""
    sel = has
    st = (nodrop & has)[sel] & (c_last[sel] >= c_first[sel])
    # Anchor rows: every end anchor, then the start anchors.
    a_sm = np.concatenate([inv, inv[st]])
    a_c = np.concatenate([c_last[sel], c_first[sel][st]])
    cref = np.full(n_sm, np.iinfo(np.int64).max)
    np.minimum.at(cref, a_sm, a_c)
    a = _Anchors(
        sm=a_sm,
        t=np.concatenate([pre[sel], init[sel][st]]).astype(np.float64),
        c=a_c,
        y=(a_c - cref[a_sm]).astype(np.float64),
        start=np.r_[np.zeros(int(sel.sum())), np.ones(int(st.sum()))],
        cref=cref,
        n=np.bincount(a_sm, minlength=n_sm).astype(np.float64),
    )
    # Per CTA (of those with records): first/last record cycles, init/pre-final times.
    return a, (inv, c_first[sel], c_last[sel], init[sel], pre[sel], st)


def _check_sides(br: bracket_rate.BracketRate, warn: list[Issue], where: str) -> None:
    """Warn when the clock measured before the launch and after it differ too much."""
    diff = br.sides_differ_pct
    if diff is not None and abs(diff) > 100 * bracket_rate.MAX_SIDE_DIFF:
        add_issue(warn, "clock changed across the launch",
                  f"{where}: the SM clock measured right before the launch "
                  f"({br.before['mhz']:.0f} MHz) and right after it ({br.after['mhz']:.0f} MHz) "
                  f"differ by {diff:+.1f}%; cycles converted at their mean, "
                  f"{br.mhz:.0f} MHz +-{br.uncertainty_pct:.1f}%",
                  why="before and after differ by more than "
                      f"{100 * bracket_rate.MAX_SIDE_DIFF:g}%",
                  then="cycles converted at the mean of the two; ns carry their whole difference "
                       "as uncertainty")


def _fallback_rate(cta: tuple, device_mhz: float | None, tick: int) -> tuple[float, str]:
    """The rate (MHz) and its source where neither a fit nor a bracket gives one."""
    _, c_first, c_last, init, pre, st = cta
    ok = st & (c_last > c_first)
    if device_mhz:
        return float(device_mhz), Clock.DEVICE_CLOCK
    if ok.any():
        # The slowest clock at which 95% of CTAs' records fit between their timer reads.
        life = (pre[ok] - init[ok] + tick).astype(np.float64)
        return float(np.quantile((c_last[ok] - c_first[ok]) / life, 0.95)) * 1000, Clock.WITHIN_CTA
    return 1000.0, Clock.ASSUMED_1GHZ


def _short(missing: str) -> str:
    """A missing-bracket reason without its explanation, for counting launches per kind."""
    return missing.split(" (")[0]


def _bracket_detail(br: bracket_rate.BracketRate | None, bracket: dict[str, Any] | None,
                    span: tuple[int, int] | None) -> dict[str, Any]:
    """The bracket as the clock summary shows it: each side's rate and how far (us) it ran
    from the launch's own timer reads; or why there is none."""
    if br is None:
        return {"missing": bracket_rate.missing_reason(bracket)}
    out: dict[str, Any] = {"mhz": round(br.mhz, 2), "uncertainty_pct": round(br.uncertainty_pct, 3)}
    for name, side in (("before", br.before), ("after", br.after)):
        if not side:
            out[name] = None
            continue
        gap = None
        if span is not None:
            gap = (span[0] - side["t1"]) if name == "before" else (side["t0"] - span[1])
        out[name] = {"mhz": side["mhz"], "sem_mhz": side["sem_mhz"], "ctas": side["ctas"],
                     "gap_us": None if gap is None else round(gap / 1000.0, 1)}
    d = br.sides_differ_pct
    out["sides_differ_pct"] = None if d is None else round(d, 3)
    return out


def _why(doubt: str) -> str:
    """A doubt of ``_doubts`` without its numbers, so launches can be counted per kind."""
    for head, short in (("within-SM anchor spread", "anchors too close in time"),
                        ("R^2", "low R^2"), ("too few", "too few timer anchors")):
        if doubt.startswith(head):
            return short
    return "fitted rate implausible" if "outside" in doubt else "fitted rate stretches records"


def _identifiability(a: _Anchors, with_start: bool) -> tuple[float, float]:
    """How well the anchors can pin one clock rate: (within-SM time spread in ns RMS, R^2).

    Only within-SM time differences (beyond the start/end constant) carry the rate. Timer
    jitter in them biases the fitted rate low by up to ``1 - R^2`` of itself.
    """
    t, y = a.demean(a.t), a.demean(a.y)
    if with_start:
        s = a.demean(a.start)
        ss = float(s @ s)
        if ss > 0:
            t = t - s * float(s @ t) / ss
            y = y - s * float(s @ y) / ss
    tt, yy = float(t @ t), float(y @ y)
    spread = math.sqrt(tt / len(t)) if len(t) else 0.0
    if tt <= 0 or yy <= 0:
        return spread, 0.0
    b = float(t @ y) / tt
    r = y - b * t
    return spread, max(0.0, 1.0 - float(r @ r) / yy)


def _doubts(clock: ClockFit, spread: float, r2: float, tick: int, device_mhz: float | None,
            cta: tuple) -> list[str]:
    """Reasons not to trust a globaltimer fit (empty when it is fine)."""
    out = []
    if spread < MIN_SPREAD_TICKS * tick:
        out.append(f"within-SM anchor spread {spread:.0f} ns RMS = {spread / tick:.1f} ticks "
                   f"of {tick} ns (< {MIN_SPREAD_TICKS})")
    if r2 < MIN_FIT_R2:
        out.append(f"R^2 {r2:.2f} (< {MIN_FIT_R2})")
    mhz = float(np.median(clock.segment_mhz))
    lo, hi = PLAUSIBLE_MHZ
    if device_mhz:
        hi = device_mhz * 1.05
    if not lo <= mhz <= hi:
        out.append(f"fitted {mhz:.0f} MHz outside {lo:.0f}-{hi:.0f} MHz")
    inv, c_first, c_last, init, pre, st = cta
    if st.any():
        # Records lie between their CTA's init and pre-final reads; a slow fitted clock
        # stretches them past those.
        span = clock.to_ns(c_last[st], inv[st]) - clock.to_ns(c_first[st], inv[st])
        over = float(np.mean(span > OVERLONG_TOL * (pre[st] - init[st] + tick)))
        if over > MAX_OVERLONG_CTAS:
            out.append(f"fitted {mhz:.0f} MHz stretches {over:.0%} of CTAs' records past "
                       "their lifetime")
    return out


def _fixed_rate(a: _Anchors, mhz: float) -> tuple[np.ndarray, np.ndarray, float]:
    """G for a known constant rate, and the start anchors' constant fitted against it."""
    knots = np.array([a.t.min(), a.t.max() + 1.0])
    G = knots * mhz / 1000.0
    sd = a.demean(a.start)
    den = float(sd @ sd)
    gamma = float(sd @ a.demean(a.y - a.t * mhz / 1000)) / den if den > 0 else 0.0
    return knots, G, gamma


def _fit_rate_curve(a: _Anchors, with_start: bool) -> tuple[np.ndarray, np.ndarray, float] | None:
    """Least-squares piecewise-linear G (fewer pieces until it is full rank and monotone)."""
    n_sm = len(a.n)
    span = a.t.max() - a.t.min()
    n_seg = int(min(16, max(1, span // 25_000)))
    while n_seg >= 1:
        knots = np.unique(np.quantile(a.t, np.linspace(0, 1, n_seg + 1)))
        knots = knots[np.r_[True, np.diff(knots) >= 10_000]] if len(knots) > 2 else knots
        if len(knots) < 2:
            knots = np.array([a.t.min(), a.t.min() + max(span, 1.0)])
        knots[-1] = max(knots[-1], a.t.max())
        phi = _hat_basis(a.t, knots)[:, 1:]  # G(knot 0) = 0: offsets absorb the constant
        X = np.concatenate([phi] + ([a.start[:, None]] if with_start else []), axis=1)
        Xd = X - (np.stack([np.bincount(a.sm, X[:, j], n_sm) for j in range(X.shape[1])], 1)
                  / a.n[:, None])[a.sm]
        try:
            coef, _, rank, _ = np.linalg.lstsq(Xd, a.demean(a.y), rcond=None)
        except np.linalg.LinAlgError:
            return None
        G = np.r_[0.0, coef[: len(knots) - 1]]
        rate = np.diff(G) / np.diff(knots)
        if rank == X.shape[1] and (rate > 0.05).all() and (rate < 20).all():
            return knots, G, float(coef[-1]) if with_start else 0.0
        if n_seg == 1:
            return None
        n_seg = max(1, n_seg // 2)
    return None


def _place(a: _Anchors, fit: tuple[np.ndarray, np.ndarray, float], source: str, cta: tuple,
           s_ids: np.ndarray) -> ClockFit:
    """Per-SM offsets (and own rates, for a fit) that put the anchors on G."""
    knots, G, gamma = fit
    n_sm = len(a.n)
    inv, c_first, _, init, _, st = cta
    g_at = _hat_basis(a.t, knots) @ G if len(knots) > 1 else a.t * 0
    # Outside the knots G goes on linearly.
    r0 = (G[1] - G[0]) / (knots[1] - knots[0])
    r1 = (G[-1] - G[-2]) / (knots[-1] - knots[-2])
    g_at = np.where(a.t < knots[0], G[0] + (a.t - knots[0]) * r0, g_at)
    g_at = np.where(a.t > knots[-1], G[-1] + (a.t - knots[-1]) * r1, g_at)
    yg = a.y - gamma * a.start  # start anchors moved onto the end anchors' footing
    off = a.mean(yg - g_at)  # end-anchored offsets
    scale = np.ones(n_sm)
    if source == Clock.GLOBALTIMER_FIT:
        # Each SM's own rate relative to G, where its anchors span enough time to tell
        # (SMs differ by ~0.7% on the H100 fixture: residuals 472 -> 175 ns).
        tmin = np.full(n_sm, np.inf)
        tmax = np.full(n_sm, -np.inf)
        np.minimum.at(tmin, a.sm, a.t)
        np.maximum.at(tmax, a.sm, a.t)
        gd, yd = a.demean(g_at), a.demean(yg)
        sgg = np.bincount(a.sm, gd * gd, n_sm)
        sgy = np.bincount(a.sm, gd * yd, n_sm)
        own = (a.n >= 4) & (tmax - tmin >= MIN_OWN_RATE_SPAN_NS) & (sgg > 0)
        with np.errstate(divide="ignore", invalid="ignore"):
            b = np.where(own, sgy / np.where(sgg > 0, sgg, 1.0), 1.0)
        own &= (b > 0.9) & (b < 1.1)
        scale[own] = b[own]
        off = np.where(own, a.mean(yg) - scale * a.mean(g_at), off)
    # Before the first knot G is extrapolated. When early CTAs lost their first records there
    # is no early anchor, and the neighbouring piece's rate can place kept records before
    # their CTA's init time. Raise the early rate until 95% of them start after init.
    u_first = (c_first - a.cref[inv] - off[inv]) / scale[inv]
    early = (init < knots[0]) & (u_first < G[0])
    if source == Clock.GLOBALTIMER_FIT and early.any():
        need = (G[0] - u_first[early]) / (knots[0] - init[early])
        rate = float(np.quantile(need, 0.95))
        if rate > r0:
            t_lo = float(init.min())
            knots = np.r_[t_lo, knots]
            G = np.r_[G[0] - (knots[1] - t_lo) * rate, G]
    end = a.start == 0
    clock = ClockFit(sm=s_ids, offset=off + a.cref, scale=scale, knot_ns=knots, knot_cycles=G,
                     source=source)
    resid = a.t[end] - clock.to_ns(a.c[end], a.sm[end])
    clock.residual_ns = float(np.sqrt(np.mean(resid * resid)))
    if st.any() and gamma > 0:
        # gamma cycles = time from init to first record plus from last record to pre-final;
        # assume half each, so records sit inside their CTA's timer reads.
        rate = (np.diff(G) / np.diff(knots)).mean()
        clock.gap_ns = gamma / rate / 2
        clock.offset = clock.offset + clock.scale * gamma / 2
    return clock


def _hat_basis(t: np.ndarray, knots: np.ndarray) -> np.ndarray:
    """Piecewise-linear interpolation weights of ``t`` on ``knots`` (rows sum to 1 inside)."""
    k = len(knots)
    out = np.zeros((len(t), k))
    j = np.clip(np.searchsorted(knots, t, side="right") - 1, 0, k - 2)
    w = (t - knots[j]) / (knots[j + 1] - knots[j])
    w = np.clip(w, 0.0, 1.0)
    rows = np.arange(len(t))
    out[rows, j] = 1.0 - w
    out[rows, j + 1] += w
    return out
