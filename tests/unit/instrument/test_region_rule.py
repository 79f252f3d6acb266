"""`--region` over a tree behaves like `--op` (issue 31): a kernel with no op from those lines
gets a one-line note and is instrumented by the other rules; an error only when the rules
selected nothing in the whole input. Ops that are there but cannot be placed stay an error."""

from __future__ import annotations

import json
import shutil

import pytest
from helpers import REPO, SAMPLES
from helpers.cli import invoke

from proton_inject.errors import UserError
from proton_inject.instrument.insert import insert_text
from proton_inject.instrument.rules import LineRange, Rules

DOT = "dot=examples/matmul.py:40"  # the matmul's tl.dot line: only matmul_kernel has ops there


def _tree(tmp_path):
    src = tmp_path / "dump"
    for name in ("add_kernel", "matmul_kernel", "softmax_kernel"):
        (src / name).mkdir(parents=True)
        shutil.copy(SAMPLES / f"cuda-90/{name}.ttgir", src / name / f"{name}.ttgir")
    return src


def _notes(output: str) -> list[str]:
    # (each note's one-line form: its "--region" hint is behind -v)
    return [ln for ln in output.splitlines() if ln.startswith("note: ") and "region '" in ln]


def test_region_missing_from_some_kernels_is_a_note_each(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    src, out = _tree(tmp_path), tmp_path / "inst"
    res = invoke(["insert", str(src), "-o", str(out), "--kernel-scope",
                  "--no-marks", "--region", DOT], code=0)
    notes = _notes(res.output)
    assert [n.split(":")[:2] for n in notes] == [["note", " kernel add_kernel"],
                                                 ["note", " kernel softmax_kernel"]], res.output
    assert all("no op of this kernel comes from examples/matmul.py:40" in n for n in notes)
    assert all(len(n) < 200 for n in notes)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["left_out"] == []  # every kernel still instrumented by --kernel-scope
    regions = {k["kernel"]: [r["name"] for r in k["regions"]] for k in manifest["kernels"]}
    assert regions == {"add_kernel": ["kernel"], "matmul_kernel": ["kernel", "dot"],
                       "softmax_kernel": ["kernel"]}


def test_region_alone_instruments_the_kernels_that_have_it(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    src, out = _tree(tmp_path), tmp_path / "inst"
    res = invoke(["insert", str(src), "-o", str(out), "--no-marks",
                  "--region", DOT], code=0)
    assert len(_notes(res.output)) == 2 and "left out" not in res.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert [k["kernel"] for k in manifest["kernels"]] == ["matmul_kernel"]
    assert sorted(p.name for p in out.rglob("*.ttgir")) == ["matmul_kernel.ttgir"]


def test_region_matching_nothing_anywhere_is_an_error(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    src, out = _tree(tmp_path), tmp_path / "inst"
    res = invoke(["insert", str(src), "-o", str(out), "--no-marks",
                  "--region", "x=examples/matmul.py:1"], code=2)
    assert "the rules selected no region" in res.output
    assert "no op of this kernel comes from examples/matmul.py:1" in res.output
    assert not out.exists()


def test_region_that_cannot_be_placed_is_still_an_error():
    text = (SAMPLES / "cuda-90/matmul_kernel.ttgir").read_text()
    rules = Rules(marks=False, ranges=[LineRange("t", "examples/matmul.py", 38, 39)])
    with pytest.raises(UserError, match="not contiguous"):
        insert_text(text, rules, "k.ttgir")
