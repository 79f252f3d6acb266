"""What the GPU tests share: the examples, an example dumped and instrumented into the tree
``run`` takes, a run's decoded launches and index, and the CLI or Python in a child whose
prints keep their order with ours."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path

from helpers import REPO
from helpers.cli import child_env, run_cli, run_python
from proton_inject.analyze.decode import decode
from proton_inject.dump.program import dump_program
from proton_inject.formats.raw import find_raw, load_raw
from proton_inject.instrument.rules import Rules
from proton_inject.instrument.trees import instrument_tree, write_tree

EXAMPLES = REPO / "examples"
LOOPS_RULES = Rules(kernel_scope=True, loops="both", marks=False)
CHILD_TIMEOUT_S = 400  # a program dumped, run or profiled on an H100 takes well under it


def instrumented_tree(tmp_path: Path, argv: Sequence[str], rules: Rules = LOOPS_RULES,
                      kernel: str | None = None) -> Path:
    """``python ...`` (``argv``) dumped into tmp_path/dump (its kernels matching ``kernel``) and
    instrumented with ``rules`` into tmp_path/inst, as dump then insert would: that tree."""
    dump = tmp_path / "dump"
    res = dump_program(argv, dump, kernel=kernel)
    assert res.exit_code == 0
    outputs, manifest, _ = instrument_tree(dump, rules)
    assert outputs, "nothing was instrumented"
    return write_tree(outputs, manifest, tmp_path / "inst")


def decoded(out: Path, **kw) -> list:
    """Every launch a run wrote under ``out/raw``, decoded (``kw``: decode's, e.g. record_cost)."""
    return [decode(*load_raw(p), **kw) for p in find_raw(out / "raw")]


def run_index(out: Path, name: str = "run.json") -> dict:
    """The run's index (``run.rank<R>.json`` under torchrun)."""
    return json.loads((out / name).read_text())


def cli_child(argv: Sequence[str], cwd: Path, code: int | None = 0) -> subprocess.CompletedProcess:
    """The CLI in a child; unbuffered, so a program's prints and ours keep their order."""
    return run_cli(argv, cwd=cwd, env=child_env(PYTHONUNBUFFERED="1"), code=code, timeout=CHILD_TIMEOUT_S)


def python_child(argv: Sequence[str], cwd: Path) -> subprocess.CompletedProcess:
    """``python ARGV`` in a child, unbuffered as ``cli_child``; it must exit 0."""
    return run_python(argv, cwd=cwd, env=child_env(PYTHONUNBUFFERED="1"), code=0, timeout=CHILD_TIMEOUT_S)


def cli_said(argv: Sequence[str], cwd: Path) -> str:
    """What a CLI command that must succeed printed, stdout then stderr."""
    p = cli_child(argv, cwd)
    return p.stdout + p.stderr
