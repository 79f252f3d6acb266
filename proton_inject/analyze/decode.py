"""Decode the profile buffers that Triton's Proton lowering flushes, into arrays of events.

Buffer layout (Triton 3.6.0, circular strategy; checked against the lowering source,
by compiling instrumented kernels for ``cuda:90`` on a CPU and against real H100 buffers)
---------------------------------------------------------------------------------------
The profile scratch buffer holds one block of ``bytes_per_cta`` bytes per CTA, in CTA order
(``bytes_per_cta`` is the kernel's ``profile_scratch_size``: header + counts + data, rounded up
to 128). All words are little-endian uint32::

    word 0        preamble 0xdeadbeef (written at kernel entry by thread 0)
    word 1        linear program id  (x + y*gx + z*gx*gy)
    word 2        SM id (%smid)
    word 3        data bytes per CTA (all segments), written at finalize
    words 4-5     init time        (%globaltimer ns, uint64, kernel entry)
    words 6-7     pre-final time   (globaltimer, after the barrier that ends the kernel)
    words 8-9     post-final time  (globaltimer, after the buffer was copied out)
    words 10..    one word per warp of the CTA (all warps, warp_specialize partitions
                  included): words that warp WROTE, i.e. 2 x records, never wrapped
    then          data: one segment per profiled warp (all warps, or the sorted
                  selected ids of selective sampling), each data_bytes / n_segments
                  bytes = a power-of-two number of 8-byte record slots

A buffer that ``direct.py``'s lowering wrote (``buffer_type`` "direct": a compact block per
CTA, the record tags in the metadata) is first expanded into this layout (``_expand_direct``).
Its one timer read comes after the last record, so all three times are that read, the clock
fit uses end anchors only, and a CTA's init time becomes its first record's placed time.

The layout does not depend on Proton's buffer type. With ``buffer_type=shared`` the records live
in shared memory while the kernel runs and each warp copies its segment out at the end;
with ``global`` the warps store them directly at the same scratch offsets (data starts at
byte 40 + 4 x warps) and nothing is copied. The header and count words are written the same
way in both cases (checked in the LLVM IR of both builds of one kernel).

A warp writes record ``k`` (0-based) into slot ``k mod slots`` of its segment; at the end
the segment is copied out in slot order. When a warp wrote more records than slots, the
buffer wrapped: the newest ``slots`` records survive and the oldest sits in slot
``written mod slots``. A record is two words::

    tag   bit 31 end (1) / start (0); bits 30-23 scope id; bits 22-11 zero;
          bits 10-0 clock bits 42-32 (clock64) or zero (clock32)
    low   clock bits 31-0

so clocks are 43-bit (clock64) or 32-bit (clock32) per-SM cycle counters and are unwrapped
here. Scope ids come from Proton's scope analysis: one id per start/end PAIR in walk order
of the function (a name used for two pairs gets two ids), which is what
``triton._C.libtriton.proton.get_scope_id_names(module)`` returns (see ``scopes_from_ttgir``).
Triton 3.6 lowers only ``granularity=warp`` (others fail: "granularity must be warp for
now"), so that is all this decoder accepts.

Raw launch files (what the runtime writes, one pair per instrumented launch)
--------------------------------------------------------------------------
``<dir>/<launch:05d>-<kernel>.bin`` holds the raw buffer bytes exactly as copied from the
device (``.bin.gz`` is read too), and ``<same prefix>.json`` holds the ``LaunchMeta`` as
JSON (``LaunchMeta.to_dict``): ``{"format": "proton-inject-raw", "version": 1, "kernel",
"hash", "grid": [x, y, z], "num_warps", "scopes": {"id": name}, "scope_parents":
{"child id": parent id}, "scope_locs": {"id": "file:line"}, "bytes_per_cta",
"buffer_size" (data bytes per CTA or null = read from the header), "clock_bits": 32|64,
"granularity": "warp", "sampled_warps": [ids] | null, "sample_ctas": N (absent: 1),
"buffer_type": "shared" | "global" | "direct" (absent in older files: "shared"; "direct":
``direct.py`` wrote it), "config": str | null, "launch": int,
"device": str | null, "sm_clock_mhz": the device's max SM clock, float | null (absent in
files from before it was recorded), "clock_bracket": the SM clock measured right before and
after the launch, ``{"before": side | null, "after": side | null}`` with side = ``{"mhz",
"sem_mhz", "ctas", "sms", "spin_ns", "t0", "t1"}`` (``bracket.summarize``), or ``{"missing":
why}`` (absent in older files), "direct_records" (buffer_type "direct": ``[scope id, 1 if
end]`` per record slot), "timer_ref_ns" (buffer_type "direct": a full globaltimer value read
near the launch, for the bits the blocks leave out), "bin": file name of the buffer}``. ``save_raw`` and
``load_raw`` write and read that pair.
"""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from proton_inject.errors import UserError
from proton_inject.formats import clock_bracket
from proton_inject.formats.diagnostics import Issue
from proton_inject.formats.raw import LaunchMeta, _as_bytes

