"""Notes one line each, the whole behind -v (issue 31: notes ran to 400 characters). report
on the real short-launch matmul prints its clock note as one short line without -v, and the
whole note in its place, then every per-launch detail, with -v."""

from __future__ import annotations

from pathlib import Path

from helpers import DATA
from helpers.cli import run_cli

from proton_inject.formats.diagnostics import MORE, NOTE_WIDTH, headline

CLOCK_NOTE = ("matmul_kernel: globaltimer fit rejected on 1 of 1 launch (anchors too close in "
              "time, low R^2, fitted rate stretches records, no clock bracket: older run); cycles "
              "converted at a per-launch bound (slowest clock that fits 95% of CTAs' records in their "
              "lifetime: a bound, not a measurement; ns are upper bounds); pass --clock-mhz to "
              "set it")


def test_a_long_note_keeps_its_first_clauses_without_asides():
    assert headline(CLOCK_NOTE) == ("matmul_kernel: globaltimer fit rejected on 1 of 1 launch; "
                                    "cycles converted at a per-launch bound" + MORE)
    assert headline("short; note (kept whole)") == "short; note (kept whole)"
    # one clause longer than the width is kept whole: a note is never cut mid-sentence
    long_clause = "x" * (NOTE_WIDTH + 5) + "; then more"
    assert headline(long_clause) == "x" * (NOTE_WIDTH + 5) + MORE


def _report(*flags: str) -> list[str]:
    out = run_cli(["report", DATA / "h100-shortlaunch", *flags], cwd=Path.cwd(), code=0,
                  timeout=300)
    return [ln for ln in out.stderr.splitlines() if ln.startswith("proton-inject:")]


def test_report_notes_are_one_line_each_and_whole_with_v():
    lines = _report()
    assert lines == ["proton-inject: warning: " + headline(CLOCK_NOTE)]
    assert all(len(ln) <= 24 + NOTE_WIDTH for ln in lines)
    verbose = _report("-v")
    assert verbose[0] == "proton-inject: warning: " + CLOCK_NOTE  # whole, in its place
    assert any("launch 00000-matmul_kernel: globaltimer clock fit rejected" in ln for ln in verbose)


def test_a_word_with_parentheses_is_not_an_aside():
    # "kernel(s)" lost its "(s)" while asides were dropped; the reason a launch was dropped and
    # the build-cache count must stay in the one-line form (H100 GPU test, 2026-11-26).
    line = headline("instrumented 3 kernel(s) at compile time, 3 from the build cache: "
                    "matmul_kernel, scaled_add_kernel, softmax_kernel, " + "x" * 40)
    assert line.startswith("instrumented 3 kernel(s) at compile time, 3 from the build cache: ")
    assert headline("30030 launches of instrumented kernels not kept: autotune benchmarking; "
                    "configs were timed on the plain builds, as without proton-inject") == \
        "30030 launches of instrumented kernels not kept: autotune benchmarking (more: -v)"
