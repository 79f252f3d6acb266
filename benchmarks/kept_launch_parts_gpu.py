"""A kept launch's extra host time, taken apart on the GPU: the same kept loop with pieces of
the launch path replaced, plain launches interleaved in every round.

  plain            no session
  kept             every launch kept (--keep-launches all), as a user gets it (the C fast path)
  kept (Python)    the same with the C fast path off (PROTON_INJECT_FAST_LAUNCH=0); the rows
                   below take this Python path apart
  no call site     kept (Python), with who-launched-it (``program_frame``) answering None
  no slab taking   kept, no call site, and every launch into the open slab's first bytes (no
                   lock, no bookkeeping, no shipping; the records overwrite each other)
  bare wrapper     only our wrapper: the launcher's C entry point with those bytes, straight
                   from ``KernelLauncher`` (the floor of any Python launch path)

One kernel (a loop over 4,096 floats, 1 CTA), so every launch of a session is kept. The
difference between rows says what each piece costs a kept launch; ``benchmarks/launch_cost.py``
is the user-facing measure. ``--timers`` adds one more ``kept`` round with the work done off
the launch (shipping slabs, the writer's landing) timed, per call and per kept launch.

    PYTHONPATH=. python benchmarks/kept_launch_parts_gpu.py [--launches 4000] [--rounds 5] [--timers]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from unittest import mock

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from proton_inject.collect import fast_launch, launch_path  # noqa: E402
from proton_inject.collect.session import Session  # noqa: E402
from proton_inject.collect.slabs import Slabs  # noqa: E402
from proton_inject.instrument.rules import Rules  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from launch_cost import N_FLOATS, loop_kernel  # noqa: E402  (the same kernel as launch_cost's)


def launches(x: torch.Tensor, n: int) -> float:
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        loop_kernel[(1,)](x, N_FLOATS, BLOCK=256)
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e6


def _open_slab_base(slabs: Slabs, device: int) -> int | None:
    slab = slabs._open.get(device)
    return None if slab is None else slab.base


def _fixed_bytes(stack: ExitStack) -> None:
    """Slabs.launch launches every kept launch into the open slab's first bytes: no lock, no
    bookkeeping, no bracket, no shipping."""
    real = Slabs.launch

    def launch(self, w, gx, gy, gz, stream, function, args, size, head):
        base = _open_slab_base(self, head[4])
        if base is None:
            return real(self, w, gx, gy, gz, stream, function, args, size, head)
        return w.direct(gx, gy, gz, stream, function, w.coop, w.pdl, None, base, *args)

    stack.enter_context(mock.patch.object(Slabs, "launch", launch))


def _bare(stack: ExitStack) -> None:
    """LaunchPath.launch is only the launcher's C entry point with the open slab's first bytes."""
    real = launch_path.LaunchPath.launch

    def launch(self, w, gx, gy, gz, stream, function, args):
        base = _open_slab_base(self.slabs, w.device)
        if base is None:
            return real(self, w, gx, gy, gz, stream, function, args)
        return w.direct(gx, gy, gz, stream, function, w.coop, w.pdl, None, base, *args)

    stack.enter_context(mock.patch.object(launch_path.LaunchPath, "launch", launch))


def round_of(case: str, x: torch.Tensor, n: int, out: Path) -> float:
    if case == "plain":
        return launches(x, n)
    with ExitStack() as stack:
        stack.enter_context(mock.patch.dict(os.environ, {fast_launch.ENV: "1" if case == "kept" else "0"}))
        if not case.startswith("kept"):
            stack.enter_context(mock.patch.object(launch_path, "program_frame", lambda skip=1: None))
        if case == "no slab taking":
            _fixed_bytes(stack)
        if case == "bare wrapper":
            _bare(stack)
        session = Session(out=out, source=Rules(loops="both"), keep="all")
        session.start()
        try:
            launches(x, 8)  # the build's first load and bracketed launches
            return launches(x, n)
        finally:
            session.stop()


def timed_round(x: torch.Tensor, n: int, out: Path) -> None:
    """One ``kept`` round with the off-launch work timed (wall time of each call, any thread)."""
    import threading

    from proton_inject.collect import buffers, raw_writer, sink

    spent: dict[str, list[float]] = {}
    lock = threading.Lock()

    def timed(owner: object, name: str) -> mock._patch:
        real = getattr(owner, name)

        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return real(*a, **k)
            finally:
                with lock:
                    spent.setdefault(f"{owner.__name__}.{name}", []).append(time.perf_counter() - t)

        return mock.patch.object(owner, name, wrapper)

    targets = [(Slabs, "_ship"), (Slabs, "_renew"), (Slabs, "launch"), (sink.Sink, "land"),
               (sink.Sink, "_copy"), (buffers.BufferPool, "take"), (buffers.HostRing, "take"),
               (raw_writer.RawWriter, "put"), (buffers.LaunchBuffers, "launch_bracket"),
               (launch_path, "program_frame")]
    with ExitStack() as stack:
        for owner, name in targets:
            stack.enter_context(timed(owner, name))
        session = Session(out=out, source=Rules(loops="both"), keep="all")
        session.start()
        launches(x, 8)
        us = launches(x, n)
        with lock:
            spent_in_loop = {k: list(v) for k, v in spent.items()}
        session.stop()
    print(f"timed kept round: {us:.2f} us/launch (the timers' own cost included)")
    print(f"{'function':28s} {'calls':>6s} {'total ms':>9s} {'max ms':>8s} {'us/launch':>9s}")
    for k, v in sorted(spent_in_loop.items(), key=lambda kv: -sum(kv[1])):
        print(f"{k:28s} {len(v):6d} {sum(v) * 1e3:9.2f} {max(v) * 1e3:8.3f} {sum(v) / n * 1e6:9.2f}")


CASES = ("plain", "kept", "kept (Python)", "no call site", "no slab taking", "bare wrapper")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=4000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--timers", action="store_true", help="also one kept round with off-launch work timed")
    args = ap.parse_args()
    x = torch.zeros(N_FLOATS, device="cuda")
    work = Path(tempfile.mkdtemp(prefix="pi-kept-parts-"))
    rows: dict[str, list[float]] = {c: [] for c in CASES}
    for r in range(args.rounds + 1):  # round 0 compiles and warms up
        for case in CASES:
            us = round_of(case, x, args.launches if r else 100, work / f"{r}-{case.replace(' ', '_')}")
            if r:
                rows[case].append(us)
    plain = statistics.median(rows["plain"])
    print(f"{torch.cuda.get_device_name()}: {args.rounds} rounds of {args.launches} launches, all kept")
    print(f"{'case':16s} {'us/launch':>9s} {'(min..max)':>16s} {'extra us':>8s} {'x plain':>7s}")
    for case, us in rows.items():
        med = statistics.median(us)
        print(f"{case:16s} {med:9.2f} {f'({min(us):.2f}..{max(us):.2f})':>16s} {med - plain:8.2f} "
              f"{med / plain:7.3f}")
    if args.timers:
        timed_round(x, args.launches, work / "timed")


if __name__ == "__main__":
    main()