PREAMBLE = 0xDEADBEEF
HEADER_WORDS = 10
RECORD_BYTES = 8
# CTAs of one launch start within this of each other (else their timer words are damaged).
MAX_LAUNCH_NS = 100 * 10**9
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
# A guess for clock32 unwrapping only (exact while CTAs start < ~1.4 s apart).
_GUESS_GHZ = 1.5


class DecodeWarning(UserWarning):
    """Damaged or partial profile data: decoding went on without the damaged part."""




# --- raw files -------------------------------------------------------------------------------
















def scopes_from_ttgir(path: str | os.PathLike) -> tuple[dict[int, str], dict[int, int]]:
    """Scope id -> name and child -> parent maps, exactly as Proton's lowering assigns them.

    Parses the instrumented TTGIR with Triton's own MLIR parser (works without a GPU).
    """
    from proton_inject.lower.proton import scope_names_of

    try:
        names, parents = scope_names_of(str(path))
    except RuntimeError as e:
        raise UserError(f"{path}: Triton could not parse this TTGIR: {e}") from e
    return dict(names), dict(parents)


# --- decoded structures ----------------------------------------------------------------------


@dataclass
class Events:
    """One row per matched start/end pair (a region instance), in CTA, warp, start order.

    Times are ns from the launch's ``base_ns``; a parent comes before its children.
    """

    cta: np.ndarray  # linear program id
    sm: np.ndarray
    warp: np.ndarray
    scope: np.ndarray
    start: np.ndarray  # unwrapped cycles (int64)
    end: np.ndarray
    start_ns: np.ndarray  # float64, on the launch's common time axis
    end_ns: np.ndarray

    def __len__(self) -> int:
        return len(self.cta)

    @property
    def cycles(self) -> np.ndarray:
        """Duration of each region instance in cycles."""
        return self.end - self.start

    @property
    def dur_ns(self) -> np.ndarray:
        """Duration of each region instance in ns."""
        return self.end_ns - self.start_ns


@dataclass
class Ctas:
    """One row per decoded CTA; times are ns from ``base_ns`` (int64)."""

    cta: np.ndarray
    sm: np.ndarray
    init_ns: np.ndarray
    prefinal_ns: np.ndarray
    postfinal_ns: np.ndarray


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
    # globaltimer-fit | device-clock (meta.sm_clock_mhz) | within-cta | --clock-mhz |
    # assumed-1GHz | none
    source: str
    residual_ns: float | None = None
    gap_ns: float | None = None
    reason: str | None = None  # why the globaltimer fit was not used
    tick_ns: int | None = None  # globaltimer resolution seen in the data
    spread_ns: float | None = None  # within-SM RMS spread of anchor times (carries the rate)
    r2: float | None = None  # share of that spread's cycle variance one rate explains
    # What the ns are worth, relative: a bracket's (half its sides' difference + 2 standard
    # errors), a fit's bias bound (1 - R^2); None for a guess or a given clock.
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


@dataclass
class DropStats:
    """What the circular buffer lost, and the buffer_size that would have held everything."""

    records_written: int
    records_kept: int
    warps_with_drops: int
    ctas_with_drops: int
    max_records_per_warp: int
    slots_per_warp: int
    segments: int

    @property
    def dropped(self) -> int:
        """Records overwritten by newer ones."""
        return self.records_written - self.records_kept

    # direct: the --buffer-size whose loop sections hold every iteration (None: Proton's rule)
    needed_bytes: int | None = None

    @property
    def needed_buffer_size(self) -> int:
        """Smallest Proton ``buffer_size`` (bytes per CTA, power of two per warp) that fits all."""
        if self.needed_bytes is not None:
            return self.needed_bytes
        per_warp = 1 << max(3, math.ceil(math.log2(max(1, self.max_records_per_warp) * RECORD_BYTES)))
        return per_warp * self.segments


