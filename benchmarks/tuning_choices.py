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

``--sides plain,profile,dump`` adds ``dump`` runs (a dump/run pair's choices are the dump's: the
run takes them from its tree). ``--save FILE`` appends each run as it ends; runs too many for one
call are split over several calls, each with its own file, and ``--combine FILE...`` compares
them together.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHOICE = re.compile(r"Triton autotuning for function (\S+?),?\s.*?(?:key(?: info)?:?|with key as) (.*?),?\s*"
                    r"(?:finished after [\d.]+s,?\s*)?best config selected: (.*?);", re.S)


SIDES = ("plain", "profile", "dump")


def one_run(argv: list[str], side: str, work: Path, profile_args: list[str] = (),
            triton_cache: Path | None = None) -> tuple[dict[tuple[str, str], str], list[str], int]:
    """(function, key) -> config chosen, the program's output lines (no autotuning prints), rc.
    ``side``: the program alone, under ``profile``, or under ``dump`` (whose choices a ``run``
    of its tree then takes as they are). ``triton_cache``: a compile cache shared with other
    runs (Triton's tuners keep no choices on disk, so every run still tunes)."""
    caches = {v: str(work / v.lower()) for v in ("TRITON_CACHE_DIR", "FLAGGEMS_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR")}
    if triton_cache is not None:
        caches["TRITON_CACHE_DIR"] = str(triton_cache)
    env = {**os.environ, **caches, "TRITON_PRINT_AUTOTUNING": "1", "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, *argv]
    if side == "profile":
        cmd = [sys.executable, "-m", "proton_inject.cli", "profile", "--no-report", "-o", str(work / "out"),
               *profile_args, "--", "python", *argv]
    elif side == "dump":
        cmd = [sys.executable, "-m", "proton_inject.cli", "dump", "-o", str(work / "dump"), "--", "python", *argv]
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


def record(side: str, choices: dict[tuple[str, str], str], lines: list[str], rc: int) -> dict:
    """One run as --save keeps it (a JSON line)."""
    return {"side": side, "rc": rc, "lines": lines, "choices": [[f, k, c] for (f, k), c in sorted(choices.items())]}


def compare(records: list[dict]) -> list[str]:
    """Per tuned (function, key): whether every side chose one config, and where not the
    configs each side chose and the permutation test of each side against plain; then whether
    the program's output lines differ from the first plain run's."""
    sides = [s for s in SIDES if any(r["side"] == s for r in records)]
    runs = {s: [{(f, k): c for f, k, c in r["choices"]} for r in records if r["side"] == s] for s in sides}
    keys = sorted({key for s in sides for run in runs[s] for key in run})
    out, differ = [], 0
    ps: dict[str, list] = {s: [] for s in sides if s != "plain"} if "plain" in sides else {}  # side -> (p, fn)
    for key in keys:
        # (a run that did not tune this key counts as its own choice, "-")
        chose = {s: [run.get(key, "-") for run in runs[s]] for s in sides}
        if len({c for s in sides for c in chose[s]}) == 1:
            continue
        differ += 1
        counts = " | ".join(f"{s} {dict(collections.Counter(chose[s]))}" for s in sides)
        for s in ps:
            ps[s].append((shift_p(chose["plain"], chose[s]), key[0]))
        tests = "; ".join(f"{s} vs plain p = {ps[s][-1][0]:.3f}" for s in ps)
        out.append(f"DIFFER {key[0]} [{key[1][:60]}]: {counts}; plain runs agree: "
                   f"{'yes' if len(set(chose.get('plain', []))) == 1 else 'no'}; {tests}")
    plain = [r for r in records if r["side"] == "plain"]
    ref = plain[0]["lines"] if plain else []
    out_diff = []
    for s in sides:
        for i, r in enumerate(x for x in records if x["side"] == s):
            if r["lines"] != ref:
                out_diff.append((s, i))
                a, b = next(((a, b) for a, b in zip(ref, r["lines"], strict=False) if a != b), ("", ""))
                out.append(f"output {s} run {i}: {b!r} (plain run 0: {a!r})")
    n = ", ".join(f"{len(runs[s])} {s}" for s in sides)
    out.append(f"{len(keys)} tuned (function, key) pairs over {n} runs: {len(keys) - differ} chose one config "
               f"on every side, {differ} did not")
    out.append("program output: identical in every run" if not out_diff else
               f"program output differs from plain run 0 in: {out_diff}")
    if out_diff and plain:  # (plain runs may differ among themselves: is a tool run's output one of theirs?)
        seen = {ln for r in plain for ln in r["lines"]}
        new = []
        for s in (x for x in sides if x != "plain"):
            runs_s = [r for r in records if r["side"] == s]
            odd = [{ln.split()[0] for ln in r["lines"] if ln not in seen} for r in runs_s]
            ops = sorted(set().union(*odd))
            new.append(f"{s} {sum(map(bool, odd))} of {len(runs_s)}" + (f" ({', '.join(ops)})" if ops else ""))
        out.append("runs with an output line no plain run gave: " + ", ".join(new))
    for s, found in ps.items():  # (many tuners: some small p by chance alone)
        if found:
            p, fn = min(found)
            out.append(f"{s}: smallest p {p:.3f} ({fn}) of {len(found)} tuners tested; by chance alone at least one "
                       f"p < 0.05 in {100 * (1 - 0.95 ** len(found)):.0f}% of such comparisons")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--sides", default="plain,profile", help="of plain, profile, dump; in turn each round")
    ap.add_argument("--profile-args", default="", help="more options for profile, one string ('--no-calibrate')")
    ap.add_argument("--warm-compile-cache", action="store_true",
                    help="one Triton compile cache for all runs (a user's warm cache: runs after the first "
                         "load their builds instead of compiling them); FlagGems' and Inductor's stay fresh")
    ap.add_argument("--save", type=Path, help="append each run to this file (JSON lines) as it ends")
    ap.add_argument("--combine", type=Path, nargs="+", metavar="FILE",
                    help="run nothing: compare the runs saved in these files (--save of several calls)")
    ap.add_argument("program", nargs=argparse.REMAINDER, help="-- script.py ARGS")
    args = ap.parse_args()
    if args.combine:
        records = [json.loads(ln) for f in args.combine for ln in f.read_text().splitlines() if ln.strip()]
        print("\n".join(compare(records)))
        return
    sides = [s.strip() for s in args.sides.split(",") if s.strip()]
    if not sides or any(s not in SIDES for s in sides):
        ap.error(f"--sides {args.sides}: name some of {', '.join(SIDES)}")
    argv = args.program[1:] if args.program[:1] == ["--"] else args.program
    root = Path(tempfile.mkdtemp(prefix="pi-tuning-"))
    records = []
    shared = root / "triton-shared" if args.warm_compile_cache else None
    for r in range(args.runs):
        for side in sides:
            t0 = time.perf_counter()
            choices, lines, rc = one_run(argv, side, root / f"{side}{r}", args.profile_args.split(), shared)
            print(f"run {r} {side}: exit {rc}, {len(choices)} choices, {len(lines)} output lines, "
                  f"{time.perf_counter() - t0:.0f} s",
                  file=sys.stderr, flush=True)
            for (fn, key), cfg in sorted(choices.items()):  # (each run's choices, as they come)
                print(f"  {side} {r} {fn} [{key[:40]}]: {cfg}", file=sys.stderr, flush=True)
            records.append(record(side, choices, lines, rc))
            if args.save:
                with open(args.save, "a") as f:
                    f.write(json.dumps(records[-1]) + "\n")
    print("\n".join(compare(records)))


if __name__ == "__main__":
    main()
