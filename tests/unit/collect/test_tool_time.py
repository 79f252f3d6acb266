"""Where a profile's wall time goes: Triton's compiles counted by the session's compile side
(real compiles for an H100, no GPU), and the line the command prints from the parts."""

from __future__ import annotations

import time

from helpers.compile_side import compile_side, jit_compile

from proton_inject.collect.launches import RunResult
from proton_inject.collect.session import Session
from proton_inject.instrument.rules import Rules


def test_the_compile_side_times_each_outer_compile(tmp_path):
    session = Session(Rules(kernel_scope=True), tmp_path / "out")
    with compile_side(session):
        t0 = time.perf_counter()
        jit_compile()  # compiled: instrumented
        mid = time.perf_counter()
        jit_compile()  # the same build again: loaded from the session's build cache
        t1 = time.perf_counter()
    c = session.compiler
    assert c.compile_calls == 2  # (Triton's compile within JIT's _do_compile would be one)
    assert 0 < c.compile_seconds <= t1 - t0
    assert c.compile_seconds > (mid - t0) * 0.5  # the first compile is most of it


def test_the_time_line_names_the_parts_in_order():
    r = RunResult(out="x")
    assert r.time_line() is None  # (nothing timed: nothing printed)
    r.seconds.update(program=17.9, compile=1.25, stop=0.04, start=0.4, report=1.1, calibrate=0.001)
    r.compile_calls = 1
    assert r.time_line() == ("time: starting 0.40 s, the program 17.90 s, of it Triton's compiles and "
                             "cache loads 1.25 s over 1 call, stopping 0.04 s, the report 1.10 s")
    r.seconds.update(calibrate=3.0, compile=0.0)  # (calibrated now; nothing compiled)
    assert r.time_line() == ("time: calibrating 3.00 s, starting 0.40 s, the program 17.90 s, "
                             "stopping 0.04 s, the report 1.10 s")
    r.seconds.update(torch=2.5, profiler=0.3, auto=0.01)  # (--auto's: torch.profiler within starting)
    assert r.time_line() == ("time: loading torch and CUDA 2.50 s, calibrating 3.00 s, starting 0.40 s, "
                             "of it torch.profiler's start 0.30 s, the program 17.90 s, stopping 0.04 s, "
                             "the report 1.10 s, ranking 0.01 s")
