"""``profile --auto``'s analysis on real H100 buffers: the run's kernels ranked by GPU time
(mean wall of the kept launches x launches counted in run.json), the top ones picked, and a
detailed run's kernel split over its regions and source lines, as text and as auto.json's keys."""

from __future__ import annotations

import json
import shutil

import pytest
from helpers import DATA

from proton_inject.analyze import hot_kernels as hk
from proton_inject.analyze.report import run_report
from proton_inject.errors import UserError
from proton_inject.formats.auto_report import (
    AUTO_FORMAT,
    AUTO_VERSION,
    DEVICE_FORMAT,
    read_auto,
    read_device_kernels,
    write_auto,
    write_device_kernels,
)
from proton_inject.formats.run_index import RUN_FORMAT

# (dataset, raw launch file stem in it, kernel): real launches of three kernels
LAUNCHES = [("h100-shortlaunch", "00000-matmul_kernel", "matmul_kernel"),
            ("h100-shortlaunch", "00001-matmul_kernel", "matmul_kernel"),
            ("h100-direct", "00000-layernorm_fwd_kernel", "layernorm_fwd_kernel"),
            ("h100-triton3.6", "profile_scratch_add", "add_kernel")]


def _expected_wall(dataset: str, kernel: str) -> list[float]:
    """kernel_wall_ns of each summary entry of ``kernel`` in the bundled report of ``dataset``."""
    text = (DATA / "expected" / dataset / "report.json").read_text().split("--- stderr")[0]
    return [k["kernel_wall_ns"] for k in json.loads(text)["kernels"] if k["kernel"] == kernel]


def _auto_run(tmp_path, counts: dict[str, int] | None):
    """An --auto run's profile directory from the real launches, with run.json counting
    ``counts`` launches per kernel (None: an index from before launches were counted)."""
    run = tmp_path / "out"
    raw = run / "raw"
    raw.mkdir(parents=True)
    for i, (ds, stem, kernel) in enumerate(LAUNCHES):
        shutil.copy(DATA / ds / f"{stem}.json", raw / f"{i:05d}-{kernel}.json")
        shutil.copy(DATA / ds / f"{stem}.bin.gz", raw / f"{i:05d}-{kernel}.bin.gz")
    index = {"version": 1, "format": RUN_FORMAT, "launch_counts": counts,
             "launches": [{"kernel": k, "tuning": False} for _, _, k in LAUNCHES]}
    (run / "run.json").write_text(json.dumps(index))
    return run_report([run], jobs=1).summary


def test_kernels_ranked_by_mean_wall_times_launches_counted(tmp_path):
    summary = _auto_run(tmp_path, {"matmul_kernel": 4000, "layernorm_fwd_kernel": 50, "add_kernel": 100})
    rows = hk.rank_kernels(summary, share=0.8, top=3)
    mm = sum(_expected_wall("h100-shortlaunch", "matmul_kernel")) / 2
    ln = sum(_expected_wall("h100-direct", "layernorm_fwd_kernel"))
    add = sum(_expected_wall("h100-triton3.6", "add_kernel"))
    assert [r["kernel"] for r in rows] == ["matmul_kernel", "layernorm_fwd_kernel", "add_kernel"]
    want = {"matmul_kernel": (mm, 4000, 2), "layernorm_fwd_kernel": (ln, 50, 1), "add_kernel": (add, 100, 1)}
    for r in rows:
        per, seen, kept = want[r["kernel"]]
        assert r["ns_per_launch"] == pytest.approx(per)
        assert (r["launches_seen"], r["launches_kept"]) == (seen, kept)
        assert r["est_gpu_ns"] == pytest.approx(per * seen)
    assert sum(r["share"] for r in rows) == pytest.approx(1.0)
    assert rows[0]["share"] > 0.8  # matmul alone holds >= 80%: the only one opened up
    assert [r["top"] for r in rows] == [True, False, False]


def test_the_counts_decide_the_order_and_the_bounds_pick(tmp_path):
    summary = _auto_run(tmp_path, {"matmul_kernel": 1, "layernorm_fwd_kernel": 1, "add_kernel": 10**6})
    rows = hk.rank_kernels(summary, share=0.8, top=3)
    assert rows[0]["kernel"] == "add_kernel" and rows[0]["top"]
    # Every kernel wanted: --auto-top bounds them; a share of 1 takes them all.
    assert [r["top"] for r in hk.rank_kernels(summary, share=1.0, top=2)] == [True, True, False]
    assert all(r["top"] for r in hk.rank_kernels(summary, share=1.0, top=3))
    assert [r["top"] for r in hk.rank_kernels(summary, share=1.0, top=1)] == [True, False, False]


