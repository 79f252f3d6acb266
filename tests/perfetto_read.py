"""Read a native trace back the way Perfetto's trace processor does (for the tests): the
perfetto package's ``Trace`` proto, sequence-scoped incremental clocks, interning and track
descriptors, begin/end slices matched per track."""

from __future__ import annotations

import gzip

from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TracePacket

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
    for p in trace.packet:
        seq = p.trusted_packet_sequence_id
        if p.HasField("track_descriptor"):
            t = p.track_descriptor
            tracks[t.uuid] = {"name": t.name, "parent": t.parent_uuid if t.HasField("parent_uuid")
                              else None, "rank": t.sibling_order_rank,
                              "ordering": t.child_ordering}
            continue
        if p.sequence_flags & INCREMENTAL_CLEARED:
            st = seqs[seq] = {"names": {}, "annots": {}, "locs": {}, "clocks": {}}
            for c in p.clock_snapshot.clocks:
                st["clocks"][c.clock_id] = (c.timestamp, c.is_incremental)
            assert st["clocks"][64] == (0, True) and st["clocks"][6] == (0, False)
            for n in p.interned_data.event_names:
                st["names"][n.iid] = n.name
            for n in p.interned_data.debug_annotation_names:
                st["annots"][n.iid] = n.name
            for n in p.interned_data.source_locations:
                st["locs"][n.iid] = (n.file_name, n.line_number, n.function_name)
            st["defaults"] = p.trace_packet_defaults
            st["t"] = 0
            assert p.timestamp_clock_id == 6 and p.timestamp == 0
            continue
        st = seqs[seq]
        assert not p.HasField("timestamp_clock_id")
        assert st["defaults"].timestamp_clock_id == 64
        st["t"] += p.timestamp
        e = p.track_event
        track = e.track_uuid if e.HasField("track_uuid") else st["defaults"].track_event_defaults.track_uuid
        stack = open_.setdefault(track, [])
        if e.type == e.TYPE_SLICE_BEGIN:
            args = {st["annots"][a.name_iid]: a.int_value for a in e.debug_annotations}
            loc = st["locs"][e.source_location_iid] if e.HasField("source_location_iid") else None
            stack.append({"name": st["names"][e.name_iid], "track": track, "ts": st["t"],
                          "args": args, "loc": loc})
        else:
            assert e.type == e.TYPE_SLICE_END
            s = stack.pop()
            s["dur"] = st["t"] - s["ts"]
            out.append(s)
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


def json_events(doc: dict) -> list[tuple]:
    """The same tuples from a Chrome JSON trace of ``trace.py``."""
    launches = sorted(doc["otherData"]["launches"], key=lambda x: x["pid_base"])
    bases = [x["pid_base"] for x in launches]
    out = []
    for e in doc["traceEvents"]:
        if e["ph"] != "X":
            continue
        k = max(i for i, b in enumerate(bases) if b <= e["pid"])
        W = launches[k]["num_warps"]
        cta, warp = divmod(e["tid"] - 1, W)
        ts = round(e["ts"] * 1000)
        out.append((k, e["pid"] - bases[k], cta, warp, e["name"], ts,
                    round((e["ts"] + e["dur"]) * 1000) - ts))
    return sorted(out)
