"""Decode the profile buffers that Triton's Proton lowering flushes, into arrays of events.

The buffer holds one block per CTA in Proton's layout (``formats/proton_layout.py``: header,
per-warp counts, a circular segment of two-word records per profiled warp). ``decode`` checks
the blocks, reads each warp's records oldest first, unwraps their clocks (43-bit clock64 or
32-bit clock32 per-SM cycle counters), pairs starts with ends into region instances, and puts
them on one ns time axis with the clock fit of ``clock.py``. Scope ids are Proton's (see
``scopes_from_ttgir``). Triton 3.6 lowers only ``granularity=warp`` (others fail:
"granularity must be warp for now"), so that is all this decoder accepts.

A buffer that ``direct.py``'s lowering wrote (``buffer_type`` "direct": a compact block per
CTA, the record tags in the metadata) is first expanded into this layout
(``direct_blocks.expand_direct``). Its one timer read comes after the last record, so all
three times are that read, the clock fit uses end anchors only, and a CTA's init time becomes
its first record's placed time.

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
near the launch, for the bits the blocks leave out), "bin": file name of the buffer}``. ``formats.raw.save_raw``
and ``load_raw`` write and read that pair.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from proton_inject.analyze.clock import ClockFit, fit_clock, timer_tick
from proton_inject.analyze.clock_sources import Clock, given_rate
from proton_inject.analyze.direct_blocks import expand_direct
from proton_inject.analyze.issues import add_issue
from proton_inject.errors import UserError
from proton_inject.formats.diagnostics import Issue
from proton_inject.formats.proton_layout import HEADER_WORDS, PREAMBLE, RECORD_BYTES
from proton_inject.formats.raw import BufferType, LaunchMeta, _as_bytes

# CTAs of one launch start within this of each other (else their timer words are damaged).
MAX_LAUNCH_NS = 100 * 10**9
# A guess for clock32 unwrapping only (exact while CTAs start < ~1.4 s apart).
_GUESS_GHZ = 1.5


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


def _u64(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    return lo.astype(np.int64) | (hi.astype(np.int64) << 32)


def _group_starts(lengths: np.ndarray) -> np.ndarray:
    starts = np.zeros(len(lengths), np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    return starts


def decode(buffer: Any, meta: LaunchMeta, clock_mhz: float | None = None,
           record_cost: float | None = None,
           device_bracket: tuple[float, int] | None = None,
           clock: tuple[str, Any] | None = None) -> Decoded:
    """Decode one launch's raw profile buffer into events on one ns time axis.

    Damaged CTAs are skipped with a ``DecodeWarning`` (also kept in ``.warnings``); an
    all-zero buffer is a UserError (the instrumented binary did not run).

    ``record_cost`` (cycles, from ``calibrate``) is what one record adds to the time between
    the clock reads around it: each warp's k-th record is moved k costs earlier, so a region
    loses one cost per record from its start to its end (its own and those of regions nested
    in it), and back-to-back regions keep their gap. 0 or None keeps the raw clock reads.
    ``device_bracket`` (median MHz, launches): what the clock brackets of the run's other
    launches on this device measured, for a launch without a bracket of its own (a CUDA-graph
    replay) whose timer reads cannot fit the clock. ``clock``: a clock source the user chose
    and its option's value (``clock_sources.py``; ``clock_mhz`` is ``("--clock-mhz", MHz)``),
    used instead of the fit.
    """
    if clock_mhz:
        clock = (Clock.CLOCK_MHZ, clock_mhz)
    given = given_rate(clock, meta.sm_clock_mhz)
    warn: list[Issue] = []
    where = f"launch {meta.label}"
    lost = None  # direct: records of loop iterations past what the block keeps
    if meta.buffer_type == BufferType.DIRECT:
        buffer, meta, lost = expand_direct(buffer, meta, where)
    b = _read_blocks(buffer, meta, where, warn)
    r = _read_records(b, meta, where, warn, given[1] if given else None)
    si, ei, unmatched_starts, unmatched_ends = _pair(r, where, warn)
    direct = meta.buffer_type == BufferType.DIRECT
    fit = _fit(b, r, direct, meta, given, where, warn, device_bracket)
    ev = _events(b, r, si, ei, fit, record_cost)

    init_ns = b.init - b.base
    ev_row = r.row[si]
    if direct and len(ev_row):  # no timer read at entry: the CTA's first record stands in
        first_ns = np.full(len(b.rows), np.iinfo(np.int64).max)
        np.minimum.at(first_ns, ev_row, np.floor(ev.start_ns).astype(np.int64))
        init_ns = np.minimum(init_ns, first_ns)
    ctas = Ctas(cta=b.cta, sm=b.sm, init_ns=init_ns, prefinal_ns=b.pre - b.base,
                postfinal_ns=b.post - b.base)
    missed = lost[0][b.rows] if lost is not None else np.zeros(len(b.rows), np.int64)
    written, kept = r.written_per_warp, r.kept_per_warp
    drops = DropStats(
        records_written=int(r.written.sum() + missed.sum()),
        records_kept=int(r.kept.sum()),
        warps_with_drops=int((written > kept).sum() + (missed > 0).sum()),
        ctas_with_drops=int((~r.cta_nodrop | (missed > 0)).sum()),
        max_records_per_warp=int(written.max()) if written.size else 0,
        slots_per_warp=max(b.slots, 0),
        segments=len(b.segs),
        needed_bytes=lost[1] if lost is not None else None,
    )
    return Decoded(meta=meta, events=ev, ctas=ctas, clock=fit, drops=drops, base_ns=b.base,
                   unmatched_starts=unmatched_starts, unmatched_ends=unmatched_ends, issues=warn,
                   record_cost=None if record_cost is None else float(record_cost))


@dataclass
class _Blocks:
    """The CTA blocks of one launch that passed the checks (``rows``), as the metadata reads
    them; per good CTA its program id, SM, timer reads (absolute ns) and count words."""

    words: np.ndarray  # the whole buffer's uint32 words (whole blocks within the grid)
    stride: int  # bytes per CTA
    meta_words: int  # header + one count word per warp
    segs: np.ndarray  # the warp of each record segment
    seg_words: int
    slots: int  # record slots per segment
    rows: np.ndarray
    cta: np.ndarray
    sm: np.ndarray
    init: np.ndarray
    pre: np.ndarray
    post: np.ndarray
    counts: np.ndarray  # (CTA, segment): words the segment's warp wrote
    base: int  # time 0: the earliest init


def _read_blocks(buffer: Any, meta: LaunchMeta, where: str, warn: list[Issue]) -> _Blocks:
    """Check the metadata against the buffer and keep the CTA blocks that are whole and sane."""
    stride, meta_words, segs = _check_meta(meta, where)
    n_seg = len(segs)
    W = meta.num_warps
    blocks = _split_blocks(buffer, meta, stride, where, warn)
    words = blocks.reshape(-1)

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
    # under --sample-ctas the direct lowering's CTAs outside the sample write nothing at all
    unsampled = ((np.arange(len(blocks)) % meta.sample_ctas != 0) & ~blocks.any(axis=1)
                 if meta.sample_ctas > 1 else np.zeros(len(blocks), bool))
    ok, t_init, t_pre, t_post = _good_ctas(blocks, ok, unsampled, data_bytes, stride, where, warn)
    rows = np.nonzero(ok)[0]
    hdr = blocks[rows]
    n_ok = len(rows)

    cta_id = hdr[:, 1].astype(np.int64)
    sm_id = hdr[:, 2].astype(np.int64)
    init, pre, post = t_init[rows], t_pre[rows], t_post[rows]
    if n_ok and (cta_id >= meta.num_ctas).any():
        add_issue(warn, "program ids outside the grid",
                  f"{where}: {int((cta_id >= meta.num_ctas).sum())} CTA(s) report a program id "
                  f"outside the grid of {meta.num_ctas}")
    base = int(init.min()) if n_ok else 0
    counts = hdr[:, HEADER_WORDS + segs].astype(np.int64) if n_ok else np.zeros((0, n_seg), np.int64)
    return _Blocks(words=words, stride=stride, meta_words=meta_words, segs=segs,
                   seg_words=seg_words, slots=slots, rows=rows, cta=cta_id, sm=sm_id, init=init,
                   pre=pre, post=post, counts=counts, base=base)


def _check_meta(meta: LaunchMeta, where: str) -> tuple[int, int, np.ndarray]:
    """Bytes per CTA, header words and the segments' warps, once the metadata agrees with
    itself (a UserError where it cannot describe a Proton buffer)."""
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
    return stride, meta_words, segs


def _split_blocks(buffer: Any, meta: LaunchMeta, stride: int, where: str,
                  warn: list[Issue]) -> np.ndarray:
    """The buffer's whole CTA blocks within the grid, one row of uint32 words each."""
    raw = _as_bytes(buffer)
    if raw.size == 0 or not raw.any():
        raise UserError(
            f"{where}: the profile buffer is all zeros: the instrumented binary was not used. "
            "Check that the override directory holds only .ttgir files and that the run used a "
            "private TRITON_CACHE_DIR"
        )
    n_blocks = raw.size // stride
    if raw.size % stride:
        add_issue(warn, "truncated buffer",
                  f"{where}: buffer is truncated: {raw.size % stride} bytes of a partial CTA "
                  f"block after {n_blocks} whole ones were ignored")
    if n_blocks < meta.num_ctas:
        add_issue(warn, "fewer CTA blocks than the grid",
                  f"{where}: buffer holds {n_blocks} CTA blocks, the grid has {meta.num_ctas}")
    n_blocks = min(n_blocks, meta.num_ctas)
    words = np.frombuffer(raw[: n_blocks * stride], dtype="<u4")
    return words.reshape(n_blocks, stride // 4)


def _good_ctas(blocks: np.ndarray, ok: np.ndarray, unsampled: np.ndarray, data_bytes: int, stride: int,
               where: str, warn: list[Issue]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Which blocks to decode (``ok``: those with the preamble), and every block's init,
    pre-final and post-final times: blocks with another buffer size or damaged timer reads
    are skipped with a warning, and so are those without the preamble unless ``unsampled``
    (blocks CTA sampling left empty)."""
    bad_pre = ~ok & ~unsampled
    if bad_pre.any():
        first = int(np.argmax(bad_pre))
        add_issue(warn, "CTAs with a bad preamble skipped",
                  f"{where}: skipped {int(bad_pre.sum())} CTA block(s) with a bad preamble "
                  f"(first: block {first} at byte {first * stride})")
    bad_size = ok & (blocks[:, 3] != data_bytes)
    if bad_size.any():
        add_issue(warn, "CTAs with another buffer size skipped",
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
        add_issue(warn, "CTAs with implausible timer values skipped",
                  f"{where}: skipped {int(bad_time.sum())} CTA block(s) with implausible "
                  "timer values (damaged header)")
    ok &= sane
    return ok, t_init, t_pre, t_post


@dataclass
class _Records:
    """Every record slot the good CTAs kept, oldest first per warp stream (a stream is one
    CTA's segment, ``row * segments + seg``)."""

    stream: np.ndarray  # per record: its stream, its CTA's row in _Blocks, its segment
    row: np.ndarray
    seg: np.ndarray
    pos: np.ndarray  # per record: its place among all its warp wrote (lost ones count)
    cyc: np.ndarray  # unwrapped cycles
    scope: np.ndarray
    is_end: np.ndarray
    empty: np.ndarray  # a slot the counts claim but that holds zeros
    first: np.ndarray  # per stream: its first record's index; records written, records kept
    written: np.ndarray
    kept: np.ndarray
    written_per_warp: np.ndarray  # the same two, (CTA, segment)
    kept_per_warp: np.ndarray
    cta_nodrop: np.ndarray  # per CTA: no warp lost a record


def _read_records(b: _Blocks, meta: LaunchMeta, where: str, warn: list[Issue],
                  clock_mhz: float | None) -> _Records:
    """Which slots hold which record, oldest first, with their clocks unwrapped."""
    n_seg = len(b.segs)
    n_ok = len(b.rows)
    written = b.counts // 2  # records each segment's warp wrote
    kept = np.minimum(written, max(b.slots, 0))
    flat_written = written.reshape(-1)
    flat_kept = kept.reshape(-1)
    n_rec = int(flat_kept.sum())
    stream = np.repeat(np.arange(len(flat_kept), dtype=np.int64), flat_kept)
    first_rec = _group_starts(flat_kept)
    j = np.arange(n_rec, dtype=np.int64) - first_rec[stream]
    pos = (flat_written - flat_kept)[stream] + j
    slot = pos % max(b.slots, 1)
    s_row = stream // n_seg
    s_seg = stream % n_seg
    widx = b.rows[s_row] * (b.stride // 4) + b.meta_words + s_seg * b.seg_words + 2 * slot
    tag = b.words[widx]
    low = b.words[widx + 1]
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
        add_issue(warn, "empty record slots ignored",
                  f"{where}: {int(empty.sum())} record slot(s) that the counts claim are empty "
                  "(zero); ignored")

    cyc = _unwrap(cyc, stream, first_rec, flat_kept, modulus, s_row, b.init, b.sm,
                  clock_mhz or _GUESS_GHZ * 1000)
    cta_nodrop = (written <= kept).all(axis=1) if n_ok else np.zeros(0, bool)
    return _Records(stream=stream, row=s_row, seg=s_seg, pos=pos, cyc=cyc, scope=scope,
                    is_end=is_end, empty=empty, first=first_rec, written=flat_written,
                    kept=flat_kept, written_per_warp=written, kept_per_warp=kept,
                    cta_nodrop=cta_nodrop)


def _pair(r: _Records, where: str, warn: list[Issue]) -> tuple[np.ndarray, np.ndarray, int, int]:
    """Start and end record indices of each region instance (starts paired with ends per warp
    stream and scope, in order), and how many starts and ends found no partner."""
    n_rec = len(r.cyc)
    stream, scope, is_end, cyc = r.stream, r.scope, r.is_end, r.cyc
    valid = ~r.empty
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
    dropped_stream = (r.written > r.kept)[stream]
    odd = int((un & ~dropped_stream).sum())
    if odd:
        add_issue(warn, "records without a partner",
                  f"{where}: {odd} start/end record(s) without a partner in warps whose buffer "
                  "did not wrap (a region left early, or damaged data)")
    neg = cyc[ei] < cyc[si]
    if neg.any():
        add_issue(warn, "regions that end before they start dropped",
                  f"{where}: dropped {int(neg.sum())} region(s) that end before they start "
                  "(clock anomaly or damaged data)")
        si, ei = si[~neg], ei[~neg]
    return si, ei, unmatched_starts, unmatched_ends


def _fit(b: _Blocks, r: _Records, direct: bool, meta: LaunchMeta, given: tuple[str, float] | None,
         where: str, warn: list[Issue], device_bracket: tuple[float, int] | None = None) -> ClockFit:
    """The launch's clock fit (cycles -> ns per SM) from each CTA's first and last record
    and its timer reads."""
    n_ok, n_seg = len(b.rows), len(b.segs)
    flat_kept, first_rec, cyc = r.kept, r.first, r.cyc
    last_rec = first_rec + flat_kept - 1
    has = flat_kept > 0
    c_first = np.full(len(flat_kept), np.iinfo(np.int64).max)
    c_last = np.full(len(flat_kept), np.iinfo(np.int64).min)
    c_first[has] = cyc[first_rec[has]]
    c_last[has] = cyc[last_rec[has]]
    c_first = c_first.reshape(n_ok, n_seg).min(axis=1) if n_ok else c_first
    c_last = c_last.reshape(n_ok, n_seg).max(axis=1) if n_ok else c_last
    cta_has = has.reshape(n_ok, n_seg).any(axis=1) if n_ok else np.zeros(0, bool)
    # (init, first record) start anchors: a direct block has no timer read before its records
    start_anchor = r.cta_nodrop & (not direct)
    tick = timer_tick(np.r_[b.init, b.pre, b.post])
    span = (b.base, int(b.post.max())) if n_ok else None
    return fit_clock(b.sm, cta_has, start_anchor, c_first, c_last, b.init - b.base,
                     b.pre - b.base, given, meta.sm_clock_mhz, tick, warn, where,
                     bracket=meta.clock_bracket, span=span, device_bracket=device_bracket)


def _events(b: _Blocks, r: _Records, si: np.ndarray, ei: np.ndarray, clock: ClockFit,
            record_cost: float | None) -> Events:
    """The region instances (start record ``si``, end record ``ei``) on the ns time axis."""
    ev_row = r.row[si]
    sm_of = b.sm[ev_row]
    k = np.searchsorted(clock.sm, sm_of)
    start, end = r.cyc[si], r.cyc[ei]
    if record_cost:
        # Record k of a warp (k counts the records the buffer lost too) ran after k records.
        # (Siblings closer than the calibrated empty region may then overlap by a few cycles.)
        pos = r.pos
        start = start - np.round(pos[si] * record_cost).astype(np.int64)
        end = np.maximum(end - np.round(pos[ei] * record_cost).astype(np.int64), start)
    start_ns = clock.to_ns(start, k)
    end_ns = clock.to_ns(end, k)
    return Events(
        cta=b.cta[ev_row], sm=sm_of, warp=b.segs[r.seg[si]], scope=r.scope[si],
        start=start, end=end, start_ns=start_ns, end_ns=end_ns,
    )


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
