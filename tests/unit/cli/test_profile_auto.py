"""``profile --auto``'s options and errors (no GPU needed): what it refuses before the program
runs, the first look's own command line and its ranking, and a machine without a GPU."""

from __future__ import annotations

import pytest
from helpers import _has_gpu
from helpers.cli import invoke, run_cli

from proton_inject import api
from proton_inject.cli import profile
from proton_inject.collect.keep_policy import KeepPolicy


@pytest.fixture
def prog(tmp_path):
    p = tmp_path / "prog.py"
    p.write_text("print('hi')\n")
    return p


@pytest.mark.parametrize(("argv", "said"), [
    (["--auto-share", "0.5"], "--auto-share goes with --auto"),
    (["--auto-top", "2"], "--auto-top goes with --auto"),
    (["--auto", "--loops", "both"], "profile --auto chooses the rules itself; drop --loops"),
    (["--auto", "--kernel-scope", "--op", "tt.dot"], "drop --kernel-scope, --op"),
    (["--auto", "--auto-share", "0"], "--auto-share 0: give the share"),
    (["--auto", "--auto-share", "1.5"], "--auto-share 1.5: give the share"),
    (["--auto", "--auto-top", "0"], "--auto-top 0: give how many kernels"),
])
def test_auto_option_errors_before_the_program_runs(tmp_path, prog, argv, said):
    out = tmp_path / "out"
    res = invoke(["profile", "-o", out, *argv, "--", "python", prog], code=2)
    assert said in res.output and "Traceback" not in res.output
    assert "hi" not in res.output and not (out / "first-look").exists()


def test_auto_with_a_missing_script(tmp_path):
    res = invoke(["profile", "--auto", "-o", tmp_path / "out", "--", "python", tmp_path / "nope.py"], code=2)
    assert "nope.py: no such script" in res.output


def test_auto_refuses_torchrun(tmp_path, prog, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    res = invoke(["profile", "--auto", "-o", tmp_path / "out", "--", "python", prog], code=2)
    assert "profile --auto: not under torchrun" in res.output and not (tmp_path / "out").exists()


def test_auto_refuses_an_output_holding_other_files(tmp_path, prog):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    res = invoke(["profile", "--auto", "-o", out, "--", "python", prog], code=2)
    assert "holds files proton-inject did not write" in res.output
    assert (out / "notes.txt").read_text() == "mine" and not (out / "first-look").exists()


def test_the_api_offers_it():
    import proton_inject

    assert proton_inject.profile_auto is api.profile_auto and "profile_auto" in proton_inject.__all__


def test_help_says_it_runs_the_program_twice():
    text = " ".join(invoke(["profile", "--help"], code=0).output.split())
    assert "--auto" in text and "wall time about 2x" in text and "--auto-share" in text
    assert "cuBLAS too" in text and "--first-look" not in text  # (the first look's own)


def test_the_first_looks_command_line_is_profiles_own(tmp_path):
    keep = KeepPolicy(first=5, every=7, total=None)
    argv = api._first_look_argv(tmp_path / "first-look", keep, 300, 64.0, True, None, False, False, 2, False)
    assert argv[0] == "profile"
    p = profile.make_context("profile", [*argv[1:], "--", "python", "x.py"]).params
    assert p["kernel_scope"] and not p["loops"] and p["no_report"]
    assert p["first_look"]  # (every kernel timed on the device: collect/device_kernels.py; no decode)
    assert KeepPolicy.parse(p["keep_launches"]) == keep
    assert (p["max_launches"], p["max_pending_mb"], p["keep_tuning"], p["gz"], p["no_cache"], p["jobs"],
            p["no_calibrate"]) == (300, 64.0, True, False, True, 2, True)
    assert p["out"] == str(tmp_path / "first-look") and p["program"] == ("python", "x.py")
    every = api._first_look_argv(tmp_path, KeepPolicy.parse("all"), None, 256, False, None, True, True, None)
    ctx = profile.make_context("profile", [*every[1:], "--", "python", "x.py"])
    assert KeepPolicy.parse(ctx.params["keep_launches"]) == KeepPolicy.parse("all")
    assert not ctx.params["no_calibrate"] and ctx.params["gz"] is None and not ctx.params["no_cache"]


@pytest.mark.skipif(_has_gpu(), reason="what a machine without a GPU says")
def test_auto_without_a_gpu_is_one_error_and_its_exit_code(tmp_path, prog):
    out = tmp_path / "out"  # (a child: the first look's own child writes to the same stderr)
    res = run_cli(["profile", "--auto", "-o", out, "--", "python", prog], cwd=tmp_path, code=2)
    assert "no CUDA GPU is visible" in res.stderr
    assert "the first look ended (code 2) without writing" in res.stderr
    assert res.stdout == "" and not (out / "auto.json").exists()


def test_the_first_look_is_decoded_once_by_the_caller_with_its_device_times(tmp_path):
    """``_ranked`` on a first look as its child leaves it (raw launches of real H100 buffers,
    run.json, device-kernels.json, no trace): the ranking takes the device's times, the
    launches are decoded here and their traces written beside them."""
    import json
    import shutil

    from helpers import DATA

    from proton_inject.formats.auto_report import write_device_kernels
    from proton_inject.formats.run_index import RUN_FORMAT

    first = tmp_path / "first-look"
    (first / "raw").mkdir(parents=True)
    for ext in ("json", "bin.gz"):
        shutil.copy(DATA / "h100-direct" / f"00000-layernorm_fwd_kernel.{ext}",
                    first / "raw" / f"00000-layernorm_fwd_kernel.{ext}")
    (first / "run.json").write_text(json.dumps({
        "version": 1, "format": RUN_FORMAT, "launch_counts": {"layernorm_fwd_kernel": {"ran": 40}},
        "launches": [{"kernel": "layernorm_fwd_kernel", "tuning": False}]}))
    write_device_kernels(first, [{"kernel": "layernorm_fwd_kernel", "ns": 4.0e5, "launches": 40},
                                 {"kernel": "nvjet_sm90_gemm", "ns": 1.6e6, "launches": 40}],
                         ["a note from the first look"])
    ranked, notes = api._ranked(first, 0.8, 3, 1, gz=False)
    assert [(k["kernel"], k["instrumented"], k["top"]) for k in ranked] == [
        ("nvjet_sm90_gemm", False, False), ("layernorm_fwd_kernel", True, True)]
    assert ranked[1]["share"] == pytest.approx(0.2) and ranked[1]["launches_kept"] == 1
    assert notes == ["a note from the first look"]
    assert [p.name for p in first.glob("*.pftrace")] == ["00000-layernorm_fwd_kernel.pftrace"]
