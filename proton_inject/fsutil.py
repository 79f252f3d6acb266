"""Small file-system helpers shared by every step that writes files."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from .errors import UserError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_writer(path: str | os.PathLike, binary: bool = True) -> Iterator[IO]:
    """Open a temp file beside ``path`` for streaming writes; rename it over ``path`` on success.

    Readers never see half a file, and a failure leaves any old ``path`` untouched.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        # mkstemp creates 0600; give the file the mode a plain open() would.
        os.fchmod(fd, 0o666 & ~_umask())
        if binary:
            f = os.fdopen(fd, "wb")
        else:
            f = os.fdopen(fd, "w", encoding="utf-8", newline="")
        with f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_atomic(path: str | os.PathLike, data: str | bytes) -> Path:
    """Write ``data`` to ``path`` via a temp file + rename, so readers never see half a file."""
    with atomic_writer(path, binary=isinstance(data, bytes)) as f:
        f.write(data)
    return Path(path)


def find_ttgir(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """Every ``.ttgir`` file under the given directories, plus the files given directly."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            found = sorted(q for q in p.rglob("*.ttgir") if q.is_file())
            if not found:
                raise UserError(f"{raw}: no .ttgir files in this directory")
            out.extend(found)
        elif p.is_file():
            out.append(p)
        else:
            raise UserError(f"{raw}: no such file or directory")
    return out
