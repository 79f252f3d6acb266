"""`report`: tables, JSON, timeline picture and the CLI, on the real H100 buffers."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import helpers
import numpy as np
import pytest
from helpers import profbuf
from helpers.cli import invoke

from proton_inject.analyze.decode import decode
from proton_inject.analyze.overhead import overhead_class
from proton_inject.analyze.report import run_report
from proton_inject.analyze.summary import LaunchData, summarize
from proton_inject.analyze.text import sampled_line
from proton_inject.errors import UserError
from proton_inject.formats.raw import load_raw, raw_prefix, save_raw

DATA = helpers.DATA / "h100-triton3.6"
SHORT = helpers.DATA / "h100-shortlaunch"


@pytest.fixture(scope="module")
def fixture_report():
    return run_report([DATA], as_json=True)


def _region(kernel: dict, name: str) -> dict:
    return next(r for r in kernel["regions"] if r["name"] == name)


def test_json_numbers(fixture_report):
    s = json.loads(fixture_report.text)
    add, mm = s["kernels"]
    assert (add["kernel"], mm["kernel"]) == ("add_kernel", "mm_kernel")
    assert _region(add, "kernel")["count"] == 4096 and _region(add, "iter")["count"] == 32768
    assert _region(mm, "iter")["count"] == 516096
    it = _region(mm, "iter")
    c, n = it["cycles"], it["ns"]
    assert c["median"] <= c["p95"] <= c["max"] and c["total"] == pytest.approx(c["mean"] * 516096)
    # ns follow cycles through a ~1.4-1.6 GHz clock
    assert 1.3 < c["median"] / n["median"] < 1.7
    k = _region(add, "kernel")
    assert 0.5 < k["share"] <= 1.0 and _region(add, "iter")["share"] < k["share"]
    assert it["loc"] == "kernels.py:28" and _region(add, "iter")["parent"] == 0
    assert mm["drops"]["records_dropped"] == 16384 and mm["drops"]["needed_buffer_size"] == 16384
    assert add["drops"]["records_dropped"] == 0
    assert add["clock"]["sources"] == mm["clock"]["sources"] == ["globaltimer-fit"]


@pytest.mark.filterwarnings("ignore::proton_inject.analyze.issues.DecodeWarning")
@pytest.mark.parametrize("where", ["h100-triton3.6", "h100-direct", "h100-shortlaunch"])
def test_kernel_wall_time_and_cta_time_sum(tmp_path, where):
    """``kernel_wall_ns`` is the kernel's time: first CTA start to last CTA end, per launch,
    summed over launches; the sum of CTA lifetimes over profiled warps (the shares'
    denominator) is ``cta_time_sum_ns`` (was ``kernel_time_ns``: 7.1 ms for the add kernel,
    which ran 2.8 us). The same from a trace; the table's title says the wall time."""
    res = run_report([DATA.parent / where], trace_dir=tmp_path / "tr", trace_format="json")
    again = run_report([tmp_path / "tr"])
    raws = sorted((DATA.parent / where).glob("*.json"))
    raws = [p for p in raws if not p.name.startswith("proton_trace")]
    for k, t in zip(res.summary["kernels"], again.summary["kernels"], strict=True):
        assert "kernel_time_ns" not in k
        wall = 0.0
        for p in raws:
            d = decode(*load_raw(p))
            if d.meta.kernel == k["kernel"] and d.meta.config == k["config"]:
                wall += float(d.ctas.prefinal_ns.max() - d.ctas.init_ns.min())
        assert k["kernel_wall_ns"] == pytest.approx(wall) and t["kernel_wall_ns"] == pytest.approx(wall)
        assert 0 < k["kernel_wall_ns"] < k["cta_time_sum_ns"]
        assert t["cta_time_sum_ns"] == pytest.approx(k["cta_time_sum_ns"], rel=1e-5)
        top = max(r["share"] for r in k["regions"])
        r = next(r for r in k["regions"] if r["share"] == top)
        assert top == pytest.approx(r["ns"]["total"] / k["cta_time_sum_ns"])
        us = f"{k['kernel_wall_ns'] / 1000:,.1f} us"
        assert f"regions, wall {us}; clock" in res.text, res.text
    if where == "h100-triton3.6":
        add = res.summary["kernels"][0]
        assert add["kernel_wall_ns"] == 2784.0 and add["cta_time_sum_ns"] > 7e6


