"""Write decoded launches as a native Perfetto trace: protobuf ``TracePacket``s, no dependency.

The same events as the Chrome JSON writer (``trace_json.py``), on the same time axis (ns from the
launch's time 0, or the run's earliest launch when merged):

- tracks: one per launch (``[rank R ]kernel #launch`` and its device), under it one per SM
  (``SM s``), under that one per CTA (``CTA c``), under that one per warp (``warp w``), each
  level in explicit numeric order; region slices live on the warp tracks, the ``finalize``
  slice of a CTA on its first profiled warp's track after its last region, as in JSON;
- track descriptors on no sequence (they intern nothing); slices on packet sequences whose
  first packet clears the incremental state (``SEQ_INCREMENTAL_STATE_CLEARED``), defines a
  sequence-scoped incremental clock (id 64) in a ``ClockSnapshot``, sets it as the sequence's
  default, and interns the event names, the debug annotation names and the regions' source
  locations (``file:line``); every other packet is a ``TrackEvent`` slice begin or end whose
  timestamp is the ns since the sequence's previous packet (1-3 bytes). Per launch, whichever
  is smaller (``_one_sequence``): a sequence per warp track, that track its default (~100
  bytes of head per warp), or one sequence for all its regions and one for its finalize
  slices, in time order, each packet naming its track (``track_uuid``: 3-5 bytes a packet).
  Warps with tens of regions take the first, warps with a few the second (sizes measured in
  docs/host-performance.md);
- region slices carry their name and source location; no ``cycles`` (8 more bytes a region:
  0.24 of the JSON's bytes instead of 0.19 on the H100 matmul); finalize slices
  carry ``finalize_ns``, ``init_ns``, ``first_record_ns`` and ``prefinal_ns`` (debug
  annotations).

Begin/end slices must nest on a track: the ends of slices that overlap only partially (not
seen in real data; JSON shows them as they are) are moved to the end of the slice around them.

Speed: packets are encoded column-wise with numpy (``protobuf.py``), not one message object
per event: faster than the JSON writer and 4-7x the perfetto package's own protos
(docs/host-performance.md).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from proton_inject.formats.protobuf import Col, encode_packets, int_field, msg, str_field, tag, varint
from proton_inject.formats.trace_writer import TraceLaunch, TraceSink, cta_spans, time_zero

_CHUNK = 1 << 16  # packets per encoding pass: bounded scratch memory

# TracePacket and friends: field numbers of perfetto/trace/*.proto (checked against the
# perfetto package's perfetto_trace_pb2 by the tests).
_P_TIMESTAMP, _P_CLOCK_ID, _P_SEQ, _P_TRACK_EVENT, _P_INTERNED = 8, 58, 10, 11, 12
_P_FLAGS, _P_DEFAULTS, _P_CLOCKS, _P_DESCRIPTOR = 13, 59, 6, 60
_TE_TYPE, _TE_NAME_IID, _TE_LOC_IID, _TE_ANNOT, _TE_TRACK = 9, 10, 34, 4, 11
_BEGIN, _END = 1, 2
_SEQ_INCREMENTAL_STATE_CLEARED = 1
_BOOTTIME, _INCREMENTAL_CLOCK = 6, 64
_EXPLICIT = 3  # TrackDescriptor.ChildTracksOrdering
_ANNOT = ("finalize_ns", "init_ns", "first_record_ns", "prefinal_ns")  # finalize slices' args

# --- event order on a track -----------------------------------------------------------------


def _slice_order(track: np.ndarray, ts: np.ndarray, te: np.ndarray) -> tuple[np.ndarray, ...]:
    """Begin/end items of slices in an order where they nest on each track.

    Slices are taken by track and start (stable: the decoder puts a parent before its
    children); slice i ends just before the first later slice of its track that starts at or
    after its end (and after its own begin), several ends at one place innermost first.
    Returns the slice order and, per item in file order: the slice (index into that order),
    is-end, the track, the time. Linear apart from two sorts of nearly sorted keys."""
    n = len(ts)
    if n == 0:
        z = np.zeros(0, np.int64)
        return z, z, np.zeros(0, bool), z, z
    lo = int(min(ts.min(), te.min()))
    span = int(max(ts.max(), te.max())) - lo + 1
    tr_base = track.astype(np.int64) * span  # (track, time) as one sortable int64
    key_s = tr_base + (ts - lo)
    order = np.argsort(key_s, kind="stable")
    key_s = key_s[order]
    key_e = tr_base[order] + (te[order] - lo)
    i = np.arange(n, dtype=np.int64)
    slot = np.maximum(i + 1, np.searchsorted(key_s, key_e, side="left"))
    # ends by slot, innermost (latest begun) first; then merged with the begins: begin i has
    # the ends of slots <= i before it, the m-th end has the begins of slices < its slot
    rev = np.argsort(slot[::-1], kind="stable")
    ends = (n - 1 - rev)  # slices in end order
    e_slot = slot[ends]
    pos_b = i + np.searchsorted(e_slot, i, side="right")
    pos_e = i + e_slot
    sl = np.empty(2 * n, np.int64)
    is_end = np.zeros(2 * n, bool)
    sl[pos_b] = i
    sl[pos_e] = ends
    is_end[pos_e] = True
    t = np.where(is_end, key_e[sl], key_s[sl])
    # partial overlaps (a slice ending after a later one began but before it ended) would put
    # time backwards: such ends move forward to the time of what closes before them
    t = np.maximum.accumulate(t)
    tr = track[order][sl]
    return order, sl, is_end, tr, t - tr.astype(np.int64) * span + lo


# --- one launch ------------------------------------------------------------------------------


def _split_loc(loc: str) -> tuple[str, int | None]:
    m = re.fullmatch(r"(.*):(\d+)", loc)
    return (m.group(1), int(m.group(2))) if m else (loc, None)


class _Ids:
    """Track uuids and sequence ids handed out over a whole file."""

    def __init__(self) -> None:
        self.uuid = 1
        self.seq = 1

    def take_uuids(self, n: int) -> np.ndarray:
        out = np.arange(self.uuid, self.uuid + n, dtype=np.int64)
        self.uuid += n
        return out

    def take_seqs(self, n: int) -> np.ndarray:
        out = np.arange(self.seq, self.seq + n, dtype=np.int64)
        self.seq += n
        return out


def _descriptors(uuid: np.ndarray, parent: np.ndarray | None, names: list[str],
                 name_idx: np.ndarray, rank: np.ndarray | None, ordered: bool) -> np.ndarray:
    """TrackDescriptor packets (on no sequence: they intern nothing); track i is named
    ``names[name_idx[i]]``."""
    n = len(uuid)
    desc = [Col(tag(1, 0), value=uuid)]
    if parent is not None:
        desc.append(Col(tag(5, 0), value=parent))
    desc.append(Col(tag(2, 2), table=[s.encode() for s in names], idx=name_idx))
    if ordered:
        desc.append(Col(tag(11, 0), value=_EXPLICIT))
    if rank is not None:
        desc.append(Col(tag(12, 0), value=rank))
    return encode_packets(n, [Col(tag(_P_DESCRIPTOR, 2), sub=desc)])


def launch_packets(d: TraceLaunch, t0_ns: int, merged: bool, ids: _Ids) -> tuple[list[np.ndarray], int]:
    """Byte chunks of one launch's packets (descriptors, sequence heads, events), and how many
    slices they hold. ``merged`` is unused: every launch's top track names it."""
    sl = _launch_slices(d, d.base_ns - t0_ns)
    W, first_warp = d.meta.num_warps, d.meta.segments[0]
    # Tracks: warps (with slices) under CTAs under SMs under the launch.
    key = np.concatenate([d.events.cta * W + d.events.warp,
                          sl.f_cta * W + first_warp]).astype(np.int64)
    wkeys, track = np.unique(key, return_inverse=True)
    parts, warp_uuid = _track_descriptors(d, wkeys, ids)
    names = _interned(d)
    shared = _one_sequence(len(d.events), warp_uuid, names, ids)
    if shared:  # one sequence for the regions, one for the finalize slices
        seqs = ids.take_seqs(2)
        parts.append(_heads(seqs, None, names, np.array([0, 1])))
    else:
        seqs = ids.take_seqs(len(wkeys))
        parts.append(_heads(seqs, warp_uuid, names,
                            np.isin(wkeys, sl.f_cta * W + first_warp).astype(np.int64)))
    parts += _slice_events(d, sl, track, seqs, names, warp_uuid if shared else None)
    return parts, len(d.events) + len(sl.f_cta)


