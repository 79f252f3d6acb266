"""GPU: ``profile --auto`` on a program of two Triton kernels of very different cost (a looping
row sum and a small add) and torch's own (torch.rand), in one run: every kernel is timed on the
device, both Triton kernels are instrumented, the heavy one ranks first and is the one opened up,
the program's stdout is a plain run's, and the command exits with the program's code, also when
the program fails (the ranking is then of what it launched)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import REPO, requires_gpu
from helpers.cli import child_env, run_cli, run_python

pytestmark = [pytest.mark.gpu, requires_gpu]

PROGRAM = REPO / "tests" / "gpu" / "programs" / "two_kernels.py"
TIMEOUT_S = 300


def _env(tmp: Path) -> dict[str, str]:
    return child_env(PYTHONUNBUFFERED="1", TRITON_CACHE_DIR=str(tmp / "triton"))


def test_auto_ranks_every_kernel_and_opens_up_the_heavy_one(tmp_path):
    env = _env(tmp_path)
    plain = run_python([PROGRAM], cwd=tmp_path, env=env, code=0, timeout=TIMEOUT_S)
    out = tmp_path / "out"
    auto = run_cli(["profile", "--auto", "-o", out, "--", "python", PROGRAM], cwd=tmp_path, env=env,
                   code=0, timeout=TIMEOUT_S)
    assert auto.stdout == plain.stdout, auto.stderr
    doc = json.loads((out / "auto.json").read_text())
    ours = [k for k in doc["kernels"] if k["instrumented"]]
    assert [k["kernel"] for k in ours] == ["heavy_row_sum", "light_add"], doc["kernels"]
    heavy, light = ours
    assert heavy["share"] > 0.8 and heavy["top"] and not light["top"], doc["kernels"]
    assert heavy["launches_seen"] == light["launches_seen"] == 20
    # Every kernel timed on the device (torch.profiler, in the same run): torch.rand's kernel
    # too, never picked; the shares are of all of them; the tool's own kernels are not listed.
    assert all(k["measured"] for k in doc["kernels"]), doc["kernels"]
    others = [k for k in doc["kernels"] if not k["instrumented"]]
    assert others and not any(k["top"] for k in others), doc["kernels"]
    assert sum(k["share"] for k in doc["kernels"]) == pytest.approx(1.0)
    device = json.loads((out / "device-kernels.json").read_text())
    timed = {k["kernel"]: k for k in device["kernels"]}
    assert timed["heavy_row_sum"]["launches"] == 20 and "clock_bracket" not in timed, timed
    assert heavy["ns_per_launch"] == pytest.approx(timed["heavy_row_sum"]["ns"] / 20)
    # One run: both Triton kernels instrumented (body, loops, iterations), both kept.
    index = json.loads((out / "run.json").read_text())
    assert {x["kernel"] for x in index["launches"]} == {"heavy_row_sum", "light_add"}
    instrumented = {c["kernel"] for c in index["compiled"].values() if c["instrumented"]}
    assert instrumented == {"heavy_row_sum", "light_add"}, index["compiled"]
    assert not (out / "first-look").exists()
    (hot,) = doc["hot"]
    kinds = {r["kind"] for r in hot["regions"]}
    assert hot["kernel"] == "heavy_row_sum" and {"kernel", "loop", "iteration"} <= kinds, hot["regions"]
    assert hot["unattributed_share"] is not None and 0 <= hot["unattributed_share"] < 0.5
    loop = next(r for r in hot["regions"] if r["kind"] == "loop")
    assert loop["share_of_kernel"] > 0.5, hot["regions"]
    # The iterations' lines are the loop body's, in the program's source.
    body = 1 + PROGRAM.read_text().splitlines().index("        acc += tl.load(x_ptr + row * n_cols + cols, "
                                                      "mask=cols < n_cols, other=0.0)")
    spans = [s for r in hot["regions"] if r["kind"] == "iteration"
             for f, ss in r["lines"].items() if f.endswith("two_kernels.py") for s in ss]
    assert any(a <= body <= b for a, b in spans), hot["regions"]
    assert hot["source_note"] is None, hot["source_note"]  # lines from the instrumented IR
    assert "where the GPU time went" in auto.stderr and "heavy_row_sum" in auto.stderr
    # `report OUT` prints the ranking, then the usual report of the run (both kernels).
    rep = run_cli(["report", out], cwd=tmp_path, env=env, code=0, timeout=TIMEOUT_S)
    assert rep.stdout.startswith("where the GPU time went") and "* opened up below" in rep.stdout, rep.stdout
    assert "light_add [" in rep.stdout and "heavy_row_sum [" in rep.stdout, rep.stdout


def test_auto_exits_with_the_programs_code_when_it_fails(tmp_path):
    env = _env(tmp_path)
    argv = ["python", PROGRAM, "--launches", "2", "--exit", "3"]
    plain = run_python(argv[1:], cwd=tmp_path, env=env, code=3, timeout=TIMEOUT_S)
    out = tmp_path / "out"
    auto = run_cli(["profile", "--auto", "-o", out, "--", *argv], cwd=tmp_path, env=env, code=3,
                   timeout=TIMEOUT_S)
    assert auto.stdout == plain.stdout, auto.stderr
    doc = json.loads((out / "auto.json").read_text())
    assert doc["exit_code"] == 3 and doc["run"] == str(out)
    assert [k["kernel"] for k in doc["kernels"] if k["instrumented"]][0] == "heavy_row_sum"
    assert "heavy_row_sum" in {h["kernel"] for h in doc["hot"]}, doc["hot"]
    assert (out / "run.json").is_file() and (out / "device-kernels.json").is_file()


def test_auto_records_in_every_nth_cta_when_asked(tmp_path):
    """``--auto --sample-ctas 4``: the same kernels opened up, their records in 1 CTA in 4."""
    from proton_inject.formats.files import find_ttgir
    from proton_inject.instrument.sampling import sampled_ctas

    env = _env(tmp_path)
    plain = run_python([PROGRAM, "--launches", "4"], cwd=tmp_path, env=env, code=0, timeout=TIMEOUT_S)
    out = tmp_path / "out"
    auto = run_cli(["profile", "--auto", "--sample-ctas", "4", "-o", out, "--", "python", PROGRAM,
                    "--launches", "4"], cwd=tmp_path, env=env, code=0, timeout=TIMEOUT_S)
    assert auto.stdout == plain.stdout, auto.stderr
    irs = {p.stem: sampled_ctas(p.read_text()) for p in find_ttgir([out / "ir"])}
    assert irs and set(irs.values()) == {4}, irs
    hot = {h["kernel"]: h for h in json.loads((out / "auto.json").read_text())["hot"]}
    assert {"loop", "iteration"} <= {r["kind"] for r in hot["heavy_row_sum"]["regions"]}, hot
    assert "1 CTA in 4 recorded" in run_cli(["report", out], cwd=tmp_path, env=env, code=0,
                                           timeout=TIMEOUT_S).stdout
