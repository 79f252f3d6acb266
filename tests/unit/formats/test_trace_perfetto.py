"""Native Perfetto traces: read back with the perfetto package's protos, every event equal to
the JSON writer's on the same launches, the format's size, and the report's option."""

from __future__ import annotations

from unittest import mock

import helpers
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")

from helpers.perfetto_read import json_events, perfetto_events, read_slices  # noqa: E402
from helpers.profbuf import small_launch  # noqa: E402
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb  # noqa: E402

from proton_inject.analyze.decode import decode  # noqa: E402
from proton_inject.analyze.report import run_report  # noqa: E402
from proton_inject.errors import UserError  # noqa: E402
from proton_inject.formats import protobuf  # noqa: E402
from proton_inject.formats import trace_perfetto as P  # noqa: E402
from proton_inject.formats.raw import load_raw  # noqa: E402
from proton_inject.formats.traces import trace_bytes, write_trace  # noqa: E402

DATA = helpers.DATA / "h100-triton3.6"


@pytest.fixture(scope="module")
def real():
    out = []
    for n in ("add", "mm"):
        buf, meta = load_raw(DATA / f"profile_scratch_{n}.json")
        out.append(decode(buf, meta))
    return out


def _field(msg, name: str) -> int:
    return msg.DESCRIPTOR.fields_by_name[name].number


def test_field_numbers_are_the_protos():
    assert _field(pb.Trace, "packet") == protobuf.PACKET
    tp = pb.TracePacket
    for name, num in (("timestamp", P._P_TIMESTAMP), ("timestamp_clock_id", P._P_CLOCK_ID),
                      ("trusted_packet_sequence_id", P._P_SEQ), ("track_event", P._P_TRACK_EVENT),
                      ("interned_data", P._P_INTERNED), ("sequence_flags", P._P_FLAGS),
                      ("trace_packet_defaults", P._P_DEFAULTS), ("clock_snapshot", P._P_CLOCKS),
                      ("track_descriptor", P._P_DESCRIPTOR)):
        assert _field(tp, name) == num, name
    for name, num in (("type", P._TE_TYPE), ("name_iid", P._TE_NAME_IID),
                      ("source_location_iid", P._TE_LOC_IID), ("debug_annotations", P._TE_ANNOT),
                      ("track_uuid", P._TE_TRACK)):
        assert _field(pb.TrackEvent, name) == num, name
    assert _field(pb.TrackEventDefaults, "track_uuid") == P._TE_TRACK
    assert pb.TrackEvent.Type.Value("TYPE_SLICE_BEGIN") == P._BEGIN
    assert pb.TrackEvent.Type.Value("TYPE_SLICE_END") == P._END
    assert tp.SequenceFlags.Value("SEQ_INCREMENTAL_STATE_CLEARED") == P._SEQ_INCREMENTAL_STATE_CLEARED
    assert pb.TrackDescriptor.ChildTracksOrdering.Value("EXPLICIT") == P._EXPLICIT
    assert pb.BuiltinClock.Value("BUILTIN_CLOCK_BOOTTIME") == P._BOOTTIME


def test_small_launch_tracks_names_and_args():
    data = trace_bytes(fmt="perfetto", launches=[small_launch()])
    slices, tracks = read_slices(data)
    assert perfetto_events(data) == json_events(trace_bytes([small_launch()]))
    roots = [t for t in tracks.values() if t["parent"] is None]
    assert [t["name"] for t in roots] == ["synth #0"]
    sms = sorted(t["name"] for t in tracks.values() if t["name"].startswith("SM "))
    assert sms == ["SM 0", "SM 1"]
    it = [s for s in slices if s["name"] == "iter"]
    assert {s["loc"] for s in it} == {("k.py", 7, "")}
    assert {s["dur"] for s in it if tracks[s["track"]]["name"] == "warp 1"} == {600}
    fin = [s for s in slices if s["name"] == "finalize"]
    assert len(fin) == 3 and {s["args"]["finalize_ns"] for s in fin} == {320}
    assert {tracks[s["track"]]["name"] for s in fin} == {"warp 0"}
    # few regions a warp: one sequence for the regions and one for the finalize slices, each
    # starting with its incremental state cleared, and every slice packet names its track
    heads, events = _packets(data)
    assert len(heads) == 2 and len({p.trusted_packet_sequence_id for p in heads}) == 2
    assert all(p.track_event.HasField("track_uuid") for p in events)


