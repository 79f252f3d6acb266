"""`proton-inject cache info|clear`: the build cache's place, size and emptying."""

from __future__ import annotations

from helpers.cli import invoke

from proton_inject.formats import build_cache


def test_cache_info_and_clear(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    group = build_cache.builds_root() / "somekey" / "GROUPHASH"
    group.mkdir(parents=True)
    (group / "k.cubin").write_bytes(b"x" * 4096)
    build_cache.write_record(group, {"name": "k", "instrumented": True})
    info = invoke(["cache", "info"], code=0).output
    assert str(build_cache.builds_root()) in info and "1 build(s)" in info
    cleared = invoke(["cache", "clear"], code=0).output
    assert "removed" in cleared and not build_cache.builds_root().exists()
    assert "0 build(s)" in invoke(["cache", "info"], code=0).output
