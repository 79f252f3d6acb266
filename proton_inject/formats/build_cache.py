"""The tool's cache of instrumented builds, kept between sessions.

``builds/<key>/`` under ``user_cache_dir()`` is a Triton cache directory: a session compiles
its instrumented builds there, so the next session with the same key finds them built.
``key`` digests everything of ours that changes a build (proton-inject's own code, the rules
or the tree, the lowering options); Triton's own cache key inside it covers the rest (source,
specialization, constexprs, num_warps, num_stages, target, Triton's version). Plain builds
never go here: they stay in the program's own Triton cache, as without the tool.

A cached build is only usable with what the compile hook learned while building it (its
regions, its instrumented IR for ``OUT/ir``), so each build's Triton group directory also
holds ``SIDECAR``, written once the compile finished, with the sha256 of every file of the
build and of the record itself. These files outlive the session and other processes can change them (a CI cache
restored from elsewhere, a second session, a full disk), so a build is used only once
``checked_build`` found its record well formed and its files as recorded; anything else is
``DamagedBuild`` and the build is made again.

The directories are the user's only (0700). A session holds a shared ``flock`` on its key
directory while it runs; ``prune`` (after each session, least recently used first, down to
``PROTON_INJECT_CACHE_MAX_MB``, default ``DEFAULT_MAX_MB``) and ``clear`` remove only key
directories they can lock alone, and remove links and other strays as entries, never
following them.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import hashlib
import json
import math
import os
import re
import shutil
import stat
import time
from contextlib import ExitStack, suppress
from pathlib import Path
from typing import Any

from proton_inject.errors import UserError
from proton_inject.formats.files import private_dir, user_cache_dir, write_atomic

SIDECAR = "proton_inject.json"
SIDECAR_FORMAT = 2  # 2: with the digest of the build's files (builds of format 1 are rebuilt)
DEFAULT_MAX_MB = 2048
MAX_ENV = "PROTON_INJECT_CACHE_MAX_MB"
MAX_SIDECAR_BYTES = 64 * 2**20  # an instrumented TTGIR is at most 64 MiB (schema.MAX_TTGIR_BYTES)
MAX_BUILD_FILE_BYTES = 2**30  # a file of a build (its LLVM IR, its cubin), hashed before use
MAX_NOTES = 1000  # insert's notes on one kernel are a handful; more is not a record we wrote
_HASH = re.compile(r"[A-Z2-7]{52}|[0-9a-f]{52}")  # base32 of the source hash (hex without one)
_SHA256 = re.compile(r"[0-9a-f]{64}")
_TRITON_TMP = "tmp.pid_"  # Triton's directory of a file it is writing
_PACKAGE = Path(__file__).resolve().parent.parent


class DamagedBuild(Exception):
    """A cached build that must not be used; the message says why."""


class UnfinishedBuild(DamagedBuild):
    """Triton's files of a build without its record: a session died while compiling it."""


def builds_root() -> Path:
    return user_cache_dir() / "builds"


