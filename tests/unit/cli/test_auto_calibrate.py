"""``profile`` and ``run`` calibrate the record cost of a GPU model met for the first time, in a
child process before the program starts: which variants are missing from the cache, the note
it prints, and ``--no-calibrate``. (The calibration itself needs a GPU:
tests/gpu/test_gpu_auto_calibrate.py.)"""

from __future__ import annotations

import io
import json

import pytest
from helpers.cli import invoke

from proton_inject import calibrate
from proton_inject.formats import calibration
from proton_inject.lower.options import LoweringOptions

H200 = "NVIDIA H200"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "proton-inject" / "record_cost.json"


def _store(device: str, v: LoweringOptions, cycles: float = 0.0) -> None:
    calibration.store(device, cycles, v.clock, v.buffer_type, v.sched_stores,
                      selective=v.selected is not None)


def test_missing_lists_each_variant_the_cache_lacks(cache):
    default = LoweringOptions()
    every = calibrate.variants(default)
    assert len(every) == 5  # direct one warp; global and shared, one and every warp
    assert calibrate.missing(default, [H200, H200]) == [(H200, v) for v in every]
    _store(H200, every[0])
    _store("NVIDIA H100 80GB HBM3", every[1])  # another model's entry does not count
    assert calibrate.missing(default, [H200]) == [(H200, v) for v in every[1:]]
    for v in every[1:]:
        _store(H200, v)
    assert calibrate.missing(default, [H200]) == []
    # Options a profile lowers differently with are their own entries.
    assert [v.clock for _, v in calibrate.missing(LoweringOptions(clock=32), [H200])] == [32] * 5
    shared_all = LoweringOptions(buffer_type="shared", warps="all")
    assert calibrate.missing(shared_all, ["AMD Instinct MI300X"], hip=True) == [
        ("AMD Instinct MI300X", shared_all)]
    cache.write_text("{not json")  # a damaged cache: calibrated again
    assert len(calibrate.missing(default, [H200])) == 5


def test_a_calibrated_model_starts_nothing(cache):
    for v in calibrate.variants(LoweringOptions()):
        _store(H200, v, 3.0)
    said = io.StringIO()
    assert calibrate.calibrate_missing(LoweringOptions(), {H200: 0}, said) == []
    assert said.getvalue() == ""
    assert not (cache.parent / "record_cost.lock").exists()  # not even the lock was taken
    # No GPU visible: nothing to calibrate (the session then says it cannot profile).
    assert calibrate.calibrate_missing(LoweringOptions(), {}, said) == [] and said.getvalue() == ""


def test_a_failed_calibration_is_one_note_line_and_the_run_goes_on(cache, capsys):
    """The real child runs here, where no GPU is: it fails, the parent says so in one line on
    the stream it was given and returns (never raises), and the cache stays empty."""
    said = io.StringIO()
    got = calibrate.calibrate_missing(LoweringOptions(buffer_type="shared", warps="all"),
                                      {H200: 0}, said)
    assert got == [(H200, False)]
    lines = said.getvalue().splitlines()
    assert len(lines) == 1 and said.getvalue().endswith("\n"), said.getvalue()
    assert lines[0].startswith(f"proton-inject: record cost: calibrating for {H200}, once: failed (")
    assert "needs a CUDA GPU" in lines[0] and "records' own cost" in lines[0]
    assert not cache.exists()
    assert capsys.readouterr() == ("", "")  # nothing of it on our stdout or stderr


def test_a_calibration_note_names_the_model_its_seconds_and_the_cache(cache):
    """The note of a calibration that succeeds, from a real child given nothing to measure."""
    said = io.StringIO()
    calibration.user_cache_dir(make=True)
    assert calibrate._calibrate_in_child(H200, 0, [], said) is True
    line = said.getvalue()
    assert line.count("\n") == 1 and line.startswith(
        f"proton-inject: record cost: calibrating for {H200}, once (")
    assert line.rstrip("\n").endswith(f" s); kept in {cache}")


def test_the_child_is_given_concrete_options_it_reads_back(cache):
    """What the parent writes on the child's command line is what the child measures."""
    from dataclasses import asdict

    for v in calibrate.variants(LoweringOptions(clock=32, sched_stores=True)):
        d = json.loads(json.dumps(asdict(v)))
        w = d["warps"]
        assert LoweringOptions(**{**d, "warps": tuple(w) if isinstance(w, list) else w}) == v


@pytest.mark.parametrize("command", ["profile", "run"])
def test_no_calibrate_is_an_option_of_profile_and_run(command, tmp_path):
    text = " ".join(invoke([command, "--help"], code=0).output.split())
    assert "--no-calibrate" in text and "durations may then include the records' own cost" in text
    prog = tmp_path / "prog.py"
    prog.write_text("print('hi')\n")
    tree = [tmp_path] if command == "run" else []
    res = invoke([command, *tree, "--no-calibrate", "-o", tmp_path / "out", "--", "python", prog])
    # Accepted: what stops it here is the missing GPU (or, for run, a tree with no kernels).
    assert "no such option" not in res.output.lower() and res.exit_code == 2, res.output
