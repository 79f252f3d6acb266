"""What a new user types, following the README on a machine without a GPU: each command as
typed, its exit code and the words it answers with (CPU only, bundled data and samples)."""

from __future__ import annotations

import helpers
import pytest
from helpers.cli import invoke, run_cli

DATA = helpers.DATA


# --- diff: a gate that compared nothing does not pass ----------------------------------------


def test_diff_of_runs_with_no_kernel_in_common_exits_2():
    res = invoke(["diff", DATA / "h100-direct", DATA / "h100-shortlaunch", "--fail-above", "5"],
                  code=2)
    err = [ln for ln in res.stderr.splitlines() if ln.startswith("proton-inject: error:")]
    assert len(err) == 1 and "nothing was compared" in err[0], res.output
    assert "layernorm_fwd_kernel" in err[0] and "matmul_kernel" in err[0]
    assert "kernel only in base: layernorm_fwd_kernel" in res.stdout  # the listing still comes
    assert "(1 launch, 4 regions)" in res.stdout


def test_diff_of_a_run_with_itself_still_passes():
    res = invoke(["diff", DATA / "h100-shortlaunch", DATA / "h100-shortlaunch", "--fail-above", "5"],
                 code=0)
    assert "8 within noise" in res.stdout


# --- run and profile: a mistyped option of ours is said as for the other commands ---------


@pytest.mark.parametrize("argv, typo, meant", [
    (["profile", "--loop", "both", "-o", "out", "--", "python", "x.py"], "--loop", "--loops"),
    (["profile", "--loop", "both", "-o", "out", "python", "x.py"], "--loop", "--loops"),
    (["run", "instrumented", "--warp=0", "--", "python", "x.py"], "--warp", "--warps"),
    (["run", "--kernal", "x", "instrumented", "python", "x.py"], "--kernal", "--kernel"),
])
def test_run_and_profile_name_an_unknown_option_with_a_suggestion(tmp_path, argv, typo, meant):
    res = invoke(argv, cwd=tmp_path, code=2)
    assert f"No such option '{typo}'" in res.output and meant in res.output, res.output
    assert "python option" not in res.output and "no such script" not in res.output
    assert not (tmp_path / "out").exists()


def test_the_program_keeps_its_own_options(tmp_path):
    # after `--` an unknown option is the program's: it reaches the program check
    res = invoke(["run", "instrumented", "--", "python", "nope.py", "--loop", "both"], cwd=tmp_path,
                 code=2)
    assert "nope.py: no such script" in res.output, res.output


def test_run_takes_raw_as_profile_and_report_do():
    assert "--raw" in invoke(["run", "-h"], code=0).output


# --- small things ----------------------------------------------------------------------------


def test_version_and_the_bare_command():
    assert invoke(["-V"], code=0).output.startswith("proton-inject, version ")
    assert invoke(["--version"], code=0).output.startswith("proton-inject, version ")
    bare = invoke([], code=0).output
    assert "Commands:" in bare and "profile" in bare


def test_report_gz_help_speaks_of_traces_only():
    text = " ".join(invoke(["report", "-h"], code=0).output.split())
    assert "--gz / --no-gz With --trace: gzip the traces" in text
    assert "raw buffers" not in text.split("--gz", 1)[1].split("--trace-format")[0]


def test_inspect_counts_in_the_singular():
    out = invoke(["inspect", helpers.SAMPLES / "cuda-90/add_kernel.ttgir"], code=0).output
    assert ": 26 ops, 1 loop\n" in out and "1 loops" not in out
    assert "... 1 more kind\n" in out


def test_inspect_and_loop_depth_count_loops_alike(tmp_path):
    """inspect's depth N is the --loop-depth N that keeps that loop and none deeper."""
    dump = tmp_path / "dump"  # a for loop around a while loop, compiled for an H100 here
    invoke(["dump", "--target", "cuda:90", helpers.REPO / "benchmarks/accuracy.py:nested_kernel",
            "--signature", "out_ptr=*i64,n=i64,reps=i32", "-o", dump], code=0)
    depths = [int(ln.split("(depth ")[1].split(",")[0])
              for ln in invoke(["inspect", dump], code=0).output.splitlines() if "(depth " in ln]
    assert depths == [1, 2]
    for n in depths:
        out = tmp_path / f"depth{n}"
        invoke(["insert", dump, "-o", out, "--loops", "outer", "--loop-depth", n], code=0)
        text = "".join(p.read_text() for p in out.rglob("*.ttgir"))
        assert text.count('proton.record start "loop ') == n
    assert "must be 1 or more" in invoke(["insert", dump, "-o", tmp_path / "x",
                                          "--loop-depth", "0"], code=2).output


