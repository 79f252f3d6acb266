"""Lowering options and the Proton pass install, checked by compiling real TTGIR on the CPU."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import helpers
import pytest
import triton
from helpers.ttgir import compile_lowered
from triton.backends import backends
from triton.backends.compiler import GPUTarget

from proton_inject.errors import UserError
from proton_inject.lower.options import (
    LoweringOptions,
    auto_buffer_bytes,
    max_shared_mem_for,
    options_from_cli,
    parse_warps,
    profile_buffer_bytes,
    profile_scratch_bytes,
    shared_buffer_bytes,
    suggest_buffer_size,
)
from proton_inject.lower.probes import is_persistent, records_per_warp_bound
from proton_inject.lower.proton import installed, scope_names_of

DATA = helpers.DATA / "h100-triton3.6"
ROOT = helpers.REPO
# Proton's own choices (every warp records, its default buffer size): what the fixtures and the
# sizing rules below were measured with; the tool's defaults are tested at the end.
PROTON = {"warps": "all", "auto_size": False, "buffer_type": "shared"}
H100 = GPUTarget("cuda", 90, 32)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"clock": 48}, "--clock must be 32 or 64"),
        ({"granularity": "cta"}, "--granularity must be one of"),
        ({"buffer_size": -8}, "--buffer-size must be a byte count"),
        ({"buffer_size": 3000}, "not a power of two"),
        ({"warps": (0, 4), "granularity": "warp-group"}, "works with --granularity warp only"),
        ({"warps": (0, 1, 2), "buffer_size": 4096}, "3 x a power of two"),
        ({"warps": ()}, "--warps is empty"),
        ({"metric": "time"}, "Proton records 'cycle' only"),
        ({"buffer_type": "texture"}, "--buffer-type must be one of auto, shared, global"),
        ({"buffer_type": "global", "buffer_size": 3000}, "not a power of two"),
        ({"sample_iterations": 0}, "--sample-iterations 0: must be a whole number of 1 or more"),
    ],
)
def test_bad_options_are_user_errors(kwargs, message):
    with pytest.raises(UserError, match=message):
        LoweringOptions(**kwargs)


def test_options_normalise_and_key_the_mode():
    o = options_from_cli(clock=32, warps="4, 0,4")
    assert o.warps == (0, 4) and o.buffer_type == "auto"
    assert options_from_cli(buffer_type="global").to_json()["buffer_type"] == "global"
    assert LoweringOptions(auto_size=False, warps=(0, 1, 2), buffer_size=3 * 512).segments(8) == 3
    modes = {
        LoweringOptions(**PROTON).mode(),
        LoweringOptions(**PROTON, clock=32).mode(),
        LoweringOptions(**PROTON, buffer_size=2048).mode(),
        LoweringOptions(**PROTON, sched_stores=True).mode(),
        LoweringOptions(auto_size=False, warps=(0,)).mode(),
        LoweringOptions(**{**PROTON, "buffer_type": "global"}).mode(),
        LoweringOptions(sample_iterations=2).mode(),
    }
    assert len(modes) == 7 and not any(m == "consan" for m in modes)
    assert parse_warps(None) == parse_warps("") == "first" and parse_warps("all") == "all"
    with pytest.raises(UserError, match="comma-separated warp ids"):
        parse_warps("0;4")


def test_installed_sets_and_restores_backend_hooks_and_mode():
    before = {n: backends[n].compiler.__dict__.get("instrumentation") for n in ("nvidia", "amd")}
    mode_before = triton.knobs.compilation.instrumentation_mode
    with pytest.raises(RuntimeError, match="boom"):
        with installed(LoweringOptions(**PROTON, clock=32), target=H100, tag="t1") as hooks:
            assert backends["nvidia"].compiler.instrumentation is hooks["nvidia"]
            assert backends["amd"].compiler.instrumentation is hooks["amd"]
            assert hooks["nvidia"].max_shared == 232448
            assert triton.knobs.compilation.instrumentation_mode.endswith(":t1")
            raise RuntimeError("boom")
    after = {n: backends[n].compiler.__dict__.get("instrumentation") for n in ("nvidia", "amd")}
    assert after == before
    assert triton.knobs.compilation.instrumentation_mode == mode_before


def test_max_shared_table():
    assert max_shared_mem_for(GPUTarget("cuda", 80, 32)) == 166912
    assert max_shared_mem_for(GPUTarget("cuda", 90, 32)) == 232448
    assert max_shared_mem_for(GPUTarget("cuda", 91, 32)) == 232448  # nearest lower known
    assert max_shared_mem_for(GPUTarget("hip", "gfx942", 64)) == 65536


def _compile(path: Path, options: LoweringOptions, max_shared: int, tmp_path: Path):
    return compile_lowered(path, options, tmp_path / "cache", H100, max_shared)


@pytest.mark.parametrize(
    "kernel, kernel_shared, warps, options, max_shared",
    [
        ("add_kernel", 0, 4, LoweringOptions(**PROTON), 232448),  # the H100 fixture: 8320 B/CTA
        ("add_kernel", 0, 4, LoweringOptions(**PROTON), 110000),  # below the 4% cap's power of two
        ("mm_kernel", 98304, 8, LoweringOptions(**PROTON, buffer_size=2048, clock=32), 232448),
        ("mm_kernel", 98304, 8, LoweringOptions(auto_size=False, warps=(0, 4)), 110000),
    ],
)
def test_size_prediction_matches_the_compiled_kernel(tmp_path, kernel, kernel_shared, warps, options, max_shared):
    k = _compile(DATA / f"{kernel}.ttgir", options, max_shared, tmp_path)
    buf = profile_buffer_bytes(max_shared, kernel_shared, warps, options)
    assert k.metadata.shared == kernel_shared + buf
    assert k.metadata.profile_scratch_size == profile_scratch_bytes(buf, warps)


@pytest.mark.parametrize(
    "kernel, kernel_shared, warps, options, max_shared, scratch",
    [
        # No size: 16 KiB per warp, whatever the shared memory.
        ("add_kernel", 0, 4, LoweringOptions(**{**PROTON, "buffer_type": "global"}), 232448, 65664),
        ("mm_kernel", 98304, 8, LoweringOptions(**{**PROTON, "buffer_type": "global"}), 110000, 131200),
        # A size beyond the shared buffer's 4% cap is taken as given.
        ("mm_kernel", 98304, 8, LoweringOptions(**{**PROTON, "buffer_type": "global"}, buffer_size=16384, clock=32),
         232448, 16512),
        ("mm_kernel", 98304, 8, LoweringOptions(auto_size=False, buffer_type="global", warps=(0, 4)), 232448, 32896),
    ],
)
def test_global_buffer_size_prediction(tmp_path, kernel, kernel_shared, warps, options, max_shared, scratch):
    k = _compile(DATA / f"{kernel}.ttgir", options, max_shared, tmp_path)
    buf = profile_buffer_bytes(max_shared, kernel_shared, warps, options)
    assert shared_buffer_bytes(max_shared, kernel_shared, warps, options) == 0
    assert k.metadata.shared == kernel_shared  # records take no shared memory
    assert k.metadata.profile_scratch_size == profile_scratch_bytes(buf, warps) == scratch


def test_global_buffer_has_the_shared_layout_in_the_scratch(tmp_path):
    """The decoder reads both types alike: check where the global build stores its records."""
    opts = LoweringOptions(**{**PROTON, "buffer_type": "global"}, buffer_size=16384)
    llir = _compile(DATA / "mm_kernel.ttgir", opts, 232448, tmp_path).asm["llir"]
    assert "st.global.cg.v2.b32" in llir and "st.shared.v2.b32" not in llir
    # Data starts after the 40-byte header and 8 count words: byte 72 of the CTA's block ...
    assert re.search(r"getelementptr i8, ptr addrspace\(1\) %\d+, i64 72\b", llir)
    # ... each warp owns 2048 bytes (512 words: warp id << 9) and wraps at 256 records ...
    assert re.search(r"shl nuw nsw i32 %\d+, 9\b", llir) and re.search(r"and i32 %\d+, 511\b", llir)
    # ... and finalize writes the buffer bytes into header word 3 but copies nothing.
    assert re.search(r"store i32 16384, ptr addrspace\(1\)", llir)
    assert not re.search(r"load i32, ptr addrspace\(3\)", llir)
    shared = _compile(DATA / "mm_kernel.ttgir", LoweringOptions(**PROTON), 232448, tmp_path).asm["llir"]
    assert "st.shared.v2.b32" in shared and re.search(r"load i32, ptr addrspace\(3\)", shared)


def test_fixture_sizes_are_the_measured_ones(tmp_path):
    # The H100 run recorded 8320 bytes per CTA for both fixtures (see the fixtures README).
    for kernel in ("add_kernel", "mm_kernel"):
        k = _compile(DATA / f"{kernel}.ttgir", LoweringOptions(**PROTON), 232448, tmp_path)
        assert k.metadata.profile_scratch_size == 8320
    plain = _compile_plain(tmp_path)
    assert plain.metadata.profile_scratch_size == 0


def _compile_plain(tmp_path: Path):
    text = (DATA / "add_kernel.ttgir").read_text()
    p = tmp_path / "plain.ttgir"
    p.write_text("".join(ln for ln in text.splitlines(True) if "proton.record" not in ln))
    return _compile(p, LoweringOptions(**PROTON), 232448, tmp_path)


def test_scope_names_follow_the_lowering():
    names, parents = scope_names_of(str(DATA / "mm_kernel.ttgir"))
    assert names == [(0, "kernel"), (1, "iter")]
    assert parents == [(1, 0)]


def test_suggest_buffer_size():
    opts = LoweringOptions(**PROTON)
    assert suggest_buffer_size(5000, 4, opts) == 4096
    assert suggest_buffer_size(20, 4, opts) == 0
    fit = suggest_buffer_size(3000, 8, opts)
    assert fit <= 3000 and LoweringOptions(**PROTON, buffer_size=fit).buffer_size == fit


# --- --buffer-size auto (issue 9): size the buffer to the records the IR lets a warp write ---


def _layernorm_ttgir(rules) -> str:
    from proton_inject.dump.aot import compile_aot
    from proton_inject.dump.kernel_source import load_module
    from proton_inject.instrument.insert import insert_text

    path = helpers.REPO / "examples" / "layernorm.py"
    s = load_module(path).SAMPLE_SPECS[0]  # 8 warps, three loops
    plain = compile_aot(path, s["kernel"], s["signature"], s["constexprs"], H100, s["num_warps"],
                        s["num_stages"]).ttgir
    return insert_text(plain, rules, "ln.ttgir").text


def test_auto_buffer_size_shrinks_the_buffer_of_a_loop_free_profile(tmp_path):
    import numpy as np
    from helpers.profbuf import Cta, write

    from proton_inject.analyze.decode import decode
    from proton_inject.instrument.rules import Rules

    text = _layernorm_ttgir(Rules().with_defaults())  # kernel scope + the 3 loops as a whole
    assert records_per_warp_bound(text) == 8
    auto = LoweringOptions(warps="all", auto_size=True, buffer_type="shared")
    assert auto_buffer_bytes(text, auto) == 8 * 64  # 8 records of 8 B per warp, 8 warps
    path = tmp_path / "ln.ttgir"
    path.write_text(text)
    plain_opts = _compile(path, LoweringOptions(**PROTON), 232448, tmp_path / "a").metadata
    small = _compile(path, auto, 232448, tmp_path / "b").metadata
    assert small.profile_scratch_size == profile_scratch_bytes(512, 8) < plain_opts.profile_scratch_size
    kernel_shared = small.shared - 512
    default = profile_buffer_bytes(232448, kernel_shared, 8, LoweringOptions(**PROTON))
    assert plain_opts.shared == kernel_shared + default and default > 512
    # The decoder reads this layout: a buffer written as the lowering lays it out (8 slots per
    # warp, scratch stride as compiled) decodes every region with nothing dropped.
    names, _ = scope_names_of(str(path))
    recs = [r for sid in range(4) for r in ((False, sid, 100 + 10 * sid), (True, sid, 105 + 10 * sid))]
    cta = Cta(0, 0, 10**9, 10**9 + 200, 10**9 + 300, {w: recs for w in range(8)})
    raw, meta = write([cta], 8, 8, scopes=dict(names))
    assert meta.bytes_per_cta == small.profile_scratch_size
    d = decode(np.frombuffer(raw, np.uint8), meta, clock_mhz=1000)
    assert not d.drops.dropped and len(d.events) == 8 * 4


def test_auto_buffer_size_keeps_the_default_when_records_repeat(tmp_path):
    from proton_inject.instrument.rules import Rules

    text = _layernorm_ttgir(Rules(kernel_scope=True, loops="both"))
    assert records_per_warp_bound(text) is None
    assert auto_buffer_bytes(text, LoweringOptions(warps="all", auto_size=True)) is None
    path = tmp_path / "ln.ttgir"
    path.write_text(text)
    a = _compile(path, LoweringOptions(**PROTON), 232448, tmp_path / "a").metadata
    b = _compile(path, LoweringOptions(warps="all", auto_size=True), 232448, tmp_path / "b").metadata
    assert a.profile_scratch_size == b.profile_scratch_size and a.shared == b.shared


def test_auto_buffer_size_from_the_command_line():
    o = options_from_cli(buffer_size="auto", warps="0")
    assert o.auto_size and o.buffer_size == 0
    assert o.mode() != LoweringOptions(warps=(0,), auto_size=False).mode()
    assert options_from_cli(buffer_size="4096").buffer_size == 4096
    with pytest.raises(UserError, match="--buffer-size 'lots'"):
        options_from_cli(buffer_size="lots")


# --- defaults: the first warp of each partition, --buffer-size auto (issue 9) ----------------


@pytest.mark.parametrize("sample", ["cuda-90/attn_fwd_ws_kernel", "cuda-100/persistent_matmul_kernel_ws",
                                    "cuda-90/layernorm_fwd_kernel"])
def test_first_warps_are_where_triton_puts_each_partition(sample):
    # Triton's own AllocateWarpGroups pass assigns the partitions' start warps; ours must agree.
    from triton._C.libtriton import ir, passes

    from proton_inject.lower.probes import first_warps
    from proton_inject.lower.proton import mlir_context

    path = ROOT / "ttgir_samples" / f"{sample}.ttgir"
    ctx = mlir_context()
    mod = ir.parse_mlir_module(str(path), ctx)
    mod.context = ctx
    pm = ir.pass_manager(ctx)
    passes.ttgpuir.add_allocate_warp_groups(pm)
    pm.run(mod, "allocate_warp_groups")
    text = str(mod)
    starts = [int(x) for x in re.findall(r"warpGroupStartIds = array<i32: ([\d, ]+)>", text)[0].split(",")] \
        if "warpGroupStartIds" in text else []
    sizes = [int(x) for x in re.findall(r"\bnum_warps\((\d+)\)\s*\{", path.read_text())]
    real = starts[:len(sizes)]  # the rest are padding partitions with no code
    assert first_warps(path.read_text()) == tuple(sorted({0, *real}))
    if sizes:
        assert len(first_warps(path.read_text())) == 1 + len(sizes)


def test_default_options_record_one_warp_with_a_buffer_of_its_records(tmp_path):
    from proton_inject.instrument.insert import insert_text
    from proton_inject.instrument.rules import Rules

    text = insert_text((ROOT / "ttgir_samples/cuda-90/layernorm_fwd_kernel.ttgir").read_text(),
                       Rules()).text  # the default rules: kernel + 3 loops as a whole
    path = tmp_path / "ln.ttgir"
    path.write_text(text)
    o = LoweringOptions().for_kernel(text)
    assert o.selected == (0,) and o.buffer_size == 0  # warp 0; no loop bytes asked
    assert o.buffer_type == "direct"  # each record runs once, by warp 0: our own lowering
    k = _compile(path, LoweringOptions(), 232448, tmp_path / "a").metadata
    assert k.profile_scratch_size == 40  # 2 header words + 8 clock words, in 8-byte steps
    g = LoweringOptions(buffer_type="global")  # Proton's lowering into global memory
    assert (g.for_kernel(text).buffer_type, g.for_kernel(text).buffer_size) == ("global", 64)
    kg = _compile(path, g, 232448, tmp_path / "g").metadata
    assert kg.profile_scratch_size == profile_scratch_bytes(64, 8)
    (tmp_path / "plain.ttgir").write_text((ROOT / "ttgir_samples/cuda-90/layernorm_fwd_kernel.ttgir").read_text())
    plain = _compile(tmp_path / "plain.ttgir", LoweringOptions(), 232448, tmp_path / "p").metadata
    assert k.shared == kg.shared == plain.shared  # the records take no shared memory
    shared = LoweringOptions(buffer_type="shared")
    one = _compile(path, shared, 232448, tmp_path / "s").metadata
    every = _compile(path, replace(shared, warps="all"), 232448, tmp_path / "b").metadata
    assert one.shared - plain.shared == 64 and one.profile_scratch_size == kg.profile_scratch_size
    assert every.shared - one.shared == 8 * 64 - 64  # --warps all: a segment per warp
    assert options_from_cli(warps="all").selected is None
    assert options_from_cli().auto_size and options_from_cli().warps == "first"
    assert not options_from_cli(buffer_size="0").auto_size


def test_buffer_type_and_warps_follow_the_kernel(tmp_path):
    """--buffer-type auto: global when no record sits inside a loop (each runs once per warp),
    shared otherwise and on AMD; "first" warps: every warp of a persistent kernel (its tile
    loop steps by the grid size), whose per-CTA costs are spread over many tiles."""
    from proton_inject.instrument.insert import insert_text
    from proton_inject.instrument.rules import Rules

    def resolved(sample, rules, target="cuda-90"):
        src = (ROOT / "ttgir_samples" / target / f"{sample}.ttgir").read_text(encoding="latin-1")
        return LoweringOptions().for_kernel(insert_text(src, rules).text)

    whole, every_iter = Rules().with_defaults(), Rules(kernel_scope=True, loops="both")
    o = resolved("layernorm_fwd_kernel", whole)
    assert (o.buffer_type, o.selected) == ("direct", (0,))
    o = resolved("layernorm_fwd_kernel", every_iter)  # records in top-level loops: direct too
    assert (o.buffer_type, o.selected) == ("direct", (0,))
    o = resolved("segment_mean_kernel", every_iter)  # records in nested loops: shared
    assert (o.buffer_type, o.selected) == ("shared", (0,))
    o = resolved("layernorm_fwd_kernel", whole, "hip-gfx942")
    assert (o.buffer_type, o.selected) == ("shared", (0,))
    # CTA sampling reads the grid size too; that does not make a kernel persistent (and its
    # records around whole loops stay ours)
    o = resolved("layernorm_fwd_kernel", Rules(sample_ctas=4, marks=False).with_defaults())
    assert (o.buffer_type, o.selected) == ("direct", (0,))
    o = resolved("softmax_kernel", whole)  # for row in range(pid, n_rows, num_programs)
    assert (o.buffer_type, o.selected) == ("global", None)
    o = resolved("softmax_kernel", every_iter)
    assert (o.buffer_type, o.selected) == ("shared", None)
    # range(pid, tiles, NUM_SMS) with NUM_SMS a constexpr: the step is a constant, not 1
    o = resolved("persistent_matmul_kernel", whole)
    assert o.selected is None
    src = (ROOT / "ttgir_samples/cuda-90/persistent_matmul_kernel.ttgir").read_text(encoding="latin-1")
    assert "tt.get_num_programs" not in src and is_persistent(src)
    # a loop from the program id by 1 does not stride over tiles; nor does one from 0
    assert not is_persistent(src.replace("step %c132_i32", "step %c1_i32"))
    assert not is_persistent(src.replace("scf.for %tile_id = %0 to", "scf.for %tile_id = %c0_i32 to"))
    # The lowering resolves them on the module as MLIR prints it, where every value is renamed
    # (the CTA sampler's %pi_cta0_gx is then one read of the grid size among others).
    for sample, rules, selected in [("layernorm_fwd_kernel", Rules(sample_ctas=4, marks=False), (0,)),
                                    ("softmax_kernel", Rules(), None)]:
        printed = _as_mlir_prints(insert_text(
            (ROOT / "ttgir_samples/cuda-90" / f"{sample}.ttgir").read_text(encoding="latin-1"),
            rules.with_defaults()).text)
        assert "%pi_" not in printed and "tt.get_num_programs x" in printed
        assert LoweringOptions().for_kernel(printed).selected == selected, sample
    from proton_inject.lower.check import check_file, format_report

    path = ROOT / "ttgir_samples/cuda-90/softmax_kernel.ttgir"
    inst = tmp_path / "softmax.ttgir"
    inst.write_text(insert_text(path.read_text(), whole).text)
    r = check_file(inst)
    assert r.ok and r.persistent and r.recording_warps is None and r.buffer_type == "global"
    assert "recording warps: every warp (a persistent kernel" in format_report(r)
    o = resolved("attn_fwd_ws_kernel", whole)  # warp-specialized: its partitions' first warps
    assert o.buffer_type == "shared" and o.selected is not None and len(o.selected) > 1
    assert LoweringOptions().for_kernel("").buffer_type == "shared"  # no IR at hand: as before
    # named explicitly, nothing is chosen per kernel
    o = LoweringOptions(buffer_type="shared", warps=(0,)).for_kernel(
        insert_text((ROOT / "ttgir_samples/cuda-90/softmax_kernel.ttgir").read_text(), whole).text)
    assert (o.buffer_type, o.selected) == ("shared", (0,))



def test_lowering_options_refuse_a_buffer_no_lowering_takes():
    """From the Python API as from the CLI: a buffer past 1 GiB per CTA (Proton takes a 32-bit
    int) is one clear UserError, not a pybind dump at compile time (issue 31)."""
    from proton_inject.errors import UserError
    from proton_inject.lower.options import MAX_BUFFER_SIZE, LoweringOptions

    with pytest.raises(UserError, match="must be 1 to 1073741824 bytes"):
        LoweringOptions(buffer_size=2**70)
    with pytest.raises(UserError, match="--buffer-size"):
        LoweringOptions(buffer_size=-8)
    assert LoweringOptions(buffer_size=MAX_BUFFER_SIZE).buffer_size == MAX_BUFFER_SIZE


def _as_mlir_prints(text: str) -> str:
    """``text`` parsed by Triton's MLIR and printed back (values renamed), as the lowering sees it."""
    import tempfile

    from triton._C.libtriton import ir

    from proton_inject.lower.proton import mlir_context

    ctx = mlir_context()  # (held: the module lives in it)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.ttgir"
        path.write_text(text, encoding="latin-1")
        mod = ir.parse_mlir_module(str(path), ctx)
        mod.context = ctx
        return str(mod)
