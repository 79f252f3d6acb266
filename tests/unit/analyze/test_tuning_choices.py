"""benchmarks/tuning_choices.py without a GPU: a run's choices read from what a real child
process prints (the lines Triton's autotuner prints under TRITON_PRINT_AUTOTUNING=1), runs
saved by one call and compared with another's (--save, --combine), the dump side counted as
its own."""

from __future__ import annotations

import subprocess
import sys

from helpers import REPO, load_module

bench = load_module(REPO / "benchmarks" / "tuning_choices.py", "tuning_choices")

# What a program prints under TRITON_PRINT_AUTOTUNING=1 (Triton 3.6's autotuner), then its results.
PROGRAM = '''
import sys
cfg = sys.argv[1]
print("Triton autotuning for function var_mean_kernel,\\nwith key as (4096, 'torch.float32'),\\n"
      f"finished after 0.52s,\\nbest config selected: BLOCK: 1024, num_warps: {cfg}, num_ctas: 1, num_stages: 1;")
print("var_mean", "ab12" if cfg == "8" else "cd34")
'''


def test_a_runs_choices_and_output_are_read_from_the_program(tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    choices, lines, rc = bench.one_run([str(prog), "8"], "plain", tmp_path / "w")
    assert rc == 0 and lines == ["var_mean ab12"]
    assert choices == {("var_mean_kernel", "(4096, 'torch.float32')"):
                       "BLOCK: 1024, num_warps: 8, num_ctas: 1, num_stages: 1"}


def _run(side: str, warps: str) -> dict:
    key = ("var_mean_kernel", "(4096, 'torch.float32')")
    return bench.record(side, {key: f"num_warps: {warps}"}, [f"var_mean {'ab12' if warps == '8' else 'cd34'}"], 0)


def test_sides_that_agree_and_a_side_that_does_not():
    same = [_run(s, "8") for s in ("plain", "profile", "dump") for _ in range(3)]
    out = bench.compare(same)
    assert out[-2] == ("1 tuned (function, key) pairs over 3 plain, 3 profile, 3 dump runs: 1 chose one config "
                       "on every side, 0 did not")
    assert out[-1] == "program output: identical in every run"
    shifted = same[:6] + [_run("dump", "4") for _ in range(3)]
    out = bench.compare(shifted)
    (differ,) = [ln for ln in out if ln.startswith("DIFFER")]
    assert "dump {'num_warps: 4': 3}" in differ and "plain runs agree: yes" in differ
    assert "profile vs plain p = 1.000" in differ and "dump vs plain p = 0.1" in differ
    assert "program output differs from plain run 0 in: [('dump', 0), ('dump', 1), ('dump', 2)]" in out[-4]
    # (outputs that no plain run gave, against plain runs that may differ among themselves)
    assert out[-3] == "runs with an output line no plain run gave: profile 0 of 3, dump 3 of 3 (var_mean)"
    # (one line per side tested: the smallest p, and how often chance alone gives one below 0.05)
    assert out[-2].startswith("profile: smallest p 1.000 (var_mean_kernel) of 1 tuners tested")
    assert out[-1].startswith("dump: smallest p 0.1") and out[-1].endswith("p < 0.05 in 5% of such comparisons")


def test_runs_saved_by_several_calls_are_compared_together(tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text("import sys\nprint(open(sys.argv[1]).read().strip())\n")
    (tmp_path / "a.txt").write_text("out 1")
    for n in (1, 2):
        subprocess.run([sys.executable, str(REPO / "benchmarks" / "tuning_choices.py"), "--runs", "1",
                        "--sides", "plain", "--save", str(tmp_path / f"call{n}.jsonl"), "--", str(prog),
                        str(tmp_path / "a.txt")], check=True, capture_output=True, text=True)
    both = subprocess.run([sys.executable, str(REPO / "benchmarks" / "tuning_choices.py"), "--combine",
                           str(tmp_path / "call1.jsonl"), str(tmp_path / "call2.jsonl")],
                          check=True, capture_output=True, text=True)
    assert both.stdout.splitlines() == ["0 tuned (function, key) pairs over 2 plain runs: 0 chose one config "
                                        "on every side, 0 did not", "program output: identical in every run"]