# --- rules from Python: kernel_scope as Python spells it ------------------------------------


def test_rules_dict_takes_python_spelling(tmp_path):
    from proton_inject.collect.compile_hook import as_rules as rules_of  # profile(rules=...)'s
    from proton_inject.errors import UserError

    got = rules_of({"kernel_scope": True, "loop_depth": 1, "loops": "both", "sample_ctas": 2})
    assert (got.kernel_scope, got.loop_depth, got.loops, got.sample_ctas) == (True, 1, "both", 2)
    assert rules_of({"kernel-scope": True}).kernel_scope
    with pytest.raises(UserError, match="given twice"):
        rules_of({"kernel-scope": True, "kernel_scope": False})
    with pytest.raises(UserError, match="unknown rule key"):
        rules_of({"kernel_scop": True})
    rules = tmp_path / "rules.toml"  # one schema: a rules file takes it too
    rules.write_text("kernel_scope = true\n")
    out = tmp_path / "add.ttgir"
    invoke(["insert", helpers.SAMPLES / "cuda-90/add_kernel.ttgir", "-o", out, "--rules", rules,
            "--no-marks"], code=0)
    assert out.read_text().count("proton.record start") == 1


# --- insert --strict: a rule that matches nothing is an error --------------------------------


@pytest.mark.parametrize("rule", [["--region", "x=examples/matmul.py:200-210"],
                                  ["--op", "nothing.*"]])
@pytest.mark.parametrize("src", ["cuda-90/matmul_kernel.ttgir", "cuda-90"])
def test_strict_refuses_a_rule_that_matches_nothing(tmp_path, rule, src):
    argv = ["insert", helpers.SAMPLES / src, "-o", tmp_path / ("o.ttgir" if src.endswith("r") else "o"),
            "--kernel-scope", *rule]
    res = invoke([*argv, "--strict"], cwd=helpers.REPO, code=2)
    err = [ln for ln in res.stderr.splitlines() if ln.startswith("proton-inject: error:")]
    assert len(err) == 1 and rule[1] in err[0] and "--strict" in err[0], res.output
    assert not (tmp_path / "o").exists() and not (tmp_path / "o.ttgir").exists()
    invoke(argv, cwd=helpers.REPO, code=0)  # without --strict: a note, and the other rules


def test_strict_takes_a_rule_that_matches_somewhere(tmp_path):
    invoke(["insert", helpers.SAMPLES / "cuda-90", "-o", tmp_path / "o", "--op", "tt.store", "--no-marks",
            "--region", "acc=examples/matmul.py:40", "--strict"], cwd=helpers.REPO, code=0)


# --- the docs' Python API -------------------------------------------------------------------


def test_run_report_is_the_python_api_the_docs_name():
    import proton_inject

    assert "run_report" in proton_inject.__all__
    res = proton_inject.run_report([DATA / "h100-shortlaunch"], jobs=1)
    assert "loop acc @matmul.py:36" in res.text


def test_docs_say_alike_which_config_dump_keeps():
    """Configs sharing an override hash: the dump keeps the last compiled (program.py's note);
    commands.md said the first."""
    said = {p: (helpers.REPO / p).read_text() for p in
            ("docs/commands.md", "docs/formats.md", "proton_inject/dump/program.py")}
    for path, text in said.items():
        assert "keeps the last compiled" in " ".join(text.split()), path
        assert "keeps the first" not in text, path


# --- no GPU: say what to do instead ----------------------------------------------------------

without_gpu = pytest.mark.skipif(helpers._has_gpu(), reason="what a machine without a GPU says")
CUDA_PROGRAM = "import torch\ntorch.zeros(1, device='cuda')\n"


