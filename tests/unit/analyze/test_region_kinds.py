"""A region's kind comes from the rule that made it, never from its name: a mark named
``loop_x`` is a mark, a line region named ``iter_y`` is lines, whatever they are called."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from helpers import SAMPLES
from helpers.profbuf import small_launch

from proton_inject.analyze.overhead import overhead_class
from proton_inject.analyze.summary import LaunchData, summarize
from proton_inject.calibrate import cost_from
from proton_inject.formats.raw import LaunchMeta
from proton_inject.formats.region_kinds import kind_of
from proton_inject.instrument.insert import insert_text
from proton_inject.instrument.rules import LineRange, Rules

SRC = "examples/matmul.py"


def _kinds_from_insert() -> dict[str, str]:
    """Insert into the real matmul IR: kernel scope, loops and iterations, a mark named
    loop_x (the tl.dot line) and a line region named iter_y (the pointer advance)."""
    rules = Rules(kernel_scope=True, loops="both", marks=False, ranges=[
        LineRange("loop_x", SRC, 40, 40, "mark"), LineRange("iter_y", SRC, 42, 43, "region")])
    res = insert_text((SAMPLES / "cuda-90/matmul_kernel.ttgir").read_text(), rules, "m.ttgir")
    [k] = res.kernels
    return {r.name.split(" @")[0]: r.kind for r in k.regions}


def test_the_manifest_origin_gives_the_kind():
    kinds = _kinds_from_insert()
    assert kinds["loop_x"] == "mark" and kinds["iter_y"] == "lines"
    assert kinds["kernel"] == "kernel"
    assert {kinds[n] for n in kinds if n.startswith("loop ")} == {"loop"}
    assert {kinds[n] for n in kinds if n.startswith("iter ")} == {"iteration"}
    assert kind_of("op tt.load", "iter_y") == "op"


def _with_kinds(names: dict[int, str], kinds: dict[int, str] | None):
    d = small_launch()  # two scopes, one nested in the other
    return dataclasses.replace(d, meta=dataclasses.replace(d.meta, scopes=names, scope_kinds=kinds))


def test_overhead_and_calibration_read_the_kind():
    named = {0: "loop_x", 1: "iter y"}
    d = _with_kinds(named, {0: "mark", 1: "lines"})
    [k] = summarize([LaunchData.from_decoded(d)])["kernels"]
    assert [r["kind"] for r in sorted(k["regions"], key=lambda r: r["scope"])] == ["mark", "lines"]
    assert overhead_class(k) == "overhead: not measured for these regions (marks, ops or line ranges)"
    with pytest.raises(RuntimeError, match="no loop region"):  # the mark is not the loop
        cost_from([d], [np.array([100])])
    # the same scopes as a loop and its iterations
    d = _with_kinds(named, {0: "loop", 1: "iteration"})
    [k] = summarize([LaunchData.from_decoded(d)])["kernels"]
    assert overhead_class(k).startswith("overhead: every iteration, ")
    assert cost_from([d], [np.array([100])])["instances"] == len(d.events.cycles[d.events.scope == 0])


def test_launches_recorded_without_kinds_keep_the_names_insert_gave():
    d = _with_kinds({0: "kernel", 1: "iter"}, None)
    [k] = summarize([LaunchData.from_decoded(d)])["kernels"]
    assert all("kind" not in r for r in k["regions"])
    assert overhead_class(k).startswith("overhead: every iteration, ")


def test_raw_metadata_keeps_the_kinds():
    meta = _with_kinds({0: "loop_x", 1: "iter_y"}, {0: "mark", 1: "lines"}).meta
    back = LaunchMeta.from_dict(meta.to_dict())
    assert back.scope_kinds == {0: "mark", 1: "lines"}
    assert LaunchMeta.from_dict(dataclasses.replace(meta, scope_kinds=None).to_dict()).scope_kinds is None


def test_diff_says_the_recorded_kind(tmp_path):
    import json

    from proton_inject.analyze.diff import run_diff

    d = _with_kinds({0: "loop_x", 1: "iter_y"}, {0: "mark", 1: "lines"})
    for side in ("a", "b"):
        (tmp_path / f"{side}.json").write_text(json.dumps(summarize([LaunchData.from_decoded(d)])))
    res = run_diff(tmp_path / "a.json", tmp_path / "b.json", fmt="json")
    [k] = json.loads(res.text)["kernels"]
    assert {r["name"]: r["kind"] for r in k["regions"]} == {"loop_x": "mark", "iter_y": "lines"}
