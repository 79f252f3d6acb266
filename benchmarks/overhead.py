"""Overhead of profiling, over a fixed suite of kernels, as ratios with their spread (issue 9).

Suite: matmul 4096^3 (plain and persistent), flash attention 4x16x4096x64, layer norm 8192^2,
softmax, vector add (``examples/``), Liger-Kernel's RMSNorm (left out when liger_kernel is
absent), and two kernels Inductor generated (``ttgir_samples/sources/inductor/``, launched
through the JIT at a large size: their hard-coded ``xnumel`` line is dropped so the size is
the argument's).
Each runs with five rule sets (the defaults; the defaults in every 8th CTA, ``--sample-ctas 8``;
``--loops both`` + kernel scope, in every CTA and in every 8th; ``--op tt.load``) under
several lowering options: the tool's defaults (the first warp of each partition records,
every warp of a persistent kernel; ``--buffer-size auto``; ``--buffer-type auto``), the same
in shared memory, Proton's own (every warp, its default shared buffer), and single changes.
Each (rules, options) pair first warms up (2 x plain and instrumented) so clocks and caches
settle before the first round.

How it times: one ``Session`` per (rules, options), the same session ``profile()``
opens, with ``max_launches=0`` (records are written, nothing is copied to the host) and plain
twins off (else launches not kept would run the plain build). Inside
it the JIT holds both builds of each kernel, keyed by ``instrumentation_mode``: plain ones
compiled before the session, instrumented ones inside it; the benchmark switches the knob to
pick one, so rounds interleave plain, instrumented, plain, ... without compiling again (a
plain launch that would compile is an error). Each launch follows an L2 flush (a 256 MiB
memset) and is timed with CUDA events; a round's time is the median of its launches. A
round's ratio is instrumented / mean(plain before, plain after); the table prints the median
ratio and its min..max over rounds, and the plain time of the first and last round.
``--warm-l2``: each round times its launches back to back instead (their mean), queued behind
a spin kernel, with the inputs in L2 as a program's small launches find them.

    PYTHONPATH=. python benchmarks/overhead.py --quick     # ~3 min on an H100
    PYTHONPATH=. python benchmarks/overhead.py             # every rule set x option
    PYTHONPATH=. python benchmarks/overhead.py --only 'layer|rms' --rounds 20
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import statistics
import sys
import tempfile
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any
from unittest.mock import patch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from proton_inject.instrument.rules import Rules  # noqa: E402
from proton_inject.lower.options import LoweringOptions  # noqa: E402

INDUCTOR = ROOT / "ttgir_samples" / "sources" / "inductor"

RULES = {
    "default": Rules().with_defaults(),
    # --sample-ctas 8 --no-marks: the examples' marks inside loops cannot be sampled.
    "default cta/8": Rules(sample_ctas=8, marks=False).with_defaults(),
    "loops both": Rules(kernel_scope=True, loops="both"),
    # the same in every 8th CTA: loops with records inside run in two copies
    "loops both cta/8": Rules(kernel_scope=True, loops="both", sample_ctas=8, marks=False),
    "op tt.load": Rules(ops=["tt.load"]),
}
OPTIONS = {
    # the first warp of each partition (every warp of a persistent kernel), --buffer-size auto,
    # --buffer-type auto (direct, else global, when no record sits inside a loop)
    "default": LoweringOptions(),
    "shared": LoweringOptions(buffer_type="shared"),  # the defaults before --buffer-type auto
    "proton": LoweringOptions(warps="all", auto_size=False, buffer_type="shared"),  # Proton's own
    "clock32": LoweringOptions(clock=32),
    "warps 0": LoweringOptions(warps=(0,), auto_size=False, buffer_type="shared"),
    "auto all": LoweringOptions(warps="all"),  # --warps all --buffer-size auto
    "auto warp 0": LoweringOptions(warps=(0,)),  # --warps 0, the rest as the defaults
    "global": LoweringOptions(buffer_type="global"),  # Proton's lowering into global memory
    "global all": LoweringOptions(buffer_type="global", warps="all"),
    # every warp of a 4- or 8-warp kernel named one by one: Proton's selective-warps code path
    # recording what "all" records (tells the warp-id test's cost from one warp's)
    "list 0-3": LoweringOptions(warps=(0, 1, 2, 3)),
    "list 0-7": LoweringOptions(warps=tuple(range(8))),
    # records inside loops lowered directly, iterations 0, 4, 8, ... kept
    "iter/4": LoweringOptions(sample_iterations=4),
}
# --quick: the new defaults against Proton's choices, CTA sampling, every loop iteration.
QUICK = [("default", "default"), ("default", "global"), ("default", "shared"), ("default", "proton"),
         ("default cta/8", "default"), ("loops both", "default"), ("loops both cta/8", "default"),
         ("loops both", "proton")]


def load_example(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"overhead_{name}", ROOT / "examples" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load_inductor(stem: str, tmp: Path, suffix: str = "") -> Any:
    """An Inductor kernel module as a plain ``@triton.jit`` function sized by its arguments.

    The generated file decorates the kernel with Inductor's autotuner (which launches through
    its own launcher) and hard-codes ``xnumel``; we keep the kernel body, drop that line and
    the decorator, and import libdevice from Triton. The JIT needs a real file to read.
    ``suffix`` renames the kernel: a second size of it must compile as a kernel of its own (the
    same source would take the first size's builds from Triton's cache, unseen by the session).
    """
    text = (INDUCTOR / f"{stem}.py").read_text()
    body = text[text.index("@triton.jit"):]
    body = re.sub(r"\n    xnumel = \d+\n", "\n", body, count=1).replace(f"def {stem}(", f"def {stem}{suffix}(")
    head = "import triton\nimport triton.language as tl\nfrom triton.language.extra import libdevice\n\n"
    path = tmp / f"{stem}{suffix}.py"
    path.write_text(head + body)
    spec = importlib.util.spec_from_file_location(f"overhead_{stem}{suffix}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, stem + suffix)


POINTWISE = "triton_poi_fused_gelu_0"
REDUCTION = "triton_per_fused_add_mean_mul_pow_rsqrt_0"
# Compile specs of the Inductor kernels as launched below (the CPU test compiles them too).
INDUCTOR_SPECS = {
    POINTWISE: {"signature": {"in_ptr0": "*fp32", "out_ptr0": "*fp32", "xnumel": "i32"},
                "constexprs": {"XBLOCK": 1024}, "num_warps": 4},
    REDUCTION: {"signature": {"in_ptr0": "*fp32", "in_ptr1": "*fp32", "in_ptr2": "*fp32",
                              "out_ptr0": "*fp32", "out_ptr2": "*fp32", "xnumel": "i32",
                              "r0_numel": "i32"},
                "constexprs": {"XBLOCK": 8}, "num_warps": 4},
}


@dataclass
class Workload:
    name: str
    make: Callable[[Path], Callable[[], Any] | None]  # None: cannot run here (with a note)


def _matmul(tmp: Path):
    import torch

    mm = load_example("matmul")
    a, b = (torch.randn(4096, 4096, device="cuda", dtype=torch.float16) for _ in range(2))
    return lambda: mm.matmul(a, b, 128, 128, 64, 8, 3)


def _persistent_matmul(tmp: Path):
    import torch

    pm = load_example("persistent_matmul")  # a grid of NUM_SMS CTAs striding over the tiles
    a, b_nk = (torch.randn(4096, 4096, device="cuda", dtype=torch.float16) for _ in range(2))
    return lambda: pm.persistent_matmul(a, b_nk)


def _attention(tmp: Path):
    import torch

    at = load_example("attention")
    q, k, v = (torch.randn(4, 16, 4096, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    return lambda: at.attention(q, k, v, 64**-0.5)


def _layernorm(tmp: Path):
    import torch

    ln = load_example("layernorm")
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    w, b = (torch.randn(8192, device="cuda", dtype=torch.float16) for _ in range(2))
    return lambda: ln.layernorm(x, w, b)


def _softmax(tmp: Path):
    import torch

    sm = load_example("softmax")
    x = torch.randn(32768, 1024, device="cuda", dtype=torch.float16)
    return lambda: sm.softmax(x)


def _vector_add(tmp: Path):
    import torch

    va = load_example("vector_add")
    x, y = (torch.randn(1 << 26, device="cuda") for _ in range(2))
    return lambda: va.add(x, y, block=1024, blocks_per_prog=4)


def _liger_rms(tmp: Path):
    try:
        from liger_kernel.transformers import functional as lf
    except ImportError:
        return None
    import torch

    x = torch.randn(16384, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, device="cuda", dtype=torch.bfloat16)
    return lambda: lf.liger_rms_norm(x, w, 1e-6)


def _inductor_pointwise(tmp: Path, n: int = 1 << 26):
    import torch

    k = load_inductor(POINTWISE, tmp, "" if n == 1 << 26 else f"_n{n}")
    x, y = torch.randn(n, device="cuda"), torch.empty(n, device="cuda")
    xblock = INDUCTOR_SPECS[POINTWISE]["constexprs"]["XBLOCK"]
    return lambda: k[(n // xblock,)](x, y, n, XBLOCK=xblock, num_warps=4)


def _inductor_reduction(tmp: Path, rows: int = 1 << 18):
    import torch

    k = load_inductor(REDUCTION, tmp, "" if rows == 1 << 18 else f"_r{rows}")  # rows of 256 (r0_numel is fixed)
    a, b = (torch.randn(rows, 256, device="cuda") for _ in range(2))
    w = torch.randn(256, device="cuda")
    o1, o2 = torch.empty_like(a), torch.empty_like(a)
    xblock = INDUCTOR_SPECS[REDUCTION]["constexprs"]["XBLOCK"]
    return lambda: k[(rows // xblock,)](a, b, w, o1, o2, rows, 256, XBLOCK=xblock, num_warps=4)


SUITE = [
    Workload("matmul 4096^3 fp16", _matmul),
    Workload("persistent matmul 4096^3 fp16", _persistent_matmul),
    Workload("attention 4x16x4096x64", _attention),
    Workload("layer norm 8192^2 fp16", _layernorm),
    Workload("softmax 32768x1024 fp16", _softmax),
    Workload("vector add 2^26 fp32", _vector_add),
    Workload("liger rms_norm 16384x4096", _liger_rms),
    Workload("inductor gelu 2^26", _inductor_pointwise),
    Workload("inductor rmsnorm 2^18x256", _inductor_reduction),
    # The size of a torch.compile'd block's launches (2.5-3.5 us, less than a wave of CTAs):
    # what a record costs where every CTA's extra latency is the kernel's.
    Workload("inductor gelu 2^20", partial(_inductor_pointwise, n=1 << 20)),
    Workload("inductor rmsnorm 2^12x256", partial(_inductor_reduction, rows=1 << 12)),
]


# --- timing ---------------------------------------------------------------------------------


@contextmanager
def _mode(value: str):
    import triton

    prev = triton.knobs.compilation.instrumentation_mode
    triton.knobs.compilation.instrumentation_mode = value
    try:
        yield
    finally:
        triton.knobs.compilation.instrumentation_mode = prev


def time_ms(fn: Callable[[], Any], launches: int, flush: Any) -> float:
    """Median kernel time over ``launches`` calls, each after an L2 flush (``flush`` None: the
    mean of ``launches`` calls back to back, L2 warm, queued behind a spin so that the host's
    launch time is not in it)."""
    import torch

    if flush is None:
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(4_000_000)  # (~2 ms: the launches below queue up behind it)
        s.record()
        for _ in range(launches):
            fn()
        e.record()
        torch.cuda.synchronize()
        return s.elapsed_time(e) / launches

    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
          for _ in range(launches)]
    for s, e in ev:
        flush.zero_()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in ev)


@dataclass
class Row:
    workload: str
    rules: str
    options: str
    plain: list[float]  # rounds + 1 plain times, before and after each instrumented one
    inst: list[float]
    note: str = ""

    def ratios(self) -> list[float]:
        return [t / ((a + b) / 2) for t, a, b in zip(self.inst, self.plain, self.plain[1:], strict=False)]


def measure(work: dict[str, Callable], rules: Rules, options: LoweringOptions, rounds: int,
            launches: int, flush: Any, out: Path) -> dict[str, tuple[list, list, str]]:
    """Interleaved plain/instrumented times of each workload in one profiling session."""
    import triton

    from proton_inject.collect import plain_twins
    from proton_inject.collect.session import Session

    # Launches not kept (here every one) would run the plain twin: the ratio would be plain
    # against plain (as it was from plain twins' default on, 2026-11-29, until this line).
    with patch.dict(os.environ, {plain_twins.ENV: "0"}):  # (read as the session starts)
        session = Session(rules, out, options, max_launches=0).start()
    if session.launch_path.twins:
        session.stop()
        raise RuntimeError("the session runs plain twins: the instrumented builds would not be timed")
    results: dict[str, tuple[list, list, str]] = {}
    try:
        inst_mode = triton.knobs.compilation.instrumentation_mode
        kernels: dict[str, list] = {}
        for name, fn in work.items():  # compile the instrumented builds
            before = set(session.hook.compiled)
            fn()
            kernels[name] = [session.hook.compiled[h] for h in set(session.hook.compiled) - before]
        for name, fn in work.items():
            done = [c for c in kernels[name] if c.instrumented]
            if not done:
                why = "; ".join(sorted({f"{c.name}: {c.reason}" for c in kernels[name]})) or "no compile"
                results[name] = ([], [], f"not instrumented ({why})")
                continue
            plain, inst = [], []
            for _ in range(2):  # warm-up: clocks and caches settle before the first round
                with _mode(""):
                    time_ms(fn, launches, flush)
                time_ms(fn, launches, flush)
            for r in range(rounds + 1):
                n = len(session.hook.compiled)
                with _mode(""):
                    plain.append(time_ms(fn, launches, flush))
                if len(session.hook.compiled) != n:
                    raise RuntimeError(f"{name}: a plain launch compiled inside the session")
                if r < rounds:
                    inst.append(time_ms(fn, launches, flush))
            assert triton.knobs.compilation.instrumentation_mode == inst_mode
            results[name] = (plain, inst, "")
    finally:
        session.stop()
    return results


def table(rows: list[Row]) -> str:
    head = (f"{'workload':<26} {'regions':<13} {'options':<8} {'plain ms':>9} {'ratio':>6} "
            f"{'min..max':>13} {'plain first..last':>18}")
    out = [head, "-" * len(head)]
    for r in rows:
        if r.note:
            out.append(f"{r.workload:<26} {r.rules:<13} {r.options:<8} {r.note}")
            continue
        q = r.ratios()
        p = statistics.median(r.plain)
        out.append(f"{r.workload:<26} {r.rules:<13} {r.options:<8} {p:9.4f} "
                   f"{statistics.median(q):6.3f} {min(q):6.3f}..{max(q):.3f} "
                   f"{r.plain[0]:8.4f}..{r.plain[-1]:.4f}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="only " + ", ".join(f"{r} x {o}" for r, o in QUICK))
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds (10; quick: 7)")
    ap.add_argument("--launches", type=int, default=None, help="launches per round (20; quick: 10)")
    ap.add_argument("--only", default=None, metavar="REGEX", help="workloads whose name matches")
    ap.add_argument("--combos", default=None, metavar="RULES:OPTIONS,...",
                    help="these (rule set, options) pairs only, e.g. 'default:default,default:auto all'"
                         f"; rule sets: {', '.join(RULES)}; options: {', '.join(OPTIONS)}")
    ap.add_argument("--warm-l2", action="store_true",
                    help="launches back to back, inputs in L2 (as a program's small launches run), "
                         "instead of one at a time after an L2 flush")
    args = ap.parse_args(argv)
    combos = [tuple(c.split(":", 1)) for c in args.combos.split(",")] if args.combos else None
    for c in combos or ():
        if len(c) != 2 or c[0] not in RULES or c[1] not in OPTIONS:
            ap.error(f"--combos: {':'.join(c)!r} is not RULES:OPTIONS with known names")
    rounds = args.rounds or (7 if args.quick else 10)
    launches = args.launches or (10 if args.quick else 20)

    import torch
    import triton

    if not torch.cuda.is_available():
        print("overhead.py needs a CUDA GPU", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmpd:
        tmp = Path(tmpd)
        work: dict[str, Callable] = {}
        for w in SUITE:
            if args.only and not re.search(args.only, w.name):
                continue
            fn = w.make(tmp)
            if fn is None:
                rows.append(Row(w.name, "-", "-", [], [], "skipped: liger_kernel is not installed"))
                continue
            fn()  # the plain builds, before any session
            work[w.name] = fn
        torch.cuda.synchronize()
        flush = None if args.warm_l2 else torch.empty(256 << 20, dtype=torch.int8, device="cuda")
        if not combos:
            combos = QUICK if args.quick else [(r, o) for r in RULES for o in OPTIONS]
        for rn, on in combos:
            out = tmp / f"out-{len(rows)}"
            res = measure(work, RULES[rn], OPTIONS[on], rounds, launches, flush, out)
            new = [Row(name, rn, on, p, i, note) for name, (p, i, note) in res.items()]
            print(table(new), file=sys.stderr, flush=True)  # kept if a time limit cuts the run
            rows += new
    order = {w.name: i for i, w in enumerate(SUITE)}
    rows.sort(key=lambda r: (order[r.workload], r.rules, r.options))
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"triton {triton.__version__}; {rounds} rounds x {launches} launches, "
          + ("back to back, L2 warm" if args.warm_l2 else "L2 flushed"))
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
