"""Who launched it: the program's own frame, carried in the launch metadata to the report."""

from __future__ import annotations

import json
import shutil

from helpers import REPO

from proton_inject.analyze.report import run_report
from proton_inject.collect.call_site import call_site


def _from_here() -> str | None:
    return call_site()


def test_call_site_names_the_programs_frame_not_a_librarys():
    site = _from_here()
    assert site is not None and site.endswith("(_from_here)"), site
    assert "test_call_site.py:" in site
    # Through the standard library (functools), the program's frame is still the one found.
    import functools

    assert functools.partial(_from_here)().endswith("(_from_here)")


def test_report_groups_kept_launches_by_who_launched_them(tmp_path):
    src = REPO / "tests" / "data" / "h100-shortlaunch"
    for i, f in enumerate(sorted(src.glob("*-matmul_kernel.json"))):
        shutil.copy(f.with_name(f.name.replace(".json", ".bin.gz")), tmp_path)
        meta = json.loads(f.read_text())
        meta["launched_from"] = "train.py:12 (step)" if i == 0 else "train.py:40 (evaluate)"
        (tmp_path / f.name).write_text(json.dumps(meta))
    rep = run_report([tmp_path], jobs=1)
    assert rep.summary["launched_from"] == {"matmul_kernel": {"train.py:12 (step)": 1,
                                                               "train.py:40 (evaluate)": 1}}
    assert "  matmul_kernel: train.py:12 (step) x1" in rep.text
    # Launches recorded without it: no such section (older runs read as before).
    plain = run_report([src], jobs=1)
    assert "launched_from" not in plain.summary and "launched from" not in plain.text