def max_bytes() -> int:
    """The cache's size bound from ``PROTON_INJECT_CACHE_MAX_MB``; anything but a finite number
    of MB from 0 is a UserError."""
    text = os.environ.get(MAX_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_MB * 2**20
    try:
        mb = float(text)
    except ValueError:
        mb = math.nan
    if not (math.isfinite(mb) and mb >= 0):
        raise UserError(f"{MAX_ENV}={text[:40]!r}: expected the cache's size bound as a number of "
                        f"MB from 0 (default {DEFAULT_MAX_MB}); set it so or unset it")
    return int(mb * 2**20)


@functools.cache
def code_digest() -> str:
    """sha256 of the package's own sources: a changed lowering or inserter (a new release or a
    local edit) must not reuse builds made by the old one."""
    h = hashlib.sha256()
    for p in sorted(_PACKAGE.rglob("*")):
        if p.suffix in (".py", ".lark") and p.is_file():
            h.update(str(p.relative_to(_PACKAGE)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def build_key(*parts: str) -> str:
    """The directory name for builds made with ``parts`` (rules, options, ...) by this code."""
    h = hashlib.sha256(code_digest().encode())
    for part in parts:
        h.update(b"\0" + part.encode())
    return h.hexdigest()[:32]


def build_dir(key: str) -> Path:
    return builds_root() / key


# --- the directories -------------------------------------------------------------------------


def open_key_dir(key: str) -> tuple[Path, int]:
    """This session's directory for builds keyed ``key`` (made private) and a shared lock on
    it, an fd held until it is closed: prune and clear leave a locked directory alone."""
    user_cache_dir(make=True)
    d = build_dir(key)
    for _ in range(20):  # a clear may remove it between its making and its locking
        try:
            private_dir(d.parent)
            private_dir(d)
            fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        fcntl.flock(fd, fcntl.LOCK_SH)
        with suppress(OSError):
            if os.path.samestat(os.lstat(d), os.fstat(fd)):
                return d, fd
        os.close(fd)
    raise OSError(errno.EBUSY, "the directory kept being removed while it was made", str(d))


def _lock_alone(path: str) -> int | None:
    """An exclusive lock on the key directory ``path`` (an fd), None while a session holds it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:  # gone, or not ours to open: nothing to remove there
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _listing(path: str | os.PathLike) -> list[os.DirEntry]:
    try:
        with os.scandir(path) as it:
            return list(it)
    except OSError:
        return []


def _size(path: str) -> int:
    """Bytes of the regular files at or under ``path``, links never followed."""
    try:
        st = os.lstat(path)
    except OSError:
        return 0
    if not stat.S_ISDIR(st.st_mode):
        return st.st_size if stat.S_ISREG(st.st_mode) else 0
    return sum(_size(os.path.join(path, e.name)) for e in _listing(path))


def remove_entry(path: str | os.PathLike) -> int:
    """Remove ``path``: a directory with what it holds, anything else (a link too) as itself.
    Returns the bytes of files really removed."""
    path = str(path)
    before = _size(path)
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except OSError:
        pass
    return before - _size(path)


def _is_dir(path: str | os.PathLike) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _key_builds(key_dir: str) -> list[tuple[float, int, str]]:
    """(last use, bytes, directory) of each build in the key directory ``key_dir``."""
    out = []
    for group in _listing(key_dir):
        if group.is_dir(follow_symlinks=False):
            with suppress(OSError):
                times = [e.stat(follow_symlinks=False).st_mtime for e in _listing(group.path)]
                used = max([*times, group.stat(follow_symlinks=False).st_mtime])
                out.append((used, _size(group.path), group.path))
    return out


def _builds(root: Path) -> list[tuple[float, int, str]]:
    """Every cached build under ``root``, links not followed."""
    keys = _listing(root) if _is_dir(root) else []
    return [b for k in keys if k.is_dir(follow_symlinks=False) for b in _key_builds(k.path)]


def prune(limit: int | None = None, root: Path | None = None) -> tuple[int, int]:
    """Remove the least recently used builds until the cache holds at most ``limit`` bytes, and
    any stray entry (a link, a file) where a key directory or a build belongs; key directories
    a running session holds are left alone. Returns (bytes removed, bytes left)."""
    root = Path(root or builds_root())
    if limit is None:
        try:
            limit = max_bytes()
        except UserError:  # changed while the session ran (refused when it started)
            limit = DEFAULT_MAX_MB * 2**20
    if not _is_dir(root):
        return 0, 0
    removed = in_use = 0
    builds: list[tuple[float, int, str]] = []
    locked: list[str] = []
    with ExitStack() as held:
        for key in _listing(root):
            fd = _lock_alone(key.path) if key.is_dir(follow_symlinks=False) else -1
            if fd == -1:
                removed += remove_entry(key.path)
            elif fd is None:
                in_use += _size(key.path)
            else:
                held.callback(os.close, fd)
                locked.append(key.path)
                for group in _listing(key.path):
                    if not group.is_dir(follow_symlinks=False):
                        removed += remove_entry(group.path)
                builds += _key_builds(key.path)
        left = in_use + sum(size for _, size, _ in builds)
        for _, _, group in sorted(builds):
            if left <= limit:
                break
            freed = remove_entry(group)
            removed, left = removed + freed, left - freed
        for key_dir in locked:  # (an empty one a session holds is kept for its builds)
            with suppress(OSError):
                os.rmdir(key_dir)  # only when empty
    return removed, left


def info(root: Path | None = None) -> dict[str, Any]:
    root = root or builds_root()
    builds = _builds(root)
    newest = max((used for used, _, _ in builds), default=None)
    return {"path": str(root), "builds": len(builds), "bytes": sum(s for _, s, _ in builds),
            "max_bytes": max_bytes(),
            "last_used": time.strftime("%Y-%m-%d %H:%M", time.localtime(newest)) if newest else None}


def clear(root: Path | None = None) -> tuple[int, int]:
    """Remove every cached build but those of running sessions (a ``builds`` that is a link or
    a file is removed as itself); returns (bytes removed, bytes of running sessions kept)."""
    root = Path(root or builds_root())
    if not _is_dir(root):
        return remove_entry(root) if os.path.lexists(root) else 0, 0
    removed = kept = 0
    for key in _listing(root):
        fd = _lock_alone(key.path) if key.is_dir(follow_symlinks=False) else -1
        if fd is None:
            kept += _size(key.path)
            continue
        try:
            removed += remove_entry(key.path)
        finally:
            if fd != -1:
                os.close(fd)
    with suppress(OSError):
        os.rmdir(root)  # only when empty
    return removed, kept


# --- a build's record and its check ----------------------------------------------------------


def _read(path: str, limit: int) -> bytes:
    """A file of a build: regular (never a FIFO or a device, never waited on) and bounded."""
    from proton_inject.formats.schema import read_bytes

    try:
        return read_bytes(path, "cached build", limit)
    except UserError as e:
        raise DamagedBuild(str(e).split("; ")[0].replace(path, os.path.basename(path))) from None


def _digest(path: str) -> str:
    from proton_inject.formats.schema import file_sha256

    try:
        return file_sha256(path, "cached build", MAX_BUILD_FILE_BYTES)
    except UserError as e:
        raise DamagedBuild(str(e).split("; ")[0].replace(path, os.path.basename(path))) from None


def _build_files(group_dir: str) -> list[str]:
    """The names of a build's files: all but its record and Triton's files being written;
    DamagedBuild where one is not a regular file (a link, a FIFO)."""
    entries = [e for e in _listing(group_dir)
               if e.name != SIDECAR and not e.name.startswith(_TRITON_TMP)]
    for e in entries:
        if not e.is_file(follow_symlinks=False):
            raise DamagedBuild(f"{e.name} is not a regular file")
    return sorted(e.name for e in entries)


def write_record(group_dir: str | os.PathLike, record: dict[str, Any]) -> None:
    """Write ``record`` beside the build in ``group_dir`` with the digest of its files (an
    OSError or DamagedBuild when one of them cannot be read: the build is not kept)."""
    d = str(group_dir)
    files = {name: _digest(os.path.join(d, name)) for name in _build_files(d)}
    rec = sealed({**record, "format": SIDECAR_FORMAT, "files": files})
    write_atomic(Path(d) / SIDECAR, json.dumps(rec).encode())


def _record_digest(rec: dict[str, Any]) -> str:
    body = {k: v for k, v in rec.items() if k != "digest"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def sealed(rec: dict[str, Any]) -> dict[str, Any]:
    """``rec`` with the digest of its own fields, so that a changed byte in it (a regions' name,
    a line of its IR) is found, not used."""
    return {**rec, "digest": _record_digest(rec)}


def checked_build(group_dir: str | os.PathLike) -> dict[str, Any] | None:
    """The record of the build in ``group_dir`` once it and the build's files
    are checked; None when no build is there; DamagedBuild when the one there must not be
    used (a build whose compile never finished included)."""
    d = str(group_dir)
    if not os.path.lexists(d):
        return None
    if not _is_dir(d):
        raise DamagedBuild("not a directory")
    files = _build_files(d)
    if not files:
        return None
    if not os.path.lexists(os.path.join(d, SIDECAR)):
        if not any(f.startswith("__grp__") for f in files):
            return None  # being compiled now (by another session), or never finished: a miss
        raise UnfinishedBuild("it has no record: its compile did not finish")
    if os.path.islink(os.path.join(d, SIDECAR)):
        raise DamagedBuild(f"{SIDECAR} is a link")
    try:
        rec = check_record(json.loads(_read(os.path.join(d, SIDECAR), MAX_SIDECAR_BYTES)))
    except (ValueError, RecursionError):
        raise DamagedBuild("its record is not JSON") from None
    if files != sorted(rec["files"]):
        raise DamagedBuild("its files are not those recorded")
    for f in files:
        if _digest(os.path.join(d, f)) != rec["files"][f]:
            raise DamagedBuild(f"{f} changed after it was built")
    _check_triton_files(d, rec)
    with suppress(OSError):
        os.utime(os.path.join(d, SIDECAR))  # recently used: pruned last
    return rec


def _check_triton_files(d: str, rec: dict[str, Any]) -> None:
    """Triton's group file names only files of this build (it reads the paths it lists), and
    an instrumented build's metadata gives its records a buffer."""
    groups = [f for f in rec["files"] if f.startswith("__grp__") and f.endswith(".json")]
    if len(groups) != 1:
        raise DamagedBuild("it has no single Triton group file")
    try:
        paths = json.loads(_read(os.path.join(d, groups[0]), MAX_SIDECAR_BYTES))["child_paths"]
        if not all(isinstance(p, str) and p == os.path.join(d, c) and c in rec["files"]
                   for c, p in paths.items()):
            raise DamagedBuild("Triton's group file names files elsewhere")
        (meta_name,) = [c for c in paths if c.endswith(".json")]
        meta = json.loads(_read(os.path.join(d, meta_name), MAX_SIDECAR_BYTES))
        scratch = meta["profile_scratch_size"] if rec["instrumented"] else 1
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        raise DamagedBuild("Triton's files of it are damaged") from None
    if not (isinstance(scratch, int) and scratch > 0):
        raise DamagedBuild("its metadata gives its records no buffer")


def _is_id(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**31


def check_record(rec: Any) -> dict[str, Any]:
    """``rec`` when it has every field a session writes, each of its type and shape; else
    DamagedBuild naming the first that is not. (Every field ``CompileHook.restore`` reads is
    checked here: one it trusts unchecked raises out of the program's compile.)"""
    from proton_inject.formats.manifest import manifest_kernels

    def need(ok: bool, field: str) -> None:
        if not ok:
            raise DamagedBuild(f"its record's {field} is not as a session writes it")

    need(isinstance(rec, dict) and rec.get("format") == SIDECAR_FORMAT, "format")
    need(rec.get("digest") == _record_digest(rec), "digest")
    need(isinstance(rec.get("name"), str) and 0 < len(rec["name"]) <= 4096, "name")
    need(isinstance(rec.get("hash"), str) and _HASH.fullmatch(rec["hash"]) is not None, "hash")
    need(isinstance(rec.get("instrumented"), bool), "instrumented")
    need(isinstance(rec.get("reason"), str), "reason")
    files = rec.get("files")
    need(isinstance(files, dict) and all(
        isinstance(v, str) and _SHA256.fullmatch(v) and f not in ("", ".", "..", SIDECAR)
        and "/" not in f and "\0" not in f for f, v in files.items()), "files")
    names = rec.get("scope_names")
    need(isinstance(names, list) and all(
        isinstance(p, list) and len(p) == 2 and _is_id(p[0]) and isinstance(p[1], str)
        for p in names), "scope_names")
    parents = rec.get("scope_parents")
    need(isinstance(parents, list) and all(
        isinstance(p, list) and len(p) == 2 and _is_id(p[0]) and _is_id(p[1]) for p in parents),
        "scope_parents")
    locs = rec.get("scope_locs")
    need(isinstance(locs, dict) and all(
        k.isdigit() and len(k) < 10 and isinstance(v, str) for k, v in locs.items()), "scope_locs")
    if not rec["instrumented"]:
        return rec
    ir = rec.get("ir")
    need(_latin1(ir), "ir")
    notes = rec.get("notes")
    need(isinstance(notes, list) and len(notes) <= MAX_NOTES
         and all(isinstance(n, str) for n in notes), "notes")
    manifest = rec.get("manifest")
    try:
        need(isinstance(manifest, dict) and len(manifest_kernels({"kernels": [manifest]}, "")) == 1,
             "manifest")
    except UserError:
        need(False, "manifest")
    need(all(isinstance(r.get("name"), str) and isinstance(r.get("origin"), str)
             and _is_id(r.get("scope_id")) for r in manifest.get("regions") or []), "regions")
    return rec


def _latin1(text: Any) -> bool:
    """Whether ``text`` is a str the hook can write back as the bytes it read (latin-1)."""
    try:
        return isinstance(text, str) and bool(text.encode("latin-1"))
    except UnicodeEncodeError:
        return False
