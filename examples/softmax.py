"""Fused row softmax: each program owns rows pid, pid + P, ... and keeps one row in registers.

``tl.max`` and ``tl.sum`` become ``tt.reduce`` ops whose combiner is a small region of its own.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_rows, n_cols,
                   BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    n_progs = tl.num_programs(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    for row in tl.range(pid, n_rows, n_progs):
        x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf"))
        x = x.to(tl.float32)
        shifted = x - tl.max(x, axis=0)
        num = tl.exp(shifted)
        den = tl.sum(num, axis=0)
        y = num / den
        tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


_SIG = {"out_ptr": "*fp16", "in_ptr": "*fp16", "in_row_stride": "i32:16",
        "out_row_stride": "i32:16", "n_rows": "i32:16", "n_cols": "i32:16"}

SAMPLE_SPECS = [
    {"kernel": "softmax_kernel", "variant": "", "signature": _SIG,
     "constexprs": {"BLOCK": 1024}, "num_warps": 4, "num_stages": 3},
    {"kernel": "softmax_kernel", "variant": "b4096", "signature": _SIG,
     "constexprs": {"BLOCK": 4096}, "num_warps": 16, "num_stages": 2},
]


def softmax(x: torch.Tensor) -> torch.Tensor:
    n_rows, n_cols = x.shape
    out = torch.empty_like(x)
    block = triton.next_power_of_2(n_cols)
    n_progs = min(n_rows, 4 * torch.cuda.get_device_properties(x.device).multi_processor_count)
    softmax_kernel[(n_progs,)](out, x, x.stride(0), out.stride(0), n_rows, n_cols,
                               BLOCK=block, num_warps=8 if block >= 2048 else 4)
    return out


def main() -> None:
    torch.manual_seed(0)
    x = torch.randn(1823, 781, device="cuda", dtype=torch.float16)
    err = (softmax(x).float() - torch.softmax(x.float(), dim=1)).abs().max().item()
    print(f"softmax: max abs error {err:.3e}")


if __name__ == "__main__":
    main()
