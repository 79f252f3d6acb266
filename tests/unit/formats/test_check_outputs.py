"""``check_outputs`` refuses an output that is an input, however each path is spelled."""

from __future__ import annotations

import os

import pytest

from proton_inject.errors import UserError
from proton_inject.formats.files import check_outputs


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "real" / "sub").mkdir(parents=True)
    (tmp_path / "d").mkdir()
    os.symlink("../real/sub", tmp_path / "d" / "link")
    (tmp_path / "real" / "x.json").write_text("{}")
    os.symlink("real/x.json", tmp_path / "alias.json")
    return tmp_path


@pytest.mark.parametrize("spelled", ["real/x.json", "d/link/../x.json", "alias.json", "./real/../real/x.json"])
def test_the_input_itself_is_refused(tree, spelled, monkeypatch):
    monkeypatch.chdir(tree)
    with pytest.raises(UserError, match="writing there would destroy it"):
        check_outputs([("input", spelled)], [("--plot", str(tree / "real" / "x.json"), "file")])


def test_other_files_and_no_outputs_pass(tree, monkeypatch):
    monkeypatch.chdir(tree)
    check_outputs([("input", "d/link/../x.json")], [("--plot", "real/y.png", "file")])
    check_outputs([("input", "missing/anything.json")], [])  # nothing to check: not even resolved
