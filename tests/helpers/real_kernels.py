"""Kernels as people write them (an early return; a call to a noinline function), shared by the
instrument, collect and GPU tests; region names carry this file's name and lines."""

from __future__ import annotations

import inspect

import triton
import triton.language as tl


@triton.jit
def skip_rows_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    if pid * BLOCK >= n:  # an early return: cf.cond_br, three blocks
        return
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    acc = tl.zeros([BLOCK], tl.float32)
    for i in range(4):
        acc += x * i
    tl.store(y_ptr + offs, acc, mask=offs < n)


@triton.jit(noinline=True)
def scale_of(n):
    return n * 2 + 1


@triton.jit
def skip_calls_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    if pid * BLOCK >= n:
        return
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, x * scale_of(n), mask=offs < n)


@triton.jit
def calls_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, x * scale_of(n), mask=offs < n)


def _loop_line() -> int:
    lines, first = inspect.getsourcelines(skip_rows_kernel.fn)
    return first + next(i for i, ln in enumerate(lines) if "for i in range" in ln)


# The region names kernel scope and --loops both give skip_rows_kernel.
SKIP_ROWS_REGIONS = ["kernel", f"loop acc @real_kernels.py:{_loop_line()}",
                     f"iter acc @real_kernels.py:{_loop_line()}"]
