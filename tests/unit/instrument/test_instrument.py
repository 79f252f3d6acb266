"""insert / strip on every sample: valid IR, scope ids as the lowering assigns them, errors."""

from __future__ import annotations

import json

import pytest
from helpers import REPO, SAMPLES, sample_files
from helpers.cli import invoke

from proton_inject.errors import UserError
from proton_inject.formats.rules_file import LineRange
from proton_inject.instrument.insert import insert_text
from proton_inject.instrument.rules import Rules
from proton_inject.instrument.strip import strip_text
from proton_inject.instrument.trees import instrument_tree

FILES = sample_files()
RULE_SETS = {
    "default": Rules(source_root=str(REPO)),
    "loops-both": Rules(loops="both", marks=False),
    "iteration+ops": Rules(loops="iteration", loop_depth=1, marks=False,
                           ops=["tt.load", "tt.descriptor_load", "ttng.warp_group_dot*",
                                "ttg.async_wait", "ttng.wait_barrier", "tt.atomic_*"]),
}


def _scopes(text: str, tmp_path, ctx):
    from triton._C.libtriton import ir, proton

    path = tmp_path / "x.ttgir"
    path.write_text(text, encoding="latin-1")
    module = ir.parse_mlir_module(str(path), ctx)
    return sorted(proton.get_scope_id_names(module)), sorted(proton.get_scope_id_parents(module))


@pytest.mark.parametrize("rules", RULE_SETS.values(), ids=RULE_SETS.keys())
@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_insert_is_valid_and_manifest_matches_lowering(path, rules, tmp_path, mlir_context, monkeypatch):
    monkeypatch.chdir(REPO)
    raw = path.read_bytes()
    res = insert_text(raw, rules, str(path))
    (kernel,) = res.kernels
    if not kernel.regions:  # e.g. loop rules on a kernel without loops
        assert res.text == raw.decode("latin-1")
        return
    names, parents = _scopes(res.text, tmp_path, mlir_context)
    assert names == [(r.scope_id, r.name) for r in kernel.regions]
    assert parents == sorted((r.scope_id, r.parent_id) for r in kernel.regions if r.parent_id is not None)
    # Only record lines were added, and strip gives the input back byte for byte.
    old, new = raw.decode("latin-1").splitlines(), res.text.splitlines()
    assert [ln for ln in new if "proton.record" not in ln] == old
    assert len(new) - len(old) == 2 * len(kernel.regions)
    assert strip_text(res.text).encode("latin-1") == raw
    assert insert_text(raw, rules, str(path)).text == res.text  # deterministic


def test_end_records_go_before_terminators_and_not_into_combiners():
    text = (SAMPLES / "cuda-90/softmax_kernel.ttgir").read_text()
    res = insert_text(text, Rules(loops="both", ops=["arith.maxnumf", "tt.reduce"], marks=False))
    lines = res.text.splitlines()
    for i, ln in enumerate(lines):
        if "proton.record end" in ln and "iter" in ln:
            assert lines[i + 1].strip().startswith(("scf.yield", "}"))
    # arith.maxnumf only occurs inside tt.reduce combiners: never instrumented, and said so.
    assert not any("arith.maxnumf" in r.name for r in res.kernels[0].regions)
    assert any("--op arith.maxnumf" in n and "skipped" in n for n in res.notes)
    assert sum(r.name.startswith("tt.reduce") for r in res.kernels[0].regions) == 2


def test_names_say_what_and_where():
    res = insert_text((SAMPLES / "cuda-90/attn_fwd_ws_kernel.ttgir").read_text(), Rules(loops="both", marks=False))
    names = [r.name for r in res.kernels[0].regions]
    assert "loop acc @attention.py:69 [default]" in names
    assert any(n.startswith("iter") and n.endswith("[partition0]") for n in names)
    assert len(set(names)) == len(names)


