"""benchmarks/profile_speed.py's summary of the profiles' own time: the time line as the
command prints it (RunResult.time_line), read back part by part, medians over runs."""

from __future__ import annotations

import io

from helpers import REPO, load_module

from proton_inject.collect.launches import RunResult

bench = load_module(REPO / "benchmarks" / "profile_speed.py", "profile_speed")


def _line(**seconds: float) -> str:
    r = RunResult(out="x")
    r.seconds.update(seconds)
    r.compile_calls = 4
    return f"proton-inject: {r.time_line()}"


def test_the_time_lines_parts_are_read_back_and_their_medians_printed(tmp_path):
    parts: list[dict[str, float]] = []
    for start in (0.69, 1.02, 0.75):
        prog = tmp_path / "prog.py"
        line = _line(torch=3.5, start=start, program=0.64, compile=0.01, stop=0.44, report=0.67)
        prog.write_text(f"import sys\nprint({line!r}, file=sys.stderr)\nprint('out')\n")
        dt, out, rc = bench.timed([bench.sys.executable, str(prog)], {}, io.StringIO(), parts)
        assert out == ["out"] and rc == 0
    assert parts[0] == {"loading torch and CUDA": 3.5, "starting": 0.69, "the program": 0.64,
                        "of it Triton's compiles and cache loads": 0.01, "stopping": 0.44, "the report": 0.67}
    assert bench.parts_line(parts) == ("loading torch and CUDA 3.50 s, starting 0.75 s, the program 0.64 s, "
                                       "of it Triton's compiles and cache loads 0.01 s, stopping 0.44 s, "
                                       "the report 0.67 s")
    assert bench.parts_line([]) == ""
