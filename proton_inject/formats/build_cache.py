"""The tool's cache of instrumented builds, kept between sessions (issue 29).

``builds/<key>/`` under ``user_cache_dir()`` is a Triton cache directory: a session compiles
its instrumented builds there, so the next session with the same key finds them built.
``key`` digests everything of ours that changes a build (proton-inject's own code, the rules
or the tree, the lowering options); Triton's own cache key inside it covers the rest (source,
specialization, constexprs, num_warps, num_stages, target, Triton's version). Plain builds
never go here: they stay in the program's own Triton cache, as without the tool.

A cached build is only usable with what the compile hook learned while building it (its
regions, its instrumented IR for ``OUT/ir``), so each build's Triton group directory also
holds ``SIDECAR``, written once the compile finished; a build without one is rebuilt.

The size is bounded (``PROTON_INJECT_CACHE_MAX_MB``, default ``DEFAULT_MAX_MB``): after a
session the least recently used builds go first.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from proton_inject.formats.files import user_cache_dir, write_atomic

SIDECAR = "proton_inject.json"
SIDECAR_FORMAT = 1
DEFAULT_MAX_MB = 2048
MAX_SIDECAR_BYTES = 64 * 2**20  # an instrumented TTGIR is at most 64 MiB (schema.MAX_TTGIR_BYTES)
_PACKAGE = Path(__file__).resolve().parent.parent


def builds_root() -> Path:
    return user_cache_dir() / "builds"


def max_bytes() -> int:
    """The cache's size bound; a value that is not a number of MB gives the default."""
    text = os.environ.get("PROTON_INJECT_CACHE_MAX_MB", "")
    try:
        mb = float(text) if text else DEFAULT_MAX_MB
    except ValueError:
        mb = DEFAULT_MAX_MB
    return max(0, int(mb * 2**20))


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


def write_sidecar(group_dir: str | os.PathLike, record: dict[str, Any]) -> None:
    write_atomic(Path(group_dir) / SIDECAR,
                 json.dumps({"format": SIDECAR_FORMAT, **record}).encode())


def read_sidecar(group_dir: str | os.PathLike) -> dict[str, Any] | None:
    """The record beside a cached build; None when it is missing or not ours (the build is then
    rebuilt, never guessed at)."""
    from proton_inject.formats.schema import read_bytes

    path = Path(group_dir) / SIDECAR
    try:
        data = json.loads(read_bytes(path, "build record", MAX_SIDECAR_BYTES))
    except Exception:
        return None
    if not isinstance(data, dict) or data.get("format") != SIDECAR_FORMAT:
        return None
    if not isinstance(data.get("name"), str) or not isinstance(data.get("instrumented"), bool):
        return None
    os.utime(path)  # recently used: pruned last
    return data


def has_build_without_sidecar(group_dir: str | os.PathLike) -> bool:
    """A build Triton cached whose record is missing (a session that died mid-compile)."""
    d = Path(group_dir)
    return d.is_dir() and any(p.suffix == ".json" and p.name != SIDECAR for p in d.iterdir()) \
        and not (d / SIDECAR).is_file()


def _groups(root: Path) -> list[tuple[float, int, Path]]:
    """(last use, bytes, directory) of every cached build under ``root``."""
    out = []
    for key_dir in root.iterdir() if root.is_dir() else ():
        for group in key_dir.iterdir() if key_dir.is_dir() else ():
            try:
                files = [p.stat() for p in group.iterdir()]
            except OSError:
                continue
            size = sum(s.st_size for s in files)
            used = max([s.st_mtime for s in files] + [group.stat().st_mtime])
            out.append((used, size, group))
    return out


def prune(limit: int | None = None, root: Path | None = None) -> tuple[int, int]:
    """Remove the least recently used builds until the cache holds at most ``limit`` bytes;
    returns (bytes removed, bytes left)."""
    root = root or builds_root()
    limit = max_bytes() if limit is None else limit
    groups = sorted(_groups(root))
    total = sum(size for _, size, _ in groups)
    removed = 0
    for _, size, group in groups:
        if total - removed <= limit:
            break
        shutil.rmtree(group, ignore_errors=True)
        removed += size
    for key_dir in root.iterdir() if root.is_dir() else ():
        try:
            key_dir.rmdir()  # only when empty
        except OSError:
            pass
    return removed, total - removed


def info(root: Path | None = None) -> dict[str, Any]:
    root = root or builds_root()
    groups = _groups(root)
    newest = max((used for used, _, _ in groups), default=None)
    return {"path": str(root), "builds": len(groups), "bytes": sum(s for _, s, _ in groups),
            "max_bytes": max_bytes(),
            "last_used": time.strftime("%Y-%m-%d %H:%M", time.localtime(newest)) if newest else None}


def clear(root: Path | None = None) -> int:
    """Remove every cached build; returns the bytes freed."""
    root = root or builds_root()
    freed = sum(s for _, s, _ in _groups(root))
    shutil.rmtree(root, ignore_errors=True)
    return freed
