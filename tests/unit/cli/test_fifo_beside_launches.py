"""A FIFO never stops a command (issue 31): one named like a launch's metadata among real
launches in raw/ is left out with a note, as a damaged launch is, and the others are reported;
a kernel source that an IR location names and that is a FIFO is not read (its marks are not
either). Each command runs in a child process under a timeout: opening a FIFO for reading
with no writer blocks forever, so a hang fails the test instead of stalling it."""

from __future__ import annotations

import os
import shutil

from helpers import DATA, SAMPLES
from helpers.cli import run_cli

from proton_inject.formats.diagnostics import headline


def test_fifo_named_like_a_launch_is_left_out_with_a_note(tmp_path):
    raw = tmp_path / "run" / "raw"
    raw.mkdir(parents=True)
    for f in (DATA / "h100-shortlaunch").glob("0000*"):
        shutil.copy(f, raw)
    os.mkfifo(raw / "00002-matmul_kernel.json")
    for extra in ([], ["--json"], ["--trace", str(tmp_path / "traces")]):
        out = run_cli(["report", "run", *extra], cwd=tmp_path, timeout=300)
        assert out.returncode == 0, out.stderr
        notes = [ln for ln in out.stderr.splitlines() if "00002" in ln]
        assert notes == ["proton-inject: warning: " + headline(
            "left out: run/raw/00002-matmul_kernel.json: is a named pipe (FIFO), not a regular "
            "file; give the launch metadata file")]
        assert out.stdout.count("matmul_kernel") >= 2  # both real launches reported


def test_fifo_as_the_kernel_source_is_not_read(tmp_path):
    (tmp_path / "examples").mkdir()
    os.mkfifo(tmp_path / "examples" / "matmul.py")  # where the IR's locations point
    shutil.copy(SAMPLES / "cuda-90" / "matmul_kernel.ttgir", tmp_path)
    out = run_cli(["inspect", "matmul_kernel.ttgir"], cwd=tmp_path, timeout=300)
    assert out.returncode == 0 and "loop acc @matmul.py:36" in out.stdout, out.stderr
    out = run_cli(["insert", "matmul_kernel.ttgir", "-o", "inst.ttgir"], cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "examples/matmul.py is not a regular file" in out.stderr and "marks are not read" in out.stderr
    assert (tmp_path / "inst.ttgir").read_text().count("proton.record start") == 2  # no marks
