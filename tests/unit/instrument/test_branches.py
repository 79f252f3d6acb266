"""--branches: a region around each branch of each if, a region kind of its own."""

from __future__ import annotations

import json

from helpers import SAMPLES
from helpers.cli import invoke

from proton_inject.instrument.insert import insert_text
from proton_inject.instrument.rules import Rules, rules_from_manifest
from proton_inject.lower.check import check_file

SEG = SAMPLES / "cuda-90/segment_mean_kernel.ttgir"  # one scf.if with a then and an else


def test_each_branch_is_a_region_of_kind_branch(tmp_path):
    res = insert_text(SEG.read_text(), Rules(branches=True, marks=False), "seg.ttgir")
    [k] = res.kernels
    assert [(r.name, r.kind) for r in k.regions] == [("then @control_flow.py:18", "branch"),
                                                     ("else @control_flow.py:18", "branch")]
    out = tmp_path / "seg.ttgir"
    out.write_text(res.text)
    assert check_file(out).ok  # Triton lowers the records in both branches


def test_from_the_command_line_and_a_rules_file(tmp_path):
    out = tmp_path / "tree"
    src = tmp_path / "dump" / "seg"
    src.mkdir(parents=True)
    (src / SEG.name).write_bytes(SEG.read_bytes())
    invoke(["insert", tmp_path / "dump", "-o", out, "--branches", "--kernel-scope", "--no-marks"], code=0)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["rules"]["branches"] is True
    assert rules_from_manifest(manifest["rules"], "m").branches
    [k] = manifest["kernels"]
    assert [r["origin"] for r in k["regions"]] == ["kernel-scope", "branches", "branches"]
    rules = tmp_path / "rules.toml"
    rules.write_text("branches = true\n")
    one = tmp_path / "one.ttgir"
    invoke(["insert", SEG, "-o", one, "--rules", rules, "--no-marks"], code=0)
    assert one.read_text().count("proton.record start") == 2
    # not asked for: not in the manifest's rules (trees written before keep their bytes)
    invoke(["insert", tmp_path / "dump", "-o", tmp_path / "plain", "--no-marks"], code=0)
    assert "branches" not in json.loads((tmp_path / "plain/manifest.json").read_text())["rules"]
