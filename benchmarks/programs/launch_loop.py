"""A launch-bound program (issue 40's): two small Triton kernels over 4,096 floats, one
without a loop and one with one, launched in turn LAUNCHES times in all; the GPU waits for
the host (benchmarks/launch_cost.py times the same kernels in one process). Prints a checksum
of the result on stdout (the same under the tool) and the host time per launch on stderr.

    python benchmarks/programs/launch_loop.py [--launches 40000]
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
import triton
import triton.language as tl

N_FLOATS = 4096


@triton.jit
def add_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1.0, mask=offs < n)


@triton.jit
def loop_kernel(x_ptr, n, BLOCK: tl.constexpr):
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 0.5, mask=offs < n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=40_000)
    n = ap.parse_args().launches
    x = torch.zeros(N_FLOATS, device="cuda")
    t0 = time.perf_counter()
    for _ in range(n // 2):
        add_kernel[(N_FLOATS // 1024,)](x, N_FLOATS, BLOCK=1024)
        loop_kernel[(1,)](x, N_FLOATS, BLOCK=256)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    print(f"checksum {float(x.double().sum()).hex()}")
    print(f"launch_loop: {1e6 * dt / max(n, 1):.2f} us a launch, {n} launches, {dt:.2f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