def _short_with_device_clock(tmp_path: Path) -> Path:
    """The 96-CTA short launch as the runtime writes it now: with the device's max clock."""
    buf, meta = load_raw(SHORT / "00000-matmul_kernel.json")
    meta.sm_clock_mhz = 1980.0
    save_raw(tmp_path / "raw" / "00000-matmul_kernel", buf, meta)
    return tmp_path


def test_short_launch_shares_stay_within_the_cta(tmp_path):
    """The globaltimer fit said 1,275 MHz here and the kernel region got a 129% share."""
    res = run_report([_short_with_device_clock(tmp_path)], trace_dir=tmp_path / "tr",
                     trace_format="json", verbose=True)
    [k] = res.summary["kernels"]
    assert k["clock"]["sources"] == ["device-clock"] and k["clock"]["mhz_median"] == 1980
    assert "clock 1,980 MHz (device-clock)" in res.text
    assert "fit rejected: within-SM anchor spread 47 ns RMS = 1.5 ticks of 32 ns" in res.text
    assert "device-clock 1,980 MHz on 1 of 1 launch (device max clock: a guess, not a measurement" in res.text
    assert "ns are lower bounds" in res.text
    assert "no clock bracket: older run (its metadata has none)" in res.text
    # said once, with its causes counted; the full sentence is a detail (--verbose)
    assert res.warnings == [
        "matmul_kernel: globaltimer fit rejected on 1 of 1 launch (anchors too close in time, low R^2, "
        "fitted rate stretches records, no clock bracket: older run); cycles converted at 1980 MHz "
        "(device max clock: a guess, not a measurement; ns are lower bounds if the SMs ran slower); "
        "pass --clock-mhz to set it"]
    assert len(res.details) == 1 and "R^2 0.72 (< 0.9)" in res.details[0]
    shares = {r["name"]: r["share"] for r in k["regions"]}
    assert 0.75 < shares["kernel"] <= 1.0 and shares["mma"] < shares["loop acc @matmul.py:36"]
    assert k["ctas_overlong"]["count"] == 0
    # the trace says which clock it used, and reports the same from it
    [tr] = res.files
    again = run_report([tr], as_json=True).summary["kernels"][0]
    [clock] = again["clock"]["groups"]
    assert clock["source"] == "device-clock" and "1.5 ticks" in clock["first_reason"]
    assert clock["launches"] == [0] and clock["mhz_median"] == [1980]
    assert _region(again, "kernel")["share"] == pytest.approx(shares["kernel"], rel=0.01)


def test_short_launches_old_files_and_a_slow_clock():
    res = run_report([SHORT], as_json=True)
    one, four = res.summary["kernels"]  # 8 warps, 96 CTAs; 4 warps, 384 CTAs
    assert one["clock"]["sources"] == ["within-cta"] and four["clock"]["sources"] == ["globaltimer-fit"]
    assert all(0 < r["share"] <= 1.0 for k in (one, four) for r in k["regions"])
    # a clock far too slow stretches every CTA's records past its lifetime: still <= 100%,
    # and the report says so
    res = run_report([SHORT / "00000-matmul_kernel.json"], clock_mhz=1275)
    [k] = res.summary["kernels"]
    assert k["clock"]["sources"] == ["--clock-mhz"]
    assert k["ctas_overlong"]["count"] == 96 and k["ctas_overlong"]["max_ratio"] > 1.3
    assert all(r["share"] <= 1.0 for r in k["regions"])
    assert "records of 96 of 96 CTAs span longer than the CTA lived" in res.text


