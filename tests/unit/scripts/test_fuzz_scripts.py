"""The fuzz scripts (scripts/fuzz_parser.py, fuzz_decoder.py) run for a few seconds in CI: they
must finish, find no crash or hang on today's code, and print the summary docs/fuzzing.md
quotes. Their runner must count a case that blocks as a hang and go on."""

from __future__ import annotations

import json
import os

import pytest
from helpers import REPO
from helpers.cli import run_python
from helpers.mutants import run_fuzz
from hypothesis import strategies as st


@pytest.mark.parametrize("script", ["fuzz_parser.py", "fuzz_decoder.py"])
def test_fuzz_script_runs_a_few_seconds_clean(script, tmp_path):
    out = run_python([REPO / "scripts" / script, "--seconds", "3", "--seed", "0", "--json",
                      "--save", tmp_path / "saved"], cwd=tmp_path, code=0, timeout=300)
    res = json.loads(out.stdout)
    assert res["cases"] >= 1 and res["rate"] > 0
    assert res["crashes"] == {} and res["hangs"] == []
    assert sum(res["outcomes"].values()) == res["cases"]
    assert not (tmp_path / "saved").exists()  # nothing to reproduce


def test_runner_counts_a_blocking_case_as_a_hang_and_goes_on(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)

    def check(case):
        if case == 1:
            fifo.read_bytes()  # opening a FIFO with no writer blocks
        if case == 2:
            raise KeyError(case)
        return "ok"

    res = run_fuzz(lambda draw: draw(st.integers(0, 2)), check,
                   lambda case, folder: folder.mkdir(parents=True), cases=30, timeout=0.2,
                   seed=0, save_dir=tmp_path / "saved")
    assert res["hangs"] and res["outcomes"]["ok"] > 0
    [bucket] = res["crashes"]  # one bucket: the exception and where it was raised
    assert bucket.startswith("KeyError at scripts/test_fuzz_scripts.py:")
    saved = sorted(p.name for p in (tmp_path / "saved").iterdir())
    assert "crash-1" in saved and "hang-1" in saved
