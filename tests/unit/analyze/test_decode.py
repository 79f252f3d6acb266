"""Decoder tests on real H100 buffers and on synthetic buffers from tests/helpers/profbuf.py."""

from __future__ import annotations

import gzip
import json
import warnings

import helpers
import numpy as np
import pytest
import torch
from helpers import profbuf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proton_inject.analyze.decode import decode, scopes_from_ttgir
from proton_inject.analyze.issues import DecodeWarning
from proton_inject.errors import UserError
from proton_inject.formats.raw import LaunchMeta, find_raw, load_raw, raw_prefix, save_raw

DATA = helpers.DATA / "h100-triton3.6"
SHORT = helpers.DATA / "h100-shortlaunch"
H100_SM_CLOCK_MHZ = 1980.0  # get_device_properties()["sm_clock_rate"] on the GPU that made SHORT


@pytest.fixture(scope="module")
def add():
    buf, meta = load_raw(DATA / "profile_scratch_add.json")
    return buf, meta, decode(buf, meta)


@pytest.fixture(scope="module")
def mm():
    buf, meta = load_raw(DATA / "profile_scratch_mm.json")
    return buf, meta, decode(buf, meta)


# --- the real buffers, against their README ------------------------------------------------


def test_add_fixture_shape(add):
    _, meta, d = add
    assert len(d.ctas.cta) == 1024 and sorted(d.ctas.cta.tolist()) == list(range(1024))
    assert d.ctas.sm.max() < 132  # an H100 SXM has 132 SMs
    assert d.drops.records_written == 1024 * 4 * 18  # 18 records per warp
    assert d.drops.dropped == 0 and d.drops.warps_with_drops == 0
    assert d.unmatched_starts == d.unmatched_ends == 0 and d.warnings == []
    e = d.events
    per_scope = {d.scope_name(s): int((e.scope == s).sum()) for s in np.unique(e.scope)}
    assert per_scope == {"kernel": 4096, "iter": 32768}
    # every (CTA, warp) has one kernel region and 8 loop iterations
    key = e.cta * 4 + e.warp
    assert np.bincount(key, minlength=4096).tolist() == [9] * 4096
    assert set(np.unique(e.warp).tolist()) == {0, 1, 2, 3}


def test_add_iterations_nest_inside_kernel(add):
    e = add[2].events
    k = e.scope == 0
    outer = {(c, w): (s, t) for c, w, s, t in zip(e.cta[k], e.warp[k], e.start[k], e.end[k],
                                                   strict=True)}
    i = ~k
    lo = np.array([outer[(c, w)][0] for c, w in zip(e.cta[i], e.warp[i], strict=True)])
    hi = np.array([outer[(c, w)][1] for c, w in zip(e.cta[i], e.warp[i], strict=True)])
    assert (e.start[i] >= lo).all() and (e.end[i] <= hi).all()
    assert (e.end >= e.start).all()


def test_mm_fixture_wrapped(mm):
    _, meta, d = mm
    dr = d.drops
    assert dr.slots_per_warp == 128 and dr.max_records_per_warp == 130
    assert dr.records_written == 1024 * 8 * 130 and dr.records_kept == 1024 * 8 * 128
    assert dr.dropped == 2 * 8192 and dr.warps_with_drops == 8192 and dr.ctas_with_drops == 1024
    assert dr.needed_buffer_size == 16384  # 256 slots of 8 bytes x 8 warps
    e = d.events
    # kept: end of iteration 0, iterations 1..63, kernel end: 63 whole regions per warp
    assert set(np.unique(e.scope).tolist()) == {1}
    assert len(e) == 1024 * 8 * 63
    assert d.unmatched_ends == 2 * 8192 and d.unmatched_starts == 0
    assert d.warnings == []  # losses at the window edge are expected, not warnings


