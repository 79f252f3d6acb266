"""scripts/demo.sh without a GPU reports on recorded buffers: they must be of the kernel, config
and regions the demo instruments (issue 31: it reported mm_kernel, from another file, while
instrumenting examples/matmul.py's matmul_kernel)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import helpers
import pytest
from helpers import REPO, SAMPLES
from helpers.cli import child_env

from proton_inject.formats.raw import read_launch_meta
from proton_inject.instrument.insert import insert_text
from proton_inject.instrument.rules import Rules


def _demo_words(command: str) -> list[str]:
    """The words of the demo's (first) `"$PI" COMMAND ...` line, continuations joined."""
    text = (REPO / "scripts/demo.sh").read_text().replace("\\\n", " ")
    line = re.search(rf'^\s*"\$PI" {command}.*$', text, re.M).group(0)
    return shlex.split(line)[1:]


def test_demo_reports_on_the_kernel_config_and_regions_it_instruments():
    dump = _demo_words("dump --target")
    report = _demo_words("report tests/")
    kernel = dump[dump.index("--target") + 2].split(":")[1]
    meta = read_launch_meta(REPO / report[1])
    assert meta.kernel == kernel == "matmul_kernel"
    # The dump's constexprs and warps are the recorded launch's config.
    config = dict(kv.split("=") for kv in meta.config.split(", "))
    for i, word in enumerate(dump):
        if word == "--constexpr":
            name, value = dump[i + 1].split("=")
            assert config[name] == value, name
    assert config["num_warps"] == dump[dump.index("--num-warps") + 1]
    assert config["num_stages"] == dump[dump.index("--num-stages") + 1]
    # insert's default rules on that kernel (as the demo runs it) give the recorded regions.
    res = insert_text((SAMPLES / "cuda-90/matmul_kernel.ttgir").read_bytes(), Rules(),
                      "matmul_kernel.ttgir")
    assert [r.name for r in res.kernels[0].regions] == [meta.scopes[i] for i in sorted(meta.scopes)]


@pytest.mark.skipif(helpers._has_gpu(), reason="the demo's path without a GPU")
def test_demo_without_a_gpu_explains_what_it_shows(tmp_path):
    """The demo as the README runs it: its report's rejected clock fit, '-' under +-ns and
    every warp recording (check says warp 0 by default) are said before they show."""
    pi = Path(sys.executable).with_name("proton-inject")
    if not pi.exists():
        pytest.skip("proton-inject is not installed beside this Python")
    p = subprocess.run(["bash", str(REPO / "scripts/demo.sh"), str(tmp_path / "out")], cwd=REPO,
                       env=child_env(PROTON_INJECT=str(pi)), capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    out = p.stdout + p.stderr
    assert "recording warps: warp 0 of 8" in out
    said = out.index("expect 'globaltimer fit rejected'")
    assert said < out.index("warning: matmul_kernel: globaltimer fit rejected")
    assert "every warp recording (8 of 8" in out[:said + 200]
    assert "+-ns is '-'" in out
    assert (tmp_path / "out/timeline.png").is_file()
