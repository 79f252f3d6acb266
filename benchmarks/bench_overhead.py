"""Kernel time with and without instrumentation, side by side in one run, as ratios.

Workloads: the vector add and the pipelined matmul from ``examples/`` at sizes where the
kernel, not the launch, dominates. Both are dumped by running this file as a program
(``--workload-only``), instrumented with two rule sets, then timed with
``triton.testing.do_bench`` (median of CUDA-event timings) plain and inside ``profile()``.
Timed launches keep no buffer (``max_launches=0``): the records are still written by the
kernel, but no copy to the host is queued, so the ratio is the kernel's own slowdown.

    PYTHONPATH=. python benchmarks/bench_overhead.py            # needs a CUDA GPU
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from pathlib import Path

import torch
import triton.testing

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from proton_inject.api import profile  # noqa: E402
from proton_inject.dump.program import dump_program  # noqa: E402
from proton_inject.instrument.rules import Rules  # noqa: E402
from proton_inject.instrument.trees import instrument_tree, write_tree  # noqa: E402
from proton_inject.lower.options import LoweringOptions  # noqa: E402


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "examples" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def workloads() -> dict:
    va, mm = _load("vector_add"), _load("matmul")
    torch.manual_seed(0)
    n = 1 << 26
    x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    return {
        "vector_add 2^26 fp32": lambda: va.add(x, y, block=1024, blocks_per_prog=4),
        "matmul 4096^3 fp16": lambda: mm.matmul(a, b, 128, 128, 64, 8, 3),
    }


RULES = {
    "kernel": Rules(kernel_scope=True, marks=False),
    "kernel+loop+iter": Rules(kernel_scope=True, loops="both", marks=False),
}
OPTIONS = {
    "clock64": LoweringOptions(buffer_type="shared"),
    "clock32": LoweringOptions(clock=32, buffer_type="shared"),
    "sched_stores": LoweringOptions(sched_stores=True, buffer_type="shared"),
    "global16K": LoweringOptions(buffer_type="global", buffer_size=16384),
}


def _time(fn) -> float:
    return triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median")


def main() -> None:
    if "--workload-only" in sys.argv:
        for fn in workloads().values():
            fn()
        torch.cuda.synchronize()
        return
    work = workloads()
    plain = {name: _time(fn) for name, fn in work.items()}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        dump = Path(tmp) / "dump"
        dump_program([sys.executable, __file__, "--workload-only"], dump)
        for rname, rules in RULES.items():
            outputs, manifest, _ = instrument_tree(dump, rules)
            inst = write_tree(outputs, manifest, Path(tmp) / f"inst-{len(rows)}")
            for oname, opts in OPTIONS.items():
                with profile(instrumented=inst, out=Path(tmp) / "t", options=opts, max_launches=0, quiet=True) as res:
                    times = {name: _time(fn) for name, fn in work.items()}
                assert res.dropped, "no instrumented launch happened"
                rows += [(name, rname, oname, plain[name], t) for name, t in times.items()]
    again = {name: _time(fn) for name, fn in work.items()}  # plain once more: is it stable?
    print(f"device: {torch.cuda.get_device_name()}")
    head = f"{'workload':<22} {'regions':<17} {'options':<13} {'plain ms':>9} {'instr ms':>9} {'ratio':>6}"
    print(head)
    print("-" * len(head))
    for name, rname, oname, p, t in sorted(rows):
        print(f"{name:<22} {rname:<17} {oname:<13} {p:9.4f} {t:9.4f} {t / p:6.3f}")
    for name in work:
        print(f"plain {name}: {plain[name]:.4f} ms first, {again[name]:.4f} ms last")


if __name__ == "__main__":
    main()
