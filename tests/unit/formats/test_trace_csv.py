"""The CSV table of regions: a row per region instance, the same as the JSON trace's events."""

from __future__ import annotations

import csv
import dataclasses
import gzip
import io
import json

import helpers
from helpers.cli import invoke
from helpers.profbuf import small_launch

from proton_inject.analyze.decode import decode
from proton_inject.formats.raw import load_raw
from proton_inject.formats.trace_csv import COLUMNS
from proton_inject.formats.traces import trace_bytes


def _rows(data: bytes) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(data.decode())))


def _json_regions(data: bytes) -> list[tuple]:
    evs = json.loads(data)["traceEvents"]
    return sorted((e["args"]["scope"], e["args"]["sm"], e["args"]["cta"], e["args"]["warp"],
                   round(e["ts"] * 1000), round(e["dur"] * 1000), e["args"]["cycles"])
                  for e in evs if e["ph"] == "X" and e["name"] != "finalize")


def _csv_regions(rows: list[dict[str, str]]) -> list[tuple]:
    return sorted(tuple(int(r[k]) for k in ("scope", "sm", "cta", "warp", "start_ns", "dur_ns", "cycles"))
                  for r in rows)


def test_rows_are_the_json_traces_regions():
    launches = [small_launch(0), small_launch(1)]
    for group in ([launches[0]], launches):
        data = trace_bytes(group, fmt="csv")
        assert data.decode().splitlines()[0] == ",".join(COLUMNS)
        rows = _rows(data)
        assert _csv_regions(rows) == _json_regions(trace_bytes(group, fmt="json"))
        assert {r["launch"] for r in rows} == {str(d.meta.launch) for d in group}
        assert all(int(r["end_ns"]) - int(r["start_ns"]) == int(r["dur_ns"]) for r in rows)
    assert {(r["region"], r["loc"]) for r in _rows(trace_bytes(launches[:1], fmt="csv"))} == {
        ("kernel", "k.py:3"), ("iter", "k.py:7")}


def test_a_region_name_with_a_comma_and_quotes_reads_back():
    d = small_launch()
    meta = dataclasses.replace(d.meta, scopes={0: 'kernel "main", all', 1: "iter"})
    d = dataclasses.replace(d, meta=meta)
    assert {r["region"] for r in _rows(trace_bytes([d], fmt="csv"))} == {'kernel "main", all', "iter"}


def test_report_writes_the_table(tmp_path):
    data = helpers.DATA / "h100-direct-loops"
    invoke(["report", data, "--trace", tmp_path, "--trace-format", "csv", "-j", "1"], code=0)
    [path] = tmp_path.iterdir()
    assert path.name == "00000-layernorm_fwd_kernel.csv.gz"
    rows = _rows(gzip.decompress(path.read_bytes()))
    d = decode(*load_raw(data / "00000-layernorm_fwd_kernel.json"))
    assert len(rows) == len(d.events) > 0
    assert _csv_regions(rows) == _json_regions(trace_bytes([d], fmt="json"))
    assert {r["kernel"] for r in rows} == {"layernorm_fwd_kernel"} and {r["rank"] for r in rows} == {""}
