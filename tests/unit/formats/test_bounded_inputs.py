"""Issue 31: inputs that are bombs or outputs that hit a full disk, through the CLI.

Each case ends in exit 2 with one message naming the file, no traceback, no output or temp
file left, and the inputs unchanged. (The file kinds, deep nesting and wrong-typed fields are
in the bad-input corpus, tests/bad_inputs/cases.py.)
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import zlib
from pathlib import Path

import pytest
from helpers import DATA
from helpers.cli import invoke
from helpers.limits import memory_limit

from proton_inject.formats import trace_json as trace_mod

RAW = DATA / "h100-shortlaunch"


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def _one_clean_error(res, *needles: str) -> str:
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert res.exit_code == 2, (res.exit_code, res.stderr)
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("proton-inject: error:")]
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def _bomb(inflated_mib: int) -> bytes:
    """A gzip stream of ``inflated_mib`` MiB of zeros, about 1 KiB per MiB: one fully flushed
    deflate block repeated (its trailer is not checked: no reader gets that far)."""
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    head = z.compress(bytes(2**20)) + z.flush(zlib.Z_FULL_FLUSH)
    block = zlib.compressobj(9, zlib.DEFLATED, -15)
    one = block.compress(bytes(2**20)) + block.flush(zlib.Z_FULL_FLUSH)
    return head + one * (inflated_mib - 1) + z.flush()


# --- the disk fills while `report --trace` writes -------------------------------------------------


class _FullDisk:
    """A file that takes ``room`` bytes, then fails like a full disk."""

    def __init__(self, f, room: int):
        self._f, self._room = f, room

    def write(self, b) -> int:
        if len(b) > self._room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._room -= len(b)
        return self._f.write(b)

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self._f.__exit__(*exc)


@pytest.mark.parametrize("room", [0, 4096])
@pytest.mark.parametrize("opts", [[], ["--gz"], ["--merge"], ["--merge", "--gz"]],
                         ids=["plain", "gz", "merged", "merged-gz"])
@pytest.mark.parametrize("fmt", ["perfetto", "json"])
def test_full_disk_during_report_trace(tmp_path, monkeypatch, fmt, opts, room):
    shutil.copytree(RAW, tmp_path / "raw")
    before = _tree(tmp_path / "raw")
    real = os.fdopen

    def fdopen(fd, *a, **k):  # the atomic writer's file: full after `room` bytes
        return _FullDisk(real(fd, *a, **k), room)

    monkeypatch.setattr(os, "fdopen", fdopen)
    res = invoke(["report", "raw", "--trace", "t", "--trace-format", fmt, *opts], cwd=tmp_path)
    monkeypatch.undo()
    msg = _one_clean_error(res, "t/", "No space left on device", "free some space")
    assert "cannot write" in msg
    assert _tree(tmp_path / "raw") == before
    # Nothing half-written: no trace file, no temp file (a launch before the full disk would
    # have been complete; with room for 4 KiB none is).
    assert not [p.name for p in (tmp_path / "t").iterdir()], msg


# --- gzip bombs ------------------------------------------------------------------------------------


def test_raw_buffer_gzip_bomb_under_a_memory_limit(tmp_path):
    """A bomb of 1 GiB of zeros (1 MiB on disk) whose metadata claims a CUDA-maximum grid, so
    the grid does not bound the read: a clean message where memory runs out."""
    (tmp_path / "raw").mkdir()
    meta = json.loads((RAW / "00000-matmul_kernel.json").read_text())
    meta.update(grid=[2**31 - 1, 65535, 65535], bin="00000-matmul_kernel.bin.gz")
    (tmp_path / "raw/00000-matmul_kernel.json").write_text(json.dumps(meta))
    (tmp_path / "raw/00000-matmul_kernel.bin.gz").write_bytes(_bomb(1024))
    before = _tree(tmp_path)
    with memory_limit(384 * 2**20):
        res = invoke(["report", "raw"], cwd=tmp_path)
    _one_clean_error(res, "raw/00000-matmul_kernel.bin.gz: not enough memory to inflate")
    assert _tree(tmp_path) == before


def test_raw_buffer_gzip_bomb_past_the_size_limit(tmp_path, monkeypatch):
    """The same bomb against the limit for one launch's buffer (lowered to 16 MiB here)."""
    from proton_inject.formats import raw as raw_mod

    monkeypatch.setattr(raw_mod, "MAX_RAW_BYTES", 16 * 2**20)
    out = zlib.decompressobj(31).decompress(_bomb(3)[:-8])  # (its trailer is wrong)
    assert len(out) == 3 * 2**20 and not any(out)  # the bomb is what it says
    (tmp_path / "raw").mkdir()
    meta = json.loads((RAW / "00000-matmul_kernel.json").read_text())
    meta.update(grid=[2**31 - 1, 65535, 65535], bin="00000-matmul_kernel.bin.gz")
    (tmp_path / "raw/00000-matmul_kernel.json").write_text(json.dumps(meta))
    (tmp_path / "raw/00000-matmul_kernel.bin.gz").write_bytes(_bomb(64))
    with memory_limit(384 * 2**20):
        res = invoke(["report", "raw"], cwd=tmp_path)
    _one_clean_error(res, "raw/00000-matmul_kernel.bin.gz: inflates to more than 16 MiB; more "
                     "than proton-inject decodes of one launch")


def test_trace_gzip_bomb(tmp_path, monkeypatch):
    """A gzipped trace inflating past the trace limit (lowered to 16 MiB here) is refused
    after reading no more than that."""
    monkeypatch.setattr(trace_mod, "MAX_TRACE_BYTES", 16 * 2**20)
    (tmp_path / "t.json.gz").write_bytes(_bomb(64))
    with memory_limit(384 * 2**20):
        res = invoke(["report", "t.json.gz"], cwd=tmp_path)
    _one_clean_error(res, "t.json.gz: inflates to more than 16 MiB; too large to load whole")


def test_trace_gzip_bomb_under_a_memory_limit(tmp_path):
    (tmp_path / "t.json.gz").write_bytes(_bomb(1024))
    with memory_limit(384 * 2**20):
        res = invoke(["report", "t.json.gz"], cwd=tmp_path)
    _one_clean_error(res, "t.json.gz: not enough memory to inflate this trace file")

