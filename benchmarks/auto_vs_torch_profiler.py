"""On a GPU: `profile --auto` against torch.profiler on the same programs, side by side.

For each program (a torch.compile'd transformer block, tests/gpu/programs/inductor_prog.py;
a Liger-Kernel training step, benchmarks/programs/liger_step.py), in one benchmark run, each
run a fresh process sharing one Triton and Inductor cache, in this order:

  warm-up         the program once, plain: it compiles and tunes into the caches, so later
                  plain runs launch no tuning (--auto compiles with Inductor's caches off and
                  does not count its tuners' launches);
  torch.profiler  the program under ``torch.profiler`` (CUDA activity; this file with
                  --torch-trace runs it), its Chrome trace read back: each kernel's GPU time
                  is the sum of its "kernel" events (memcpy/memset left out);
  first           ``profile --auto`` once with the tool's caches empty (XDG_CACHE_HOME in
                  the work folder): every Triton kernel compiled instrumented, the GPU
                  calibrated, as a user's first --auto of the program;
  overhead        ``profile --auto --measure-overhead`` once: run.json's measured_overhead
                  (instrumented/plain kernel time of alternated launches, in one run);
  wall            ROUNDS times in turn: the plain program, then ``profile --auto``; the
                  auto.json of these runs gives the shares and the region coverage;
  alternated      only where an opened-up kernel has no in-run pairs (Inductor launches its
                  kernels without the JIT: --measure-overhead cannot alternate them): the
                  --auto's rules again for the picked kernels (``profile --kernel-scope --loops
                  both --kernel`` the picked names, ``--keep-launches`` ALTERNATE: every second
                  launch kept, the others run the plain twin) under torch.profiler; in that one
                  run, the kept launches' median over the plain launches' median (in-run). Where
                  the trace's launches cannot be told apart so (its count differs from the
                  tool's, or the kernel has more than one instrumented build), the kernel's median
                  launch there over its median in the plain trace, in two processes (cross-run).

Kernel time is given two ways: per instrumented launch (the in-run or cross-run ratio above)
and over all of an opened-up kernel's launches: its GPU time in the --auto runs (torch.profiler
there too; the launches not kept run its plain twin) over the plain trace's, in two processes.

Names are matched exactly (a Triton kernel's name is its cubin's entry, which CUPTI reports
as is); a torch.profiler name that does not match is tried bare (no ``void``, namespace,
template, parameter list or older Triton's specialization suffix such as ``_0d1d2de``).
Shares are compared over the kernels both sides saw (since 2026-11-29 --auto times every
kernel with torch.profiler too, so nearly all; before, only Triton's): the rest's
part of all kernel time is printed, and the kernels --auto opened up are also set against all
of it. --auto's share
is the median over the rounds, its diff's spread the rounds' min..max; torch.profiler's side
is one run. --auto-share 1.0 --auto-top 3 by default (the goals' top 3 opened up).

    PYTHONPATH=. python benchmarks/auto_vs_torch_profiler.py [--rounds 3] [--programs inductor,liger]

Needs a CUDA GPU, and liger_kernel for the Liger program; the runs and log.txt stay in --work.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # (run from a checkout: the package need not be installed)
PROGRAMS = {
    "inductor": [REPO / "tests" / "gpu" / "programs" / "inductor_prog.py", "--mode", "default", "--iters", "20"],
    "liger": [REPO / "benchmarks" / "programs" / "liger_step.py", "--steps", "20"],
}
GOAL_HELD, GOAL_POINTS, GOAL_COVERED, GOAL_RATIO = 0.80, 5.0, 0.90, 1.05
ROWS_SHOWN = 12


# --- torch.profiler's side ---------------------------------------------------------------

def run_under_torch_profiler(trace: Path, argv: list[str]) -> int:
    """Run the program ``argv`` (a script and its arguments) as ``python`` would, under
    torch.profiler with CUDA activity; write its Chrome trace to ``trace``; its exit code."""
    import runpy

    import torch
    from torch.profiler import ProfilerActivity, profile

    sys.argv = [str(a) for a in argv]
    sys.path.insert(0, str(Path(argv[0]).resolve().parent))
    code = 0
    gpu = torch.cuda.is_available()  # (without one: CPU activity, for the runner's own test)
    with profile(activities=[ProfilerActivity.CUDA if gpu else ProfilerActivity.CPU]) as prof:
        try:
            runpy.run_path(sys.argv[0], run_name="__main__")
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
        if gpu:
            torch.cuda.synchronize()
    prof.export_chrome_trace(str(trace))
    return code


def kernel_times(trace: dict[str, Any]) -> dict[str, list[float]]:
    """Per kernel name in a torch.profiler Chrome trace: its launches' GPU durations (ns), in
    the order they ran."""
    events = [e for e in trace.get("traceEvents", []) if e.get("cat") == "kernel" and e.get("ph") == "X"]
    out: dict[str, list[float]] = {}
    for e in sorted(events, key=lambda e: float(e.get("ts", 0))):
        out.setdefault(e["name"], []).append(1000.0 * float(e["dur"]))  # (us in the trace)
    return out


# An argument-specialization suffix older Triton versions appended to a kernel's entry name
# (``triton_poi_fused_gelu_6_0d1d``): letters after digits, never Inductor's plain ``_6``.
_SPECIALIZATION = re.compile(r"_(?:\d+[a-z]+)+$")


def bare_name(name: str) -> str:
    """A CUPTI kernel name without ``void``, its parameter list, template arguments,
    namespace and specialization suffix: ``void at::native::foo<float>(int)`` -> ``foo``,
    ``add_kernel_0d1d2de`` -> ``add_kernel``."""
    s = name.strip()
    s = s.removeprefix("void ").strip()
    s = s.split("(", 1)[0]
    s = s.split("<", 1)[0]
    return _SPECIALIZATION.sub("", s.rsplit("::", 1)[-1].strip())


def match_names(profiler_names: list[str], ours: list[str]) -> tuple[dict[str, str], list[str], list[str]]:
    """torch.profiler name -> our kernel name, exactly or else bare; and the names left
    unmatched on each side (torch.profiler's, ours)."""
    mine = set(ours)
    got: dict[str, str] = {}
    for n in profiler_names:
        if n in mine:
            got[n] = n
        elif bare_name(n) in mine:
            got[n] = bare_name(n)
    return got, sorted(n for n in profiler_names if n not in got), sorted(mine - set(got.values()))


# --- the comparison ---------------------------------------------------------------------

def times_by_kernel(profiler: dict[str, list[float]], ours: list[str]) -> dict[str, list[float]]:
    """torch.profiler's launch times gathered under our kernel names (matched names only)."""
    got: dict[str, list[float]] = {}
    for n, mine in match_names(sorted(profiler), ours)[0].items():
        got.setdefault(mine, []).extend(profiler[n])
    return got


@dataclass
class Row:
    """One kernel both sides saw."""

    kernel: str
    profiler_ns: float
    profiler_launches: int
    share_all: float  # of all torch.profiler kernel time
    share_seen: float  # of torch.profiler's time in the kernels both saw
    auto_shares: list[float]  # over the kernels both saw, one per --auto run
    auto_launches: int
    picked: bool
    auto_ns: list[float] = field(default_factory=list)  # its GPU time in each --auto run (measured there)
    covered: float | None = None  # the printed top-level regions' time / the kernel region's
    unattributed: float | None = None
    ratio: tuple[float, float, float, int, str] | None = None  # median, p10, p90, n, how

    @property
    def diff_points(self) -> list[float]:
        return [100.0 * (a - self.share_seen) for a in self.auto_shares]

    @property
    def all_launches_ratio(self) -> float | None:
        """The kernel's GPU time over all its launches under --auto (median of the runs) over
        plain's, both timed by torch.profiler, in two processes: what its kept launches' records
        cost the program (launches not kept run its plain twin). None unless both saw as many
        launches (--auto's timer stops at the keep policy's total)."""
        if not self.auto_ns or self.auto_launches != self.profiler_launches or not self.profiler_ns:
            return None
        return statistics.median(self.auto_ns) / self.profiler_ns


@dataclass
class Comparison:
    rows: list[Row]  # by torch.profiler time, longest first
    profiler_total_ns: float
    unmatched_profiler: list[str]
    unmatched_profiler_ns: float
    unmatched_auto: list[str]
    held_picked: float  # torch.profiler's time in the kernels --auto opened up / all of it
    held_ranked: float  # ... in every kernel --auto ranked
    notes: list[str] = field(default_factory=list)
    # in_run_whole's: the program's kernel time over plain per --auto run, and each kernel's
    in_run_program: list[float] = field(default_factory=list)
    in_run_kernels: dict[str, list[float]] = field(default_factory=dict)
    in_run_unmeasured: int = 0


def coverage(hot: dict[str, Any]) -> tuple[float | None, float | None]:
    """A hot kernel of auto.json: the share of its kernel region's time its top-level regions
    hold (as printed; all of it in a kernel without loops, whose kernel region is its finest),
    and the unattributed share --auto printed."""
    root = next((r for r in hot["regions"] if r["kind"] == "kernel"  # (no kind: a report of an older run)
                 or (r["kind"] is None and r["parent"] is None and r["name"] == "kernel")), None)
    if root is None or not hot["kernel_ns"]:
        return None, hot["unattributed_share"]
    tops = [r["ns_total"] for r in hot["regions"] if r["parent"] == root["scope"]]
    return (sum(tops) / hot["kernel_ns"] if tops else 1.0), hot["unattributed_share"]


def compare(profiler: dict[str, list[float]], autos: list[dict[str, Any]]) -> Comparison:
    """torch.profiler's kernel times against one or more auto.json documents of the program
    (the last gives the picks and regions)."""
    doc = autos[-1]
    ranked = {k["kernel"]: k for k in doc["kernels"]}
    _, left_profiler, left_auto = match_names(sorted(profiler), sorted(ranked))
    total = sum(sum(v) for v in profiler.values())
    tp = times_by_kernel(profiler, sorted(ranked))
    seen = sum(sum(v) for v in tp.values())
    per_run, measured = [], []
    for a in autos:
        est = {k["kernel"]: k["est_gpu_ns"] or 0.0 for k in a["kernels"] if k["kernel"] in tp}
        s = sum(est.values())
        per_run.append({k: v / s if s else 0.0 for k, v in est.items()})
        measured.append({k["kernel"]: k["est_gpu_ns"] for k in a["kernels"] if k.get("measured")})
    hot = {h["kernel"]: h for h in doc["hot"]}
    rows = []
    for k, times in sorted(tp.items(), key=lambda kv: -sum(kv[1])):
        row = Row(kernel=k, profiler_ns=sum(times), profiler_launches=len(times), share_all=sum(times) / total,
                  share_seen=sum(times) / seen if seen else 0.0, auto_shares=[r.get(k, 0.0) for r in per_run],
                  auto_launches=ranked[k]["launches_seen"], picked=ranked[k]["top"],
                  auto_ns=[m[k] for m in measured if m.get(k)])
        if k in hot:
            row.covered, row.unattributed = coverage(hot[k])
        rows.append(row)
    picked = sum(r.profiler_ns for r in rows if r.picked)
    return Comparison(rows=rows, profiler_total_ns=total, unmatched_profiler=left_profiler,
                      unmatched_profiler_ns=sum(sum(profiler[n]) for n in left_profiler),
                      unmatched_auto=left_auto, held_picked=picked / total if total else 0.0,
                      held_ranked=seen / total if total else 0.0)


def _spread(values: list[float]) -> tuple[float, float, float]:
    """Median, 10th and 90th percentile (nearest rank)."""
    v = sorted(values)
    return statistics.median(v), v[int(0.1 * (len(v) - 1))], v[int(round(0.9 * (len(v) - 1)))]


def _measured(run_json: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """run.json's measured_overhead entries with pairs: (kernel, entry)."""
    from proton_inject.formats.run_index import read_indexes

    for doc in read_indexes([run_json], '"measured_overhead"'):
        for name, m in (doc.get("measured_overhead") or {}).items():
            if isinstance(m, dict) and m.get("pairs") and "ratio" in m:
                yield name, m


def measured_ratios(run_json: Path) -> dict[str, tuple[float, float, float, int, str]]:
    """run.json's measured_overhead: per kernel with pairs, (ratio, p10, p90, pairs, "in-run")."""
    return {name: (m["ratio"], m["p10"], m["p90"], m["pairs"], "in-run") for name, m in _measured(run_json)}


def measured_extra_ns(run_json: Path) -> dict[str, float]:
    """run.json's measured_overhead: per kernel with pairs, what the records added to a launch
    (instrumented - plain, median over the pairs), ns."""
    return {name: 1000.0 * m["extra_us"] for name, m in _measured(run_json) if "extra_us" in m}


def in_run_whole(autos: list[dict[str, Any]], extra_ns: dict[str, float]
                 ) -> tuple[list[float], dict[str, list[float]], int]:
    """Kernel time under each --auto run over what it would be plain, in that run: its
    torch.profiler time T against T less each kept launch's measured extra (the kept launches
    ran instrumented; the rest ran plain twins). The whole program's (over every kernel timed),
    one per run; each instrumented kernel's with an extra measured; and the most kept launches
    of one run whose kernel had none measured (launched too few times: left out of T's extra)."""
    program: list[float] = []
    per_kernel: dict[str, list[float]] = {}
    unmeasured = 0
    for a in autos:
        unmeasured = max(unmeasured, sum(k["launches_kept"] for k in a["kernels"]
                                         if k["instrumented"] and k["kernel"] not in extra_ns))
        timed = [k for k in a["kernels"] if k.get("measured") and k["est_gpu_ns"]]
        total = sum(k["est_gpu_ns"] for k in timed)
        added = 0.0
        for k in timed:
            if k["instrumented"] and k["kernel"] in extra_ns:
                extra = k["launches_kept"] * extra_ns[k["kernel"]]
                added += extra
                if k["est_gpu_ns"] > extra:
                    per_kernel.setdefault(k["kernel"], []).append(k["est_gpu_ns"] / (k["est_gpu_ns"] - extra))
        if total > added and extra_ns:
            program.append(total / (total - added))
    return program, per_kernel, unmeasured


# The detailed run's keep policy: launches 2, 4, 6, ... of each build kept (instrumented), the
# others its plain twin, so each kept launch sits between two plain ones of the same kernel.
ALTERNATE = "first=0,every=2,max=none"


def alternated(times: dict[str, list[float]], run_json: Path) -> tuple[dict[str, tuple], dict[str, float], list[str]]:
    """The detailed run's (ALTERNATE) in-run kernel time per kernel: ``times`` its launches in
    order (``times_by_kernel`` of its trace), the even-numbered instrumented, the odd its plain
    twin; the first pair left out (module loading). Per kernel: (kept median / plain median,
    kept 10th and 90th percentile over the plain median, pairs, "in-run") and the extra a launch
    (kept - plain median, ns); and a note for each kernel whose launches cannot be told apart
    so: the trace saw a different count from the tool's, or the tool kept other than every
    second one, or it has more than one instrumented build (each counts its own launches), or
    no plain twin (its launches not kept ran instrumented too)."""
    from proton_inject.formats.run_index import read_indexes

    docs = list(read_indexes([run_json], '"launch_counts"')) if run_json.is_file() else []
    if not docs:
        return {}, {}, [f"{run_json}: no run index: the detailed run's launches not split"]
    doc = docs[0]
    counts = doc.get("launch_counts") or {}
    kept = collections.Counter(launch["kernel"] for launch in doc.get("launches") or [])
    builds = collections.Counter(c["kernel"] for c in (doc.get("compiled") or {}).values() if c.get("instrumented"))
    ratios: dict[str, tuple] = {}
    extra: dict[str, float] = {}
    notes: list[str] = []
    for kernel, ns in sorted(times.items()):
        n = len(ns)
        no_twin = any(str(m).startswith(f"note: kernel {kernel}: no plain twin") for m in doc.get("messages") or [])
        why = (f"the trace saw {n} launches, the tool {counts.get(kernel)}" if counts.get(kernel) != n
               else f"{builds.get(kernel, 0)} instrumented builds" if builds.get(kernel) != 1
               else "no plain twin" if no_twin
               else f"{kept.get(kernel, 0)} launches kept of {n}" if kept.get(kernel) != n // 2
               else "too few launches" if n < 6 else None)
        if why:
            notes.append(f"{kernel}: launches not split in-run ({why})")
            continue
        inst, plain = ns[3::2], ns[2::2]  # (1-based launches 4, 6, ... kept; 3, 5, ... plain)
        base = statistics.median(plain)
        med, lo, hi = _spread(inst)
        ratios[kernel] = (med / base, lo / base, hi / base, min(len(inst), len(plain)), "in-run")
        extra[kernel] = med - base
    return ratios, extra, notes


def cross_run_ratio(plain: list[float], instrumented: list[float]) -> tuple[float, float, float, int, str]:
    """Instrumented launches' median time over the plain launches' median, with the 10th and
    90th percentile of the instrumented launches over the same plain median."""
    base = statistics.median(plain)
    med, lo, hi = _spread(instrumented)
    return med / base, lo / base, hi / base, len(instrumented), "cross-run"


# --- printing ---------------------------------------------------------------------------

def _short(name: str, width: int = 42) -> str:
    return name if len(name) <= width else name[:width - 13] + "~" + name[-12:]


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def format_comparison(program: str, c: Comparison) -> list[str]:
    """The table of one program, and the goal lines under it."""
    head = (f"{'kernel':<44} {'tp ms':>7} {'tp/all':>6} {'tp/seen':>7} {'auto':>6} {'diff pts':>20} {'launches':>11} "
            f"{'covered':>7} {'unattr':>6}  kernel time x")
    out = [f"== {program}: {c.profiler_total_ns / 1e6:,.3f} ms of kernel time under torch.profiler; "
           f"{100 * c.held_ranked:.1f}% of it in the {len(c.rows)} kernel(s) both saw", head]
    shown = c.rows[:ROWS_SHOWN] + [r for r in c.rows[ROWS_SHOWN:] if r.picked]  # (the opened-up ones always)
    for r in shown:
        d = r.diff_points
        dm = statistics.median(d)
        diff = f"{dm:+.1f}" + (f" ({min(d):+.1f}..{max(d):+.1f})" if len(d) > 1 else "")
        ratio = "-" if r.ratio is None else f"{r.ratio[0]:.3f} ({r.ratio[1]:.2f}..{r.ratio[2]:.2f}, {r.ratio[4]})"
        name = _short(r.kernel) + (" *" if r.picked else "")
        out.append(f"{name:<44} {r.profiler_ns / 1e6:>7.3f} {_pct(r.share_all):>6} {_pct(r.share_seen):>7} "
                   f"{_pct(statistics.median(r.auto_shares)):>6} {diff:>20} "
                   f"{r.profiler_launches:>5}/{r.auto_launches:<5} {_pct(r.covered):>7} {_pct(r.unattributed):>6}  "
                   f"{ratio}".rstrip())
    if len(c.rows) > len(shown):
        rest = [r for r in c.rows if r not in shown]
        out.append(f"  ({len(rest)} more, {100 * sum(r.share_all for r in rest):.1f}% of all kernel time)")
    out.append(f"  * opened up by --auto: hold {100 * c.held_picked:.1f}% of all kernel time "
               f"({'meets' if c.held_picked >= GOAL_HELD else 'misses'} >= {100 * GOAL_HELD:.0f}%); "
               f"every kernel --auto ranked: {100 * c.held_ranked:.1f}%")
    worst = max((abs(statistics.median(r.diff_points)) for r in c.rows), default=0.0)
    covered = [r.covered for r in c.rows if r.picked and r.covered is not None]
    ratios = [r.ratio[0] for r in c.rows if r.picked and r.ratio is not None]
    cover_ok = bool(covered) and min(covered) >= GOAL_COVERED
    ratio_ok = "not measured" if not ratios else "yes" if max(ratios) <= GOAL_RATIO else "no"
    whole = [(r, r.all_launches_ratio) for r in c.rows if r.picked]
    whole_ok = ("not measured" if not whole or any(x is None for _, x in whole)
                else "yes" if max(x for _, x in whole) <= GOAL_RATIO else "no")
    if c.rows:
        out.append(f"  goals: shares within {GOAL_POINTS:g} pts: {'yes' if worst <= GOAL_POINTS else 'no'} "
                   f"(worst {worst:.1f}); regions cover >= {100 * GOAL_COVERED:.0f}%: {'yes' if cover_ok else 'no'} "
                   f"(least {_pct(min(covered, default=None))}, the rest printed as unattributed)")
        prog = c.in_run_program
        in_run_ok = "not measured" if not prog else "yes" if max(prog) <= GOAL_RATIO else "no"
        out.append(f"  goal kernel time <= {GOAL_RATIO}x: per instrumented launch {ratio_ok}, "
                   f"over all launches {whole_ok} (cross-run), the program's {in_run_ok} (in-run)")
        out.append("  opened up, GPU time over all launches, --auto / plain (cross-run): " + (", ".join(
            f"{_short(r.kernel, 30)} {'-' if x is None else f'{x:.3f}x'}" for r, x in whole) or "none"))
        if prog:
            med, lo, hi = _spread(prog)
            opened = ", ".join(f"{_short(r.kernel, 30)} {statistics.median(c.in_run_kernels[r.kernel]):.4f}x"
                               for r in c.rows if r.picked and c.in_run_kernels.get(r.kernel))
            out.append(f"  in-run (each kept launch less its measured extra): the program's kernel time "
                       f"{med:.4f}x ({lo:.4f}..{hi:.4f}); opened up: {opened or 'none'}"
                       + (f"; {c.in_run_unmeasured} kept launches of kernels with no extra measured left out"
                          if c.in_run_unmeasured else ""))
    else:
        out.append("  goals: not measured: no kernel both sides saw")
    left = ", ".join(_short(n, 40) for n in c.unmatched_profiler[:3])
    left += " ..." if len(c.unmatched_profiler) > 3 else ""
    out.append(f"  torch.profiler only: {len(c.unmatched_profiler)} kernel(s), "
               f"{100 * c.unmatched_profiler_ns / c.profiler_total_ns if c.profiler_total_ns else 0:.1f}% "
               f"of kernel time ({left or 'none'})")
    out.append(f"  --auto only (no torch.profiler name matched): {', '.join(c.unmatched_auto) or 'none'}")
    out += [f"  note: {n}" for n in c.notes]
    return out


def wall_line(plain: list[float], auto: list[float], same_stdout: bool, first: float | None = None) -> str:
    """The program's wall time under --auto against plain, over runs taken in turn; ``first``:
    the first --auto's, with the tool's build cache empty (every kernel compiled instrumented)."""
    med, lo, hi = _spread([a / p for a, p in zip(auto, plain, strict=True)])
    line = (f"  wall: plain {statistics.median(plain):.1f} s, --auto {statistics.median(auto):.1f} s: "
            f"x{med:.2f} ({lo:.2f}..{hi:.2f}), {len(plain)} runs each in turn; "
            f"stdout as plain: {'yes' if same_stdout else 'NO'}")
    if first is not None:
        line += f"; the first --auto (build cache empty) {first:.1f} s: x{first / statistics.median(plain):.2f}"
    return line


# --- running ----------------------------------------------------------------------------

class Runner:
    """Runs the commands of one benchmark run in ``work``, with one Triton and Inductor cache,
    and logs each (command, seconds, exit code, the tail of its stderr)."""

    def __init__(self, work: Path, rules: list[str]) -> None:
        self.work = work
        self.rules = rules  # (what --auto's runs and the detailed run add: --sample-ctas N)
        self.log = open(work / "log.txt", "a")  # noqa: SIM115  (open for the whole run)
        path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
        self.env = {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1",
                    "TRITON_CACHE_DIR": str(work / "triton-cache"),
                    "TORCHINDUCTOR_CACHE_DIR": str(work / "inductor-cache"),
                    "XDG_CACHE_HOME": str(work / "xdg")}  # (the tool's build cache: empty at first)

    def __call__(self, cmd: list[Any]) -> tuple[float, str, int]:
        cmd = [str(c) for c in cmd]
        t = time.perf_counter()
        p = subprocess.run(cmd, cwd=self.work, env=self.env, capture_output=True, text=True)
        dt = time.perf_counter() - t
        err = p.stderr.splitlines()
        timed = [ln for ln in err[:-30] if ln.startswith("proton-inject: time:")]  # (the tool's parts)
        self.log.write(f"$ {' '.join(cmd)}\n  {dt:.1f} s, exit {p.returncode}\n"
                       + "".join(f"  | {ln}\n" for ln in timed + err[-30:]))
        self.log.flush()
        # (as it goes: a run cut off at a time limit still shows where its time went)
        what = " ".join(Path(c).name if "/" in c else c for c in cmd[1:6])
        print(f"  {dt:6.1f} s, exit {p.returncode}: {what}", file=sys.stderr, flush=True)
        return dt, p.stdout, p.returncode

    def auto(self, out: Path, prog: list[str], share: float, top: int, *extra: str) -> tuple[float, str, int]:
        return self([sys.executable, "-m", "proton_inject.cli", "profile", "--auto", "--auto-share", share,
                     "--auto-top", top, *self.rules, *extra, "-o", out, "--", "python", *prog])


def bench_program(name: str, prog: list[str], run: Runner, rounds: int, share: float, top: int) -> list[str]:
    """Every run of one program, then its table."""
    from proton_inject.formats.auto_report import AUTO_FILE
    from proton_inject.formats.patterns import exact_names

    w = run.work
    run([sys.executable, *prog])  # compile and tune into the caches: later plain runs launch no tuning
    trace = w / f"{name}-plain.trace.json"
    _, _, rc = run([sys.executable, __file__, "--torch-trace", trace, "--", *prog])
    if rc != 0 or not trace.is_file():
        return [f"== {name}: the program failed under torch.profiler (exit {rc}): see {run.log.name}"]
    profiler = kernel_times(json.loads(trace.read_text()))

    first, _, rc = run.auto(w / f"{name}-first", prog, share, top)  # (the build cache is empty)
    first_s = first if rc == 0 else None
    _, _, rc = run.auto(w / f"{name}-measured", prog, share, top, "--measure-overhead")
    ratios = measured_ratios(w / f"{name}-measured" / "run.json") if rc == 0 else {}
    extra_ns = measured_extra_ns(w / f"{name}-measured" / "run.json") if rc == 0 else {}
    notes = [] if rc == 0 else [f"--measure-overhead run exited {rc}"]

    plain_s, auto_s, autos, same = [], [], [], True
    for i in range(rounds):
        dt, plain_out, rc = run([sys.executable, *prog])
        dt_auto, auto_out, rc_auto = run.auto(w / f"{name}-auto{i}", prog, share, top)
        doc = w / f"{name}-auto{i}" / AUTO_FILE
        if rc != 0 or rc_auto != 0 or not doc.is_file():
            return [f"== {name}: round {i}: plain exit {rc}, --auto exit {rc_auto}: see {run.log.name}"]
        plain_s.append(dt)
        auto_s.append(dt_auto)
        same = same and auto_out == plain_out
        autos.append(json.loads(doc.read_text()))
    c = compare(profiler, autos)
    c.notes = notes
    for r in c.rows:
        r.ratio = ratios.get(r.kernel)

    picked = [k["kernel"] for k in autos[-1]["kernels"] if k["top"]]
    if any(r.picked and r.ratio is None for r in c.rows):  # (--auto's rules again, the picked kernels)
        again = w / f"{name}-detail.trace.json"
        _, _, rc = run([sys.executable, "-m", "proton_inject.cli", "profile", "--kernel-scope", "--loops", "both",
                        *run.rules, "--kernel", exact_names(picked), "--keep-launches", ALTERNATE, "--no-report",
                        "-o", w / f"{name}-detail", "--", "python", __file__, "--torch-trace", again, "--", *prog])
        if rc == 0 and again.is_file():
            plain = times_by_kernel(profiler, picked)
            inst = times_by_kernel(kernel_times(json.loads(again.read_text())), picked)
            split, split_extra, split_notes = alternated(inst, w / f"{name}-detail" / "run.json")
            c.notes += split_notes
            extra_ns = {**split_extra, **extra_ns}  # (--measure-overhead's own pairs first)
            for r in c.rows:
                if r.picked and r.ratio is None:
                    r.ratio = split.get(r.kernel) or (cross_run_ratio(plain[r.kernel], inst[r.kernel])
                                                      if plain.get(r.kernel) and inst.get(r.kernel) else None)
        else:
            c.notes.append(f"the detailed run under torch.profiler failed (exit {rc})")
    c.in_run_program, c.in_run_kernels, c.in_run_unmeasured = in_run_whole(autos, extra_ns)
    return format_comparison(name, c) + [wall_line(plain_s, auto_s, same, first_s)]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--torch-trace"]:  # (this file as the program's runner, below)
        rest = argv[2:]
        return run_under_torch_profiler(Path(argv[1]), rest[1:] if rest[:1] == ["--"] else rest)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="plain and --auto wall-time runs in turn (3)")
    ap.add_argument("--programs", default=",".join(PROGRAMS), help=f"some of {','.join(PROGRAMS)}")
    ap.add_argument("--auto-share", type=float, default=1.0, help="--auto's option (1.0: open the top ones)")
    ap.add_argument("--auto-top", type=int, default=3, help="--auto's option (3: the goal's top 3)")
    ap.add_argument("--sample-ctas", type=int, help="--auto's option (default: --auto's own)")
    ap.add_argument("--work", type=Path, help="the runs, traces and log.txt go here (default: a new "
                                              "temporary folder, kept)")
    args = ap.parse_args(argv)
    names = [n for n in args.programs.split(",") if n]
    if args.rounds < 1 or any(n not in PROGRAMS for n in names):
        ap.error(f"--rounds 1 or more; --programs among {','.join(PROGRAMS)}")

    import torch

    if not torch.cuda.is_available():
        print("auto_vs_torch_profiler: needs a CUDA GPU", file=sys.stderr)
        return 2
    work = (args.work or Path(tempfile.mkdtemp(prefix="auto-vs-tp-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    run = Runner(work, [] if args.sample_ctas is None else ["--sample-ctas", str(args.sample_ctas)])
    print(f"profile --auto --auto-share {args.auto_share:g} --auto-top {args.auto_top} against torch.profiler "
          f"on {torch.cuda.get_device_name()}\n(tp/all: torch.profiler's share of all kernel time; tp/seen, auto: "
          "shares of the kernels both saw; diff: auto - tp/seen, points; launches: tp/auto)")
    t0 = time.perf_counter()
    for n in names:
        t = time.perf_counter()
        lines = bench_program(n, [str(a) for a in PROGRAMS[n]], run, args.rounds, args.auto_share, args.auto_top)
        print("\n".join(lines) + f"\n  ({n}: {time.perf_counter() - t:.0f} s of benchmark)", flush=True)
    print(f"({time.perf_counter() - t0:.0f} s; runs and log: {work})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
