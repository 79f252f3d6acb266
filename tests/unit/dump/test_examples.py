"""The example kernels import without a GPU, describe their AOT compiles, and the sample
corpus made from them parses with Triton's own MLIR parser."""

from __future__ import annotations

import re

import helpers
import pytest

from proton_inject.dump.kernel_source import load_kernel, load_module
from proton_inject.dump.signature import parse_signature

ROOT = helpers.REPO
# The kernels made for the sample corpus; other files in examples/ may have no SAMPLE_SPECS.
EXAMPLES = [ROOT / "examples" / f"{n}.py" for n in (
    "vector_add", "softmax", "layernorm", "matmul", "persistent_matmul", "attention",
    "control_flow", "atomics")]
SAMPLES = sorted(p for t in ("cuda-80", "cuda-90", "cuda-100", "hip-gfx942")
                 for p in (ROOT / "ttgir_samples" / t).glob("*.ttgir"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_specs(path):
    mod = load_module(path)
    assert callable(mod.main)
    assert mod.SAMPLE_SPECS
    for spec in mod.SAMPLE_SPECS:
        fn = load_kernel(path, spec["kernel"])
        sig = parse_signature(",".join(f"{k}={v}" for k, v in spec["signature"].items()))
        params = set(fn.arg_names)
        given = set(sig) | set(spec["constexprs"])
        assert given <= params
        defaults = {p.name for p in fn.params if p.has_default}
        assert params - given <= defaults, f"{spec['kernel']}: {params - given} not given"
        assert spec["num_warps"] >= 1 and spec["num_stages"] >= 1


def test_samples_parse_with_triton():
    from triton._C.libtriton import ir

    from proton_inject.lower.proton import mlir_context

    assert len(SAMPLES) >= 30
    ctx = mlir_context()
    for path in SAMPLES:
        text = path.read_text()
        assert not re.search(r'loc\("/', text), f"{path}: absolute path in a loc"
        mod = ir.parse_mlir_module(str(path), ctx)
        assert mod.get_entry_func_name() == re.search(r"tt\.func public @(\w+)", text).group(1)
