"""Host time per launch under a profile session, against plain launches in the same process.

A launch-bound loop (the GPU waits for the host): two small kernels over 4,096 floats, one
without a loop (``add_kernel``, 4 CTAs) and one with a loop (``loop_kernel``, 1 CTA, 16
iterations), launched in turn. Each round times, in this order, interleaved:

  plain        no session
  not matched  a session whose rules leave both kernels out (their plain builds run)
  not kept     instrumented, none kept (max_launches=0)
  not kept (Python) the same with the C launcher off (PROTON_INJECT_FAST_LAUNCH=0)
  not kept (twin) the same with plain twins, the default: a launch not kept runs the program's
               own build (its GPU time should read plain's); the cases without "(twin)" run
               with PROTON_INJECT_PLAIN_TWINS=0
  kept         instrumented, every launch kept (--keep-launches all), as a user gets it (the C fast
               path, collect/fast_launch.c)
  kept (Python) the same with the C fast path off (PROTON_INJECT_FAST_LAUNCH=0)
  default      instrumented, the session's default keep policy
  default (twin) the same with plain twins

Per case: wall us per launch (median over rounds, min..max) and its ratio to plain, twice: the
median of each round's ratio to that round's plain (the host drifts between rounds), and the
ratio of the two sides' minima (each side's quietest round); then the same for host time per
launch alone, and the GPU time per launch (``host_and_gpu``: 2,000 launches in chunks launched
while the GPU sleeps, neither waiting for the other: where wall exceeds host, the GPU is the
bottleneck); the session's start, its first launches (``FIRST_LAUNCHES``, timed apart: each
build's first load, the first slab, the first launches' clock brackets; the loop after them is
what a long program pays), its stop (waits for the copies and writes the raw files), and
launches kept. Collect only: no report is decoded. ``--cprofile DIR`` also writes a cProfile of
one round of ``kept`` and of ``not kept`` (top 30 functions by own time).

    PYTHONPATH=. python benchmarks/launch_cost.py [--launches 20000] [--kept-launches 2000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "programs"))

from launch_loop import N_FLOATS, add_kernel, loop_kernel  # noqa: E402  (the launch-bound program's kernels)

from proton_inject.collect import fast_launch, plain_twins  # noqa: E402
from proton_inject.collect.session import Session  # noqa: E402
from proton_inject.instrument.rules import Rules  # noqa: E402


def launches(x: torch.Tensor, n: int) -> float:
    """``n`` launches (half of each kernel); wall us per launch, the GPU drained at the end."""
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n // 2):
        add_kernel[(N_FLOATS // 1024,)](x, N_FLOATS, BLOCK=1024)
        loop_kernel[(1,)](x, N_FLOATS, BLOCK=256)
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e6


HOST_CHUNK = 200  # launches timed without waiting, fewer than the launch queue holds
SLEEP_CYCLES = 20_000_000  # ~10 ms of GPU: longer than the host takes to launch a chunk


def host_and_gpu(x: torch.Tensor, n: int) -> tuple[float, float]:
    """(host us, GPU us) per launch, each alone: ``n`` launches in chunks, each chunk launched
    while the GPU sleeps, so neither waits for the other; the GPU time is between two events
    around the chunk (the kernels back to back), the host time the launch calls'."""
    host = gpu = 0.0
    chunks = max(1, n // HOST_CHUNK)
    for _ in range(chunks):
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(SLEEP_CYCLES)
        a.record()
        t = time.perf_counter()
        for _ in range(HOST_CHUNK // 2):
            add_kernel[(N_FLOATS // 1024,)](x, N_FLOATS, BLOCK=1024)
            loop_kernel[(1,)](x, N_FLOATS, BLOCK=256)
        host += time.perf_counter() - t
        b.record()
        b.synchronize()
        gpu += a.elapsed_time(b) / 1e3
    return host / (chunks * HOST_CHUNK) * 1e6, gpu / (chunks * HOST_CHUNK) * 1e6


CASES = {
    "plain": None,
    "not matched": dict(source=Rules(kernel="^no_such_kernel$")),
    "not kept": dict(source=Rules(loops="both"), max_launches=0),
    "not kept (Python)": dict(source=Rules(loops="both"), max_launches=0),
    "not kept (twin)": dict(source=Rules(loops="both"), max_launches=0),
    "kept": dict(source=Rules(loops="both"), keep="all"),
    "kept (Python)": dict(source=Rules(loops="both"), keep="all"),
    "default": dict(source=Rules(loops="both")),
    "default (twin)": dict(source=Rules(loops="both")),
}


# Launches of a session timed apart before its loop (three of each kernel: each build's first
# three kept launches get a clock bracket).
FIRST_LAUNCHES = 6
HOST_LAUNCHES = 2000  # launches a round timed for host and GPU time apart


def timed_case(name: str, x: torch.Tensor, n: int, out: Path, prof: cProfile.Profile | None = None
               ) -> tuple[float, float, float, int, float, float, float]:
    """(us per launch after the first ones, session start s, session stop s, launches kept,
    the first launches' ms, host and GPU us per launch) of one round of ``name``."""
    kw = CASES[name]
    if kw is None:
        return launches(x, n), 0.0, 0.0, 0, 0.0, *host_and_gpu(x, HOST_LAUNCHES)
    session = Session(out=out, **kw)
    env = {fast_launch.ENV: "0" if name.endswith("(Python)") else "1",  # (read as the session starts)
           plain_twins.ENV: "1" if name.endswith("(twin)") else "0"}  # (read as each build loads)
    with mock.patch.dict(os.environ, env):
        t0 = time.perf_counter()
        session.start()
        t1 = time.perf_counter()
        try:
            first_ms = launches(x, FIRST_LAUNCHES) * FIRST_LAUNCHES / 1e3
            us = prof.runcall(launches, x, n) if prof is not None else launches(x, n)
            host, gpu = host_and_gpu(x, HOST_LAUNCHES)
        finally:
            t2 = time.perf_counter()
            result = session.stop()
            t3 = time.perf_counter()
    return us, t1 - t0, t3 - t2, len(result.launches), first_ms, host, gpu


def long_run(x: torch.Tensor, n: int, out: Path) -> None:
    """One default-policy session over ``n`` launches: what it keeps and what it costs."""
    import resource

    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    torch.cuda.reset_peak_memory_stats()
    dev0 = torch.cuda.max_memory_allocated()
    before = launches(x, min(n, 20000))
    us, start, stop, kept, *_ = timed_case("default", x, n, out)
    after = launches(x, min(n, 20000))  # (plain on both sides: the host drifts over a long run)
    plain = (before + after) / 2
    disk = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    rss = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024
    dev = (torch.cuda.max_memory_allocated() - dev0) / 2**20
    print(f"long run: {n} launches, default policy: {us:.2f} us/launch (plain {before:.2f} before, "
          f"{after:.2f} after, "
          f"x{us / plain:.3f}), {kept} kept, stop {stop:.2f} s, {disk / 2**20:.1f} MiB on disk, "
          f"peak RSS +{rss:.0f} MiB, device peak +{dev:.1f} MiB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=20000, help="launches per round (cheap cases)")
    ap.add_argument("--kept-launches", type=int, default=2000, help="launches per round of 'kept'")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated subset of the cases")
    ap.add_argument("--cprofile", metavar="DIR", help="write cProfiles of 'kept' and 'not kept' there")
    ap.add_argument("--long", type=int, default=0, metavar="N",
                    help="also one long run of N launches with the default policy: its kept launches, "
                         "disk, and host and device memory growth")
    args = ap.parse_args()
    names = [c.strip() for c in args.cases.split(",") if c.strip()]
    x = torch.zeros(N_FLOATS, device="cuda")
    work = Path(tempfile.mkdtemp(prefix="pi-launch-"))
    rows: dict[str, list[tuple[float, float, float, int, float, float, float]]] = {k: [] for k in names}
    for r in range(args.rounds + 1):  # round 0 compiles and warms up
        for name in names:
            n = args.kept_launches if name.startswith("kept") else args.launches
            row = timed_case(name, x, n if r else 200, work / f"{name}-{r}".replace(" ", "_"))
            if r:
                rows[name].append(row)
            print(f"round {r} {name}: {row[0]:.2f} us/launch, host {row[5]:.2f}, GPU {row[6]:.2f}",
                  file=sys.stderr, flush=True)
    if args.cprofile:
        d = Path(args.cprofile)
        d.mkdir(parents=True, exist_ok=True)
        for name in ("kept", "not kept"):
            prof = cProfile.Profile()
            n = args.kept_launches if name.startswith("kept") else args.launches
            timed_case(name, x, n, work / f"cprofile-{name}".replace(" ", "_"), prof)
            with open(d / f"cprofile-{name.replace(' ', '_')}.txt", "w") as f:
                pstats.Stats(prof, stream=f).sort_stats("tottime").print_stats(30)
    if args.long:
        long_run(x, args.long, work / "long")
    print(f"{torch.cuda.get_device_name()}, {args.rounds} rounds; launches a round: "
          f"{args.launches} ({args.kept_launches} for 'kept')")
    print_table(rows)


def ratio_cells(ts: list[float], plain: list[float] | None) -> str:
    """Against plain: the median of each round's ratio to that round's plain (the host drifts
    between rounds, less within one), then the ratio of the two minima (each side's quietest)."""
    if not plain:
        return f"{'-':>7s} {'-':>7s}"
    paired = statistics.median(t / p for t, p in zip(ts, plain, strict=True))
    return f"{paired:7.3f} {min(ts) / min(plain):7.3f}"


def print_table(rows: dict[str, list[tuple[float, float, float, int, float, float, float]]]) -> None:
    plain = rows.get("plain")
    col = {i: [t[i] for t in plain] if plain else None for i in (0, 5, 6)}
    print(f"{'case':18s} {'wall us':>7s} {'(min..max)':>15s} {'x paired':>8s} {'x min':>7s} {'host us':>7s} "
          f"{'x paired':>8s} {'x min':>7s} {'GPU us':>6s} {'x':>6s} {'start s':>7s} {'first ms':>8s} "
          f"{'stop s':>6s} {'kept':>5s}")
    for name, ts in rows.items():
        wall, host, gpu = ([t[i] for t in ts] for i in (0, 5, 6))
        gpu_x = statistics.median(gpu) / statistics.median(col[6]) if plain else float("nan")
        print(f"{name:18s} {statistics.median(wall):7.2f} {f'({min(wall):.2f}..{max(wall):.2f})':>15s} "
              f"{ratio_cells(wall, col[0])} {statistics.median(host):7.2f} {ratio_cells(host, col[5])} "
              f"{statistics.median(gpu):6.2f} {gpu_x:6.3f} {statistics.median(t[1] for t in ts):7.2f} "
              f"{statistics.median(t[4] for t in ts):8.1f} {statistics.median(t[2] for t in ts):6.2f} "
              f"{statistics.median(t[3] for t in ts):5.0f}")

if __name__ == "__main__":
    main()
