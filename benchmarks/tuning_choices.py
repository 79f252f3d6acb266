"""Do autotuners choose under ``profile`` what they choose without it?

Runs a program N times plain and N times under ``proton-inject profile``, interleaved, each
run with fresh Triton, FlagGems and Inductor caches (so every run tunes) and
TRITON_PRINT_AUTOTUNING=1. From each run's output it reads every autotuner's choice (Triton's
and FlagGems' LibTuner print "Triton autotuning for function F ... best config selected: C")
and the program's own stdout (for the library programs in tests/gpu/programs: a sha256 per
op). Prints, per function and key, the configs each side chose and whether the two sides
agree, and whether the program's output lines differ.

A tuner whose plain runs do not agree among themselves (near-tied configs) cannot be held to
"the same choice as plain"; for those the question is whether the tool shifts the odds. Each
such tuner gets a permutation test: the distance between the two sides' distributions of
choices (half the sum of the differences of their shares) against the same distance with the
runs' sides shuffled (10,000 shuffles, fixed seed); p is the share of shuffles at least as far
apart. With many tuners some small p are expected by chance (about 1 in 20 below 0.05); a
tuner the tool shifts shows small p run after run. Take --runs 10 or more for it to mean much.

    PYTHONPATH=. python benchmarks/tuning_choices.py --runs 3 -- tests/gpu/programs/flaggems_ops.py --quick
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import re
import subprocess
import sys
import tempfile
from pathlib import Path

CHOICE = re.compile(r"Triton autotuning for function (\S+?),?\s.*?(?:key(?: info)?:?|with key as) (.*?),?\s*"
                    r"(?:finished after [\d.]+s,?\s*)?best config selected: (.*?);", re.S)


def one_run(argv: list[str], profiled: bool, work: Path, profile_args: list[str] = ()
            ) -> tuple[dict[tuple[str, str], str], list[str], int]:
    """(function, key) -> config chosen, the program's output lines (no autotuning prints), rc."""
    caches = {v: str(work / v.lower()) for v in ("TRITON_CACHE_DIR", "FLAGGEMS_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR")}
    env = {**os.environ, **caches, "TRITON_PRINT_AUTOTUNING": "1", "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, *argv]
    if profiled:
        cmd = [sys.executable, "-m", "proton_inject.cli", "profile", "--no-report", "-o", str(work / "out"),
               *profile_args, "--", "python", *argv]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    # (a program may send a library's prints to stderr, keeping stdout for its results)
    choices = {(f, k.strip()): c.strip() for f, k, c in CHOICE.findall(p.stdout + "\n" + p.stderr)}
    lines = [ln for ln in CHOICE.sub("", p.stdout).splitlines()
             if ln.strip() and not ln.startswith(("with key as", "finished after", "best config"))]
    return choices, lines, p.returncode


def shift_p(plain: list[str], profiled: list[str], shuffles: int = 10_000, seed: int = 0) -> float:
    """The permutation test's p for "the two sides' choices come from one distribution"."""
    def distance(a: list[str], b: list[str]) -> float:
        ca, cb = collections.Counter(a), collections.Counter(b)
        return sum(abs(ca[k] / len(a) - cb[k] / len(b)) for k in set(ca) | set(cb)) / 2

    seen = distance(plain, profiled)
    runs, rng, n = plain + profiled, random.Random(seed), len(plain)
    far = 0
    for _ in range(shuffles):
        rng.shuffle(runs)
        far += distance(runs[:n], runs[n:]) >= seen - 1e-12
    return far / shuffles


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--profile-args", default="", help="more options for profile, one string ('--no-calibrate')")
    ap.add_argument("program", nargs=argparse.REMAINDER, help="-- script.py ARGS")
    args = ap.parse_args()
    argv = args.program[1:] if args.program[:1] == ["--"] else args.program
    root = Path(tempfile.mkdtemp(prefix="pi-tuning-"))
    seen: dict[str, dict[tuple[str, str], collections.Counter]] = {"plain": {}, "profile": {}}
    by_run: dict[str, list[dict[tuple[str, str], str]]] = {"plain": [], "profile": []}
    outputs: dict[str, list[list[str]]] = {"plain": [], "profile": []}
    for r in range(args.runs):
        for side in ("plain", "profile"):
            choices, lines, rc = one_run(argv, side == "profile", root / f"{side}{r}", args.profile_args.split())
            print(f"run {r} {side}: exit {rc}, {len(choices)} choices, {len(lines)} output lines",
                  file=sys.stderr, flush=True)
            for (fn, key), cfg in sorted(choices.items()):  # (each run's choices, as they come)
                print(f"  {side} {r} {fn} [{key[:40]}]: {cfg}", file=sys.stderr, flush=True)
            for key, cfg in choices.items():
                seen[side].setdefault(key, collections.Counter())[cfg] += 1
            outputs[side].append(lines)
            by_run[side].append(choices)
    keys = sorted(set(seen["plain"]) | set(seen["profile"]))
    differ = 0
    for key in keys:
        plain, prof = seen["plain"].get(key, {}), seen["profile"].get(key, {})
        same = set(plain) == set(prof) and len(plain) == 1
        differ += not same
        if not same:
            # (a run that did not tune this key counts as its own choice, "-")
            sides = [[run.get(key, "-") for run in by_run[side]] for side in ("plain", "profile")]
            print(f"DIFFER {key[0]} [{key[1][:60]}]: plain {dict(plain)} | profile {dict(prof)}; "
                  f"plain runs agree: {'yes' if len(set(sides[0])) == 1 else 'no'}; "
                  f"shift p = {shift_p(*sides):.3f}")
    ref = outputs["plain"][0]
    out_diff = [(side, i) for side in outputs for i, lines in enumerate(outputs[side]) if lines != ref]
    for side, i in out_diff:
        for a, b in zip(ref, outputs[side][i], strict=False):
            if a != b:
                print(f"output {side} run {i}: {b!r} (plain run 0: {a!r})")
    print(f"{len(keys)} tuned (function, key) pairs over {args.runs} plain and {args.runs} profiled runs: "
          f"{len(keys) - differ} chose one config on both sides, {differ} did not")
    print("program output: identical in every run" if not out_diff else
          f"program output differs from plain run 0 in: {out_diff}")


if __name__ == "__main__":
    main()