def test_text_table_and_drop_warning():
    res = run_report([DATA / "profile_scratch_mm.json", DATA / "profile_scratch_add.bin.gz"], verbose=True)
    text = res.text
    assert text.index("add_kernel:") < text.index("mm_kernel:")  # launch order
    assert "516,096" in text and "32,768" in text
    assert "WARNING: 16,384 of 1,064,960 records (1.5%) were dropped" in text
    assert "--buffer-size 16384 (2048 bytes per warp)" in text
    assert "else add --buffer-type global" in text
    assert text.count("WARNING") == 1  # add_kernel lost nothing


def test_drop_warning_for_a_global_buffer(tmp_path):
    buf, meta = load_raw(DATA / "profile_scratch_mm.json")
    meta.buffer_type = "global"
    save_raw(tmp_path / "mm", buf, meta)
    res = run_report([tmp_path / "mm.json"], verbose=True)
    assert ("--buffer-size 16384 (2048 bytes per warp) with --buffer-type global would have "
            "held them all.") in res.text
    assert "shared memory free" not in res.text
    summary = run_report([tmp_path / "mm.json"], as_json=True).summary
    assert summary["kernels"][0]["drops"]["buffer_type"] == "global"


def test_trace_round_trip_gives_same_numbers(tmp_path, fixture_report):
    res = run_report([DATA / "profile_scratch_add.json"], trace_dir=tmp_path, gz=True,
                     trace_format="json")
    assert [p.name for p in res.files] == ["00000-add_kernel.json.gz"]
    again = run_report(res.files, as_json=True).summary["kernels"][0]
    first = json.loads(fixture_report.text)["kernels"][0]
    for name in ("kernel", "iter"):
        a, b = _region(first, name), _region(again, name)
        assert a["count"] == b["count"]
        assert a["cycles"] == b["cycles"]
        assert a["ns"]["median"] == pytest.approx(b["ns"]["median"], abs=1.0)
        assert a["share"] == pytest.approx(b["share"], rel=0.01)


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    res = run_report([DATA / "profile_scratch_mm.json"], plot=tmp_path / "t.png")
    png = tmp_path / "t.png"
    assert res.files == [png]
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def _pictures(monkeypatch) -> list:
    """The matplotlib figures plot_timeline draws, kept as it closes them."""
    import matplotlib.pyplot as plt

    figs = []
    close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig=None: (figs.append(fig), close(fig)))
    return figs


@pytest.mark.parametrize("name", ["h100-direct", "h100-direct-loops"])
def test_plot_of_direct_data_starts_at_the_first_cta(tmp_path, monkeypatch, name):
    """A direct block has no timer read at entry: the CTA's first record stands in for its
    start, before the launch's time 0 (its earliest timer read, after the last record). The
    picture's time axis still starts at 0, the first CTA's start, for the raw launch and for
    its trace, and no bar lies before it (was: -8.3 us on the H100 layer norm)."""
    pytest.importorskip("matplotlib")
    figs = _pictures(monkeypatch)
    run_report([DATA.parent / name], plot=tmp_path / "raw.png", trace_dir=tmp_path / "tr", trace_format="json")
    run_report([tmp_path / "tr"], plot=tmp_path / "trace.png")
    assert len(figs) == 2
    for fig in figs:
        ax = fig.axes[0]
        lo, hi = ax.get_xlim()
        xs = np.concatenate([p.vertices[:, 0] for c in ax.collections for p in c.get_paths()])
        assert lo == 0.0 and xs.min() >= 0.0 and hi >= xs.max(), (lo, xs.min(), xs.max(), hi)
        assert xs.min() < 0.05  # the first CTA's band begins at the origin (within 50 ns)


def test_per_warp_rows_when_warps_differ():
    ctas = []
    for i in range(2):
        c = profbuf.Cta(pid=i, sm=0, init=10**9 + 5000 * i, pre=10**9 + 5000 * i + 4000,
                        post=10**9 + 5000 * i + 4100)
        c.warps = {w: profbuf.loop_records(1000 + 6000 * i, 3, 100 * (w + 1), 20)
                   for w in range(2)}
        ctas.append(c)
    buf, meta = profbuf.write(ctas, num_warps=2, slots=16)
    s = summarize([LaunchData.from_decoded(decode(buf, meta, clock_mhz=1000))])
    inner = _region(s["kernels"][0], "inner")
    assert [u["unit"] for u in inner["per_unit"]] == ["warp 0", "warp 1"]
    assert [u["median_cycles"] for u in inner["per_unit"]] == [100, 200]
    assert _region(s["kernels"][0], "outer")["per_unit"] is not None


