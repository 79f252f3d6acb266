"""benchmarks/auto_vs_torch_profiler.py's arithmetic without a GPU: torch.profiler's kernel
names matched to ours, shares of both sides over the kernels both saw, region coverage, and
the kernel-time ratios, on a real torch.profiler trace (CPU activity, with kernel events added
as CUPTI's trace writes them), a real auto.json (``profile --auto``'s own analysis of real H100
buffers) and a real run.json measured_overhead (``overhead_table`` of launch times)."""

from __future__ import annotations

import json
import shutil

import pytest
from helpers import DATA, REPO, load_module

from proton_inject.analyze import hot_kernels as hk
from proton_inject.analyze.report import run_report
from proton_inject.collect.keep_policy import KeepPolicy
from proton_inject.collect.measured_overhead import overhead_table
from proton_inject.formats.auto_report import AUTO_FORMAT, AUTO_VERSION
from proton_inject.formats.run_index import RUN_FORMAT

bench = load_module(REPO / "benchmarks" / "auto_vs_torch_profiler.py", "auto_vs_torch_profiler")

# (dataset, raw launch file stem, kernel): the run's real launches
LAUNCHES = [("h100-shortlaunch", "00000-matmul_kernel", "matmul_kernel"),
            ("h100-direct", "00000-layernorm_fwd_kernel", "layernorm_fwd_kernel"),
            ("h100-triton3.6", "profile_scratch_add", "add_kernel")]
COUNTS = {"matmul_kernel": 10, "layernorm_fwd_kernel": 1000, "add_kernel": 50}
CUBLAS = "nvjet_tst_128x64_64x8_2x1_v_bz_TNN"
ATEN = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
        "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)")


def _run_dir(parent):
    """A profile's output directory holding the real LAUNCHES, run.json counting COUNTS."""
    run = parent / "out"
    (run / "raw").mkdir(parents=True)
    for i, (ds, stem, kernel) in enumerate(LAUNCHES):
        for ext in (".json", ".bin.gz"):
            shutil.copy(DATA / ds / f"{stem}{ext}", run / "raw" / f"{i:05d}-{kernel}{ext}")
    (run / "run.json").write_text(json.dumps({"version": 1, "format": RUN_FORMAT, "launch_counts": COUNTS,
                                              "launches": [{"kernel": k, "tuning": False} for *_, k in LAUNCHES]}))
    return run


@pytest.fixture(scope="module")
def auto_doc(tmp_path_factory):
    """auto.json as ``profile --auto`` writes it: the run's ranking (real launches,
    run.json counting COUNTS), layernorm opened up from the detailed run of real buffers."""
    run = _run_dir(tmp_path_factory.mktemp("auto"))
    ranked = hk.rank_kernels(run_report([run], jobs=1).summary, share=0.8, top=3)
    detail = run_report([DATA / "h100-direct-loops"], source=True, jobs=1).summary
    doc = hk.AutoReport(format=AUTO_FORMAT, version=AUTO_VERSION, run="OUT", share_wanted=0.8,
                        top_max=3, kernels=ranked, hot=hk.hot_kernels(detail, ["layernorm_fwd_kernel"]),
                        exit_code=0, notes=[])
    return json.loads(json.dumps(doc))


def _kernel_event(name: str, ts: float, dur_us: float, cat: str = "kernel") -> dict:
    """A GPU event as torch.profiler's Chrome trace holds it (kineto's fields)."""
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur_us,
            "args": {"External id": 3, "device": 0, "stream": 7, "correlation": 41, "registers per thread": 32,
                     "shared memory": 0, "grid": [64, 1, 1], "block": [128, 1, 1]}}


