"""CTA sampling (insert --sample-ctas) and the default recording warps, compiled with the real
Proton lowering (issue 9); tests/gpu/test_gpu_sampling.py runs a sampled profile end to end."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import REPO, SAMPLES, load_module
from helpers.cli import invoke

from proton_inject.errors import UserError
from proton_inject.instrument.insert import insert_text
from proton_inject.instrument.rules import Rules
from proton_inject.instrument.sampling import sampled_ctas
from proton_inject.instrument.strip import strip_text
from proton_inject.lower.check import check_file
from proton_inject.lower.options import LoweringOptions


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="latin-1")
    return p


@pytest.mark.parametrize("target", ["cuda-90", "hip-gfx942"])
def test_sampled_records_compile_and_strip_back(target, tmp_path):
    src = (SAMPLES / target / "layernorm_fwd_kernel.ttgir").read_text(encoding="latin-1")
    res = insert_text(src, Rules(sample_ctas=4, marks=False))  # kernel + 3 loops, every 4th CTA
    assert sampled_ctas(res.text) == 4 and sampled_ctas(src) == 1
    assert res.text.count("scf.if %pi_cta0 {") == 8  # both records of 4 regions
    assert strip_text(res.text) == src
    r = check_file(_write(tmp_path, "ln.ttgir", res.text))
    assert r.ok, r.error
    assert [n for _, n in r.regions][0] == "kernel" and len(r.regions) == 4
    assert r.recording_warps == [0] and r.records_per_warp == 8  # --buffer-size auto still bounds it


@pytest.mark.parametrize("target", ["cuda-90", "hip-gfx942"])
def test_a_loop_with_records_inside_runs_in_two_copies(target, tmp_path):
    """Records inside a loop cannot sit under a condition (Triton 3.6's scope analysis), so
    --sample-ctas runs such a loop in two copies: with its records in sampled CTAs, the
    original elsewhere; strip gives the original back byte for byte."""
    src = (SAMPLES / target / "layernorm_fwd_kernel.ttgir").read_text(encoding="latin-1")
    res = insert_text(src, Rules(kernel_scope=True, loops="both", sample_ctas=2, marks=False))
    # 3 loops, 2 with a result: an scf.if on the predicate yields it under its own name from
    # each copy (and each copy keeps the loop's own yield)
    assert res.text.count("} else {") == 3 and res.text.count("= scf.if %pi_cta0 -> (") == 2
    assert res.text.count("scf.yield") == src.count("scf.yield") + 2 * 2 + 2
    assert res.text.count("scf.if %pi_cta0 {") == 8 + 1  # records outside loops; the 3rd loop
    assert res.text.count("proton.record") == 14  # 7 regions, each record once
    assert strip_text(res.text) == src
    r = check_file(_write(tmp_path, "ln.ttgir", res.text))
    assert r.ok, r.error
    assert len(r.regions) == 7 and r.recording_warps == [0]


def test_sibling_loops_each_run_in_two_copies_and_keep_crlf(tmp_path):
    # A persistent matmul: a loop without results and the K loop with 12; both hold iterations.
    src = (SAMPLES / "cuda-90/persistent_matmul_kernel.ttgir").read_text(encoding="latin-1")
    src = src.replace("\n", "\r\n")  # IR saved on Windows: the copies keep its line ends
    res = insert_text(src, Rules(kernel_scope=True, loops="both", sample_ctas=2, marks=False))
    assert src.count("scf.for") == 2 and res.text.count("scf.for") == 4
    # kernel + 2 whole loops: 6 records under scf.if; 2 loops in two copies, one yielding 12
    assert res.text.count("scf.if %pi_cta0") == 6 + 2 and "%18:12 = scf.if %pi_cta0 -> (i32" in res.text
    assert res.text.count("\r\n") == res.text.count("\n")
    assert strip_text(res.text) == src
    r = check_file(_write(tmp_path, "pm.ttgir", res.text))
    assert r.ok, r.error
    assert len(r.regions) == 5  # kernel, 2 loops, 2 iterations


def test_nested_loops_run_in_two_copies_once(tmp_path):
    """A for loop around a while loop (accuracy.py's nested spin kernel, compiled here): only
    the outer loop is copied, the inner one comes along."""

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    acc = load_module(REPO / "benchmarks" / "accuracy.py", "acc_nested")
    src = ASTSource(acc.nested_kernel, signature={"out_ptr": "*i64", "n": "i64", "reps": "i32"})
    with triton.knobs.cache.scope():
        triton.knobs.cache.dir = str(tmp_path / "cache")
        text = triton.compile(src, target=GPUTarget("cuda", 90, 32)).asm["ttgir"]
    assert text.count("scf.for") == 1 and text.count("scf.while") == 1
    res = insert_text(text, Rules(loops="both", sample_ctas=4, marks=False))
    assert res.text.count("scf.for") == 2 and res.text.count("scf.while") == 2
    assert res.text.count("} else {") == text.count("} else {") * 2 + 1
    assert strip_text(res.text) == text
    r = check_file(_write(tmp_path, "nested.ttgir", res.text))
    assert r.ok, r.error
    assert len(r.regions) == 4  # the for loop and its iterations, the while loop and its


def test_a_loop_that_cannot_run_in_two_copies_is_a_clear_error():
    src = (SAMPLES / "cuda-90/layernorm_fwd_kernel.ttgir").read_text(encoding="latin-1")
    i = src.index("scf.for")
    line = src.rindex("\n", 0, i) + 1
    head_end = src.index("\n", i)
    bad = src[:line] + src[line:head_end].split("->")[0].rstrip() + " : i32 {" + src[head_end:]
    with pytest.raises(UserError, match=r"cannot read the result types of this scf\.for"):
        insert_text(bad, Rules(loops="iteration", sample_ctas=2, marks=False))


def test_partition_regions_get_their_own_predicate(tmp_path):
    # Partition regions are isolated from above: the program id is read again inside each.
    src = (SAMPLES / "cuda-90/attn_fwd_ws_kernel.ttgir").read_text(encoding="latin-1")
    res = insert_text(src, Rules(kernel_scope=True, ops=["tt.get_program_id"], sample_ctas=2,
                                 marks=False))
    assert strip_text(res.text) == src
    r = check_file(_write(tmp_path, "ws.ttgir", res.text))
    assert r.ok, r.error
    assert r.recording_warps == [0, 4, 8]  # the first warp of the default and both partitions


def test_ws_kernel_records_the_first_warp_of_each_partition(tmp_path):
    src = (SAMPLES / "cuda-90/attn_fwd_ws_kernel.ttgir").read_text(encoding="latin-1")
    res = insert_text(src, Rules(marks=False))
    path = _write(tmp_path, "ws.ttgir", res.text)
    first = check_file(path)
    every = check_file(path, options=LoweringOptions(warps="all"))
    assert first.ok and every.ok, (first.error, every.error)
    assert first.recording_warps == [0, 4, 8] and every.recording_warps is None
    # Records in loops: Proton's buffer size, now split over 3 warps instead of 12.
    assert first.records_per_warp == 4 * every.records_per_warp


def test_sample_ctas_option(tmp_path):
    src = SAMPLES / "cuda-90/layernorm_fwd_kernel.ttgir"
    out = tmp_path / "ln.ttgir"
    invoke(["insert", str(src), "-o", str(out), "--sample-ctas", "8",
            "--no-marks"], code=0)
    assert sampled_ctas(out.read_text()) == 8
    bad = invoke(["insert", str(src), "-o", str(tmp_path / "x.ttgir"),
                  "--sample-ctas", "0"])
    assert bad.exit_code == 2 and "--sample-ctas 0" in bad.output
    assert not (tmp_path / "x.ttgir").exists()


def test_nesting_of_sampled_regions_comes_from_the_manifest(tmp_path):
    # Proton infers parents from dominance, which records under sibling scf.if ops lack; the
    # runtime takes them from insert's manifest instead (as a launch's scope_parents).
    from proton_inject.collect.compile_hook import TreeSource
    from proton_inject.instrument.trees import instrument_tree, write_tree
    from proton_inject.lower.proton import scope_names_of

    dump = tmp_path / "dump" / "H"
    dump.mkdir(parents=True)
    (dump / "layernorm_fwd_kernel.ttgir").write_bytes(
        (SAMPLES / "cuda-90/layernorm_fwd_kernel.ttgir").read_bytes())
    outputs, manifest, _ = instrument_tree(tmp_path / "dump", Rules(sample_ctas=2, marks=False))
    inst = write_tree(outputs, manifest, tmp_path / "inst")
    names, parents = scope_names_of(str(inst / "H" / "layernorm_fwd_kernel.ttgir"))
    assert len(names) == 4 and parents == []  # what Proton's analysis gives
    regions = TreeSource(inst).load().files[("H", "layernorm_fwd_kernel")][2]
    got = [(r["scope_id"], r["parent_id"]) for r in regions if r["parent_id"] is not None]
    assert sorted(got) == [(1, 0), (2, 0), (3, 0)]  # the three loops inside the kernel region
    assert {i: n for i, n in names}[0] == "kernel"