def test_names_with_quotes_are_escaped(tmp_path, mlir_context):
    text = (SAMPLES / "cuda-90/add_kernel.ttgir").read_text()
    rules = Rules(marks=False, ranges=[LineRange('say "hi" \\ there', "examples/vector_add.py", 20, 21)])
    res = insert_text(text, rules)
    assert 'proton.record start "say \\"hi\\" \\\\ there"' in res.text
    names, _ = _scopes(res.text, tmp_path, mlir_context)
    assert (0, 'say "hi" \\ there') in names


def test_marks_in_example_sources(monkeypatch):
    monkeypatch.chdir(REPO)
    res = insert_text((SAMPLES / "cuda-90/add_kernel.ttgir").read_text(), Rules(loops="outer"))
    (region,) = [r for r in res.kernels[0].regions if r.origin == "mark"]
    assert region.name == "store_out" and region.source == "examples/vector_add.py:22"
    assert region.parent == "loop i @vector_add.py:17"
    # The splat of out_ptr was hoisted out of the loop: the note says so.
    assert any("moved out of the enclosing scf.for" in n for n in res.notes)
    for target in ("cuda-80", "cuda-90", "cuda-100", "hip-gfx942"):
        res = insert_text((SAMPLES / f"{target}/matmul_kernel.ttgir").read_text(), Rules(loops="outer"))
        marks = {r.name: r for r in res.kernels[0].regions if r.origin == "mark"}
        assert set(marks) == {"mma", "advance"}, target
        assert marks["advance"].source == "examples/matmul.py:42-43"


def _error(text, rules) -> str:
    with pytest.raises(UserError) as e:
        insert_text(text, rules, "k.ttgir")
    return str(e.value)


def test_error_ops_of_a_range_not_contiguous():
    msg = _error((SAMPLES / "cuda-90/matmul_kernel.ttgir").read_text(),
                 Rules(marks=False, ranges=[LineRange("load_tiles", "examples/matmul.py", 38, 39)]))
    assert "kernel matmul_kernel" in msg and "examples/matmul.py:38-39" in msg
    assert "not contiguous" in msg and "ttng.warp_group_dot from matmul.py:40" in msg
    assert "Nearest valid placement" in msg


def test_error_range_spans_blocks():
    msg = _error((SAMPLES / "cuda-90/segment_mean_kernel.ttgir").read_text(),
                 Rules(marks=False, ranges=[LineRange("both", "examples/control_flow.py", 19, 24)]))
    assert "lie in different blocks" in msg and "scf.if" in msg


def test_error_overlapping_regions():
    msg = _error((SAMPLES / "cuda-90/matmul_kernel.ttgir").read_text(),
                 Rules(marks=False, ranges=[LineRange("a", "examples/matmul.py", 46, 49),
                                            LineRange("b", "examples/matmul.py", 48, 50)]))
    assert "regions 'a'" in msg and "'b'" in msg and "overlap without nesting" in msg


def test_error_no_ops_on_marked_line():
    text = (SAMPLES / "cuda-90/matmul_kernel.ttgir").read_text()
    mark = LineRange("doc", "examples/matmul.py", 1, 2, "mark", "examples/matmul.py:1")
    msg = _error(text, Rules(marks=False, ranges=[mark]))
    assert "no op of the IR comes from examples/matmul.py:1-2" in msg and "inspect" in msg
    # A --region is a note, as --op is (issue 31): over a tree most kernels lack the lines.
    res = insert_text(text, Rules(marks=False, ranges=[LineRange("doc", "examples/matmul.py", 1,
                                                                 2)]), "k.ttgir")
    assert not any(k.regions for k in res.kernels)
    assert any("no op of this kernel comes from examples/matmul.py:1-2" in n for n in res.notes)


def test_error_already_instrumented_unless_forced():
    text = (SAMPLES / "cuda-90/add_kernel.ttgir").read_text()
    once = insert_text(text, Rules(marks=False)).text
    assert "already instrumented" in _error(once, Rules(marks=False))
    again = insert_text(once, Rules(marks=False), force=True).text
    assert again == once


