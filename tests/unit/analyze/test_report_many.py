"""`report` on a run of hundreds of launches: every launch in the table and the traces (decoded
by worker processes), no progress bar on a pipe, --launches selection.

The run directory is written by the runtime's own writers (benchmarks/report_scale.py's
``build_run``) from the real H100 buffers, cut to 8 CTAs a launch: 90% add_kernel, 10%
mm_kernel.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import helpers
import pytest
from helpers import load_module
from helpers.cli import invoke

from proton_inject.analyze import report
from proton_inject.formats.diagnostics import headline
from proton_inject.formats.trace_json import read_trace

ROOT = helpers.REPO
N = 300
CTAS = 8
# Regions a launch holds: add 4 warps x 9 (kernel + 8 iterations); mm 8 warps x 63 (its
# buffer wrapped: 64 of 65 regions a warp, the oldest iteration lost, the kernel region cut).
PER_LAUNCH = {"add_kernel": CTAS * 4 * 9, "mm_kernel": CTAS * 8 * 63}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    mod = load_module(ROOT / "benchmarks" / "report_scale.py", "report_scale")
    out = tmp_path_factory.mktemp("many") / "run"
    mod.build_run(out, N, CTAS, 0.1)
    return out


def _kernel_of(seq: int) -> str:
    return "mm_kernel" if seq % 10 == 9 else "add_kernel"


def test_every_launch_in_table_and_merged_trace(run_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(report, "TRACE_WARN_BYTES", 2**20)  # "too big for Perfetto" at 1 MiB
    res = invoke(["report", str(run_dir), "--json", "--trace",
                  str(tmp_path / "tr"), "--merge", "--gz",
                  "--trace-format", "json", "-j", "2"], code=0)
    summary = json.loads(res.stdout)  # stdout is the JSON alone: no progress there
    by = {k["kernel"]: k for k in summary["kernels"]}
    for name, k in by.items():
        assert k["launches"] == [s for s in range(N) if _kernel_of(s) == name]
        assert k["events"] == len(k["launches"]) * PER_LAUNCH[name]
        assert sum(r["count"] for r in k["regions"]) == k["events"]
        assert k["ctas"] == len(k["launches"]) * CTAS
    assert set(by) == set(PER_LAUNCH)
    lines = res.stderr.splitlines()
    assert "decoding" not in res.stderr and "\r" not in res.stderr  # no bar on a pipe

    (merged,) = (tmp_path / "tr").iterdir()
    assert merged.name == "merged.json.gz"
    json_mib = len(gzip.decompress(merged.read_bytes())) / 2**20
    big = [x for x in lines if "of JSON" in x]
    assert big == ["proton-inject: warning: " + headline(  # (whole with -v)
        f"{merged}: {json_mib:,.0f} MiB of JSON ("
        f"{sum(k['events'] for k in summary['kernels']):,} regions), more than "
        "Perfetto's UI handles well (it parses traces in the browser's memory, ~2 GB): "
        "select launches with --launches (e.g. --launches 0-99) or drop --merge (a "
        "file per launch), or open it with `trace_processor --httpd FILE` and "
        "ui.perfetto.dev (perfetto.dev/docs/visualization/large-traces)")]
    doc = read_trace(merged)
    infos = doc["otherData"]["launches"]
    assert [i["launch"] for i in infos] == list(range(N))
    assert [i["events"] for i in infos] == [PER_LAUNCH[_kernel_of(s)] for s in range(N)]
    ev = doc["traceEvents"]
    regions = sum(e["ph"] == "X" and e["name"] != "finalize" for e in ev)
    assert regions == sum(k["events"] for k in summary["kernels"])
    assert sum(e["name"] == "finalize" for e in ev) == N * CTAS
    assert min(e["ts"] for e in ev if e["ph"] == "X") >= 0
    # Each launch's SMs are processes of their own, labelled with the launch.
    procs = [(e["pid"], e["args"]["name"]) for e in ev if e["name"] == "process_name"]
    assert len({p for p, _ in procs}) == len(procs)
    assert {n.split(" SM ")[0] for _, n in procs} == {f"{_kernel_of(s)} #{s}" for s in range(N)}

def test_launch_selection_and_trace_per_launch(run_dir, tmp_path):
    res = report.run_report([run_dir], trace_dir=tmp_path, launches="5-14,299",
                            trace_format="json", gz=False)
    assert res.summary["kernels"][0]["launches"] == [5, 6, 7, 8, 10, 11, 12, 13, 14]
    assert res.summary["kernels"][1]["launches"] == [9, 299]
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted(f"{s:05d}-{_kernel_of(s)}.json" for s in [*range(5, 15), 299])
    # A trace of its own per launch, read back: the same numbers as from the raw buffers.
    again = report.run_report(res.files, launches="9")
    mm = again.summary["kernels"][0]
    assert (mm["kernel"], mm["launches"], mm["events"]) == ("mm_kernel", [9], PER_LAUNCH["mm_kernel"])


@pytest.mark.parametrize("spec", ["x", "5-2", "1,,2"])
def test_bad_launch_selection(run_dir, spec):
    res = invoke(["report", str(run_dir), "--launches", spec])
    assert res.exit_code == 2 and "--launches" in res.stderr and "Traceback" not in res.stderr


def test_selection_that_matches_nothing(run_dir):
    res = invoke(["report", str(run_dir), "--launches", "5000-"])
    assert res.exit_code == 2 and "no launches numbered 5000-" in res.stderr


def test_merged_trace_when_a_later_launch_started_first(run_dir, tmp_path):
    """Launch numbers out of time order (several streams or ranks): the merged trace is
    written again from the earliest launch, so no timestamp is negative."""
    raw = tmp_path / "run" / "raw"
    raw.mkdir(parents=True)
    for seq, number in ((0, 7), (1, 1), (2, 2)):  # the earliest launch gets the last number
        for ext in (".json", ".bin.gz"):
            src = run_dir / "raw" / f"{seq:05d}-add_kernel{ext}"
            data = src.read_bytes()
            if ext == ".json":
                data = data.replace(b'"launch": %d,' % seq, b'"launch": %d,' % number)
            (raw / src.name).write_bytes(data)
    res = report.run_report([tmp_path / "run"], trace_dir=tmp_path / "tr", merge=True,
                            trace_format="json")
    doc = read_trace(res.files[0])
    assert [i["launch"] for i in doc["otherData"]["launches"]] == [1, 2, 7]
    ts = [e["ts"] for e in doc["traceEvents"] if e["ph"] == "X"]
    assert min(ts) == 0 and len(ts) == 3 * (PER_LAUNCH["add_kernel"] + CTAS)
    zero = [i["time_zero_ns"] for i in doc["otherData"]["launches"]]
    assert zero[2] < zero[0] < zero[1]  # launch 7 ran first


def test_end_of_run_analysis_decodes_each_launch_once(tmp_path):
    """After the program ends, each kept launch is decoded once (by two worker processes)
    into its trace and the summary."""
    from proton_inject.api import analyze_run

    mod = load_module(ROOT / "benchmarks" / "report_scale.py", "report_scale")
    session = mod.build_run(tmp_path, 30, 2, 0.1)
    rep = analyze_run(session.result, gz=False, jobs=2)
    assert len(list(tmp_path.glob("0*.pftrace"))) == 30  # native traces by default
    assert sum(len(k["launches"]) for k in rep.summary["kernels"]) == 30
