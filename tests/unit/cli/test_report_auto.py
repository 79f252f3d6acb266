"""``report OUT`` on a ``profile --auto`` directory: the ranking of OUT/auto.json (built from real
H100 buffers, as ``api.profile_auto`` builds it) printed before the usual report, carried under
``auto`` by ``--json``; a damaged or foreign auto.json is one warning line and the report still
prints."""

from __future__ import annotations

import html
import json
import re
import shutil

import pytest
from helpers import DATA, browser
from helpers.cli import invoke

from proton_inject.analyze import hot_kernels as hk
from proton_inject.analyze.report import run_report
from proton_inject.analyze.summary_schema import ReportSummary
from proton_inject.formats import auto_report
from proton_inject.formats.run_index import RUN_FORMAT

# (dataset, raw launch file stem in it, kernel): real launches of two Triton kernels, layernorm's
# with its loops and iterations (and its IR beside it), as one --auto run keeps them; the
# device's times of every kernel, cuBLAS's too, as its device-kernels.json holds them
LAUNCHES = [("h100-direct-loops", "00000-layernorm_fwd_kernel", "layernorm_fwd_kernel"),
            ("h100-triton3.6", "profile_scratch_add", "add_kernel")]
COUNTS = {"layernorm_fwd_kernel": {"ran": 1000}, "add_kernel": {"ran": 1}}
DEVICE = [{"kernel": "nvjet_sm90_gemm", "ns": 2.0e6, "launches": 40},
          {"kernel": "layernorm_fwd_kernel", "ns": 1.0e6, "launches": 1000},
          {"kernel": "add_kernel", "ns": 1.0e3, "launches": 1}]


@pytest.fixture(scope="module")
def profiled(tmp_path_factory):
    """OUT of ``profile --auto``: two kernels' launches in OUT/raw/ (run.json counting their
    launches), layernorm's with loops and iterations, OUT/device-kernels.json and OUT/auto.json."""
    out = tmp_path_factory.mktemp("auto") / "out"
    (out / "raw").mkdir(parents=True)
    for i, (ds, stem, kernel) in enumerate(LAUNCHES):
        for ext in (".json", ".bin.gz"):
            shutil.copy(DATA / ds / f"{stem}{ext}", out / "raw" / f"{i:05d}-{kernel}{ext}")
    shutil.copy(DATA / "h100-direct-loops" / "layernorm_fwd_kernel.ttgir", out / "raw")
    (out / "run.json").write_text(json.dumps({
        "version": 1, "format": RUN_FORMAT, "launch_counts": COUNTS,
        "launches": [{"kernel": k, "tuning": False} for *_, k in LAUNCHES]}))
    device = auto_report.read_device_kernels(auto_report.write_device_kernels(out, DEVICE, []))
    summary = run_report([out / "raw"], source=True, jobs=1).summary
    ranked = hk.rank_kernels(summary, device=device)
    doc = auto_report.AutoReport(
        format=auto_report.AUTO_FORMAT, version=auto_report.AUTO_VERSION, run=str(out), share_wanted=0.8,
        top_max=3, kernels=ranked, hot=hk.hot_kernels(summary, [k["kernel"] for k in ranked if k["top"]]),
        exit_code=0, notes=[])
    auto_report.write_auto(out, doc)
    return out, json.loads(json.dumps(doc))


@pytest.fixture(scope="module")
def usual(profiled, tmp_path_factory):
    """The run's report alone (its launches where no auto.json is)."""
    plain = tmp_path_factory.mktemp("plain") / "raw"
    shutil.copytree(profiled[0] / "raw", plain)
    return invoke(["report", plain, "-j", "1"], code=0).stdout


def test_report_prints_the_ranking_then_the_usual_report(profiled, usual):
    out, doc = profiled
    res = invoke(["report", out, "-j", "1"], code=0)
    text = hk.format_auto(doc)
    assert res.stdout == text + "\n\n" + usual
    assert text.startswith(f"where the GPU time went ({out}: 3 kernel(s), 3.001 ms of kernel time)")
    ranked = [ln.split() for ln in text.splitlines()[2:5]]
    assert [r[3] for r in ranked] == ["nvjet_sm90_gemm", "layernorm_fwd_kernel", "add_kernel"]
    assert ranked[0][-2:] == ["(not", "instrumented)"]
    assert ranked[1][-1] == "*" and ranked[1][2] == "1,000" and ranked[1][0] == "33.3%"
    assert "layernorm_fwd_kernel" in text.split("\n\n")[1] and "unattributed" in text
    assert "warning" not in res.stderr
    # its raw/ names the same run: the same ranking
    assert invoke(["report", out / "raw", "-j", "1"], code=0).stdout == res.stdout


