"""Segment mean over CSR segments: data-dependent control flow on scalars.

Each program reads its segment bounds from memory. An empty segment takes one branch of an
``scf.if``; a non-empty one walks the segment with a ``while`` loop (``scf.while``) whose trip
count is only known at run time.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def segment_mean_kernel(values_ptr, seg_starts_ptr, out_ptr, empty_value, BLOCK: tl.constexpr):
    seg = tl.program_id(0)
    start = tl.load(seg_starts_ptr + seg)
    end = tl.load(seg_starts_ptr + seg + 1)
    if end <= start:
        tl.store(out_ptr + seg, empty_value)
    else:
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        pos = start
        while pos < end:
            offs = pos + tl.arange(0, BLOCK)
            acc += tl.load(values_ptr + offs, mask=offs < end, other=0.0).to(tl.float32)
            pos += BLOCK
        tl.store(out_ptr + seg, tl.sum(acc, axis=0) / (end - start).to(tl.float32))


_SIG = {"values_ptr": "*fp32", "seg_starts_ptr": "*i32", "out_ptr": "*fp32",
        "empty_value": "fp32"}

SAMPLE_SPECS = [
    {"kernel": "segment_mean_kernel", "variant": "", "signature": _SIG,
     "constexprs": {"BLOCK": 256}, "num_warps": 4, "num_stages": 3},
    {"kernel": "segment_mean_kernel", "variant": "b1024", "signature": _SIG,
     "constexprs": {"BLOCK": 1024}, "num_warps": 8, "num_stages": 3},
]


def segment_mean(values: torch.Tensor, seg_starts: torch.Tensor, empty_value: float = 0.0):
    n_segs = seg_starts.numel() - 1
    out = torch.empty(n_segs, device=values.device, dtype=torch.float32)
    segment_mean_kernel[(n_segs,)](values, seg_starts, out, empty_value, BLOCK=256, num_warps=4)
    return out


def main() -> None:
    torch.manual_seed(0)
    lengths = torch.randint(0, 3000, (513,))
    lengths[::7] = 0  # some empty segments take the other branch
    starts = torch.zeros(lengths.numel() + 1, dtype=torch.int32)
    starts[1:] = torch.cumsum(lengths, 0)
    values = torch.randn(int(starts[-1]), device="cuda")
    out = segment_mean(values, starts.cuda(), empty_value=-1.0)
    ref = torch.tensor([values[s:e].mean().item() if e > s else -1.0
                        for s, e in zip(starts[:-1].tolist(), starts[1:].tolist(), strict=True)],
                       device="cuda")
    print(f"control_flow: max abs error {(out - ref).abs().max().item():.3e}")


if __name__ == "__main__":
    main()
