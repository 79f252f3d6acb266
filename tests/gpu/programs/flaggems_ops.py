"""FlagGems 5.0.2 through ``with flag_gems.use_gems():``: common torch ops routed to its Triton kernels.

Prints one line per op on stdout, ``name sha256`` of the output's bytes (dtype and shape
included), or ``name error:<ExceptionType>`` where the library refuses the op here, so one op
never stops the others. Everything else (FlagGems' own prints, progress) goes to stderr, so
stdout is byte-identical between a plain and a profiled run exactly when every output is.

    python tests/gpu/programs/flaggems_ops.py            # every op (50)
    python tests/gpu/programs/flaggems_ops.py --quick    # 12 of them (the GPU test)
    python tests/gpu/programs/flaggems_ops.py --ops add,sort,cumsum

Inputs are made with plain torch before ``use_gems`` (its RNG ops are Triton kernels too);
outputs are hashed after it. Needs a CUDA GPU and flag_gems (pip install flag-gems==5.0.2).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

import torch
import torch.nn.functional as F
from outputs import digest  # beside this file

# The op subset a short test runs: the kernels that misbehaved first (layer_norm, var_mean
# under run; sort, cumsum hashes moving) plus one of each family.
QUICK = ("add", "gelu", "softmax", "layer_norm", "rms_norm", "var_mean", "sum_dim", "cumsum",
         "mm", "cross_entropy", "sort", "index_select")


def make_ops(dev: str) -> list[tuple[str, object]]:
    """(name, thunk) pairs; every input is created here, with plain torch, seeded."""
    torch.manual_seed(0)
    f32, f16 = torch.float32, torch.float16

    def rn(*shape: int, dtype: torch.dtype = f32) -> torch.Tensor:
        return torch.randn(*shape, device=dev, dtype=dtype)

    x, y = rn(256, 1024), rn(256, 1024)
    pos = x.abs() + 0.1
    near1 = 1.0 + 0.01 * rn(64, 256)
    xh = rn(256, 1024, dtype=f16)
    w, b = rn(1024), rn(1024)
    img, gw, gb = rn(4, 32, 16, 16), rn(32), rn(32)
    a, m, c = rn(256, 512, dtype=f16), rn(512, 384, dtype=f16), rn(256, 384, dtype=f16)
    vec = rn(512, dtype=f16)
    ba, bb = rn(8, 128, 64, dtype=f16), rn(8, 64, 96, dtype=f16)
    idx = torch.randint(0, 256, (100,), device=dev)
    emb_w, tokens = rn(1000, 128), torch.randint(0, 1000, (16, 32), device=dev)
    gidx = torch.argsort(torch.rand(256, 1024, device=dev), dim=1)[:, :64].contiguous()
    src = rn(256, 64)
    logits, target = rn(128, 1000), torch.randint(0, 1000, (128,), device=dev)
    target_ign = target.clone()
    target_ign[::5] = -100
    ints = torch.randint(-50, 50, (4096,), device=dev)
    sq = rn(128, 128)
    cond = x > 0
    return [
        ("add", lambda: torch.add(x, y, alpha=0.5)),
        ("mul", lambda: x * y),
        ("sub", lambda: x - y),
        ("div", lambda: x / pos),
        ("exp", lambda: torch.exp(x)),
        ("log", lambda: torch.log(pos)),
        ("rsqrt", lambda: torch.rsqrt(pos)),
        ("gelu", lambda: F.gelu(x)),
        ("gelu_tanh", lambda: F.gelu(xh, approximate="tanh")),
        ("silu", lambda: F.silu(x)),
        ("relu", lambda: F.relu(x)),
        ("sigmoid", lambda: torch.sigmoid(x)),
        ("tanh", lambda: torch.tanh(x)),
        ("abs", lambda: torch.abs(x)),
        ("pow", lambda: torch.pow(pos, 1.5)),
        ("clamp", lambda: torch.clamp(x, -0.5, 0.5)),
        ("where", lambda: torch.where(cond, x, y)),
        ("maximum", lambda: torch.maximum(x, y)),
        ("softmax", lambda: torch.softmax(x, dim=-1)),
        ("log_softmax", lambda: F.log_softmax(x, dim=-1)),
        ("layer_norm", lambda: F.layer_norm(x, (1024,), w, b, 1e-5)),
        ("rms_norm", lambda: F.rms_norm(x, (1024,), w, 1e-6)),
        ("group_norm", lambda: F.group_norm(img, 8, gw, gb)),
        ("sum", lambda: x.sum()),
        ("sum_dim", lambda: x.sum(dim=1)),
        ("mean", lambda: x.mean(dim=-1)),
        ("max_dim", lambda: torch.max(x, dim=1)),
        ("min_dim", lambda: torch.min(x, dim=0)),
        ("argmax", lambda: torch.argmax(x, dim=1)),
        ("var_mean", lambda: torch.var_mean(x, dim=1)),
        ("prod", lambda: torch.prod(near1, dim=1)),
        ("vector_norm", lambda: torch.linalg.vector_norm(x, dim=1)),
        ("cumsum", lambda: torch.cumsum(x, dim=1)),
        ("cumsum_int", lambda: torch.cumsum(ints, dim=0)),
        ("mm", lambda: a @ m),
        ("bmm", lambda: torch.bmm(ba, bb)),
        ("addmm", lambda: torch.addmm(c, a, m)),
        ("mv", lambda: torch.mv(a, vec)),
        ("cat", lambda: torch.cat([x, y], dim=0)),
        ("index_select", lambda: torch.index_select(x, 0, idx)),
        ("embedding", lambda: F.embedding(tokens, emb_w)),
        ("gather", lambda: torch.gather(x, 1, gidx)),
        ("scatter", lambda: torch.zeros_like(x).scatter(1, gidx, src)),
        ("cross_entropy", lambda: F.cross_entropy(logits, target)),
        ("cross_entropy_ignore", lambda: F.cross_entropy(logits, target_ign, ignore_index=-100)),
        ("topk", lambda: torch.topk(x, 8, dim=1)),
        ("sort", lambda: torch.sort(x, dim=1)),
        ("pad", lambda: F.pad(x, (1, 2, 3, 4), value=0.5)),
        ("triu", lambda: torch.triu(sq, diagonal=1)),
        ("flip", lambda: torch.flip(x, dims=[1])),
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=f"only {len(QUICK)} ops")
    ap.add_argument("--ops", help="comma-separated op names (default: all)")
    args = ap.parse_args()
    out = sys.stdout
    if torch.version.cuda:  # skip FlagGems' vendor probe (a subprocess per vendor's tool)
        os.environ.setdefault("GEMS_VENDOR", "nvidia")
    with contextlib.redirect_stdout(sys.stderr):  # nothing but our lines on stdout
        import flag_gems

        ops = make_ops("cuda")
        wanted = set(QUICK) if args.quick else set(args.ops.split(",")) if args.ops else None
        if wanted is not None:
            unknown = wanted - {n for n, _ in ops}
            if unknown:
                print(f"unknown ops: {', '.join(sorted(unknown))}", file=sys.stderr)
                return 2
            ops = [(n, f) for n, f in ops if n in wanted]
        torch.cuda.synchronize()
        results: list[tuple[str, object, str | None]] = []
        with flag_gems.use_gems():
            for name, fn in ops:
                t0 = time.perf_counter()
                try:
                    res = fn()
                    torch.cuda.synchronize()
                    results.append((name, res, None))
                except Exception as e:  # the library may not support an op on this device
                    results.append((name, None, type(e).__name__))
                    print(f"flaggems_ops: {name}: {type(e).__name__}: {str(e)[:300]}", file=sys.stderr)
                print(f"flaggems_ops: {name} {time.perf_counter() - t0:.2f} s", file=sys.stderr)
        for name, res, err in results:  # hashed outside use_gems: plain torch copies
            print(f"{name} {digest(res) if err is None else 'error:' + err}", file=out, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