def _one_sequence(regions: int, warp_uuid: np.ndarray, names: _Names, ids: _Ids) -> bool:
    """Whether the launch's slices go into one sequence (each packet then names its warp's
    track: 3-5 bytes more) rather than one per warp track (each with its own head: the clock,
    defaults and interned names, ~100 bytes): the smaller, from the head's real size. On the
    H100 fixtures: add (9 regions a warp) one sequence, mm (63) a sequence per warp."""
    if not len(warp_uuid):
        return False
    head = len(_heads(np.array([ids.seq + len(warp_uuid)]), warp_uuid[-1:], names, np.zeros(1, np.int64)))
    per_packet = 1 + len(varint(int(warp_uuid[-1]))) + len(varint(ids.seq + 2)) - len(
        varint(ids.seq + len(warp_uuid)))
    return 2 * regions * per_packet < len(warp_uuid) * head


@dataclass
class _Slices:
    """One launch's slices in trace ns: its regions (``ts``..``te``), then the finalize of each
    CTA that has regions (``f_*``, ``pre``, ``fin``, ``init``; ``has`` marks those CTAs)."""

    ts: np.ndarray
    te: np.ndarray
    first_start: np.ndarray  # per CTA: the start of its first region
    has: np.ndarray
    pre: np.ndarray
    fin: np.ndarray
    f_start: np.ndarray
    f_cta: np.ndarray
    init: np.ndarray


