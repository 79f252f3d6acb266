"""`diff BASE NEW` on run directories built from the real H100 buffers: the same run against
itself, one region made 5% slower in its raw buffer words, regions on one side only, moved
source lines, configs, `report --json` inputs, exit codes and output shapes."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import helpers
import numpy as np
import pytest
from helpers.cli import invoke

from proton_inject.analyze.diff import config_key, diff_sides, load_side, render
from proton_inject.analyze.diff import run_diff as _run_diff
from proton_inject.analyze.diff_stats import FASTER, SAME, SLOWER, boot_medians, verdict
from proton_inject.analyze.report import run_report
from proton_inject.formats.raw import LaunchMeta, load_raw, raw_prefix, save_raw

DATA = helpers.DATA / "h100-triton3.6"


def scale_region(buf: np.ndarray, meta: LaunchMeta, scope: int, factor: float) -> np.ndarray:
    """The buffer with every instance of ``scope`` ``factor`` times as long, in cycles: each
    end record's clock moves to start + round(factor x (end - start)). Only for a region with
    no region inside it (its start is the record just before its end in the warp's order)."""
    words = meta.bytes_per_cta // 4
    rows = np.frombuffer(buf.tobytes(), np.uint32).reshape(-1, words).copy()
    n = len(rows)
    segs = meta.segments
    meta_words = 10 + meta.num_warps
    slots = int(rows[0, 3]) // 8 // len(segs)
    assert (rows[:, 3] == rows[0, 3]).all() and meta.clock_bits == 64
    c = np.arange(n)[:, None]
    j = np.arange(slots)[None, :]
    for i, w in enumerate(segs):
        seg = rows[:, meta_words + i * slots * 2: meta_words + (i + 1) * slots * 2].reshape(n, slots, 2)
        written = (rows[:, 10 + w] // 2).astype(np.int64)[:, None]
        first = np.where(written > slots, written % slots, 0)
        idx = (first + j) % slots  # slot of the j-th oldest kept record
        valid = j < np.minimum(written, slots)
        tag, low = seg[c, idx, 0].astype(np.int64), seg[c, idx, 1].astype(np.int64)
        clock = ((tag & 0x7FF) << 32) | low
        end, sc = (tag >> 31) & 1, (tag >> 23) & 0xFF
        pair = np.zeros_like(valid)
        pair[:, 1:] = (valid[:, 1:] & (end[:, 1:] == 1) & (sc[:, 1:] == scope)
                       & (end[:, :-1] == 0) & (sc[:, :-1] == scope))
        new = clock.copy()
        new[:, 1:] = np.where(pair[:, 1:], clock[:, :-1] + np.round(factor * (clock[:, 1:] - clock[:, :-1])),
                              clock[:, 1:]).astype(np.int64)
        tag = (tag & ~0x7FF) | ((new >> 32) & 0x7FF)
        cc, ii = np.nonzero(pair)
        seg[cc, idx[cc, ii], 0] = tag[cc, ii].astype(np.uint32)
        seg[cc, idx[cc, ii], 1] = (new[cc, ii] & 0xFFFFFFFF).astype(np.uint32)
        rows[:, meta_words + i * slots * 2: meta_words + (i + 1) * slots * 2] = seg.reshape(n, -1)
    return rows.reshape(-1).view(np.uint8)


def write_run(out: Path, kernels=("add", "mm"), edit=None) -> Path:
    """A run directory (out/raw/) of the fixture launches; ``edit(name, buf, meta)`` may
    return another (buf, meta) for a launch."""
    for name in kernels:
        buf, meta = load_raw(DATA / f"profile_scratch_{name}.json")
        if edit is not None:
            buf, meta = edit(name, buf, meta)
        save_raw(raw_prefix(out / "raw", meta), buf, meta)
    return out


def _scaled(kernel: str, factor: float = 1.05):
    def edit(name, buf, meta):
        return (scale_region(buf, meta, 1, factor), meta) if name == kernel else (buf, meta)
    return edit


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    t = tmp_path_factory.mktemp("runs")
    return {
        "base": write_run(t / "base"),
        "again": write_run(t / "again"),
        "mm_slow": write_run(t / "mm_slow", edit=_scaled("mm")),
        "add_slow": write_run(t / "add_slow", kernels=("add",), edit=_scaled("add")),
    }


_SIDES: dict[tuple[str, str], object] = {}


def run_diff(base, new, fmt="text", unit="cycles", **kw):
    """``diff.run_diff`` with each input decoded once per test module (decoding the mm
    fixture takes ~0.6 s; the comparison itself ~0.1 s)."""
    sides = []
    for p in (base, new):
        key = (str(p), unit)
        if key not in _SIDES:
            _SIDES[key] = load_side(p, unit)
        sides.append(_SIDES[key])
    return render(diff_sides(*sides, unit=unit, **kw), fmt)


def _rows(data: dict) -> dict[tuple[str, str], dict]:
    return {(k["kernel"], r["name"]): r for k in data["kernels"] for r in k["regions"]}


def test_scale_region_scales_only_that_region():
    from proton_inject.analyze.decode import decode

    buf, meta = load_raw(DATA / "profile_scratch_add.json")
    a, b = decode(buf, meta), decode(scale_region(buf, meta, 1, 1.05), meta)
    for s in (0, 1):
        ca, cb = a.events.cycles[a.events.scope == s], b.events.cycles[b.events.scope == s]
        want = np.round(1.05 * ca) if s == 1 else ca
        assert np.array_equal(cb, want)


def test_same_run_flags_nothing(runs):
    res = run_diff(runs["base"], runs["again"], fail_above=0.0)
    d = res.data
    assert res.exit_code == 0 and d["failed"] == []
    assert d["counts"][SLOWER] == d["counts"][FASTER] == 0 and d["counts"][SAME] == 3
    for r in _rows(d).values():
        assert r["change_pct"] == 0.0 and r["interval_pct"][0] < 0 < r["interval_pct"][1]
        assert r["verdict"] == SAME and r["moved_from"] is None
    # identity: name, location and nesting
    it = _rows(d)[("mm_kernel", "iter")]
    assert it["loc"] == "kernels.py:28" and it["path"] == ["kernel"] and it["kind"] == "iter"
    assert it["base"]["count"] == it["new"]["count"] == 516096
    assert it["base"]["resampled"] == "1024 CTAs"
    # the same seed gives the same numbers
    assert _run_diff(runs["base"], runs["again"], fail_above=0.0).data == d


def test_one_region_five_percent_slower(runs):
    d = run_diff(runs["base"], runs["mm_slow"]).data
    rows = _rows(d)
    it = rows[("mm_kernel", "iter")]
    assert it["verdict"] == SLOWER and 4.5 < it["change_pct"] < 5.5
    lo, hi = it["interval_pct"]
    assert 3.5 < lo < it["change_pct"] < hi < 6.5
    assert [k for k, r in rows.items() if r["verdict"] != SAME] == [("mm_kernel", "iter")]
    assert d["counts"][SLOWER] == 1 and d["counts"][SAME] == 2
    # and back: faster
    back = _rows(run_diff(runs["mm_slow"], runs["base"]).data)[("mm_kernel", "iter")]
    assert back["verdict"] == FASTER and -5.5 < back["change_pct"] < -4.5


def test_fail_above_exit_codes(runs):
    assert run_diff(runs["base"], runs["mm_slow"], fail_above=3).exit_code == 1
    res = run_diff(runs["base"], runs["mm_slow"], fail_above=10)
    assert res.exit_code == 0 and res.data["counts"][SLOWER] == 1  # slower, under the bar
    assert run_diff(runs["base"], runs["mm_slow"]).exit_code == 0  # no --fail-above: never 1
    r = invoke(["diff", str(runs["base"]), str(runs["mm_slow"]), "--fail-above", "3"], code=1)
    assert "FAILED: 1 region(s) slower than +3% beyond noise: mm_kernel: iter (kernels.py:28) +5.0%" in r.output
    assert run_diff(runs["base"], runs["mm_slow"], fail_above=5).exit_code == 0  # +5.0%, its
    # interval reaches below 5
    assert run_diff(runs["base"], runs["again"], fail_above=0).exit_code == 0
    r = invoke(["diff", str(runs["base"]), str(runs["base"] / "nope")])
    assert r.exit_code == 2 and "no such file or directory" in r.output


def test_a_small_region_slower(runs):
    """add_kernel's iter: a median of 55 cycles, 32,768 instances in 1,024 CTAs."""
    d = run_diff(runs["base"], runs["add_slow"]).data
    rows = _rows(d)
    assert rows[("add_kernel", "iter")]["verdict"] == SLOWER
    assert rows[("add_kernel", "kernel")]["verdict"] == SAME
    assert d["kernels_only_base"] == [{"kernel": "mm_kernel", "config": None, "launches": 1,
                                       "regions": 1}]
    assert d["kernels_only_new"] == []
    assert "kernel only in base: mm_kernel (1 launch, 1 region)" in run_diff(
        runs["base"], runs["add_slow"]).text


def test_each_kernel_on_one_side_only_is_said_once(tmp_path):
    """mm_kernel in two configs on the base side only, add_kernel on the new side only: one
    line each, in text and in Markdown."""
    base = write_run(tmp_path / "b", kernels=("mm",))
    buf, meta = load_raw(DATA / "profile_scratch_mm.json")
    meta = replace(meta, launch=7, config="BLOCK=64")
    save_raw(raw_prefix(base / "raw", meta), buf, meta)
    new = write_run(tmp_path / "n", kernels=("add",))
    d = run_diff(base, new).data
    assert [k["config"] for k in d["kernels_only_base"]] == [None, "BLOCK=64"]
    assert [k["kernel"] for k in d["kernels_only_new"]] == ["add_kernel"]
    want = ["kernel only in base: mm_kernel (1 launch, 1 region)",
            "kernel only in base: mm_kernel [BLOCK=64] (1 launch, 1 region)",
            "kernel only in new: add_kernel (1 launch, 2 regions)"]
    text = run_diff(base, new).text.splitlines()
    assert [ln for ln in text if "kernel only in" in ln] == want
    md = run_diff(base, new, fmt="markdown").text.splitlines()
    assert [ln for ln in md if "kernel only in" in ln] == [
        "- " + w.replace("mm_kernel", "`mm_kernel`").replace("add_kernel", "`add_kernel`") for w in want]


def test_text_markdown_json_shapes(runs):
    text = run_diff(runs["base"], runs["mm_slow"]).text
    lines = text.splitlines()
    assert "median cycles per region instance; 95% interval of the change: 400 bootstrap" in lines[0]
    assert any(ln.startswith("mm_kernel: 1 launch -> 1") for ln in lines)
    head = next(ln for ln in lines if "base median" in ln)
    assert head.split() == ["region", "base", "n", "new", "n", "base", "median", "new", "median",
                            "base", "p95", "new", "p95", "change", "interval", "verdict"]
    row = next(ln for ln in lines if "iter (kernels.py:28)" in ln)
    assert "516,096" in row and "+5.0%" in row and row.rstrip().endswith("slower")
    assert lines[-1] == "regions: 1 slower, 0 faster, 2 within noise, 0 only in base, 0 only in new"

    md = run_diff(runs["base"], runs["mm_slow"], fmt="markdown").text
    assert md.startswith("### proton-inject diff\n")
    assert "#### mm_kernel: 1 launch -> 1" in md
    assert ("| region | base n | new n | base median | new median | base p95 | new p95 | change | "
            "interval | verdict |") in md
    assert "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|" in md
    row = next(ln for ln in md.splitlines() if "iter (kernels.py:28)" in ln)
    assert row.startswith("| &nbsp;&nbsp;iter") and row.endswith("| **slower** |")

    d = json.loads(run_diff(runs["base"], runs["mm_slow"], fmt="json").text)
    assert d["format"] == "proton-inject-diff" and d["version"] == 1 and d["unit"] == "cycles"
    assert set(d) >= {"base", "new", "interval", "min_change_pct", "fail_above_pct", "kernels",
                      "kernels_only_base", "kernels_only_new", "counts", "failed", "notes"}
    k = d["kernels"][1]
    assert set(k) >= {"kernel", "config_base", "config_new", "configs_differ", "launches_base",
                      "launches_new", "regions", "only_base", "only_new"}
    r = k["regions"][0]
    assert set(r) >= {"name", "loc", "path", "kind", "moved_from", "base", "new", "change_pct",
                      "interval_pct", "verdict"}
    assert set(r["base"]) == {"count", "median", "p95", "resampled"}
    cli = invoke(["diff", str(runs["base"]), str(runs["again"]), "--json"])
    assert cli.exit_code == 0 and json.loads(cli.output)["counts"][SAME] == 3
    cli = invoke(["diff", str(runs["base"]), str(runs["again"]), "--markdown",
                  "--json"])
    assert cli.exit_code == 2 and "not both" in cli.output


def test_regions_on_one_side_only_and_moved_lines(tmp_path):
    base = write_run(tmp_path / "b", kernels=("add",))

    def renamed(name, buf, meta):  # the loop region now names its variable: another region
        return buf, replace(meta, scopes={0: "kernel", 1: "iter i"})

    d = run_diff(base, write_run(tmp_path / "n", kernels=("add",), edit=renamed)).data
    [k] = d["kernels"]
    assert [r["name"] for r in k["regions"]] == ["kernel"]
    assert [(r["name"], r["loc"], r["count"]) for r in k["only_base"]] == [("iter", "kernels.py:9", 32768)]
    assert [(r["name"], r["loc"], r["count"]) for r in k["only_new"]] == [("iter i", "kernels.py:9", 32768)]
    assert d["counts"]["only_base"] == d["counts"]["only_new"] == 1
    text = run_diff(base, tmp_path / "n").text
    assert "only in base: iter (kernels.py:9): 32,768 instances, median 55.0" in text
    assert "only in new: iter i (kernels.py:9): 32,768 instances, median 55.0" in text

    def moved(name, buf, meta):  # three lines added above the kernel
        return buf, replace(meta, scope_locs={0: "kernels.py:7", 1: "kernels.py:12"})

    d = run_diff(base, write_run(tmp_path / "m", kernels=("add",), edit=moved)).data
    rows = _rows(d)
    assert rows[("add_kernel", "iter")]["moved_from"] == "kernels.py:9"
    assert rows[("add_kernel", "iter")]["loc"] == "kernels.py:12"
    assert d["counts"][SAME] == 2 and d["counts"]["only_base"] == d["counts"]["only_new"] == 0
    assert "iter (kernels.py:12, was kernels.py:9)" in run_diff(base, tmp_path / "m").text


def test_configs_match_by_their_values(tmp_path):
    def cfg(text):
        def edit(name, buf, meta):
            return buf, replace(meta, config=text)
        return edit

    base = write_run(tmp_path / "b", kernels=("add",), edit=cfg("BLOCK=64, num_warps=4"))
    same = write_run(tmp_path / "s", kernels=("add",), edit=cfg("num_warps=4, BLOCK=64"))
    other = write_run(tmp_path / "o", kernels=("add",), edit=cfg("BLOCK=128, num_warps=4"))
    assert config_key("num_warps=4, BLOCK=64") == config_key("BLOCK=64, num_warps=4")
    assert config_key("[tuning] BLOCK=64") != config_key("BLOCK=64")
    [k] = run_diff(base, same).data["kernels"]
    assert not k["configs_differ"]
    [k] = run_diff(base, other).data["kernels"]  # one config each side: paired, and said
    assert k["configs_differ"]
    assert "configs differ: base [BLOCK=64, num_warps=4], new [BLOCK=128, num_warps=4]" in run_diff(
        base, other).text


def test_report_json_inputs_are_summary_only(runs, tmp_path):
    paths = {}
    for name in ("base", "mm_slow"):
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(run_report([runs[name]], as_json=True).text)
    res = run_diff(paths["base"], paths["mm_slow"], fail_above=3)
    d = res.data
    assert d["interval"]["instances"] is False
    assert any("summary data only" in n and "no noise interval" in n for n in d["notes"])
    it = _rows(d)[("mm_kernel", "iter")]
    assert it["interval_pct"] is None and it["no_interval"] == "summary only"
    assert it["verdict"] == SLOWER and res.exit_code == 1
    assert _rows(d)[("add_kernel", "kernel")]["verdict"] == SAME
    assert "note: summary data only for" in res.text and "no noise interval" in res.text.splitlines()[0]
    # a report on one side only: still no interval; the same numbers as from the raw launches
    mixed = run_diff(runs["base"], paths["mm_slow"]).data
    raw = run_diff(runs["base"], runs["mm_slow"]).data
    assert _rows(mixed).keys() == _rows(raw).keys() and mixed["counts"]["only_new"] == 0
    for key, r in _rows(mixed).items():
        assert r["interval_pct"] is None
        assert r["change_pct"] == pytest.approx(_rows(raw)[key]["change_pct"])
    # ns from the report's own ns columns
    ns = _rows(run_diff(paths["base"], paths["base"], unit="ns").data)[("mm_kernel", "iter")]
    rep = json.loads(paths["base"].read_text())["kernels"][1]["regions"][0]
    assert ns["base"]["median"] == rep["ns"]["median"]


def test_ns_unit(runs):
    d = run_diff(runs["base"], runs["mm_slow"], unit="ns").data
    it = _rows(d)[("mm_kernel", "iter")]
    assert d["unit"] == "ns" and it["verdict"] == SLOWER and 4 < it["change_pct"] < 6
    assert _rows(d)[("add_kernel", "iter")]["verdict"] == SAME


def test_halves_of_one_launch_are_within_noise(tmp_path):
    """Two sets of CTAs of the same launch: real variation between CTAs, no change."""
    def half(k):
        def edit(name, buf, meta):
            rows = np.frombuffer(buf.tobytes(), np.uint32).reshape(1024, -1)
            return rows[k::2].copy().reshape(-1).view(np.uint8), replace(meta, grid=(512, 1, 1))
        return edit

    a = write_run(tmp_path / "a", edit=half(0))
    b = write_run(tmp_path / "b", edit=half(1))
    d = run_diff(a, b).data
    assert d["counts"][SLOWER] == d["counts"][FASTER] == 0, d["kernels"]


def test_boot_medians_vectorized_and_seeded():
    rng = np.random.default_rng(1)
    clusters = np.repeat(np.arange(1000), 50)
    values = rng.normal(1000, 30, len(clusters)) + rng.normal(0, 10, 1000)[clusters]
    t = time.perf_counter()
    m = boot_medians(values, clusters, 1000, 400, np.random.default_rng(0))
    assert time.perf_counter() - t < 5  # ~0.2 s: vectorized, not a loop over resamples
    assert np.array_equal(m, boot_medians(values, clusters, 1000, 400, np.random.default_rng(0)))
    # the spread of the bootstrap medians follows the clusters' (about 10/sqrt(1000) plus the
    # within-cluster part), not 50,000 independent instances' (about 30/sqrt(50,000) x 1.25)
    assert 0.3 < np.std(m) < 0.6 and abs(np.median(m) - np.median(values)) < 0.2
    # one cluster: nothing varies
    one = boot_medians(values[:50], np.zeros(50, np.int64), 1, 100, np.random.default_rng(0))
    assert np.all(one == one[0])


def test_verdict_rule():
    assert verdict(5.0, [3.0, 7.0], 1.0) == SLOWER
    assert verdict(5.0, [0.5, 9.0], 1.0) == SAME  # interval reaches below the threshold
    assert verdict(-5.0, [-7.0, -3.0], 1.0) == FASTER
    assert verdict(0.5, None, 1.0) == SAME and verdict(2.0, None, 1.0) == SLOWER
    assert verdict(None, None, 1.0) == "n/a"


def test_many_launches_resample_launches(tmp_path):
    """With 8 launches of a kernel or more, whole launches are redrawn (their differences are
    noise too); here 8 copies of the add launch, so the interval of a copy against itself is
    as narrow as it gets, and a 5% slower loop in every launch is flagged."""
    def write(out, factor):
        buf, meta = load_raw(DATA / "profile_scratch_add.json")
        if factor != 1:
            buf = scale_region(buf, meta, 1, factor)
        for n in range(8):
            m = replace(meta, launch=n)
            save_raw(raw_prefix(out / "raw", m), buf, m)
        return out

    base, slow = write(tmp_path / "b", 1), write(tmp_path / "s", 1.05)
    d = run_diff(base, base).data
    it = _rows(d)[("add_kernel", "iter")]
    assert it["base"]["resampled"] == "8 launches" and it["base"]["count"] == 8 * 32768
    assert d["counts"][SAME] == 2 and it["interval_pct"] == [0.0, 0.0]
    d = run_diff(base, slow).data
    assert _rows(d)[("add_kernel", "iter")]["verdict"] == SLOWER
    assert _rows(d)[("add_kernel", "kernel")]["verdict"] == SAME


def test_bad_inputs_are_one_line_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "proton-inject-report", "kernels": [{"kernel": "x"}]}')
    r = invoke(["diff", str(bad), str(DATA)])
    assert r.exit_code == 2 and "bad.json: a kernel or region of this report lacks 'regions'" in r.output
    bad.write_text('{"format": "proton-inject-report", "kernels": 3}')
    r = invoke(["diff", str(bad), str(bad)])
    assert r.exit_code == 2 and "not a `report --json` file" in r.output
    r = invoke(["diff", str(DATA), str(DATA), "--resamples", "5"])
    assert r.exit_code == 2 and "--resamples 5: give at least 20" in r.output
    r = invoke(["diff", str(DATA), str(DATA), "--fail-above", "-1"])
    assert r.exit_code == 2 and "--fail-above -1.0: give a percentage >= 0" in r.output