def test_cli(tmp_path):
    r = invoke(["report", str(DATA / "profile_scratch_add.json"), "--json",
                "--clock-mhz", "1000"], code=0)
    k = json.loads(r.stdout)["kernels"][0]
    it = _region(k, "iter")
    assert it["ns"]["median"] == it["cycles"]["median"]  # 1 GHz: a cycle is a ns
    assert k["clock"]["sources"] == ["--clock-mhz"]
    r = invoke(["report", str(tmp_path / "missing")])
    assert r.exit_code == 2 and "no such file" in r.output
    # a launch whose buffer stayed zero: the override was not used
    meta = json.loads((DATA / "profile_scratch_add.json").read_text())
    meta.pop("bin")
    from proton_inject.formats.raw import LaunchMeta

    save_raw(tmp_path / "raw" / "00000-add_kernel", np.zeros(8320 * 1024, np.uint8),
             LaunchMeta.from_dict(meta))
    r = invoke(["report", str(tmp_path)])
    assert r.exit_code == 2 and "instrumented binary was not used" in r.output


def test_plot_without_matplotlib_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what an install without [plot] sees
    with pytest.raises(UserError, match=r"proton-inject\[plot\]"):
        run_report([DATA / "profile_scratch_mm.json"], plot=tmp_path / "t.png")
    assert not (tmp_path / "t.png").exists()


def _two_ranks(tmp_path: Path) -> Path:
    """The add launch as two ranks of a torchrun job write it: one raw dir, rank in the names."""
    buf, meta = load_raw(DATA / "profile_scratch_add.json")
    for rank in (0, 1):
        meta.rank = rank
        save_raw(raw_prefix(tmp_path / "raw", meta), buf, meta)
    return tmp_path


def test_ranks_merge_into_one_table_and_one_trace(tmp_path):
    out = _two_ranks(tmp_path)
    assert sorted(p.name for p in (out / "raw").glob("*.json")) == [
        "rank0-00000-add_kernel.json", "rank1-00000-add_kernel.json"]
    res = run_report([out], as_json=True, trace_dir=tmp_path / "tr", merge=True,
                     trace_format="json", gz=False)
    (add,) = json.loads(res.text)["kernels"]
    assert add["ranks"] == [0, 1] and add["launches"] == [0, 0]
    it = _region(add, "iter")
    assert it["count"] == 2 * 32768
    assert [(r["rank"], r["count"]) for r in it["per_rank"]] == [(0, 32768), (1, 32768)]
    text = run_report([out]).text
    assert "  rank 0 " in text and "  rank 1 " in text
    (merged,) = res.files
    doc = json.loads(merged.read_text())
    names = {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "process_name"}
    r0 = {n for n in names if n.startswith("rank 0 add_kernel #0 SM ")}
    r1 = {n for n in names if n.startswith("rank 1 add_kernel #0 SM ")}
    assert r0 and len(r0) == len(r1) and len(names) == len(r0) + len(r1)
    assert [s["rank"] for s in doc["otherData"]["launches"]] == [0, 1]
    # the merged trace reads back with its ranks
    again = json.loads(run_report([merged], as_json=True).text)["kernels"][0]
    assert again["ranks"] == [0, 1]


def test_report_on_a_run_that_kept_nothing(tmp_path):
    """run always writes run.json; report explains the empty run instead of misreading it."""
    (tmp_path / "run.json").write_text(json.dumps({
        "version": 1, "format": "proton-inject-run", "rank": None, "instrumented_dir": "inst",
        "launches": [], "exit_code": 1,
        "messages": ["kernel add_kernel (ABC) was never compiled: the program did not launch it"],
    }, indent=1))
    (tmp_path / "autotune.json").write_text('{"format": 1, "triton": [], "inductor": []}\n')  # not a trace
    r = invoke(["report", str(tmp_path)], code=2)
    assert "the run kept no launches (the program exited with code 1)" in r.output
    assert "add_kernel (ABC) was never compiled" in r.output and "not a proton-inject" not in r.output
    r = invoke(["report", str(tmp_path / "run.json")])
    assert r.exit_code == 2 and "give its directory" in r.output


