"""Decode + Chrome-trace write throughput on launches of ~500k and ~2M region events.

The launches are the real H100 matmul buffer (tests/data/h100-triton3.6, 1024 CTAs x 8 warps,
63 regions per warp) tiled 1x and 4x: each tile is a later "wave" of CTAs with new program
ids, globaltimer values and SM cycle counters moved on consistently, so the clock fit and
everything else does the same work as on a real launch of that size.

Proton's own runtime is NOT run here (no GPU): its numbers below are the RECORDED reference
from the H100 machine (proton.finalize() took 9.2 s for 507,904 events / 130 MB and 38.3 s
for 2,031,616 events / 522 MB: ~55,000 events/s, ~256 bytes/event). The side-by-side run on
the same kernel is benchmarks/gpu_trace_vs_proton.py.

    python benchmarks/bench_trace.py [--repeat 3] [--gz]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from proton_inject.analyze.decode import decode  # noqa: E402
from proton_inject.formats.raw import LaunchMeta, load_raw  # noqa: E402
from proton_inject.formats.traces import trace_bytes, write_trace  # noqa: E402

FIXTURE = REPO / "tests" / "data" / "h100-triton3.6" / "profile_scratch_mm.json"
PROTON_EVENTS_PER_S = 55_000  # recorded: 507,904 events in 9.2 s, 2,031,616 in 38.3 s
PROTON_BYTES_PER_EVENT = 256  # recorded: 130 MB / 507,904 and 522 MB / 2,031,616
WAVE_NS = 240_000  # one tile later in time than the fixture's whole launch (224 us)
WAVE_CYCLES = 360_000  # ... and as many cycles later at ~1.5 GHz


def shift_blocks(blk: np.ndarray, meta_words: int, ns: int, cycles: int) -> None:
    """Move CTA blocks (rows of uint32 words) ``ns`` later on the globaltimer and ``cycles``
    later on the SM counters, in place, as a later wave or launch would have them."""
    for w in (4, 6, 8):  # init, pre-final, post-final
        v = (blk[:, w].astype(np.uint64) | (blk[:, w + 1].astype(np.uint64) << np.uint64(32)))
        v += np.uint64(ns)
        blk[:, w] = (v & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        blk[:, w + 1] = (v >> np.uint64(32)).astype(np.uint32)
    rec = blk[:, meta_words:].reshape(len(blk), -1, 2)
    tag, low = rec[:, :, 0], rec[:, :, 1]
    c = ((tag & 0x7FF).astype(np.int64) << 32) | low.astype(np.int64)
    c += cycles
    rec[:, :, 0] = (tag & ~np.uint32(0x7FF)) | ((c >> 32) & 0x7FF).astype(np.uint32)
    rec[:, :, 1] = (c & 0xFFFFFFFF).astype(np.uint32)


def tiled_launch(tiles: int) -> tuple[np.ndarray, LaunchMeta]:
    """The matmul fixture repeated ``tiles`` times as consecutive waves of one launch."""
    buf, meta = load_raw(FIXTURE)
    stride = meta.bytes_per_cta // 4
    one = np.frombuffer(buf.tobytes(), np.uint32).reshape(-1, stride)
    n_cta = one.shape[0]
    meta_words = 10 + meta.num_warps
    out = np.tile(one, (tiles, 1))
    for t in range(1, tiles):
        blk = out[t * n_cta:(t + 1) * n_cta]
        blk[:, 1] += t * n_cta  # linear program id
        shift_blocks(blk, meta_words, t * WAVE_NS, t * WAVE_CYCLES)
    meta = LaunchMeta(**{**meta.__dict__, "grid": (n_cta * tiles, 1, 1), "launch": tiles})
    return out.reshape(-1).view(np.uint8), meta


def bench(tiles: int, repeat: int, gz: bool, tmp: Path) -> dict:
    buf, meta = tiled_launch(tiles)
    dec, write, total = [], [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        d = decode(buf, meta)
        t1 = time.perf_counter()
        path = write_trace(d, tmp / ("t.json.gz" if gz else "t.json"), gz=gz)
        t2 = time.perf_counter()
        dec.append(t1 - t0)
        write.append(t2 - t1)
        total.append(t2 - t0)
    n = len(d.events)
    size = path.stat().st_size
    raw_size = len(trace_bytes([d])) if gz else size
    assert not d.warnings, d.warnings
    return {"events": n, "decode": statistics.median(dec), "write": statistics.median(write),
            "total": statistics.median(total), "bytes": size, "json_bytes": raw_size}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--gz", action="store_true", help="write .json.gz (gzip level 1)")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for tiles in (1, 4):
            rows.append(bench(tiles, args.repeat, args.gz, Path(tmp)))
    print(f"decode + write Chrome trace{' (.json.gz)' if args.gz else ''}, median of "
          f"{args.repeat} runs, one process:")
    print(f"{'events':>10} {'decode s':>9} {'write s':>8} {'total s':>8} {'events/s':>11} "
          f"{'B/event':>8} {'x Proton speed*':>16} {'x smaller*':>11}")
    for r in rows:
        eps = r["events"] / r["total"]
        bpe = r["bytes"] / r["events"]
        print(f"{r['events']:>10,} {r['decode']:>9.3f} {r['write']:>8.3f} {r['total']:>8.3f} "
              f"{eps:>11,.0f} {bpe:>8.1f} {eps / PROTON_EVENTS_PER_S:>16.1f} "
              f"{PROTON_BYTES_PER_EVENT / bpe:>11.2f}")
    small, big = rows
    scale = (big["total"] / big["events"]) / (small["total"] / small["events"])
    print(f"time per event, 2M vs 500k launch: x{scale:.2f} (1.00 = linear)")
    print("* against Proton's RECORDED numbers on the H100 machine (55,000 events/s, "
          "256 B/event), not measured side by side here: run benchmarks/gpu_trace_vs_proton.py "
          "on a GPU for that.")


if __name__ == "__main__":
    main()
