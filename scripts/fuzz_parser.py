"""Fuzz the TTGIR parser and insert/strip: mutants of the uninstrumented samples under
ttgir_samples (lines deleted, duplicated, moved; comments, blank and partition lines; records;
stray tokens, cuts, swaps: tests/helpers/mutants.py) are instrumented and stripped again. A case must
be refused with one UserError or strip back to its input byte for byte; anything else is a
crash, bucketed by exception and place, and a case over --timeout seconds is a hang.

    .venv/bin/python scripts/fuzz_parser.py --cases 100000 --save fuzz_out

Exits 1 on any crash or hang. docs/fuzzing.md holds the runs measured so far.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from helpers.mutants import ROUNDTRIP_RULES, TTGIR_FILES, format_summary, insert_then_strip, mutate_lines, run_fuzz  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from proton_inject.instrument.rules import Rules  # noqa: E402

# The round-trip rules (kernel, loops, ops) and each loop's iterations in every 3rd CTA.
_RULES = [ROUNDTRIP_RULES, Rules(kernel_scope=True, loops="iteration", marks=False, sample_ctas=3)]


def make(draw) -> tuple[bytes, Rules]:
    path = draw(st.sampled_from(TTGIR_FILES))
    return (b"".join(mutate_lines(path.read_bytes().splitlines(keepends=True), draw)),
            draw(st.sampled_from(_RULES)))


def check(case) -> str:
    return insert_then_strip(*case)


def save(case, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "mutant.ttgir").write_bytes(case[0])
    (folder / "rules.txt").write_text(repr(case[1]))


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
    print(json.dumps(res) if a.json else format_summary("fuzz_parser", res, a.timeout))
    return 1 if res["crashes"] or res["hangs"] else 0


if __name__ == "__main__":
    sys.exit(main())
