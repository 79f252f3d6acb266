"""On a GPU: a torch.compile'd model's kernels are launched by Inductor's wrapper module, and
the report names the model's lines each computes, from Inductor's own metadata
(``dump/inductor_origin.py``, recorded as ``model_source`` while the kernel compiles)."""

from __future__ import annotations

import json
import textwrap

import pytest
from helpers import requires_gpu
from helpers.cli import child_env, run_cli, run_python

pytestmark = [pytest.mark.gpu, requires_gpu]

PROGRAM = """
    import torch

    class Block(torch.nn.Module):
        def forward(self, x):
            y = torch.softmax(x * 0.5, dim=-1)
            return y + torch.nn.functional.gelu(x)

    x = torch.randn(1024, 512, device="cuda", generator=torch.Generator("cuda").manual_seed(0))
    f = torch.compile(Block())
    for _ in range(3):
        out = f(x)
    print("sum %.5e" % out.sum().item())
"""


def test_profile_names_the_model_line_of_an_inductor_kernel(tmp_path):
    text = textwrap.dedent(PROGRAM)
    prog = tmp_path / "prog.py"
    prog.write_text(text)
    softmax = 1 + next(i for i, line in enumerate(text.splitlines()) if "torch.softmax" in line)
    env = child_env(TRITON_CACHE_DIR=str(tmp_path / "triton"), TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"))
    plain = run_python([prog], cwd=tmp_path, env=env, code=0, timeout=300)
    prof = run_cli(["profile", "-o", tmp_path / "out", "--", "python", prog], cwd=tmp_path, env=env, code=0,
                   timeout=600)
    assert prof.stdout == plain.stdout
    metas = [json.loads(p.read_text()) for p in (tmp_path / "out" / "raw").glob("*.json")]
    inductor = [m for m in metas if m["kernel"].startswith("triton_")]
    assert inductor, sorted(m["kernel"] for m in metas)
    lines = {line for m in inductor for line in (m.get("model_source") or {}).get("lines", [])}
    assert f"prog.py:{softmax} (forward)" in lines, (lines, prof.stderr[-3000:])
    assert all("aten." in " ".join(m["model_source"]["aten"]) for m in inductor if m.get("model_source"))
    assert f"model: prog.py:{softmax} (forward)" in prof.stderr, prof.stderr[-3000:]