def test_report_ignores_run_json_beside_traces(tmp_path):
    """A run directory with traces and run.json (raw/ removed): the traces are read."""
    res = run_report([DATA / "profile_scratch_add.json"], trace_dir=tmp_path, merge=False,
                     trace_format="json")
    (tmp_path / "run.json").write_text('{\n "version": 1,\n "format": "proton-inject-run",\n "launches": []\n}\n')
    (add,) = json.loads(run_report([tmp_path], as_json=True).text)["kernels"]
    assert add["kernel"] == "add_kernel" and len(res.files) == 1


def test_a_guessed_clock_names_what_fitted_launches_measured():
    """Short launch: fit rejected; the other launch of the same device fitted 1,774 MHz."""
    text = run_report([SHORT], verbose=True).text
    guessed, fitted = [x for x in text.splitlines() if x.strip().startswith("clock:")]
    assert "a bound, not a measurement" in guessed and "globaltimer fit rejected" in guessed
    assert "launches of these inputs whose fit held ran at 1,774 MHz (1 launch" in guessed
    assert fitted.strip().startswith("clock: globaltimer-fit 1,774 MHz on 1 of 1 launch (measured: R^2 >= 0.99")
    assert "whose fit held" not in fitted


def test_report_says_what_was_sampled_and_what_the_options_cost():
    from dataclasses import replace

    from proton_inject.analyze.text import format_text

    # The H100 fixture: kernel + every iteration, every warp, Proton's 8 KiB buffer: measured.
    text = run_report([DATA / "profile_scratch_add.bin.gz"], verbose=True).text
    assert ("overhead: every iteration, every warp, shared buffer > 1 KiB: kernel time x 1.00-1.32 "
            "(persistent softmax 1.01; matmul/attention" in text)
    assert "measured on H100, Triton 3.6" in text and "sampled:" not in text
    # Warp 0 of 4, every 2nd CTA, a 16-byte global buffer (kernel scope only, as the defaults
    # lower it): said, and its measured class named.
    ctas = [profbuf.Cta(pid=i, sm=0, init=10**9 + 5000 * i, pre=10**9 + 5000 * i + 4000,
                        post=10**9 + 5000 * i + 4100,
                        warps={0: [(False, 0, 100 + i), (True, 0, 900 + i)]} if i % 2 == 0 else {})
            for i in range(4)]
    buf, meta = profbuf.write(ctas, num_warps=4, slots=2, sampled=[0], scopes={0: "kernel"})
    d = decode(buf, replace(meta, sample_ctas=2, buffer_type="global"), clock_mhz=1000)
    k = summarize([LaunchData.from_decoded(d)])["kernels"][0]
    assert k["sampled"] == {"warps": [0], "every_nth_cta": 2, "every_nth_iteration": 1,
                            "ctas_with_records": 2}
    assert k["regions"][0]["count"] == 2  # not scaled to 4
    text = format_text({"kernels": [k]}, verbose=True)
    assert ("sampled: warps 0 of 4 recorded (the first of each partition unless --warps named "
            "them; --warps all: every warp); 1 CTA in 2 recorded (--sample-ctas 2): 2 of 4 "
            "CTAs have regions; counts and totals are of these only, not scaled") in text
    assert ("overhead: kernel + whole loops, one warp, global buffer, 1 CTA in 2: kernel time x "
            "1.00-1.04 with 1 CTA in 8") in text
    # The defaults without sampling: measured too; the same records in shared memory as well.
    k["sampled"] = {"warps": [0]}
    assert "global buffer: kernel time x 0.99-1.04 (Inductor gelu 1.04" in overhead_class(k)
    k["drops"]["buffer_type"] = "shared"
    assert "shared buffer <= 1 KiB: kernel time x 0.99-1.06 (layer norm" in overhead_class(k)
    k["sampled"] = {"warps": [0], "every_nth_cta": 2}
    assert "not measured yet" in overhead_class(k)
    k["drops"]["buffer_type"] = "direct"  # the defaults sampled, lowered directly: measured (H200)
    assert ("kernel + whole loops, one warp, direct stores, 1 CTA in 2: kernel time x 1.00-1.06 with 1 CTA "
            "in 8 on an H200 (every CTA still reads its clocks") in overhead_class(k)
    k["drops"]["buffer_type"] = "shared"
    k["regions"] = [{"name": "kernel"}, {"name": "iter x @f.py:3"}]  # iterations, sampled
    assert "every iteration, one warp, shared buffer <= 1 KiB, 1 CTA in 2: kernel time x 0.99-1.06" \
        in overhead_class(k)
    # --sample-iterations on loops lowered directly: said, and its measured class named
    k["sampled"] = {"warps": [0], "every_nth_iteration": 4}
    k["drops"]["buffer_type"] = "direct"
    assert ("every iteration, one warp, direct stores, iterations 0, 4, 8, ...: kernel time x "
            "1.00-1.13 (layer norm 8192^2 1.125") in overhead_class(k)
    assert ("iterations 0, 4, 8, ... of each loop lowered directly recorded (--sample-iterations 4)"
            in sampled_line(k))


