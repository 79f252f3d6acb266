"""Every command in the README that needs no GPU runs as written (issue 31, newcomer list).

The README's ``bash`` blocks are read in order; a command that runs a program
(``-- python ...``) or needs a GPU (``calibrate``) is left out, the others run in a directory
where the names they use exist: ``ttgir_dump`` is a copy of the cuda:90 samples (what
``dump`` writes on an H100) and ``traces/`` holds raw launches recorded on an H100.
"""

from __future__ import annotations

import re
import shlex
import shutil

import helpers
import pytest
from helpers.cli import run_cli

ROOT = helpers.REPO
DATA = ROOT / "tests" / "data" / "h100-triton3.6"
GPU_ONLY = ("calibrate",)


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith("proton-inject "):
                out.append(line)
    return out


def _needs_gpu(cmd: str) -> bool:
    words = shlex.split(cmd)
    return "--" in words or words[1] in GPU_ONLY


def test_the_readme_has_commands_of_each_kind():
    cmds = readme_commands()
    kinds = {shlex.split(c)[1] for c in cmds}
    assert {"profile", "dump", "inspect", "insert", "check", "run", "report", "strip"} <= kinds
    assert [c for c in cmds if not _needs_gpu(c)]


def test_readme_cpu_commands_run_as_written(tmp_path):
    pytest.importorskip("matplotlib")  # report --plot
    shutil.copytree(ROOT / "ttgir_samples" / "cuda-90", tmp_path / "ttgir_dump")
    raw = tmp_path / "traces" / "raw"
    raw.mkdir(parents=True)
    for name in ("profile_scratch_add", "profile_scratch_mm"):
        shutil.copy(DATA / f"{name}.json", raw / f"{name}.json")
        shutil.copy(DATA / f"{name}.bin.gz", raw / f"{name}.bin.gz")
    ran = []
    provided = {"ttgir_dump", "traces", "traces/"}  # what GPU commands would have made, made here
    from_gpu: set[str] = set()  # outputs of the commands left out
    for cmd in readme_commands():
        words = shlex.split(cmd)
        if _needs_gpu(cmd) or any(w in from_gpu for w in words[2:]):
            from_gpu |= {words[i + 1] for i, w in enumerate(words[:-1]) if w in ("-o", "--out")}
            from_gpu -= provided
            continue
        p = run_cli(words[1:], cwd=tmp_path, code=0, timeout=600)
        assert "Traceback" not in p.stderr, cmd
        ran.append(words[1])
    assert {"inspect", "insert", "check", "report", "strip"} <= set(ran), ran