def _launch_slices(d: TraceLaunch, shift: int) -> _Slices:
    """Regions, then each CTA's finalize (same values as trace_json._launch_parts)."""
    ev, c = d.events, d.ctas
    ts = np.round(ev.start_ns).astype(np.int64) + shift
    te = np.round(ev.end_ns).astype(np.int64) + shift
    first_start, last_end = cta_spans(c.cta, ev.cta, ts, te)
    has = first_start < np.iinfo(np.int64).max
    pre = c.prefinal_ns[has] + shift
    fin = c.postfinal_ns[has] - c.prefinal_ns[has]
    return _Slices(ts, te, first_start, has, pre, fin, np.maximum(pre, last_end[has]),
                   c.cta[has], c.init_ns[has] + shift)


def _track_descriptors(d: TraceLaunch, wkeys: np.ndarray, ids: _Ids
                       ) -> tuple[list[np.ndarray], np.ndarray]:
    """The launch's, its SMs', CTAs' and warps' track descriptors (warp tracks ``wkeys``:
    CTA x num_warps + warp), and the warp tracks' uuids."""
    meta, c = d.meta, d.ctas
    W = meta.num_warps
    sm_of = dict(zip(c.cta.tolist(), c.sm.tolist(), strict=False))
    w_cta, w_warp = wkeys // W, wkeys % W
    ctas_u, w_cta_i = np.unique(w_cta, return_inverse=True)
    cta_sm = np.array([sm_of.get(x, 0) for x in ctas_u.tolist()], np.int64)
    sms_u, cta_sm_i = np.unique(cta_sm, return_inverse=True)
    warp_uuid = ids.take_uuids(len(wkeys))  # first: the smallest, as events may name them
    root = ids.take_uuids(1)
    sm_uuid, cta_uuid = ids.take_uuids(len(sms_u)), ids.take_uuids(len(ctas_u))
    label = f"rank {meta.rank} " if meta.rank is not None else ""
    label += f"{meta.kernel} #{meta.launch}" + (f" on {meta.device}" if meta.device else "")
    every = np.arange
    return [
        _descriptors(root, None, [label], every(1), None, True),
        _descriptors(sm_uuid, np.full(len(sms_u), root[0]),
                     [f"SM {s}" for s in sms_u.tolist()], every(len(sms_u)), sms_u, True),
        _descriptors(cta_uuid, sm_uuid[cta_sm_i], [f"CTA {x}" for x in ctas_u.tolist()],
                     every(len(ctas_u)), ctas_u, True),
        _descriptors(warp_uuid, cta_uuid[w_cta_i], [f"warp {w}" for w in range(W)],
                     w_warp, w_warp, False),
    ], warp_uuid


@dataclass
class _Names:
    """Interned ids: per scope its name's and its location's (0: none), and the finalize's;
    the interned data of a sequence without and with the finalize slice's names."""

    name: dict[int, int]
    loc: dict[int, int]
    fin: int
    data: bytes
    fin_data: bytes