def _packets(data: bytes) -> tuple[list, list]:
    """A trace's sequence heads and slice packets."""
    trace = pb.Trace()
    trace.ParseFromString(data)
    heads = [p for p in trace.packet if p.sequence_flags & P._SEQ_INCREMENTAL_STATE_CLEARED]
    return heads, [p for p in trace.packet if p.HasField("track_event")]


def test_every_event_equals_the_json_writers(real):
    """Reading back 1 M packets with the protos takes ~10 s: mm once, merged with add."""
    add, mm = real
    for launches in ([add], [mm, add], [small_launch(0), small_launch(1)]):
        got = perfetto_events(trace_bytes(fmt="perfetto", launches=launches))
        want = json_events(trace_bytes(launches))
        assert len(got) == sum(len(d.events) + len(d.ctas.cta) for d in launches)
        assert got == want


def test_native_bytes_are_a_fifth_of_the_json(real):
    """A property of the format on fixed inputs (2026-11-26): add (36,864 regions of 4,096
    warps, one sequence) 0.199, mm (516,096 regions of 8,192 warps, a sequence per warp) 0.189."""
    for d, heads in zip(real, (2, 8192), strict=True):
        data = trace_bytes(fmt="perfetto", launches=[d])
        assert len(data) <= len(trace_bytes([d])) / 5
        # the smaller layout: one sequence (add, 9 regions a warp), one per warp (mm, 63)
        assert len(_packets(data)[0]) == heads


def _nested(draw_spans: list[tuple[int, int, int]]) -> tuple[np.ndarray, ...]:
    """Well nested spans per track from (track, start, length) seeds: each span is cut to fit
    inside the enclosing one it starts in (ties and zero lengths stay)."""
    tr, s, e = [], [], []
    for track in sorted({t for t, _, _ in draw_spans}):
        stack: list[int] = []
        for _, a, n in sorted((x for x in draw_spans if x[0] == track), key=lambda x: (x[1], -x[2])):
            while stack and stack[-1] < a:
                stack.pop()
            b = a + n if not stack else min(a + n, stack[-1])
            tr.append(track), s.append(a), e.append(b)
            stack.append(b)
    return np.array(tr, np.int64), np.array(s, np.int64), np.array(e, np.int64)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 40), st.integers(0, 12)),
                min_size=1, max_size=60))
def test_slice_order_nests_with_ties_and_zero_lengths(seeds):
    tr, s, e = _nested(seeds)
    order, sl, is_end, track, t = P._slice_order(tr, s, e)
    assert len(sl) == 2 * len(s)
    stacks: dict[int, list[int]] = {}
    last: dict[int, int] = {}
    for k, end, trk, time in zip(sl.tolist(), is_end.tolist(), track.tolist(), t.tolist(),
                                  strict=True):
        assert time >= last.get(trk, 0)
        last[trk] = time
        i = int(order[k])
        assert trk == tr[i] and time == (e[i] if end else s[i])
        if end:
            assert stacks[trk].pop() == k
        else:
            stacks.setdefault(trk, []).append(k)
    assert not any(stacks.values())


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 50), max_size=80), st.sampled_from([0, 1 << 58]))
def test_time_order_is_a_stable_sort(times, far):
    """Packed (time, index) sort, and the stable argsort it falls back to past 62 bits."""
    t = np.array(times + ([far] if far else []), np.int64)
    assert P._time_order(t).tolist() == np.argsort(t, kind="stable").tolist()


