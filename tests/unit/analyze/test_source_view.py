"""`report --source` on the real H100 buffers and the instrumented IR that produced them: the
lines each region covers come from the IR's ops (loads hoisted out of a loop stay outside its
iterations), with fallbacks that say what is missing."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from proton_inject.analyze.report import run_report
from proton_inject.analyze.source_view import format_source
from proton_inject.cli import main
from proton_inject.formats.raw import load_raw, save_raw

REPO = Path(__file__).resolve().parents[3]
DATA = REPO / "tests" / "data" / "h100-triton3.6"
LOOPS = REPO / "tests" / "data" / "h100-direct-loops"
pytestmark = pytest.mark.filterwarnings("ignore::proton_inject.analyze.issues.DecodeWarning")


def _lines(kernel: dict, file_index: int = 0) -> dict[int, dict]:
    return {r["line"]: r for r in kernel["source"]["files"][file_index]["lines"]}


def _add_only(tmp: Path, with_ir: bool = True, with_source: bool = True) -> Path:
    """The add kernel's launch (and its IR, its source) copied into ``tmp``."""
    tmp.mkdir(parents=True, exist_ok=True)
    for name in ["profile_scratch_add.json", "profile_scratch_add.bin.gz"] + \
            (["add_kernel.ttgir"] if with_ir else []) + (["kernels.py"] if with_source else []):
        shutil.copy(DATA / name, tmp / name)
    return tmp


@pytest.fixture(scope="module")
def both():
    return run_report([DATA], as_json=True, source=True).summary["kernels"]


def test_regions_cover_the_lines_of_their_ops(both):
    add, mm = both
    src = add["source"]
    assert src["ir"] == str(DATA / "add_kernel.ttgir") and src["note"] is None
    [f] = src["files"]
    assert f["path"] == str(DATA / "kernels.py") and f["note"] is None
    lines = _lines(add)
    # the def line starts the view; no op of it is inside a region
    assert min(lines) == 4 and lines[4]["regions"] == [] and lines[4]["text"].startswith("def add_kernel")
    # scope 0 "kernel", 1 "iter" (outermost first); the loads of line 10-11 were hoisted out of
    # the loop by the compiler, so only the kernel region covers them
    assert lines[12]["regions"] == [0, 1] and lines[12]["text"].strip() == "acc += x * y + i"
    assert lines[10]["regions"] == [0] and lines[11]["regions"] == [0]
    assert lines[13]["regions"] == [0] and max(lines) == 13
    # mm: the kernel region lost its instances to the wrapped buffer: only iter (scope 1) shows;
    # lines after the loop are listed, covered by nothing
    m = _lines(mm)
    assert m[31]["regions"] == [1] and "tl.dot" in m[31]["text"]
    assert m[35]["regions"] == [] and "tl.store" in m[35]["text"] and m[16]["text"].startswith("def mm_kernel")


def test_a_few_kernels_find_their_ir_among_many_launches():
    """``profile --auto`` gives ``attach`` only the kernels it opened and every raw launch of
    the run: the search for each kernel's first launch must not stop once it has met as many
    kernels as were asked for (it did: the opened Inductor kernels showed "from a trace: no
    instrumented IR" on the H200)."""
    from proton_inject.analyze.source_view import attach

    summary = run_report([DATA], as_json=True).summary
    mm = next(k for k in summary["kernels"] if k["kernel"] == "mm_kernel")
    raws = [DATA / "profile_scratch_add.json", DATA / "profile_scratch_mm.json"]  # add's first
    attach({"kernels": [mm]}, raws)
    assert mm["source"]["ir"] == str(DATA / "mm_kernel.ttgir") and mm["source"]["note"] is None


def test_text_shows_the_innermost_region_where_it_changes(both):
    text = format_source({"kernels": both})
    rows = {ln.split()[0]: ln for ln in text.splitlines() if ln.strip()[:2].strip().isdigit()}
    assert "60.8%" in rows["12"] and " iter " in rows["12"] and "acc += x * y + i" in rows["12"]
    assert "83.9%" in rows["5"] and " kernel " in rows["5"]
    assert '"' in rows["6"].split("offs")[0] and "%" not in rows["6"]  # same region: ditto
    assert f"source of add_kernel, regions from {DATA / 'add_kernel.ttgir'}" in text


def test_source_missing_says_so_and_lists_region_lines(tmp_path, monkeypatch):
    d = _add_only(tmp_path / "run", with_source=False)
    monkeypatch.chdir(tmp_path)
    [k] = run_report([d], source=True).summary["kernels"]
    [f] = k["source"]["files"]
    assert f["path"] is None and f["note"].startswith("kernels.py: source not found under ")
    lines = _lines(k)
    assert sorted(lines) == [5, 6, 7, 9, 10, 11, 12, 13]  # covered lines only: no def, no line 8
    assert all(r["text"] is None for r in lines.values())
    text = run_report([d], source=True).text
    assert text.count("kernels.py: source not found") == 1


def test_ir_of_another_build_falls_back_to_region_lines(tmp_path):
    d = _add_only(tmp_path / "run")
    ir = d / "add_kernel.ttgir"
    ir.write_text(ir.read_text().replace('"iter"', '"other"'))
    [k] = run_report([d], source=True).summary["kernels"]
    src = k["source"]
    assert src["ir"] is None and "its records are not this launch's regions" in src["note"]
    lines = _lines(k)  # the launch's scope_locs: kernel at 4, iter at 9
    assert {n: r["regions"] for n, r in lines.items() if r["regions"]} == {4: [0], 9: [1]}
    # without the IR the end of the kernel is unknown: the view ends at the last region's line
    assert max(lines) == 9 and lines[9]["text"].strip() == "for i in range(0, 8):"


