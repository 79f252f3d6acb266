"""scripts/demo.sh without a GPU reports on recorded buffers: they must be of the kernel, config
and regions the demo instruments (issue 31: it reported mm_kernel, from another file, while
instrumenting examples/matmul.py's matmul_kernel)."""

from __future__ import annotations

import re
import shlex

from helpers import REPO, SAMPLES

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
