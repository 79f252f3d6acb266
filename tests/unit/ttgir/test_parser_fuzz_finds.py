"""Mutants scripts/fuzz_parser.py found crashing insert (2026-11-26, seed 32, 49,743 cases):
IR that MLIR's verifier refuses but the parser took in, where insert then indexed past it. Each
is now a parse error naming the line, like any text MLIR refuses."""

from __future__ import annotations

import re

import pytest
from helpers import SAMPLES

from proton_inject.errors import ParseError
from proton_inject.instrument.insert import insert_text
from proton_inject.instrument.rules import Rules

RULES = [Rules(kernel_scope=True, loops="both", marks=False),
         Rules(kernel_scope=True, loops="iteration", marks=False, sample_ctas=3)]


def _sample(name: str) -> str:
    return (SAMPLES / "cuda-80" / f"{name}.ttgir").read_text()


def _empty_block() -> str:
    """A block label with no op before the function's closing brace (IndexError in insert)."""
    text = _sample("histogram_kernel")
    at = text.index("  } loc(#loc)\n")
    return text[:at] + "^bb9:" + text[at:]


def _nested_func() -> str:
    """A tt.func inside a loop body (AttributeError in --sample-ctas's anchor)."""
    text = _sample("add_kernel")
    at = text.index("      %offs = ")
    return text[:at] + "      tt.func private @inner() {\n        tt.return\n      }\n" + text[at:]


@pytest.mark.parametrize("rules", RULES, ids=["kernel+loops", "iteration+sample-ctas"])
@pytest.mark.parametrize("text,words", [
    (_empty_block(), "block ^bb9 holds no op; MLIR expects at least a terminator"),
    (_nested_func(), "tt.func inside another op's region (scf.for)"),
], ids=["empty block", "nested tt.func"])
def test_what_mlir_refuses_is_a_parse_error_not_a_crash(text, words, rules):
    with pytest.raises(ParseError, match=re.escape(words)):
        insert_text(text, rules, "m.ttgir")