@pytest.mark.parametrize("layout", ["profile", "run"])
def test_run_layouts_find_ir_by_hash(tmp_path, layout):
    """``profile -o out`` keeps raw/ and ir/<hash>/<kernel>.ttgir; ``run TREE -o out`` names
    the tree it was given in run.json."""
    buf, meta = load_raw(DATA / "profile_scratch_add.json")
    meta.hash = "ABC"
    save_raw(tmp_path / "out" / "raw" / "00000-add_kernel", buf, meta)
    tree = tmp_path / "out" / "ir" if layout == "profile" else tmp_path / "instrumented"
    if layout == "run":
        (tmp_path / "out" / "run.json").write_text(json.dumps(
            {"format": "proton-inject-run", "version": 1, "tree": str(tree)}))
    (tree / "ABC").mkdir(parents=True)
    shutil.copy(DATA / "add_kernel.ttgir", tree / "ABC" / "add_kernel.ttgir")
    [k] = run_report([tmp_path / "out"], source=True, source_root=DATA).summary["kernels"]
    assert k["source"]["ir"] == str(tree / "ABC" / "add_kernel.ttgir")
    assert _lines(k)[12]["regions"] == [0, 1]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_source_is_refused_without_blocking(tmp_path):
    d = _add_only(tmp_path / "run", with_source=False)
    os.mkfifo(d / "kernels.py")
    t = time.monotonic()
    [k] = run_report([d], source=True, source_root=d).summary["kernels"]
    assert time.monotonic() - t < 30
    [f] = k["source"]["files"]
    assert "FIFO" in f["note"] and f["note"].endswith("showing the lines its regions cover")
    assert all(r["text"] is None for r in f["lines"])


def test_direct_loops_and_their_iterations(monkeypatch):
    monkeypatch.chdir(REPO)  # the IR names examples/layernorm.py, relative to where it ran
    [k] = run_report([LOOPS], source=True).summary["kernels"]
    names = {r["scope"]: r["name"] for r in k["regions"]}
    lines = _lines(k)
    assert [names[s] for s in lines[22]["regions"]] == [
        "kernel", "loop partial @layernorm.py:20", "iter partial @layernorm.py:20"]
    assert lines[23]["regions"] == [0] and "tl.sum" in lines[23]["text"]
    assert [names[s] for s in lines[42]["regions"]][-1] == "iter start @layernorm.py:35"


def test_from_a_trace_regions_show_at_their_lines(tmp_path):
    d = _add_only(tmp_path / "run")
    run_report([d], trace_dir=tmp_path / "tr", trace_format="json")
    [k] = run_report([tmp_path / "tr"], source=True, source_root=d).summary["kernels"]
    assert k["source"]["ir"] is None and k["source"]["note"].startswith("from a trace")
    assert {n: r["regions"] for n, r in _lines(k).items() if r["regions"]} == {4: [0], 9: [1]}


def test_cli_source_option(tmp_path):
    d = _add_only(tmp_path / "run")
    r = CliRunner().invoke(main, ["report", str(d), "--source"])
    assert r.exit_code == 0, r.output
    assert "source of add_kernel" in r.output and "acc += x * y + i" in r.output
    r = CliRunner().invoke(main, ["report", str(d), "--source", "--json"])
    assert r.exit_code == 0, r.output
    [k] = json.loads(r.output)["kernels"]
    assert _lines(k)[12]["regions"] == [0, 1]


def test_every_instrumented_sample_maps_its_regions_to_lines():
    """The golden instrumented trees for cuda:90 (our examples and third-party kernels: loops,
    ops, marks, early returns through one exit block, warp-specialized partitions): every
    region of the manifest is found in the IR by its scope id, covers at least one line, and
    a loop or op region covers its own source line."""
    from proton_inject.analyze.source_view import coverage
    from proton_inject.formats.manifest import read_manifest
    from proton_inject.ttgir.parser import parse_file

    kernels = own = 0
    for man in sorted((REPO / "ttgir_samples" / "instrumented").glob("*/cuda-90/manifest.json")):
        for k in read_manifest(man):
            if not k.get("regions"):
                continue
            scopes = {r["scope_id"]: r["name"] for r in k["regions"]}
            cov = coverage(parse_file(man.parent / k["file"]), k["kernel"], scopes)
            assert cov is not None, k["file"]
            kernels += 1
            for r in k["regions"]:
                got = cov.lines[r["scope_id"]]
                assert got, (k["file"], r["name"])
                if r["name"].startswith(("loop ", "tt.", "ttng.", "ttg.")) and r.get("source"):
                    file, line = r["source"].rsplit(":", 1)
                    assert (file, int(line)) in {(Path(f).name, n) for f, n in got}, (k["file"], r["name"])
                    own += 1
    assert kernels >= 50 and own >= 100, (kernels, own)  # 53 and 112 on 2026-11-26


def test_scopes_numbered_otherwise_are_matched_by_name():
    from proton_inject.analyze.source_view import coverage
    from proton_inject.ttgir.parser import parse_file

    module = parse_file(DATA / "add_kernel.ttgir")
    same = coverage(module, "add_kernel", {0: "kernel", 1: "iter"})
    swapped = coverage(module, "add_kernel", {0: "iter", 1: "kernel"})
    assert swapped.lines[0] == same.lines[1] == {("kernels.py", 12)}
    assert swapped.lines[1] == same.lines[0] and ("kernels.py", 10) in same.lines[0]
    assert (same.def_file, same.def_line, same.end_line) == ("kernels.py", 4, 13)
    assert coverage(module, "add_kernel", {0: "kernel", 1: "iter", 2: "gone"}) is None
