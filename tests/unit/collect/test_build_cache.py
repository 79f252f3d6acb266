"""Instrumented builds kept between sessions (issue 29): a second session with the same rules
takes the first one's build from the tool's cache, with the hook's record of it (regions, the
IR under OUT/ir), instead of compiling; other rules or options build anew; --no-cache keeps
nothing; a build without its record is rebuilt; the cache stays under its size bound.

No GPU: the sessions install their compile side only and compile for cuda:90 down to cubin.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from proton_inject.collect.patches import Patches
from proton_inject.collect.session import Session
from proton_inject.formats import build_cache
from proton_inject.instrument.rules import Rules
from proton_inject.lower.options import LoweringOptions

H100 = GPUTarget("cuda", 90, 32)


@triton.jit
def cached_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x_ptr + offs, mask=offs < n)
    for _ in range(4):
        v = v * 1.5
    tl.store(out_ptr + offs, v, mask=offs < n)


def _compile():
    """As the JIT compiles: the session's instrumentation mode in the options."""
    src = ASTSource(cached_kernel, signature={"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32",
                                              "BLOCK": "constexpr"},
                    constexprs={"BLOCK": 128}, attrs={(0,): [["tt.divisibility", 16]]})
    return triton.compile(src, target=H100,
                          options={"instrumentation_mode": triton.knobs.compilation.instrumentation_mode})


@pytest.fixture(autouse=True)
def caches(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "user-triton"))


def _profile(tmp_path: Path, name: str, rules: Rules, cache: bool = True, options=None):
    """One session's compile side (what start() installs without a GPU), compiling the kernel."""
    session = Session(rules, tmp_path / name, options)
    session.builds.enabled = cache
    session.install_compiler(target=H100)
    try:
        ck = _compile()
    finally:
        session.uninstall()
    return session, ck


def _sidecars() -> list[Path]:
    return list(build_cache.builds_root().glob("*/*/" + build_cache.SIDECAR))


def test_second_session_takes_the_build_and_its_record_from_the_cache(tmp_path):
    rules = Rules(kernel_scope=True, loops="outer")
    first, ck1 = _profile(tmp_path, "a", rules)
    assert first.hook.records, "the first session instruments the kernel itself"
    assert "proton.record" in ck1.asm["ttgir"]
    assert len(_sidecars()) == 1
    second, ck2 = _profile(tmp_path, "b", rules)
    assert not second.hook.records, "the second one compiled nothing"
    assert ck2.asm["cubin"] == ck1.asm["cubin"]
    (chash, e1), = first.hook.compiled.items()
    e2 = second.hook.compiled[chash]
    assert e2.cached and e2.instrumented and not e1.cached
    assert (e2.scope_names, e2.scope_parents, e2.scope_locs) == (e1.scope_names, e1.scope_parents, e1.scope_locs)
    # How the lowering lowered it comes back too: the session's end does not parse its IR again.
    assert e1.lowered is not None and e2.lowered == e1.lowered
    assert (tmp_path / "b" / "ir" / e2.file).read_bytes() == (tmp_path / "a" / "ir" / e1.file).read_bytes()
    m1 = json.loads((tmp_path / "a" / "ir" / "manifest.json").read_text())
    m2 = json.loads((tmp_path / "b" / "ir" / "manifest.json").read_text())
    assert m1 == m2
    assert second.hook.summary()[0].startswith("instrumented 1 kernel(s) at compile time, 1 from the build cache: ")
    # Nothing instrumented in the program's own cache.
    user = [f for f in (tmp_path / "user-triton").rglob("*") if f.is_file()]
    assert not [f for f in user if b"proton.record" in f.read_bytes()]


def test_other_rules_or_options_build_anew_and_no_cache_keeps_nothing(tmp_path):
    _profile(tmp_path, "a", Rules(kernel_scope=True))
    other, _ = _profile(tmp_path, "b", Rules(kernel_scope=True, loops="both"))
    assert other.hook.records
    opts, _ = _profile(tmp_path, "c", Rules(kernel_scope=True), options=LoweringOptions(buffer_type="global"))
    assert opts.hook.records
    assert len(_sidecars()) == 3
    build_cache.clear()
    nocache, _ = _profile(tmp_path, "d", Rules(kernel_scope=True), cache=False)
    assert nocache.hook.records and not _sidecars()


def test_a_build_without_its_record_is_rebuilt(tmp_path):
    rules = Rules(kernel_scope=True)
    _profile(tmp_path, "a", rules)
    (sidecar,) = _sidecars()
    sidecar.unlink()
    again, ck = _profile(tmp_path, "b", rules)
    assert again.hook.records and "proton.record" in ck.asm["ttgir"]
    assert len(_sidecars()) == 1


def test_prune_keeps_the_most_recently_used_builds(tmp_path):
    root = tmp_path / "builds"
    for i, key in enumerate(["old", "mid", "new"]):
        group = root / key / "g"
        group.mkdir(parents=True)
        (group / "k.cubin").write_bytes(b"x" * 1000)
        os.utime(group / "k.cubin", (1000 + i, 1000 + i))
        os.utime(group, (1000 + i, 1000 + i))
    removed, left = build_cache.prune(limit=2000, root=root)
    assert (removed, left) == (1000, 2000)
    assert sorted(p.name for p in root.iterdir()) == ["mid", "new"]


def test_when_imported_runs_after_the_program_imports_the_module(tmp_path, monkeypatch):
    (tmp_path / "late_module_xyz.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    patches = Patches()
    patches.when_imported("late_module_xyz", lambda m: seen.append(m.VALUE))
    assert seen == [] and "late_module_xyz" not in sys.modules
    import late_module_xyz  # noqa: F401

    assert seen == [1]
    patches.undo_all()
    assert not any(type(f).__name__ == "_AfterImport" for f in sys.meta_path)
    sys.modules.pop("late_module_xyz", None)


def test_a_lowering_decision_not_as_written_is_worked_out_again(tmp_path):
    """A record (sealed, so its digest holds) whose lowering decision is not one a session
    writes: the build is still used, its decision left to be worked out from its IR."""
    rules = Rules(kernel_scope=True, loops="outer")
    first, _ = _profile(tmp_path, "a", rules, options=LoweringOptions(buffer_type="direct"))
    (chash, e1), = first.hook.compiled.items()
    assert e1.lowered.direct_records, "direct: the record holds the record table"
    (sidecar,) = _sidecars()
    rec = json.loads(sidecar.read_text())
    assert rec["lowered"] == e1.lowered.to_json()
    for bad in ({"options": {"clock": 7}, "direct_records": None, "direct_loops": None},
                {**rec["lowered"], "direct_records": [["x"]]}, "direct"):
        rec["lowered"] = bad
        sidecar.write_text(json.dumps(build_cache.sealed({k: v for k, v in rec.items() if k != "digest"})))
        second, _ = _profile(tmp_path, "b", rules, options=LoweringOptions(buffer_type="direct"))
        e2 = second.hook.compiled[chash]
        assert e2.cached and e2.instrumented and e2.lowered is None, bad