# GPU time per kernel in the trace (us per launch, launches)
TRACE = {"layernorm_fwd_kernel": (3.0, 100), "matmul_kernel": (4.0, 10), CUBLAS: (10.0, 30),
         ATEN: (1.5, 20), "void add_kernel(float*, float*, int)": (0.5, 50)}


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    """A real torch.profiler Chrome trace (CPU ops, one named like a kernel of ours), with the
    GPU events of TRACE, a memset and a flow event added."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        with torch.profiler.record_function("layernorm_fwd_kernel"):
            torch.ones(4).add_(1)
    path = tmp_path_factory.mktemp("trace") / "trace.json"
    prof.export_chrome_trace(str(path))
    doc = json.loads(path.read_text())
    ts = 1000.0
    for name, (dur, n) in TRACE.items():
        for _ in range(n):
            doc["traceEvents"].append(_kernel_event(name, ts, dur))
            ts += dur + 1
    doc["traceEvents"] += [_kernel_event("Memset (Device)", ts, 500.0, cat="gpu_memset"),
                           {"ph": "f", "id": 41, "pid": 0, "tid": 7, "ts": ts, "cat": "ac2g", "name": "ac2g"}]
    return doc


def test_kernel_times_are_the_kernel_events_in_ns(trace):
    got = bench.kernel_times(trace)
    assert set(got) == set(TRACE)  # no CPU op, memset or flow event
    for name, (dur, n) in TRACE.items():
        assert got[name] == pytest.approx([1000.0 * dur] * n)


def test_names_match_exactly_or_bare():
    assert bench.bare_name(ATEN) == "vectorized_elementwise_kernel"
    assert bench.bare_name("void add_kernel(float*, float*, int)") == "add_kernel"
    # Inductor's counter stays; a specialization suffix (older Triton's entry names) goes.
    assert bench.bare_name("triton_per_fused__to_copy_add_mean_mul_pow_rsqrt_0") == \
        "triton_per_fused__to_copy_add_mean_mul_pow_rsqrt_0"
    assert bench.bare_name("triton_poi_fused_gelu_6_0d1d") == "triton_poi_fused_gelu_6"
    assert bench.bare_name("add_kernel_0d1d2de3de") == "add_kernel"
    assert bench.bare_name("triton_poi_fused_gelu_16") == "triton_poi_fused_gelu_16"
    got, left_tp, left_ours = bench.match_names(
        sorted(TRACE), ["layernorm_fwd_kernel", "matmul_kernel", "add_kernel", "never_in_the_trace"])
    assert got == {"layernorm_fwd_kernel": "layernorm_fwd_kernel", "matmul_kernel": "matmul_kernel",
                   "void add_kernel(float*, float*, int)": "add_kernel"}
    assert left_tp == sorted([CUBLAS, ATEN]) and left_ours == ["never_in_the_trace"]


def test_shares_over_the_kernels_both_saw(trace, auto_doc):
    c = bench.compare(bench.kernel_times(trace), [auto_doc])
    total = 1000.0 * sum(d * n for d, n in TRACE.values())
    seen = 1000.0 * (3.0 * 100 + 4.0 * 10 + 0.5 * 50)
    assert c.profiler_total_ns == pytest.approx(total)
    assert [r.kernel for r in c.rows] == ["layernorm_fwd_kernel", "matmul_kernel", "add_kernel"]
    est = {k["kernel"]: k["est_gpu_ns"] for k in auto_doc["kernels"]}
    for r in c.rows:
        assert r.share_all == pytest.approx(r.profiler_ns / total)
        assert r.share_seen == pytest.approx(r.profiler_ns / seen)
        assert r.auto_shares == [pytest.approx(est[r.kernel] / sum(est.values()))]
        assert r.diff_points == [pytest.approx(100 * (r.auto_shares[0] - r.share_seen))]
    assert [r.profiler_launches for r in c.rows] == [100, 10, 50]
    assert [r.auto_launches for r in c.rows] == [1000, 10, 50]
    # layernorm alone holds >= 80% of what --auto ranked: the only one opened up.
    assert [r.picked for r in c.rows] == [True, False, False]
    assert c.held_picked == pytest.approx(300_000 / total) and c.held_ranked == pytest.approx(seen / total)
    assert c.unmatched_profiler == sorted([CUBLAS, ATEN]) and c.unmatched_auto == []
    assert c.unmatched_profiler_ns == pytest.approx(1000.0 * (10.0 * 30 + 1.5 * 20))


def test_several_auto_runs_give_each_its_share(trace, auto_doc):
    other = json.loads(json.dumps(auto_doc))
    for k in other["kernels"]:  # a second run where matmul took twice as long
        k["est_gpu_ns"] *= 2 if k["kernel"] == "matmul_kernel" else 1
    (ln, mm, _) = bench.compare(bench.kernel_times(trace), [auto_doc, other]).rows
    assert mm.auto_shares[1] > mm.auto_shares[0] and ln.auto_shares[1] < ln.auto_shares[0]
    rows = bench.compare(bench.kernel_times(trace), [auto_doc, other]).rows
    assert [sum(r.auto_shares[i] for r in rows) for i in (0, 1)] == [pytest.approx(1.0)] * 2


def test_a_hot_kernels_regions_cover_what_is_not_unattributed(trace, auto_doc):
    (hot,) = auto_doc["hot"]
    covered, left = bench.coverage(hot)
    assert left == hot["unattributed_share"] and covered == pytest.approx(1 - left)
    assert 0.8 < covered < 0.9
    row = bench.compare(bench.kernel_times(trace), [auto_doc]).rows[0]
    assert (row.covered, row.unattributed) == (covered, left)
    # a kernel without loops: its kernel region is all there is, so all of it is covered
    alone = dict(hot, regions=[r for r in hot["regions"] if r["parent"] is None], unattributed_share=0.0)
    assert bench.coverage(alone) == (1.0, 0.0)


def test_in_run_ratios_from_run_json(tmp_path):
    # Launch times (ms) in order as --measure-overhead records them: (ran plain?, ms).
    # The first pair is left out (module loading); 10 pairs after it.
    launches = [(False, 2.0), (True, 1.0)] + [x for i in range(10) for x in ((False, 1.02 + i / 1000), (True, 1.0))]
    table, _ = overhead_table([("layernorm_fwd_kernel", None, launches), ("once", None, [(False, 1.0)])])
    (tmp_path / "run.json").write_text(json.dumps({"version": 1, "format": RUN_FORMAT, "measured_overhead": table}))
    got = bench.measured_ratios(tmp_path / "run.json")
    assert set(got) == {"layernorm_fwd_kernel"}  # "once" has no pairs
    ratio, p10, p90, pairs, how = got["layernorm_fwd_kernel"]
    assert (ratio, p10, p90, pairs) == (table["layernorm_fwd_kernel"]["ratio"], table["layernorm_fwd_kernel"]["p10"],
                                        table["layernorm_fwd_kernel"]["p90"], 10)
    assert p10 <= ratio <= p90 and 1.02 < ratio < 1.03 and how == "in-run"
    assert bench.measured_ratios(tmp_path / "missing.json") == {}


def test_cross_run_ratio_over_the_plain_median():
    ratio, p10, p90, n, how = bench.cross_run_ratio([1000.0, 1000.0, 5000.0], [1010.0 + i for i in range(11)])
    assert (ratio, p10, p90, n, how) == (pytest.approx(1.015), pytest.approx(1.011), pytest.approx(1.019), 11,
                                         "cross-run")


def test_the_printed_table_is_short_and_says_the_goals(trace, auto_doc):
    c = bench.compare(bench.kernel_times(trace), [auto_doc, auto_doc])
    c.rows[0].ratio = (1.031, 1.01, 1.06, 9, "in-run")
    lines = bench.format_comparison("prog", c) + [bench.wall_line([10.0, 11.0], [21.0, 21.0], True)]
    assert len(lines) < 40 and max(map(len, lines)) < 160
    text = "\n".join(lines)
    row = next(ln for ln in lines if ln.startswith("layernorm_fwd_kernel *"))
    assert row.split()[2:4] == ["0.300", f"{100 * c.rows[0].share_all:.1f}%"]  # 100 launches of 3 us
    assert "1.031 (1.01..1.06, in-run)" in row
    assert f"hold {100 * c.held_picked:.1f}% of all kernel time (misses >= 80%)" in text
    assert ("goal kernel time <= 1.05x: per instrumented launch yes, over all launches not measured "
            "(cross-run), the program's not measured (in-run)") in text
    assert f"torch.profiler only: 2 kernel(s), {100 * c.unmatched_profiler_ns / c.profiler_total_ns:.1f}%" in text
    assert "--auto only (no torch.profiler name matched): none" in text
    assert lines[-1] == ("  wall: plain 10.5 s, --auto 21.0 s: x2.00 (1.91..2.10), 2 runs each in turn; "
                         "stdout as plain: yes")
    assert bench.wall_line([10.0, 11.0], [21.0, 21.0], True, first=42.0).endswith(
        "stdout as plain: yes; the first --auto (build cache empty) 42.0 s: x4.00")


def test_the_runner_runs_the_program_as_python_would_and_writes_the_trace(tmp_path):
    import subprocess
    import sys

    (tmp_path / "beside.py").write_text("VALUE = 5\n")
    (tmp_path / "prog.py").write_text("import sys\nfrom beside import VALUE\n"
                                      "print('argv', sys.argv[1:], VALUE)\nsys.exit(3)\n")
    trace = tmp_path / "out" / "trace.json"
    trace.parent.mkdir()
    p = subprocess.run([sys.executable, REPO / "benchmarks" / "auto_vs_torch_profiler.py", "--torch-trace", trace,
                        "--", tmp_path / "prog.py", "--steps", "2"], cwd=tmp_path, capture_output=True, text=True)
    assert p.returncode == 3 and p.stdout == "argv ['--steps', '2'] 5\n", p.stderr
    assert bench.kernel_times(json.loads(trace.read_text())) == {}  # (no GPU here: CPU ops only)


def test_an_auto_run_with_no_kernel_leaves_every_profiler_kernel_unmatched(trace):
    doc = hk.AutoReport(format=AUTO_FORMAT, version=AUTO_VERSION, run="OUT",
                        share_wanted=1.0, top_max=3, kernels=[], hot=[], exit_code=0, notes=[])
    c = bench.compare(bench.kernel_times(trace), [json.loads(json.dumps(doc))])
    assert c.rows == [] and c.unmatched_profiler == sorted(TRACE) and c.held_picked == c.held_ranked == 0
    text = "\n".join(bench.format_comparison("prog", c))
    assert "goals: not measured: no kernel both sides saw" in text
    assert "torch.profiler only: 5 kernel(s), 100.0%" in text


def test_time_over_all_launches_when_auto_timed_every_kernel(trace, auto_doc, tmp_path):
    """--auto's torch.profiler times (every launch: kept ones instrumented, the rest plain
    twins) against plain's, per opened-up kernel; not where --auto saw fewer launches."""
    run = _run_dir(tmp_path)
    device = {"kernels": [{"kernel": "layernorm_fwd_kernel", "launches": 100, "ns": 100 * 3030.0},
                          {"kernel": "matmul_kernel", "launches": 8, "ns": 8 * 4000.0},
                          {"kernel": "add_kernel", "launches": 50, "ns": 50 * 500.0}]}
    doc = dict(auto_doc, kernels=hk.rank_kernels(run_report([run], jobs=1).summary, share=1.0, top=2,
                                                 device=device))
    doc = json.loads(json.dumps(doc))
    rows = {r.kernel: r for r in bench.compare(bench.kernel_times(trace), [doc]).rows}
    assert rows["layernorm_fwd_kernel"].picked and rows["matmul_kernel"].picked
    assert rows["layernorm_fwd_kernel"].all_launches_ratio == pytest.approx(1.01)
    assert rows["matmul_kernel"].all_launches_ratio is None  # 8 launches timed of the trace's 10
    assert rows["add_kernel"].all_launches_ratio == pytest.approx(1.0)
    text = "\n".join(bench.format_comparison("prog", bench.compare(bench.kernel_times(trace), [doc])))
    assert "over all launches not measured" in text  # (matmul's is missing)
    assert "layernorm_fwd_kernel 1.010x, matmul_kernel -" in text


