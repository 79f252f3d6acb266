"""Run one bad-input case in a fresh directory and judge it (used by the test and tally.py)."""

from __future__ import annotations

import hashlib
import os
import signal
import stat
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

from cases import Case, Special

# tests/ on the path for tally.py, which runs outside pytest
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers.cli import invoke  # noqa: E402
from helpers.limits import memory_limit  # noqa: E402

# Each case must end within seconds (a FIFO read would block forever) and within a couple of
# GiB more memory (/dev/zero, a gzip bomb) than the process has: past either, it fails.
TIMEOUT_S = 10
MEMORY = 2 * 2**30


@dataclass
class Outcome:
    exit_code: int | None
    stderr: str
    traceback: str | None  # set when the command raised instead of exiting cleanly
    modified: list[str]  # files changed, created or removed in the case directory

    def problems(self, case: Case) -> list[str]:
        out = []
        if self.traceback:
            out.append(f"traceback:\n{self.traceback}")
        if self.modified:
            out.append(f"modified: {self.modified}")
        if self.exit_code != 2:
            out.append(f"exit code {self.exit_code}, not 2")
        lines = [ln for ln in self.stderr.splitlines() if ln.strip()]
        want = f"proton-inject: error: {case.message}"
        start = next((i for i, ln in enumerate(lines) if ln.startswith("proton-inject: error:")),
                     len(lines))
        got = "\n".join(lines[start:])
        if got != want:
            out.append(f"message:\n  got:  {got!r}\n  want: {want!r}")
        return out


def _state(p: Path) -> object:
    """What a path is, read without ever blocking (FIFOs, devices) or reading big files whole."""
    st = os.lstat(p)
    if stat.S_ISLNK(st.st_mode):
        return ("link", os.readlink(p))
    if not stat.S_ISREG(st.st_mode):
        return ("kind", stat.S_IFMT(st.st_mode), st.st_mode)
    if st.st_size > 2**26:  # sparse giants: size and times say enough
        return ("big", st.st_size, st.st_mtime_ns, st.st_mode)
    with open(p, "rb") as f:
        return ("file", hashlib.sha256(f.read()).hexdigest(), st.st_mode)


def _snapshot(root: Path) -> dict[str, object]:
    return {p.relative_to(root).as_posix(): _state(p) for p in sorted(root.rglob("*"))}


class _TimedOut(Exception):
    pass


def _alarm(signum, frame):
    raise _TimedOut(f"the case took more than {TIMEOUT_S} s")


def run_case(case: Case, workdir: Path) -> Outcome:
    workdir.mkdir(parents=True, exist_ok=True)
    for rel, content in case.files.items():
        p = workdir / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Special):
            content.make(p)
        else:
            p.write_bytes(content.encode() if isinstance(content, str) else content)
    before = _snapshot(workdir)
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(TIMEOUT_S)
    try:
        with memory_limit(MEMORY):
            res = invoke(case.argv, cwd=workdir)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    after = _snapshot(workdir)
    modified = sorted(k for k in before.keys() | after.keys() if before.get(k, 0) != after.get(k, 0))
    tb = None
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        tb = "".join(traceback.format_exception(res.exception))[-3000:]
    return Outcome(res.exit_code, res.stderr, tb, modified)
