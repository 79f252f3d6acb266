"""The Triton cache of the tool's own kernels (the clock bracket, ``--measure-overhead``'s gate),
checked before Triton reads it.

Triton loads what its cache holds, cubins and compiled launcher modules alike, without a
check. This directory outlives a session and other processes can change it (a CI cache restored
from another job, a shared home), so the tool seals it after compiling: the sha256 of every file
in it. Before the next compile every entry must be a regular file or a directory (never a link,
a FIFO or a device) and every file must be listed with its digest; otherwise everything in the
directory is removed, as entries (links are not followed), and the kernels are built again.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from proton_inject.errors import UserError
from proton_inject.formats.files import private_dir, waiting_lock, write_atomic
from proton_inject.formats.schema import file_sha256, loads_json, read_text

SEAL = "proton-inject-seal.json"
MAX_FILE_BYTES = 2**28  # a tool kernel's cubin or launcher module is a few MB at most


@contextmanager
def checked(cache: str | os.PathLike) -> Iterator[Path]:
    """``cache`` (its parent must exist) made private and emptied unless its seal holds (see
    the module), held against other sessions (a lock beside it) while the block compiles into
    it; sealed anew after."""
    d = Path(cache)
    with waiting_lock(d.parent / f".{d.name}.lock"):
        if not _sealed(d):
            _empty(d)
        private_dir(d)
        yield d
        seal(d)


def _files(d: Path) -> dict[str, str] | None:
    """Every file under ``d`` (relative path: sha256), the seal left out; None when an entry
    is a link or neither a file nor a directory, or a file cannot be hashed."""
    out: dict[str, str] = {}
    for top, dirs, files in os.walk(d, followlinks=False):
        for name in dirs + files:
            path = os.path.join(top, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISDIR(mode):
                continue
            if not stat.S_ISREG(mode):
                return None
            rel = os.path.relpath(path, d)
            if rel != SEAL:
                try:
                    out[rel] = file_sha256(path, "tool kernel cache file", MAX_FILE_BYTES)
                except UserError:
                    return None
    return out


def _sealed(d: Path) -> bool:
    """Whether ``d`` holds exactly what its seal lists (an empty or missing directory: yes)."""
    if not d.exists() and not d.is_symlink():
        return True
    if d.is_symlink() or not d.is_dir():
        return False
    files = _files(d)
    if files is None:
        return False
    if not files:
        return True
    try:
        listed = loads_json(read_text(d / SEAL, "tool kernel cache seal"), d / SEAL, "")
    except UserError:
        return False
    return listed == files


def _empty(d: Path) -> None:
    """Remove ``d``'s entries (a link or a file in its place: itself), never following a link."""
    if d.is_symlink() or (d.exists() and not d.is_dir()):
        with suppress(OSError):
            os.unlink(d)
        return
    if not d.exists():
        return
    for entry in os.scandir(d):
        with suppress(OSError):
            if entry.is_dir(follow_symlinks=False):
                _empty(Path(entry.path))
                os.rmdir(entry.path)
            else:
                os.unlink(entry.path)


def seal(d: str | os.PathLike) -> None:
    """Record the digest of every file now in ``d``."""
    files = _files(Path(d))
    if files is not None:
        write_atomic(Path(d) / SEAL, json.dumps(files, indent=1, sort_keys=True) + "\n")