def test_clock_fit_on_real_buffers(add, mm):
    for d in (add[2], mm[2]):
        c = d.clock.summary()
        assert c["source"] == "globaltimer-fit"
        assert 1300 < c["mhz_min"] <= c["mhz_max"] < 2100  # H100 SXM boosts up to 1980 MHz
        assert c["residual_ns"] < 300
    # regions fall inside their CTA's timer reads, to within the fit's noise
    for d, tol in ((add[2], 100), (mm[2], 600)):
        e, c = d.events, d.ctas
        order = np.argsort(c.cta)
        k = order[np.searchsorted(c.cta[order], e.cta)]
        assert np.mean(e.start_ns >= c.init_ns[k] - tol) > 0.99
        assert np.mean(e.end_ns <= c.prefinal_ns[k] + tol) > 0.99
    # the matmul's clock changed during the launch (DVFS): several pieces, different rates
    assert len(mm[2].clock.knot_ns) > 2
    assert np.ptp(mm[2].clock.segment_mhz) > 50
    # the checks that reject short launches pass these: 32 ns timer, anchors spread enough
    for d, spread in ((add[2], 300), (mm[2], 60_000)):
        c = d.clock.summary()
        assert c["timer_tick_ns"] == 32 and c["reason"] is None
        assert c["anchor_spread_ns"] > spread and c["fit_r2"] > 0.95


def _short(n: int, sm_clock_mhz: float | None = None):
    buf, meta = load_raw(SHORT / f"{n:05d}-matmul_kernel.json")
    meta.sm_clock_mhz = sm_clock_mhz
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DecodeWarning)
        d = decode(buf, meta)
    return d, [str(w.message) for w in caught]


def _inside_lifetime(d) -> float:
    """Share of region instances that end within their CTA's init..pre-final (+ one tick)."""
    e, c = d.events, d.ctas
    order = np.argsort(c.cta)
    k = order[np.searchsorted(c.cta[order], e.cta)]
    life = (c.prefinal_ns - c.init_ns)[k] + 32
    return float(np.mean((e.end_ns - e.start_ns <= life) & (e.start_ns >= c.init_ns[k] - 32)
                         & (e.end_ns <= c.prefinal_ns[k] + 32)))


def test_short_launch_one_cta_per_sm_cannot_fit_the_clock():
    """96 CTAs on 96 SMs, ~7 us: the anchors of an SM are 1.5 timer ticks apart (RMS)."""
    d, warned = _short(0, H100_SM_CLOCK_MHZ)
    c = d.clock.summary()
    assert c["source"] == "device-clock" and c["mhz_median"] == H100_SM_CLOCK_MHZ
    assert c["timer_tick_ns"] == 32 and c["anchor_spread_ns"] < 4 * 32 and c["fit_r2"] < 0.9
    assert "ticks of 32 ns" in c["reason"] and "past their lifetime" in c["reason"]
    assert len(warned) == 1 and "fit rejected" in warned[0] and "device-clock (1980 MHz)" in warned[0]
    # ns = cycles at the max clock, so every region fits inside its CTA's timer reads
    e = d.events
    assert e.dur_ns == pytest.approx(e.cycles / 1.98, rel=1e-9)
    assert _inside_lifetime(d) > 0.999


def test_short_launch_from_an_old_file_uses_the_within_cta_bound():
    d, warned = _short(0)  # the file predates sm_clock_mhz: it loads, the field is None
    assert d.meta.sm_clock_mhz is None
    c = d.clock.summary()
    assert c["source"] == "within-cta" and len(warned) == 1
    # launches of other bounds share the report's line: the bound is in the detail, not in "then"
    (issue,) = d.issues
    assert f"({c['mhz_median']:.0f} MHz)" in issue.detail and "MHz" not in issue.then
    assert issue.then.startswith("cycles converted at a per-launch bound (slowest clock")
    # the slowest clock that puts 95% of CTAs' records inside their lifetime: above the
    # rejected fit (1,275 MHz), below the max clock
    assert 1650 < c["mhz_median"] < H100_SM_CLOCK_MHZ
    assert _inside_lifetime(d) > 0.9


