"""On a GPU: trace the same instrumented kernels with Proton's runtime and with ours.

For each case the kernel is dumped and instrumented once (kernel scope + one region per loop
iteration), then launched once in two fresh processes that use the same override tree:

* Proton: ``proton.start(name, backend="instrumentation", data="trace")`` with Proton's
  default mode (cycle metric, circular shared buffer of default size, warp granularity, no
  sampling, 64-bit clock, no optimizations), launch, synchronize, then time
  ``proton.finalize()``, which decodes the buffer and writes Proton's Chrome trace.
* ours: ``proton_inject.api.profile`` with Proton's choices (``LoweringOptions(warps=
  "all", auto_size=False)``: every warp, default buffer; the same lowering options), launch;
  then time ``decode`` + ``write_trace`` of the raw buffer.

It prints both times, the ratio, events and bytes per event. ``--check`` also loads both
traces and compares regions, events per region and per-region median durations (cycles);
tests/gpu/test_gpu_vs_proton.py runs that check on small launches.

    python benchmarks/gpu_trace_vs_proton.py            # 1024- and 4096-CTA matmul, K=4096
    python benchmarks/gpu_trace_vs_proton.py --cases add:1024 mm:1024:2048 --check
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# The kernels: the fixtures' own source (tests/data/h100-triton3.6/kernels.py: a vector add
# that loops 8 times per program and a pipelined fp16 matmul, 128x128x64 tiles, 8 warps, 3
# stages), at the same lines, followed by the code that launches one of them.
FIXTURE_KERNELS = REPO / "tests" / "data" / "h100-triton3.6" / "kernels.py"
LAUNCH = textwrap.dedent(
    '''

    import sys

    import torch


    def busy_gpu(seconds=0.5):
        """Keep the GPU busy (cuBLAS, not Triton) so the measured launch runs at full clock:
        a fresh process otherwise launches on an idle, down-clocked GPU and cycle counts of
        memory-bound regions depend on the clock."""
        import time
        a = torch.randn(4096, 4096, device="cuda")
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            for _ in range(8):
                a = torch.tanh(a @ a)
            torch.cuda.synchronize()


    def launch(which, ctas, k=4096):
        """One launch of ``ctas`` CTAs, compiled first, on a warmed-up GPU."""
        torch.manual_seed(0)
        if which == "add":
            n = ctas * 1024
            x = torch.randn(n, device="cuda")
            y = torch.randn(n, device="cuda")
            out = torch.empty_like(x)
            add_kernel.warmup(x, y, out, n, BLOCK=1024, num_warps=4, grid=(ctas,))
            busy_gpu()
            add_kernel[(ctas,)](x, y, out, n, BLOCK=1024, num_warps=4)
            return out
        side = int(round(ctas ** 0.5))
        m = n = 128 * side
        a = torch.randn(m, k, device="cuda", dtype=torch.float16)
        b = torch.randn(k, n, device="cuda", dtype=torch.float16)
        c = torch.empty(m, n, device="cuda", dtype=torch.float16)
        mm_kernel.warmup(a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                         c.stride(0), c.stride(1), BM=128, BN=128, BK=64, num_warps=8,
                         num_stages=3, grid=(side * side,))
        busy_gpu()
        mm_kernel[(side * side,)](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0),
                                  b.stride(1), c.stride(0), c.stride(1), BM=128, BN=128, BK=64,
                                  num_warps=8, num_stages=3)
        return c


    if __name__ == "__main__":
        launch(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
        torch.cuda.synchronize()
    '''
)


def parse_case(text: str) -> tuple[str, int, int]:
    """``mm:1024:4096`` -> ("mm", 1024 CTAs, K=4096); ``add:1024``."""
    parts = text.split(":")
    which, ctas = parts[0], int(parts[1])
    k = int(parts[2]) if len(parts) > 2 else 4096
    if which not in ("add", "mm"):
        raise SystemExit(f"unknown case {text!r}: use add:CTAS or mm:CTAS[:K]")
    return which, ctas, k


def instrument(work: Path, which: str, ctas: int, k: int) -> Path:
    """Dump the case's kernel and instrument it: kernel scope + each loop iteration."""
    from proton_inject.dump.program import dump_program
    from proton_inject.instrument.rules import Rules
    from proton_inject.instrument.trees import instrument_tree, write_tree

    script = work / "kernels.py"
    script.write_text(FIXTURE_KERNELS.read_text() + LAUNCH)
    dump = work / f"dump-{which}"
    dump_program(["python", str(script), which, str(ctas), str(k)], dump,
                 kernel=f"^{which}_kernel$")
    outputs, manifest, _ = instrument_tree(dump, Rules(kernel_scope=True, loops="iteration",
                                                       marks=False))
    return write_tree(outputs, manifest, work / f"inst-{which}")


