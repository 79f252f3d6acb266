"""Wall time of `proton-inject profile` against the plain program (issue 29, item 0).

Runs benchmarks/programs/autotuned.py (3 kernels, 10-12 autotune configs each) as a user
would, each run a fresh process, with its own Triton cache and proton-inject cache:

  plain cold    empty Triton cache
  plain warm    the same cache again (ROUNDS times, interleaved with profile warm)
  profile cold  empty Triton cache and empty proton-inject cache
  profile warm  both caches as the cold profile left them

and prints the ratios the issue asks for (profile cold / plain cold, profile warm / plain
warm, median and min..max over rounds), plus whether every output digest matched the plain
run's. --cprofile then runs one more warm plain run and warm profile, each under cProfile
(not counted in the times above), and writes both (top functions by cumulative and by own
time) into --out, so the two can be compared function by function.

    PYTHONPATH=. python benchmarks/profile_speed.py --out /tmp/speed [--rounds 3] [--cprofile]
    PYTHONPATH=. python benchmarks/profile_speed.py --out /tmp/speed --rounds 2 --one-cache \
        -- tests/gpu/programs/fla_prog.py   (another program: issue 40's fla goal)
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "benchmarks" / "programs" / "autotuned.py"

CPROFILE = """
import cProfile, os, pstats, runpy, sys
p = cProfile.Profile()
if sys.argv[1] == "profile":
    from proton_inject.cli import main
    sys.argv = ["proton-inject"] + sys.argv[1:]
    run = main
else:  # the plain program, as python would run it
    sys.argv = sys.argv[1:]
    run = lambda: runpy.run_path(sys.argv[0], run_name="__main__")
try:
    p.runcall(run)
except SystemExit:
    pass
with open(os.environ["PI_CPROFILE_TXT"], "w") as f:
    st = pstats.Stats(p, stream=f)
    st.sort_stats("cumulative").print_stats(60)
    st.sort_stats("tottime").print_stats(40)
"""


TIME_LINE = re.compile(r"proton-inject: time: (.*)")
TIME_PART = re.compile(r"([a-zA-Z][^,]*?) (\d+\.\d+) s")


def timed(cmd: list[str], env: dict[str, str], log, parts: list[dict[str, float]] | None = None
          ) -> tuple[float, list[str], int]:
    """Run ``cmd``; its wall, stdout lines and exit code. ``parts``: a profile's time line
    (what the command's own time went to, as it prints it) is appended there."""
    t = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    dt = time.perf_counter() - t
    log.write(f"$ {' '.join(cmd)}\n  {dt:.1f} s, exit {p.returncode}\n")
    err = p.stderr.strip().splitlines()
    log.write("".join(f"  | {line}\n" for line in err[-25:]))
    log.flush()
    if parts is not None:
        for line in err:
            if m := TIME_LINE.search(line):
                parts.append({name: float(s) for name, s in TIME_PART.findall(m.group(1))})
    return dt, p.stdout.splitlines(), p.returncode


def parts_line(parts: list[dict[str, float]]) -> str:
    """The median of each part of the time lines, in their order."""
    names = list(dict.fromkeys(n for p in parts for n in p))
    return ", ".join(f"{n} {statistics.median(p.get(n, 0.0) for p in parts):.2f} s" for n in names)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="directory for the log, outputs and cProfiles")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=20, help="launches of each kernel")
    ap.add_argument("--cprofile", action="store_true")
    ap.add_argument("--goal", type=float, default=1.2, help="the warm ratio's goal, printed beside it")
    ap.add_argument("--profile-args", default="", help="extra options for profile, one string")
    ap.add_argument("--one-cache", action="store_true",
                    help="plain and profile runs share one Triton cache, as a user's do (the profile's "
                         "tuning then finds the plain run's builds); default: a cache each")
    ap.add_argument("program", nargs=argparse.REMAINDER,
                    help="-- script.py ARGS (default: benchmarks/programs/autotuned.py ITERS)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="pi-speed-"))
    base = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    plain_env = {**base, "TRITON_CACHE_DIR": str(tmp / "triton-plain"), "XDG_CACHE_HOME": str(tmp / "xdg-plain")}
    prof_env = {**base, "TRITON_CACHE_DIR": str(tmp / ("triton-plain" if args.one_cache else "triton-prof")),
                "XDG_CACHE_HOME": str(tmp / "xdg-prof")}
    given = args.program[1:] if args.program[:1] == ["--"] else args.program
    prog = [sys.executable, *given] if given else [sys.executable, str(PROGRAM), str(args.iters)]
    cli = [sys.executable, "-m", "proton_inject.cli"]

    def profile_cmd(tag: str) -> list[str]:
        return ["profile", "-o", str(tmp / f"prof-{tag}"), "--no-report", *args.profile_args.split(), "--", *prog]

    def cprofiled(argv: list[str], env: dict[str, str], tag: str) -> tuple[list[str], dict[str, str]]:
        return [sys.executable, "-c", CPROFILE, *argv], {**env, "PI_CPROFILE_TXT": str(out / f"cprofile-{tag}.txt")}

    with open(out / "speed.log", "w") as log:
        cold_plain, ref, _ = timed(prog, plain_env, log)
        cold_prof, got, rc = timed([*cli, *profile_cmd("cold")], prof_env, log)
        plain_outs, prof_outs = [ref], [got]
        warm_plain, warm_prof, warm_parts = [], [], []
        for r in range(args.rounds):
            dt, o, _ = timed(prog, plain_env, log)
            warm_plain.append(dt)
            plain_outs.append(o)
            dt, o, rc = timed([*cli, *profile_cmd(f"warm{r}")], prof_env, log, warm_parts)
            warm_prof.append(dt)
            prof_outs.append(o)
        if args.cprofile:
            timed(*cprofiled(prog[1:], plain_env, "plain-warm"), log)
            timed(*cprofiled(profile_cmd("cprofile"), prof_env, "profile-warm"), log)
        # (the program computes the same bits whichever configs autotuning picks)
        same = [o == ref for o in prof_outs]
        plain_variants = len({tuple(o) for o in plain_outs})
        ratios = [p / q for p, q in zip(warm_prof, warm_plain, strict=True)]
        lines = [
            f"plain cold   {cold_plain:7.1f} s",
            f"profile cold {cold_prof:7.1f} s   ratio {cold_prof / cold_plain:.2f} (goal <= 2)",
            f"plain warm   {statistics.median(warm_plain):7.1f} s   ({min(warm_plain):.1f}..{max(warm_plain):.1f})",
            f"profile warm {statistics.median(warm_prof):7.1f} s   ({min(warm_prof):.1f}..{max(warm_prof):.1f})",
            f"warm ratio   {statistics.median(ratios):7.2f}     ({min(ratios):.2f}..{max(ratios):.2f}, "
            f"goal <= {args.goal:g})",
            f"warm profiles' own time, median: {parts_line(warm_parts) or 'no time line printed'}",
            f"profiles whose outputs equal the plain run's: {sum(same)}/{len(same)} "
            f"(plain runs gave {plain_variants} different output(s)); last profile exit {rc}",
        ]
        log.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
