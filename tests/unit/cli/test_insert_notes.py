"""insert's notes are one line each, whole with -v (issue 31, newcomer list), and its progress
is a bar on a terminal only: on a pipe (here) no progress line at all."""

from __future__ import annotations

import shutil

from helpers import REPO
from helpers.cli import run_cli

from proton_inject.formats.diagnostics import MORE

SAMPLE = REPO / "ttgir_samples" / "cuda-90" / "persistent_matmul_kernel.ttgir"


def test_insert_notes_short_unless_verbose(tmp_path):
    (tmp_path / "dump").mkdir()
    for i in range(25):  # enough files that the old hand-written progress lines would print
        shutil.copy(SAMPLE, tmp_path / "dump" / f"k{i}.ttgir")
    short = run_cli(["insert", "dump", "-o", "a"], cwd=tmp_path, code=0)
    full = run_cli(["insert", "dump", "-o", "b", "-v"], cwd=tmp_path, code=0)
    short_notes = [x for x in short.stderr.splitlines() if x.startswith("note: ")]
    full_notes = [x for x in full.stderr.splitlines() if x.startswith("note: ")]
    assert short_notes and all(x.endswith(MORE) for x in short_notes if len(x) > 120)
    assert any(x.endswith(MORE) for x in short_notes)
    assert not any(x.endswith(MORE) for x in full_notes)
    assert sum(map(len, full_notes)) > sum(map(len, short_notes))
    assert "instrumented 20/25" not in short.stderr and "instrumenting" not in short.stderr
