"""Fuzz the raw-launch reader and decoder: mutants of real H100 launches (their buffer bytes,
gzip stream and metadata fields; tests/helpers/mutants.py) are loaded, decoded, traced and
summarized. A case must decode or give one UserError of one line; anything else is a crash,
bucketed by exception and place, and a case over --timeout seconds is a hang.

    .venv/bin/python scripts/fuzz_decoder.py --cases 100000 --save fuzz_out

Exits 1 on any crash or hang. docs/fuzzing.md holds the runs measured so far.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from helpers.limits import memory_limit  # noqa: E402
from helpers.mutants import decode_launch, draw_metadata, fuzz_main, mutated_buffer, write_launch  # noqa: E402
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
    return fuzz_main("fuzz_decoder", __doc__, make, check, save, argv)

if __name__ == "__main__":
    sys.exit(main())
