"""Fuzz the raw-launch reader and decoder: mutants of real H100 launches (their buffer bytes,
gzip stream and metadata fields; tests/helpers/mutants.py) are loaded, decoded, traced and
summarized. A case must decode or give one UserError of one line; anything else is a crash,
bucketed by exception and place, and a case over --timeout seconds is a hang.

    .venv/bin/python scripts/fuzz_decoder.py --cases 100000 --save fuzz_out

Exits 1 on any crash or hang. docs/fuzzing.md holds the runs measured so far.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from helpers.limits import memory_limit  # noqa: E402
from helpers.mutants import decode_launch, draw_metadata, format_summary, mutated_buffer, run_fuzz, write_launch  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


def make(draw):
    """Half buffer mutants (with a few metadata fields), half metadata mutants."""
    return draw_metadata(draw) if draw(st.booleans()) else mutated_buffer(draw)


def check(case) -> str:
    with memory_limit():  # a blow-up is a MemoryError crash, not a dead machine
        return decode_launch(*case)


def save(case, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    write_launch(folder, *case)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=100_000)
    ap.add_argument("--seconds", type=float, default=None, help="stop after this long")
    ap.add_argument("--timeout", type=float, default=10.0, help="a case over this is a hang")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--save", type=Path, default=None, help="write crashing inputs here")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    a = ap.parse_args(argv)
    res = run_fuzz(make, check, save, a.cases, a.timeout, a.seconds, a.seed, a.save)
    print(json.dumps(res) if a.json else format_summary("fuzz_decoder", res, a.timeout))
    return 1 if res["crashes"] or res["hangs"] else 0


if __name__ == "__main__":
    sys.exit(main())
