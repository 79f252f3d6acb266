"""An output in use by another process is refused (issue 31: two inserts into one output at
the same time, and the last writer won with no word). A second process holds the output's
lock (formats/files.output_lock, flock on .NAME.lock beside it) while insert, run, profile
and report are asked to write there: each exits 2 with one message naming the output and the
holder's pid, and the output is left as it was; once the holder ends, or is killed, the same
command writes."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import DATA, REPO, SAMPLES
from helpers.cli import CLI, child_env, run_cli

_HOLD = ("import sys\nfrom proton_inject.formats.files import output_lock\n"
         "with output_lock(sys.argv[1], '-o'):\n    print('held', flush=True)\n    sys.stdin.readline()\n")


def _holder(path: Path) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", _HOLD, str(path)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True, env=child_env())
    assert p.stdout.readline() == "held\n"
    return p


@pytest.fixture
def case(tmp_path):
    (tmp_path / "dump").mkdir()
    shutil.copy(SAMPLES / "cuda-90/add_kernel.ttgir", tmp_path / "dump")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "mine.txt").write_text("the other process's file\n")
    shutil.copytree(DATA / "h100-shortlaunch", tmp_path / "launches")
    (tmp_path / "prog.py").write_text("print('ran')\n")
    shutil.copy(REPO / "examples/vector_add.py", tmp_path / "kernel.py")
    return tmp_path


COMMANDS = {
    "insert": ["insert", "dump", "-o", "out"],
    "run": ["run", "dump", "-o", "out", "--", "python", "prog.py"],
    "profile": ["profile", "-o", "out", "--", "python", "prog.py"],
    "report --trace": ["report", "launches", "--trace", "out"],
    "strip": ["strip", "dump", "-o", "out"],
    "dump": ["dump", "-o", "out", "--", "python", "prog.py"],
    "dump AOT": ["dump", "kernel.py:add_kernel", "--target", "cuda:90", "--signature",
                 "x_ptr=*fp32,y_ptr=*fp32,out_ptr=*fp32,n_elements=i32:16",
                 "--constexpr", "BLOCK=1024", "--constexpr", "BLOCKS_PER_PROG=4", "-o", "out"],
}


@pytest.mark.parametrize("name", COMMANDS)
def test_output_held_by_another_process_is_refused(case, name):
    holder = _holder(case / "out")
    try:
        out = run_cli(COMMANDS[name], cwd=case, timeout=300)
    finally:
        holder.communicate("\n", timeout=30)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1] == (
        f"proton-inject: error: {'--trace' if 'report' in name else '-o'} out: in use by another "
        f"proton-inject process (pid {holder.pid}) writing there; wait for it to end or choose "
        "another output path")
    assert sorted(p.name for p in (case / "out").iterdir()) == ["mine.txt"]
    assert not (case / ".out.lock").exists()  # the holder removed it when it let go


def test_once_the_holder_ends_or_is_killed_the_output_is_written(case):
    holder = _holder(case / "tree")
    holder.communicate("\n", timeout=30)
    assert run_cli(["insert", "dump", "-o", "tree"], cwd=case, timeout=300).returncode == 0
    assert (case / "tree" / "manifest.json").is_file()
    holder = _holder(case / "plot.png")
    os.kill(holder.pid, signal.SIGKILL)  # its lock file stays; flock's lock goes with it
    holder.wait(timeout=30)
    assert (case / ".plot.png.lock").exists()
    out = run_cli(["report", "launches/00000-matmul_kernel.json", "--plot", "plot.png"], cwd=case, timeout=300)
    assert out.returncode == 0, out.stderr
    assert (case / "plot.png").is_file() and not (case / ".plot.png.lock").exists()


def test_two_inserts_at_once_one_writes_the_other_is_refused(case):
    """Two real inserts started together: one holds the output, the other is refused or waits
    for nothing (it starts after the first ended); never both writing at once."""
    runs = [subprocess.Popen([*CLI, "insert", "dump", "-o", "tree"],
                             cwd=case, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=child_env()) for _ in range(2)]
    results = [(r.wait(timeout=300), r.stderr.read()) for r in runs]
    assert all(code == 0 or (code == 2 and "in use by another proton-inject process" in err)
               for code, err in results), results
    assert any(code == 0 for code, _ in results)
    assert (case / "tree" / "manifest.json").is_file()


@pytest.mark.parametrize("planted", ["link", "fifo"])
def test_a_lock_planted_as_a_link_or_fifo_is_never_followed(case, planted):
    """``.out.lock`` made a link to another file (or a FIFO) by someone else: the command is
    refused in one line and the file it names is neither created nor truncated."""
    victim = case / "victim.txt"
    victim.write_text("keep me\n")
    lock = case / ".out.lock"
    os.symlink(victim, lock) if planted == "link" else os.mkfifo(lock)
    out = run_cli(["insert", "dump", "-o", "out"], cwd=case, timeout=300)
    assert out.returncode == 2, out.stderr
    what = "is a symbolic link, not ours" if planted == "link" else "is not a regular file"
    assert out.stderr.strip().splitlines()[-1] == (
        f"proton-inject: error: -o out: its lock .out.lock {what}; remove it (or choose another "
        "output path)")
    assert victim.read_text() == "keep me\n"
    assert sorted(p.name for p in (case / "out").iterdir()) == ["mine.txt"]
