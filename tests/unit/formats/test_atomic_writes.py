"""kill -9 during writes: the output is the old or the new one, and the next run leaves no debris.

The CLI runs in a subprocess that SIGKILLs itself at a named point of fsutil
(PROTON_INJECT_TEST_KILL_AT), or is killed from outside at random times.
"""

from __future__ import annotations

import random
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from helpers import DATA, REPO
from helpers.cli import CLI, child_env, run_cli

from proton_inject.formats.files import recover_tree, replace_tree

SAMPLES = REPO / "ttgir_samples/cuda-90"


def cli(cwd: Path, *args: str, kill_at: str | None = None, no_exchange: bool = False,
        popen: bool = False):
    """The CLI in a child (it may be killed), told where to SIGKILL itself if ``kill_at``."""
    env = child_env()
    env.pop("PROTON_INJECT_TEST_KILL_AT", None)
    if kill_at:
        env["PROTON_INJECT_TEST_KILL_AT"] = kill_at
    if no_exchange:
        env["PROTON_INJECT_TEST_NO_EXCHANGE"] = "1"
    if popen:
        return subprocess.Popen([*CLI, *args], cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    return run_cli(args, cwd=cwd, env=env)


def snapshot(root: Path) -> dict[str, bytes] | None:
    if not root.exists():
        return None
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


def debris(parent: Path) -> list[str]:
    """Temp trees and files our writers leave beside their outputs when killed."""
    return sorted(p.name for p in parent.rglob(".*"))


@pytest.fixture(scope="module")
def _base(tmp_path_factory):
    """A dump of two kernels, and `out` = its kernel-scope-only instrumentation (the old tree)."""
    root = tmp_path_factory.mktemp("base")
    for name in ("add_kernel", "matmul_kernel"):
        d = root / "dump" / name
        d.mkdir(parents=True)
        shutil.copy(SAMPLES / f"{name}.ttgir", d)
    r = cli(root, "insert", "dump", "-o", "out", "--kernel-scope")
    assert r.returncode == 0, r.stderr
    old = snapshot(root / "out")
    r = cli(root, "insert", "dump", "-o", "new", "--loops", "both")
    assert r.returncode == 0, r.stderr
    new = snapshot(root / "new")
    shutil.rmtree(root / "new")
    assert old != new
    return root, old, new


@pytest.fixture
def work(_base, tmp_path):
    root, old, new = _base
    shutil.copytree(root, tmp_path / "w")
    return tmp_path / "w", old, new


POINTS = [("tree-written", False), ("tree-swapped", False), ("tree-written", True),
          ("between-renames", True), ("tree-swapped", True)]


@pytest.mark.parametrize("point,no_exchange", POINTS)
def test_insert_killed_at_each_point(work, point, no_exchange):
    root, old, new = work
    r = cli(root, "insert", "dump", "-o", "out", "--loops", "both", kill_at=point,
            no_exchange=no_exchange)
    assert r.returncode == -signal.SIGKILL
    assert debris(root)  # the killed run could not clean up ...
    got = snapshot(root / "out")
    if no_exchange and point == "between-renames":
        # Two renames: killed between them, `out` is away; the next run puts the old tree back.
        assert got is None
        recover_tree(root / "out")
        got = snapshot(root / "out")
    assert got == (new if point == "tree-swapped" else old)
    r = cli(root, "insert", "dump", "-o", "out", "--loops", "both")
    assert r.returncode == 0, r.stderr
    assert snapshot(root / "out") == new
    assert debris(root) == []  # ... the next one did


def test_insert_killed_while_probing_its_output_leaves_the_old_tree(work):
    """The writability probe goes where the tree is built (beside it, not in it), and the next
    run removes a probe a killed one left."""
    root, old, new = work
    r = cli(root, "insert", "dump", "-o", "out", "--loops", "both", kill_at="output-probed")
    assert r.returncode == -signal.SIGKILL
    assert snapshot(root / "out") == old
    assert [n.split(".tmp-")[0] for n in debris(root)] == [".proton-inject-probe"]
    assert cli(root, "insert", "dump", "-o", "out", "--loops", "both").returncode == 0
    assert snapshot(root / "out") == new and debris(root) == []


def test_insert_killed_at_random_times(work):
    root, old, new = work
    rng = random.Random(13)
    t0 = time.monotonic()
    assert cli(root, "insert", "dump", "-o", "probe", "--loops", "both").returncode == 0
    span = time.monotonic() - t0
    shutil.rmtree(root / "probe")
    outcomes = set()
    for _ in range(4):
        p = cli(root, "insert", "dump", "-o", "out", "--loops", "both", popen=True)
        time.sleep(rng.uniform(0, span))
        p.send_signal(signal.SIGKILL)
        p.wait()
        got = snapshot(root / "out")
        assert got in (old, new)
        outcomes.add(got == new)
        # Back to the old tree for the next try (that run also cleans what this one left).
        assert cli(root, "insert", "dump", "-o", "out", "--kernel-scope").returncode == 0
        assert snapshot(root / "out") == old and debris(root) == []
    print(f"random kills over {span:.2f} s: outcomes old/new seen: {sorted(outcomes)}")


def test_strip_tree_killed_keeps_old_tree(work):
    root, old, _ = work
    assert cli(root, "strip", "out", "-o", "stripped").returncode == 0
    before = snapshot(root / "stripped")
    (root / "out" / "add_kernel" / "add_kernel.ttgir").unlink()
    r = cli(root, "strip", "out", "-o", "stripped", kill_at="tree-written")
    assert r.returncode == -signal.SIGKILL
    assert snapshot(root / "stripped") == before
    assert cli(root, "strip", "out", "-o", "stripped").returncode == 0
    assert sorted(snapshot(root / "stripped")) == ["matmul_kernel/matmul_kernel.ttgir"]
    assert debris(root) == []


def test_file_writes_killed_leave_old_file_and_next_run_cleans(tmp_path):
    shutil.copy(SAMPLES / "add_kernel.ttgir", tmp_path / "a.ttgir")
    assert cli(tmp_path, "insert", "a.ttgir", "-o", "o.ttgir", "--kernel-scope").returncode == 0
    old = (tmp_path / "o.ttgir").read_bytes()
    r = cli(tmp_path, "insert", "a.ttgir", "-o", "o.ttgir", "--loops", "both",
            kill_at="file-written")
    assert r.returncode == -signal.SIGKILL
    assert (tmp_path / "o.ttgir").read_bytes() == old
    assert debris(tmp_path)
    assert cli(tmp_path, "insert", "a.ttgir", "-o", "o.ttgir", "--loops", "both").returncode == 0
    assert (tmp_path / "o.ttgir").read_bytes() != old
    assert debris(tmp_path) == []


def test_report_trace_killed_leaves_no_tmp_after_next_run(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    for f in (DATA / "h100-shortlaunch").glob("00000-*"):
        shutil.copy(f, raw)
    r = cli(tmp_path, "report", "raw", "--trace", "t", kill_at="file-written")
    assert r.returncode == -signal.SIGKILL
    assert debris(tmp_path / "t") and not list((tmp_path / "t").glob("0*.pftrace*"))
    r = cli(tmp_path, "report", "raw", "--trace", "t")
    assert r.returncode == 0, r.stderr
    assert [p.name for p in (tmp_path / "t").iterdir()] == ["00000-matmul_kernel.pftrace.gz"]


def test_replace_tree_error_keeps_old_tree(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "f").write_text("old")

    def build(tmp: Path) -> None:
        (tmp / "f").write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        replace_tree(out, build)
    assert (out / "f").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
