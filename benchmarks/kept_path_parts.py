"""The Python bookkeeping of a kept launch, piece by piece, on the CPU (no GPU, no launch).

What the slab path does for each kept launch besides the launch itself: taking bytes in a slab
and giving them back (``Slabs.take`` + ``done``, with a host buffer standing in for the device
slab and shipping left out), the who-launched-it walk (``call_site``, from a frame one level
below the program's), the keep policy's next decision, one lock, the launch's head tuple and
a clock read. Set against the kept launch's extra host time measured on the GPU
(benchmarks/launch_cost.py), it says how much of that is this Python and how much is
elsewhere (the launch, the copy and the writer thread).

    PYTHONPATH=. python benchmarks/kept_path_parts.py [--n 200000]
"""

from __future__ import annotations

import argparse
import itertools
import threading
import time

import torch

from proton_inject.collect.call_site import call_site
from proton_inject.collect.keep_policy import KeepPolicy
from proton_inject.collect.slabs import Slabs


class _HostPool:
    """Slabs' pool, in host memory (the bookkeeping is the same; nothing is launched)."""

    limit = 256 << 20

    def take(self, size: int, device: int) -> tuple[torch.Tensor, bool]:
        return torch.zeros(size, dtype=torch.uint8), False

    def give_back(self, buf: torch.Tensor) -> None:
        pass


class _NoBrackets:
    brackets: dict = {}

    def bracket_due(self, device: int, early: bool = False) -> bool:
        return False


def per_call_us(f, n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - t) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000)
    n = ap.parse_args().n
    slabs = Slabs(_HostPool(), None, _NoBrackets())
    slabs._ship = lambda slab: None  # (shipping is GPU work: not measured here)
    head = (0, None, (4, 1, 1), 0, 0, {}, False, None)

    def take_done() -> None:
        slab, _, _ = slabs.take(0, 0, 4096, head)
        slabs.done(slab)

    policy, lock, seq = KeepPolicy(), threading.Lock(), itertools.count()

    def locked() -> None:
        with lock:
            pass

    rows = [("Slabs.take + done", take_done),
            ("call_site (program one frame up)", lambda: call_site(1)),
            ("KeepPolicy.next_after", lambda: policy.next_after(500)),
            ("a lock taken and released", locked),
            ("the launch's head tuple", lambda: (next(seq), None, (1, 1, 1), 0, 0, {}, False, "x")),
            ("time.perf_counter", time.perf_counter)]
    for name, f in rows:
        print(f"{name:36s} {per_call_us(f, n):6.3f} us")


if __name__ == "__main__":
    main()