def test_in_run_kernel_time_takes_each_kept_launch_less_its_measured_extra(trace, auto_doc, tmp_path):
    """The program's kernel time under --auto over plain's, in the run: every kernel's
    torch.profiler time, less (kept launches x the extra --measure-overhead measured a launch)."""
    run = _run_dir(tmp_path)
    device = {"kernels": [{"kernel": "layernorm_fwd_kernel", "launches": 1000, "ns": 1000 * 3000.0},
                          {"kernel": CUBLAS, "launches": 10, "ns": 10 * 100_000.0}]}
    doc = json.loads(json.dumps(dict(auto_doc, kernels=hk.rank_kernels(
        run_report([run], jobs=1).summary, share=1.0, top=1, device=device))))
    ln = next(k for k in doc["kernels"] if k["kernel"] == "layernorm_fwd_kernel")
    assert ln["top"] and ln["launches_kept"] == 1 and ln["measured"]
    # 10 pairs of 3.3 us instrumented against 3.0 us plain: +300 ns a launch
    launches = [(False, 0.0033), (True, 0.003)] * 11
    table, _ = overhead_table([("layernorm_fwd_kernel", None, launches)])
    (tmp_path / "run.json").write_text(json.dumps({"version": 1, "format": RUN_FORMAT, "measured_overhead": table}))
    extra = bench.measured_extra_ns(tmp_path / "run.json")
    assert extra == {"layernorm_fwd_kernel": pytest.approx(300.0)}
    program, kernels, unmeasured = bench.in_run_whole([doc, doc], extra)
    # (matmul's and add's kept launches: their kernels had no extra measured)
    kept = {k["kernel"]: k["launches_kept"] for k in doc["kernels"]}
    assert unmeasured == kept["matmul_kernel"] + kept["add_kernel"] > 0
    # 1 kept launch of 1000: 3,000,000 ns over 2,999,700; all kernels: 4,000,000 over 3,999,700
    assert kernels == {"layernorm_fwd_kernel": [pytest.approx(3e6 / (3e6 - 300))] * 2}
    assert program == [pytest.approx(4e6 / (4e6 - 300))] * 2
    assert bench.in_run_whole([doc], {})[:2] == ([], {})  # (no --measure-overhead run: nothing to say)
    c = bench.compare(bench.kernel_times(trace), [doc, doc])
    c.in_run_program, c.in_run_kernels, c.in_run_unmeasured = program, kernels, unmeasured
    text = "\n".join(bench.format_comparison("prog", c))
    assert "the program's yes (in-run)" in text
    assert ("in-run (each kept launch less its measured extra): the program's kernel time 1.0001x "
            f"(1.0001..1.0001); opened up: layernorm_fwd_kernel 1.0001x; {unmeasured} kept launches of kernels "
            "with no extra measured left out") in text


