"""``dump -- python prog.py`` reads each compile's TTGIR where Triton's cache keeps it: a
program whose kernels are already in its cache is dumped without compiling them again, a
damaged cache entry is left out with a note, and a cache that keeps binaries only falls back
to compiling with Triton's IR dump. Real compiles for an H100 (no GPU)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.aot_kernels import compiling_program

from proton_inject.dump.program import dump_program

PROGRAM = compiling_program("scale_kernel", 3, (64, 256), 4, """
    print("done")
""")


@pytest.fixture
def program(tmp_path, monkeypatch):
    """The program, and a Triton cache of its own that a plain run of it filled."""
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    cache = tmp_path / "cache"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    subprocess.run([sys.executable, str(script)], check=True, capture_output=True, env=dict(os.environ))
    return script, cache


def _entries(cache: Path) -> set[str]:
    return {p.relative_to(cache).as_posix() for p in cache.rglob("*")}


def test_a_warm_cache_is_dumped_without_compiling_again(program, tmp_path):
    script, cache = program
    before = _entries(cache)
    ttgirs = sorted(p for p in cache.rglob("*.ttgir"))
    assert len(ttgirs) == 2
    res = dump_program(["python", str(script)], tmp_path / "dump")
    assert res.exit_code == 0 and res.compiled == 2 and len(res.kernels) == 2 and not res.notes
    assert _entries(cache) == before  # every build came from the cache: nothing compiled
    assert sorted(k.ttgir for k in res.kernels) == sorted(p.read_text() for p in ttgirs)
    for k in res.kernels:  # (what the tree holds is what the cache held, described as a compile is)
        assert (tmp_path / "dump" / k.hash / "scale_kernel.ttgir").read_text() == k.ttgir
        assert (k.target, k.num_warps, k.divisibility_16) == ("cuda:90", 4, ["x_ptr"])
    assert sorted(k.constexprs["BLOCK"] for k in res.kernels) == [64, 256]


def test_a_damaged_cache_entry_is_left_out_with_a_note(program, tmp_path):
    script, cache = program
    damaged, kept = sorted(cache.rglob("*.ttgir"))
    damaged.write_text("garbage\n")
    res = dump_program(["python", str(script)], tmp_path / "dump")
    assert res.exit_code == 0 and len(res.kernels) == 1
    assert res.kernels[0].ttgir == kept.read_text()
    (note,) = res.notes
    assert f"{damaged} does not hold this kernel's TTGIR" in note and "left out" in note
    assert damaged.read_text() == "garbage\n"  # (the program's cache is not ours to mend)


def test_a_cache_of_binaries_only_is_dumped_by_compiling(tmp_path, monkeypatch):
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    cache = tmp_path / "binaries"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    monkeypatch.setenv("TRITON_STORE_BINARY_ONLY", "1")
    subprocess.run([sys.executable, str(script)], check=True, capture_output=True, env=dict(os.environ))
    assert not list(cache.rglob("*.ttgir")) and list(cache.rglob("*.cubin"))
    before = _entries(cache)
    res = dump_program(["python", str(script)], tmp_path / "dump")
    assert res.exit_code == 0 and len(res.kernels) == 2 and not res.notes
    assert all("tt.func public @scale_kernel" in k.ttgir for k in res.kernels)
    assert _entries(cache) == before  # (compiled in a private cache)



def test_a_cache_manager_of_the_programs_own_is_left_alone(tmp_path, monkeypatch):
    """A TRITON_CACHE_MANAGER may keep no IR: the dump compiles into a private cache of Triton's
    own kind (Triton's own manager class stands in for a program's here)."""
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    cache = tmp_path / "managed"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    monkeypatch.setenv("TRITON_CACHE_MANAGER", "triton.runtime.cache:FileCacheManager")
    res = dump_program(["python", str(script)], tmp_path / "dump")
    assert res.exit_code == 0 and len(res.kernels) == 2 and not res.notes
    assert not cache.exists() or not _entries(cache)  # (nothing compiled into the program's cache)
