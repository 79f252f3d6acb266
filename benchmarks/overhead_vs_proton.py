"""Overhead of our profile against Proton's own instrumentation on the same regions (issue 9).

Two workloads of many short CTAs: the layer norm of ``examples/layernorm.py`` (8192^2 fp16,
8 warps, three loops; 8192 CTAs) and the vector add of ``examples/vector_add.py`` (2^26 fp32,
4 warps, 16384 CTAs). The regions are what our default rules give: the kernel scope and each
outer loop as a whole (the vector add's ``# proton:`` mark is left out, ``marks=False``, so
the regions are the same on both sides).

Rows, each a ratio to the plain kernel (median over rounds, min..max, plain ms):

* ``default``: the example kernel profiled by our ``Session`` with our defaults
  (warp 0 records, ``--buffer-size auto``);
* ``all+pbuf``: the same with Proton's choices, ``LoweringOptions(warps="all",
  auto_size=False)`` (every warp, Proton's default buffer);
* ``Proton``: a copy of the kernel with ``triton.profiler.language`` scopes
  (``pl.enter_scope``/``pl.exit_scope`` around the body and each loop, the same names our
  insert gives), launched under ``proton.start(name, backend="instrumentation")`` with
  Proton's defaults (every warp, its default shared circular buffer, 64-bit clock).

Our rows are timed by ``benchmarks/overhead.py``'s ``measure``: one session per options,
plain and instrumented launches interleaved in rounds, each after an L2 flush, CUDA events.

Proton's row is measured in a subprocess, which prints its own plain and instrumented times
(the ratio is to the plain kernel timed there, the pl copy built without a session, whose
scopes emit nothing). Two reasons: Proton's instrumentation hook patches the backends, the
launch hooks and the profile allocator of the process it starts in; and after every
instrumented launch its exit hook synchronizes the stream, copies the whole buffer to the
host and parses it before the launch returns, so ``overhead.time_ms`` (end event after the
call) would time that host work. The child times each launch with events recorded by launch
hooks that run inside Proton's (after its enter, before its exit), behind a ~2 ms GPU spin so
the flush, the start event and the kernel run back to back; it switches between plain and
instrumented with ``proton.deactivate``/``proton.activate`` (the JIT keeps both builds, keyed
by the instrumentation mode), in interleaved rounds with an L2 flush before each launch; and
after each plain launch it leaves the GPU idle as long as an instrumented launch's host work
took (measured in the warm-up), so both kinds run at the same clocks. Its rounds stop early
when ``--proton-budget`` runs out (the table's footer says how many were done).

Triton 3.6's ``pl.enter_scope`` emits a ``proton.record`` only while Proton's hook is active
(``triton.profiler.flags.instrumentation_on``) and, for kernels in the Triton DSL rather than
Gluon, only after ``pl.enable_semantic("triton")``; the child does both.

    PYTHONPATH=. python benchmarks/overhead_vs_proton.py                 # ~45 s on an H100
    PYTHONPATH=. python benchmarks/overhead_vs_proton.py --rounds 10 --proton-rounds 7
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import triton
import triton.language as tl
import triton.profiler.language as pl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.overhead import Row, _layernorm, _vector_add, measure, table  # noqa: E402
from proton_inject.instrument.rules import Rules  # noqa: E402
from proton_inject.lower.options import LoweringOptions  # noqa: E402

RULES = Rules(marks=False).with_defaults()  # kernel scope + each loop as a whole
OPTIONS = {"default": LoweringOptions(), "all+pbuf": LoweringOptions(warps="all", auto_size=False,
                                                                     buffer_type="shared")}
REGIONS = "kernel+loops"
LAYERNORM, VECTOR_ADD = "layer norm 8192^2 fp16", "vector add 2^26 fp32"


# --- the examples' kernels with Proton's own scopes (names as our insert gives them) --------


@triton.jit
def layernorm_pl_kernel(x_ptr, y_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, row_stride, n_cols, eps,
                        BLOCK: tl.constexpr):
    pl.enter_scope("kernel")
    row = tl.program_id(0)
    x_row = x_ptr + row * row_stride
    y_row = y_ptr + row * row_stride

    partial = tl.zeros([BLOCK], dtype=tl.float32)
    pl.enter_scope("loop partial @layernorm.py:20")
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        partial += tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    pl.exit_scope("loop partial @layernorm.py:20")
    mean = tl.sum(partial, axis=0) / n_cols

    partial = tl.zeros([BLOCK], dtype=tl.float32)
    pl.enter_scope("loop partial @layernorm.py:26")
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        d = tl.where(cols < n_cols, x - mean, 0.0)
        partial += d * d
    pl.exit_scope("loop partial @layernorm.py:26")
    rstd = 1.0 / tl.sqrt(tl.sum(partial, axis=0) / n_cols + eps)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)

    pl.enter_scope("loop start @layernorm.py:35")
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        w = tl.load(w_ptr + cols, mask=mask)
        b = tl.load(b_ptr + cols, mask=mask)
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        y = (x - mean) * rstd * w + b
        tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
    pl.exit_scope("loop start @layernorm.py:35")
    pl.exit_scope("kernel")


@triton.jit
def add_pl_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK: tl.constexpr,
                  BLOCKS_PER_PROG: tl.constexpr):
    pl.enter_scope("kernel")
    pid = tl.program_id(0)
    first = pid * (BLOCK * BLOCKS_PER_PROG)
    lane = tl.arange(0, BLOCK)
    pl.enter_scope("loop i @vector_add.py:17")
    for i in range(BLOCKS_PER_PROG):
        offs = first + i * BLOCK + lane
        mask = offs < n_elements
        x = tl.load(x_ptr + offs, mask=mask)
        y = tl.load(y_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, x + y, mask=mask)
    pl.exit_scope("loop i @vector_add.py:17")
    pl.exit_scope("kernel")


# example (examples/NAME.py) -> its copy with pl scopes; the CPU test compiles both.
PL_KERNELS = {"layernorm": layernorm_pl_kernel, "vector_add": add_pl_kernel}


def _layernorm_pl():
    import torch

    x = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    w, b = (torch.randn(8192, device="cuda", dtype=torch.float16) for _ in range(2))
    y = torch.empty_like(x)
    mean, rstd = (torch.empty(8192, device="cuda") for _ in range(2))
    return lambda: layernorm_pl_kernel[(8192,)](x, y, w, b, mean, rstd, x.stride(0), 8192, 1e-5,
                                                BLOCK=1024, num_warps=8)


def _vector_add_pl():
    import torch

    n = 1 << 26
    x, y = (torch.randn(n, device="cuda") for _ in range(2))
    out = torch.empty_like(x)
    return lambda: add_pl_kernel[(n // 4096,)](x, y, out, n, BLOCK=1024, BLOCKS_PER_PROG=4,
                                               num_warps=4)


OURS = {LAYERNORM: _layernorm, VECTOR_ADD: _vector_add}  # overhead.py's launches
THEIRS = {LAYERNORM: _layernorm_pl, VECTOR_ADD: _vector_add_pl}


# --- Proton's side (child process) ----------------------------------------------------------


class _LaunchEvents:
    """Launch hooks that record a pending pair of CUDA events tightly around the kernel: added
    after Proton's, the enter hook runs after Proton's enter and the exit hook (the exit chain
    runs in reverse) before Proton's exit, which synchronizes and parses on the host."""

    def __init__(self) -> None:
        self.pending: tuple[Any, Any] | None = None

    def enter(self, metadata: Any) -> None:
        if self.pending is not None:
            self.pending[0].record()

    def exit(self, metadata: Any) -> None:
        if self.pending is not None:
            self.pending[1].record()
            self.pending = None


