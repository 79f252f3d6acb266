"""Atomics: a histogram (``tl.atomic_add`` on scattered bins) and a column sum whose programs
merge their partial sums under a spin lock (``tl.atomic_cas`` / ``tl.atomic_xchg``).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def histogram_kernel(x_ptr, hist_ptr, n, lo, hi, N_BINS: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=lo)
    bins = ((x - lo) / (hi - lo) * N_BINS).to(tl.int32)
    bins = tl.minimum(tl.maximum(bins, 0), N_BINS - 1)
    tl.atomic_add(hist_ptr + bins, 1, mask=mask)


@triton.jit
def locked_colsum_kernel(x_ptr, out_ptr, lock_ptr, n_rows, n_cols, row_stride,
                         ROWS_PER_PROG: tl.constexpr, BLOCK_N: tl.constexpr):
    cols = tl.arange(0, BLOCK_N)
    col_mask = cols < n_cols
    first = tl.program_id(0) * ROWS_PER_PROG
    partial = tl.zeros([BLOCK_N], dtype=tl.float32)
    for r in range(ROWS_PER_PROG):
        row = first + r
        partial += tl.load(x_ptr + row * row_stride + cols, mask=col_mask & (row < n_rows),
                           other=0.0)
    # One program at a time adds its partial sums into out.
    while tl.atomic_cas(lock_ptr, 0, 1) == 1:
        pass
    total = tl.load(out_ptr + cols, mask=col_mask)
    tl.store(out_ptr + cols, total + partial, mask=col_mask)
    tl.debug_barrier()
    tl.atomic_xchg(lock_ptr, 0)


SAMPLE_SPECS = [
    {"kernel": "histogram_kernel", "variant": "",
     "signature": {"x_ptr": "*fp32", "hist_ptr": "*i32", "n": "i32", "lo": "fp32", "hi": "fp32"},
     "constexprs": {"N_BINS": 64, "BLOCK": 1024}, "num_warps": 4, "num_stages": 3},
    {"kernel": "locked_colsum_kernel", "variant": "",
     "signature": {"x_ptr": "*fp32", "out_ptr": "*fp32", "lock_ptr": "*i32", "n_rows": "i32",
                   "n_cols": "i32", "row_stride": "i32:16"},
     "constexprs": {"ROWS_PER_PROG": 32, "BLOCK_N": 512}, "num_warps": 4, "num_stages": 3},
]


def histogram(x: torch.Tensor, lo: float, hi: float, n_bins: int = 64) -> torch.Tensor:
    hist = torch.zeros(n_bins, device=x.device, dtype=torch.int32)
    n = x.numel()
    histogram_kernel[(triton.cdiv(n, 1024),)](x, hist, n, lo, hi, N_BINS=n_bins, BLOCK=1024)
    return hist


def locked_colsum(x: torch.Tensor, rows_per_prog: int = 32) -> torch.Tensor:
    n_rows, n_cols = x.shape
    out = torch.zeros(n_cols, device=x.device, dtype=torch.float32)
    lock = torch.zeros(1, device=x.device, dtype=torch.int32)
    locked_colsum_kernel[(triton.cdiv(n_rows, rows_per_prog),)](
        x, out, lock, n_rows, n_cols, x.stride(0), ROWS_PER_PROG=rows_per_prog,
        BLOCK_N=triton.next_power_of_2(n_cols))
    return out


def main() -> None:
    torch.manual_seed(0)
    x = torch.rand(1_000_000, device="cuda") * 4.0 - 2.0
    hist = histogram(x, -2.0, 2.0)
    ref = torch.histc(x, bins=64, min=-2.0, max=2.0).to(torch.int32)
    print(f"histogram: max abs error {(hist - ref).abs().max().item()} (counts)")
    m = torch.randn(3000, 500, device="cuda")
    err = (locked_colsum(m) - m.sum(0)).abs().max().item()
    print(f"locked_colsum: max abs error {err:.3e}")


if __name__ == "__main__":
    main()
