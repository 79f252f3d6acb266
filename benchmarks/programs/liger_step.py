"""A Liger-Kernel training step: a one-layer Llama-like model whose norms, RoPE, SwiGLU and
loss are Liger's Triton kernels (liger_kernel 0.8.5), trained STEPS steps with AdamW on fixed
random hidden states and next tokens. The projections and attention are torch's own (cuBLAS,
attention written out rather than SDPA, whose backward may use atomics: the losses printed
are the same from run to run). Prints one ``step N loss L`` line per step on stdout;
anything else goes to stderr.

    python benchmarks/programs/liger_step.py [--steps 20]

Needs a CUDA GPU and liger_kernel (pip install liger-kernel==0.8.5).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from types import SimpleNamespace

import torch
from torch import nn

BATCH, SEQ, HEADS, HEAD_DIM, INTER, VOCAB = 4, 256, 8, 64, 1408, 8192
HIDDEN = HEADS * HEAD_DIM


class Layer(nn.Module):
    """One decoder layer and the LM head with Liger's fused linear cross entropy."""

    def __init__(self) -> None:
        from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss, LigerRMSNorm, LigerSwiGLUMLP

        super().__init__()
        self.norm_attn = LigerRMSNorm(HIDDEN, eps=1e-6)
        self.qkv = nn.Linear(HIDDEN, 3 * HIDDEN, bias=False)
        self.o = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.norm_mlp = LigerRMSNorm(HIDDEN, eps=1e-6)
        self.mlp = LigerSwiGLUMLP(SimpleNamespace(hidden_size=HIDDEN, intermediate_size=INTER, hidden_act="silu"))
        self.norm_out = LigerRMSNorm(HIDDEN, eps=1e-6)
        self.head = nn.Linear(HIDDEN, VOCAB, bias=False)
        self.loss = LigerFusedLinearCrossEntropyLoss(ignore_index=-100)

    def forward(self, x: torch.Tensor, target: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        from liger_kernel.transformers import liger_rotary_pos_emb

        b, t, _ = x.shape
        qkv = self.qkv(self.norm_attn(x)).view(b, t, 3, HEADS, HEAD_DIM).permute(2, 0, 3, 1, 4)
        q, k = liger_rotary_pos_emb(qkv[0].contiguous(), qkv[1].contiguous(), cos, sin)
        s = (q @ k.transpose(-1, -2)) * HEAD_DIM**-0.5
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        a = torch.softmax(s.masked_fill(~causal, float("-inf")), dim=-1) @ qkv[2]
        x = x + self.o(a.transpose(1, 2).reshape(b, t, HIDDEN))
        x = x + self.mlp(self.norm_mlp(x))
        return self.loss(self.head.weight, self.norm_out(x).view(b * t, HIDDEN), target.view(b * t))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    out = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):  # nothing but our lines on stdout
        torch.manual_seed(0)
        dev, dt = "cuda", torch.bfloat16
        model = Layer().to(dev, dt)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x = torch.randn(BATCH, SEQ, HIDDEN, device=dev, dtype=dt)
        target = torch.randint(0, VOCAB, (BATCH, SEQ), device=dev)
        target[:, -1] = -100  # (no next token)
        pos = torch.arange(SEQ, device=dev, dtype=torch.float32)
        inv = 1.0 / (10000 ** (torch.arange(0, HEAD_DIM, 2, device=dev) / HEAD_DIM))
        ang = torch.cat([pos[:, None] * inv[None, :]] * 2, dim=-1)[None]
        cos, sin = ang.cos().to(dt), ang.sin().to(dt)
        for i in range(args.steps):
            opt.zero_grad(set_to_none=True)
            loss = model(x, target, cos, sin)
            loss.backward()
            opt.step()
            print(f"step {i} loss {loss.item():.6f}", file=out, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