# GPU cycles to spin before each launch (~2 ms), so the flush, the start event and the kernel
# run back to back while the host is still in the launch hooks, as when launches queue up.
_SPIN_CYCLES = 4_000_000


def _timed(fn: Callable[[], Any], launches: int, flush: Any, hooks: _LaunchEvents,
           idle: float) -> tuple[float, float]:
    """(median kernel ms, median host seconds per launch) over ``launches`` launches, each
    after an L2 flush; the host waits until ``idle`` seconds have passed since each launch."""
    import torch

    ms, host = [], []
    for _ in range(launches):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        torch.cuda._sleep(_SPIN_CYCLES)
        flush.zero_()
        hooks.pending = (s, e)
        fn()
        if hooks.pending is not None:
            raise RuntimeError("the launch hooks did not run")
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        if dt < idle:
            time.sleep(idle - dt)
        ms.append(s.elapsed_time(e))
        host.append(dt)
    return statistics.median(ms), statistics.median(host)


def run_proton(rounds: int, launches: int, budget: float, workdir: Path) -> dict[str, dict]:
    """Plain and Proton-instrumented times of the pl kernels, interleaved, in this process;
    each workload stops after the round that passes its share of ``budget`` seconds."""
    import torch
    import triton.profiler as proton
    from triton.profiler.flags import flags

    pl.enable_semantic("triton")  # Triton 3.6 instruments Gluon kernels only by default
    torch.manual_seed(0)
    work = {name: make() for name, make in THEIRS.items()}
    for fn in work.values():
        fn()  # the plain builds: no session, so the scopes emit nothing
    torch.cuda.synchronize()
    flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    session = proton.start(str(workdir / "proton"), backend="instrumentation")
    if not flags.instrumentation_on:
        raise RuntimeError("proton.start did not turn instrumentation on")
    hooks = _LaunchEvents()
    triton.knobs.runtime.launch_enter_hook.add(hooks.enter)
    triton.knobs.runtime.launch_exit_hook.add(hooks.exit)
    results: dict[str, dict] = {}
    try:
        for name, fn in work.items():
            deadline = time.perf_counter() + budget / len(work)
            try:
                fn()  # the instrumented build, inside the session
                torch.cuda.synchronize()
                _, host = _timed(fn, launches, flush, hooks, 0.0)  # warm-up; Proton's host time
                proton.deactivate(session)
                plain, inst = [], []
                _timed(fn, launches, flush, hooks, host)
                plain.append(_timed(fn, launches, flush, hooks, host)[0])
                for _ in range(rounds):
                    proton.activate(session)
                    inst.append(_timed(fn, launches, flush, hooks, 0.0)[0])
                    proton.deactivate(session)
                    plain.append(_timed(fn, launches, flush, hooks, host)[0])
                    if time.perf_counter() > deadline:
                        break
                results[name] = {"plain": plain, "inst": inst, "host_s": host}
            except Exception as e:  # noqa: BLE001 - one workload's failure is its row's note
                hooks.pending = None
                results[name] = {"note": f"Proton failed: {type(e).__name__}: {e}"[:150]}
            finally:
                proton.activate(session)
            print(f"Proton {name}: {results[name]}", file=sys.stderr, flush=True)
    finally:
        triton.knobs.runtime.launch_enter_hook.remove(hooks.enter)
        triton.knobs.runtime.launch_exit_hook.remove(hooks.exit)
        try:
            proton.finalize()
        except Exception as e:  # noqa: BLE001 - the times are measured; the profile is not used
            print(f"proton.finalize failed: {e}", file=sys.stderr)
    return results


