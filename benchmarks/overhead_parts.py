"""Where profiling time goes in a kernel of many short CTAs (issue 9, part 2): cycles per part.

One small memory-bound kernel (each CTA copies BLOCK fp32), compiled plain and with k empty
regions (``proton.record start/end`` pairs at the top of the function, 2k records per warp)
through Proton's lowering (``proton_inject.lower.proton.installed``), for a shared and a global
record buffer of several sizes. Variants are launched directly (``CompiledKernel``) into one
reused profile buffer, in interleaved rounds, each launch after an L2 flush, and timed with
CUDA events (median per round). From the differences to the plain kernel:

- per record: the slope of time over records per warp (buffer large enough for all);
- the final copy: the slope of time over buffer bytes with one region (does finalize copy
  the whole buffer, used or not?);
- per-CTA set-up + finalize: one region in the smallest buffer, less its two records.

Times become SM-cycles per CTA: dt * SM clock * SMs / CTAs, the throughput cost one CTA adds
to its SM (CTAs overlap on an SM, so this is not one CTA's latency).

    PYTHONPATH=. python benchmarks/overhead_parts.py          # needs a CUDA GPU, ~1 min
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from proton_inject.lower.options import LoweringOptions  # noqa: E402
from proton_inject.lower.proton import installed  # noqa: E402

BLOCK = 256
NUM_WARPS = 4
SIGNATURE = {"x_ptr": "*fp32", "y_ptr": "*fp32"}
RECORD_COUNTS = (1, 2, 4, 8, 16, 32)  # regions; 2 records each per warp
BUFFERS = (64, 256, 1024, 4096, 16384)  # bytes per CTA (4 warps: 16 B = 2 records per warp up)


@triton.jit
def copy_kernel(x_ptr, y_ptr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs))


def plain_ttgir(target: Any) -> str:
    from triton.compiler import ASTSource

    src = ASTSource(copy_kernel, signature={**SIGNATURE, "BLOCK": "constexpr"},
                    constexprs={"BLOCK": BLOCK})
    with tempfile.TemporaryDirectory() as cache, triton.knobs.cache.scope():
        triton.knobs.cache.dir = cache
        return triton.compile(src, target=target, options={"num_warps": NUM_WARPS}).asm["ttgir"]


def with_regions(text: str, k: int) -> str:
    """``k`` empty regions right after the function's entry (each: one start, one end)."""
    m = re.search(r"^(\s*)tt\.func public @\w+\(.*\{\s*$", text, re.M)
    if m is None:
        raise ValueError("no tt.func line found in the TTGIR")
    pad = m.group(1) + "  "
    recs = "".join(f'{pad}proton.record start "r{i}"\n{pad}proton.record end "r{i}"\n'
                   for i in range(k))
    return text[: m.end() + 1] + recs + text[m.end() + 1:]


# Every warp records, into exactly the buffer given: the parts are measured per warp-record.
EVERY_WARP = {"warps": "all", "auto_size": False}


def compile_variant(text: str, options: LoweringOptions | None, target: Any, tmp: Path,
                    max_shared: int | None = None) -> Any:
    """``text`` compiled for ``target`` (with Proton's lowering when ``options`` is given)."""
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / "k.ttgir"
    path.write_text(text)
    with triton.knobs.cache.scope(), triton.knobs.compilation.scope():
        triton.knobs.cache.dir = str(tmp / "cache")
        triton.knobs.compilation.always_compile = True
        if options is None:
            return triton.compile(str(path), target=target)
        with installed(options, target=target, max_shared=max_shared):
            mode = triton.knobs.compilation.instrumentation_mode
            return triton.compile(str(path), target=target, options={"instrumentation_mode": mode})


def variants(target: Any, tmp: Path, max_shared: int | None = None) -> dict[tuple, Any]:
    """(buffer type, regions, buffer bytes) -> compiled kernel; ("plain", 0, 0) is plain."""
    text = plain_ttgir(target)
    out = {("plain", 0, 0): compile_variant(text, None, target, tmp / "plain", max_shared)}
    for btype in ("shared", "global"):
        big = BUFFERS[-1] if btype == "global" else 4096
        for k in RECORD_COUNTS:  # records per warp: 2k, all kept
            opts = LoweringOptions(buffer_type=btype, buffer_size=big, **EVERY_WARP)
            out[(btype, k, big)] = compile_variant(with_regions(text, k), opts, target,
                                                   tmp / f"{btype}-k{k}", max_shared)
        for size in BUFFERS:  # one region, buffer size swept
            if (btype, 1, size) not in out and (btype == "global" or size <= big):
                opts = LoweringOptions(buffer_type=btype, buffer_size=size, **EVERY_WARP)
                out[(btype, 1, size)] = compile_variant(with_regions(text, 1), opts, target,
                                                        tmp / f"{btype}-b{size}", max_shared)
    return out


