"""The C launcher's host time per launch on a machine without a GPU, against Triton's entry point.

A real session's launch path and slabs, a slab over host memory, and in place of Triton's C
entry point (which needs a GPU) a Python function that returns (the set-up of
tests/unit/collect/test_fast_launch.py). Each round times, interleaved, 20,000 calls of:

  entry       the stand-in entry point alone (what any launch pays here)
  not kept    the C launcher, a launch the policy does not keep (throw-away buffer)
  kept        the C launcher keeping every launch into the slab

each called from the loop directly ("1 frame") and through two functions compiled under the
file name of Triton's jit.py ("3 frames", as Triton's JIT calls a build's launcher: the
call-site walk passes them). Prints per case the minimum and median over rounds and the
launcher's cost over the entry point's. The ship of a full slab is not in it (the slab is
emptied between rounds); neither is anything a GPU does.

    PYTHONPATH=. python benchmarks/launch_path_cpu.py [--rounds 7] [--calls 20000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from proton_inject.collect import fast_launch  # noqa: E402
from proton_inject.collect.launches import _KernelInfo  # noqa: E402
from proton_inject.collect.session import Session  # noqa: E402
from proton_inject.instrument.rules import Rules  # noqa: E402

PER_CTA = 1000
# Two library frames between the program's loop and the launcher, as JITFunction.run and the
# lambda of JITFunction.__getitem__: compiled under jit.py's name, so the walk passes them.
_JIT = os.path.join(os.path.dirname(triton.__file__), "runtime", "jit.py")
_NS: dict = {}
exec(compile("def run(w, *a):\n    return w(*a)\ndef outer(w, *a):\n    return run(w, *a)\n", _JIT, "exec"), _NS)


def entry(*args):  # Triton's C entry point's stand-in
    return None


def make(tmp: Path, kept: bool):
    """A C launcher over a fresh session's launch path and a host-memory slab."""
    session = Session(out=tmp / "t", source=Rules(loops="both"), keep="all")
    path, slabs = session.launch_path, session.slabs
    path._capturing_here = lambda: False  # (torch's CUDA query; no GPU here)
    path.active = True
    if hasattr(fast_launch, "lock_type"):  # (as LaunchPath.install makes it; builds before had none)
        slabs._lock = fast_launch.lock_type()()
    slab = fast_launch.slab_type()(torch.zeros(64 << 20, dtype=torch.uint8), 0)
    slab.opened += 3600  # (never shipped for its age)
    slabs._open[0] = slab
    session.buffers.bracket_after[0] = float("inf")  # no clock bracket due
    path.fast = fast_launch.make(path, slabs, session.sink, session.buffers)
    info = _KernelInfo("k", "h", True, PER_CTA, SimpleNamespace(metadata=SimpleNamespace(num_ctas=1)),
                       config={"BLOCK": 64})
    counts = fast_launch.counts_type()("k", path.policy)
    w = fast_launch.launcher(path.fast, lambda *a: None, info, counts, path, 0, entry, False, True, PER_CTA)
    counts.seen = 10  # past each build's first (bracketed) launches
    if not kept:
        counts.next_keep = float("inf")
        w.discard, w.discard_bytes = object(), 1 << 30
    return session, w


def timed(w, calls: int, deep: bool) -> float:
    """us per call of ``w`` as a launch (grid 2x1x1, stream 7, three arguments)."""
    outer = _NS["outer"]
    t = time.perf_counter()
    if deep:
        for _ in range(calls):
            outer(w, 2, 1, 1, 7, "fn", 1, 2, 3)
    else:
        for _ in range(calls):
            w(2, 1, 1, 7, "fn", 1, 2, 3)
    return (time.perf_counter() - t) / calls * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=20000)
    args = ap.parse_args()
    cases = [(c, deep) for deep in (False, True) for c in ("entry", "not kept", "kept")]
    got: dict[tuple[str, bool], list[float]] = {k: [] for k in cases}
    with tempfile.TemporaryDirectory() as d:
        for r in range(args.rounds):
            for case, deep in cases:
                _, w = make(Path(d) / f"{r}-{case}-{deep}".replace(" ", "_"), kept=case == "kept")
                got[(case, deep)].append(timed(entry if case == "entry" else w, args.calls, deep))
    print(f"{args.rounds} rounds of {args.calls} calls; us per call: min, median; over the entry point's min")
    for case, deep in cases:
        v = got[(case, deep)]
        over = min(v) - min(got[("entry", deep)])
        print(f"{case:9s} {'3 frames' if deep else '1 frame ':8s} {min(v):6.3f} {statistics.median(v):6.3f}"
              f"  +{over:.3f}")


if __name__ == "__main__":
    main()
