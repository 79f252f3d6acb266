"""On a GPU: ``profile`` calibrates the record cost of a GPU model its cache does not know,
once, before the program starts, and keeps it; the report is then calibrated. ``--no-calibrate``
leaves it uncalibrated."""

from __future__ import annotations

import json
import re
import textwrap

import pytest
from helpers import requires_gpu
from helpers.cli import child_env, run_cli, run_python

from proton_inject import calibrate
from proton_inject.formats import calibration
from proton_inject.lower.options import LoweringOptions

pytestmark = [pytest.mark.gpu, requires_gpu]

PROGRAM = """
    import torch, triton, triton.language as tl

    @triton.jit
    def add(x, y, out, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(out + offs, tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m), mask=m)

    x = torch.arange(100000, device="cuda", dtype=torch.float32)
    out = torch.empty_like(x)
    for _ in range(3):
        add[(triton.cdiv(x.numel(), 1024),)](x, x, out, x.numel(), BLOCK=1024)
    print("sum", out.sum().item())
"""


def test_profile_calibrates_a_new_gpu_model_once(tmp_path):
    import torch

    name = torch.cuda.get_device_name(0)
    prog = tmp_path / "prog.py"
    prog.write_text(textwrap.dedent(PROGRAM))
    xdg = tmp_path / "xdg"  # empty: this machine has not met the GPU
    env = child_env(TRITON_CACHE_DIR=str(tmp_path / "triton"), XDG_CACHE_HOME=str(xdg))
    plain = run_python([prog], cwd=tmp_path, env=env, code=0, timeout=300)

    prof = run_cli(["profile", "-o", tmp_path / "out", "--", "python", prog], cwd=tmp_path, env=env,
                   code=0, timeout=600)
    assert prof.stdout == plain.stdout  # the note never on stdout
    notes = [ln for ln in prof.stderr.splitlines() if "record cost: calibrating" in ln]
    cache = xdg / "proton-inject" / "record_cost.json"
    assert len(notes) == 1 and re.fullmatch(
        rf"proton-inject: record cost: calibrating for {re.escape(name)}, once \(\d+ s\); "
        rf"kept in {re.escape(str(cache))}", notes[0]), prof.stderr[-3000:]
    print(notes[0])  # (the first-meeting wait, for docs/accuracy.md)
    entries = json.loads(cache.read_text())["entries"]
    wanted = {calibration.cache_key(name, v.clock, v.buffer_type, v.sched_stores, v.selected is not None)
              for v in calibrate.variants(LoweringOptions())}
    assert wanted <= set(entries), sorted(entries)
    assert "not calibrated" not in prof.stderr, prof.stderr[-3000:]
    assert "record_cost_calibration" not in prof.stderr  # the child's kernels are not the program's
    # nor in the program's Triton cache
    assert not [p for k in ("plain_reference*", "record_cost_calibration*") for p in (tmp_path / "triton").rglob(k)]

    again = run_cli(["profile", "-o", tmp_path / "out2", "--", "python", prog], cwd=tmp_path, env=env,
                    code=0, timeout=300)
    assert "record cost: calibrating" not in again.stderr and "not calibrated" not in again.stderr
    assert again.stdout == plain.stdout


def test_no_calibrate_leaves_the_report_uncalibrated(tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(textwrap.dedent(PROGRAM))
    env = child_env(TRITON_CACHE_DIR=str(tmp_path / "triton"), XDG_CACHE_HOME=str(tmp_path / "xdg"))
    prof = run_cli(["profile", "--no-calibrate", "-o", tmp_path / "out", "--", "python", prog],
                   cwd=tmp_path, env=env, code=0, timeout=300)
    assert "record cost: calibrating" not in prof.stderr
    assert "record cost: not calibrated for" in prof.stderr, prof.stderr[-3000:]
    assert not (tmp_path / "xdg" / "proton-inject" / "record_cost.json").exists()
