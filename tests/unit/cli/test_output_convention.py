"""One convention for outputs (issue 31: run gzipped its raw files, report --trace wrote plain
JSON, profile had no --no-gz, and each command had its own default -o): raw buffers and
traces are gzipped unless --no-gz, in run, profile and report alike; -o defaults to the name
the next step reads: dump -> ttgir_dump, insert -> instrumented, run and profile -> traces
(docs/commands.md#outputs)."""

from __future__ import annotations

import gzip
import shutil

import pytest
from helpers import DATA, SAMPLES
from helpers.cli import run_cli

from proton_inject.cli import main

LAUNCH = DATA / "h100-shortlaunch" / "00000-matmul_kernel.json"


def _option(command: str, name: str):
    return next(p for p in main.commands[command].params if name in p.opts)


@pytest.mark.parametrize("command", ["run", "profile", "report"])
def test_every_writer_of_traces_has_the_same_gz_switch(command):
    opt = _option(command, "--gz")
    assert opt.secondary_opts == ["--no-gz"] and opt.default is None  # None: on (see cli.py)
    # report writes no raw buffers: its switch says it acts on --trace only
    assert opt.help == (_option("run", "--gz").help if command != "report"
                        else "With --trace: gzip the traces (the default).")


def test_default_outputs_are_the_next_steps_inputs():
    assert _option("dump", "-o").default == "ttgir_dump"
    assert _option("run", "-o").default == _option("profile", "-o").default == "traces"
    assert "default: instrumented" in _option("insert", "-o").help


@pytest.mark.parametrize("flags,name", [([], "00000-matmul_kernel.pftrace.gz"),
                                        (["--gz"], "00000-matmul_kernel.pftrace.gz"),
                                        (["--no-gz"], "00000-matmul_kernel.pftrace"),
                                        (["--trace-format", "json"], "00000-matmul_kernel.json.gz")])
def test_report_trace_is_gzipped_unless_no_gz(tmp_path, flags, name):
    out = run_cli(["report", str(LAUNCH), "--trace", "t", *flags], cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr
    assert sorted(p.name for p in (tmp_path / "t").iterdir()) == [name]
    head = (tmp_path / "t" / name).read_bytes()[:2]
    assert (head == b"\x1f\x8b") == name.endswith(".gz")
    if name.endswith(".gz"):
        assert gzip.decompress((tmp_path / "t" / name).read_bytes())


@pytest.mark.parametrize("flag", ["--gz", "--no-gz"])
def test_gz_or_no_gz_without_trace_is_refused(tmp_path, flag):
    out = run_cli(["report", str(LAUNCH), flag], cwd=tmp_path, timeout=300)
    assert out.returncode == 2
    assert f"{flag} only applies to --trace DIR" in out.stderr


def test_run_report_api_gzips_traces_as_the_cli_does(tmp_path):
    from proton_inject.analyze.report import run_report

    res = run_report([LAUNCH], trace_dir=tmp_path / "t")
    assert [p.name for p in res.files] == ["00000-matmul_kernel.pftrace.gz"]


def test_insert_of_a_tree_writes_instrumented_by_default(tmp_path):
    (tmp_path / "ttgir_dump").mkdir()
    shutil.copy(SAMPLES / "cuda-90/add_kernel.ttgir", tmp_path / "ttgir_dump")
    out = run_cli(["insert", "ttgir_dump"], cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "wrote instrumented" in out.stdout
    assert (tmp_path / "instrumented" / "manifest.json").is_file()
