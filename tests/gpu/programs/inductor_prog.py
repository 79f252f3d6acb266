"""A small transformer block compiled by torch.compile: every Triton kernel comes from Inductor.

RMS-style norm, attention written out (matmul, causal mask, softmax: Inductor fuses the
softmax into Triton kernels) and a SiLU-gated MLP. ``--mode default`` runs forward and
backward; ``--mode reduce-overhead`` runs inference under CUDA graphs (warm-up, record,
replay). Prints one line per step on stdout, ``name sha256`` of the outputs' (or gradients')
bytes; anything else goes to stderr.

    python tests/gpu/programs/inductor_prog.py --mode default
    python tests/gpu/programs/inductor_prog.py --mode reduce-overhead

Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import sys

import torch
import torch.nn.functional as F
from outputs import digest  # beside this file
from torch import nn


class Block(nn.Module):
    def __init__(self, dim: int = 256, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)
        self.gate = nn.Linear(dim, 4 * dim, bias=False)
        self.up = nn.Linear(dim, 4 * dim, bias=False)
        self.down = nn.Linear(4 * dim, dim, bias=False)
        self.w1 = nn.Parameter(torch.rand(dim) + 0.5)
        self.w2 = nn.Parameter(torch.rand(dim) + 0.5)

    @staticmethod
    def norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm(x, self.w1)).view(b, t, 3, self.heads, d // self.heads).transpose(1, 3).unbind(2)
        s = (q @ k.transpose(-1, -2)) * (d // self.heads) ** -0.5
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        a = torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1) @ v
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        h = self.norm(x, self.w2)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=("default", "reduce-overhead"), default="default")
    ap.add_argument("--iters", type=int, default=3)
    args = ap.parse_args()
    out = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):  # nothing but our lines on stdout
        torch.manual_seed(0)
        model = Block().cuda()
        x = torch.randn(4, 128, 256, device="cuda")
        compiled = torch.compile(model, mode=None if args.mode == "default" else args.mode)
        if args.mode == "default":
            dy = torch.randn_like(x)
            for i in range(args.iters):
                model.zero_grad(set_to_none=True)
                y = compiled(x)
                print(f"fwd.{i} {digest(y)}", file=out, flush=True)
                y.backward(dy)
                grads = [p.grad for p in model.parameters()]
                print(f"bwd.{i} {digest(grads)}", file=out, flush=True)
        else:
            with torch.no_grad():
                for i in range(args.iters):  # a replay overwrites the last output: hash it now
                    y = compiled(x)
                    print(f"fwd.{i} {digest(y)}", file=out, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