def _slope(xs: list[float], ys: list[float]) -> float:
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ctas", type=int, default=1 << 16)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--launches", type=int, default=20)
    args = ap.parse_args(argv)

    import torch
    from triton.runtime import _allocation

    from proton_inject.collect.session import sm_clock_mhz
    from proton_inject.lower.proton import device_target

    if not torch.cuda.is_available():
        print("overhead_parts.py needs a CUDA GPU", file=sys.stderr)
        return 2
    target, max_shared = device_target()
    with tempfile.TemporaryDirectory() as tmpd:
        kernels = variants(target, Path(tmpd), max_shared)
    n = args.ctas * BLOCK
    x, y = torch.randn(n, device="cuda"), torch.empty(n, device="cuda")
    flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    scratch = max(k.metadata.profile_scratch_size for k in kernels.values()) * args.ctas
    pbuf = torch.empty(scratch, dtype=torch.int8, device="cuda")  # reused: no per-launch alloc
    _allocation.set_profile_allocator(lambda size, align, stream: pbuf)
    grid = (args.ctas, 1, 1)

    def time_ms(ck: Any) -> float:
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(args.launches)]
        for s, e in ev:
            flush.zero_()
            s.record()
            ck[grid](x, y)
            e.record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in ev)

    for ck in kernels.values():  # load modules, warm up
        ck[grid](x, y)
    torch.cuda.synchronize()
    times: dict[tuple, list[float]] = {key: [] for key in kernels}
    for _ in range(args.rounds):
        for key, ck in kernels.items():
            times[key].append(time_ms(ck))
    med = {key: statistics.median(v) for key, v in times.items()}
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    mhz = sm_clock_mhz(0) or 1755.0
    cyc = mhz * 1e3 * sms / args.ctas  # SM-cycles per CTA per ms of kernel time
    plain = med[("plain", 0, 0)]
    print(f"device: {torch.cuda.get_device_name()}, triton {triton.__version__}; {args.ctas} CTAs "
          f"x {NUM_WARPS} warps, {sms} SMs at {mhz:.0f} MHz; {args.rounds} rounds x "
          f"{args.launches} launches, L2 flushed; plain {plain:.4f} ms "
          f"({min(times[('plain', 0, 0)]):.4f}..{max(times[('plain', 0, 0)]):.4f})")
    print(f"{'buffer':<7} {'regions':>7} {'bytes/CTA':>9} {'scratch':>8} {'ms':>8} {'ratio':>6} "
          f"{'SM-cycles/CTA':>13}")
    for (btype, k, size), t in sorted(med.items(), key=lambda kv: (kv[0][0] != "plain", kv[0])):
        sc = kernels[(btype, k, size)].metadata.profile_scratch_size
        print(f"{btype:<7} {k:>7} {size:>9} {sc:>8} {t:8.4f} {t / plain:6.3f} {(t - plain) * cyc:13.1f}")
    for btype in ("shared", "global"):
        big = BUFFERS[-1] if btype == "global" else 4096
        per_record = _slope([2.0 * k for k in RECORD_COUNTS],
                            [med[(btype, k, big)] for k in RECORD_COUNTS]) * cyc
        sizes = sorted(s for (b, k, s) in med if b == btype and k == 1)
        per_kib = _slope([s / 1024 for s in sizes], [med[(btype, 1, s)] for s in sizes]) * cyc
        base = (med[(btype, 1, sizes[0])] - plain) * cyc - 2 * per_record
        print(f"{btype}: per record {per_record:.1f} SM-cycles/CTA per warp-record; final copy "
              f"{per_kib:.1f} per KiB of buffer; set-up + finalize {base:.1f} per CTA "
              f"(buffer {sizes[0]} B)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
