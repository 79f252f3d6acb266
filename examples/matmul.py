"""Pipelined fp16 matmul C = A @ B with fp32 accumulation and grouped tile order.

The K loop is software-pipelined by Triton (``num_stages`` >= 3 gives async copies into a
ring of shared-memory buffers). Proton marks: ``mma`` on the ``tl.dot`` line, ``advance`` on
the pointer increments (none on the loads: the pipeliner spreads their ops over iterations).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  GROUP_M: tl.constexpr):
    # Grouped ordering: GROUP_M row-tiles share the same column tiles while they are in L2.
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    group = pid // per_group
    first_m = group * GROUP_M
    rows_in_group = min(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % rows_in_group
    pid_n = (pid % per_group) // rows_in_group

    offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc)  # proton: mma
        # proton: begin advance
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
        # proton: end advance

    c = acc.to(tl.float16)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn
    tl.store(c_ptrs, c, mask=(rows[:, None] < M) & (cols[None, :] < N))


# Contiguous row-major A, B, C with sizes divisible by 16: the JIT then specializes the unit
# strides to the constant 1 and marks the rest divisible by 16, and so do these specs.
_SIG = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16", "M": "i32:16", "N": "i32:16",
        "K": "i32:16", "stride_am": "i32:16", "stride_bk": "i32:16", "stride_cm": "i32:16"}
_UNIT_STRIDES = {"stride_ak": 1, "stride_bn": 1, "stride_cn": 1}

SAMPLE_SPECS = [
    {"kernel": "matmul_kernel", "variant": "", "signature": _SIG,
     "constexprs": {**_UNIT_STRIDES, "BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8},
     "num_warps": 8, "num_stages": 3},
    {"kernel": "matmul_kernel", "variant": "64x64x32", "signature": _SIG,
     "constexprs": {**_UNIT_STRIDES, "BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8},
     "num_warps": 4, "num_stages": 4},
]


def matmul(a: torch.Tensor, b: torch.Tensor, bm: int = 128, bn: int = 128, bk: int = 64,
           num_warps: int = 8, num_stages: int = 3) -> torch.Tensor:
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
    matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                        c.stride(0), c.stride(1), BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8,
                        num_warps=num_warps, num_stages=num_stages)
    return c


def main() -> None:
    torch.manual_seed(0)
    a = torch.randn(1024, 768, device="cuda", dtype=torch.float16)
    b = torch.randn(768, 1536, device="cuda", dtype=torch.float16)
    ref = (a.float() @ b.float())
    for cfg in ((128, 128, 64, 8, 3), (64, 64, 32, 4, 4)):
        err = (matmul(a, b, *cfg).float() - ref).abs().max().item()
        print(f"matmul {cfg[0]}x{cfg[1]}x{cfg[2]}: max abs error {err:.3e}")


if __name__ == "__main__":
    main()
