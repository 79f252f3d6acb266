"""run --kernel is compiled as every user pattern is: by RE2, so '(a+)+$' cannot backtrack."""

from __future__ import annotations

import pytest

from proton_inject.collect.compile_hook import TreeSource
from proton_inject.errors import UserError


def test_run_kernel_pattern_is_re2_and_a_bad_one_is_one_line():
    tree = TreeSource("no-tree-needed-here", "(a+)+$")
    assert type(tree.pattern).__module__.split(".")[0] == "re2"
    assert not tree.pattern.search("a" * 100_000 + "b")  # (Python's re: for ever)
    with pytest.raises(UserError, match=r"--kernel '\(a' is not a valid regular expression"):
        TreeSource("no-tree-needed-here", "(a")
