"""Run one bad-input case in a fresh directory and judge it (used by the test and tally.py)."""

from __future__ import annotations

import os
import traceback
from dataclasses import dataclass
from pathlib import Path

from cases import Case
from click.testing import CliRunner

from proton_inject.cli import main


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


def _snapshot(root: Path) -> dict[str, bytes | None]:
    return {p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() else None)
            for p in sorted(root.rglob("*"))}


def run_case(case: Case, workdir: Path) -> Outcome:
    workdir.mkdir(parents=True, exist_ok=True)
    for rel, content in case.files.items():
        p = workdir / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content.encode() if isinstance(content, str) else content)
    before = _snapshot(workdir)
    cwd = os.getcwd()
    os.chdir(workdir)
    try:
        res = CliRunner().invoke(main, case.argv)
    finally:
        os.chdir(cwd)
    after = _snapshot(workdir)
    modified = sorted(k for k in before.keys() | after.keys() if before.get(k, 0) != after.get(k, 0))
    tb = None
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        tb = "".join(traceback.format_exception(res.exception))[-3000:]
    return Outcome(res.exit_code, res.stderr, tb, modified)
