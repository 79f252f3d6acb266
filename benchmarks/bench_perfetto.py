"""Native Perfetto writer vs the Chrome JSON writer, side by side on the same decoded launches.

Launches: the real H100 buffers of tests/data/h100-triton3.6 (add: 1024 CTAs x 4 warps,
9 regions per warp; mm: 1024 CTAs x 8 warps, 63 regions per warp) and the mm buffer tiled
4x (benchmarks/bench_trace.py). Each launch is decoded once; then the two writers run
interleaved, ``--repeat`` times each, into memory (no disk in the timing). Prints bytes, the
ratio of bytes, and events/s (median, with min-max) of each, and the speed ratio.

``--protos`` also times building the same packets with the perfetto package's own
``perfetto_trace_pb2`` classes (the other way issue 29 allowed): every event packet set field
by field from plain Python values prepared outside the timing, the other packets copied, then
``SerializeToString``. Needs ``pip install perfetto==0.59.1`` (the dev extra).

    python benchmarks/bench_perfetto.py [--repeat 7] [--protos]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_trace import tiled_launch  # noqa: E402

from proton_inject.analyze.decode import decode  # noqa: E402
from proton_inject.formats.raw import load_raw  # noqa: E402
from proton_inject.formats.traces import trace_bytes  # noqa: E402

DATA = REPO / "tests" / "data" / "h100-triton3.6"


def launches():
    for name in ("add", "mm"):
        buf, meta = load_raw(DATA / f"profile_scratch_{name}.json")
        yield f"{name} (real)", decode(buf, meta)
    buf, meta = tiled_launch(4)
    yield "mm tiled 4x", decode(buf, meta)


def protos_writer(native: bytes):
    """A writer over the package's protos for the packets of ``native``: returns a function
    that builds and serializes them (what is timed)."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace

    src = Trace()
    src.ParseFromString(native)
    plan = []
    for p in src.packet:
        if p.WhichOneof("data") == "track_event":
            e = p.track_event
            plan.append((p.timestamp, p.trusted_packet_sequence_id, e.type, e.name_iid,
                         e.source_location_iid, [(a.name_iid, a.int_value) for a in e.debug_annotations]))
        else:
            plan.append(p)

    def build() -> bytes:
        t = Trace()
        add = t.packet.add
        for x in plan:
            q = add()
            if isinstance(x, tuple):
                ts, seq, typ, name, loc, args = x
                q.timestamp = ts
                q.trusted_packet_sequence_id = seq
                e = q.track_event
                e.type = typ
                if typ == 1:
                    e.name_iid = name
                    if loc:
                        e.source_location_iid = loc
                    for k, v in args:
                        a = e.debug_annotations.add()
                        a.name_iid, a.int_value = k, v
            else:
                q.CopyFrom(x)
        return t.SerializeToString()

    return build


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--protos", action="store_true", help="also the perfetto package's protos")
    args = ap.parse_args()
    print(f"{'launch':<13} {'events':>9} {'JSON MB':>8} {'native MB':>9} {'bytes':>6} "
          f"{'JSON ev/s (min-max)':>24} {'native ev/s (min-max)':>24} {'speed':>6}")
    for label, d in launches():
        n = len(d.events) + len(d.ctas.cta)  # regions + finalize slices
        t = {"json": [], "native": []}
        size = {}
        writers = [("json", trace_bytes), ("native", partial(trace_bytes, fmt="perfetto"))]
        if args.protos:
            build = protos_writer(trace_bytes([d], fmt="perfetto"))
            writers.append(("protos", lambda _, b=build: b()))
            t["protos"] = []
        for _ in range(args.repeat):
            for key, fn in writers:
                t0 = time.perf_counter()
                size[key] = len(fn([d]))
                t[key].append(time.perf_counter() - t0)
        eps = {k: sorted(n / x for x in v) for k, v in t.items()}

        def show(e: list[float]) -> str:
            return f"{statistics.median(e) / 1e6:.2f}M ({e[0] / 1e6:.2f}-{e[-1] / 1e6:.2f}M)"

        print(f"{label:<13} {n:>9,} {size['json'] / 1e6:>8.1f} {size['native'] / 1e6:>9.1f} "
              f"{size['native'] / size['json']:>6.3f} {show(eps['json']):>24} {show(eps['native']):>24} "
              f"{statistics.median(eps['native']) / statistics.median(eps['json']):>5.2f}x")
        if args.protos:
            print(f"{'':<13} package protos: {size['protos'] / 1e6:.1f} MB, {show(eps['protos'])} "
                  f"events/s, {statistics.median(eps['protos']) / statistics.median(eps['native']):.3f}x "
                  "the native writer's speed")


if __name__ == "__main__":
    main()
