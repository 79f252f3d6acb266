"""A cached build is used only when it is what the session that built it left: its files match
the digest in its record, its record has the fields and shapes a session writes. Anything else
(an altered or truncated cubin, metadata claiming no profile scratch, damaged Triton files, a
FIFO or a link among them, a record of garbage, wrong types or a hash that climbs out of OUT/ir)
is a note and a rebuild: never an exception out of the compile, a hang, or a kernel silently
left uninstrumented.

No GPU: the sessions install their compile side only and compile for cuda:90 down to cubin.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from test_build_cache import _profile, _sidecars

from proton_inject.formats import build_cache
from proton_inject.instrument.rules import Rules

RULES = Rules(kernel_scope=True, loops="outer")


@pytest.fixture(autouse=True)
def caches(tmp_path, monkeypatch):
    """A cache of this test's own."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "user-triton"))


def _one(group: Path, suffix: str) -> Path:
    (p,) = [p for p in group.iterdir() if p.name.endswith(suffix) and not p.name.startswith("__grp__")
            and p.name != build_cache.SIDECAR]
    return p


def _flip_byte(group: Path) -> None:
    p = _one(group, ".cubin")
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0xFF
    p.write_bytes(bytes(data))


def _truncate(group: Path) -> None:
    p = _one(group, ".cubin")
    p.write_bytes(p.read_bytes()[:100])


def _no_scratch(group: Path) -> None:
    p = _one(group, ".json")
    meta = json.loads(p.read_text())
    meta["profile_scratch_size"] = 0
    p.write_text(json.dumps(meta))


def _replace(suffix: str, how) -> callable:
    def change(group: Path) -> None:
        p = group / suffix if (group / suffix).exists() else _one(group, suffix)
        p.unlink()
        how(p)
    return change


def _garbage(p: Path) -> None:
    p.write_bytes(os.urandom(300))


def _record(**fields) -> callable:
    def change(group: Path) -> None:
        p = group / build_cache.SIDECAR
        rec = json.loads(p.read_text())
        rec.update(fields)
        p.write_text(json.dumps(build_cache.sealed(rec)))  # (its own digest as if a session wrote it)
    return change


def _link_to_copy(p: Path) -> None:
    """The record moved out of the cache and linked back (what it says still holds)."""
    copy = p.parent.parent.parent.parent / "record-elsewhere.json"
    p.rename(copy)
    p.symlink_to(copy)


def _flip_record_byte(group: Path) -> None:
    """A region's name changed, the record's digest not: JSON still, a kernel mislabelled."""
    p = group / build_cache.SIDECAR
    p.write_text(p.read_text().replace('"loop v @', '"loop w @', 1))


DAMAGE = {
    "cubin altered": _flip_byte,
    "cubin truncated": _truncate,
    "metadata says no profile scratch": _no_scratch,
    "metadata garbage": _replace(".json", _garbage),
    "group file garbage": _replace("__grp__cached_kernel.json", _garbage),
    "cubin a FIFO": _replace(".cubin", os.mkfifo),
    "cubin a link to /dev/zero": _replace(".cubin", lambda p: os.symlink("/dev/zero", p)),
    "record garbage": _replace(build_cache.SIDECAR, _garbage),
    "record a FIFO": _replace(build_cache.SIDECAR, os.mkfifo),
    "record a link to a copy": lambda group: _link_to_copy(group / build_cache.SIDECAR),
    "record scope_locs a list": _record(scope_locs=[]),
    "record scope_names a number": _record(scope_names=5),
    "record scope ids strings": _record(scope_names=[["x", "kernel"]]),
    "record manifest a list": _record(manifest=[1, 2]),
    "record regions wrong": _record(manifest={"regions": 5}),
    "record region without its origin": _record(manifest={"regions": [{"name": "kernel",
                                                                       "scope_id": 0}]}),
    "record notes a dict": _record(notes={"a": 1}),
    "record ir a number": _record(ir=7),
    "record instrumented a string": _record(instrumented="yes"),
    "record name a number": _record(name=5),
    "record a byte changed": lambda group: _flip_record_byte(group),
}


@pytest.fixture
def alarm():
    """A hang (a FIFO opened for reading) becomes a failure after 30 s."""
    def timed_out(signum, frame):
        raise TimeoutError("the compile hung")
    old = signal.signal(signal.SIGALRM, timed_out)
    signal.alarm(30)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def _rebuilt_with_a_note(session, ck) -> None:
    assert session.hook.records, "the damaged build was used instead of rebuilt"
    assert "proton.record" in ck.asm["ttgir"] and ck.metadata.profile_scratch_size > 0
    notes = session.result.messages + session.hook.notes
    assert any("cached build" in n for n in notes), notes


@pytest.mark.parametrize("damage", DAMAGE, ids=list(DAMAGE))
def test_a_damaged_cached_build_is_a_note_and_a_rebuild(tmp_path, damage, alarm):
    _profile(tmp_path, "a", RULES)
    (sidecar,) = _sidecars()
    DAMAGE[damage](sidecar.parent)
    session, ck = _profile(tmp_path, "b", RULES)
    _rebuilt_with_a_note(session, ck)
    third, _ = _profile(tmp_path, "c", RULES)
    assert not third.hook.records, "the rebuild is cached again"


def test_a_record_whose_hash_climbs_out_writes_nothing_outside_ir(tmp_path):
    _profile(tmp_path, "a", RULES)
    (sidecar,) = _sidecars()
    _record(hash="../../escaped")(sidecar.parent)
    session, ck = _profile(tmp_path, "b", RULES)
    assert not (tmp_path / "escaped").exists()
    files = json.loads((tmp_path / "b" / "ir" / "manifest.json").read_text())["kernels"]
    assert all(".." not in k["file"] for k in files)
    _rebuilt_with_a_note(session, ck)


def test_a_record_with_many_notes_costs_no_seconds(tmp_path):
    _profile(tmp_path, "a", RULES)
    (sidecar,) = _sidecars()
    _record(notes=[f"note {i}" for i in range(30_000)])(sidecar.parent)
    session, ck = _profile(tmp_path, "b", RULES)
    assert len(session.hook.notes) < 100  # each one scanned the list of those before: 8 s
    _rebuilt_with_a_note(session, ck)


def test_a_build_another_session_is_compiling_is_left_to_it(tmp_path):
    """Triton's files without its group file: another session is compiling the kernel into the
    same directory now; removing them would break its compile. It is a miss: built over."""
    _profile(tmp_path, "a", RULES)
    (sidecar,) = _sidecars()
    group = sidecar.parent
    sidecar.unlink()
    (grp,) = group.glob("__grp__*")
    grp.unlink()
    partial = _one(group, ".ttir")
    partial.write_bytes(b"half written")  # (Triton replaces it whole)
    theirs = group / "other_kernel.llir"
    theirs.write_bytes(b"the other session's")
    session, ck = _profile(tmp_path, "b", RULES)
    assert theirs.read_bytes() == b"the other session's", "the other session's files were removed"
    assert session.hook.records and ck.metadata.profile_scratch_size > 0
    assert not [n for n in session.result.messages if "cached build" in n]
    assert len(_sidecars()) == 1
