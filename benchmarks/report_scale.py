"""`proton-inject report` on runs of many launches: time, peak memory, output sizes.

Builds a run directory the way ``run`` writes one (the runtime's own ``Sink.save`` and
``write_index``: gzipped raw buffers + run.json) from the real H100 buffers in
tests/data/h100-triton3.6: a share of add_kernel launches (4 warps, 9 regions a warp) and the
rest mm_kernel launches (8 warps, 63 regions a warp, its buffer wrapped), each cut to the
first ``--ctas`` CTAs and moved later in time launch by launch. Then, each case in a fresh
process (so the peak RSS is that case's) and with each ``-j`` (decoding processes; 1: in the
report's own process): ``run_report(DIR)``, the same with ``--trace`` (one native trace per
launch, gzipped) and with ``--trace --merge --gz``, and the CLI once.

    python benchmarks/report_scale.py --launches 1000,10000 -j 1,all [--ctas 64] [--mm-share 0.1]
        [--rounds 3]    # every case and -j in turn, 3 times: the speed-up's spread
    python benchmarks/report_scale.py --launches 10000 --cases plain,ceiling -j 1,all --rounds 3
        # -j N against N independent reports at once: the pool's cost vs the machine's limit

Peak memory is the report's own process (its ``VmHWM``) and its largest worker (each
worker's peak RSS includes what it shares with the report's process, forked from it). One run per case (no
spread): the per-launch ratio between sizes is the linearity check, and the closing table
gives each case's speed-up over -j 1 measured in the same run, and peak memory at the
largest run size over the smallest.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_trace import shift_blocks  # noqa: E402

from proton_inject.formats.raw import load_raw  # noqa: E402

DATA = REPO / "tests" / "data" / "h100-triton3.6"
GAP_NS = 300_000  # one launch to the next (the mm fixture runs 224 us on 1024 CTAs)
GAP_CYCLES = 450_000  # ... at ~1.5 GHz


def _fixture(name: str, ctas: int) -> tuple[np.ndarray, object, int]:
    buf, meta = load_raw(DATA / f"profile_scratch_{name}.json")
    rows = np.frombuffer(buf.tobytes(), np.uint32).reshape(-1, meta.bytes_per_cta // 4)
    return rows[:ctas].copy(), meta, 10 + meta.num_warps


def build_run(out: Path, launches: int, ctas: int, mm_share: float) -> Any:
    """Write ``launches`` launches under ``out`` with the runtime's writers; returns the
    (never started) Session that wrote them."""
    from proton_inject.collect.compile_hook import CompiledKernel
    from proton_inject.collect.launches import LaunchRecord
    from proton_inject.collect.session import Session
    from proton_inject.lower.options import LoweringOptions

    # Never started: only its writers are used. The fixtures were recorded by every warp.
    session = Session(None, out, LoweringOptions(warps="all", auto_size=False, buffer_type="shared"))
    session.sink.meta.device_names[0] = "NVIDIA H100 80GB HBM3"
    kinds = {n: _fixture(n, ctas) for n in ("add", "mm")}
    every = max(1, round(1 / mm_share)) if mm_share > 0 else launches + 1
    for seq in range(launches):
        name = "mm" if seq % every == every - 1 else "add"
        rows, meta, meta_words = kinds[name]
        blk = rows.copy()
        shift_blocks(blk, meta_words, seq * GAP_NS, seq * GAP_CYCLES)
        rec = LaunchRecord(
            seq=seq, kernel=meta.kernel, hash="H", compile_hash=f"C{name}", grid=(ctas, 1, 1),
            num_warps=meta.num_warps, num_ctas=1, stream=0, device=0,
            scratch_bytes_per_cta=meta.bytes_per_cta,
            scope_names=sorted(meta.scopes.items()), scope_parents=sorted(meta.scope_parents.items()),
        )
        session.hook.compiled[rec.compile_hash] = CompiledKernel(
            meta.kernel, rec.hash, True, scope_names=rec.scope_names,
            scope_parents=rec.scope_parents, scope_locs=dict(meta.scope_locs))
        session.result.launches.append(rec)
        session.sink.save(rec, blk.reshape(-1).view(np.uint8))
    session.sink.write_index(None, session.keep_policy.describe(), {}, {})
    return session


def _sizes(paths: list[str]) -> dict:
    by: dict[str, list[int]] = {}
    for p in paths:
        kind = "".join(Path(p).suffixes[-2:]) if p.endswith(".gz") else Path(p).suffix
        by.setdefault(kind, []).append(os.path.getsize(p))
    return {k: (len(v), sum(v)) for k, v in by.items()}


def _cpu_s() -> float:
    """CPU seconds (user + system) of this process and of its children that ended (the pool's
    workers, or the CLI): what the report cost the machine, against its wall time."""
    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                 resource.getrusage(resource.RUSAGE_CHILDREN)))


def _peak_rss() -> int:
    """This process's own peak resident bytes: ``VmHWM`` (Linux), not ``ru_maxrss``, which an
    exec'd child inherits from the process that started it (here the one that just built the
    run: its memory grew with the launches and set a floor under every case)."""
    try:
        with open("/proc/self/status") as f:
            return next(int(ln.split()[1]) for ln in f if ln.startswith("VmHWM:")) * 1024
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def child(case: str, run_dir: str, tmp: str, jobs: str) -> None:
    """One measured case; prints a JSON line."""
    t0 = time.perf_counter()
    if case == "cli":
        p = subprocess.run([sys.executable, "-m", "proton_inject.cli", "report", run_dir, "-j", jobs],
                           capture_output=True, text=True, cwd=REPO)
        dt = time.perf_counter() - t0
        # (the CLI's process and its workers are all children here: the largest of them)
        rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
        print(json.dumps({"s": dt, "cpu": _cpu_s(), "rss": rss, "worker_rss": None, "rc": p.returncode,
                          "stdout": len(p.stdout), "stderr_lines": len(p.stderr.splitlines()),
                          "err": p.stderr[-800:] if p.returncode else ""}))
        return
    import cProfile
    import pstats

    from proton_inject.analyze.report import run_report

    if case == "ceiling-part":  # one of the independent reports: its launches listed in run_dir
        run_report(Path(run_dir).read_text().splitlines(), jobs=1)
        print(json.dumps({"s": time.perf_counter() - t0, "cpu": _cpu_s(), "rss": _peak_rss()}))
        return

    kw = {"plain": {}, "trace": {"trace_dir": f"{tmp}/t", "gz": True},
          "merge": {"trace_dir": f"{tmp}/m", "gz": True, "merge": True}}[case.removesuffix("+prof")]
    prof = cProfile.Profile() if case.endswith("+prof") else None
    if prof:
        prof.enable()
    res = run_report([run_dir], jobs=int(jobs), **kw)
    dt = time.perf_counter() - t0
    # (before this script's own json.dumps of the summary below: not the report's memory)
    rss = _peak_rss()
    workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024 if int(jobs) > 1 else None
    if prof:
        prof.disable()
        pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(25)
    kernels = {k["kernel"]: len(k["launches"]) for k in res.summary["kernels"]}
    print(json.dumps({"s": dt, "cpu": _cpu_s(), "rss": rss, "worker_rss": workers, "text": len(res.text),
                      "kernels": kernels,
                      "json": len(json.dumps(res.summary, indent=1)),
                      "big": [m.group(0) for w in res.warnings
                              if (m := re.search(r"[\d,]+ MiB of JSON", w))],
                      "files": _sizes([str(f) for f in res.files])}))


def ceiling(run_dir: Path, tmp: Path, jobs: int) -> dict:
    """The machine's own parallel ceiling: ``jobs`` independent one-process reports at once,
    each over every ``jobs``-th launch (the same mix of kernels), timed until the last ends.
    Against it, ``-j N`` shows what the pool itself costs; against ``-j 1``, what the machine
    gives (all-core clocks, shared caches and memory bandwidth)."""
    from proton_inject.formats.raw import find_raw

    raws = [str(r) for r in find_raw(run_dir / "raw")]
    lists = []
    for i in range(min(jobs, len(raws))):
        lists.append(tmp / f"ceiling-{jobs}-{i}.txt")
        lists[-1].write_text("\n".join(raws[i::jobs]))
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, __file__, "--child", "ceiling-part", str(f), str(tmp), "1"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for f in lists]
    outs = [p.communicate() for p in procs]
    dt = time.perf_counter() - t0
    bad = [err[-2000:] for p, (_, err) in zip(procs, outs, strict=True) if p.returncode]
    if bad:
        raise SystemExit(f"ceiling failed:\n{bad[0]}")
    parts = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    return {"s": dt, "cpu": sum(p["cpu"] for p in parts), "rss": max(p["rss"] for p in parts),
            "worker_rss": None, "text": 0, "json": 0, "big": [], "files": {}}


def measure(case: str, run_dir: Path, tmp: Path, jobs: int) -> dict:
    if case == "ceiling":
        return ceiling(run_dir, tmp, jobs)
    p = subprocess.run([sys.executable, __file__, "--child", case, str(run_dir), str(tmp), str(jobs)],
                       capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"{case} failed:\n{p.stderr[-3000:]}")
    if case.endswith("+prof"):
        print(p.stderr, file=sys.stderr)
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", default="1000,10000", help="comma-separated run sizes")
    ap.add_argument("--ctas", type=int, default=128, help="CTAs per launch (fixtures: 1024)")
    ap.add_argument("--mm-share", type=float, default=0.1, help="share of mm_kernel launches")
    ap.add_argument("-j", "--jobs", default="1,all",
                    help="comma-separated decoding processes to compare (all: one per core)")
    ap.add_argument("--cases", default="plain,trace,merge,cli",
                    help="plain (table only), trace (--trace --gz), merge (--trace --merge --gz), "
                         "cli (report DIR), ceiling (N independent one-process reports over every "
                         "N-th launch, at once: the machine's own limit); add +prof to a case for a "
                         "cProfile on stderr")
    ap.add_argument("--rounds", type=int, default=1,
                    help="rounds of every case and -j, interleaved (the speed-up is then the median "
                         "over rounds of each round's own ratio, with its min..max)")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return
    from proton_inject.analyze.pool import default_jobs

    jobs = sorted({default_jobs() if j == "all" else int(j) for j in args.jobs.split(",")})
    sizes = [int(x) for x in args.launches.split(",")]
    cases = args.cases.split(",")
    mib = 2**20
    print(f"launches: {1 - args.mm_share:.0%} add_kernel (4 warps, 9 regions/warp), "
          f"{args.mm_share:.0%} mm_kernel (8 warps, 63 regions/warp, wrapped), {args.ctas} CTAs each; "
          f"{default_jobs()} cores available, -j {','.join(map(str, jobs))}")
    print(f"{'launches':>9} {'case':<11} {'-j':>3} {'s':>8} {'cpu s':>8} {'ms/launch':>10} {'peak MiB':>9} "
          f"{'worker MiB':>10}  outputs")
    got: dict[tuple[int, str, int], list[dict]] = {}
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix="report_scale_") as tmp:
            run_dir = Path(tmp) / "run"
            t0 = time.perf_counter()
            build_run(run_dir, n, args.ctas, args.mm_share)
            raw = {"files": len(list((run_dir / "raw").iterdir())),
                   "bytes": sum(p.stat().st_size for p in (run_dir / "raw").iterdir())}
            print(f"{n:>9,} {'(build)':<11} {'':>3} {time.perf_counter() - t0:>8.1f} {'':>8} {'':>10} {'':>9} "
                  f"{'':>10}  raw/: {raw['files']:,} files, {raw['bytes'] / mib:,.1f} MiB", flush=True)
            for rnd, case, j in itertools.product(range(args.rounds), cases, jobs):
                r = measure(case, run_dir, Path(tmp), j)
                got.setdefault((n, case, j), []).append(r)
                outs = (f"stdout {r['stdout']:,} B, rc {r['rc']}, {r['stderr_lines']} stderr lines "
                        f"{r['err']}" if case == "cli" else
                        f"table {r['text']:,} B, --json {r['json']:,} B; " + ", ".join(
                            f"{c:,} {k} {b / mib:,.1f} MiB" for k, (c, b) in r["files"].items()) +
                        "".join(f" (warned: {w})" for w in r["big"][:1]))
                wk = "-" if r["worker_rss"] is None else f"{r['worker_rss'] / mib:,.0f}"
                label = case if args.rounds == 1 else f"{case} #{rnd + 1}"
                print(f"{n:>9,} {label:<11} {j:>3} {r['s']:>8.1f} {r['cpu']:>8.1f} {1000 * r['s'] / n:>10.2f} "
                      f"{r['rss'] / mib:>9,.0f} {wk:>10}  {outs}", flush=True)
    _closing_table(got, sizes, cases, jobs)


def _closing_table(got: dict[tuple[int, str, int], list[dict]], sizes: list[int], cases: list[str],
                   jobs: list[int]) -> None:
    """One line per case and -j: speed-up over -j 1 at each size (each round's own ratio; over
    several rounds their median and min..max), CPU time over -j 1's at the largest size, and
    peak memory (the largest over rounds) at
    the largest size over the smallest (the goal: within 1.2)."""
    lo, hi = min(sizes), max(sizes)
    print(f"\nsummary ({os.cpu_count()} CPUs on this machine; speed-up: -j 1 s / -j N s, same round)")
    head = "".join(f" {'x at ' + format(n, ','):>20}" for n in sizes)
    ratio = f"peak {hi:,}/{lo:,}"
    print(f"{'case':<11} {'-j':>3}{head} {'cpu x at ' + format(hi, ','):>18} {'peak MiB':>16} "
          f"{'worker MiB':>16} {ratio:>18}")

    def peak(n: int, case: str, j: int, key: str) -> float | None:
        vals = [r[key] for r in got[(n, case, j)] if r[key] is not None]
        return max(vals) if vals else None

    for case in cases:
        for j in jobs:
            ups = ""
            for n in sizes:
                if (n, case, 1) not in got:
                    ups += f" {'-':>20}"
                    continue
                x = sorted(a["s"] / b["s"] for a, b in zip(got[(n, case, 1)], got[(n, case, j)], strict=True))
                spread = f" ({x[0]:.2f}..{x[-1]:.2f})" if len(x) > 1 else ""
                ups += f" {f'{statistics.median(x):.2f}{spread}':>20}"
            cpu = "-"
            if (hi, case, 1) in got:  # CPU spent over -j 1's: above 1, each launch cost more
                pairs = zip(got[(hi, case, 1)], got[(hi, case, j)], strict=True)
                cpu = f"{statistics.median(b['cpu'] / a['cpu'] for a, b in pairs):.2f}"
            a, b = peak(lo, case, j, "rss"), peak(hi, case, j, "rss")
            mem = f"{a / 2**20:,.0f}-{b / 2**20:,.0f}"
            wa, wb = peak(lo, case, j, "worker_rss"), peak(hi, case, j, "worker_rss")
            wk = "-" if wa is None else f"{wa / 2**20:,.0f}-{wb / 2**20:,.0f}"
            print(f"{case:<11} {j:>3}{ups} {cpu:>18} {mem:>16} {wk:>16} {b / a:>18.2f}")


if __name__ == "__main__":
    main()
