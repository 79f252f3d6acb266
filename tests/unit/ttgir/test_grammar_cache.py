"""The grammar is never loaded from a file: a file planted in the tool's cache directory (a
pickle that runs code, a FIFO, a link to /dev/zero) changes nothing, and no cache file is
written anywhere (with XDG_CACHE_HOME="" it once went into the working directory).

Each command runs in a child process, where the parser is built afresh."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
from helpers import REPO
from helpers.cli import child_env, run_cli

SAMPLE = REPO / "ttgir_samples/cuda-90/add_kernel.ttgir"
LARK_CACHE = "ttgir-grammar.lark-cache"


class _Planted:
    """Unpickling this creates the file ``path``."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def _inspect(tmp_path: Path, xdg: str) -> None:
    env = child_env(XDG_CACHE_HOME=xdg, HOME=str(tmp_path / "home"))
    run_cli(["inspect", str(SAMPLE)], cwd=tmp_path, env=env, code=0, timeout=30)


def test_a_planted_pickle_is_never_loaded(tmp_path):
    cache = tmp_path / "xdg" / "proton-inject"
    cache.mkdir(parents=True)
    marker = tmp_path / "ran"
    # lark's cache: a hash line, then pickles (the first one is loaded before any hash is compared)
    (cache / LARK_CACHE).write_bytes(b"0" * 64 + b"\n" + pickle.dumps(_Planted(str(marker))))
    _inspect(tmp_path, str(tmp_path / "xdg"))
    assert not marker.exists(), "a pickle planted in the cache ran"


@pytest.mark.parametrize("kind", ["fifo", "zero"])
def test_a_fifo_or_endless_file_in_the_cache_is_never_read(tmp_path, kind):
    cache = tmp_path / "xdg" / "proton-inject"
    cache.mkdir(parents=True)
    if kind == "fifo":
        os.mkfifo(cache / LARK_CACHE)
    else:
        os.symlink("/dev/zero", cache / LARK_CACHE)
    _inspect(tmp_path, str(tmp_path / "xdg"))


def test_no_grammar_cache_is_written_even_into_the_working_directory(tmp_path):
    _inspect(tmp_path, "")
    _inspect(tmp_path, str(tmp_path / "xdg"))
    assert not list(tmp_path.iterdir())