def test_without_counts_the_kept_launches_are_the_launches_seen(tmp_path):
    rows = {r["kernel"]: r for r in hk.rank_kernels(_auto_run(tmp_path, None))}
    assert rows["matmul_kernel"]["launches_seen"] == 2
    assert rows["add_kernel"]["launches_seen"] == 1


def test_a_counted_kernel_with_no_launch_decoded_is_listed_unranked(tmp_path):
    summary = _auto_run(tmp_path, {"matmul_kernel": 3, "never_kept": 99})
    rows = hk.rank_kernels(summary)
    last = rows[-1]
    assert last["kernel"] == "never_kept" and last["launches_seen"] == 99
    assert last["est_gpu_ns"] is None and last["share"] is None and not last["top"]


def _device(**ns_launches: tuple[float, int]) -> dict:
    """A run's device-kernels.json as written and read back."""
    return {"format": DEVICE_FORMAT, "version": 1, "notes": [],
            "kernels": [{"kernel": k, "ns": ns, "launches": n} for k, (ns, n) in ns_launches.items()]}


def test_every_kernel_timed_on_the_device_shares_all_of_the_time(tmp_path):
    """With the run's device times, a kernel's time is every launch's measured time and
    the shares are over all kernels, cuBLAS's too; only instrumented ones are opened up."""
    summary = _auto_run(tmp_path, {"matmul_kernel": 4000, "layernorm_fwd_kernel": 50, "add_kernel": 100})
    device = _device(nvjet_sm90_tst_128x128=(8e6, 300), matmul_kernel=(1e6, 4000),
                     layernorm_fwd_kernel=(6e5, 50), elementwise_kernel=(4e5, 900))
    rows = hk.rank_kernels(summary, share=0.8, top=3, device=device)
    by = {r["kernel"]: r for r in rows}
    assert [r["kernel"] for r in rows[:4]] == ["nvjet_sm90_tst_128x128", "matmul_kernel",
                                               "layernorm_fwd_kernel", "elementwise_kernel"]
    total = 8e6 + 1e6 + 6e5 + 4e5 + by["add_kernel"]["est_gpu_ns"]  # (add: not in the device table)
    assert by["nvjet_sm90_tst_128x128"]["share"] == pytest.approx(8e6 / total)
    assert sum(r["share"] for r in rows) == pytest.approx(1.0)
    assert by["matmul_kernel"]["measured"] and by["matmul_kernel"]["ns_per_launch"] == pytest.approx(250)
    assert by["matmul_kernel"]["launches_kept"] == 2 and by["matmul_kernel"]["launches_seen"] == 4000
    assert not by["add_kernel"]["measured"] and by["add_kernel"]["instrumented"]
    assert not by["nvjet_sm90_tst_128x128"]["instrumented"] and not by["elementwise_kernel"]["instrumented"]
    # cuBLAS holds 80%: no instrumented kernel reaches the share, so --auto-top bounds the picks,
    # and a kernel not instrumented is never one of them.
    assert {r["kernel"] for r in rows if r["top"]} == {"matmul_kernel", "layernorm_fwd_kernel", "add_kernel"}
    assert {r["kernel"] for r in hk.rank_kernels(summary, share=0.8, top=1, device=device) if r["top"]} \
        == {"matmul_kernel"}
    doc = hk.AutoReport(format=AUTO_FORMAT, version=AUTO_VERSION, run="OUT", share_wanted=0.8,
                        top_max=3, kernels=rows, hot=[], exit_code=0, notes=[])
    text = hk.format_auto(doc)
    assert "nvjet_sm90_tst_128x128  (not instrumented)" in text
    inst = (1e6 + 6e5 + by["add_kernel"]["est_gpu_ns"]) / total
    assert f"the instrumented (Triton) kernels hold {100 * inst:.1f}% of it" in text
    assert "est. ms" not in text
    # matmul: 2 of its 4,000 timed launches kept, layernorm 1 of 50 (add has no device time)
    assert "3 of the instrumented kernels' 4,050 launches were kept" in text