def test_report_json_carries_it_under_auto(profiled):
    out, doc = profiled
    got = json.loads(invoke(["report", out, "--json", "-j", "1"], code=0).stdout)
    assert got["auto"] == doc
    assert "auto" in ReportSummary.__optional_keys__
    assert {k["kernel"] for k in got["kernels"]} == {"layernorm_fwd_kernel", "add_kernel"}


def _set_share(doc):
    doc["kernels"][0]["share"] = "most"


def _drop_hot(doc):
    del doc["hot"]


def _bad_line(doc):
    doc["hot"][0]["regions"][1]["lines"] = {"layernorm.py": [[20, "x"]]}


@pytest.mark.parametrize(("damage", "said"), [
    ("{\"format\": ", "not valid JSON"),
    ({"format": "proton-inject-report", "version": 1}, "not a `profile --auto` file"),
    ({"format": auto_report.AUTO_FORMAT, "version": 9}, "version 9"),
    (_set_share, "kernels[0].share is a string, not a number or null"),
    (_drop_hot, "hot is missing"),
    (_bad_line, "hot[0].regions[1].lines.layernorm.py[0][1] is a string, not an integer"),
])
def test_a_damaged_auto_json_is_one_warning_and_the_report_prints(profiled, usual, tmp_path, damage, said):
    out = tmp_path / "out"
    shutil.copytree(profiled[0], out)
    if callable(damage):
        doc = json.loads((out / "auto.json").read_text())
        damage(doc)
        damage = json.dumps(doc)
    elif isinstance(damage, dict):
        damage = json.dumps(damage)
    (out / "auto.json").write_text(damage)
    res = invoke(["report", out, "-j", "1"], code=0)
    warns = [ln for ln in res.stderr.splitlines() if "warning" in ln]
    assert len(warns) == 1 and f"{out / 'auto.json'}: " in warns[0] and said in warns[0], res.stderr
    assert "Traceback" not in res.output
    assert res.stdout == usual
    assert "auto" not in json.loads(invoke(["report", out, "--json", "-j", "1"], code=0).stdout)


def test_an_auto_json_that_is_a_directory_is_a_warning_too(profiled, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(profiled[0], out)
    (out / "auto.json").unlink()
    (out / "auto.json").mkdir()
    res = invoke(["report", out, "-j", "1", "-v"], code=0)
    assert f"{out / 'auto.json'}: is a directory" in res.stderr and res.stdout.startswith("layernorm_fwd_kernel [")
    assert "(the ranking is left out of this report)" in res.stderr


def test_the_page_shows_the_ranking_first(profiled, tmp_path):
    out, doc = profiled
    page_file = tmp_path / "report.html"
    invoke(["report", out, "--html", page_file, "-j", "1"], code=0)
    page = page_file.read_text()
    section = re.search(r"<section id=auto><h2>[^<]*</h2><pre class=auto>(.*?)</pre></section>", page, re.S)
    assert section and html.unescape(section.group(1)) == hk.format_auto(doc)
    assert section.start() < page.index("<table class='sortable kernels'")


@browser.requires_chromium
def test_the_page_with_the_ranking_loads_in_chromium(profiled, tmp_path):
    page_file = tmp_path / "report.html"
    invoke(["report", profiled[0], "--html", page_file, "-j", "1"], code=0)
    got = browser.load(page_file)
    assert got.console == [], got.console
    assert 'data-ready="1"' in got.dom and "<section id=\"auto\">" in got.dom, got.stderr[-2000:]


def test_a_runs_device_kernel_times_are_not_taken_for_a_trace(tmp_path):
    out = tmp_path / "out"
    auto_report.write_device_kernels(out, [{"kernel": "nvjet_x", "ns": 5.0, "launches": 1}], [])
    res = invoke(["report", str(out)], code=2)
    assert "holds neither raw launches" in res.output, res.output
