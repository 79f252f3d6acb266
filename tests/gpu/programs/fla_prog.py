"""flash-linear-attention (fla-core 0.6.0): gated linear attention forward and backward.

chunk_gla and fused_recurrent_gla, each with an initial state and the final state returned,
on small shapes. (fla itself refuses its gated ``chunk_bwd_dqkwg`` on Hopper with Triton
3.4-3.7.0, also without proton-inject; GLA does not use it.) Prints one line per step on
stdout, ``name sha256`` of the outputs' (or gradients') bytes, or ``name error:<ExceptionType>``;
anything else goes to stderr.

    python tests/gpu/programs/fla_prog.py

Needs a CUDA GPU and fla (pip install fla-core==0.6.0 einops).
"""

from __future__ import annotations

import contextlib
import sys

import torch
from outputs import emitter  # beside this file


def steps(out) -> None:
    import torch.nn.functional as F
    from fla.ops.gla import chunk_gla, fused_recurrent_gla

    dev, dt = "cuda", torch.bfloat16
    B, T, H, K, V = 2, 256, 4, 64, 64

    emit = emitter(out, "fla_prog")

    for name, op in (("chunk_gla", chunk_gla), ("fused_recurrent_gla", fused_recurrent_gla)):
        torch.manual_seed(0)
        q = torch.randn(B, T, H, K, device=dev, dtype=dt).requires_grad_()
        k = torch.randn(B, T, H, K, device=dev, dtype=dt).requires_grad_()
        v = torch.randn(B, T, H, V, device=dev, dtype=dt).requires_grad_()
        g = F.logsigmoid(torch.randn(B, T, H, K, device=dev, dtype=torch.float32)).to(dt).requires_grad_()
        h0 = torch.randn(B, H, K, V, device=dev, dtype=torch.float32).requires_grad_()
        do = torch.randn(B, T, H, V, device=dev, dtype=dt)
        dht = torch.randn(B, H, K, V, device=dev, dtype=torch.float32)
        st: dict = {}

        def fwd(op=op, q=q, k=k, v=v, g=g, h0=h0, st=st):
            if op is chunk_gla:
                res = op(q, k, v, g, initial_state=h0, output_final_state=True)
            else:
                res = op(q, k, v, gk=g, initial_state=h0, output_final_state=True)
            st["o"] = res
            return res

        def bwd(q=q, k=k, v=v, g=g, h0=h0, do=do, dht=dht, st=st):
            o, ht = st["o"]
            torch.autograd.backward([o, ht], [do, dht])
            return q.grad, k.grad, v.grad, g.grad, h0.grad

        emit(f"{name}.fwd", fwd)
        emit(f"{name}.bwd", bwd)


def main() -> int:
    out = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):  # nothing but our lines on stdout
        steps(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