def test_a_long_ranking_prints_the_first_kernels_and_sums_the_rest(tmp_path):
    summary = _auto_run(tmp_path, {"matmul_kernel": 1})
    long = "void at::native::vectorized_elementwise_kernel<8, at::native::CUDAFunctor_add<c10::BFloat16>, " \
        "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, std::array<char*, 3ul>)"
    device = _device(**{f"k{i:02d}": (1000.0 * (40 - i), 1) for i in range(30)}, **{long: (1e6, 5)})
    rows = hk.rank_kernels(summary, device=device)
    doc = hk.AutoReport(format=AUTO_FORMAT, version=AUTO_VERSION, run="OUT", share_wanted=0.8,
                        top_max=3, kernels=rows, hot=[], exit_code=0, notes=[])
    lines = hk.format_auto(doc).splitlines()
    more = next(ln for ln in lines if "more kernels" in ln)
    rest = rows[hk.SHOWN:]
    assert f"({len(rest)} more kernels: auto.json lists all)" in more
    assert more.split()[0] == f"{100 * sum(r['share'] for r in rest):.1f}%"
    assert not any(ln.split()[-1] == rows[-1]["kernel"] for ln in lines if ln.split())
    cut = next(ln for ln in lines if "vectorized_elementwise_kernel" in ln)  # (cut in the middle)
    assert cut.endswith("(not instrumented)") and "~" in cut and long not in cut
    assert len(cut.split("  ")[-2].strip()) == hk.NAME_WIDTH and cut.split("  ")[-2].endswith(long[-30:])


def test_device_kernel_times_round_trip_and_a_damaged_file_is_named(tmp_path):
    kernels = [{"kernel": "a", "ns": 5.0, "launches": 2}, {"kernel": "b", "ns": 9.0, "launches": 1}]
    path = write_device_kernels(tmp_path, kernels, ["a note"])
    doc = read_device_kernels(path)
    assert [k["kernel"] for k in doc["kernels"]] == ["b", "a"] and doc["notes"] == ["a note"]
    bad = json.loads(path.read_text())
    bad["kernels"][0]["ns"] = "x"
    path.write_text(json.dumps(bad))
    with pytest.raises(UserError, match=r"device-kernels.json: kernels\[0\].ns is a string, not a number"):
        read_device_kernels(path)
    path.write_text(json.dumps({"format": "other", "version": 1}))
    with pytest.raises(UserError, match="not a device kernel times file"):
        read_device_kernels(path)


@pytest.fixture(scope="module")
def detail():
    """The detailed run of layernorm (kernel, loops and iterations; its IR beside it)."""
    summary = run_report([DATA / "h100-direct-loops"], source=True, jobs=1).summary
    return summary, hk.hot_kernels(summary, ["layernorm_fwd_kernel"])


def test_a_hot_kernel_split_over_its_regions_and_lines(detail):
    summary, (hot,) = detail
    regions = {r["scope"]: r for r in summary["kernels"][0]["regions"]}
    kernel_ns = regions[0]["ns"]["total"]
    assert hot["kernel_ns"] == pytest.approx(kernel_ns)
    # Depth first, the longest first among siblings; the loops are the kernel's children.
    assert [r["scope"] for r in hot["regions"]] == [0, 1, 2, 5, 6, 3, 4]
    assert [r["depth"] for r in hot["regions"]] == [0, 1, 2, 1, 2, 1, 2]
    for r in hot["regions"]:
        assert r["share_of_kernel"] == pytest.approx(regions[r["scope"]]["ns"]["total"] / kernel_ns)
    left = kernel_ns - sum(regions[s]["ns"]["total"] for s in (1, 3, 5))
    assert hot["unattributed_ns"] == pytest.approx(left)
    assert hot["unattributed_share"] == pytest.approx(left / kernel_ns)
    assert 0.1 < hot["unattributed_share"] < 0.2
    # Each region's lines are those where it is the innermost (examples/layernorm.py).
    lines = {r["scope"]: {f.rsplit("/", 1)[-1]: s for f, s in r["lines"].items()} for r in hot["regions"]}
    assert lines[2] == {"layernorm.py": [[21, 22]]}
    assert lines[1] == {"layernorm.py": [[20, 20]]}
    assert lines[6] == {"layernorm.py": [[36, 42]]}
    assert lines[0] == {"layernorm.py": [[15, 17], [23, 23], [31, 33]]}


