"""Fuzz the build cache: a real cached build, 1-3 random damages to its files, its record or its
directories (random bytes, cuts, flipped bytes, wrong-typed fields, FIFOs, links, a directory
where a file was), then a session compiling the kernel, prune and clear over what is left.

The promise for every case: no exception and no hang (each case under an alarm), the kernel
instrumented (from the cache or rebuilt), nothing written outside the session's OUT/ir, and
nothing outside the cache touched. ``PROTON_INJECT_CACHE_FUZZ_CASES`` (default 20) and
``PROTON_INJECT_CACHE_FUZZ_SEED`` (default 1) set a longer or other run.

No GPU: the sessions install their compile side only and compile for cuda:90 down to cubin.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
from pathlib import Path

import pytest
from helpers.compile_side import compile_side, instrumented, jit_compile

from proton_inject.collect.session import Session
from proton_inject.formats import build_cache
from proton_inject.instrument.rules import Rules

CASES = int(os.environ.get("PROTON_INJECT_CACHE_FUZZ_CASES", "20"))
SEED = int(os.environ.get("PROTON_INJECT_CACHE_FUZZ_SEED", "1"))
CASE_TIMEOUT_S = 30
RULES = Rules(kernel_scope=True, loops="outer")
VALUES = [None, True, 0, -1, 2**63, 1.5, float("nan"), "", "../../escaped", "A" * 52, "x" * 5000,
          [], {}, [[1, "a"]], [["1", 2]], {"1": 5}, {"a": "b"}, [[[[[]]]]] * 3, ["n"] * 3000,
          [{"name": "kernel", "scope_id": 0}], [{"name": "loop", "scope_id": 0, "origin": "loops"}]]


def _tree_digest(root: Path) -> str:
    """What ``root`` holds (names, kinds, bytes), read without following a link."""
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        h.update(str(p.relative_to(root)).encode())
        if p.is_symlink():
            h.update(b"link" + os.readlink(p).encode())
        elif p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


def _remove(p: Path) -> None:
    """Remove ``p`` as itself (a link, never what it points to)."""
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p)
    elif os.path.lexists(p):
        p.unlink()


def _damage_file(rng: random.Random, p: Path, outside: Path) -> str:
    how = rng.choice(["bytes", "cut", "flip", "fifo", "link", "delete", "dir"])
    data = p.read_bytes() if p.is_file() and not p.is_symlink() else b""
    if how in ("bytes", "cut", "flip"):
        if how == "bytes":
            data = rng.randbytes(rng.randrange(0, 2000))
        elif how == "cut":
            data = data[:rng.randrange(0, len(data) + 1)]
        elif data:
            i = rng.randrange(len(data))
            data = data[:i] + bytes([data[i] ^ (1 << rng.randrange(8))]) + data[i + 1:]
        _remove(p)
        p.write_bytes(data)
        return f"{how} {p.name}"
    _remove(p)
    if how == "fifo":
        os.mkfifo(p)
    elif how == "link":
        target = rng.choice(["/dev/zero", str(p), str(next(outside.glob("*.cubin"))), "/nonexistent"])
        os.symlink(target, p)
    elif how == "dir":
        p.mkdir()
    return f"{how} {p.name}"


def _damage_record(rng: random.Random, group: Path) -> str:
    p = group / build_cache.SIDECAR
    if p.is_symlink() or not p.is_file():  # (a FIFO put there before: never opened here)
        return "record already damaged"
    try:
        rec = json.loads(p.read_text())
    except ValueError:
        return "record already damaged"
    if not isinstance(rec, dict) or rng.random() < 0.1:
        rec = rng.choice(VALUES)
        field = "whole"
    else:
        field = rng.choice([*rec, "files.entry", "manifest.regions"])
        if field == "files.entry" and isinstance(rec.get("files"), dict) and rec["files"]:
            name = rng.choice(sorted(rec["files"]))
            rec["files"][name] = rng.choice(VALUES)
        elif field == "manifest.regions" and isinstance(rec.get("manifest"), dict):
            rec["manifest"]["regions"] = rng.choice(VALUES)
        elif rng.random() < 0.2:
            rec.pop(field, None)
        else:
            rec[field] = rng.choice(VALUES)
    resealed = isinstance(rec, dict) and rng.random() < 0.7  # (else its own digest refuses it)
    p.write_text(json.dumps(build_cache.sealed(rec) if resealed else rec))
    return f"record {field}{' resealed' if resealed else ''}"


def _damage(rng: random.Random, group: Path, outside: Path) -> str:
    if group.parent.is_symlink() or group.is_symlink() or not group.is_dir():
        return "nothing left to damage"  # (never through a link into ``outside``)
    kind = rng.choice(["file", "file", "record", "record", "extra", "group", "key"])
    if kind == "file":
        files = sorted(group.iterdir()) if group.is_dir() and not group.is_symlink() else []
        return _damage_file(rng, rng.choice(files), outside) if files else "no files"
    if kind == "record":
        return _damage_record(rng, group)
    if kind == "extra":
        (group / rng.choice(["x.cubin", "tmp.pid_1_x", "__grp__x.json"])).write_bytes(b"{}")
        return "extra file"
    victim = group if kind == "group" else group.parent
    _remove(victim)
    os.symlink(outside, victim)
    return f"{kind} directory a link"


@pytest.fixture
def alarm():
    def timed_out(signum, frame):
        raise TimeoutError(f"a case took more than {CASE_TIMEOUT_S} s")
    old = signal.signal(signal.SIGALRM, timed_out)
    yield lambda: signal.alarm(CASE_TIMEOUT_S)
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def _session(out: Path) -> tuple[Session, object]:
    session = Session(RULES, out)
    with compile_side(session):
        ck = jit_compile()
    return session, ck


def test_damaged_caches_are_rebuilt_never_a_traceback_or_a_hang(tmp_path, monkeypatch, alarm):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "user-triton"))
    first, _ = _session(tmp_path / "first")
    assert first.hook.records
    (sidecar,) = build_cache.builds_root().glob("*/*/" + build_cache.SIDECAR)
    group = sidecar.parent
    pristine = tmp_path / "pristine"
    shutil.copytree(build_cache.builds_root(), pristine, symlinks=True)
    outside = tmp_path / "outside"
    shutil.copytree(group, outside)
    before = _tree_digest(outside)
    rng = random.Random(SEED)
    rebuilt = 0
    for case in range(CASES):
        _remove(build_cache.builds_root())
        shutil.copytree(pristine, build_cache.builds_root(), symlinks=True)
        done = [_damage(rng, group, outside) for _ in range(rng.randint(1, 3))]
        out = tmp_path / f"case{case}"
        alarm()
        try:
            session, ck = _session(out)
            build_cache.prune(limit=rng.choice([0, 2**40]))
            build_cache.info()
            build_cache.clear()
        except BaseException as e:
            raise AssertionError(f"case {case} ({'; '.join(done)}): {type(e).__name__}: {e}") from e
        finally:
            signal.alarm(0)
        where = f"case {case} ({'; '.join(done)})"
        assert instrumented(ck), where
        (entry,) = session.hook.compiled.values()
        assert entry.instrumented, where
        rebuilt += bool(session.hook.records)
        ir = (out / "ir").resolve()
        assert all(p.resolve().is_relative_to(ir) for p in ir.rglob("*")), where
        assert not (tmp_path / "escaped").exists(), where
        ours = {"xdg", "user-triton", "first", "pristine", "outside"} | {f"case{i}" for i in range(case + 1)}
        assert {p.name for p in tmp_path.iterdir()} <= ours, where
        assert _tree_digest(outside) == before, f"{where}: a file outside the cache changed"
    print(f"{CASES} damaged caches (seed {SEED}): {rebuilt} rebuilt, {CASES - rebuilt} used as they were")
