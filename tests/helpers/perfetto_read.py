"""Read a native trace back the way Perfetto's trace processor does (for the tests): the
perfetto package's ``Trace`` proto, sequence-scoped incremental clocks, interning and track
descriptors, each event on its sequence's track or the one it names, begin/end slices matched
per track."""

from __future__ import annotations

import gzip
import json
from decimal import Decimal

from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TracePacket, TrackEvent

INCREMENTAL_CLEARED = TracePacket.SequenceFlags.Value("SEQ_INCREMENTAL_STATE_CLEARED")


def read_slices(data: bytes) -> tuple[list[dict], dict[int, dict]]:
    """Slices (name, track uuid, ts, dur in ns, args, loc) and tracks by uuid."""
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    trace = Trace()
    trace.ParseFromString(data)
    tracks: dict[int, dict] = {}
    seqs: dict[int, dict] = {}
    open_: dict[int, list] = {}
    out: list[dict] = []
    begin, end = TrackEvent.TYPE_SLICE_BEGIN, TrackEvent.TYPE_SLICE_END
    for p in trace.packet:
        kind = p.WhichOneof("data")
        if kind == "track_event":  # most packets: as little work as possible
            st = seqs[p.trusted_packet_sequence_id]
            st["t"] += p.timestamp
            e = p.track_event
            track = e.track_uuid if e.HasField("track_uuid") else st["track"]
            stack = open_.setdefault(track, [])
            if e.type == begin:
                args = {st["annots"][a.name_iid]: a.int_value for a in e.debug_annotations}
                stack.append({"name": st["names"][e.name_iid], "track": track,
                              "ts": st["t"], "args": args,
                              "loc": st["locs"].get(e.source_location_iid)})
            else:
                assert e.type == end
                s = stack.pop()
                s["dur"] = st["t"] - s["ts"]
                out.append(s)
            continue
        if kind == "track_descriptor":
            t = p.track_descriptor
            tracks[t.uuid] = {"name": t.name, "parent": t.parent_uuid if t.HasField("parent_uuid")
                              else None, "rank": t.sibling_order_rank,
                              "ordering": t.child_ordering}
            continue
        assert kind == "clock_snapshot" and p.sequence_flags & INCREMENTAL_CLEARED
        st = seqs[p.trusted_packet_sequence_id] = {"names": {}, "annots": {}, "locs": {}}
        clocks = {c.clock_id: (c.timestamp, c.is_incremental) for c in p.clock_snapshot.clocks}
        assert clocks == {64: (0, True), 6: (0, False)}
        for n in p.interned_data.event_names:
            st["names"][n.iid] = n.name
        for n in p.interned_data.debug_annotation_names:
            st["annots"][n.iid] = n.name
        for n in p.interned_data.source_locations:
            st["locs"][n.iid] = (n.file_name, n.line_number, n.function_name)
        d = p.trace_packet_defaults
        assert d.timestamp_clock_id == 64
        # (a sequence of several tracks has none: its packets name theirs)
        st["track"] = d.track_event_defaults.track_uuid if d.HasField("track_event_defaults") else None
        st["t"] = 0
        assert p.timestamp_clock_id == 6 and p.timestamp == 0
    assert all(not s for s in open_.values())
    return out, tracks


def perfetto_events(data: bytes) -> list[tuple]:
    """(launch, sm, cta, warp, name, ts ns, dur ns) of every slice, sorted; launches numbered
    in the order their tracks appear."""
    slices, tracks = read_slices(data)
    roots = sorted(u for u, t in tracks.items() if t["parent"] is None)
    out = []
    for s in slices:
        w = tracks[s["track"]]
        c = tracks[w["parent"]]
        m = tracks[c["parent"]]
        assert w["name"] == f"warp {w['rank']}" and c["name"] == f"CTA {c['rank']}"
        assert m["name"] == f"SM {m['rank']}"
        out.append((roots.index(m["parent"]), m["rank"], c["rank"], w["rank"], s["name"],
                    s["ts"], s["dur"]))
    return sorted(out)


def json_events(data: bytes | str) -> list[tuple]:
    """The same tuples from a Chrome JSON trace of ``formats/trace_json.py`` (times read as decimals: a
    float loses ns past ~2.5 months of globaltimer)."""
    doc = json.loads(data, parse_float=Decimal)
    launches = sorted(doc["otherData"]["launches"], key=lambda x: x["pid_base"])
    bases = [x["pid_base"] for x in launches]
    out = []
    for e in doc["traceEvents"]:
        if e["ph"] != "X":
            continue
        k = max(i for i, b in enumerate(bases) if b <= e["pid"])
        W = launches[k]["num_warps"]
        cta, warp = divmod(e["tid"] - 1, W)
        ts = int(e["ts"] * 1000)
        out.append((k, e["pid"] - bases[k], cta, warp, e["name"], ts,
                    int((e["ts"] + e["dur"]) * 1000) - ts))
    return sorted(out)
