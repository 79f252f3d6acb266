"""The report of many small launches, with a trace each: small messages encoded one by one
(``protobuf.ROW_BY_ROW``) against column-wise only, side by side in one run, in turn.

Run directory as ``report_scale.py`` builds it from the real H100 buffers (add_kernel, cut to
``--ctas`` CTAs; 440 launches: the launch loop's kept launches). Each round times
``run_report(DIR, trace_dir=..., jobs=1)`` both ways and checks the traces are the same bytes.

    PYTHONPATH=. python benchmarks/small_launch_traces.py [--launches 440] [--ctas 4] [--rounds 5]
"""

from __future__ import annotations

import argparse
import gzip
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from report_scale import build_run  # noqa: E402

from proton_inject.analyze.report import run_report  # noqa: E402
from proton_inject.formats import protobuf  # noqa: E402


def _report(run: Path, out: Path, row_by_row: int) -> tuple[float, dict[str, bytes]]:
    protobuf.ROW_BY_ROW = row_by_row
    t = time.perf_counter()
    run_report([run], trace_dir=out, jobs=1)
    dt = time.perf_counter() - t
    return dt, {p.name: gzip.decompress(p.read_bytes()) for p in sorted(out.iterdir())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=440)
    ap.add_argument("--ctas", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    times: dict[str, list[float]] = {"columns": [], "one by one": []}
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        build_run(run, a.launches, a.ctas, 0.0)
        row_by_row = protobuf.ROW_BY_ROW
        for r in range(a.rounds):
            (cols_s, cols), (rows_s, rows) = (_report(run, Path(tmp) / f"c{r}", 0),
                                              _report(run, Path(tmp) / f"r{r}", row_by_row))
            if cols != rows:
                print("the traces differ", file=sys.stderr)
                return 1
            times["columns"].append(cols_s)
            times["one by one"].append(rows_s)
    for name, v in times.items():
        print(f"{name:<11} {statistics.median(v):6.2f} s ({min(v):.2f}..{max(v):.2f}), "
              f"{1000 * statistics.median(v) / a.launches:.2f} ms a launch")
    ratios = [r / c for r, c in zip(times["one by one"], times["columns"], strict=True)]
    print(f"one by one / columns: {statistics.median(ratios):.3f} ({min(ratios):.3f}..{max(ratios):.3f}), "
          f"{a.launches} launches of {a.ctas} CTAs, {a.rounds} rounds; traces the same bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