def test_unbalanced_marks_are_errors(tmp_path, monkeypatch):
    original = (REPO / "examples/vector_add.py").read_text()
    (tmp_path / "examples").mkdir()
    monkeypatch.chdir(tmp_path)
    # A begin on a line of its own that is never closed.
    (tmp_path / "examples/vector_add.py").write_text(original.replace(
        "  # proton: store_out", "\n        # proton: begin oops"))
    msg = _error((SAMPLES / "cuda-90/add_kernel.ttgir").read_text(), Rules())
    assert "vector_add.py:23" in msg and "never closed" in msg
    # A begin after code: refused, saying where it goes.
    (tmp_path / "examples/vector_add.py").write_text(original.replace(
        "# proton: store_out", "# proton: begin oops"))
    msg = _error((SAMPLES / "cuda-90/add_kernel.ttgir").read_text(), Rules())
    assert "vector_add.py:22" in msg and "on a line of its own" in msg


def test_region_spec_parsing():
    assert LineRange.parse("load tiles=matmul.py:41-43") == LineRange(
        "load tiles", "matmul.py", 41, 43, "region", "--region load tiles=matmul.py:41-43")
    for bad in ("nofile", "x=matmul.py", "x=matmul.py:9-3"):
        with pytest.raises(UserError):
            LineRange.parse(bad)


