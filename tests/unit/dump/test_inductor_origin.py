"""The model's source behind an Inductor kernel (dump/inductor_origin.py): the comments of a
wrapper module real Inductor wrote, stack traces of a real Dynamo graph, and the lookup from
inside a real Inductor compile."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import helpers

from proton_inject.dump.inductor_origin import at_compile, definition_comments, model_line, model_lines

WRAPPER = helpers.DATA / "inductor" / "wrapper-torch2.13.py.txt"  # made by make_wrapper.py there
SOFTMAX = "triton_per_fused__softmax_abs_all_amax_eq_mul_ne_sub_0"
GELU = "triton_poi_fused_add_gelu_mul_1"


def test_the_wrapper_comments_name_each_kernels_source_nodes_and_aten_ops():
    lines = WRAPPER.read_text().splitlines()
    nodes, aten, mapping = definition_comments(lines, SOFTMAX)
    assert nodes == ["y"] and mapping == {"y": ["div", "exp", "sum_1", "where_self"]}
    assert aten[0] == "aten.mul" and aten[-1] == "aten._softmax" and len(aten) == 8
    assert definition_comments(lines, GELU) == (
        ["gelu", "add"], ["aten.mul", "aten.gelu", "aten.add"],
        {"add": ["add_1"], "gelu": ["add", "erf", "mul_2", "mul_3"]})
    # Not a kernel defined there (the extern addmm has a comment at its call only), or a
    # definition without its comments: nothing rather than a neighbour's.
    assert definition_comments(lines, "triton_poi_fused_addmm_2") is None
    at = next(i for i, line in enumerate(lines) if line.startswith(f"{GELU} = "))
    bare = [line for i, line in enumerate(lines) if not (i < at and i > at - 16 and line.startswith("#"))]
    assert definition_comments(bare, GELU) is None
    assert definition_comments(bare, SOFTMAX) is not None


LIBRARY = """
    import torch

    def act(x):
        return torch.nn.functional.gelu(x)
"""
MODEL = """
    import torch
    from mylib import act

    graphs = []

    def backend(gm, inputs):
        graphs.append(gm)
        return gm.forward

    class Block(torch.nn.Module):
        def forward(self, x):
            y = torch.softmax(x * 0.5, dim=-1)
            return y + act(x)

    torch.compile(Block(), backend=backend)(torch.randn(4, 8))
"""


def test_model_lines_come_from_the_graphs_stack_traces(tmp_path, monkeypatch):
    """A real Dynamo graph: each node's stack trace leads to the model's line, past frames of
    a library the model called (``outside``)."""
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "mylib.py").write_text(textwrap.dedent(LIBRARY))
    (tmp_path / "model.py").write_text(textwrap.dedent(MODEL))
    monkeypatch.syspath_prepend(str(tmp_path / "lib"))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    import model  # noqa: F401  (compiles Block once, through the capturing backend)

    [gm] = sys.modules.pop("model").graphs
    sys.modules.pop("mylib", None)
    names = {n.name for n in gm.graph.nodes}
    assert {"mul", "y", "gelu", "add"} <= names, names
    lib = (os.path.join(str(tmp_path / "lib"), ""),)
    got = model_lines(gm.graph.nodes, ["y", "gelu"], {"y": ["mul", "y"], "gelu": ["gelu", "nowhere"]}, lib)
    assert got == ["model.py:13 (forward)", "model.py:14 (forward)"]
    gelu = next(n for n in gm.graph.nodes if n.name == "gelu")
    assert model_line(gelu.meta["stack_trace"]).startswith("lib/mylib.py:5 (act)")  # the innermost
    assert model_line("") is None and model_lines([], ["y"], {"y": ["y"]}) == []


def test_outside_an_inductor_compile_there_is_no_origin():
    assert at_compile(SOFTMAX) is None


# Real Dynamo and Inductor compile the model for CPU tensors as Triton kernels (no GPU here):
# Triton is told a target only, and has no CPU backend, so each kernel's compile fails right
# after Inductor's ``async_compile.triton`` starts it, where the tool's compile hook runs on a
# GPU: ``at_compile`` is asked there, and what it says is printed.
INSIDE = """
    import json, torch
    from triton.backends.compiler import GPUTarget
    from triton.runtime import driver
    from torch._inductor import async_compile
    from proton_inject.dump.inductor_origin import at_compile

    torch._inductor.config.cpu_backend = "triton"

    class TargetOnly:
        def get_current_target(self):
            return GPUTarget("cuda", 90, 32)

    driver.set_active(TargetOnly())
    triton_compile = async_compile.AsyncCompile.triton

    def compiling(self, kernel_name, source_code, device_str="cuda"):
        print(json.dumps([kernel_name, at_compile(kernel_name)]))
        return triton_compile(self, kernel_name, source_code, device_str)

    async_compile.AsyncCompile.triton = compiling

    class Block(torch.nn.Module):
        def forward(self, x):
            y = torch.softmax(x * 0.5, dim=-1)
            return y + 1

    try:
        torch.compile(Block())(torch.randn(64, 32))
    except Exception:
        pass
"""


def test_at_compile_inside_a_real_inductor_compile(tmp_path):
    (tmp_path / "prog.py").write_text(textwrap.dedent(INSIDE))
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache"), "TORCHINDUCTOR_COMPILE_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(helpers.REPO), os.environ.get("PYTHONPATH")) if p)}
    p = subprocess.run([sys.executable, "prog.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=600)
    said = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("[")]
    assert said, p.stdout + p.stderr[-3000:]
    name, origin = said[0]
    assert name.startswith("triton_per_fused_") and origin is not None, said
    text = textwrap.dedent(INSIDE).splitlines()
    softmax, add = (next(i + 1 for i, line in enumerate(text) if line.strip().startswith(s))
                    for s in ("y = torch.softmax", "return y + 1"))
    # the softmax and the add fused into one kernel: both source nodes, both lines
    assert origin["nodes"] == ["y", "add"] and "aten._softmax" in origin["aten"], origin
    assert origin["lines"] == [f"prog.py:{softmax} (forward)", f"prog.py:{add} (forward)"], origin
