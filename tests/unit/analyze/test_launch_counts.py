"""The report says how many launches of each kernel ran and how many it holds (run.json)."""

from __future__ import annotations

import json
import shutil

from helpers import REPO

from proton_inject.analyze.report import run_report
from proton_inject.formats.run_index import RUN_FORMAT


def test_report_reads_the_runs_launch_counts(tmp_path):
    src = REPO / "tests" / "data" / "h100-shortlaunch"
    raw = tmp_path / "run" / "raw"
    raw.mkdir(parents=True)
    metas = sorted(src.glob("*-matmul_kernel.json"))
    for f in metas:
        shutil.copy(f, raw)
        shutil.copy(f.with_name(f.name.replace(".json", ".bin.gz")), raw)
    index = {"version": 1, "format": RUN_FORMAT, "launch_counts": {"matmul_kernel": 12345},
             "launches": [{"kernel": "matmul_kernel", "tuning": False} for _ in metas]}
    (tmp_path / "run" / "run.json").write_text(json.dumps(index))
    rep = run_report([tmp_path / "run"], jobs=1)
    assert rep.summary["launch_counts"] == {"matmul_kernel": {"ran": 12345, "kept": len(metas)}}
    assert f"  matmul_kernel: 12,345 ran, {len(metas)} kept" in rep.text
    # A run directory from before launches were counted: no such lines.
    (tmp_path / "run" / "run.json").write_text(json.dumps({**index, "launch_counts": None}))
    assert "launch_counts" not in run_report([tmp_path / "run"], jobs=1).summary