def _interned(d: TraceLaunch) -> _Names:
    """The region names and source locations to intern, and the finalize slice's names."""
    meta = d.meta
    scopes = sorted(set(meta.scopes) | set(np.unique(d.events.scope).tolist()))
    name_iid = {s: i + 1 for i, s in enumerate(scopes)}
    fin_iid = len(scopes) + 1
    interned = b"".join(msg(2, int_field(1, name_iid[s]) + str_field(2, d.scope_name(s))) for s in scopes)
    loc_iid: dict[int, int] = {}
    for s in scopes:
        loc = meta.scope_locs.get(s)
        if loc:
            f, line = _split_loc(loc)
            loc_iid[s] = len(loc_iid) + 1
            interned += msg(4, int_field(1, loc_iid[s]) + str_field(2, f)
                            + (int_field(4, line) if line is not None else b""))
    fin_interned = interned + msg(2, int_field(1, fin_iid) + str_field(2, "finalize"))
    fin_interned += b"".join(msg(3, int_field(1, i + 1) + str_field(2, a)) for i, a in enumerate(_ANNOT))
    return _Names(name_iid, loc_iid, fin_iid, interned, fin_interned)


def _heads(seqs: np.ndarray, track_uuid: np.ndarray | None, names: _Names,
           with_fin: np.ndarray) -> np.ndarray:
    """Each sequence's first packet: it clears the state, sets the clock (and the sequence's
    track, where it has one) and interns the names (the finalize slice's where ``with_fin``)."""
    clocks = (msg(1, int_field(1, _INCREMENTAL_CLOCK) + int_field(2, 0) + int_field(3, 1))
              + msg(1, int_field(1, _BOOTTIME) + int_field(2, 0)))
    defaults = [Col(tag(_P_CLOCK_ID, 0), value=_INCREMENTAL_CLOCK)]
    if track_uuid is not None:
        defaults.append(Col(tag(_P_TRACK_EVENT, 2), sub=[Col(tag(_TE_TRACK, 0), value=track_uuid)]))
    return encode_packets(len(seqs), [
        Col(tag(_P_TIMESTAMP, 0), value=0),
        Col(tag(_P_SEQ, 0), value=seqs),
        Col(tag(_P_CLOCKS, 2), const=varint(len(clocks)) + clocks),
        Col(tag(_P_INTERNED, 2), table=[names.data, names.fin_data], idx=with_fin),
        Col(tag(_P_FLAGS, 0), value=_SEQ_INCREMENTAL_STATE_CLEARED),
        Col(tag(_P_DEFAULTS, 2), sub=defaults),
        Col(tag(_P_CLOCK_ID, 0), value=_BOOTTIME),
    ])


def _time_order(t: np.ndarray) -> np.ndarray:
    """The indices that sort ``t``, equal times in their order (each track's order is kept):
    one sort of (time, index) packed in an int64, about 10x faster than a stable argsort
    (docs/host-performance.md), which is the fallback where they do not fit."""
    if not len(t):
        return np.zeros(0, np.int64)
    bits = len(t).bit_length()
    lo = int(t.min())
    if int(t.max()) - lo >= 1 << (62 - bits):
        return np.argsort(t, kind="stable")
    return np.sort(((t - lo) << bits) | np.arange(len(t))) & ((1 << bits) - 1)


