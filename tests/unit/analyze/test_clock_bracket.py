"""The clock bracket (issue 10 part 2): its kernel compiles for cuda:90 down to cubin, its rows
become a rate, and decode uses that rate on the real H100 buffers when their own timer reads
cannot pin the clock, saying which clock each launch used and what it is worth."""

from __future__ import annotations

import dataclasses
import warnings

import helpers
import numpy as np
import pytest

from proton_inject.analyze import bracket_rate
from proton_inject.analyze.decode import decode
from proton_inject.analyze.issues import DecodeWarning
from proton_inject.analyze.report import run_report
from proton_inject.collect import bracket
from proton_inject.errors import UserError
from proton_inject.formats import clock_bracket
from proton_inject.formats.diagnostics import summarize
from proton_inject.formats.raw import load_raw, save_raw

DATA = helpers.DATA / "h100-triton3.6"


def rows(mhz: float, ctas: int = 132, seed: int = 0, t_start: int = 10**12) -> np.ndarray:
    """What the bracket kernel stores at ``mhz``: each CTA reads (timer, clock) at the first
    read after a 32 ns tick, a loop delay of 0-40 ns late, then again at the first tick
    ``SPIN_NS`` later; SMs have their own counter origins and start up to 2 us apart."""
    rng = np.random.default_rng(seed)
    edge0 = (t_start + rng.integers(0, 2000, ctas)) // 32 * 32 + 32
    edge1 = edge0 + -(-bracket.SPIN_NS // 32) * 32
    origin = rng.integers(10**9, 10**12, ctas)
    rel0, rel1 = (edge0 - t_start).astype(np.float64), (edge1 - t_start).astype(np.float64)
    c0 = origin + np.round((rel0 + rng.uniform(0, 40, ctas)) * mhz / 1000).astype(np.int64)
    c1 = origin + np.round((rel1 + rng.uniform(0, 40, ctas)) * mhz / 1000).astype(np.int64)
    return np.stack([np.arange(ctas), c0, edge0, c1, edge1], 1).astype(np.int64)


def side(mhz: float, t0: int, seed: int = 0) -> dict:
    return clock_bracket.summarize(rows(mhz, seed=seed, t_start=t0))


def with_bracket(meta, before: float, after: float, base: int, end: int):
    """The launch's metadata with a bracket that ran 3 us before and 2 us after it."""
    b = {"before": side(before, base - 3000 - 12_000, 1), "after": side(after, end + 2000, 2)}
    return dataclasses.replace(meta, clock_bracket=b)


def _decode(buf, meta, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DecodeWarning)
        return decode(buf, meta, **kw)


def test_bracket_kernel_compiles_for_cuda90_uninstrumented(tmp_path, monkeypatch):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from proton_inject.collect._clock_kernel import clock_bracket

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    src = ASTSource(clock_bracket, signature={"out_ptr": "*i64", "spin_ns": "i64"})
    ck = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 1})
    assert ck.asm["cubin"][:4] == b"\x7fELF"
    ptx = ck.asm["ptx"]
    # the timer and the clock are read together, at three places (start, edge, end loops)
    body = ptx[ptx.index(".entry"):]
    assert body.count("mov.u64 %rd") >= 6 and body.count("%globaltimer;\n\tmov.u64 %rd") >= 3
    assert "%smid" in body
    assert ck.metadata.num_warps == 1 and not ck.metadata.profile_scratch_size


def test_summarize_recovers_the_rate_through_32ns_ticks():
    got = clock_bracket.summarize(rows(1544.0))
    assert abs(got["mhz"] - 1544.0) / 1544.0 < 2e-4, got  # 132 SMs beat the 32 ns tick
    assert 0 < got["sem_mhz"] < 1.0 and got["ctas"] == 132 and got["sms"] == 132
    assert got["spin_ns"] == 10_016
    assert clock_bracket.summarize(np.zeros((132, 5), np.int64)) is None  # never ran


def test_rate_is_the_mean_of_the_sides_with_their_difference_as_uncertainty():
    """The mean of the sides, +- their whole difference (a launch between them may run below
    both), two standard errors and what brackets were seen to miss on an H100."""
    r = bracket_rate.rate({"before": side(1500.0, 0), "after": side(1530.0, 10**6)})
    assert abs(r.mhz - 1515.0) < 0.5
    floor = bracket_rate.SYSTEMATIC_PCT
    assert 1.98 + floor < r.uncertainty_pct < 2.1 + floor and abs(r.sides_differ_pct - 1.98) < 0.05
    one = bracket_rate.rate({"before": side(1500.0, 0), "after": None})
    assert abs(one.mhz - 1500.0) < 0.5 and floor < one.uncertainty_pct < floor + 0.1
    assert bracket_rate.rate({"missing": "CUDA-graph replay"}) is None and bracket_rate.rate(None) is None