def proton_child(rounds: int, launches: int, budget: float) -> dict[str, dict] | str:
    """Run Proton's side in a fresh process; its results, or why there are none."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    with tempfile.TemporaryDirectory(prefix="pi-vs-proton-") as tmp:
        cmd = [sys.executable, __file__, "--child", str(rounds), str(launches), str(budget), tmp]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    sys.stderr.write(p.stderr)
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines:
        tail = (p.stderr.strip().splitlines() or ["no output"])[-1]
        return f"Proton run failed (exit {p.returncode}): {tail[:120]}"
    return json.loads(lines[-1])


# --- ours, and the table ---------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds, ours (7)")
    ap.add_argument("--launches", type=int, default=10, help="launches per round, ours (10)")
    ap.add_argument("--proton-rounds", type=int, default=5, help="rounds, Proton's side (5)")
    ap.add_argument("--proton-launches", type=int, default=3,
                    help="launches per round, Proton's side (3; each parses on the host)")
    ap.add_argument("--proton-budget", type=float, default=20.0, metavar="S",
                    help="seconds of Proton-side timing; fewer rounds when it runs out (20)")
    ap.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        rounds, launches, budget, tmp = args.child
        print(json.dumps(run_proton(int(rounds), int(launches), float(budget), Path(tmp))))
        return 0

    import torch

    if not torch.cuda.is_available():
        print("overhead_vs_proton.py needs a CUDA GPU", file=sys.stderr)
        return 2
    # Proton's side first, with the GPU to itself.
    theirs = proton_child(args.proton_rounds, args.proton_launches, args.proton_budget)
    torch.manual_seed(0)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmpd:
        tmp = Path(tmpd)
        work = {name: make(tmp) for name, make in OURS.items()}
        for fn in work.values():
            fn()  # the plain builds, before any session
        torch.cuda.synchronize()
        flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
        for on, opts in OPTIONS.items():
            res = measure(work, RULES, opts, args.rounds, args.launches, flush, tmp / on)
            new = [Row(name, REGIONS, on, p, i, note) for name, (p, i, note) in res.items()]
            print(table(new), file=sys.stderr, flush=True)
            rows += new
    host = {}
    for name in OURS:
        r = {"note": theirs} if isinstance(theirs, str) else theirs[name]
        rows.append(Row(name, REGIONS, "Proton", r.get("plain", []), r.get("inst", []),
                        r.get("note", "")))
        if "host_s" in r:
            host[name] = r["host_s"], len(r["inst"])
    order = list(OURS)
    rows.sort(key=lambda r: order.index(r.workload))
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, triton "
          f"{triton.__version__}; L2 flushed; ours {args.rounds} rounds x {args.launches} "
          f"launches, Proton up to {args.proton_rounds} x {args.proton_launches} (own process)")
    print("default = ours (warp 0, auto buffer); all+pbuf = ours, every warp + Proton's buffer;"
          " Proton = pl scopes under proton.start(backend='instrumentation')")
    print(table(rows))
    if host:
        print("Proton: host work per launch (sync, copy, parse) and rounds done: " + ", ".join(
            f"{n} {s * 1000:.0f} ms, {k}" for n, (s, k) in host.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
