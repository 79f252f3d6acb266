"""For a kernel Inductor generated, the model's lines its metadata names (``model_source`` in a
launch's metadata) reach the report's "launched from" lines, its JSON and its page; a malformed
one is refused naming the field."""

from __future__ import annotations

import json
import shutil
from html.parser import HTMLParser

from helpers import REPO
from helpers.cli import invoke

from proton_inject.analyze.report import run_report
from proton_inject.formats.raw import LaunchMeta, read_launch_meta

WRAPPER_SITE = "torchinductor_u/dy/cdyh.py:211 (call)"  # Inductor's wrapper calls its kernels
SOURCES = [{"lines": ["model.py:6 (forward)"], "nodes": ["y"], "aten": ["aten.mul", "aten._softmax"]},
           {"lines": ["model.py:6 (forward)", "model.py:9 (forward)"], "nodes": ["y", "add"],
            "aten": ["aten._softmax", "aten.add"]}]


def _launches(tmp_path, sources=SOURCES):
    src = REPO / "tests" / "data" / "h100-shortlaunch"
    for f, source in zip(sorted(src.glob("*-matmul_kernel.json")), sources, strict=True):
        shutil.copy(f.with_name(f.name.replace(".json", ".bin.gz")), tmp_path)
        meta = json.loads(f.read_text())
        meta["launched_from"] = WRAPPER_SITE
        meta["model_source"] = source
        (tmp_path / f.name).write_text(json.dumps(meta))
    return tmp_path


def test_the_report_names_the_model_lines_beside_the_wrapper_that_launched(tmp_path):
    rep = run_report([_launches(tmp_path)], jobs=1)
    assert rep.summary["model_source"] == {"matmul_kernel": {
        "lines": ["model.py:6 (forward)", "model.py:9 (forward)"], "nodes": ["y", "add"],
        "aten": ["aten.mul", "aten._softmax", "aten.add"]}}
    assert rep.summary["launched_from"] == {"matmul_kernel": {WRAPPER_SITE: 2}}
    lines = rep.text.split("launched from (the program's own frame; kept launches):\n", 1)[1].splitlines()
    assert lines[0] == f"  matmul_kernel: {WRAPPER_SITE} x2"
    assert lines[1] == (" " * 17 + "model: model.py:6 (forward), model.py:9 (forward) (Inductor: source nodes "
                        "y, add; aten.mul, aten._softmax, aten.add)")
    page = tmp_path / "r.html"
    run_report([tmp_path], jobs=1, html=page)
    text = []
    parser = HTMLParser()
    parser.handle_data = text.append
    parser.feed(page.read_text())
    assert "model: model.py:6 (forward), model.py:9 (forward) (Inductor:" in " ".join("".join(text).split())


def test_model_source_round_trips_and_a_bad_one_is_refused(tmp_path):
    d = _launches(tmp_path, [SOURCES[0], None])
    first, second = sorted(d.glob("*.json"))
    meta = read_launch_meta(first)
    assert meta.model_source == SOURCES[0]
    assert LaunchMeta.from_dict(meta.to_dict()).model_source == SOURCES[0]
    second.write_text(json.dumps({k: v for k, v in json.loads(second.read_text()).items() if k != "model_source"}))
    assert read_launch_meta(second).model_source is None and "model_source" not in read_launch_meta(second).to_dict()
    bad = json.loads(first.read_text())
    bad["model_source"] = {"lines": "model.py:6"}
    first.write_text(json.dumps(bad))
    for f in (second, second.with_name(second.name.replace(".json", ".bin.gz"))):
        f.unlink()  # (one bad launch among good ones is left out with a warning)
    r = invoke(["report", d])
    assert r.exit_code == 2 and "model_source" in r.output and "Traceback" not in r.output, r.output