def test_sampled_direct_blocks_left_empty_are_not_damage(tmp_path):
    """Under --sample-ctas the direct lowering stores only in the sampled CTAs: the others'
    blocks stay zero. The H100 direct layer norm, with every block but each 4th zeroed as
    such a launch leaves it: no "bad preamble" warning, the grid's CTAs counted, 1 in 4 with
    regions. A zero block of a sampled CTA is still reported."""
    from dataclasses import replace

    from proton_inject.analyze.text import format_text

    src = helpers.DATA / "h100-direct" / "00000-layernorm_fwd_kernel"
    buf, meta = load_raw(src)
    blocks = buf.reshape(-1, meta.bytes_per_cta).copy()
    n = len(blocks)
    blocks[np.arange(n) % 4 != 0] = 0
    d = decode(blocks.reshape(-1), replace(meta, sample_ctas=4))
    assert not [i for i in d.issues if "preamble" in i.cause], d.issues
    assert set(d.events.cta.tolist()) == set(range(0, n, 4))
    k = summarize([LaunchData.from_decoded(d)])["kernels"][0]
    assert k["ctas"] == n == 1151 and k["sampled"]["ctas_with_records"] == len(range(0, n, 4))
    assert f"288 of {n:,} CTAs have regions" in format_text({"kernels": [k]}, verbose=True)
    blocks[8] = 0  # a sampled CTA that wrote nothing: damage, said
    with pytest.warns(UserWarning, match="1 CTA block.s. with a bad preamble"):
        d = decode(blocks.reshape(-1), replace(meta, sample_ctas=4))
    assert any("preamble" in i.cause for i in d.issues)


def test_every_region_row_states_its_error_bar(tmp_path):
    """Issue 30 item 3: each region carries its uncertainty (record cost left after
    calibration, or the cost itself when uncalibrated; ns add the clock's stated error), and a
    region shorter than it is marked, in the JSON and in the table."""
    import warnings

    from proton_inject.analyze.uncertainty import CALIBRATED, UNCALIBRATED

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = run_report([DATA])
    add = next(k for k in res.summary["kernels"] if k["kernel"] == "add_kernel")
    assert add["record_cost_cycles"] == [None] and add["clock"]["sources"] == ["globaltimer-fit"]
    for r in add["regions"]:
        u = r["uncertainty"]
        assert u["cycles"] == UNCALIBRATED["shared"]
        assert u["ns"] > u["cycles"] * 1000 / add["clock"]["mhz_median"]  # plus the clock's share
        assert r["below_uncertainty"] == (r["cycles"]["median"] < u["cycles"])
    assert [r["name"] for r in add["regions"] if r["below_uncertainty"]] == ["iter"]  # 55 cycles
    assert "+-cyc" in res.text and "iter (!)" in res.text and "shorter than their error bar" in res.text
    # calibrated: what the calibration left; on a guessed clock, ns get no error bar
    from proton_inject.analyze.uncertainty import add_uncertainty

    k = json.loads(json.dumps(add))
    k["record_cost_cycles"] = [34.5]
    k["clock"]["groups"][0]["source"] = "device-clock"
    k["clock"]["sources"] = ["device-clock"]
    add_uncertainty(k)
    assert {r["uncertainty"]["cycles"] for r in k["regions"]} == {CALIBRATED["shared"]}
    assert {r["uncertainty"]["ns"] for r in k["regions"]} == {None}


