"""The one way tests run the proton-inject CLI.

``invoke`` runs a command in this process through click's runner (fast; most tests).
``run_cli`` runs ``python -m proton_inject.cli`` in a child process, as a shell would: for
what needs a process of its own (signals, a kill mid-write, a program run under ``run`` or
``profile`` on a GPU). ``run_python`` runs any other Python child (the plain program a profiled
one is compared with) with this checkout importable.

Each takes ``code``: the exit code the command must end with, checked with its output in the
message; ``None`` leaves the check to the caller.
"""

from __future__ import annotations

import os
import subprocess
import sys
import traceback
from collections.abc import Sequence
from contextlib import chdir
from pathlib import Path

from click.testing import CliRunner, Result

from helpers import REPO
from proton_inject.cli import main

CLI = [sys.executable, "-m", "proton_inject.cli"]


def invoke(argv: Sequence[str], *, cwd: Path | None = None, code: int | None = None) -> Result:
    """``proton-inject ARGV`` in this process, in ``cwd`` if given."""
    with chdir(cwd or Path.cwd()):
        res = CliRunner().invoke(main, [str(a) for a in argv])
    if code is not None:
        assert res.exit_code == code, _said(argv, res)
    return res


def _said(argv: Sequence[str], res: Result) -> str:
    """The command, its exit code and output, and the traceback of an exception it did not catch."""
    text = f"proton-inject {' '.join(map(str, argv))} exited {res.exit_code}:\n{res.output}"
    if res.exc_info and not isinstance(res.exception, SystemExit):
        text += "".join(traceback.format_exception(*res.exc_info))
    return text


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment with the checkout first on PYTHONPATH, plus ``extra``."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, **extra}


def run_python(argv: Sequence[str], *, cwd: Path, env: dict[str, str] | None = None,
               code: int | None = None, timeout: float | None = None) -> subprocess.CompletedProcess:
    """``python ARGV`` in a child, in ``cwd``, with ``env`` (default: ``child_env()``)."""
    p = subprocess.run([sys.executable, *map(str, argv)], cwd=cwd, env=env or child_env(),
                       capture_output=True, text=True, timeout=timeout)
    if code is not None:
        assert p.returncode == code, (f"python {' '.join(map(str, argv))} exited {p.returncode}:\n"
                                      f"{p.stdout[-2000:]}\n{p.stderr[-4000:]}")
    return p


def run_cli(argv: Sequence[str], *, cwd: Path, env: dict[str, str] | None = None,
            code: int | None = None, timeout: float | None = None) -> subprocess.CompletedProcess:
    """``python -m proton_inject.cli ARGV`` in a child, as ``run_python``."""
    return run_python(["-m", "proton_inject.cli", *argv], cwd=cwd, env=env, code=code, timeout=timeout)
