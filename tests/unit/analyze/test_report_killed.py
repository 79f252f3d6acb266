"""``report -j 2`` killed from outside (``kill``, ``Popen.kill()``, a ``subprocess.run``
timeout, the OOM killer): its worker processes end with it. They held its stdout and stderr, so
a caller reading them (``communicate()``, ``x=$(proton-inject report ...)``) waited for ever.

The run is written by the runtime's own writers (benchmarks/report_scale.py) from the real
H100 buffers of tests/data/h100-triton3.6.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import REPO, load_module
from helpers.cli import child_env


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("killed") / "run"
    load_module(REPO / "benchmarks" / "report_scale.py", "report_scale").build_run(out, 400, 4, 0.25)
    return out


def _children(pid: int) -> list[int]:
    kids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                status = Path(f"/proc/{d}/status").read_text()
            except OSError:
                continue
            if f"\nPPid:\t{pid}\n" in status:
                kids.append(int(d))
    return kids


def _alive(pid: int) -> bool:
    """Running (a zombie left to a parent that does not reap it has ended)."""
    try:
        return "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_workers_end_with_the_report_however_it_is_killed(run_dir, tmp_path, sig):
    p = subprocess.Popen([sys.executable, "-m", "proton_inject.cli", "report", str(run_dir),
                          "-j", "2", "--trace", str(tmp_path / "t")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env())
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 120
        while len(workers) < 2 and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
            workers = _children(p.pid)
        assert len(workers) >= 2, f"no workers seen (report exited {p.poll()})"
        p.send_signal(sig)
        p.communicate(timeout=20)  # the pipes close: nothing else holds them
        gone_by = time.monotonic() + 5
        while any(_alive(w) for w in workers) and time.monotonic() < gone_by:
            time.sleep(0.05)
        assert not [w for w in workers if _alive(w)]
    finally:  # (never leave them behind, whatever the outcome)
        if p.poll() is None:
            p.kill()
        for w in workers:
            if _alive(w):
                os.kill(w, signal.SIGKILL)
