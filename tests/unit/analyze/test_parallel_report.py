"""The report at scale (issue 29 items 2-4): worker processes give the same report as one
process, damaged launches among several are left out by name, the summary's quantiles come
from bounded sketches (exact for integer cycles), ranks give the slowest, and the progress
bar shows on a terminal only.

Runs are written by the runtime's own writers (benchmarks/report_scale.py's ``build_run``)
from the real H100 buffers of tests/data/h100-triton3.6.
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

import numpy as np
import pytest
from helpers import load_module

from proton_inject.analyze.decode import decode
from proton_inject.analyze.report import run_report
from proton_inject.analyze.sketch import BITS, MAX_BINS, Dist, Sketch, fixed, keys
from proton_inject.analyze.summary import LaunchData, Summary, launch_part, summarize
from proton_inject.analyze.text import format_text
from proton_inject.formats.diagnostics import Issue
from proton_inject.formats.raw import load_raw

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "tests" / "data" / "h100-triton3.6"


def _build_run(out: Path, launches: int, ctas: int) -> Path:
    mod = load_module(ROOT / "benchmarks" / "report_scale.py", "report_scale")
    mod.build_run(out, launches, ctas, 0.25)
    return out


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """24 launches (add and mm), one of them damaged (its buffer cut short)."""
    out = _build_run(tmp_path_factory.mktemp("par") / "run", 24, 4)
    bad = out / "raw" / "00005-add_kernel.bin.gz"
    bad.write_bytes(bad.read_bytes()[:40])
    return out


def test_workers_give_the_same_report_traces_and_notes_as_one_process(run_dir, tmp_path):
    one = run_report([run_dir], trace_dir=tmp_path / "one", jobs=1, as_json=True)
    two = run_report([run_dir], trace_dir=tmp_path / "two", jobs=2, as_json=True)
    assert one.text == two.text and one.details == two.details
    assert one.warnings == two.warnings
    left = [w for w in one.warnings if w.startswith("left out: ")]
    assert len(left) == 1 and "00005-add_kernel" in left[0]
    assert sum(len(k["launches"]) for k in one.summary["kernels"]) == 23
    assert [p.name for p in one.files] == [p.name for p in two.files] and len(one.files) == 23
    for a, b in zip(one.files, two.files, strict=True):
        assert a.read_bytes() == b.read_bytes()


def test_workers_write_the_same_merged_trace(run_dir, tmp_path):
    one = run_report([run_dir], trace_dir=tmp_path / "one", merge=True, jobs=1, trace_format="json")
    two = run_report([run_dir], trace_dir=tmp_path / "two", merge=True, jobs=2, trace_format="json")
    assert one.files[0].read_bytes() == two.files[0].read_bytes()
    assert one.text == two.text


def test_zero_jobs_is_refused(run_dir):
    from proton_inject.errors import UserError

    with pytest.raises(UserError, match="-j 0"):
        run_report([run_dir], jobs=0)


def _sketch(v: np.ndarray) -> Sketch:
    return Sketch(BITS, *np.unique(keys(v), return_counts=True))


def _dist(v: np.ndarray) -> Dist:
    return Dist(len(v), fixed(float(v.sum())), float(v.min()), float(v.max()), _sketch(v))


def test_sketch_quantiles_are_numpys_for_integer_cycles():
    rng = np.random.default_rng(1)
    v = np.concatenate([rng.integers(-50, 8000, 100_000), rng.integers(20, 40, 5_000)]).astype(np.float64)
    d = _dist(v)
    got = d.stats()
    want = np.quantile(v, [0.05, 0.5, 0.95])
    assert [got["p5"], got["median"], got["p95"]] == want.tolist()
    assert (got["total"], got["min"], got["max"], got["mean"]) == (v.sum(), v.min(), v.max(), v.mean())
    # merged from parts in any split: the same bins
    parts = [_dist(x) for x in np.array_split(rng.permutation(v), 7)]
    m = Dist()
    for p in parts:
        m.merge(p)
    assert np.array_equal(m.sketch.keys, d.sketch.keys) and np.array_equal(m.sketch.counts, d.sketch.counts)


def test_sketch_stays_bounded_and_within_its_precision():
    rng = np.random.default_rng(2)
    s = Sketch()
    every = []
    for _ in range(20):  # floats over 20 octaves: far more distinct bins than MAX_BINS
        v = np.exp2(rng.uniform(0, 20, 50_000))
        every.append(v)
        s.merge(_sketch(v))
        assert len(s.keys) <= MAX_BINS
    v = np.concatenate(every)
    assert s.n == len(v) and s.bits < 12
    for q, got in zip((0.05, 0.5, 0.95), s.quantiles((0.05, 0.5, 0.95)), strict=True):
        want = np.quantile(v, q)
        assert want * (1 - 2.0 ** -s.bits) <= got <= want  # a bin's lower edge


def test_summary_is_the_same_whatever_the_order_launches_come_in():
    xs = []
    for name in ("add", "mm"):
        buf, meta = load_raw(DATA / f"profile_scratch_{name}.json")
        d = decode(buf, meta, clock_mhz=1500)
        x = LaunchData.from_decoded(d)
        xs += [x, dataclasses.replace(x, launch=x.launch + 1, dur_ns=x.dur_ns * 1.5)]
    a = Summary()
    for x in xs:
        a.add(launch_part(x))
    b = Summary()
    for x in reversed(xs):
        b.add(launch_part(x))
    assert a.result() == b.result() == summarize(xs)
    add = a.result()["kernels"][0]
    totals = [r["ns"]["total"] for r in add["regions"]]
    assert totals == sorted(totals, reverse=True)  # longest in total first
    assert {r["name"]: r["launches"] for r in add["regions"]} == {"kernel": 2, "iter": 2}


def test_clocks_and_issues_are_kept_once_per_group_of_launches():
    """A kernel keeps a few bytes per launch: its clocks grouped by source (each launch's rate
    listed, the first launch's reason), its issues by cause; the same in any order or split."""
    buf, meta = load_raw(DATA / "profile_scratch_add.json")
    x = LaunchData.from_decoded(decode(buf, meta))
    assert x.clock["source"] == "globaltimer-fit"
    guess = Issue("globaltimer fit rejected", "", "low R^2", "cycles converted at 1980 MHz")
    xs = []
    for n in range(6):
        clock = dict(x.clock, mhz_median=1900.0 + n, fit_r2=0.99 - n / 100)
        issues = []
        if n % 3 == 2:  # launches 2 and 5: a guessed clock, each with its own reason
            clock.update(source="device-clock", mhz_median=1980.0, reason=f"R^2 0.{n} (< 0.9)")
            issues = [dataclasses.replace(guess, detail=f"launch {n}: R^2 0.{n}")]
        xs.append(dataclasses.replace(x, launch=n, clock=clock, issues=issues))
    whole = summarize(xs)
    [k] = whole["kernels"]
    fit, guessed = k["clock"]["groups"]
    assert fit["source"] == "globaltimer-fit" and fit["launches"] == [0, 1, 3, 4]
    assert fit["mhz_median"] == [1900.0, 1901.0, 1903.0, 1904.0] and fit["lowest"]["fit_r2"] == 0.95
    assert guessed["launches"] == [2, 5] and guessed["first_reason"] == "R^2 0.2 (< 0.9)"
    assert k["clock"]["mhz_median"] == 1903.5
    [issue] = k["issues"]
    assert issue["launches"] == [2, 5] and issue["detail"] == "launch 2: R^2 0.2"
    assert k["warnings"] == ["add_kernel: globaltimer fit rejected on 2 of 6 launches (low R^2); "
                             "cycles converted at 1980 MHz"]
    assert "globaltimer-fit 1,900-1,904 MHz on 4 of 6 launches (measured: R^2 >= 0.950" in format_text(whole, True)
    # launches in reverse, and in two summaries merged: the same report
    back = Summary()
    for y in reversed(xs):
        back.add(launch_part(y))
    halves = [Summary(), Summary()]
    for y in xs:
        halves[y.launch % 2].add(launch_part(y))
    halves[1].merge(halves[0])
    assert back.result() == whole == halves[1].result()


def test_ranks_name_the_slowest_and_the_spread():
    buf, meta = load_raw(DATA / "profile_scratch_add.json")
    x = LaunchData.from_decoded(decode(buf, meta, clock_mhz=1500))
    slow = 1.25  # rank 2's regions and CTAs take 25% longer
    ranks = [dataclasses.replace(x, rank=r) for r in (0, 1)]
    ranks.append(dataclasses.replace(x, rank=2, dur_ns=x.dur_ns * slow, start_ns=x.start_ns * slow,
                                     cta_init_ns=x.cta_init_ns * slow,
                                     cta_prefinal_ns=x.cta_prefinal_ns * slow))
    (k,) = summarize(ranks)["kernels"]
    assert k["ranks"] == [0, 1, 2] and k["slowest_rank"]["rank"] == 2
    assert k["slowest_rank"]["over_fastest_pct"] == pytest.approx(25.0, abs=0.5)
    it = next(r for r in k["regions"] if r["name"] == "iter")
    assert it["slowest_rank"]["rank"] == 2
    assert it["slowest_rank"]["over_fastest_pct"] == pytest.approx(25.0, abs=0.5)
    text = format_text({"kernels": [k]})
    assert "rank 2 (slowest: +25." in text and "slowest rank 2" in text
    # past 4 ranks, a region's rows are its slowest and fastest rank only
    many = [dataclasses.replace(x, rank=r) for r in (0, 1, 3, 4, 5)] + ranks[2:]
    (k,) = summarize(many)["kernels"]
    rows = [ln.split()[:2] for ln in format_text({"kernels": [k]}).splitlines() if ln.startswith("    rank ")]
    assert len(k["per_rank"]) == 6 and rows == [["rank", "0"], ["rank", "2"]] * len(k["regions"])


def _cli_report(run: Path, stderr_tty: bool) -> str:
    """stderr of `proton-inject report RUN -j 1`, on a terminal or on a pipe."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "proton_inject.cli", "report", str(run), "-j", "1"]
    if not stderr_tty:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
        assert p.returncode == 0, p.stderr
        return p.stderr
    main, other = pty.openpty()
    # a terminal 100 columns wide (a new pty has none: tqdm would draw nothing)
    fcntl.ioctl(other, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=other, env=env)
    os.close(other)
    out = b""
    while True:
        try:
            chunk = os.read(main, 4096)
        except OSError:  # the terminal closed with the process
            break
        if not chunk:
            break
        out += chunk
    assert p.wait(timeout=300) == 0
    os.close(main)
    return out.decode(errors="replace")


def test_progress_bar_on_a_terminal_only(tmp_path):
    run = _build_run(tmp_path / "run", 12, 2)
    on_tty = _cli_report(run, True)
    assert "decoding:" in on_tty and "/12 [" in on_tty and "launch/s" in on_tty
    on_pipe = _cli_report(run, False)
    assert "decoding" not in on_pipe and "\r" not in on_pipe
