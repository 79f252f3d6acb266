"""A clock bracket's rows (smid, clock and globaltimer at two timer edges, per CTA) and the few
numbers kept from them in a launch's metadata; ``collect/bracket.py`` runs the kernel and
``analyze/bracket_rate.py`` turns the kept numbers into the launch's clock.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def bracket_bytes(ctas: int) -> int:
    """Device bytes for both sides of one bracket of ``ctas`` CTAs."""
    return 2 * ctas * WORDS * 8


def after_records(size: int, ctas: int) -> tuple[int, int]:
    """Where a bracket of ``ctas`` CTAs rides after a launch's ``size`` record bytes (one
    buffer, one copy): the byte offset of its rows (side 0's, then side 1's) and the bytes of
    records and bracket together (``size`` when ``ctas`` is 0: no bracket)."""
    at = -(-size // 128) * 128
    return at, (at + bracket_bytes(ctas) if ctas else size)


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


WORDS = 5  # per CTA: smid, c0, t0, c1, t1 (int64)
