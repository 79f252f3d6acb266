"""A tiny transformer block compiled with torch.compile: every kernel comes from Inductor.

    proton-inject profile -o tc_out -- python examples/small_model_compiled.py

``profile`` makes Inductor compile in this process with its caches off, so each generated
kernel passes through the compile hook and is instrumented like a hand-written one. Prints
a checksum of the output and of one gradient (identical with and without the tool).
"""

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, dim: int = 256, heads: int = 4) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


def main() -> None:
    torch.manual_seed(0)
    model = Block().cuda()
    compiled = torch.compile(model)
    x = torch.randn(8, 128, 256, device="cuda")
    for _ in range(2):
        out = compiled(x)
    out.square().mean().backward()
    grad = model.mlp[0].weight.grad
    print(f"small_model_compiled: out {out.sum().item():.4e} grad {grad.abs().sum().item():.4e}")


if __name__ == "__main__":
    main()