def test_tree_keeps_only_ttgir_and_selects_kernels(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    outputs, manifest, _ = instrument_tree(SAMPLES / "cuda-90", Rules(kernel="^matmul"))
    assert set(outputs) == {"matmul_kernel.ttgir", "matmul_kernel_64x64x32.ttgir"}
    assert {k["kernel"] for k in manifest["kernels"]} == {"matmul_kernel"}
    out = tmp_path / "inst"
    invoke(["insert", str(SAMPLES / "cuda-90"), "-o", str(out), "--kernel", "^add"], code=0)
    assert sorted(p.name for p in out.rglob("*")) == ["add_kernel.ttgir", "add_kernel_b4096.ttgir",
                                                       "manifest.json"]
    data = json.loads((out / "manifest.json").read_text())
    assert data["kernels"][0]["regions"][0]["name"] == "kernel"
    res = invoke(["insert", str(SAMPLES / "cuda-90"), "-o", str(out), "--kernel", "nope"])
    assert res.exit_code == 2 and "no kernel matched" in res.output


def test_cli_check_against_prints_diff(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    golden = tmp_path / "golden"
    src = SAMPLES / "cuda-90"
    invoke(["insert", str(src), "-o", str(golden), "--kernel", "^add"], code=0)
    res = invoke(["insert", str(src), "--kernel", "^add", "--check-against", str(golden)])
    assert res.exit_code == 0 and "identical" in res.output
    res = invoke(["insert", str(src), "--kernel", "^add", "--loops", "both",
                  "--check-against", str(golden)], code=1)
    assert '+      proton.record start "iter i @vector_add.py:17"' in res.output


def test_cli_single_file_and_strip(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    src = SAMPLES / "cuda-90/softmax_kernel.ttgir"
    out, back = tmp_path / "i.ttgir", tmp_path / "s.ttgir"
    res = invoke(["insert", str(src), "-o", str(out), "--loops", "iteration"], code=0)
    assert "softmax_kernel (softmax_kernel.ttgir): 1 region" in res.output
    res = invoke(["insert", str(out), "-o", str(tmp_path / "again.ttgir")])
    assert res.exit_code == 2 and "already instrumented" in res.output
    invoke(["strip", str(out), "-o", str(back)], code=0)
    assert back.read_bytes() == src.read_bytes()


GOLDEN = {
    "default": [],
    "detailed": ["--loops", "both", "--op", "tt.load", "--op", "tt.descriptor_load",
                 "--op", "ttng.warp_group_dot", "--op", "ttg.async_wait"],
}


@pytest.mark.parametrize("target", ["cuda-80", "cuda-90", "cuda-100", "hip-gfx942"])
@pytest.mark.parametrize("name", GOLDEN)
def test_golden_instrumented_ir(name, target, monkeypatch):
    """CI's diff of instrumented IR: regenerate with scripts/update_golden.sh."""
    monkeypatch.chdir(REPO)
    invoke(["insert", f"ttgir_samples/{target}", *GOLDEN[name],
            "--check-against", f"ttgir_samples/instrumented/{name}/{target}"], code=0)


def test_every_sample_compiles_with_every_rule_at_once(tmp_path, monkeypatch):
    """`check` on the union of all rules for each sample: every placement lowers to a binary."""
    from proton_inject.instrument.trees import write_tree
    from proton_inject.lower.check import check_paths

    monkeypatch.chdir(REPO)
    union = Rules(kernel_scope=True, loops="both", source_root=str(REPO),
                  ops=["tt.load", "tt.descriptor_load", "ttng.warp_group_dot*", "ttg.async_wait",
                       "ttng.wait_barrier", "tt.atomic_*", "tt.store"])
    expected = {}
    for target in ("cuda-80", "cuda-90", "cuda-100", "hip-gfx942"):
        outputs, manifest, _ = instrument_tree(SAMPLES / target, union)
        write_tree(outputs, manifest, tmp_path / target)
        for k in manifest["kernels"]:
            expected[(target, k["file"])] = [(r["scope_id"], r["name"]) for r in k["regions"]]
    reports, skipped = check_paths([tmp_path])
    assert not skipped
    assert len(reports) == len(FILES)
    for r in reports:
        assert r.ok, f"{r.path}: {r.error}"
        rel = r.path.split(str(tmp_path) + "/", 1)[1].split("/", 1)
        assert sorted(r.regions) == expected[(rel[0], rel[1])]
        assert r.profile_scratch_bytes > 0


def test_rules_from_pyproject_and_rules_file(tmp_path, monkeypatch):
    from proton_inject.instrument.rules import load_rules_file, rules_from_pyproject

    (tmp_path / "pyproject.toml").write_text(
        '[tool.proton-inject]\nloops = "iteration"\nop = ["tt.load"]\n'
        'region = ["tail=examples/matmul.py:46-50"]\nmarks = false\n')
    rules = rules_from_pyproject(tmp_path)
    assert rules.loops == "iteration" and rules.ops == ["tt.load"] and not rules.marks
    assert rules.ranges[0] == LineRange("tail", "examples/matmul.py", 46, 50, "region",
                                        "--region tail=examples/matmul.py:46-50")
    # The CLI picks ./pyproject.toml up when no --rules is given, and adds its own flags.
    src = SAMPLES / "cuda-90/matmul_kernel.ttgir"
    monkeypatch.chdir(tmp_path)
    res = invoke(["insert", str(src), "-o", str(tmp_path / "o.ttgir"), "--kernel-scope"], code=0)
    text = (tmp_path / "o.ttgir").read_text()
    assert 'start "tail"' in text and 'start "kernel"' in text and 'start "iter acc @matmul.py:36"' in text
    assert "rules from ./pyproject.toml [tool.proton-inject]" in res.output  # said, not silent
    (tmp_path / "r.toml").write_text('loops = "both"\n')
    res = invoke(["insert", str(src), "-o", str(tmp_path / "p.ttgir"), "--rules",
                  str(tmp_path / "r.toml")])
    assert res.exit_code == 0 and "rules from ./pyproject.toml" not in res.output
    bad = tmp_path / "bad.toml"
    bad.write_text('loops = "sometimes"\n')
    # Blamed on the file and its key, not on the command-line option.
    with pytest.raises(UserError, match="bad.toml: loops = 'sometimes' must be one of"):
        load_rules_file(bad)
    bad.write_text('lops = "both"\n')
    with pytest.raises(UserError, match="unknown rule key"):
        load_rules_file(bad)
