"""Liger-Kernel 0.8.5 forward and backward, as a Llama training step runs them.

LigerRMSNorm, LigerSwiGLUMLP, LigerCrossEntropyLoss (some rows ignored), LigerFusedLinear-
CrossEntropyLoss (some rows ignored) and liger_rotary_pos_emb on small bf16 shapes. Prints
one line per step on stdout, ``name sha256`` of the output's (or gradients') bytes, or
``name error:<ExceptionType>``; anything else goes to stderr.

    python tests/gpu/programs/liger_prog.py

Needs a CUDA GPU and liger_kernel (pip install liger-kernel==0.8.5).
"""

from __future__ import annotations

import contextlib
import sys
from types import SimpleNamespace

import torch
from outputs import emitter  # beside this file


def steps(out) -> None:
    """Run each op forward then backward; print a line for each."""
    from liger_kernel.transformers import (
        LigerCrossEntropyLoss,
        LigerFusedLinearCrossEntropyLoss,
        LigerRMSNorm,
        LigerSwiGLUMLP,
        liger_rotary_pos_emb,
    )

    dev, dt = "cuda", torch.bfloat16
    batch, seq, heads, head_dim, hidden, inter, vocab = 2, 128, 8, 64, 512, 1408, 4096
    rows = batch * seq

    emit = emitter(out, "liger_prog")

    def leaf(*shape: int, dtype: torch.dtype = dt) -> torch.Tensor:
        return torch.randn(*shape, device=dev, dtype=dtype).requires_grad_()

    # RMSNorm
    torch.manual_seed(0)
    norm = LigerRMSNorm(hidden, eps=1e-6).to(dev, dt)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(hidden, device=dev, dtype=dt) + 0.5)
    x, dy = leaf(rows, hidden), torch.randn(rows, hidden, device=dev, dtype=dt)
    st: dict = {}
    emit("rms_norm.fwd", lambda: st.setdefault("y", norm(x)))
    emit("rms_norm.bwd", lambda: (st["y"].backward(dy), (x.grad, norm.weight.grad))[1])

    # SwiGLU MLP (gate/up/down projections are cuBLAS; SiLU*mul is Liger's kernel)
    torch.manual_seed(1)
    cfg = SimpleNamespace(hidden_size=hidden, intermediate_size=inter, hidden_act="silu")
    mlp = LigerSwiGLUMLP(cfg).to(dev, dt)
    x, dy = leaf(rows, hidden), torch.randn(rows, hidden, device=dev, dtype=dt)
    st = {}
    emit("swiglu_mlp.fwd", lambda: st.setdefault("y", mlp(x)))
    emit("swiglu_mlp.bwd", lambda: (st["y"].backward(dy), (x.grad, mlp.gate_proj.weight.grad,
                                                           mlp.up_proj.weight.grad))[1])

    # Cross entropy, every 7th row ignored (Liger's kernel returns early for those)
    torch.manual_seed(2)
    logits = leaf(rows, vocab, dtype=torch.float32)
    target = torch.randint(0, vocab, (rows,), device=dev)
    target[::7] = -100
    ce = LigerCrossEntropyLoss(ignore_index=-100)
    st = {}
    emit("cross_entropy.fwd", lambda: st.setdefault("loss", ce(logits, target)))
    emit("cross_entropy.bwd", lambda: (st["loss"].backward(), logits.grad)[1])

    # Fused linear + cross entropy (never materializes the logits), every 5th row ignored
    torch.manual_seed(3)
    h = leaf(rows, hidden)
    lin_w = (0.02 * torch.randn(vocab, hidden, device=dev, dtype=dt)).requires_grad_()
    target = torch.randint(0, vocab, (rows,), device=dev)
    target[::5] = -100
    flce = LigerFusedLinearCrossEntropyLoss(ignore_index=-100)
    st = {}
    emit("fused_linear_cross_entropy.fwd", lambda: st.setdefault("loss", flce(lin_w, h, target)))
    emit("fused_linear_cross_entropy.bwd", lambda: (st["loss"].backward(), (h.grad, lin_w.grad))[1])

    # RoPE on q and k (b, heads, seq, head_dim)
    torch.manual_seed(4)
    q, k = leaf(batch, heads, seq, head_dim), leaf(batch, heads // 2, seq, head_dim)
    pos = torch.arange(seq, device=dev, dtype=torch.float32)
    inv = 1.0 / (10000 ** (torch.arange(0, head_dim, 2, device=dev) / head_dim))
    ang = torch.cat([pos[:, None] * inv[None, :]] * 2, dim=-1)[None]
    cos, sin = ang.cos().to(dt), ang.sin().to(dt)
    dq, dk = torch.randn_like(q), torch.randn_like(k)
    st = {}
    emit("rope.fwd", lambda: st.setdefault("qk", liger_rotary_pos_emb(q, k, cos, sin)))
    emit("rope.bwd", lambda: (torch.autograd.backward(list(st["qk"]), [dq, dk]), (q.grad, k.grad))[1])


def main() -> int:
    out = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):  # nothing but our lines on stdout
        steps(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
