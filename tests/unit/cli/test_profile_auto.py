"""``profile --auto``'s options and errors (no GPU needed): what it refuses before the program
runs, its ranking of a run's kernels with their device times, and a machine without a GPU."""

from __future__ import annotations

import pytest
from helpers import _has_gpu
from helpers.cli import invoke, run_cli

from proton_inject import api


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
    (["--auto", "--sample-ctas", "0"], "--sample-ctas 0: must be a whole number of 1 or more"),
])
def test_auto_option_errors_before_the_program_runs(tmp_path, prog, argv, said):
    out = tmp_path / "out"
    res = invoke(["profile", "-o", out, *argv, "--", "python", prog], code=2)
    assert said in res.output and "Traceback" not in res.output
    assert "hi" not in res.output and not out.exists()


@pytest.mark.skipif(_has_gpu(), reason="what a machine without a GPU says")
def test_auto_takes_sample_ctas_the_one_rule_it_leaves_to_the_user(tmp_path, prog):
    res = invoke(["profile", "--auto", "--sample-ctas", "8", "-o", tmp_path / "out", "--", "python", prog], code=2)
    assert "no CUDA GPU is visible" in res.output and "chooses the rules" not in res.output, res.output


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
    assert (out / "notes.txt").read_text() == "mine" and sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def test_the_api_offers_it():
    import proton_inject

    assert proton_inject.profile_auto is api.profile_auto and "profile_auto" in proton_inject.__all__


def test_help_says_what_it_does_in_one_run():
    text = " ".join(invoke(["profile", "--help"], code=0).output.split())
    assert "--auto" in text and "in one run" in text and "--auto-share" in text and "cuBLAS too" in text


@pytest.mark.skipif(_has_gpu(), reason="what a machine without a GPU says")
def test_auto_without_a_gpu_is_one_error_and_its_exit_code(tmp_path, prog):
    out = tmp_path / "out"
    res = run_cli(["profile", "--auto", "-o", out, "--", "python", prog], cwd=tmp_path, code=2)
    assert "no CUDA GPU is visible" in res.stderr and "Traceback" not in res.stderr
    assert res.stdout == "" and not (out / "auto.json").exists()


def test_the_ranking_takes_the_runs_device_times_and_their_notes(tmp_path):
    """``_ranked`` on an --auto run's directory: a real decoded launch (H100 buffers) and its
    run.json, and device-kernels.json with a kernel the tool did not instrument."""
    import json
    import shutil

    from helpers import DATA

    from proton_inject.analyze.report import run_report
    from proton_inject.formats.auto_report import write_device_kernels
    from proton_inject.formats.run_index import RUN_FORMAT

    out = tmp_path / "out"
    (out / "raw").mkdir(parents=True)
    for ext in ("json", "bin.gz"):
        shutil.copy(DATA / "h100-direct" / f"00000-layernorm_fwd_kernel.{ext}",
                    out / "raw" / f"00000-layernorm_fwd_kernel.{ext}")
    (out / "run.json").write_text(json.dumps({
        "version": 1, "format": RUN_FORMAT, "launch_counts": {"layernorm_fwd_kernel": {"ran": 40}},
        "launches": [{"kernel": "layernorm_fwd_kernel", "tuning": False}]}))
    summary = run_report([out], jobs=1).summary
    ranked, notes = api._ranked(out, summary, 0.8, 3)  # (no device times: a note, Triton's alone)
    assert [(k["kernel"], k["measured"], k["top"]) for k in ranked] == [("layernorm_fwd_kernel", False, True)]
    assert len(notes) == 1 and notes[0].startswith(f"{out / 'device-kernels.json'}: no such device kernel times "
                                                   "file") and notes[0].endswith("the Triton kernels' time alone)")
    write_device_kernels(out, [{"kernel": "layernorm_fwd_kernel", "ns": 4.0e5, "launches": 40},
                               {"kernel": "nvjet_sm90_gemm", "ns": 1.6e6, "launches": 40}], ["a note of the run"])
    ranked, notes = api._ranked(out, summary, 0.8, 3)
    assert [(k["kernel"], k["instrumented"], k["top"]) for k in ranked] == [
        ("nvjet_sm90_gemm", False, False), ("layernorm_fwd_kernel", True, True)]
    assert ranked[1]["share"] == pytest.approx(0.2) and ranked[1]["launches_kept"] == 1
    assert notes == ["a note of the run"]
    _, notes = api._ranked(out, {"kernels": [], "launch_counts": {}}, 0.8, 3)
    assert notes[-1] == "no launch of an instrumented kernel was decoded: nothing to open up"


def test_auto_keeps_fewer_launches_than_profile_by_default():
    from proton_inject.collect.keep_policy import KeepPolicy

    assert api.AUTO_KEEP.spec() == "first=5,every=100,rate=20,max=2000"  # (as docs/commands.md says)
    default = KeepPolicy()
    assert api.AUTO_KEEP.first < default.first and (api.AUTO_KEEP.every, api.AUTO_KEEP.total) == (
        default.every, default.total)