# long: the columns of every slice packet, then its runs (per sequence layout) encoded in chunks
def _slice_events(d: TraceLaunch, sl: _Slices, track: np.ndarray, seqs: np.ndarray, names: _Names,
                  shared_uuid: np.ndarray | None) -> list[np.ndarray]:
    """Slice begins and ends, each timestamp the ns since the one before on its sequence:
    track by track (a sequence per warp track), or, with ``shared_uuid`` (the warp tracks'
    uuids, named by each packet), in time order on ``seqs[0]`` (regions) and ``seqs[1]``
    (finalize slices)."""
    ev = d.events
    nr, nf = len(ev), len(sl.f_cta)
    s_ts = np.concatenate([sl.ts, sl.f_start])
    s_te = np.concatenate([sl.te, sl.f_start + sl.fin])
    order, sel, is_end, tr, t = _slice_order(track, s_ts, s_te)
    src = order[sel]  # index into regions (< nr) or finalize slices (>= nr)
    scopes = list(names.name)
    lut = np.zeros(max(scopes) + 1 if scopes else 1, np.int64)
    loc_lut = np.zeros_like(lut)
    for s in scopes:
        lut[s] = names.name[s]
        loc_lut[s] = names.loc.get(s, 0)
    s_name = np.concatenate([lut[ev.scope], np.full(nf, names.fin, np.int64)])
    s_loc = np.concatenate([loc_lut[ev.scope], np.zeros(nf, np.int64)])
    annots = [np.concatenate([np.zeros(nr, np.int64), v]) for v in
              (sl.fin, sl.init, sl.first_start[sl.has], sl.pre)]
    is_f = src >= nr
    # runs of packets: (items, their timestamp deltas, sequence ids, track uuids or None)
    if shared_uuid is not None:
        runs = []
        for rows, seq in ((~is_f, seqs[0]), (is_f, seqs[1])):
            k = np.nonzero(rows)[0]
            k = k[_time_order(t[k])]
            runs.append((k, np.diff(t[k], prepend=0), np.full(len(k), seq), shared_uuid[tr[k]]))
    else:
        dt = np.diff(t, prepend=0)
        new_track = np.ones(len(tr), bool)
        new_track[1:] = tr[1:] != tr[:-1]
        dt[new_track] = t[new_track]  # from the clock snapshot's 0
        # Finalize slices (the last two items of their tracks, as they start after every
        # region of their CTA) go out after all regions' packets: their args need columns the
        # rest do not.
        last_of_track = np.ones(len(tr), bool)
        last_of_track[:-1] = tr[1:] != tr[:-1]
        tail = is_f & (last_of_track | np.roll(last_of_track, -1) & np.roll(is_f, -1))
        runs = [(k, dt[k], seqs[tr[k]], None) for k in (np.nonzero(~tail)[0], np.nonzero(tail)[0])]
    parts = []
    for idx, dts, seq_of, uuid in runs:
        with_args = bool(is_f[idx].any())
        for lo in range(0, len(idx), _CHUNK):
            k = idx[lo:lo + _CHUNK]
            x, end = src[k], is_end[k]
            beg = ~end
            loc = s_loc[x]
            te_fields = [Col(tag(_TE_TYPE, 0), value=np.where(end, _END, _BEGIN)),
                         Col(tag(_TE_NAME_IID, 0), value=s_name[x], rows=beg),
                         Col(tag(_TE_LOC_IID, 0), value=loc, rows=beg & (loc > 0))]
            if uuid is not None:
                te_fields.append(Col(tag(_TE_TRACK, 0), value=uuid[lo:lo + _CHUNK]))
            if with_args:
                fb = beg & (x >= nr)
                te_fields += [Col(tag(_TE_ANNOT, 2), rows=fb, sub=[
                    Col(tag(1, 0), value=j + 1), Col(tag(4, 0), value=v[x])])
                    for j, v in enumerate(annots)]
            parts.append(encode_packets(len(k), [
                Col(tag(_P_TIMESTAMP, 0), value=dts[lo:lo + _CHUNK]),
                Col(tag(_P_SEQ, 0), value=seq_of[lo:lo + _CHUNK]),
                Col(tag(_P_TRACK_EVENT, 2), sub=te_fields),
            ]))
    return parts


class PerfettoFile(TraceSink):
    """One native trace written launch by launch, like ``trace_json.TraceFile`` (same arguments;
    ``path=None`` writes to memory and ``commit`` returns the bytes)."""

    def __init__(self, path: str | os.PathLike | None, t0_ns: int, merged: bool,
                 gz: bool = False, level: int = 1):
        self.t0, self.merged = t0_ns, merged
        self.bytes = 0  # uncompressed bytes so far
        self.events = 0
        self._ids = _Ids()
        super().__init__(path, gz, level)

    @property
    def json_bytes(self) -> int:
        """0: the report's warning about JSON too big for Perfetto's UI is not about this file."""
        return 0

    def add(self, d: TraceLaunch) -> None:
        """Append one launch's tracks and slices."""
        if time_zero(d) < self.t0:
            raise ValueError(f"launch {d.meta.label} starts before the trace's time 0")
        parts, _ = launch_packets(d, self.t0, self.merged, self._ids)
        for p in parts:
            self._f.write(memoryview(p))
            self.bytes += len(p)
        self.events += len(d.events)

    def commit(self) -> Any:
        """Finish the file; returns its path (the bytes when written to memory)."""
        return self._close()
