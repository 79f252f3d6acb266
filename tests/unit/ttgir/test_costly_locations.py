"""IR whose `loc(...)` costs far more than its size: a chain of 5,000 aliases (was a
RecursionError), 40 aliases each naming the one before twice ("billion laughs": 42 s, then a
MemoryError), a 20 MB file name (3.4 GB at its peak: the string pattern kept a backtracking
frame per character). ``inspect`` and ``insert`` handle each in memory and time in proportion
to the file, with the op's source line still found."""

from __future__ import annotations

import signal
from contextlib import contextmanager

import pytest
from helpers import SAMPLES
from helpers.cli import invoke
from helpers.limits import memory_limit

from proton_inject.ttgir import parse_file

ADD = (SAMPLES / "cuda-90/add_kernel.ttgir").read_text()
PID_LOC = '#loc22 = loc("pid"(#loc2))'  # the loc of tt.get_program_id: vector_add.py:14


def _chain(n: int) -> str:
    """``#loc22`` reached through ``n`` aliases, each naming the one before."""
    defs = ['#loc100 = loc("examples/vector_add.py":14:24)']
    defs += [f"#loc{i} = loc(#loc{i - 1})" for i in range(101, 101 + n)]
    return ADD.replace(PID_LOC, f'#loc22 = loc("pid"(#loc{100 + n}))') + "\n".join(defs) + "\n"


def _laughs(n: int) -> str:
    """``n`` aliases each naming the one before twice: 2^n frames if expanded."""
    defs = ['#loc100 = loc("examples/vector_add.py":14:24)']
    defs += [f"#loc{i} = loc(callsite(#loc{i - 1} at #loc{i - 1}))" for i in range(101, 101 + n)]
    return ADD.replace(PID_LOC, f'#loc22 = loc("pid"(#loc{100 + n}))') + "\n".join(defs) + "\n"


def _long_name(n: int) -> str:
    long = "d/" * (n // 2) + "vector_add.py"
    return ADD.replace('#loc2 = loc("examples/vector_add.py":14:24)', f'#loc2 = loc("{long}":14:24)')


@contextmanager
def _within(seconds: int):
    def fail(signum, frame):
        raise TimeoutError(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, fail)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("make", [lambda: _chain(5000), lambda: _laughs(40),
                                  lambda: _long_name(20_000_000)],
                         ids=["chain of 5,000 aliases", "billion laughs", "20 MB file name"])
def test_inspect_and_insert_take_costly_locations(tmp_path, make):
    (tmp_path / "a.ttgir").write_text(make())
    with _within(60), memory_limit(2**30):
        shown = invoke(["inspect", "a.ttgir"], cwd=tmp_path, code=0).output
        invoke(["insert", "a.ttgir", "-o", "o.ttgir"], cwd=tmp_path, code=0)
        module = parse_file(tmp_path / "a.ttgir")
    assert "vector_add.py:14: tt.get_program_id" in shown
    pid = next(op for op in module.walk() if op.name == "tt.get_program_id")
    assert pid.location.primary.line == 14 and pid.location.primary.file.endswith("vector_add.py")
    assert pid.location.names[0] == "pid"
    assert (tmp_path / "o.ttgir").read_text().count("proton.record") == 4


def test_frames_per_location_are_bounded():
    """The laughs' frames are cut at MAX_PARTS, innermost first (all the same line here)."""
    from proton_inject.ttgir.locations import MAX_PARTS
    from proton_inject.ttgir.parser import parse

    module = parse(_laughs(40))
    pid = next(op for op in module.walk() if op.name == "tt.get_program_id")
    assert len(pid.location.frames) == MAX_PARTS
    assert {f.line for f in pid.location.frames} == {14}


def test_an_alias_cycle_resolves_to_no_location_and_an_undefined_alias_is_named():
    from proton_inject.errors import ParseError
    from proton_inject.ttgir.parser import parse

    cyc = ADD.replace(PID_LOC, "#loc22 = loc(#loc200)") + "#loc200 = loc(#loc201)\n#loc201 = loc(#loc22)\n"
    pid = next(op for op in parse(cyc).walk() if op.name == "tt.get_program_id")
    assert pid.location.primary is None
    with pytest.raises(ParseError, match="loc alias #loc201 is never defined"):
        parse(ADD.replace(PID_LOC, "#loc22 = loc(callsite(#loc2 at #loc201))"))
