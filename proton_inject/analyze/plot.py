"""The timeline picture of one launch: SMs down, time across, a lane per resident CTA and a
colour per region (``report --plot``).
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from proton_inject.analyze.summary import LaunchData
from proton_inject.errors import UserError
from proton_inject.formats.files import write_atomic
from proton_inject.formats.raw import launch_label

# matplotlib's tab10 and tab20 colour cycles, as hex: the picture and the HTML page give a
# region the same colour (tests check them against matplotlib's own).
TAB10 = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
         "#bcbd22", "#17becf")
TAB20 = ("#1f77b4", "#aec7e8", "#ff7f0e", "#ffbb78", "#2ca02c", "#98df8a", "#d62728", "#ff9896",
         "#9467bd", "#c5b0d5", "#8c564b", "#c49c94", "#e377c2", "#f7b6d2", "#7f7f7f", "#c7c7c7",
         "#bcbd22", "#dbdb8d", "#17becf", "#9edae5")


def need_matplotlib(option: str) -> None:
    """Refuse ``option`` (before any work) where matplotlib, which draws the pictures, is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as e:
        raise UserError(f"{option} needs matplotlib, which is not installed: "
                        "pip install 'proton-inject[plot]' (or pip install matplotlib)") from e


def region_colors(scopes: Sequence[int]) -> dict[int, str]:
    """A colour per region, in the order of their scope ids."""
    order = sorted(set(scopes))
    pal = TAB10 if len(order) <= len(TAB10) else TAB20
    return {s: pal[i % len(pal)] for i, s in enumerate(order)}


def _depths(scopes: Sequence[int], parents: dict[int, int]) -> dict[int, int]:
    depth = {}
    for s in scopes:
        d, p, seen = 0, s, set()
        while p in parents and p not in seen:
            seen.add(p)
            p = parents[p]
            d += 1
        depth[s] = d
    return depth


def picture_path(plot: Path, x: LaunchData, first: bool) -> Path:
    """The timeline picture of a launch: ``plot`` itself for the report's first launch (the
    name the user gave finds a picture), ``plot`` with the launch's label (rank, number and
    kernel) before its suffix for the others."""
    label = launch_label(x.launch, x.rank, x.kernel)
    return plot if first else plot.with_name(f"{plot.stem}.{label}{plot.suffix}")


def plot_timeline(x: LaunchData, path: str | os.PathLike, max_sms: int = 16) -> Path:
    """Write ``timeline_png`` of one launch to ``path``."""
    return write_atomic(path, timeline_png(x, max_sms))


