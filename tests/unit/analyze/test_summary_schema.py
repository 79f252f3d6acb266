"""The summary's declared keys (analyze/summary_schema.py) are the keys report --json prints."""

from __future__ import annotations

import json

import pytest
from helpers.bundled_outputs import DATASETS, EXPECTED

from proton_inject.analyze import summary_schema as schema


def _check(d: dict, td, where: str) -> None:
    keys = set(d)
    assert td.__required_keys__ <= keys, f"{where}: missing {td.__required_keys__ - keys}"
    assert keys <= td.__required_keys__ | td.__optional_keys__, \
        f"{where}: not declared in summary_schema.py: {keys - td.__required_keys__ - td.__optional_keys__}"


@pytest.mark.parametrize("dataset", DATASETS)
def test_report_json_has_the_declared_keys(dataset):
    text = (EXPECTED / dataset / "report.json").read_text().split("--- stderr")[0]
    doc = json.loads(text)
    _check(doc, schema.ReportSummary, "report")
    for k in doc["kernels"]:
        _check(k, schema.KernelSummary, k["kernel"])
        _check(k["clock"], schema.KernelClock, "clock")
        _check(k["drops"], schema.Drops, "drops")
        _check(k["sampled"], schema.Sampled, "sampled")
        for g in k["clock"]["groups"]:
            _check(g, schema.ClockGroup, "clock group")
        for r in k["regions"]:
            _check(r, schema.RegionRow, r["name"])
            _check(r["cycles"], schema.Stats, "cycles")
            _check(r["uncertainty"], schema.RegionUncertainty, "uncertainty")


def test_a_runs_launch_counts_are_declared(tmp_path):
    import shutil

    from helpers import DATA

    from proton_inject.analyze.report import run_report
    from proton_inject.formats.run_index import RUN_FORMAT

    raw = tmp_path / "run" / "raw"
    raw.mkdir(parents=True)
    for f in sorted((DATA / "h100-shortlaunch").glob("*-matmul_kernel.*")):
        shutil.copy(f, raw)
    (tmp_path / "run" / "run.json").write_text(json.dumps({
        "version": 1, "format": RUN_FORMAT, "launch_counts": {"matmul_kernel": 9},
        "launches": [{"kernel": "matmul_kernel", "tuning": False}] * 2}))
    summary = run_report([tmp_path / "run"], jobs=1).summary
    assert "launch_counts" in summary
    _check(summary, schema.ReportSummary, "report")