def _detail_run_json(path, n: int, kept: int, builds: int = 1, messages=()):
    """The detailed run's run.json: ``n`` launches of layernorm_fwd_kernel counted, ``kept`` kept,
    ``builds`` instrumented builds of it, the run's ``messages``."""
    compiled = {f"h{i}": {"kernel": "layernorm_fwd_kernel", "hash": f"h{i}", "instrumented": True}
                for i in range(builds)}
    compiled["p"] = {"kernel": "matmul_kernel", "hash": "p", "instrumented": False}
    path.write_text(json.dumps({"version": 1, "format": RUN_FORMAT, "launch_counts": {"layernorm_fwd_kernel": n},
                                "launches": [{"kernel": "layernorm_fwd_kernel"}] * kept, "compiled": compiled,
                                "messages": list(messages)}))
    return path


def test_the_alternated_detail_run_splits_kept_from_plain_launches_in_order(tmp_path):
    """Every second launch kept (ALTERNATE): the even-numbered launches ran instrumented, in
    one run; the first pair is left out, and a split that the counts do not bear is refused."""
    assert KeepPolicy.parse(bench.ALTERNATE).next_after(0) == 2  # (launch 2 is the first kept)
    doc = {"traceEvents": []}
    for i in range(20):  # 1-based launch i+1: odd plain 3.0 us, even instrumented 3.3 us; launch 1 slow
        dur = 9.0 if i == 0 else 3.3 if i % 2 else 3.0
        doc["traceEvents"].append(_kernel_event("layernorm_fwd_kernel", 100.0 * i, dur))
    doc["traceEvents"].reverse()  # (the trace's order is not the launches': ordered by start)
    times = bench.kernel_times(doc)
    ratios, extra, notes = bench.alternated(times, _detail_run_json(tmp_path / "run.json", 20, 10))
    assert notes == []
    ratio, p10, p90, pairs, how = ratios["layernorm_fwd_kernel"]
    assert (ratio, p10, p90, pairs, how) == (pytest.approx(1.1), pytest.approx(1.1), pytest.approx(1.1), 9, "in-run")
    assert extra == {"layernorm_fwd_kernel": pytest.approx(300.0)}
    for n, kept, builds, why in [(22, 10, 1, "the trace saw 20 launches, the tool 22"),
                                 (20, 10, 2, "2 instrumented builds"), (20, 11, 1, "11 launches kept of 20")]:
        ratios, extra, notes = bench.alternated(times, _detail_run_json(tmp_path / "run.json", n, kept, builds))
        assert (ratios, extra) == ({}, {}) and notes == [f"layernorm_fwd_kernel: launches not split in-run ({why})"]
    # (the session's own note when a kernel's plain build could not serve its launches not kept)
    no_twin = ["note: kernel layernorm_fwd_kernel: no plain twin (its plain build differs in num_warps); its "
               "launches not kept run the instrumented build (their kernel time includes the records)"]
    got = bench.alternated(times, _detail_run_json(tmp_path / "run.json", 20, 10, messages=no_twin))
    assert got == ({}, {}, ["layernorm_fwd_kernel: launches not split in-run (no plain twin)"])
    assert bench.alternated(times, tmp_path / "missing.json")[2] == [
        f"{tmp_path / 'missing.json'}: no run index: the detailed run's launches not split"]
