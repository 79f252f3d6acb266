"""Every command in the README and the docs' command pages that needs no GPU runs as written,
and so does ``proton-inject COMMAND -h`` for each command.

The code blocks of README.md, docs/commands.md and docs/rules.md are read in order; a command
that runs a program (``-- python ...``) or needs a GPU (``calibrate``, ``run``, ``profile``)
is left out, and so is a synopsis (``[--option ...]``, ``...``); the others run, in this
process, in a directory where the names they use exist: ``ttgir_dump`` holds cuda:90
samples (what ``dump`` writes on an H100), ``kernel.ttgir`` is one of them, ``traces/``
holds raw launches recorded on an H100, and the runs a diff compares (``base``, ``new``,
``base_run/``, ``new_run/``) are the bundled H100 launches of examples/matmul.py.
"""

from __future__ import annotations

import shlex
import shutil

import helpers
import pytest
from helpers.cli import invoke

from proton_inject.cli import main

ROOT = helpers.REPO
DATA = ROOT / "tests" / "data" / "h100-triton3.6"
PAGES = ("README.md", "docs/commands.md", "docs/rules.md")
GPU_ONLY = ("calibrate", "run", "profile")
RUNS = ("base", "new", "base_run", "new_run")  # what a diff compares: two runs of one program
# The kernels the pages' examples name (marks, the K loop, an MMA, attention's softmax lines),
# a few so that `check` compiles in seconds.
DUMPED = ("add_kernel.ttgir", "matmul_kernel.ttgir", "attn_fwd_kernel.ttgir")


def _blocks(text: str) -> list[str]:
    """The shell code blocks of a Markdown page (fenced with no language, bash or sh)."""
    out, cur, lang = [], None, ""
    for line in text.splitlines():
        if line.startswith("```"):
            if cur is None:
                cur, lang = [], line[3:].strip()
            else:
                if lang in ("", "bash", "sh"):
                    out.append("\n".join(cur))
                cur = None
        elif cur is not None:
            cur.append(line)
    return out


def _words(line: str) -> list[str]:
    """A shell line's words without its comment (one holding an apostrophe too)."""
    try:
        return shlex.split(line, comments=True)
    except ValueError:
        return shlex.split(line.split(" #")[0])


def page_commands(page: str) -> list[str]:
    """The ``proton-inject ...`` lines of a page's code blocks, continuations joined and
    comments dropped."""
    out = []
    for block in _blocks((ROOT / page).read_text()):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip()
            if line.startswith("proton-inject "):
                out.append(shlex.join(_words(line)))
    return out


def _runs_here(cmd: str) -> bool:
    """Not a program run, a GPU command or a synopsis."""
    if "[" in cmd or "..." in cmd:
        return False
    words = shlex.split(cmd)
    return "--" not in words and words[1] not in GPU_ONLY


def test_the_pages_have_commands_of_each_kind():
    cmds = [c for page in PAGES for c in page_commands(page)]
    kinds = {shlex.split(c)[1] for c in cmds}
    assert {"profile", "dump", "inspect", "insert", "check", "run", "report", "diff",
            "strip"} <= kinds
    assert len([c for c in cmds if _runs_here(c)]) >= 25


def _workdir(tmp_path):
    samples = ROOT / "ttgir_samples" / "cuda-90"
    (tmp_path / "ttgir_dump").mkdir()
    for name in DUMPED:
        shutil.copy(samples / name, tmp_path / "ttgir_dump" / name)
    shutil.copy(samples / "matmul_kernel.ttgir", tmp_path / "kernel.ttgir")
    raw = tmp_path / "traces" / "raw"
    raw.mkdir(parents=True)
    for name in ("profile_scratch_add", "profile_scratch_mm"):
        shutil.copy(DATA / f"{name}.json", raw / f"{name}.json")
        shutil.copy(DATA / f"{name}.bin.gz", raw / f"{name}.bin.gz")
    for run in RUNS:
        shutil.copytree(ROOT / "tests" / "data" / "h100-shortlaunch", tmp_path / run)


@pytest.mark.parametrize("page", PAGES)
def test_cpu_commands_run_as_written(tmp_path, page):
    pytest.importorskip("matplotlib")  # report --plot
    _workdir(tmp_path)
    provided = {"ttgir_dump", "traces", "traces/", *RUNS, *(f"{r}/" for r in RUNS)}
    from_gpu: set[str] = set()  # outputs of the commands left out
    ran = []
    for cmd in page_commands(page):
        if not _runs_here(cmd):
            words = cmd.split()
            from_gpu |= {words[i + 1] for i, w in enumerate(words[:-1]) if w in ("-o", "--out")}
            from_gpu -= provided
            continue
        words = shlex.split(cmd)
        if any(w in from_gpu for w in words[2:]):
            continue
        stdout = None
        if ">" in words:  # `... > file`: the command's stdout goes there
            stdout = words[words.index(">") + 1]
            words = words[:words.index(">")]
        res = invoke(words[1:], cwd=tmp_path, code=0)
        assert "Traceback" not in res.output, cmd
        if stdout:
            (tmp_path / stdout).write_text(res.stdout)
        ran.append(words[1])
    assert ran, page


def test_every_command_has_help():
    names = [[n] for n in main.commands] + [["cache", n] for n in main.commands["cache"].commands]
    for name in names:
        res = invoke([*name, "-h"], code=0)
        assert res.output.startswith("Usage: "), name
    assert "Commands:" in invoke(["-h"], code=0).output
