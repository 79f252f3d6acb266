"""Fuzz the TTGIR parser and insert/strip: mutants of the uninstrumented samples under
ttgir_samples (lines deleted, duplicated, moved; comments, blank and partition lines; records;
stray tokens, cuts, swaps: tests/helpers/mutants.py) are instrumented and stripped again. A case must
be refused with one UserError or strip back to its input byte for byte; anything else is a
crash, bucketed by exception and place, and a case over --timeout seconds is a hang.

    .venv/bin/python scripts/fuzz_parser.py --cases 100000 --save fuzz_out

Exits 1 on any crash or hang. docs/fuzzing.md holds the runs measured so far.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from helpers.mutants import ROUNDTRIP_RULES, TTGIR_FILES, fuzz_main, insert_then_strip, mutate_lines  # noqa: E402
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
    return fuzz_main("fuzz_parser", __doc__, make, check, save, argv)

if __name__ == "__main__":
    sys.exit(main())