def _one_cta_per_sm():
    """The matmul fixture's last CTA on each SM: 132 CTAs, one per SM, like a short launch
    whose CTAs all start together - its timer reads cannot pin the clock."""
    buf, meta = load_raw(DATA / "profile_scratch_mm.json")
    S = meta.bytes_per_cta
    sm = np.frombuffer(buf, np.uint32).reshape(meta.num_ctas, S // 4)[:, 2]
    last = sorted({int(s): i for i, s in enumerate(sm)}.values())
    sub = np.concatenate([buf[i * S:(i + 1) * S] for i in last])
    return sub, dataclasses.replace(meta, grid=(1024, 1, 1))


def test_short_launch_uses_the_bracket_and_says_so():
    buf, meta = _one_cta_per_sm()
    old = _decode(buf, meta)
    assert meta.clock_bracket is None  # an older run's metadata still decodes
    assert old.clock.source == "assumed-1GHz"
    assert any("no clock bracket: older run" in i.why for i in old.issues)
    d0 = _decode(buf, meta)
    base, end = d0.base_ns, d0.base_ns + int(d0.ctas.postfinal_ns.max())
    d = _decode(buf, with_bracket(meta, 1544.0, 1544.0, base, end))
    assert d.clock.source == "clock-bracket"
    assert "too few timer anchors" in d.clock.reason
    assert not [i for i in d.issues if "clock" in i.cause or "fit" in i.cause]
    s = d.clock.summary()
    assert abs(s["mhz_median"] - 1544.0) < 0.5 and 0 < s["uncertainty_pct"] < 0.2
    assert s["bracket"]["before"]["gap_us"] == 3.0 and s["bracket"]["after"]["gap_us"] == 2.0
    # ns are the cycles at the measured rate
    e = d.events
    assert np.allclose(e.dur_ns, e.cycles * 1000.0 / s["mhz_median"], rtol=5e-4)
    # --clock-mhz still wins
    assert _decode(buf, with_bracket(meta, 1544.0, 1544.0, base, end), clock_mhz=1700).clock.source == "--clock-mhz"


def test_a_fit_that_follows_the_clock_is_kept_and_agrees_with_the_bracket():
    """The matmul fixture fits 1,544 MHz (1,441-1,580 through the launch): a bracket saying
    1,544 is shown beside it, and the fit, which sees the dip, converts."""
    buf, meta = load_raw(DATA / "profile_scratch_mm.json")
    fit = _decode(buf, meta)
    end = fit.base_ns + int(fit.ctas.postfinal_ns.max())
    d = _decode(buf, with_bracket(meta, 1544.0, 1544.0, fit.base_ns, end))
    s = d.clock.summary()
    assert s["source"] == "globaltimer-fit" and s["uncertainty_pct"] < 0.1
    assert np.array_equal(d.events.dur_ns, fit.events.dur_ns)
    br = s["bracket"]
    assert abs(br["mhz"] - s["mhz_median"]) / br["mhz"] * 100 < br["uncertainty_pct"] + s["uncertainty_pct"]
    # over the whole launch, the bracket's ns would be within 1.5% of the fit's
    e = fit.events
    ratio = (e.cycles.sum() / (br["mhz"] / 1000)) / e.dur_ns.sum()
    assert 0.985 < ratio < 1.0


def test_a_one_rate_fit_with_a_loose_bound_yields_to_the_bracket():
    buf, meta = load_raw(DATA / "profile_scratch_add.json")
    fit = _decode(buf, meta)
    assert fit.clock.source == "globaltimer-fit" and fit.clock.uncertainty_pct > 3  # R^2 0.967
    end = fit.base_ns + int(fit.ctas.postfinal_ns.max())
    d = _decode(buf, with_bracket(meta, 1980.0, 1980.0, fit.base_ns, end))
    assert d.clock.source == "clock-bracket" and "bias bound" in d.clock.reason
    # the fit's ns were within its stated bound of the bracket's
    k = d.events.scope == 0
    rel = np.median(fit.events.dur_ns[k]) / np.median(d.events.dur_ns[k]) - 1
    assert abs(rel) * 100 < fit.clock.uncertainty_pct


def test_sides_that_differ_are_said_once_per_kernel():
    buf, meta = _one_cta_per_sm()
    d0 = _decode(buf, meta)
    base, end = d0.base_ns, d0.base_ns + int(d0.ctas.postfinal_ns.max())
    d = _decode(buf, with_bracket(meta, 1500.0, 1560.0, base, end))
    assert d.clock.source == "clock-bracket" and d.clock.uncertainty_pct > 1.9
    [issue] = [i for i in d.issues if i.cause == "clock changed across the launch"]
    assert "1500 MHz" in issue.detail and "1560 MHz" in issue.detail and "+3.9%" in issue.detail
    lines = summarize({"mm_kernel": 2}, [("mm_kernel", issue), ("mm_kernel", issue)])
    assert lines == ["mm_kernel: clock changed across the launch on 2 of 2 launches (before and "
                     "after differ by more than 1%); cycles converted at the mean of the two; ns "
                     "carry their whole difference as uncertainty"]


def test_report_names_the_clock_source_and_the_bracket_survives_save(tmp_path):
    buf, meta = _one_cta_per_sm()
    d0 = _decode(buf, meta)
    end = d0.base_ns + int(d0.ctas.postfinal_ns.max())
    m = with_bracket(meta, 1544.0, 1544.0, d0.base_ns, end)
    save_raw(tmp_path / "raw" / "00001-mm_kernel", buf, m)
    _, back = load_raw(tmp_path / "raw" / "00001-mm_kernel.json")
    assert back.clock_bracket == m.clock_bracket
    res = run_report([tmp_path / "raw"], verbose=True)
    assert ("clock-bracket 1,544 MHz on 1 of 1 launch (measured on every SM right before and "
            "right after the launch: a measurement; ns within +-0.1") in res.text
    assert not [w for w in res.warnings if "clock" in w]


@pytest.mark.parametrize("bad", [
    {"before": {"mhz": -1, "sem_mhz": 0, "ctas": 1, "sms": 1, "spin_ns": 1, "t0": 0, "t1": 1}},
    {"missing": 3}, {"during": None}, "fast"])
def test_a_damaged_bracket_is_named(tmp_path, bad):
    import json

    buf, meta = load_raw(DATA / "profile_scratch_add.json")
    _, j = save_raw(tmp_path / "x", buf, meta)
    d = json.loads(j.read_text())
    d["clock_bracket"] = bad
    j.write_text(json.dumps(d))
    with pytest.raises(UserError, match="clock_bracket"):
        load_raw(j)


def _demo_like(x, late_ns: float = 120.0, tick: int = 32):
    """The add fixture's CTAs with timer reads placed as in the short vector-add demo: warp 0
    reads init ``late_ns`` after warps 1-3 recorded (its header stores stalled) and right
    before its own first record; pre-final right after the last record; both floored to the
    32 ns tick."""
    ids, k = np.unique(x.cta, return_inverse=True)
    first0 = np.full(len(ids), np.inf)
    last = np.full(len(ids), -np.inf)
    w0 = x.warp == 0
    np.minimum.at(first0, k[w0], x.start_ns[w0])
    np.maximum.at(last, k, x.start_ns + x.dur_ns)
    start = x.start_ns.copy()
    other = x.warp != 0
    start[other] = np.minimum(start[other], first0[k[other]] - late_ns)  # warps 1-3 ahead
    init = np.floor((first0 - 5) / tick) * tick
    pre = np.floor((last + 20) / tick) * tick  # up to 11 ns before the last record
    at = np.searchsorted(ids, x.cta_ids)
    return dataclasses.replace(x, start_ns=start, dur_ns=x.start_ns + x.dur_ns - start,
                               cta_init_ns=init[at], cta_prefinal_ns=pre[at])


def test_cta_lifetime_note_is_tick_aware_and_does_not_blame_a_measured_clock():
    """The demo's note (252 of 3,072 CTAs 'span longer than the CTA lived, up to 1.41x: the
    clock is too slow', on a bracket-measured clock) came from warps that record before warp
    0 reads the init time, and from the 32 ns tick on a 1 us CTA."""
    from proton_inject.analyze.summary import LaunchData, kernel_summary
    from proton_inject.analyze.text import OVERLONG_SHARE, clock_notes

    buf, meta = load_raw(DATA / "profile_scratch_add.json")
    fit = _decode(buf, meta)
    end = fit.base_ns + int(fit.ctas.postfinal_ns.max())
    d = _decode(buf, with_bracket(meta, 1980.0, 1980.0, fit.base_ns, end), record_cost=35.0)
    assert d.clock.source == "clock-bracket" and d.clock.tick_ns == 32
    x = _demo_like(LaunchData.from_decoded(d))
    # what the old check (all warps' records against init..pre-final + one tick) would say
    ids, k = np.unique(x.cta, return_inverse=True)
    lo = np.full(len(ids), np.inf)
    hi = np.full(len(ids), -np.inf)
    np.minimum.at(lo, k, x.start_ns)
    np.maximum.at(hi, k, x.start_ns + x.dur_ns)
    at = np.searchsorted(x.cta_ids, ids)
    life = x.cta_prefinal_ns[at] - x.cta_init_ns[at]
    assert np.mean(hi - lo > 1.02 * (life + 32)) > 0.5
    ks = kernel_summary([x])
    assert ks["ctas_overlong"] == {"count": 0, "of": 1024, "on_measured_clock": 0, "max_ratio": None}
    assert not [n for n in clock_notes(ks) if n.startswith("note:")]
    # a clock 10% too slow (given, not measured) is still called out, and blamed
    slow = dataclasses.replace(x, clock={**x.clock, "source": "--clock-mhz"},
                               start_ns=x.start_ns * 1.1, dur_ns=x.dur_ns * 1.1)
    ks = kernel_summary([slow])
    assert ks["ctas_overlong"]["count"] > OVERLONG_SHARE * 1024
    [note] = [n for n in clock_notes(ks) if n.startswith("note:")]
    assert "the clock is too slow for them" in note
    # the same stretch on a measured clock: said, but the clock is not blamed
    ks = kernel_summary([dataclasses.replace(slow, clock=x.clock)])
    assert ks["ctas_overlong"]["on_measured_clock"] == ks["ctas_overlong"]["count"] > 0
    [note] = [n for n in clock_notes(ks) if n.startswith("note:")]
    assert "on a measured clock: their timer reads do not bound their records" in note
    assert "too slow" not in note


def test_a_graph_replay_takes_the_rate_the_devices_other_brackets_measured(tmp_path):
    """Issue 27 item 6: a CUDA-graph replay has no bracket of its own (a bracket kernel would
    join the program's graph); where its timer reads cannot fit the clock, it takes the median
    rate the brackets of the run's other launches on the same device measured, and says so."""
    from proton_inject.analyze.report import iter_decoded

    buf, meta = _one_cta_per_sm()
    d0 = _decode(buf, meta)
    end = d0.base_ns + int(d0.ctas.postfinal_ns.max())
    bracketed = dataclasses.replace(with_bracket(meta, 1544.0, 1544.0, d0.base_ns, end), launch=1)
    replay = dataclasses.replace(meta, launch=2, clock_bracket={
        "missing": "CUDA-graph replay (a bracket kernel cannot be added to the program's graph)"})
    save_raw(tmp_path / "raw" / "00001-mm_kernel", buf, bracketed)
    save_raw(tmp_path / "raw" / "00002-mm_kernel", buf, replay)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DecodeWarning)
        alone = list(iter_decoded([tmp_path / "raw" / "00002-mm_kernel.json"]))[0]
        assert alone.clock.source != "device-bracket"  # nothing measured on the device: as before
        first, second = iter_decoded(sorted((tmp_path / "raw").glob("*.json")))
    assert first.clock.source == "clock-bracket"
    assert second.clock.source == "device-bracket"
    assert abs(second.clock.summary()["mhz_median"] - 1544.0) < 0.5
    assert any("other launch" in i.detail and "1544 MHz" in i.detail for i in second.issues)
    res = run_report([tmp_path / "raw"])
    assert "device-bracket 1,544 MHz on 1 of 2 launches" in res.text, res.text


def test_a_bracket_rides_after_the_records_on_a_128_byte_boundary():
    from proton_inject.formats.clock_bracket import WORDS, after_records

    assert after_records(100, 0) == (128, 100)  # no bracket: the records alone
    assert after_records(100, 132) == (128, 128 + 2 * 132 * WORDS * 8)
    assert after_records(256, 1) == (256, 256 + 2 * WORDS * 8)
