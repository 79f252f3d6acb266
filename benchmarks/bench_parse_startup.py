"""What building the TTGIR parser costs a fresh process: lark's on-disk (pickle) cache, warm,
against building the LALR tables from the grammar, as the tool does.

Runs the two alternately in ``--runs`` child processes each and prints the median and the
range of the time to the first parsed kernel, and their ratio.

    python benchmarks/bench_parse_startup.py [--runs 20]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "ttgir_samples/cuda-90/add_kernel.ttgir"

CHILD = """
import sys, time
from lark import Lark
from proton_inject.ttgir import parser
cache = sys.argv[1] or False
t0 = time.perf_counter()
parser._parser = Lark(parser._GRAMMAR.read_text(), parser="lalr", lexer="contextual",
                      transformer=parser._Build(), maybe_placeholders=True, cache=cache)
parser.parse(open(sys.argv[2]).read())
print(time.perf_counter() - t0)
"""


def one(cache: str) -> float:
    out = subprocess.run([sys.executable, "-c", CHILD, cache, str(SAMPLE)], cwd=REPO, check=True,
                         capture_output=True, text=True).stdout
    return float(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        cache = str(Path(d) / "grammar.lark-cache")
        one(cache)  # written once: the runs below load it
        times: dict[str, list[float]] = {"lark cache (pickle)": [], "built (no cache)": []}
        for _ in range(args.runs):
            times["lark cache (pickle)"].append(one(cache))
            times["built (no cache)"].append(one(""))
    for name, ts in times.items():
        ms = sorted(t * 1e3 for t in ts)
        print(f"{name:22s} median {statistics.median(ms):6.1f} ms  range {ms[0]:.1f}-{ms[-1]:.1f} ms")
    ratio = statistics.median(times["built (no cache)"]) / statistics.median(times["lark cache (pickle)"])
    print(f"built / cached: {ratio:.1f}x")


if __name__ == "__main__":
    main()
