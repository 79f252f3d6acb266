"""The error promise over the bad-input corpus: exit 2, one message, no traceback, inputs kept."""

from __future__ import annotations

import pytest
from cases import CASES
from harness import run_case


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input(case, tmp_path):
    problems = run_case(case, tmp_path / "case").problems(case)
    assert not problems, "\n".join(problems)


def test_corpus_is_large_and_names_unique():
    assert len(CASES) >= 60
    assert len({c.name for c in CASES}) == len(CASES)
