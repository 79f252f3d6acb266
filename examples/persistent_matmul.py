"""Persistent fp16 matmul C = A @ B^T through tensor descriptors (TMA on sm_90 / sm_100).

A fixed grid of ``NUM_SMS`` programs strides over the output tiles; each tile runs a K loop
of descriptor loads and ``tl.dot``. B is stored N x K (K-major), the layout TMA and the
tensor cores like best. ``persistent_matmul_kernel`` builds its descriptors on the device
(``tl.make_tensor_descriptor``, which needs ``triton.set_allocator`` for their scratch
memory); ``persistent_matmul_host_desc_kernel`` takes host-built ``TensorDescriptor`` args.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _tile_coords(tile_id, tiles_m, tiles_n, GROUP_M: tl.constexpr):
    per_group = GROUP_M * tiles_n
    first_m = (tile_id // per_group) * GROUP_M
    rows_in_group = min(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (tile_id % rows_in_group)
    pid_n = (tile_id % per_group) // rows_in_group
    return pid_m, pid_n


@triton.jit
def persistent_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                             GROUP_M: tl.constexpr, NUM_SMS: tl.constexpr,
                             WARP_SPECIALIZE: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1],
                                       block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[K, 1],
                                       block_shape=[BLOCK_N, BLOCK_K])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1],
                                       block_shape=[BLOCK_M, BLOCK_N])
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    k_steps = tl.cdiv(K, BLOCK_K)
    for tile_id in tl.range(tl.program_id(0), tiles_m * tiles_n, NUM_SMS, flatten=True,
                            warp_specialize=WARP_SPECIALIZE):
        pid_m, pid_n = _tile_coords(tile_id, tiles_m, tiles_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ks in range(k_steps):
            a = a_desc.load([off_m, ks * BLOCK_K])
            b = b_desc.load([off_n, ks * BLOCK_K])
            acc = tl.dot(a, b.T, acc)
        c_desc.store([off_m, off_n], acc.to(tl.float16))


@triton.jit
def persistent_matmul_host_desc_kernel(a_desc, b_desc, c_desc, M, N, K,
                                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                       BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                                       NUM_SMS: tl.constexpr):
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    k_steps = tl.cdiv(K, BLOCK_K)
    for tile_id in tl.range(tl.program_id(0), tiles_m * tiles_n, NUM_SMS, flatten=True):
        pid_m, pid_n = _tile_coords(tile_id, tiles_m, tiles_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ks in range(k_steps):
            a = a_desc.load([off_m, ks * BLOCK_K])
            b = b_desc.load([off_n, ks * BLOCK_K])
            acc = tl.dot(a, b.T, acc)
        c_desc.store([off_m, off_n], acc.to(tl.float16))


_SIG = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp16",
        "M": "i32:16", "N": "i32:16", "K": "i32:16"}
_TILES = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "NUM_SMS": 132}

SAMPLE_SPECS = [
    {"kernel": "persistent_matmul_kernel", "variant": "", "signature": _SIG,
     "constexprs": {**_TILES, "WARP_SPECIALIZE": False}, "num_warps": 8, "num_stages": 3},
    {"kernel": "persistent_matmul_kernel", "variant": "ws", "signature": _SIG,
     "constexprs": {**_TILES, "WARP_SPECIALIZE": True}, "num_warps": 4, "num_stages": 3},
    {"kernel": "persistent_matmul_host_desc_kernel", "variant": "",
     "signature": {"a_desc": "tensordesc<fp16[128, 64]>", "b_desc": "tensordesc<fp16[128, 64]>",
                   "c_desc": "tensordesc<fp16[128, 128]>",
                   "M": "i32:16", "N": "i32:16", "K": "i32:16"},
     "constexprs": _TILES, "num_warps": 8, "num_stages": 3},
]


def _alloc(size: int, alignment: int, stream):
    return torch.empty(size, device="cuda", dtype=torch.int8)


def persistent_matmul(a: torch.Tensor, b_nk: torch.Tensor, warp_specialize: bool = False,
                      host_desc: bool = False) -> torch.Tensor:
    M, K = a.shape
    N = b_nk.shape[0]
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    num_sms = torch.cuda.get_device_properties(a.device).multi_processor_count
    bm, bn, bk = 128, 128, 64
    grid = (min(num_sms, triton.cdiv(M, bm) * triton.cdiv(N, bn)),)
    if host_desc:
        from triton.tools.tensor_descriptor import TensorDescriptor

        persistent_matmul_host_desc_kernel[grid](
            TensorDescriptor.from_tensor(a, [bm, bk]), TensorDescriptor.from_tensor(b_nk, [bn, bk]),
            TensorDescriptor.from_tensor(c, [bm, bn]), M, N, K, BLOCK_M=bm, BLOCK_N=bn,
            BLOCK_K=bk, GROUP_M=8, NUM_SMS=grid[0], num_warps=8, num_stages=3)
    else:
        triton.set_allocator(_alloc)
        persistent_matmul_kernel[grid](a, b_nk, c, M, N, K, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                                       GROUP_M=8, NUM_SMS=grid[0],
                                       WARP_SPECIALIZE=warp_specialize,
                                       num_warps=4 if warp_specialize else 8, num_stages=3)
    return c


def main() -> None:
    torch.manual_seed(0)
    a = torch.randn(2048, 1024, device="cuda", dtype=torch.float16)
    b_nk = torch.randn(1536, 1024, device="cuda", dtype=torch.float16)
    ref = a.float() @ b_nk.float().T
    major = torch.cuda.get_device_capability()[0]
    runs = [("device descriptors", {}), ("host descriptors", {"host_desc": True})]
    if major >= 10:
        runs.append(("warp-specialized", {"warp_specialize": True}))
    for label, kw in runs:
        err = (persistent_matmul(a, b_nk, **kw).float() - ref).abs().max().item()
        print(f"persistent_matmul ({label}): max abs error {err:.3e}")


if __name__ == "__main__":
    main()
