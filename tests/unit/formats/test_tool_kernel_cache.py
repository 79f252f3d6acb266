"""The tool's own kernels' Triton cache is checked against its seal before Triton reads it: a
file changed, added, linked or special empties it (links not followed), an intact one is kept."""

from __future__ import annotations

import os

import pytest

from proton_inject.formats import tool_kernel_cache


def _compile_into(root, files: dict[str, bytes]):
    """What a compile leaves in the cache, written inside the checked block, then sealed."""
    with tool_kernel_cache.checked(root / "triton") as d:
        for rel, data in files.items():
            (d / rel).parent.mkdir(parents=True, exist_ok=True)
            (d / rel).write_bytes(data)
    return root / "triton"


BUILD = {"ABC/bracket.cubin": b"\x7fELF cubin", "ABC/__grp__bracket.json": b"{}", "L1/launcher.so": b"ELF so"}


def _kept(d) -> bool:
    with tool_kernel_cache.checked(d) as d2:
        return all((d2 / rel).is_file() for rel in BUILD)


def test_an_intact_cache_is_kept(tmp_path):
    d = _compile_into(tmp_path, BUILD)
    assert _kept(d) and oct(d.stat().st_mode & 0o777) == "0o700"


@pytest.mark.parametrize("damage", ["changed", "added", "link", "fifo", "linked-dir"])
def test_a_damaged_cache_is_emptied_without_following_links(tmp_path, damage):
    d = _compile_into(tmp_path, BUILD)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("not the tool's")
    if damage == "changed":
        (d / "L1/launcher.so").write_bytes(b"planted")
    elif damage == "added":
        (d / "L1/other.so").write_bytes(b"planted")
    elif damage == "link":
        os.symlink(outside / "keep.txt", d / "ABC/extra")
    elif damage == "fifo":
        os.mkfifo(d / "ABC/pipe")
    else:
        os.symlink(outside, d / "LINKED")
    assert not _kept(d)
    assert (outside / "keep.txt").read_text() == "not the tool's"


def test_the_cache_directory_itself_a_link_is_replaced_not_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("x")
    os.symlink(outside, tmp_path / "triton")
    with tool_kernel_cache.checked(tmp_path / "triton") as d:
        assert not d.is_symlink() and d.is_dir()
    assert (outside / "keep.txt").read_text() == "x"
