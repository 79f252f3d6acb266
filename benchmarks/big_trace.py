"""A native Perfetto trace of ~10^8 region events: size, bytes per event, write time, and a
streaming read-back with the perfetto package's protos.

Launches: the real H100 launches of tests/data/h100-triton3.6 (mm: 517,120 events, a
sequence per warp; add: 37,888 events, one sequence per launch), decoded once each, then
written alternately, each copy numbered anew and moved later in time (``--gap-us``), until
``--events`` are written: into one merged file (``--merge``) or one file per launch, with the
report's own writer (``formats.trace_perfetto.PerfettoFile``), uncompressed unless ``--gz``.

The check reads each file back in chunks, never whole: each ``Trace.packet`` framing is
walked and every packet parsed with ``perfetto_trace_pb2.TracePacket``; slice begins and ends
are counted and must equal twice the events written. It is slow (a Python loop over every
packet: ~2 per event); ``--check-files N`` reads only the first N files of a per-launch run.

    python benchmarks/big_trace.py --out DIR [--events 100000000] [--merge] [--gz] [--check-files N]

Too big for CI: a benchmark, not a test. The files stay in DIR (delete them after).
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from proton_inject.analyze.decode import Decoded, decode  # noqa: E402
from proton_inject.formats.raw import load_raw  # noqa: E402
from proton_inject.formats.trace_perfetto import PerfettoFile  # noqa: E402
from proton_inject.formats.trace_writer import time_zero  # noqa: E402

DATA = REPO / "tests" / "data" / "h100-triton3.6"


def _copy(d: Decoded, launch: int, shift_ns: int) -> Decoded:
    """Launch ``d`` numbered ``launch`` and ``shift_ns`` later (its arrays shared)."""
    return dataclasses.replace(d, meta=dataclasses.replace(d.meta, launch=launch),
                               base_ns=d.base_ns + shift_ns)


def write(out: Path, events: int, merge: bool, gz: bool, gap_ns: int) -> tuple[list[Path], int, float]:
    """Write the launches; returns the files, the events written and the seconds spent."""
    kinds = []
    for name in ("mm", "add"):
        buf, meta = load_raw(DATA / f"profile_scratch_{name}.json")
        kinds.append(decode(buf, meta))
    span = max(int(d.ctas.postfinal_ns.max()) for d in kinds) + gap_ns  # one launch to the next
    ext = ".pftrace" + (".gz" if gz else "")
    files: list[Path] = []
    done = n = 0
    t0 = time_zero(kinds[0])
    merged = PerfettoFile(out / f"merged{ext}", t0, True, gz) if merge else None
    start = time.perf_counter()
    while done < events:
        d = kinds[n % 2]
        x = _copy(d, n, n * span + (time_zero(kinds[0]) - time_zero(d)))
        if merged is not None:
            merged.add(x)
        else:
            w = PerfettoFile(out / f"{n:06d}-{d.meta.kernel}{ext}", time_zero(x), False, gz)
            w.add(x)
            files.append(w.commit())
        done += len(x.events) + len(x.ctas.cta)
        n += 1
    if merged is not None:
        files.append(merged.commit())
    return files, done, time.perf_counter() - start


def read_back(path: Path, chunk: int = 1 << 24) -> tuple[int, int, int]:
    """Stream one file: (packets, slice begins, slice ends), each packet parsed."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TracePacket, TrackEvent

    begin, end = TrackEvent.TYPE_SLICE_BEGIN, TrackEvent.TYPE_SLICE_END
    counts = {begin: 0, end: 0}
    packets = 0
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        buf = b""
        while True:
            more = f.read(chunk)
            buf += more
            i, n = 0, len(buf)
            while i < n:
                if buf[i] != 0x0A:  # Trace.packet, length-delimited
                    raise ValueError(f"{path}: not a Trace.packet at byte {packets}")
                j, size, shift = i + 1, 0, 0
                while j < n and buf[j] & 0x80:
                    size |= (buf[j] & 0x7F) << shift
                    shift += 7
                    j += 1
                if j >= n or j + 1 + (size | (buf[j] << shift)) > n:
                    break  # the packet runs on into the next chunk
                size |= buf[j] << shift
                p = TracePacket.FromString(buf[j + 1:j + 1 + size])
                if p.HasField("track_event"):
                    counts[p.track_event.type] = counts.get(p.track_event.type, 0) + 1
                packets += 1
                i = j + 1 + size
            buf = buf[i:]
            if not more:
                if buf:
                    raise ValueError(f"{path}: {len(buf)} bytes after the last whole packet")
                return packets, counts[begin], counts[end]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path, help="directory for the trace files")
    ap.add_argument("--events", type=int, default=100_000_000)
    ap.add_argument("--merge", action="store_true", help="one file for every launch")
    ap.add_argument("--gz", action="store_true")
    ap.add_argument("--gap-us", type=float, default=50.0, help="idle time between launches")
    ap.add_argument("--check-files", type=int, default=None, help="read back only this many files")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    files, events, secs = write(args.out, args.events, args.merge, args.gz, int(args.gap_us * 1000))
    size = sum(p.stat().st_size for p in files)
    big = max(p.stat().st_size for p in files)
    print(f"wrote {events:,} events in {len(files):,} file(s): {size / 2**20:,.0f} MiB "
          f"({size / events:.1f} bytes/event; largest file {big / 2**20:,.0f} MiB) in {secs:.0f} s "
          f"({events / secs / 1e6:.2f} M events/s)", flush=True)
    t = time.perf_counter()
    packets = begins = ends = 0
    for p in files[:args.check_files]:
        a, b, c = read_back(p)
        packets, begins, ends = packets + a, begins + b, ends + c
    checked = files[:args.check_files]
    print(f"read back {len(checked):,} file(s) packet by packet: {packets:,} packets, "
          f"{begins:,} slice begins, {ends:,} ends in {time.perf_counter() - t:.0f} s")
    if len(checked) == len(files) and not begins == ends == events:
        raise SystemExit(f"expected {events:,} slices, read {begins:,} begins and {ends:,} ends")


if __name__ == "__main__":
    main()
