"""Host cost per launch of the tool's hooks on launches it does not keep (issue 29 item 0):
a tiny kernel launched N times back to back (launch-bound: the GPU waits for the host), timed
on the host per round, rounds interleaved:

  plain        no session
  not matched  in a profile session whose rules leave the kernel out (plain build)
  not kept     in a profile session, instrumented, beyond --max-launches (0 kept)

Prints microseconds per launch (median over rounds, min..max) and the extra over plain.

    PYTHONPATH=. python benchmarks/launch_cost.py [--launches 20000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import proton_inject  # noqa: E402
from proton_inject.instrument.rules import Rules  # noqa: E402


@triton.jit
def tiny_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1.0, mask=offs < n)


def launches(x: torch.Tensor, n: int) -> float:
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        tiny_kernel[(1,)](x, x.numel(), BLOCK=128)
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cprofile", metavar="FILE",
                    help="also write a cProfile of one 'not kept' round (top 30 by own time) to FILE")
    args = ap.parse_args()
    x = torch.zeros(128, device="cuda")
    out = Path(tempfile.mkdtemp(prefix="pi-launch-"))
    cases = {
        "plain": None,
        "not matched": dict(rules=Rules(kernel="^no_such_kernel$")),
        "not kept": dict(rules=Rules(kernel_scope=True), max_launches=0),
    }
    times: dict[str, list[float]] = {k: [] for k in cases}
    for r in range(args.rounds + 1):  # round 0 compiles and warms up
        for name, kw in cases.items():
            if kw is None:
                us = launches(x, args.launches)
            else:
                with proton_inject.profile(out=out / f"{name}-{r}".replace(" ", "_"), quiet=True, **kw):
                    us = launches(x, args.launches)
            if r:
                times[name].append(us)
    if args.cprofile:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        with proton_inject.profile(out=out / "cprofile", quiet=True, **cases["not kept"]):
            prof.runcall(launches, x, args.launches)
        with open(args.cprofile, "w") as f:
            pstats.Stats(prof, stream=f).sort_stats("tottime").print_stats(30)
    base = statistics.median(times["plain"])
    print(f"{torch.cuda.get_device_name()}, {args.launches} launches x {args.rounds} rounds")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:12s} {med:7.2f} us/launch ({min(ts):.2f}..{max(ts):.2f})  +{med - base:.2f} us over plain")


if __name__ == "__main__":
    main()