def _child(side: str, inst: Path, work: Path, which: str, ctas: int, k: int) -> dict:
    """Run one side in a fresh process (own Triton caches, nothing shared)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    cmd = [sys.executable, __file__, "--child", side, str(inst), str(work), which, str(ctas),
           str(k)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{side} run failed:\n{p.stdout}\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def run_proton(inst: Path, work: Path, which: str, ctas: int, k: int) -> dict:
    import torch
    import triton
    import triton.profiler as proton

    triton.knobs.cache.dir = str(work / "cache-proton")
    triton.knobs.cache.override_dir = str(inst)
    triton.knobs.compilation.override = True
    sys.path.insert(0, str(work))
    import kernels

    name = str(work / f"proton-{which}")
    proton.start(name, backend="instrumentation", data="trace")
    kernels.launch(which, ctas, k)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    proton.finalize()
    dt = time.perf_counter() - t0
    files = [p for p in work.glob(f"proton-{which}*") if p.is_file()]
    if not files:
        raise RuntimeError(f"Proton wrote no trace next to {name}")
    return {"seconds": dt, "trace": str(files[0]), "bytes": files[0].stat().st_size}


def run_ours(inst: Path, work: Path, which: str, ctas: int, k: int) -> dict:
    import torch

    from proton_inject.analyze.decode import decode
    from proton_inject.api import profile
    from proton_inject.formats.raw import find_raw, load_raw
    from proton_inject.formats.traces import write_trace

    sys.path.insert(0, str(work))
    import kernels

    from proton_inject.lower.options import LoweringOptions

    out = work / f"ours-{which}"
    same_as_proton = LoweringOptions(warps="all", auto_size=False, buffer_type="shared")
    with profile(instrumented=inst, out=out, options=same_as_proton, quiet=True) as result:
        kernels.launch(which, ctas, k)
        torch.cuda.synchronize()
    [raw] = find_raw(out / "raw")
    t0 = time.perf_counter()
    data, meta = load_raw(raw)
    d = decode(data, meta)
    path = write_trace(d, work / f"ours-{which}.json")
    dt = time.perf_counter() - t0
    return {"seconds": dt, "trace": str(path), "bytes": path.stat().st_size,
            "events": len(d.events), "messages": result.messages, "warnings": d.warnings,
            "dropped": d.drops.dropped}


def compare(proton_trace: str, our_trace: str) -> dict:
    """Regions, events per region and median cycles per region in both traces."""
    import numpy as np

    from proton_inject.formats.trace_json import read_trace

    theirs: dict[str, list[float]] = {}
    for ev in read_trace(proton_trace)["traceEvents"]:
        if ev.get("ph") == "X":
            # Proton writes cycles / 1000 as microseconds (it assumes a 1 GHz clock).
            theirs.setdefault(ev["name"], []).append(ev["dur"] * 1000.0)
    ours: dict[str, list[int]] = {}
    for ev in read_trace(our_trace)["traceEvents"]:
        if ev.get("ph") == "X" and "cycles" in ev.get("args", {}):
            ours.setdefault(ev["name"], []).append(ev["args"]["cycles"])
    names = sorted(set(theirs) | set(ours))
    rows = {}
    for n in names:
        a = np.round(np.array(theirs.get(n, []), dtype=np.float64))
        b = np.array(ours.get(n, []), dtype=np.float64)
        rows[n] = {
            "proton_events": len(a), "our_events": len(b),
            "proton_median": float(np.median(a)) if len(a) else None,
            "our_median": float(np.median(b)) if len(b) else None,
        }
    return rows


def run_case(work: Path, which: str, ctas: int, k: int, check: bool) -> dict:
    inst = instrument(work, which, ctas, k)
    proton_res = _child("proton", inst, work, which, ctas, k)
    ours_res = _child("ours", inst, work, which, ctas, k)
    res = {"case": f"{which}:{ctas}:{k}", "proton": proton_res, "ours": ours_res}
    if check:
        res["regions"] = compare(proton_res["trace"], ours_res["trace"])
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", default=["mm:1024:4096", "mm:4096:4096"])
    ap.add_argument("--check", action="store_true", help="also compare the two traces")
    ap.add_argument("--child", nargs=6, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        side, inst, work, which, ctas, k = args.child
        fn = run_proton if side == "proton" else run_ours
        print(json.dumps(fn(Path(inst), Path(work), which, int(ctas), int(k))))
        return
    import torch

    print(f"device: {torch.cuda.get_device_name()}; Proton: proton.start(backend="
          "'instrumentation', data='trace') defaults, timing proton.finalize(); ours: decode + "
          "write_trace of the raw buffer")
    print(f"{'case':>14} {'events':>10} {'Proton s':>9} {'ours s':>8} {'speedup':>8} "
          f"{'Proton B/ev':>11} {'our B/ev':>9}")
    for case in args.cases:
        which, ctas, k = parse_case(case)
        with tempfile.TemporaryDirectory(prefix="pi-vs-proton-") as tmp:
            r = run_case(Path(tmp), which, ctas, k, args.check)
        p, o = r["proton"], r["ours"]
        n = o["events"]
        print(f"{r['case']:>14} {n:>10,} {p['seconds']:>9.2f} {o['seconds']:>8.3f} "
              f"{p['seconds'] / o['seconds']:>7.1f}x {p['bytes'] / n:>11.0f} {o['bytes'] / n:>9.0f}")
        if o["dropped"]:
            print(f"{'':>14} circular buffer wrapped: {o['dropped']:,} records dropped")
        for name, row in (r.get("regions") or {}).items():
            print(f"{'':>14} {name}: events Proton {row['proton_events']:,} ours "
                  f"{row['our_events']:,}; median cycles Proton {row['proton_median']} ours "
                  f"{row['our_median']}")


if __name__ == "__main__":
    main()
