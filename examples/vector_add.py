"""Vector add in which each program walks several consecutive blocks.

The walk is a plain ``for`` loop, so the TTGIR has an ``scf.for`` with the loads and the
store inside it. The store carries a proton mark (``# proton: store_out``).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK: tl.constexpr, BLOCKS_PER_PROG: tl.constexpr):
    pid = tl.program_id(0)
    first = pid * (BLOCK * BLOCKS_PER_PROG)
    lane = tl.arange(0, BLOCK)
    for i in range(BLOCKS_PER_PROG):
        offs = first + i * BLOCK + lane
        mask = offs < n_elements
        x = tl.load(x_ptr + offs, mask=mask)
        y = tl.load(y_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, x + y, mask=mask)  # proton: store_out


_SIG = {"x_ptr": "*fp32", "y_ptr": "*fp32", "out_ptr": "*fp32", "n_elements": "i32:16"}

# How to compile this file ahead of time (scripts/make_samples.py, `proton-inject dump`).
SAMPLE_SPECS = [
    {
        "kernel": "add_kernel",
        "variant": "",
        "signature": _SIG,
        "constexprs": {"BLOCK": 1024, "BLOCKS_PER_PROG": 4},
        "num_warps": 4,
        "num_stages": 3,
    },
    {
        "kernel": "add_kernel",
        "variant": "b4096",
        "signature": _SIG,
        "constexprs": {"BLOCK": 4096, "BLOCKS_PER_PROG": 2},
        "num_warps": 8,
        "num_stages": 3,
    },
]


def add(x: torch.Tensor, y: torch.Tensor, block: int = 1024, blocks_per_prog: int = 4) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()
    grid = (triton.cdiv(n, block * blocks_per_prog),)
    add_kernel[grid](x, y, out, n, BLOCK=block, BLOCKS_PER_PROG=blocks_per_prog, num_warps=4)
    return out


def main() -> None:
    torch.manual_seed(0)
    x = torch.randn(1_000_003, device="cuda")
    y = torch.randn(1_000_003, device="cuda")
    err = (add(x, y) - (x + y)).abs().max().item()
    print(f"vector_add: max abs error {err:.3e}")


if __name__ == "__main__":
    main()