@without_gpu
def test_dump_of_a_program_without_a_gpu_names_target(tmp_path):
    (tmp_path / "x.py").write_text(CUDA_PROGRAM)
    res = run_cli(["dump", "-o", "d", "--", "python", "x.py"], cwd=tmp_path, code=2)
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("proton-inject: error: dump:") and "--target cuda:90" in last, res.stderr
    assert "no CUDA GPU is visible" in last


@without_gpu
def test_profile_without_a_gpu_says_what_to_do(tmp_path):
    (tmp_path / "x.py").write_text(CUDA_PROGRAM)
    res = invoke(["profile", "-o", "out", "--", "python", "x.py"], cwd=tmp_path, code=2)
    err = [ln for ln in res.stderr.splitlines() if ln.startswith("proton-inject: error:")]
    assert len(err) == 1 and "dump --target cuda:90" in err[0], res.output
    assert "run needs one" not in res.output


def test_check_names_an_unknown_target(tmp_path):
    inst = tmp_path / "add.ttgir"
    invoke(["insert", helpers.SAMPLES / "cuda-90/add_kernel.ttgir", "-o", inst], code=0)
    res = invoke(["check", inst, "--target", "cuda:99"], code=2)
    assert "unknown target" in res.output and "cuda:90" in res.output, res.output
    assert "not among --target" not in res.output


def test_plot_of_several_launches_writes_the_name_given(tmp_path):
    pytest.importorskip("matplotlib")
    png = tmp_path / "timeline.png"
    res = invoke(["report", DATA / "h100-shortlaunch", "--plot", png, "-j", "1"], code=0)
    assert png.is_file()  # the first launch: where the README says to look
    other = tmp_path / "timeline.00001-matmul_kernel.png"
    assert other.is_file() and f"wrote {other}" in res.stderr and f"wrote {png}" in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [other.name, png.name]


# --- one source file is one file: loops' bare names and marks' paths -------------------------

SHORT = DATA / "h100-shortlaunch"  # its loop located as matmul.py:36, its marks as examples/...


def test_source_view_shows_one_file_once_with_every_region():
    out = invoke(["report", SHORT, "--source", "-j", "1"], cwd=helpers.REPO, code=0).stdout
    view = out.split("\nsource of ", 1)[1]
    assert "source not found" not in view
    first = view.split("\nsource of ", 1)[0].splitlines()
    assert [ln.strip() for ln in first if ln.strip().endswith(".py")] == [
        str(helpers.REPO / "examples/matmul.py")]
    assert any("loop acc" in ln and ln.split()[0] == "36" for ln in first)
    assert "  without a source line: kernel 96.7%" in first[2]


def test_diff_and_traces_give_one_name_per_file(tmp_path):
    import gzip
    import json

    d = json.loads(invoke(["diff", SHORT, SHORT, "--json"], code=0).stdout)
    locs = {r["name"]: r["loc"] for k in d["kernels"] for r in k["regions"]}
    assert locs["loop acc @matmul.py:36"] == "examples/matmul.py:36"
    assert locs["mma"] == "examples/matmul.py:40"
    invoke(["report", SHORT, "--trace", tmp_path / "t", "--trace-format", "json", "-j", "1"], code=0)
    seen = set()
    for p in (tmp_path / "t").iterdir():
        for e in json.loads(gzip.decompress(p.read_bytes()))["traceEvents"]:
            loc = (e.get("args") or {}).get("loc")
            if loc:
                seen.add(loc.rsplit(":", 1)[0])
    assert seen == {"examples/matmul.py"}, seen


def test_unify_locs_leaves_a_name_two_paths_end():
    from proton_inject.formats.raw import unify_locs

    assert unify_locs({0: "k.py:3", 1: "a/k.py:7-9", 2: "b/m.py:1"}) == {
        0: "a/k.py:3", 1: "a/k.py:7-9", 2: "b/m.py:1"}
    assert unify_locs({0: "k.py:3", 1: "a/k.py:7", 2: "b/k.py:1"})[0] == "k.py:3"  # which one?