def test_the_printed_ranking_and_hot_kernel(tmp_path, detail):
    summary = _auto_run(tmp_path, {"matmul_kernel": 1, "layernorm_fwd_kernel": 1000, "add_kernel": 1})
    rows = hk.rank_kernels(summary)
    doc = hk.AutoReport(format=AUTO_FORMAT, version=AUTO_VERSION, run="OUT",
                        share_wanted=0.8, top_max=3, kernels=rows, hot=detail[1], exit_code=0, notes=[])
    text = hk.format_auto(doc)
    lines = text.splitlines()
    first = lines.index(next(ln for ln in lines if ln.strip().startswith("share")))
    ranked = lines[first + 1:first + 4]
    assert [ln.split()[3] for ln in ranked] == ["layernorm_fwd_kernel", "matmul_kernel", "add_kernel"]
    assert ranked[0].endswith("*") and not ranked[1].endswith("*")
    assert ranked[0].split()[2] == "1,000"
    assert f"{100 * rows[0]['share']:.1f}%" == ranked[0].split()[0]
    hot = detail[1][0]
    assert f"layernorm_fwd_kernel [{hot['config']}]: {100 * rows[0]['share']:.1f}% of GPU time" in text
    assert "    iter partial @layernorm.py:20" in text and "layernorm.py:21-22" in text
    assert f"{100 * hot['unattributed_share']:.1f}%" in next(ln for ln in lines if "unattributed" in ln)


def test_a_kernel_without_loops_has_nothing_unattributed(detail):
    """A loop-free kernel (most of a torch.compile'd model's) records its kernel region alone:
    that region, over its lines, is all there is to split its time into, so nothing is
    "unattributed" (was 100%, printed under a 100% kernel row). Layer norm's real report,
    pruned to its kernel region as such a kernel's report reads."""
    summary, _ = detail
    k = json.loads(json.dumps(summary["kernels"][0]))
    k["regions"] = [r for r in k["regions"] if r["scope"] == 0]
    (hot,) = hk.hot_kernels({"kernels": [k]}, [k["kernel"]])
    assert hot["unattributed_ns"] == 0.0 and hot["unattributed_share"] == 0.0
    doc = hk.AutoReport(format=AUTO_FORMAT, version=AUTO_VERSION, run="OUT", share_wanted=0.8, top_max=3,
                        kernels=hk.rank_kernels({"kernels": [k]}), hot=[hot], exit_code=0, notes=[])
    text = hk.format_auto(doc)
    assert "(no loop in it: the kernel region holds all its time, over the lines above)" in text
    assert "unattributed" not in text


def test_a_run_with_nothing_to_rank():
    doc = hk.AutoReport(format=AUTO_FORMAT, version=AUTO_VERSION, run="OUT",
                        share_wanted=0.8, top_max=3, kernels=[], hot=[], exit_code=0,
                        notes=["no detailed run: no kernel to open up"])
    assert hk.format_auto(doc).splitlines() == [
        "where the GPU time went: the run (OUT) holds no kernel launch to rank",
        "note: no detailed run: no kernel to open up"]


def _declared(d: dict, td) -> None:
    assert set(d) == td.__required_keys__ | td.__optional_keys__, (set(d), td.__name__)


def test_auto_json_has_the_declared_keys(tmp_path, detail):
    rows = hk.rank_kernels(_auto_run(tmp_path, {"matmul_kernel": 5}))
    doc = hk.AutoReport(format=AUTO_FORMAT, version=AUTO_VERSION, run="OUT", share_wanted=0.8,
                        top_max=3, kernels=rows, hot=detail[1], exit_code=0, notes=[])
    assert read_auto(write_auto(tmp_path, doc)) == json.loads(json.dumps(doc))  # checked as written
    doc = json.loads(json.dumps(doc))
    _declared(doc, hk.AutoReport)
    for k in doc["kernels"]:
        _declared(k, hk.KernelShare)
    for h in doc["hot"]:
        _declared(h, hk.HotKernel)
        for r in h["regions"]:
            _declared(r, hk.HotRegion)