def test_short_launch_with_several_ctas_per_sm_keeps_the_fit():
    """384 CTAs, up to 3 resident per SM that end up to 1.5 us apart: enough to fit."""
    d, warned = _short(1, H100_SM_CLOCK_MHZ)
    c = d.clock.summary()
    assert c["source"] == "globaltimer-fit" and warned == []
    assert 1700 < c["mhz_median"] < H100_SM_CLOCK_MHZ and c["fit_r2"] > 0.98
    assert c["anchor_spread_ns"] > 300
    assert _inside_lifetime(d) > 0.99


def test_fit_faster_than_the_device_clock_is_rejected():
    d, warned = _short(1, 1500.0)  # pretend the device tops out at 1500 MHz
    assert d.clock.source == "device-clock" and "outside 200-1575 MHz" in d.clock.reason
    assert len(warned) == 1


def test_events_agree_with_protons_own_trace_of_the_same_kernel(add):
    """Proton's runtime traced the same instrumented add_kernel in another run."""
    doc = json.loads(gzip.decompress((DATA / "proton_trace_add_other_run.json.gz").read_bytes()))
    ours = add[2]
    for name in ("kernel", "iter"):
        theirs = np.array([ev["dur"] for ev in doc["traceEvents"] if ev["name"] == name])
        s = [k for k, v in ours.meta.scopes.items() if v == name][0]
        mine = ours.events.cycles[ours.events.scope == s]
        assert len(theirs) == len(mine)
        if name == "iter":  # Proton writes cycles / 1000 as "us" (it assumes 1 GHz)
            assert abs(np.median(theirs) * 1000 - np.median(mine)) <= 0.1 * np.median(mine)


def test_scope_ids_follow_protons_analysis(tmp_path):
    names, parents = scopes_from_ttgir(DATA / "add_kernel.ttgir")
    assert names == {0: "kernel", 1: "iter"} and parents == {1: 0}
    # A name used for two pairs gets two ids, numbered by pair in walk order: NOT one id
    # per name in order of first appearance.
    text = (DATA / "add_kernel.ttgir").read_text().replace(
        '    proton.record start "kernel"\n',
        '    proton.record start "x"\n    proton.record end "x"\n'
        '    proton.record start "kernel"\n    proton.record start "x"\n'
        '    proton.record end "x"\n', 1)
    p = tmp_path / "k.ttgir"
    p.write_text(text)
    names, parents = scopes_from_ttgir(p)
    assert names == {0: "x", 1: "kernel", 2: "x", 3: "iter"}
    assert parents == {2: 1, 3: 1}


# --- raw files -------------------------------------------------------------------------------


def test_save_and_load_raw_round_trip(tmp_path, add):
    buf, meta, _ = add
    meta2 = LaunchMeta(**{**meta.__dict__, "launch": 7, "config": "BLOCK=1024",
                          "sampled_warps": None, "sm_clock_mhz": 1980.0})
    for i, b in enumerate((bytes(buf), np.asarray(buf), torch.from_numpy(np.array(buf)))):
        prefix = raw_prefix(tmp_path / f"r{i}", meta2)
        bin_path, json_path = save_raw(prefix, b, meta2)
        assert bin_path.name == "00007-add_kernel.bin"
        got, m = load_raw(json_path)
        assert got.tobytes() == bytes(buf)
        assert m == meta2
        assert find_raw(tmp_path / f"r{i}") == [json_path]