def test_report_writes_native_traces_by_default(tmp_path):
    res = run_report([DATA / "profile_scratch_add.json"], trace_dir=tmp_path / "a", gz=False)
    assert [p.name for p in res.files] == ["00000-add_kernel.pftrace"]
    # gzipped unless asked not to, as the CLI does (one convention: docs/commands.md#outputs)
    gz = run_report([DATA / "profile_scratch_add.json"], trace_dir=tmp_path / "b")
    assert [p.name for p in gz.files] == ["00000-add_kernel.pftrace.gz"]
    assert gz.files[0].read_bytes()[:2] == b"\x1f\x8b"
    assert perfetto_events(gz.files[0].read_bytes()) == perfetto_events(res.files[0].read_bytes())
    js = run_report([DATA / "profile_scratch_add.json"], trace_dir=tmp_path / "c", trace_format="json",
                    gz=False)
    assert [p.name for p in js.files] == ["00000-add_kernel.json"]
    assert perfetto_events(res.files[0].read_bytes()) == json_events(js.files[0].read_text())
    with pytest.raises(UserError, match="open it at ui.perfetto.dev"):
        run_report(res.files)
    with pytest.raises(UserError, match="--trace-format xml: must be one of perfetto, json"):
        run_report([DATA / "profile_scratch_add.json"], trace_dir=tmp_path / "d", trace_format="xml")


def test_merged_native_trace(tmp_path, real):
    launches = [small_launch(1), real[0]]
    p = write_trace(launches, tmp_path / "m.pftrace.gz", fmt="perfetto")
    got = perfetto_events(p.read_bytes())
    assert {x[0] for x in got} == {0, 1}
    assert got == json_events(trace_bytes(launches))


def _cols(draw, n: int, depth: int) -> list:
    """A message's fields over ``n`` rows, as the trace writer builds them: varint columns
    (negative and 64-bit values too) and scalars, constant bodies, strings from a table,
    sub-messages, each perhaps only in some rows."""
    cols = []
    for field in range(1, draw(st.integers(1, 4)) + 1):
        kind = draw(st.sampled_from(["value", "scalar", "const", "table"] + (["sub"] if depth < 2 else [])))
        rows = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n))) if draw(st.booleans()) else None
        t = protobuf.tag(field, 0 if kind in ("value", "scalar") else 2)
        if kind == "value":
            vals = draw(st.lists(st.integers(-(1 << 63), (1 << 63) - 1), min_size=n, max_size=n))
            cols.append(protobuf.Col(t, value=np.array(vals, np.int64), rows=rows))
        elif kind == "scalar":
            cols.append(protobuf.Col(t, value=draw(st.integers(0, 1 << 40)), rows=rows))
        elif kind == "const":
            cols.append(protobuf.Col(t, const=protobuf.int_field(1, draw(st.integers(0, 300))), rows=rows))
        elif kind == "table":
            table = draw(st.lists(st.binary(max_size=200), min_size=1, max_size=4))
            idx = np.array(draw(st.lists(st.integers(0, len(table) - 1), min_size=n, max_size=n)), np.int64)
            cols.append(protobuf.Col(t, table=table, idx=idx, rows=rows))
        else:
            cols.append(protobuf.Col(t, sub=_cols(draw, n, depth + 1), rows=rows))
    return cols


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_small_messages_encoded_one_by_one_give_the_columns_bytes(data):
    """Up to ROW_BY_ROW messages are encoded one by one: the same bytes, field for field, as
    the column-wise encoder gives for them."""
    n = data.draw(st.integers(1, 12))
    fields = _cols(data.draw, n, 0)
    with mock.patch.object(protobuf, "ROW_BY_ROW", n):
        rows = protobuf.encode_packets(n, fields)
    with mock.patch.object(protobuf, "ROW_BY_ROW", 0):
        columns = protobuf.encode_packets(n, fields)
    assert rows.dtype == columns.dtype == np.uint8
    assert rows.tobytes() == columns.tobytes()
