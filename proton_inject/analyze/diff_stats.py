"""The statistics of ``diff``: a region's change of median, its bootstrap interval (CTAs or
launches resampled, each side on its own) and the verdict."""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np

from proton_inject.analyze.diff_load import RegionSide

RESAMPLES = 400  # bootstrap resamples per region and side
CONFIDENCE = 0.95
# A change smaller than this (%) is "within noise" whatever the interval says: short-CTA
# kernel times move by a few percent between runs (docs/overhead.md), which one run's CTAs
# cannot show.
MIN_CHANGE_PCT = 1.0
SLOWER, FASTER, SAME, NA = "slower", "faster", "within noise", "n/a"
# The bootstrap's resolution: sorted instances in this many bins of equal rank (the median
# is interpolated inside its bin), clusters dealt into at most this many groups.
BINS = 2048
MAX_CLUSTERS = 4096


def boot_medians(values: np.ndarray, clusters: np.ndarray, n_clusters: int, resamples: int,
                 rng: np.random.Generator) -> np.ndarray:
    """Medians of ``resamples`` cluster-bootstrap resamples: each draws ``n_clusters``
    clusters with replacement and takes the median of their instances.

    Vectorized: the sorted instances fall into ``BINS`` bins of equal rank; a table holds how
    many instances of each cluster lie in each bin, so one matrix product gives every
    resample's histogram, and its median is read where the cumulated count passes half,
    interpolated by rank inside that bin. More than ``MAX_CLUSTERS`` clusters are first
    dealt at random into that many groups (independent clusters grouped keep their variance)."""
    n = len(values)
    v = np.sort(values, kind="stable")
    c = clusters[np.argsort(values, kind="stable")]
    k = n_clusters
    if k > MAX_CLUSTERS:
        c = rng.permutation(k)[c] % MAX_CLUSTERS
        k = MAX_CLUSTERS
    nb = min(n, BINS)
    start = (np.arange(nb + 1) * n) // nb  # bin j holds sorted instances start[j]..start[j+1]-1
    bin_of = np.repeat(np.arange(nb), np.diff(start))
    table = np.bincount(c * nb + bin_of, minlength=k * nb).reshape(k, nb).astype(np.float32)
    draws = rng.integers(0, k, (resamples, k))
    counts = np.bincount((draws + np.arange(resamples)[:, None] * k).ravel(),
                         minlength=resamples * k).reshape(resamples, k).astype(np.float32)
    hist = counts @ table  # resamples x bins (exact: integers below 2^24)
    cum = np.cumsum(hist, axis=1)
    half = cum[:, -1] / 2
    j = np.minimum((cum < half[:, None]).sum(axis=1), nb - 1)
    rows = np.arange(resamples)
    before = np.where(j > 0, cum[rows, np.maximum(j - 1, 0)], 0.0)
    inside = np.clip((half - before) / np.maximum(hist[rows, j], 1.0), 0.0, 1.0)
    rank = start[j] + inside * (start[j + 1] - start[j]) - 0.5
    return np.interp(np.clip(rank, 0, n - 1), np.arange(n), v)


def _seed_of(seed: int, *parts: Any) -> int:
    """A region's own seed: its numbers do not depend on which other regions are compared."""
    return zlib.crc32(repr((seed, *parts)).encode())


def compare(a: RegionSide, b: RegionSide, resamples: int, seed: int, key: tuple,
            threshold: float) -> dict[str, Any]:
    """Change of the median in %, its interval and the verdict for one matched region."""
    change = (b.median / a.median - 1) * 100 if a.median > 0 else None
    interval = None
    why = None
    if change is not None and a.values is not None and b.values is not None:
        if min(a.n_clusters, b.n_clusters) < 2:
            why = "one CTA or launch on a side: nothing to resample"
        else:
            rng = np.random.default_rng(_seed_of(seed, *key))
            ma = boot_medians(a.values, a.clusters, a.n_clusters, resamples, rng)
            mb = boot_medians(b.values, b.clusters, b.n_clusters, resamples, rng)
            ok = ma > 0
            r = (mb[ok] / ma[ok] - 1) * 100
            if len(r) >= resamples // 2:
                q = (1 - CONFIDENCE) / 2
                centre = float(np.median(r))
                lo, hi = np.quantile(r - centre, [q, 1 - q])
                interval = [change + float(lo), change + float(hi)]
            else:
                why = "base medians of 0 in the resamples"
    elif change is None:
        why = "base median is 0"
    else:
        why = "summary only"
    return {"change_pct": change, "interval_pct": interval, "no_interval": why,
            "verdict": verdict(change, interval, threshold)}


def verdict(change: float | None, interval: list[float] | None, threshold: float) -> str:
    """Slower when the whole interval (or the change, without one) lies above ``threshold``
    percent, faster when below ``-threshold``, else within noise."""
    if change is None:
        return NA
    lo, hi = interval if interval is not None else (change, change)
    if lo > threshold:
        return SLOWER
    if hi < -threshold:
        return FASTER
    return SAME

