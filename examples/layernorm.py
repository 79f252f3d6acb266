"""Layer norm forward, one row per program, walking the row in column blocks three times.

Pass 1 sums for the mean, pass 2 sums squared deviations, pass 3 normalizes, scales and
shifts. Each pass is an ``scf.for`` whose body holds a ``tt.reduce``.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def layernorm_fwd_kernel(x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, row_stride, n_cols, eps,
                         BLOCK: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row * row_stride
    y_row = y_ptr + row * row_stride

    partial = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        partial += tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    mean = tl.sum(partial, axis=0) / n_cols

    partial = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        d = tl.where(cols < n_cols, x - mean, 0.0)
        partial += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(partial, axis=0) / n_cols + eps)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)

    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        w = tl.load(w_ptr + cols, mask=mask)
        b = tl.load(b_ptr + cols, mask=mask)
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        y = (x - mean) * rstd * w + b
        tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


_SIG = {"x_ptr": "*fp16", "y_ptr": "*fp16", "w_ptr": "*fp16", "b_ptr": "*fp16",
        "mean_ptr": "*fp32", "rstd_ptr": "*fp32", "row_stride": "i32:16", "n_cols": "i32:16",
        "eps": "fp32"}

SAMPLE_SPECS = [
    {"kernel": "layernorm_fwd_kernel", "variant": "", "signature": _SIG,
     "constexprs": {"BLOCK": 1024}, "num_warps": 8, "num_stages": 3},
    {"kernel": "layernorm_fwd_kernel", "variant": "b256", "signature": _SIG,
     "constexprs": {"BLOCK": 256}, "num_warps": 2, "num_stages": 3},
]


def layernorm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float = 1e-5):
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    mean = torch.empty(n_rows, device=x.device, dtype=torch.float32)
    rstd = torch.empty(n_rows, device=x.device, dtype=torch.float32)
    layernorm_fwd_kernel[(n_rows,)](x, y, w, b, mean, rstd, x.stride(0), n_cols, eps,
                                    BLOCK=1024, num_warps=8)
    return y, mean, rstd


def main() -> None:
    torch.manual_seed(0)
    n_rows, n_cols = 1151, 8192 + 40
    x = torch.randn(n_rows, n_cols, device="cuda", dtype=torch.float16)
    w = torch.rand(n_cols, device="cuda", dtype=torch.float16)
    b = torch.randn(n_cols, device="cuda", dtype=torch.float16)
    y, _, _ = layernorm(x, w, b)
    ref = torch.nn.functional.layer_norm(x.float(), (n_cols,), w.float(), b.float(), 1e-5)
    print(f"layernorm: max abs error {(y.float() - ref).abs().max().item():.3e}")


if __name__ == "__main__":
    main()