def test_measured_perturbation_widens_each_region_by_its_share(tmp_path):
    """Issue 30 items 2-3: where run.json holds --measure-overhead's extra kernel time, each
    region's bar grows by that share (of the plain kernel's wall) of its
    median; a kernel not measured keeps its bar; an index without the numbers changes nothing.
    The share: the median extra time plus the pairs' p10..p90 width over sqrt(pairs)."""
    import shutil
    import warnings

    raw = tmp_path / "raw"
    raw.mkdir()
    for f in ("profile_scratch_add.json", "profile_scratch_add.bin.gz", "profile_scratch_mm.json",
              "profile_scratch_mm.bin.gz"):
        shutil.copy(DATA / f, raw / f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        before = run_report([tmp_path]).summary
        (tmp_path / "run.json").write_text(json.dumps({
            "format": "proton-inject-run",
            "measured_overhead": {"add_kernel": {"ratio": 1.1, "pairs": 9, "extra_us": 0.4,
                                                 "extra_us_p10": -0.1, "extra_us_p90": 0.6},
                                  "gone": {"pairs": 0}}}))
        got = run_report([tmp_path])
    old = {k["kernel"]: k for k in before["kernels"]}
    new = {k["kernel"]: k for k in got.summary["kernels"]}
    add = new["add_kernel"]
    share = (400.0 + 700.0 / 3) / (add["kernel_wall_ns"] / len(add["launches"]) - 400.0)
    assert add["perturbation_pct"] == pytest.approx(100 * share, abs=1e-3)
    for r, r0 in zip(add["regions"], old["add_kernel"]["regions"], strict=True):
        u, u0 = r["uncertainty"], r0["uncertainty"]
        assert u["cycles"] == pytest.approx(u0["cycles"] + share * r["cycles"]["median"])
        assert u["ns"] == pytest.approx(u0["ns"] + share * r["ns"]["median"])
        assert "measured perturbation" in u["from"][-1]
        assert r["below_uncertainty"] == (r["cycles"]["median"] < u["cycles"])
    assert "perturbation_pct" not in new["mm_kernel"]
    assert [r["uncertainty"] for r in new["mm_kernel"]["regions"]] == \
        [r["uncertainty"] for r in old["mm_kernel"]["regions"]]
    assert f"measured perturbation: the records made the kernel up to {add['perturbation_pct']:.2g}% slower" \
        in got.text
    # a hand-edited index (p10 above p90) never narrows a bar
    from proton_inject.analyze.uncertainty import add_perturbation

    k = json.loads(json.dumps(old_k := old["add_kernel"]))
    add_perturbation(k, {"extra_us": 0.0, "extra_us_p10": 5.0, "extra_us_p90": -5.0, "pairs": 4.0})
    assert [r["uncertainty"]["cycles"] for r in k["regions"]] == \
        [r["uncertainty"]["cycles"] for r in old_k["regions"]]


def test_measured_overhead_is_taken_per_config_from_the_launchs_own_rank(tmp_path):
    """A launch of rank 1 takes its config's extra time from run.rank1.json: not the pooled
    one, not another rank's (which may not be written yet when a rank reports), not run.json's.
    A bad entry (a number too big for a float, p10 above p90, a boolean) is passed over."""
    import shutil
    import warnings

    raw = tmp_path / "raw"
    raw.mkdir()
    meta = json.loads((DATA / "profile_scratch_add.json").read_text())
    meta["config"] = "BLOCK=1024"
    (raw / "rank1-00003-add_kernel.json").write_text(json.dumps(meta))
    shutil.copy(DATA / "profile_scratch_add.bin.gz", raw / "rank1-00003-add_kernel.bin.gz")

    def index(name, entry):
        (tmp_path / name).write_text(json.dumps({"format": "proton-inject-run",
                                                 "measured_overhead": {"add_kernel": entry}}))

    def numbers(extra, lo, hi, pairs):
        return {"extra_us": extra, "extra_us_p10": lo, "extra_us_p90": hi, "pairs": pairs}

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        [plain] = run_report([tmp_path]).summary["kernels"]
        index("run.rank1.json", {**numbers(9.0, 8.0, 10.0, 50),
                                 "configs": {"BLOCK=1024": numbers(2.0, 1.9, 2.1, 25),
                                             "BLOCK=2048": numbers(7.0, 6.0, 8.0, 25)}})
        other = numbers(50.0, 49.0, 51.0, 9)
        index("run.rank0.json", {**other, "configs": {"BLOCK=1024": other}})
        index("run.json", numbers(60.0, 59.0, 61.0, 9))
        [k] = run_report([tmp_path]).summary["kernels"]
        assert k["config"] == "BLOCK=1024"
        share = (2000.0 + 200.0 / 5) / (k["kernel_wall_ns"] - 2000.0)
        assert k["perturbation_pct"] == pytest.approx(100 * share, abs=1e-3)
        for bad in (numbers(10**400, 0.0, 1.0, 9), numbers(1.0, 2.0, 0.5, 9), numbers(1.0, 0.5, 2.0, True),
                    numbers(1e300, -1e308, 1e308, 9), {"configs": {"BLOCK=1024": "fast"}}):
            index("run.rank1.json", {"configs": {"BLOCK=1024": bad}} if "configs" not in bad else bad)
            [k] = run_report([tmp_path]).summary["kernels"]
            assert "perturbation_pct" not in k, bad
            assert [r["uncertainty"] for r in k["regions"]] == [r["uncertainty"] for r in plain["regions"]]


def test_a_damaged_launch_among_many_is_left_out_with_a_note(tmp_path):
    """Issue 31 item 2: one corrupt launch in a directory of several is skipped with a note
    naming it; the others are decoded. Alone, it is the error it always was."""
    import shutil

    raw = tmp_path / "raw"
    raw.mkdir()
    for name in ("profile_scratch_add", "profile_scratch_mm"):
        shutil.copy(DATA / f"{name}.json", raw / f"{name}.json")
        shutil.copy(DATA / f"{name}.bin.gz", raw / f"{name}.bin.gz")
    meta = json.loads((raw / "profile_scratch_mm.json").read_text())
    meta["num_warps"] = "eight"
    (raw / "profile_scratch_mm.json").write_text(json.dumps(meta))
    res = run_report([raw])
    assert [k["kernel"] for k in res.summary["kernels"]] == ["add_kernel"]
    assert any(w.startswith("left out: ") and "profile_scratch_mm.json" in w and "num_warps" in w
               for w in res.warnings), res.warnings
    with pytest.raises(UserError, match="num_warps"):
        run_report([raw / "profile_scratch_mm.json"])


def test_notes_under_a_table_are_one_line_each_unless_verbose():
    # issue 31: notes one line each, details behind -v (the record-cost note ran to 243 characters)
    from proton_inject.formats.diagnostics import MORE, NOTE_WIDTH

    short = run_report([DATA.parent / "h100-triton3.6"]).text
    full = run_report([DATA.parent / "h100-triton3.6"], verbose=True).text
    notes = [x for x in short.splitlines() if x.startswith("  ") and not x.startswith("   ")]
    assert notes and any(x.endswith(MORE) for x in notes)
    for x in notes:  # a headline is its first clause at least, else within the width
        assert len(x.strip()) <= NOTE_WIDTH + len(MORE) or ";" not in x.strip()[:-len(MORE)], x
    assert "`proton-inject calibrate` on that GPU measures it" in full
    assert "`proton-inject calibrate`" not in short
