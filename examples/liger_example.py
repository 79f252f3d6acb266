"""Liger-Kernel's Triton kernels, forward and backward, as a training step would run them.

RMSNorm, LayerNorm, SwiGLU, RoPE and cross entropy on small Llama-like shapes. Nothing here
knows about profiling; profile it in one run with:

    proton-inject profile --loops both -o liger_out -- python examples/liger_example.py

Prints one checksum line per op (identical with and without the tool). Exits 0 with a note
on stderr where liger_kernel is not installed (pip install liger-kernel).
"""

import sys

import torch


def main() -> None:
    try:
        from liger_kernel.transformers import functional as lf
    except ImportError:
        print("liger_example: liger_kernel is not installed; nothing to run", file=sys.stderr)
        return
    torch.manual_seed(0)
    dev, dt = "cuda", torch.bfloat16
    batch, seq, heads, head_dim, hidden, inter, vocab = 2, 128, 8, 64, 512, 1408, 4096
    rows = batch * seq

    x = torch.randn(rows, hidden, device=dev, dtype=dt, requires_grad=True)
    w = torch.randn(hidden, device=dev, dtype=dt, requires_grad=True)
    b = torch.randn(hidden, device=dev, dtype=dt, requires_grad=True)
    y = lf.liger_rms_norm(x, w, 1e-6, in_place=False)
    y.float().square().sum().backward()
    print(f"rms_norm: {y.float().sum().item():.4e} grad {x.grad.float().abs().sum().item():.4e}")

    x.grad = None
    y = lf.liger_layer_norm(x, w, b, 1e-6)
    y.float().square().sum().backward()
    print(f"layer_norm: {y.float().sum().item():.4e} grad {x.grad.float().abs().sum().item():.4e}")

    gate = torch.randn(rows, inter, device=dev, dtype=dt, requires_grad=True)
    up = torch.randn(rows, inter, device=dev, dtype=dt, requires_grad=True)
    y = lf.liger_swiglu(gate, up)
    y.float().sum().backward()
    print(f"swiglu: {y.float().sum().item():.4e} grad {gate.grad.float().abs().sum().item():.4e}")

    q = torch.randn(batch, heads, seq, head_dim, device=dev, dtype=dt, requires_grad=True)
    k = torch.randn(batch, heads, seq, head_dim, device=dev, dtype=dt, requires_grad=True)
    pos = torch.arange(seq, device=dev, dtype=torch.float32)
    inv = 1.0 / (10000 ** (torch.arange(0, head_dim, 2, device=dev) / head_dim))
    ang = torch.cat([pos[:, None] * inv[None, :]] * 2, dim=-1)[None]
    qr, kr = lf.liger_rope(q, k, ang.cos().to(dt), ang.sin().to(dt))
    (qr.float().sum() + kr.float().sum()).backward()
    print(f"rope: {qr.float().sum().item():.4e} grad {q.grad.float().abs().sum().item():.4e}")

    logits = torch.randn(rows, vocab, device=dev, dtype=torch.float32, requires_grad=True)
    target = torch.randint(0, vocab, (rows,), device=dev)
    loss = lf.liger_cross_entropy(logits, target)
    loss.backward()
    print(f"cross_entropy: {loss.item():.4e} grad {logits.grad.abs().sum().item():.4e}")


if __name__ == "__main__":
    main()