@dataclass
class Decoded:
    """Everything decoded from one launch."""

    meta: LaunchMeta
    events: Events
    ctas: Ctas
    clock: ClockFit
    drops: DropStats
    base_ns: int  # absolute globaltimer value of time 0 (earliest init)
    unmatched_starts: int = 0
    unmatched_ends: int = 0
    issues: list[Issue] = field(default_factory=list)  # what went wrong, per cause
    record_cost: float | None = None  # cycles subtracted per record (0: raw; None: unknown)

    @property
    def warnings(self) -> list[str]:
        """The issues' full sentences."""
        return [i.detail for i in self.issues]

    def scope_name(self, scope: int) -> str:
        """Region name of a scope id (``scope_<id>`` when the meta does not know it)."""
        return self.meta.scopes.get(int(scope), f"scope_{int(scope)}")


# --- decoding --------------------------------------------------------------------------------


def _warn(out: list[Issue], cause: str, msg: str, why: str = "", then: str = "") -> None:
    out.append(Issue(cause, msg, why, then))
    warnings.warn(msg, DecodeWarning, stacklevel=3)


def _u64(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return lo.astype(np.int64) | (hi.astype(np.int64) << 32)


def _group_starts(lengths: np.ndarray) -> np.ndarray:
    starts = np.zeros(len(lengths), np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    return starts


def decode(buffer: Any, meta: LaunchMeta, clock_mhz: float | None = None,
           record_cost: float | None = None) -> Decoded:
    """Decode one launch's raw profile buffer into events on one ns time axis.

    Damaged CTAs are skipped with a ``DecodeWarning`` (also kept in ``.warnings``); an
    all-zero buffer is a UserError (the instrumented binary did not run).

    ``record_cost`` (cycles, from ``calibrate``) is what one record adds to the time between
    the clock reads around it: each warp's k-th record is moved k costs earlier, so a region
    loses one cost per record from its start to its end (its own and those of regions nested
    in it), and back-to-back regions keep their gap. 0 or None keeps the raw clock reads.
    """
    warn: list[Issue] = []
    where = f"launch {meta.label}"
    lost = None  # direct: records of loop iterations past what the block keeps
    if meta.buffer_type == "direct":
        buffer, meta, lost = _expand_direct(buffer, meta, where)
    if meta.granularity != "warp":
        raise UserError(
            f"{where}: granularity {meta.granularity!r} is not supported; Triton 3.6 lowers "
            "only granularity='warp' (use warp-group views in `report` instead)"
        )
    if meta.clock_bits not in (32, 64):
        raise UserError(f"{where}: clock_bits must be 32 or 64, not {meta.clock_bits}")
    stride = meta.bytes_per_cta
    W = meta.num_warps
    segs = np.asarray(meta.segments, np.int64)
    n_seg = len(segs)
    if W <= 0 or n_seg == 0 or segs.max() >= W or segs.min() < 0:
        raise UserError(f"{where}: num_warps={W} and sampled_warps={meta.sampled_warps} disagree")
    meta_words = HEADER_WORDS + W
    if stride % 4 or stride < 4 * meta_words + RECORD_BYTES * n_seg:
        raise UserError(
            f"{where}: bytes_per_cta={stride} cannot hold the header of {W} warps; it must be "
            "the kernel's profile_scratch_size"
        )
    raw = _as_bytes(buffer)
    if raw.size == 0 or not raw.any():
        raise UserError(
            f"{where}: the profile buffer is all zeros: the instrumented binary was not used. "
            "Check that the override directory holds only .ttgir files and that the run used a "
            "private TRITON_CACHE_DIR"
        )
    n_blocks = raw.size // stride
    if raw.size % stride:
        _warn(warn, "truncated buffer",
              f"{where}: buffer is truncated: {raw.size % stride} bytes of a partial CTA "
              f"block after {n_blocks} whole ones were ignored")
    if n_blocks < meta.num_ctas:
        _warn(warn, "fewer CTA blocks than the grid",
              f"{where}: buffer holds {n_blocks} CTA blocks, the grid has {meta.num_ctas}")
    n_blocks = min(n_blocks, meta.num_ctas)
    words = np.frombuffer(raw[: n_blocks * stride], dtype="<u4")
    blocks = words.reshape(n_blocks, stride // 4)

    data_bytes = meta.buffer_size
    ok = blocks[:, 0] == PREAMBLE
    if data_bytes is None:
        # Take the most common header value among valid CTAs; damaged ones disagree.
        if ok.any():
            vals, counts = np.unique(blocks[ok, 3], return_counts=True)
            data_bytes = int(vals[np.argmax(counts)])
        else:
            data_bytes = 0
    seg_words = data_bytes // 4 // n_seg
    slots = seg_words // 2
    fits = slots > 0 and 4 * meta_words + data_bytes <= stride
    if not fits and ok.any():
        raise UserError(
            f"{where}: data size {data_bytes} bytes per CTA does not fit bytes_per_cta={stride} "
            f"with {W} warps; the metadata does not match the kernel"
        )
    bad_pre = ~ok
    if bad_pre.any():
        first = int(np.argmax(bad_pre))
        _warn(warn, "CTAs with a bad preamble skipped",
              f"{where}: skipped {int(bad_pre.sum())} CTA block(s) with a bad preamble "
              f"(first: block {first} at byte {first * stride})")
    bad_size = ok & (blocks[:, 3] != data_bytes)
    if bad_size.any():
        _warn(warn, "CTAs with another buffer size skipped",
              f"{where}: skipped {int(bad_size.sum())} CTA block(s) whose header says "
              f"another buffer size than {data_bytes} bytes")
    ok &= ~bad_size
    # Timer reads must be ordered and belong to one launch; damaged ones would wreck the
    # common time axis.
    t_init = _u64(blocks[:, 4], blocks[:, 5])
    t_pre = _u64(blocks[:, 6], blocks[:, 7])
    t_post = _u64(blocks[:, 8], blocks[:, 9])
    sane = (t_init > 0) & (t_init <= t_pre) & (t_pre <= t_post) & (
        t_post - t_init <= MAX_LAUNCH_NS)
    if (ok & sane).any():
        mid = int(np.median(t_init[ok & sane]))
        sane &= np.abs(t_init - mid) <= MAX_LAUNCH_NS
    bad_time = ok & ~sane
    if bad_time.any():
        _warn(warn, "CTAs with implausible timer values skipped",
              f"{where}: skipped {int(bad_time.sum())} CTA block(s) with implausible "
              "timer values (damaged header)")
    ok &= sane
    rows = np.nonzero(ok)[0]
    hdr = blocks[rows]
    n_ok = len(rows)

    cta_id = hdr[:, 1].astype(np.int64)
    sm_id = hdr[:, 2].astype(np.int64)
    init, pre, post = t_init[rows], t_pre[rows], t_post[rows]
    if n_ok and (cta_id >= meta.num_ctas).any():
        _warn(warn, "program ids outside the grid",
              f"{where}: {int((cta_id >= meta.num_ctas).sum())} CTA(s) report a program id "
              f"outside the grid of {meta.num_ctas}")
    base = int(init.min()) if n_ok else 0

    # --- records: which slots hold which record, oldest first ------------------------------
    counts = hdr[:, HEADER_WORDS + segs].astype(np.int64) if n_ok else np.zeros((0, n_seg), np.int64)
    written = counts // 2  # records each segment's warp wrote
    kept = np.minimum(written, max(slots, 0))
    flat_written = written.reshape(-1)
    flat_kept = kept.reshape(-1)
    n_rec = int(flat_kept.sum())
    stream = np.repeat(np.arange(len(flat_kept), dtype=np.int64), flat_kept)
    first_rec = _group_starts(flat_kept)
    j = np.arange(n_rec, dtype=np.int64) - first_rec[stream]
    slot = ((flat_written - flat_kept)[stream] + j) % max(slots, 1)
    s_row = stream // n_seg
    s_seg = stream % n_seg
    widx = rows[s_row] * (stride // 4) + meta_words + s_seg * seg_words + 2 * slot
    tag = words[widx]
    low = words[widx + 1]
    empty = (tag == 0) & (low == 0)
    is_end = (tag >> 31).astype(bool)
    scope = ((tag >> 23) & 0xFF).astype(np.int64)
    if meta.clock_bits == 64:
        cyc = ((tag & 0x7FF).astype(np.int64) << 32) | low.astype(np.int64)
        modulus = 1 << 43
    else:
        cyc = low.astype(np.int64)
        modulus = 1 << 32
    if empty.any():
        _warn(warn, "empty record slots ignored",
              f"{where}: {int(empty.sum())} record slot(s) that the counts claim are empty "
              "(zero); ignored")

    cyc = _unwrap(cyc, stream, first_rec, flat_kept, modulus, s_row, init, sm_id,
                  clock_mhz or _GUESS_GHZ * 1000)

    # --- pair starts with ends, per warp stream and scope, in order --------------------------
    valid = ~empty
    order = np.argsort(stream * 256 + scope, kind="stable")  # by warp stream, scope, time
    order = order[valid[order]]
    o_stream, o_scope, o_end = stream[order], scope[order], is_end[order]
    pair = (~o_end[:-1]) & o_end[1:] & (o_stream[:-1] == o_stream[1:]) & (o_scope[:-1] == o_scope[1:])
    # Events in start-record order: per warp stream chronological, a parent before its
    # children (its start was written first) - the order a trace wants, without a sort.
    partner = np.full(n_rec, -1, np.int64)
    partner[order[:-1][pair]] = order[1:][pair]
    si = np.flatnonzero(partner >= 0)
    ei = partner[si]
    matched = np.zeros(n_rec, bool)
    matched[si] = True
    matched[ei] = True
    un = valid & ~matched
    unmatched_starts = int((un & ~is_end).sum())
    unmatched_ends = int((un & is_end).sum())
    dropped_stream = (flat_written > flat_kept)[stream]
    odd = int((un & ~dropped_stream).sum())
    if odd:
        _warn(warn, "records without a partner",
              f"{where}: {odd} start/end record(s) without a partner in warps whose buffer "
              "did not wrap (a region left early, or damaged data)")
    neg = cyc[ei] < cyc[si]
    if neg.any():
        _warn(warn, "regions that end before they start dropped",
              f"{where}: dropped {int(neg.sum())} region(s) that end before they start "
              "(clock anomaly or damaged data)")
        si, ei = si[~neg], ei[~neg]

    # --- clock fit: cycles -> ns per SM -----------------------------------------------------
    last_rec = first_rec + flat_kept - 1
    has = flat_kept > 0
    c_first = np.full(len(flat_kept), np.iinfo(np.int64).max)
    c_last = np.full(len(flat_kept), np.iinfo(np.int64).min)
    c_first[has] = cyc[first_rec[has]]
    c_last[has] = cyc[last_rec[has]]
    c_first = c_first.reshape(n_ok, n_seg).min(axis=1) if n_ok else c_first
    c_last = c_last.reshape(n_ok, n_seg).max(axis=1) if n_ok else c_last
    cta_has = has.reshape(n_ok, n_seg).any(axis=1) if n_ok else np.zeros(0, bool)
    cta_nodrop = (written <= kept).all(axis=1) if n_ok else np.zeros(0, bool)
    direct = meta.buffer_type == "direct"
    # (init, first record) start anchors: a direct block has no timer read before its records
    start_anchor = cta_nodrop & (not direct)
    tick = _timer_tick(np.r_[init, pre, post])
    span = (base, int(post.max())) if n_ok else None
    clock = _fit_clock(sm_id, cta_has, start_anchor, c_first, c_last, init - base, pre - base,
                       clock_mhz, meta.sm_clock_mhz, tick, warn, where,
                       bracket=meta.clock_bracket, span=span)

    # --- events -------------------------------------------------------------------------------
    ev_row = s_row[si]
    sm_of = sm_id[ev_row]
    k = np.searchsorted(clock.sm, sm_of)
    start, end = cyc[si], cyc[ei]
    if record_cost:
        # Record k of a warp (k counts the records the buffer lost too) ran after k records.
        # (Siblings closer than the calibrated empty region may then overlap by a few cycles.)
        pos = (flat_written - flat_kept)[stream] + j
        start = start - np.round(pos[si] * record_cost).astype(np.int64)
        end = np.maximum(end - np.round(pos[ei] * record_cost).astype(np.int64), start)
    start_ns = clock.to_ns(start, k)
    end_ns = clock.to_ns(end, k)
    ev = Events(
        cta=cta_id[ev_row], sm=sm_of, warp=segs[s_seg[si]], scope=scope[si],
        start=start, end=end, start_ns=start_ns, end_ns=end_ns,
    )

    init_ns = init - base
    if direct and len(ev_row):  # no timer read at entry: the CTA's first record stands in
        first_ns = np.full(n_ok, np.iinfo(np.int64).max)
        np.minimum.at(first_ns, ev_row, np.floor(start_ns).astype(np.int64))
        init_ns = np.minimum(init_ns, first_ns)
    ctas = Ctas(cta=cta_id, sm=sm_id, init_ns=init_ns, prefinal_ns=pre - base,
                postfinal_ns=post - base)
    missed = lost[0][rows] if lost is not None else np.zeros(n_ok, np.int64)
    drops = DropStats(
        records_written=int(flat_written.sum() + missed.sum()),
        records_kept=int(flat_kept.sum()),
        warps_with_drops=int((written > kept).sum() + (missed > 0).sum()),
        ctas_with_drops=int((~cta_nodrop | (missed > 0)).sum()),
        max_records_per_warp=int(written.max()) if written.size else 0,
        slots_per_warp=max(slots, 0),
        segments=n_seg,
        needed_bytes=lost[1] if lost is not None else None,
    )
    return Decoded(meta=meta, events=ev, ctas=ctas, clock=clock, drops=drops, base_ns=base,
                   unmatched_starts=unmatched_starts, unmatched_ends=unmatched_ends, issues=warn,
                   record_cost=None if record_cost is None else float(record_cost))


def _expand_direct(buffer: Any, meta: LaunchMeta, where: str
                   ) -> tuple[np.ndarray, LaunchMeta, tuple[np.ndarray, int] | None]:
    """A ``direct.py`` buffer rewritten as the Proton layout above, with its metadata, so one
    decoder reads both: each CTA's block (``direct.layout``: word 0 SM id and timer bits 32-55,
    word 1 timer bits 0-31, the iterations of each recording loop, a 32-bit clock per record
    slot) becomes a header with the program id (the block's index), the timer read as all
    three times (bits 56-63 from ``meta.timer_ref_ns``), warp 0's count, and its records in
    the order they ran, tagged from ``meta.direct_records``. A CTA whose header is zero did not
    write its block. Also returns, when loops ran more iterations than their sections keep,
    the records each CTA did not keep and the ``--buffer-size`` that would have kept them."""
    from proton_inject.formats.direct_layout import (
        DIRECT_HEADER_WORDS,
        SM_ID_BITS,
        block_bytes,
        layout,
        loop_bytes_needed,
    )

    rows = [list(r) for r in meta.direct_records or []]
    loops = [list(x) for x in meta.direct_loops or []]
    raw = _as_bytes(buffer)
    size = block_bytes(rows, loops) if rows else None
    if size != meta.bytes_per_cta and raw.size >= 4 and int(raw[:4].view("<u4")[0]) == PREAMBLE:
        # Proton's own layout: the direct lowering failed and Proton's passes lowered the
        # records instead (lowering.ProtonLowering.direct_module falls back to them).
        return raw, replace(meta, buffer_type="global", direct_records=None, direct_loops=None), None
    if size is None or size != meta.bytes_per_cta:
        raise UserError(
            f"{where}: buffer_type 'direct' with {len(rows)} record slots needs bytes_per_cta="
            f"{size or '?'}, not {meta.bytes_per_cta}; the metadata does not match the kernel "
            "(or the file was written by an older proton-inject: run again)")
    stride = meta.bytes_per_cta
    blocks = np.frombuffer(raw[: raw.size // stride * stride], dtype="<u4").reshape(-1, stride // 4)
    # Each record slot in the order the records ran: a loop's records, iteration by iteration,
    # where its first record stands in the text.
    first_word, _, _ = layout(rows, loops)
    tags = [(row[1] << 31) | (row[0] << 23) for row in rows]
    members = [[q for q, row in enumerate(rows) if len(row) > 2 and row[2] == lp]
               for lp in range(len(loops))]
    word, tag, loop_of, it_of = [], [], [], []
    for r, row in enumerate(rows):
        if len(row) < 3:
            word.append(first_word[r]), tag.append(tags[r]), loop_of.append(-1), it_of.append(0)
        elif r == members[row[2]][0]:
            lp = row[2]
            cap, step = loops[lp][:2]
            for it in range(cap):
                for q in members[lp]:
                    word.append(first_word[q] + it * step), tag.append(tags[q])
                    loop_of.append(lp), it_of.append(it)
    word, tag = np.asarray(word, np.int64), np.asarray(tag, np.uint32)
    loop_of, it_of = np.asarray(loop_of, np.int64), np.asarray(it_of, np.int64)
    n = len(word)
    ran = blocks[:, :DIRECT_HEADER_WORDS].any(axis=1)
    counts = blocks[:, DIRECT_HEADER_WORDS:DIRECT_HEADER_WORDS + len(loops)].astype(np.int64)
    every = np.asarray([row[2] if len(row) > 2 else 1 for row in loops], np.int64)
    counts = -(-counts // every)  # the iterations each loop would keep with room for all
    caps = np.asarray([row[0] for row in loops], np.int64)
    keep = np.ones((len(blocks), n), bool)
    if loops:
        in_loop = loop_of >= 0
        keep[:, in_loop] = it_of[in_loop] < np.minimum(counts, caps)[:, loop_of[in_loop]]
    keep &= ran[:, None]
    order = np.argsort(~keep, axis=1, kind="stable")  # kept slots first, in the order they ran
    kept = keep.sum(axis=1)
    filled = np.arange(n) < kept[:, None]
    W = meta.num_warps
    head = HEADER_WORDS + W
    out = np.zeros((len(blocks), head + 2 * n), np.uint32)
    t = _timer_from(blocks[:, 0] >> SM_ID_BITS, blocks[:, 1], meta.timer_ref_ns)
    t = np.where(ran, t, 0)
    t_words = np.stack([t & 0xFFFFFFFF, t >> 32], axis=1).astype(np.uint32)
    out[:, 0] = np.where(ran, PREAMBLE, 0)
    out[:, 1] = np.where(ran, np.arange(len(blocks), dtype=np.uint32), 0)
    out[:, 2] = blocks[:, 0] & ((1 << SM_ID_BITS) - 1)
    out[:, 3] = 8 * n
    out[:, 4:6] = out[:, 6:8] = out[:, 8:10] = t_words
    out[:, HEADER_WORDS] = 2 * kept
    out[:, head::2] = np.where(filled, tag[order], 0)
    out[:, head + 1::2] = np.where(filled, np.take_along_axis(blocks[:, word], order, axis=1), 0)
    meta = replace(meta, bytes_per_cta=4 * out.shape[1], buffer_size=8 * n, clock_bits=32,
                   sampled_warps=[0], buffer_type="direct")
    lost = None
    if loops:
        over = np.maximum(counts - caps, 0) * np.asarray([len(m) for m in members], np.int64)
        missed = np.where(ran, over.sum(axis=1), 0)
        if missed.any():
            need = loop_bytes_needed([row[1] for row in loops], counts[ran].max(axis=0).tolist())
            lost = (missed, need)
    return out.reshape(-1).view(np.uint8), meta, lost


def _timer_from(bits_32_55: np.ndarray, low: np.ndarray, ref: int | None) -> np.ndarray:
    """Globaltimer ns from its low 56 bits: the value nearest ``ref`` (a full reading taken
    near the launch) with those bits; bits 56-63 zero where there is no reference."""
    t = (bits_32_55.astype(np.int64) << 32) | low.astype(np.int64)
    if ref is None:
        return t
    span = 1 << 56
    t = t + (int(ref) >> 56 << 56)
    t = np.where(t - ref > span // 2, t - span, t)
    return np.where(ref - t > span // 2, t + span, t)


def _unwrap(cyc: np.ndarray, stream: np.ndarray, first_rec: np.ndarray, kept: np.ndarray,
            modulus: int, s_row: np.ndarray, init: np.ndarray, sm: np.ndarray,
            guess_mhz: float) -> np.ndarray:
    """Undo counter wrap: steps within a warp stream, then align streams of one SM in time."""
    if len(cyc) == 0:
        return cyc
    half = modulus // 2
    step = np.diff(cyc, prepend=cyc[:1])
    step = (step + half) % modulus - half  # a backward wrap becomes a small forward step
    has = kept > 0
    step[first_rec[has]] = 0
    rel = np.cumsum(step)
    rel -= np.repeat(rel[first_rec[has]], kept[has])  # cycles since the stream's first record
    first = cyc[first_rec[has]]
    if modulus > 1 << 42:
        return first[np.repeat(np.arange(has.sum()), kept[has])] + rel  # 43 bits: ~80 min
    # clock32: pick each stream's 2^32 multiple from the globaltimer distance to the SM's
    # earliest stream (exact while CTAs on an SM start within ~1.4 s of each other).
    row = s_row[first_rec[has]]
    s_sm, s_init = sm[row], init[row]
    o = np.lexsort((s_init, s_sm))
    ref = np.empty_like(o)
    new = np.r_[True, s_sm[o][1:] != s_sm[o][:-1]]
    ref_idx = np.maximum.accumulate(np.where(new, np.arange(len(o)), 0))
    ref[o] = o[ref_idx]
    expect = first[ref] + (s_init - s_init[ref]).astype(np.float64) * guess_mhz / 1000.0
    k = np.round((expect - first) / modulus).astype(np.int64)
    base = first + k * modulus
    return base[np.repeat(np.arange(has.sum()), kept[has])] + rel


def _timer_tick(values: np.ndarray) -> int:
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


def _fit_clock(sm: np.ndarray, has: np.ndarray, nodrop: np.ndarray, c_first: np.ndarray,
               c_last: np.ndarray, init: np.ndarray, pre: np.ndarray, clock_mhz: float | None,
               device_mhz: float | None, tick: int, warn: list[Issue], where: str,
               bracket: dict[str, Any] | None = None,
               span: tuple[int, int] | None = None) -> ClockFit:
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
    it; ``span`` is the launch's absolute init..post-final time), else falls back to the
    device's max SM clock (a guess), else to the within-CTA bound.
    """
    sel = has
    s_ids, inv = np.unique(sm[sel], return_inverse=True)
    n_sm = len(s_ids)
    if n_sm == 0:
        return ClockFit(sm=s_ids, offset=np.zeros(0), scale=np.ones(0),
                        knot_ns=np.array([0.0, 1.0]),
                        knot_cycles=np.array([0.0, 1.0]), source="none", tick_ns=tick)
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
    cta = (inv, c_first[sel], c_last[sel], init[sel], pre[sel], st)
    spread, r2 = _identifiability(a, bool(st.any()))

    def build(fit: tuple[np.ndarray, np.ndarray, float], source: str) -> ClockFit:
        clock = _place(a, fit, source, cta, s_ids)
        clock.tick_ns, clock.spread_ns, clock.r2 = tick, spread, r2
        return clock

    if clock_mhz:
        return build(_fixed_rate(a, clock_mhz), "--clock-mhz")
    br = clock_bracket.rate(bracket)
    detail = _bracket_detail(br, bracket, span)
    fit = _fit_rate_curve(a, bool(st.any()))
    if fit is None:
        doubts = ["too few timer anchors"]
    else:
        clock = build(fit, "globaltimer-fit")
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
    reason = "; ".join(doubts)
    if br is not None:
        clock = build(_fixed_rate(a, br.mhz), "clock-bracket")
        clock.reason, clock.uncertainty_pct, clock.bracket = reason, br.uncertainty_pct, detail
        diff = br.sides_differ_pct
        if diff is not None and abs(diff) > 100 * clock_bracket.MAX_SIDE_DIFF:
            _warn(warn, "clock changed across the launch",
                  f"{where}: the SM clock measured right before the launch "
                  f"({br.before['mhz']:.0f} MHz) and right after it ({br.after['mhz']:.0f} MHz) "
                  f"differ by {diff:+.1f}%; cycles converted at their mean, "
                  f"{br.mhz:.0f} MHz +-{br.uncertainty_pct:.1f}%",
                  why="before and after differ by more than "
                      f"{100 * clock_bracket.MAX_SIDE_DIFF:g}%",
                  then="cycles converted at the mean of the two; ns carry half their difference "
                       "as uncertainty")
        return clock
    missing = clock_bracket.missing_reason(bracket)
    ok = st & (c_last[sel] > c_first[sel])
    if device_mhz:
        mhz, source = float(device_mhz), "device-clock"
    elif ok.any():
        # The slowest clock at which 95% of CTAs' records fit between their timer reads.
        life = (pre[sel][ok] - init[sel][ok] + tick).astype(np.float64)
        mhz = float(np.quantile((c_last[sel][ok] - c_first[sel][ok]) / life, 0.95)) * 1000
        source = "within-cta"
    else:
        mhz, source = 1000.0, "assumed-1GHz"
    _warn(warn, "globaltimer fit rejected",
          f"{where}: globaltimer clock fit rejected ({reason}); no clock bracket: {missing}; "
          f"used {source} "
          f"({mhz:.0f} MHz); pass --clock-mhz to set it",
          why=", ".join([_why(d) for d in doubts] + [f"no clock bracket: {_short(missing)}"]),
          then=f"cycles converted at {mhz:.0f} MHz ({CLOCK_MEANING[source]}); "
               "pass --clock-mhz to set it")
    clock = build(_fixed_rate(a, mhz), source)
    clock.reason, clock.bracket = reason, detail
    return clock


def _short(missing: str) -> str:
    """A missing-bracket reason without its explanation, for counting launches per kind."""
    return missing.split(" (")[0]


def _bracket_detail(br: clock_bracket.BracketRate | None, bracket: dict[str, Any] | None,
                    span: tuple[int, int] | None) -> dict[str, Any]:
    """The bracket as the clock summary shows it: each side's rate and how far (us) it ran
    from the launch's own timer reads; or why there is none."""
    if br is None:
        return {"missing": clock_bracket.missing_reason(bracket)}
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


# What the ns of each clock source are worth, in the report's words.
CLOCK_MEANING = {
    "globaltimer-fit": "fitted to the launch's globaltimer reads: a measurement",
    "clock-bracket": "measured on every SM right before and right after the launch: a "
                     "measurement",
    "--clock-mhz": "given by --clock-mhz",
    "device-clock": "device max clock: a guess, not a measurement; ns are lower bounds if "
                    "the SMs ran slower",
    "within-cta": "slowest clock that fits 95% of CTAs' records in their lifetime: a bound, "
                  "not a measurement; ns are upper bounds",
    "assumed-1GHz": "1 GHz: a guess, not a measurement",
    "none": "no records",
}


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
    if source == "globaltimer-fit":
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
    if source == "globaltimer-fit" and early.any():
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