def test_find_raw_lists_launches_by_name_and_buffer_and_sniffs_the_rest(tmp_path, add):
    """A file named as a launch with its buffer beside it is listed without being read (a
    damaged one is left out later, with a note); any other .json only when its head says it
    is raw metadata; in launch order either way."""
    buf, meta, _ = add
    _, j2 = save_raw(tmp_path / "00002-add_kernel", bytes(buf), meta)
    _, j10 = save_raw(tmp_path / "00010-add_kernel", bytes(buf), meta)
    (tmp_path / "00003-damaged.json").write_text("not json")
    (tmp_path / "00003-damaged.bin").write_bytes(b"")
    (tmp_path / "00004-trace.json").write_text('{"traceEvents": []}')  # named, no buffer: sniffed
    (tmp_path / "other.json").write_text('{"traceEvents": []}')
    _, renamed = save_raw(tmp_path / "mine", bytes(buf), meta)  # raw, not named as a launch
    assert find_raw(tmp_path) == [renamed, j2, tmp_path / "00003-damaged.json", j10]


def test_load_raw_errors(tmp_path):
    with pytest.raises(UserError, match="metadata not found"):
        load_raw(tmp_path / "nothing.bin")
    (tmp_path / "x.json").write_text('{"format": "proton-inject-raw", "kernel": "k"}')
    with pytest.raises(UserError, match="x.json: missing field 'grid'"):
        load_raw(tmp_path / "x.json")
    d = json.loads((DATA / "profile_scratch_add.json").read_text())
    with pytest.raises(UserError, match="buffer_type = 'texture' must be 'shared', 'global' or 'direct'"):
        LaunchMeta.from_dict({**d, "buffer_type": "texture"})


def test_buffer_type_round_trips_and_old_files_mean_shared(tmp_path, add):
    buf, meta, dec = add
    assert "buffer_type" not in json.loads((DATA / "profile_scratch_add.json").read_text())
    assert meta.buffer_type == "shared"  # the fixtures predate the option
    glob = LaunchMeta(**{**meta.__dict__, "buffer_type": "global"})
    _, json_path = save_raw(tmp_path / "g", buf, glob)
    assert json.loads(json_path.read_text())["buffer_type"] == "global"
    got, m = load_raw(json_path)
    assert m == glob
    # Same scratch layout for both types: the same bytes decode to the same events.
    again = decode(got, m)
    assert np.array_equal(again.events.cycles, dec.events.cycles)
    assert again.drops == dec.drops


# --- damaged input ---------------------------------------------------------------------------


def test_all_zero_buffer_says_binary_not_used(add):
    _, meta, _ = add
    with pytest.raises(UserError, match="instrumented binary was not used"):
        decode(np.zeros(1024 * 8320, np.uint8), meta)


def test_truncated_buffer_decodes_whole_ctas(add):
    buf, meta, _ = add
    with pytest.warns(DecodeWarning) as caught:
        d = decode(buf[: 100 * 8320 + 3000], meta)
    msgs = " ".join(str(w.message) for w in caught)
    assert "truncated" in msgs and "holds 100 CTA blocks, the grid has 1024" in msgs
    assert len(d.ctas.cta) == 100
    assert len(d.events) == 100 * 36


def test_bad_preamble_skips_that_cta(add):
    buf, meta, _ = add
    b = np.array(buf)
    b[5 * 8320: 5 * 8320 + 4] = 0x11
    with pytest.warns(DecodeWarning, match="bad preamble"):
        d = decode(b, meta)
    assert len(d.ctas.cta) == 1023 and 5 not in d.ctas.cta.tolist()
    assert len(d.events) == 1023 * 36


def test_granularity_other_than_warp_is_refused(add):
    _, meta, _ = add
    with pytest.raises(UserError, match="granularity"):
        decode(add[0], LaunchMeta(**{**meta.__dict__, "granularity": "warp_group"}))


# --- synthetic buffers -----------------------------------------------------------------------


