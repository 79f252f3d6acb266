"""Chrome trace writer: golden output, structure Perfetto relies on, number formatting."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from helpers import DATA
from helpers.profbuf import small_launch
from hypothesis import given, settings
from hypothesis import strategies as st

from proton_inject.analyze.decode import decode
from proton_inject.formats.raw import load_raw
from proton_inject.formats.trace_json import _Rows, read_trace
from proton_inject.formats.traces import trace_bytes, write_trace, write_traces

GOLDEN = DATA / "golden" / "small_trace.json"


def test_golden_small_trace():
    got = trace_bytes([small_launch()])
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_bytes(got)
    assert got == GOLDEN.read_bytes()


def test_small_trace_structure():
    doc = json.loads(trace_bytes([small_launch()]))
    evs = doc["traceEvents"]
    regions = [e for e in evs if e["ph"] == "X" and e["name"] != "finalize"]
    assert len(regions) == 3 * 2 * 3
    fin = [e for e in evs if e["name"] == "finalize"]
    assert len(fin) == 3 and {e["args"]["finalize_ns"] for e in fin} == {320}
    it = [e for e in regions if e["name"] == "iter" and e["args"]["warp"] == 1]
    assert {e["args"]["cycles"] for e in it} == {750}
    assert {e["dur"] for e in it} == {0.6}  # 750 cycles at 1.25 GHz
    assert all(e["args"]["loc"] == "k.py:7" for e in it)
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in evs if e["name"] == "thread_name"}
    assert names[(1, 1)] == "CTA 0 warp 0" and names[(2, 4)] == "CTA 1 warp 1"
    procs = {e["pid"]: e["args"]["name"] for e in evs if e["name"] == "process_name"}
    assert procs == {1: "SM 0", 2: "SM 1"}
    launch = doc["otherData"]["launches"][0]
    assert launch["clock"]["source"] == "--clock-mhz" and launch["events"] == 18


def _check_nesting(regions: list[dict]) -> None:
    """On each thread, any two slices are disjoint or one contains the other."""
    by_tid: dict = {}
    for e in regions:
        by_tid.setdefault((e["pid"], e["tid"]), []).append((round(e["ts"] * 1000),
                                                            round((e["ts"] + e["dur"]) * 1000)))
    for spans in by_tid.values():
        stack: list[int] = []
        for s, t in sorted(spans, key=lambda x: (x[0], -x[1])):
            while stack and stack[-1] <= s:
                stack.pop()
            assert not stack or t <= stack[-1], "partially overlapping slices"
            stack.append(t)


@pytest.fixture(scope="module")
def fixtures_decoded():
    out = []
    for n in ("add", "mm"):
        buf, meta = load_raw(DATA / "h100-triton3.6" / f"profile_scratch_{n}.json")
        out.append(decode(buf, meta))
    return out


def test_real_trace_files(tmp_path, fixtures_decoded):
    add, mm = fixtures_decoded
    paths = write_traces([add, mm], tmp_path, gz=False)
    assert [p.name for p in paths] == ["00000-add_kernel.json", "00001-mm_kernel.json"]
    doc = read_trace(paths[0])
    evs = doc["traceEvents"]
    regions = [e for e in evs if e["ph"] == "X" and e["name"] != "finalize"]
    assert len(regions) == 36864
    assert sum(e["name"] == "finalize" for e in evs) == 1024
    assert sum(e["name"] == "thread_name" for e in evs) == 4096
    _check_nesting(regions + [e for e in evs if e["name"] == "finalize"])
    for e in regions[:50]:
        assert set(e["args"]) == {"scope", "loc", "cycles", "cta", "warp", "sm"}
        assert e["pid"] == e["args"]["sm"] + 1
    # compact: well under Proton's 256 bytes per event
    assert paths[1].stat().st_size / len(mm.events) < 200


def test_gzip_and_merge(tmp_path, fixtures_decoded):
    add, mm = fixtures_decoded
    p = write_trace(add, tmp_path / "a.json.gz")
    assert p.read_bytes()[:2] == b"\x1f\x8b"
    assert len(read_trace(p)["traceEvents"]) > 36864
    merged = write_traces([small_launch(0), small_launch(1)], tmp_path, merge=True)
    doc = read_trace(merged[0])
    launches = doc["otherData"]["launches"]
    assert [x["launch"] for x in launches] == [0, 1]
    assert launches[1]["pid_base"] == 3  # two SMs per launch, each launch its own processes
    procs = sorted(e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name")
    assert procs == ["synth #0 SM 0", "synth #0 SM 1", "synth #1 SM 0", "synth #1 SM 1"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-(10**15), 10**15), min_size=1, max_size=50))
def test_number_columns_match_python(values):
    v = np.array(values, np.int64)
    r = _Rows(len(v))
    r.const("[")
    r.num(v)
    r.const(",")
    r.fixed3(v)
    r.const("],")
    text = "[" + bytes(r.build()).decode().rstrip(",") + "]"
    got = json.loads(text)
    assert [a for a, _ in got] == values
    assert [round(b * 1000) for _, b in got] == values
