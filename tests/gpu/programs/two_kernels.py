"""Two Triton kernels of very different cost, each launched the same number of times: a row sum
of a 4096 x 16384 matrix, looping over its columns (heavy), and a 4096-element add (light).
Prints one line per kernel, ``name sha256`` of its output's bytes; ``--exit N`` then exits
with code N (a program that fails after launching its kernels).

    python tests/gpu/programs/two_kernels.py [--launches 20] [--exit 0]

Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import sys

import torch
import triton
import triton.language as tl
from outputs import digest  # beside this file


@triton.jit
def heavy_row_sum(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


@triton.jit
def light_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) + tl.load(y_ptr + offs, mask=m), mask=m)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--launches", type=int, default=20)
    ap.add_argument("--exit", type=int, default=0)
    args = ap.parse_args()
    g = torch.Generator(device="cuda").manual_seed(0)
    rows, cols = 4096, 16384
    x = torch.rand(rows, cols, device="cuda", generator=g)
    sums = torch.empty(rows, device="cuda")
    a = torch.rand(4096, device="cuda", generator=g)
    added = torch.empty_like(a)
    for _ in range(args.launches):
        heavy_row_sum[(rows,)](x, sums, cols, BLOCK=1024)
        light_add[(triton.cdiv(a.numel(), 1024),)](a, a, added, a.numel(), BLOCK=1024)
    torch.cuda.synchronize()
    print("heavy_row_sum", digest(sums))
    print("light_add", digest(added))
    return args.exit


if __name__ == "__main__":
    sys.exit(main())