def _two_sm_launch(rate_ghz=1.5, clock_bits=64, base_clock=(5_000_000_000, 9_000_000_000),
                   slots=64):
    """4 CTAs, 2 per SM one after the other, 2 warps, known clock: (cycles, truth ns)."""
    ctas, truth = [], []
    t0 = 1_700_000_000_000_000_000
    for i in range(4):
        sm = i % 2
        start_ns = (i // 2) * 40_000 + 100 * sm
        c = profbuf.Cta(pid=i, sm=sm, init=t0 + start_ns, pre=0, post=0)
        for w in range(2):
            c0 = base_clock[sm] + int(round((start_ns + 50) * rate_ghz))
            recs = profbuf.loop_records(c0, iters=10, body=1500 + 100 * w, gap=300)
            c.warps[w] = recs
        last = max(r[2] for recs in c.warps.values() for r in recs)
        end_ns = (last - base_clock[sm]) / rate_ghz
        c.pre = t0 + int(round(end_ns + 50))
        c.post = c.pre + 200
        ctas.append(c)
        truth.append((sm, base_clock[sm]))
    return profbuf.write(ctas, num_warps=2, slots=slots, clock_bits=clock_bits), t0


def test_synthetic_clock_fit_recovers_rate_and_time():
    (buf, meta), t0 = _two_sm_launch(rate_ghz=1.5)
    d = decode(buf, meta)
    assert d.clock.source == "globaltimer-fit"
    assert np.allclose(d.clock.segment_mhz, 1500.0, rtol=2e-3)
    e = d.events
    assert e.dur_ns == pytest.approx(e.cycles / 1.5, rel=3e-3)
    # first region of CTA 0 starts 50 ns after its init
    first = e.start_ns[(e.cta == 0)].min()
    assert first == pytest.approx(50, abs=5)
    assert len(e) == 4 * 2 * 11


def test_clock_mhz_override():
    (buf, meta), _ = _two_sm_launch(rate_ghz=1.5)
    d = decode(buf, meta, clock_mhz=1000)
    assert d.clock.source == "--clock-mhz"
    assert d.events.dur_ns == pytest.approx(d.events.cycles.astype(float), rel=1e-9)


def test_clock32_wraps_around():
    # The SM counters pass 2^32 in the middle of the launch.
    (buf, meta), _ = _two_sm_launch(rate_ghz=1.5, clock_bits=32,
                                    base_clock=(2**32 - 60_000, 2**33 - 30_000))
    d = decode(buf, meta)
    e = d.events
    assert len(e) == 88
    assert e.cycles.min() > 0 and e.cycles.max() < 40_000
    assert set(np.unique(e.cycles[e.scope == 1]).tolist()) == {1500, 1600}
    assert np.allclose(d.clock.segment_mhz, 1500.0, rtol=2e-3)


def test_too_few_anchors_falls_back_with_a_warning():
    recs = profbuf.loop_records(1000, iters=2, body=300, gap=100)
    c = profbuf.Cta(pid=0, sm=0, init=10**9, pre=10**9 + 1000, post=10**9 + 1100,
                    warps={0: recs})
    buf, meta = profbuf.write([c], num_warps=1, slots=8)
    with pytest.warns(DecodeWarning, match="fit rejected .too few timer anchors.*within-cta"):
        d = decode(buf, meta)
    assert d.clock.source == "within-cta"


def test_clock64_uses_the_high_bits():
    (buf, meta), _ = _two_sm_launch(base_clock=(2**40 + 123, 2**35 - 77))
    e = decode(buf, meta).events
    assert set(np.unique(e.cycles[e.scope == 1]).tolist()) == {1500, 1600}


def test_synthetic_wrap_keeps_newest_window():
    recs = profbuf.loop_records(1000, iters=6, body=10, gap=5)  # 14 records
    c = profbuf.Cta(pid=0, sm=0, init=10**9, pre=10**9 + 500, post=10**9 + 600, warps={0: recs})
    buf, meta = profbuf.write([c], num_warps=1, slots=8)
    d = decode(buf, meta, clock_mhz=1000)  # one CTA: too few timer anchors for a fit
    assert d.drops.dropped == 6 and d.drops.needed_buffer_size == 128
    # newest 8: iterations 3..5 whole, the outer end unmatched, one inner end unmatched
    assert len(d.events) == 3 and (d.events.scope == 1).all()
    assert d.events.start.tolist() == [r[2] for r in recs[7:13:2]]
    assert d.unmatched_ends == 2 and d.unmatched_starts == 0


def test_nested_and_repeated_scopes():
    recs = [(False, 0, 100)]
    t = 110
    for _ in range(3):
        recs += [(False, 1, t), (False, 2, t + 2), (True, 2, t + 7), (True, 1, t + 9)]
        t += 20
    recs.append((True, 0, t))
    c = profbuf.Cta(pid=0, sm=0, init=10**9, pre=10**9 + 200, post=10**9 + 300,
                    warps={0: recs})
    buf, meta = profbuf.write([c], num_warps=1, slots=32)
    e = decode(buf, meta, clock_mhz=1000).events
    assert np.bincount(e.scope).tolist() == [1, 3, 3]
    assert e.cycles[e.scope == 2].tolist() == [5, 5, 5]
    assert e.cycles[e.scope == 0].tolist() == [t - 100]
    # sorted for a trace: parent before child at equal start
    assert e.scope.tolist() == [0, 1, 2, 1, 2, 1, 2]


def test_region_left_early_is_reported():
    recs = [(False, 0, 100), (False, 1, 110), (True, 1, 120), (False, 1, 130)]  # no ends
    c = profbuf.Cta(pid=0, sm=0, init=10**9, pre=10**9 + 200, post=10**9 + 300,
                    warps={0: recs})
    buf, meta = profbuf.write([c], num_warps=1, slots=32)
    with pytest.warns(DecodeWarning, match="without a partner"):
        d = decode(buf, meta, clock_mhz=1000)
    assert d.unmatched_starts == 2 and len(d.events) == 1


def test_selective_sampling_segments():
    ctas = []
    for i in range(2):
        c = profbuf.Cta(pid=i, sm=i, init=10**9, pre=10**9 + 5000, post=10**9 + 5100)
        for w in range(4):
            c.warps[w] = profbuf.loop_records(1000 * (w + 1), 2, 50, 10)
        ctas.append(c)
    buf, meta = profbuf.write(ctas, num_warps=4, slots=16, sampled=[3, 1])
    d = decode(buf, meta, clock_mhz=1000)
    assert sorted(np.unique(d.events.warp).tolist()) == [1, 3]
    assert len(d.events) == 2 * 2 * 3
    assert d.drops.segments == 2
    # warp 3's regions start at 4000 cycles: the segments were not mixed up
    assert d.events.start[(d.events.warp == 3) & (d.events.scope == 0)].tolist() == [4000, 4000]


# --- never crash on garbage ------------------------------------------------------------------


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(min_size=0, max_size=3000), warps=st.integers(1, 4),
       stride=st.sampled_from([128, 256, 384]), bits=st.sampled_from([32, 64]),
       n=st.integers(1, 8))
def test_random_bytes_never_crash(data, warps, stride, bits, n):
    meta = LaunchMeta(kernel="k", grid=(n, 1, 1), num_warps=warps, bytes_per_cta=stride,
                      scopes={0: "a"}, clock_bits=bits)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DecodeWarning)
        try:
            d = decode(data, meta)
        except UserError:
            return
    assert len(d.events.start) == len(d.events.end_ns)


@settings(max_examples=150, deadline=None)
@given(flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 255)), max_size=40),
       cut=st.integers(0, 4000))
def test_damaged_valid_buffer_never_crashes(flips, cut):
    (buf, meta), _ = _two_sm_launch(slots=16)
    b = bytearray(buf)
    for pos, val in flips:
        b[pos % len(b)] = val
    b = b[: len(b) - cut]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DecodeWarning)
        try:
            d = decode(bytes(b), meta)
        except UserError:
            return
    assert np.isfinite(d.events.start_ns).all()
