"""Flash-attention forward (non-causal): one program per (query block, batch*head).

The K/V loop keeps a running row max ``m_i`` and row sum ``l_i`` (online softmax), rescales
the accumulator, and issues two ``tl.dot`` per step. ``attn_fwd_kernel`` uses plain pointer
loads; ``attn_fwd_ws_kernel`` loads through tensor descriptors and asks Triton to
warp-specialize the K/V loop (``tl.range(..., warp_specialize=True)``), which Triton 3.6
turns into ``ttg.warp_specialize`` producer/consumer partitions on sm_100.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def attn_fwd_kernel(q_ptr, k_ptr, v_ptr, o_ptr, sm_scale, stride_bh, stride_n, n_ctx,
                    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    base = bh.to(tl.int64) * stride_bh
    q = tl.load(q_ptr + base + offs_m[:, None] * stride_n + offs_d[None, :])
    k_ptrs = k_ptr + base + offs_n[:, None] * stride_n + offs_d[None, :]
    v_ptrs = v_ptr + base + offs_n[:, None] * stride_n + offs_d[None, :]

    # exp(x) == exp2(x * log2(e)): fold log2(e) into the scale once.
    qk_scale = sm_scale * 1.4426950408889634
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    for start_n in range(0, n_ctx, BLOCK_N):
        k = tl.load(k_ptrs + start_n * stride_n)
        s = tl.dot(q, tl.trans(k)) * qk_scale
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_ptrs + start_n * stride_n)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new

    out = acc / l_i[:, None]
    tl.store(o_ptr + base + offs_m[:, None] * stride_n + offs_d[None, :], out.to(o_ptr.dtype.element_ty))


@triton.jit
def attn_fwd_ws_kernel(q_ptr, k_ptr, v_ptr, o_ptr, sm_scale, n_ctx, rows,
                       HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                       WARP_SPECIALIZE: tl.constexpr):
    # Q, K, V, O are viewed as one (batch*heads*n_ctx, HEAD_DIM) matrix each.
    q_desc = tl.make_tensor_descriptor(q_ptr, shape=[rows, HEAD_DIM], strides=[HEAD_DIM, 1],
                                       block_shape=[BLOCK_M, HEAD_DIM])
    k_desc = tl.make_tensor_descriptor(k_ptr, shape=[rows, HEAD_DIM], strides=[HEAD_DIM, 1],
                                       block_shape=[BLOCK_N, HEAD_DIM])
    v_desc = tl.make_tensor_descriptor(v_ptr, shape=[rows, HEAD_DIM], strides=[HEAD_DIM, 1],
                                       block_shape=[BLOCK_N, HEAD_DIM])
    o_desc = tl.make_tensor_descriptor(o_ptr, shape=[rows, HEAD_DIM], strides=[HEAD_DIM, 1],
                                       block_shape=[BLOCK_M, HEAD_DIM])
    first_row = tl.program_id(1) * n_ctx
    q_row = first_row + tl.program_id(0) * BLOCK_M
    q = q_desc.load([q_row, 0])

    qk_scale = sm_scale * 1.4426950408889634
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    for start_n in tl.range(0, n_ctx, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
        k = k_desc.load([first_row + start_n, 0])
        s = tl.dot(q, k.T) * qk_scale
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = v_desc.load([first_row + start_n, 0])
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new

    o_desc.store([q_row, 0], (acc / l_i[:, None]).to(tl.float16))


# On an H100, Triton 3.6's warp-specialized version of this loop returns NaN with
# num_stages=3 (measured; 2 stages are right). With num_warps=8 it does not specialize at all.
WS_NUM_STAGES = 2

_SIG = {"q_ptr": "*fp16", "k_ptr": "*fp16", "v_ptr": "*fp16", "o_ptr": "*fp16",
        "sm_scale": "fp32", "stride_bh": "i32:16", "stride_n": "i32:16", "n_ctx": "i32:16"}
_WS_SIG = {"q_ptr": "*fp16", "k_ptr": "*fp16", "v_ptr": "*fp16", "o_ptr": "*fp16",
           "sm_scale": "fp32", "n_ctx": "i32:16", "rows": "i32:16"}

SAMPLE_SPECS = [
    {"kernel": "attn_fwd_kernel", "variant": "", "signature": _SIG,
     "constexprs": {"HEAD_DIM": 64, "BLOCK_M": 128, "BLOCK_N": 64}, "num_warps": 4,
     "num_stages": 3},
    {"kernel": "attn_fwd_kernel", "variant": "d128", "signature": _SIG,
     "constexprs": {"HEAD_DIM": 128, "BLOCK_M": 128, "BLOCK_N": 64}, "num_warps": 8,
     "num_stages": 3},
    {"kernel": "attn_fwd_ws_kernel", "variant": "", "signature": _WS_SIG,
     "constexprs": {"HEAD_DIM": 64, "BLOCK_M": 128, "BLOCK_N": 128, "WARP_SPECIALIZE": True},
     "num_warps": 4, "num_stages": WS_NUM_STAGES},
]


def _alloc(size: int, alignment: int, stream):
    return torch.empty(size, device="cuda", dtype=torch.int8)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sm_scale: float,
              warp_specialize: bool | None = None) -> torch.Tensor:
    """q, k, v: (batch, heads, n_ctx, head_dim) fp16, contiguous; n_ctx a multiple of 128."""
    B, H, n_ctx, d = q.shape
    o = torch.empty_like(q)
    if warp_specialize is None:
        grid = (triton.cdiv(n_ctx, 128), B * H)
        attn_fwd_kernel[grid](q, k, v, o, sm_scale, q.stride(1), q.stride(2), n_ctx,
                              HEAD_DIM=d, BLOCK_M=128, BLOCK_N=64, num_warps=4 if d <= 64 else 8,
                              num_stages=3)
    else:
        triton.set_allocator(_alloc)
        grid = (triton.cdiv(n_ctx, 128), B * H)
        attn_fwd_ws_kernel[grid](q, k, v, o, sm_scale, n_ctx, B * H * n_ctx, HEAD_DIM=d,
                                 BLOCK_M=128, BLOCK_N=128, WARP_SPECIALIZE=warp_specialize,
                                 num_warps=4, num_stages=WS_NUM_STAGES)
    return o


def main() -> None:
    torch.manual_seed(0)
    B, H, n_ctx = 2, 4, 1024
    major = torch.cuda.get_device_capability()[0]
    for d in (64, 128):
        q, k, v = (torch.randn(B, H, n_ctx, d, device="cuda", dtype=torch.float16) for _ in range(3))
        scale = d ** -0.5
        ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                                               scale=scale)
        err = (attention(q, k, v, scale).float() - ref).abs().max().item()
        print(f"attention d={d}: max abs error {err:.3e}")
        if d == 64 and major >= 9:
            for ws in (False, True):
                err = (attention(q, k, v, scale, warp_specialize=ws).float() - ref).abs().max().item()
                print(f"attention d={d} descriptors warp_specialize={ws}: max abs error {err:.3e}")


if __name__ == "__main__":
    main()