def timeline_png(x: LaunchData, max_sms: int = 16, dpi: int = 150) -> bytes:
    """PNG of one launch: a lane per concurrently resident CTA on each SM (SMs top to bottom),
    time across, a colour per region; the CTA's first profiled warp is drawn, nested regions
    as thinner bars on top of their parents, the CTA lifetime as a grey band. At most
    ``max_sms`` SMs, evenly picked, so that bars stay readable."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Patch

    all_sms = np.unique(x.cta_sm)
    shown = all_sms
    if len(all_sms) > max_sms:
        shown = all_sms[np.unique(np.linspace(0, len(all_sms) - 1, max_sms).round().astype(int))]
    on = np.isin(x.cta_sm, shown)
    lane_of, sm_rows, n_rows = _lanes(x, on)

    first_warp = int(x.warp.min()) if len(x.warp) else 0
    origin = _first_start(x)
    scope, t0, t1, y = _bars(x, first_warp, lane_of, origin)

    names = sorted(set(np.unique(scope).tolist()))
    depth = _depths(names, x.scope_parents)
    colors = region_colors(names)

    height = min(12.0, max(4.0, 1.5 + n_rows * 0.09))
    fig, ax = plt.subplots(figsize=(14, height), dpi=dpi)
    # CTA lifetimes as grey bands.
    cy = np.array([lane_of[int(c)] for c in x.cta_ids[on].tolist()], np.float64)
    ci, cp = (x.cta_init_ns[on] - origin) / 1000.0, (x.cta_prefinal_ns[on] - origin) / 1000.0
    band = np.stack([np.stack([ci, cy + 0.05], 1), np.stack([cp, cy + 0.05], 1),
                     np.stack([cp, cy + 0.95], 1), np.stack([ci, cy + 0.95], 1)], 1)
    ax.add_collection(PolyCollection(band, facecolors="0.88", edgecolors="none", rasterized=True))
    max_depth = max(depth.values(), default=0)
    for s in sorted(names, key=lambda s: depth[s]):
        k = scope == s
        inset = 0.1 + 0.3 * depth[s] / max(1, max_depth) if max_depth else 0.1
        lo, hi = y[k] + inset, y[k] + 1 - inset
        verts = np.stack([np.stack([t0[k], lo], 1), np.stack([t1[k], lo], 1),
                          np.stack([t1[k], hi], 1), np.stack([t0[k], hi], 1)], 1)
        ax.add_collection(PolyCollection(verts, facecolors=[colors[s]], edgecolors="none",
                                         rasterized=True))
    xmax = float(max(cp.max() if len(cp) else 1.0, t1.max() if len(t1) else 1.0))
    # 0 is the first CTA's start; a record the clock places before its CTA's start stays seen
    xmin = float(min(0.0, ci.min() if len(ci) else 0.0, t0.min() if len(t0) else 0.0))
    ax.set_xlim(xmin, xmin + (xmax - xmin) * 1.01)
    ax.set_ylim(n_rows, 0)
    for _, r0, _ in sm_rows[1:]:
        ax.axhline(r0, color="0.6", lw=0.5)
    ax.set_yticks([r0 + n / 2 for _, r0, n in sm_rows], [f"SM {sm}" for sm, _, _ in sm_rows],
                  fontsize=8)
    ax.set_xlabel("time since the launch's first CTA started (us)")
    ax.set_ylabel("SM (one lane per resident CTA)")
    ax.set_title(_title(x, len(all_sms), len(shown), first_warp), fontsize=10)
    handles = [Patch(color="0.88", label="CTA lifetime (init..pre-final)")]
    handles += [Patch(color=colors[s], label=x.scopes.get(s, f"scope_{s}")) for s in names]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8,
              frameon=False)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def _lanes(x: LaunchData, on: np.ndarray) -> tuple[dict[int, int], list[tuple[int, int, int]], int]:
    """Rows of the picture for the CTAs ``on`` shown SMs: each CTA's row, per SM its first row
    and row count, and the number of rows."""
    # Lanes: per SM, CTAs that overlap in time get separate lanes.
    order = np.nonzero(on)[0][np.lexsort((x.cta_init_ns[on], x.cta_sm[on]))]
    lane_of: dict[int, int] = {}
    sm_rows: list[tuple[int, int, int]] = []  # (sm, first row, n rows)
    row = 0
    cur_sm = None
    ends: list[float] = []
    for i in order.tolist():
        sm = int(x.cta_sm[i])
        if sm != cur_sm:
            if cur_sm is not None:
                sm_rows.append((cur_sm, row, len(ends)))
                row += len(ends)
            cur_sm, ends = sm, []
        init, pre = float(x.cta_init_ns[i]), float(x.cta_prefinal_ns[i])
        for lane, e in enumerate(ends):
            if e <= init:
                ends[lane] = pre
                break
        else:
            lane = len(ends)
            ends.append(pre)
        lane_of[int(x.cta_ids[i])] = row + lane
    if cur_sm is not None:
        sm_rows.append((cur_sm, row, len(ends)))
        row += len(ends)
    return lane_of, sm_rows, max(1, row)


def _first_start(x: LaunchData) -> float:
    """The launch's first CTA start (ns on its time axis): the picture's time 0.

    Proton's blocks read the timer at entry, and time 0 is already the earliest such read.
    A direct block reads it once, after its last record, so time 0 is the earliest END and
    each CTA's start is its first record's placed time, before that (-8 us on the H100
    layer norm fixture)."""
    if len(x.cta_init_ns):
        return float(x.cta_init_ns.min())
    return float(x.start_ns.min()) if len(x.start_ns) else 0.0  # a trace without CTA times


def _bars(x: LaunchData, warp: int, lane_of: dict[int, int], origin: float
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The region instances of ``warp`` in CTAs that have a lane: scope, start and end (us
    from ``origin`` ns), lane."""
    m = x.warp == warp
    scope = x.scope[m]
    t0 = (x.start_ns[m] - origin) / 1000.0
    t1 = (x.start_ns[m] + x.dur_ns[m] - origin) / 1000.0
    y = np.array([lane_of.get(int(c), -1) for c in x.cta[m].tolist()], np.float64)
    keep = y >= 0
    return scope[keep], t0[keep], t1[keep], y[keep]


def _title(x: LaunchData, n_sms: int, n_shown: int, first_warp: int) -> str:
    mhz = x.clock.get("mhz_median")
    return (f"{x.kernel} launch {x.launch}: {len(x.cta_ids):,} CTAs on {n_sms} SMs "
            f"({n_shown} shown), warp {first_warp} of each CTA; clock {mhz:.0f} MHz "
            f"({x.clock.get('source')})"
            if mhz else f"{x.kernel} launch {x.launch}")
