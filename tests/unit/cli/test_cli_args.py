"""Argument checks of issue 31 beyond the bad-input corpus: the limits themselves are accepted,
and a valid golden still compares after the checks moved before any output."""

from __future__ import annotations

import pytest
from helpers import REPO, SAMPLES
from helpers.cli import invoke

from proton_inject.errors import UserError
from proton_inject.lower.options import MAX_BUFFER_SIZE as _MAX_BUFFER_SIZE
from proton_inject.lower.options import options_from_cli
from proton_inject.ttgir import parse_file
from proton_inject.ttgir.outline import format_outline

ADD = SAMPLES / "cuda-90/add_kernel.ttgir"


def test_max_ops_zero_lists_only_how_many_kinds():
    module = parse_file(ADD)
    assert "    ops: 13 kinds" in format_outline(module, max_ops=0).splitlines()
    with pytest.raises(ValueError):
        format_outline(module, max_ops=-5)


def _options(size: str):
    return options_from_cli(buffer_size=size, buffer_type="global")


def test_buffer_size_up_to_one_gib_is_accepted():
    assert _options(str(_MAX_BUFFER_SIZE)).buffer_size == 2**30
    assert _options(" auto ").buffer_size == 0
    with pytest.raises(UserError, match="too large"):
        _options(str(_MAX_BUFFER_SIZE * 2))


def test_check_against_a_golden_directory_for_one_file(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    golden = tmp_path / "g"
    invoke(["insert", str(ADD), "-o", str(golden / "add_kernel.ttgir")], code=0)
    res = invoke(["insert", str(ADD), "-o", str(tmp_path / "o.ttgir"),
                  "--check-against", str(golden)])
    assert res.exit_code == 0 and "identical" in res.output, res.output
