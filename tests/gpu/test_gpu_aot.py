"""On a GPU: the AOT command a program dump writes for each real launch reproduces its hash."""

from __future__ import annotations

import json
import textwrap

import pytest
from helpers import requires_gpu
from helpers.aot_kernels import SPEC_SRC, TUNED_SRC, write_kernel
from helpers.cli import invoke

from proton_inject.dump import program

pytestmark = [pytest.mark.gpu, requires_gpu]


GPU_PROGRAM = textwrap.dedent(
    """
    import sys
    import torch
    sys.path.insert(0, sys.argv[1])
    sys.path.insert(0, sys.argv[2])
    from spec_kernels import spec_kernel
    from tuned import tuned_kernel

    t = torch.ones(4096, device="cuda")
    spec_kernel[(4,)](t, t, None, 1000, 3, 2.0, False, MODE="sum", PREC="ieee", HAS_MASK=False,
                      EPS=0.0)
    spec_kernel[(4,)](t[1:], t, t, 4096, 5, 0.5, True, MODE=None, PREC="tf32", HAS_MASK=True,
                      EPS=1e-6)
    tuned_kernel[lambda m: (4096 // m["BLOCK"],)](t, None, 4096)
    torch.cuda.synchronize()
    """
)


def test_gpu_aot_commands_reproduce_the_launch_hashes(tmp_path):
    """Real launches (strings, None, floats, bools, an autotuned kernel): the manifest's AOT
    command of each kernel compiles, on the CPU path, the file the launch dumped."""
    import shlex

    path = write_kernel(tmp_path / "spec", "spec_kernels", SPEC_SRC)
    tuned_file = write_kernel(tmp_path / "tuned", "tuned", TUNED_SRC)
    prog = tmp_path / "prog.py"
    prog.write_text(GPU_PROGRAM)
    res = program.dump_program(["python", str(prog), str(path.parent), str(tuned_file.parent)],
                                tmp_path / "dump")
    assert res.exit_code == 0
    entries = json.loads((tmp_path / "dump" / "manifest.json").read_text())["kernels"]
    assert {e["name"] for e in entries} == {"spec_kernel", "tuned_kernel"} and len(entries) >= 4
    for e in entries:
        argv = shlex.split(e["aot_command"])
        out = tmp_path / f"aot_{e['hash']}"
        got = invoke([*argv[1:-2], "-o", str(out)])
        assert got.exit_code == 0, (e["aot_command"], got.output)
        (again,) = json.loads((out / "manifest.json").read_text())["kernels"]
        assert again["hash"] == e["hash"], e["aot_command"]
        assert (out / again["ttgir"]).read_text() == (tmp_path / "dump" / e["ttgir"]).read_text()
