"""What ``report`` writes never overwrites itself: the ranks of one torchrun job share launch
numbers, and each rank's picture is its own file (they were named by launch and kernel only,
so one rank's overwrote another's with no word); and ``-j`` is capped at the cores this
process may run on, with a note (``-j 1000`` forked 1,000 workers)."""

from __future__ import annotations

import json
import os
import shutil

from helpers import DATA, REPO, load_module
from helpers.cli import invoke

LAUNCH = DATA / "h100-shortlaunch" / "00000-matmul_kernel"


def test_each_rank_of_a_launch_gets_its_own_picture(tmp_path):
    meta = json.loads(LAUNCH.with_suffix(".json").read_text())
    (tmp_path / "raw").mkdir()
    for rank in range(3):
        name = f"rank{rank}-00000-matmul_kernel"
        (tmp_path / "raw" / f"{name}.json").write_text(json.dumps({**meta, "rank": rank,
                                                                   "bin": f"{name}.bin.gz"}))
        shutil.copy(LAUNCH.with_suffix(".bin.gz"), tmp_path / "raw" / f"{name}.bin.gz")
    res = invoke(["report", "raw", "--plot", "p.png", "-j", "1"], cwd=tmp_path, code=0)
    assert sorted(p.name for p in tmp_path.glob("*.png")) == [
        "p.png", "p.rank1-00000-matmul_kernel.png", "p.rank2-00000-matmul_kernel.png"], res.output


def test_jobs_past_the_cores_are_capped_with_a_note(tmp_path):
    run = tmp_path / "run"
    load_module(REPO / "benchmarks" / "report_scale.py", "report_scale").build_run(run, 6, 2, 0.25)
    cores = len(os.sched_getaffinity(0))
    res = invoke(["report", str(run), "-j", "1000"], cwd=tmp_path, code=0)
    assert (f"-j 1000: decoding with {cores} processes, one per core this process may run on"
            in res.stderr)
    quiet = invoke(["report", str(run), "-j", str(cores)], cwd=tmp_path, code=0)
    assert "-j " not in quiet.stderr
