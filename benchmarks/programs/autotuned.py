"""A program of our own whose kernels are autotuned over 10-12 configs each (issue 29's
wall-time goal): a matmul, a row softmax and a scaled add, launched ITERS times each; prints
one sha256 per kernel output so a profiled run can be compared with a plain one (the same
whichever configs the autotuner picks).

    python benchmarks/programs/autotuned.py [ITERS]
"""

import hashlib
import sys

import torch
import triton
import triton.language as tl

MM_CONFIGS = [
    triton.Config({"BM": bm, "BN": bn, "BK": bk}, num_warps=w, num_stages=s)
    for bm, bn, bk, w, s in [
        (64, 64, 32, 4, 2), (64, 64, 64, 4, 3), (128, 64, 32, 4, 3), (64, 128, 32, 4, 3),
        (128, 128, 32, 8, 3), (128, 128, 64, 8, 3), (128, 64, 64, 4, 4), (64, 128, 64, 4, 4),
        (128, 256, 32, 8, 3), (256, 128, 32, 8, 3), (32, 64, 32, 2, 2), (64, 32, 32, 2, 2),
    ]
]


@triton.autotune(configs=MM_CONFIGS, key=["M", "N", "K"])
@triton.jit
def matmul_kernel(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        x = tl.load(a + rm[:, None] * K + (k + rk)[None, :])
        y = tl.load(b + (k + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(x, y)
    tl.store(c + rm[:, None] * N + rn[None, :], acc.to(tl.float16))


SOFTMAX_CONFIGS = [triton.Config({}, num_warps=w, num_stages=s)
                   for w in (1, 2, 4, 8, 16) for s in (1, 2)]


@triton.autotune(configs=SOFTMAX_CONFIGS, key=["n_cols"])
@triton.jit
def softmax_kernel(x, y, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    v = tl.load(x + row * n_cols + cols, mask=cols < n_cols, other=-float("inf"))
    v = v - tl.max(v, axis=0)
    e = tl.exp(v)
    tl.store(y + row * n_cols + cols, e / tl.sum(e, axis=0), mask=cols < n_cols)


ADD_CONFIGS = [triton.Config({"BLOCK": b}, num_warps=w)
               for b, w in [(256, 1), (256, 2), (512, 2), (512, 4), (1024, 4), (1024, 8),
                            (2048, 4), (2048, 8), (4096, 8), (4096, 16)]]


@triton.autotune(configs=ADD_CONFIGS, key=["n"])
@triton.jit
def scaled_add_kernel(x, y, out, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=m) * alpha + tl.load(y + offs, mask=m), mask=m)


def digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()[:16]


def main(iters: int) -> None:
    torch.manual_seed(0)
    dev = "cuda"
    M = N = K = 1024
    # Values chosen so that every config computes the same bits (autotuning may pick another
    # config run to run, and another block size sums in another order): small integers in the
    # matmul sum exactly; each softmax row holds 0 or -30, whose exponentials sum exactly.
    a = torch.randint(-3, 4, (M, K), device=dev).to(torch.float16)
    b = torch.randint(-3, 4, (K, N), device=dev).to(torch.float16)
    c = torch.empty(M, N, device=dev, dtype=torch.float16)
    x = torch.where(torch.rand(4096, 1000, device=dev) < 0.5, 0.0, -30.0)
    y = torch.empty_like(x)
    u, v = torch.randn(1 << 22, device=dev), torch.randn(1 << 22, device=dev)
    w = torch.empty_like(u)
    for _ in range(iters):
        matmul_kernel[lambda m: (M // m["BM"], N // m["BN"])](a, b, c, M, N, K)
        softmax_kernel[(x.shape[0],)](x, y, x.shape[1], BLOCK=1024)
        scaled_add_kernel[lambda m: (triton.cdiv(u.numel(), m["BLOCK"]),)](u, v, w, u.numel(), 0.5)
    torch.cuda.synchronize()
    for name, t in (("matmul", c), ("softmax", y), ("scaled_add", w)):
        print(name, digest(t))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
