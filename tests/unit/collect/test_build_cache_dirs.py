"""The build cache's directories: private to the user, never left by prune or `cache clear`
(a link where a key directory or builds/ belongs is removed as itself, never followed), what
they report is what they removed, a clear while a session compiles breaks none of its compiles,
and a size bound that is not a finite number of MB is refused in one line.

No GPU: the sessions install their compile side only and compile for cuda:90 down to cubin.
"""

from __future__ import annotations

import os
import stat
import tempfile
import threading

import pytest
import triton
from helpers.cli import invoke
from test_build_cache import H100, _profile, _sidecars, cached_kernel
from triton.compiler import ASTSource

from proton_inject.collect.session import Session
from proton_inject.errors import UserError
from proton_inject.formats import build_cache
from proton_inject.instrument.rules import Rules

RULES = Rules(kernel_scope=True)


@pytest.fixture(autouse=True)
def caches(tmp_path, monkeypatch):
    """A cache of this test's own."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "user-triton"))


def _outside(tmp_path):
    """A directory of the user's that is no part of the cache, with a file in it."""
    d = tmp_path / "precious"
    (d / "GROUP").mkdir(parents=True)
    (d / "GROUP" / "k.cubin").write_bytes(b"x" * 5000)
    return d


def test_the_cache_directories_are_private(tmp_path):
    _profile(tmp_path, "a", RULES)
    (sidecar,) = _sidecars()
    key_dir = sidecar.parent.parent
    for d in (key_dir, key_dir.parent, key_dir.parent.parent):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d


def test_prune_removes_a_linked_key_directory_as_a_link(tmp_path):
    outside = _outside(tmp_path)
    _profile(tmp_path, "a", RULES)
    os.symlink(outside, build_cache.builds_root() / "linked")
    removed, left = build_cache.prune(limit=0)
    assert (outside / "GROUP" / "k.cubin").read_bytes() == b"x" * 5000
    assert not os.path.lexists(build_cache.builds_root() / "linked")
    assert left == 0 and removed > 0 and not _sidecars()


def test_clear_on_a_linked_builds_directory_removes_the_link_only(tmp_path):
    outside = _outside(tmp_path)
    build_cache.builds_root().parent.mkdir(parents=True)
    os.symlink(outside, build_cache.builds_root())
    out = invoke(["cache", "clear"], code=0).output
    assert (outside / "GROUP" / "k.cubin").exists()
    assert not os.path.lexists(build_cache.builds_root())
    assert "removed 0 bytes" in out, out


def test_clear_reports_what_it_removed(tmp_path):
    _profile(tmp_path, "a", RULES)
    size = build_cache.info()["bytes"]
    assert size > 0
    removed, kept = build_cache.clear()
    assert (removed, kept) == (size, 0)
    assert not build_cache.builds_root().exists()


def _many_sources(n: int) -> list[ASTSource]:
    sig = {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
    return [ASTSource(cached_kernel, signature=sig, constexprs={"BLOCK": 32 << i}) for i in range(n)]


def test_clear_while_a_session_compiles_breaks_no_compile(tmp_path):
    session = Session(RULES, tmp_path / "out")
    session.install_compiler(target=H100)
    stop = threading.Event()
    cleared = []

    def clear_again_and_again():
        while not stop.is_set():
            cleared.append(build_cache.clear())

    clearer = threading.Thread(target=clear_again_and_again)
    clearer.start()
    try:
        mode = triton.knobs.compilation.instrumentation_mode
        built = [triton.compile(src, target=H100, options={"instrumentation_mode": mode})
                 for src in _many_sources(6)]
    finally:
        stop.set()
        clearer.join()
        session.uninstall()
    assert all("proton.record" in ck.asm["ttgir"] for ck in built)
    assert len(cleared) > 6 and all(kept >= 0 for _, kept in cleared)


@pytest.mark.parametrize("bound", ["inf", "nan", "1e400", "-1", "lots"])
def test_a_size_bound_that_is_not_a_number_of_mb_is_refused_in_one_line(tmp_path, monkeypatch,
                                                                         bound):
    monkeypatch.setenv("PROTON_INJECT_CACHE_MAX_MB", bound)
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    session = Session(RULES, tmp_path / "out")
    with pytest.raises(UserError, match="PROTON_INJECT_CACHE_MAX_MB"):
        try:
            session.install_compiler(target=H100)
        finally:
            session.uninstall()
    assert not list(temp.iterdir()), "the session's temporary directory was left behind"
    res = invoke(["cache", "info"], code=2)
    assert res.output.count("\n") == 1 and "PROTON_INJECT_CACHE_MAX_MB" in res.output


@pytest.mark.parametrize("xdg", ["", "relative/cache"])
def test_an_empty_or_relative_xdg_cache_home_is_not_the_working_directory(monkeypatch, tmp_path,
                                                                          xdg):
    monkeypatch.setenv("XDG_CACHE_HOME", xdg)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert build_cache.builds_root() == tmp_path / ".cache" / "proton-inject" / "builds"


def test_prune_and_clear_leave_the_directory_of_a_running_session(tmp_path):
    session = Session(RULES, tmp_path / "out")
    session.install_compiler(target=H100)
    try:
        assert build_cache.prune(limit=0) == (0, 0)
        assert build_cache.clear() == (0, 0)
        assert session.builds.dir.is_dir(), "the session's (still empty) key directory was removed"
        mode = triton.knobs.compilation.instrumentation_mode
        triton.compile(_many_sources(1)[0], target=H100, options={"instrumentation_mode": mode})
        removed, kept = build_cache.clear()
        assert removed == 0 and kept > 0 and len(_sidecars()) == 1
    finally:
        session.uninstall()
