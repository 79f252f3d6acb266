"""--measure-overhead (issue 30 item 2): a kernel launched several times alternates between its
instrumented and plain builds; each launch runs once (outputs identical), the ratio comes with
its spread, plain launches are not decoded, a kernel launched once says so."""

from __future__ import annotations

import json

import pytest
import torch
import triton
import triton.language as tl
from helpers import requires_gpu

import proton_inject
from proton_inject.instrument.rules import Rules


@triton.jit
def looped_kernel(x_ptr, y_ptr, n, STEPS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x_ptr + offs, mask=offs < n)
    for _ in range(STEPS):
        v = v * 0.999 + 0.001
    tl.store(y_ptr + offs, v, mask=offs < n)


@triton.jit
def once_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1.0, mask=offs < n)


def _program(x: torch.Tensor) -> list[torch.Tensor]:
    outs = []
    for i in range(20):
        y = torch.empty_like(x)
        looped_kernel[(triton.cdiv(x.numel(), 1024),)](x + i, y, x.numel(), STEPS=64, BLOCK=1024)
        outs.append(y)
    z = x.clone()
    once_kernel[(triton.cdiv(z.numel(), 1024),)](z, z.numel(), BLOCK=1024)
    outs.append(z)
    torch.cuda.synchronize()
    return outs


@pytest.mark.gpu
@requires_gpu
def test_measure_overhead_alternates_builds_and_keeps_outputs(tmp_path):
    x = torch.rand(1 << 20, device="cuda")
    plain = _program(x)
    with proton_inject.profile(Rules(kernel_scope=True, loops="outer"), tmp_path / "out",
                               measure_overhead=True, quiet=True) as result:
        profiled = _program(x)
    assert all(torch.equal(a, b) for a, b in zip(plain, profiled, strict=True))
    m = result.measured_overhead
    assert m["looped_kernel"]["pairs"] >= 8, m
    assert m["looped_kernel"]["launches_plain"] == 10
    assert 0.5 < m["looped_kernel"]["p10"] <= m["looped_kernel"]["ratio"] <= m["looped_kernel"]["p90"] < 5
    assert m["once_kernel"] == {"pairs": 0}
    assert any("once_kernel: not measured" in line for line in result.messages)
    kept = [r for r in result.launches if r.kernel == "looped_kernel"]
    assert len(kept) == 10  # the instrumented half; plain launches are not decoded
    index = json.loads((tmp_path / "out" / "run.json").read_text())
    assert index["measured_overhead"]["looped_kernel"]["pairs"] == m["looped_kernel"]["pairs"]
    lk = m["looped_kernel"]
    assert lk["extra_us_p10"] <= lk["extra_us"] <= lk["extra_us_p90"]
    # the report widens the measured kernel's error bars by its share
    from proton_inject.analyze.report import run_report

    summary = run_report([tmp_path / "out"]).summary
    k = next(k for k in summary["kernels"] if k["kernel"] == "looped_kernel")
    assert k["perturbation_pct"] > 0
    assert all("measured perturbation" in r["uncertainty"]["from"][-1] for r in k["regions"])
    assert "perturbation_pct" not in next(k for k in summary["kernels"] if k["kernel"] == "once_kernel")
