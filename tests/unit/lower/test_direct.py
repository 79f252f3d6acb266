"""Our own lowering of loop-free records (``proton_inject/direct.py``, ``--buffer-type direct``).

CPU: which kernels it applies to, that its scope ids are Proton's, that every eligible
instrumented sample compiles through the backend with it (no Proton set-up left: one
timer read, after the last record, no added barrier) and that strip-free fallbacks
hold; real direct buffers recorded on an H100 decode. The GPU runs are
tests/gpu/test_gpu_direct.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import helpers
import numpy as np
import pytest

from proton_inject.instrument.insert import insert_text
from proton_inject.instrument.rules import Rules
from proton_inject.lower import direct
from proton_inject.lower.options import LoweringOptions
from proton_inject.lower.proton import installed, scope_names_of

ROOT = helpers.REPO
SAMPLES = ROOT / "ttgir_samples"
INSTRUMENTED = sorted((SAMPLES / "instrumented").glob("*/cuda-90/*.ttgir"))


def _compile(text: str, tmp: Path, options: LoweringOptions):
    import triton
    from triton.backends.compiler import GPUTarget

    target = GPUTarget("cuda", 90, 32)
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / "k.ttgir"
    path.write_text(text, encoding="latin-1")
    with triton.knobs.cache.scope(), triton.knobs.compilation.scope():
        triton.knobs.cache.dir = str(tmp / "cache")
        triton.knobs.compilation.always_compile = True
        with installed(options, target=target):
            mode = triton.knobs.compilation.instrumentation_mode
            return triton.compile(str(path), target=target, options={"instrumentation_mode": mode})


def test_which_kernels_it_applies_to():
    text = (SAMPLES / "cuda-90/layernorm_fwd_kernel.ttgir").read_text(encoding="latin-1")
    assert direct.eligible(insert_text(text, Rules().with_defaults()).text) is None
    # records inside a top-level loop: each iteration stores its own; in a nested loop the
    # iteration is not one number
    assert direct.eligible(insert_text(text, Rules(kernel_scope=True, loops="both")).text) is None
    segment = (SAMPLES / "cuda-90/segment_mean_kernel.ttgir").read_text(encoding="latin-1")
    assert "nested loops" in direct.eligible(insert_text(segment, Rules().with_defaults()).text)
    # a loop of dots and async copies: its stores would hold back the next iteration's loads
    mm = (SAMPLES / "cuda-90/matmul_kernel.ttgir").read_text(encoding="latin-1")
    assert "tensor-core" in direct.eligible(insert_text(mm, Rules(kernel_scope=True, loops="both")).text)
    assert direct.eligible(insert_text(mm, Rules(kernel_scope=True, loops="outer", marks=False)).text) is None
    # under --sample-ctas, records around whole loops stay ours; iterations' records sit in
    # the sampled copy of their loop, under a branch
    assert direct.eligible(insert_text(text, Rules(sample_ctas=4, marks=False).with_defaults()).text) is None
    sampled = insert_text(text, Rules(kernel_scope=True, loops="both", sample_ctas=4, marks=False)).text
    assert "branches" in direct.eligible(sampled)
    assert direct.eligible(text) == "no records"
    ws = (SAMPLES / "cuda-90/attn_fwd_ws_kernel.ttgir").read_text(encoding="latin-1")
    assert direct.eligible(insert_text(ws, Rules().with_defaults()).text) == "warp-specialized"
    hip = (SAMPLES / "hip-gfx942/layernorm_fwd_kernel.ttgir").read_text(encoding="latin-1")
    assert direct.eligible(insert_text(hip, Rules().with_defaults()).text) == "not an NVIDIA kernel"
    # explicit --buffer-type direct where it does not apply: Proton's lowering, as auto would
    inner = insert_text(segment, Rules(kernel_scope=True, loops="both")).text
    assert LoweringOptions(buffer_type="direct").for_kernel(inner).buffer_type == "shared"
    assert LoweringOptions(buffer_type="direct").for_kernel(sampled).buffer_type == "shared"
    # every warp records (asked, or a persistent kernel): Proton's lowering
    whole = insert_text(text, Rules().with_defaults()).text
    assert LoweringOptions(warps="all").for_kernel(whole).buffer_type == "global"
    softmax = (SAMPLES / "cuda-90/softmax_kernel.ttgir").read_text(encoding="latin-1")
    assert LoweringOptions().for_kernel(insert_text(softmax, Rules().with_defaults()).text
                                        ).buffer_type == "global"
    # an explicit --buffer-type global keeps Proton's lowering
    assert LoweringOptions(buffer_type="global").for_kernel(whole).buffer_type == "global"


@pytest.mark.parametrize("path", INSTRUMENTED, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_eligible_samples_compile_with_protons_scope_ids(path, tmp_path):
    text = path.read_text(encoding="latin-1")
    if direct.eligible(text) is not None:
        pytest.skip(direct.eligible(text))
    records = direct.plan_lowering(text, 0).records
    ids = direct.scope_ids(records)
    names = {i: direct.record_kind_and_name(op)[1] for i, op in zip(ids, records, strict=True)}
    assert sorted(names.items()) == sorted(scope_names_of(str(path))[0])
    ck = _compile(text, tmp_path, LoweringOptions(buffer_type="direct", warps=(0,)))
    ptx = ck.asm["ptx"]
    # 2 header words, a word per loop, a clock word per record (per kept iteration in a loop)
    table, loops = direct.record_table(text), direct.loop_table(text)
    assert ck.metadata.profile_scratch_size == direct.block_bytes(table, loops)
    if not loops:
        assert direct.block_bytes(table) == -(-(8 + 4 * len(records)) // 8) * 8
    assert ptx.count("%globaltimer") == 1
    # (a loop of a few constant iterations may be unrolled: its reads then repeat)
    assert ptx.count("%clock64") == len(records) if not loops else ptx.count("%clock64") >= len(records)
    assert "%clock;" not in ptx
    plain = _compile(re.sub(r'^\s*proton\.record .*\n', "", text, flags=re.M), tmp_path / "p",
                     LoweringOptions())
    assert ptx.count("bar.sync") == plain.asm["ptx"].count("bar.sync")  # no barrier added
    assert ck.metadata.shared == plain.metadata.shared


def test_lowered_text_layout_and_fresh_names():
    text = (SAMPLES / "cuda-90/add_kernel.ttgir").read_text(encoding="latin-1")
    inst = insert_text(text, Rules(kernel_scope=True, loops=None, marks=False)).text
    taken = inst.replace('proton.record start "kernel"',
                         '%pi_dr1 = arith.constant 0 : i32\n    proton.record start "kernel"')
    assert "%pi_ddr" in direct.lower(taken) and "%pi_dr" not in direct.lower(taken).replace(
        "%pi_dr1 = arith.constant 0", "")  # fresh names never shadow the kernel's
    low = direct.lower(inst)
    assert "proton.record" not in low and low.count("%clock64;") == 2 and "%clock;" not in low
    # one timer read and the SM id after the last record, none at entry
    assert low.count("%globaltimer;") == 1 and low.index("%globaltimer;") > low.rindex("%clock64;")
    # word 0 the SM id and timer bits 32-55, word 1 timer bits 0-31, 2-3 the clocks: a 16-byte
    # block stored by thread 0 in one vector store after the kernel's own stores
    assert direct.block_bytes([[0, 0]] * 2) == 16 and direct.block_bytes([[0, 0]] * 8) == 40
    assert direct.data_bytes(inst) == 8
    stores = re.findall(r"st\.global(\.v\d)?\.b32 \[%a\+(\d+)\]", low)
    assert stores == [(".v4", "0")]
    assert low.index("st.global") > low.rindex("tt.store")
    assert "setp.eq.u32 %p, %t, 0" in low and "mov.u32 %t, %tid.x" in low
    assert direct.record_table(inst) == [[0, 0], [0, 1]]
    segment = (SAMPLES / "cuda-90/segment_mean_kernel.ttgir").read_text(encoding="latin-1")
    with pytest.raises(ValueError, match="nested loops"):
        direct.lower(insert_text(segment, Rules().with_defaults()).text)


def test_sampled_ctas_keep_the_direct_lowering_and_store_in_sampled_ctas_only(tmp_path):
    """--sample-ctas on a loop-free kernel: its records stay ours (they fell to Proton's
    lowering, with its per-CTA set-up, under the sampler's ``scf.if``); every CTA reads its
    clocks, only the sampled ones store the block. As the compiler prints the module too."""
    text = (SAMPLES / "thirdparty/cuda-90/rms_norm_fwd.ttgir").read_text(encoding="latin-1")
    every = insert_text(text, Rules(kernel_scope=True, loops="both")).text
    sampled = insert_text(text, Rules(kernel_scope=True, loops="both", sample_ctas=8)).text
    assert direct.eligible(sampled) is None and LoweringOptions().for_kernel(sampled).buffer_type == "direct"
    assert direct.record_table(sampled) == direct.record_table(every)
    assert direct.data_bytes(sampled) == direct.data_bytes(every)
    low = direct.lower(sampled)
    assert "proton.record" not in low and low.count("%clock64;") == 2
    assert not re.search(r"scf\.if %pi_cta0 \{\s*%pi_d", low)  # the clock reads left their if
    assert re.search(r"= arith\.select %pi_cta0, %pi_da\d+, %pi_dc\d+ : i64", low)
    # The compiler's own printing names the predicate %N: recognized by its definition.
    printed = re.sub(r"%pi_cta0\b(?!_)", "%17", sampled)
    assert direct.eligible(printed) is None and "arith.select %17," in direct.lower(printed)
    # An if on any other condition holding records only (an empty branch's region) is a
    # branch, not the sampler: Proton's lowering, as before.
    branch = printed.replace("arith.remsi", "arith.addi")
    assert direct.eligible(branch) == "records inside branches or nested loops"
    ck = _compile(sampled, tmp_path, LoweringOptions())
    plain = _compile(every, tmp_path / "every", LoweringOptions())
    assert ck.metadata.profile_scratch_size == plain.metadata.profile_scratch_size == 16
    ptx, base = ck.asm["ptx"], plain.asm["ptx"]
    assert ptx.count("%globaltimer") == 1 and ptx.count("bar.sync") == base.count("bar.sync")
    # Proton's preamble word 0xDEADBEEF, as PTX writes it: its lowering did not run (it would
    # also read the timer 3 times)
    assert "-559038737" not in ptx


def test_records_inside_a_loop_are_stored_each_iteration():
    """A loop's records are stored at the end of each iteration, into the loop's section
    (its first ``cap`` iterations), and the iterations it ran after the loop."""
    add = (SAMPLES / "cuda-90/add_kernel.ttgir").read_text(encoding="latin-1")
    inst = insert_text(add, Rules(kernel_scope=True, loops="both")).text  # + its store mark
    assert direct.eligible(inst) is None
    # kernel, loop, then iteration and mark regions inside the loop (its index third)
    assert direct.record_table(inst) == [[0, 0], [1, 0], [2, 0, 0], [3, 0, 0], [3, 1, 0],
                                         [2, 1, 0], [1, 1], [0, 1]]
    assert direct.loop_table(inst) == [[4, 4]]  # 4 iterations (constant), 4 words each
    assert direct.loop_table(inst, 0, 3) == [[2, 4, 3]]  # iterations 0 and 3
    words, sections, total = direct.layout(direct.record_table(inst), direct.loop_table(inst))
    # header, the loop's count, 4 top-level clocks; the section from word 8, 16 words
    assert words == [3, 4, 8, 9, 10, 11, 5, 6] and sections == [8] and total == 24
    assert direct.block_bytes(direct.record_table(inst), direct.loop_table(inst)) == 96
    low = direct.lower(inst)
    body = low[low.index("scf.for"):low.index("} loc", low.index("scf.for"))]
    assert body.count("%clock64;") == 4
    stores = re.findall(r"st\.global(\.v\d)?\.b32 \[%a\+(\d+)\]", body)
    assert stores == [(".v4", "32")]  # one 16-byte store per iteration, after its last record
    assert body.index("st.global") > body.rindex("%clock64;") and "setp.lt.u32 %q" not in body
    # layer norm: three loops with bounds known only at run time share the loop bytes, and
    # stores stop after the iterations that fit
    ln = (SAMPLES / "cuda-90/layernorm_fwd_kernel.ttgir").read_text(encoding="latin-1")
    inst = insert_text(ln, Rules(kernel_scope=True, loops="both")).text
    assert direct.loop_table(inst) == [[85, 2]] * 3
    assert direct.loop_table(inst, budget=4096) == [[170, 2]] * 3
    low = direct.lower(inst)
    assert low.count("setp.lt.u32 %q") == 3 and ", 85; and.pred %p, %p, %q;" in low
    assert low.count("arith.divsi") == 3 + 3  # each loop's iteration, and its trip count
    # every 3rd iteration: stored where iteration % 3 == 0, at slot iteration / 3
    assert direct.loop_table(inst, 0, 3) == [[85, 2, 3]] * 3
    low = direct.lower(inst, 0, every=3)
    assert low.count("arith.remui") == low.count("arith.divui") == 3
    assert re.findall(r"setp\.lt\.u32 %q, \$\d+, (\d+);", low) == ["1", "85"] * 3


def test_a_failed_direct_lowering_falls_back_to_protons(tmp_path):
    """A module ``direct.py`` cannot lower is left to Proton's passes (same buffer layout)."""
    from proton_inject.lower.proton import ProtonLowering

    class Broken:
        def __str__(self) -> str:
            raise RuntimeError("no text")

    hook = ProtonLowering("nvidia", LoweringOptions(), 232448)
    mod = Broken()
    assert hook.direct_module(mod) is mod
    assert ProtonLowering("nvidia", LoweringOptions(buffer_type="shared"), 232448).direct_module(mod) is mod


H100_DIRECT = ROOT / "tests" / "data" / "h100-direct"


def test_real_direct_buffer_decodes_like_protons_layout():
    """A buffer direct.py's lowering wrote on an H100 (the layer norm example, default rules:
    kernel + 3 loops, 1,151 CTAs, `proton-inject run`): expanded to Proton's layout and
    decoded, every CTA has each region once, loops inside the kernel region."""
    from proton_inject.analyze.decode import decode
    from proton_inject.formats.raw import load_raw

    data, meta = load_raw(H100_DIRECT / "00000-layernorm_fwd_kernel.json")
    ttgir = (H100_DIRECT / "layernorm_fwd_kernel.ttgir").read_text(encoding="latin-1")
    assert meta.buffer_type == "direct" and meta.direct_records == direct.record_table(ttgir)
    assert meta.bytes_per_cta == direct.block_bytes(meta.direct_records) == 40 and data.size == 1151 * 40
    d = decode(data, meta)
    assert d.meta.buffer_type == "direct" and d.meta.clock_bits == 32  # clocks are 32-bit words
    assert not d.issues and d.drops.dropped == 0 and d.clock.source == "clock-bracket"
    assert sorted(d.ctas.cta.tolist()) == list(range(1151)) and len(set(d.ctas.sm.tolist())) == 132
    ev = d.events
    kernel = ev.scope == 0
    assert len(ev.cta) == 4 * 1151 and (ev.warp == 0).all()
    k_start, k_end = np.empty(1151, np.int64), np.empty(1151, np.int64)
    k_start[ev.cta[kernel]], k_end[ev.cta[kernel]] = ev.start[kernel], ev.end[kernel]
    assert (ev.start >= k_start[ev.cta]).all() and (ev.end <= k_end[ev.cta]).all()
    assert 20_000 < np.median(ev.cycles[kernel]) < 35_000  # `report` printed 26,325
    # every CTA wrote its block within the launch: records inside its timer reads
    assert (d.ctas.init_ns <= d.ctas.prefinal_ns).all()


H100_LOOPS = ROOT / "tests" / "data" / "h100-direct-loops"


def test_real_direct_buffer_with_loop_records():
    """A buffer direct.py's lowering wrote on an H100 with every iteration of the layer norm's
    three loops (the GPU test above, --buffer-size 128: 5 of the 9 iterations kept): every CTA
    has each loop once and its first 5 iterations in order inside it; the 4 iterations per
    loop past the cap are counted as drops, and the report names the size that keeps them."""
    from proton_inject.analyze.decode import decode
    from proton_inject.analyze.report import run_report
    from proton_inject.formats.raw import load_raw

    data, meta = load_raw(H100_LOOPS / "00000-layernorm_fwd_kernel.json")
    ttgir = (H100_LOOPS / "layernorm_fwd_kernel.ttgir").read_text(encoding="latin-1")
    assert meta.direct_records == direct.record_table(ttgir, 128)
    assert meta.direct_loops == direct.loop_table(ttgir, 128) == [[5, 2]] * 3
    assert meta.bytes_per_cta == direct.block_bytes(meta.direct_records, meta.direct_loops) == 208
    d = decode(data, meta)
    assert not d.issues and d.clock.source == "clock-bracket"
    ev = d.events
    assert len(ev.cta) == 1151 * (4 + 3 * 5)
    for loop, it in ((1, 2), (3, 4), (5, 6)):
        lp, its = ev.scope == loop, ev.scope == it
        assert (np.bincount(ev.cta[lp], minlength=1151) == 1).all()
        assert (np.bincount(ev.cta[its], minlength=1151) == 5).all()
        lo, hi = np.empty(1151, np.int64), np.empty(1151, np.int64)
        lo[ev.cta[lp]], hi[ev.cta[lp]] = ev.start[lp], ev.end[lp]
        assert (ev.start[its] >= lo[ev.cta[its]]).all() and (ev.end[its] <= hi[ev.cta[its]]).all()
        order = np.lexsort((ev.start[its], ev.cta[its]))  # per CTA, iterations back to back
        s, e, c = ev.start[its][order], ev.end[its][order], ev.cta[its][order]
        same = c[1:] == c[:-1]
        assert (s[1:][same] >= e[:-1][same]).all()
    assert d.drops.dropped == 1151 * 3 * 4 * 2 and d.drops.ctas_with_drops == 1151
    assert d.drops.needed_buffer_size == 216  # 3 loops x 9 iterations x 2 clocks x 4 bytes
    text = run_report([H100_LOOPS]).text
    assert "were not kept" in text and "--buffer-size 216" in text, text


def test_regions_around_recorded_iterations_say_their_stores_are_in_them(tmp_path):
    """The layer norm buffer above: the kernel region holds the 15 kept iterations of its
    three loops, each loop region its own 5, the iterations none; the report says so in one
    note, and a trace written from it carries what that takes."""
    from proton_inject.analyze.report import run_report
    from proton_inject.formats.raw import load_raw

    _, meta = load_raw(H100_LOOPS / "00000-layernorm_fwd_kernel.json")
    assert meta.loop_scopes == [[2], [4], [6]]
    res = run_report([H100_LOOPS], as_json=True, trace_dir=tmp_path / "tr", trace_format="json")
    for summary in (res.summary, run_report(res.files, as_json=True).summary):
        held = {r["name"].split(" @")[0]: r["recorded_iterations_inside"]
                for r in summary["kernels"][0]["regions"]}
        assert held == {"kernel": 15.0, "loop partial": 5.0, "iter partial": None,
                        "loop start": 5.0, "iter start": None}, held
    [note] = [x for x in run_report([H100_LOOPS], verbose=True).text.splitlines() if "run inside" in x]
    assert "kernel (15.0 per instance)" in note and "loop start @layernorm.py:35 (5.0" in note
    assert "nothing subtracts those stores" in note
    assert re.search(r"median cycles \(\d+\.\d%\)", note), note  # not 3e+01%
    assert "--loops outer" in note
    # a kernel with no records inside loops gets no such note
    assert "run inside" not in run_report([H100_DIRECT], verbose=True).text


def test_direct_metadata_that_does_not_match_is_a_clear_error():
    from proton_inject.analyze.decode import decode
    from proton_inject.errors import UserError
    from proton_inject.formats.raw import LaunchMeta, load_raw

    data, meta = load_raw(H100_DIRECT / "00000-layernorm_fwd_kernel.json")
    from dataclasses import replace

    with pytest.raises(UserError, match="8 record slots needs bytes_per_cta=40, not 64"):
        decode(data, replace(meta, bytes_per_cta=64))
    d = meta.to_dict()
    del d["direct_records"]
    with pytest.raises(UserError, match="direct_records"):
        LaunchMeta.from_dict(d)


def test_protons_layout_under_direct_metadata_is_decoded_as_protons():
    """Where direct.py could not lower a kernel, Proton's passes did (same metadata, a larger
    block that starts with Proton's preamble): decode reads it as Proton's layout."""
    from dataclasses import replace

    from proton_inject.analyze.decode import decode
    from proton_inject.formats.raw import load_raw

    data, meta = load_raw(ROOT / "tests/data/h100-triton3.6/profile_scratch_add.json")
    plain = decode(data, meta)
    as_direct = replace(meta, buffer_type="direct", direct_records=[[0, 0], [0, 1]])
    d = decode(data, as_direct)
    assert d.meta.buffer_type == "global" and len(d.events) == len(plain.events) > 0
    assert (d.events.cycles == plain.events.cycles).all()


def test_runtime_metadata_of_a_direct_kernel_matches_the_h100_run(tmp_path):
    """The launch metadata the runtime writes for a kernel it lowered directly, from the
    instrumented IR alone, is what the H100 run of the fixture wrote (slots, warps, type)."""
    import json
    import time

    from proton_inject.collect.compile_hook import CompiledKernel
    from proton_inject.collect.launches import LaunchRecord
    from proton_inject.collect.session import Session

    want = json.loads((H100_DIRECT / "00000-layernorm_fwd_kernel.json").read_text())
    session = Session(None, tmp_path / "out")
    rel = f"{want['hash']}/layernorm_fwd_kernel.ttgir"  # where the compile hook writes it
    ir = tmp_path / "out" / "ir" / rel
    ir.parent.mkdir(parents=True)
    ir.write_text((H100_DIRECT / "layernorm_fwd_kernel.ttgir").read_text(encoding="latin-1"))
    session.hook.compiled["C"] = CompiledKernel("layernorm_fwd_kernel", want["hash"], True, file=rel)
    rec = LaunchRecord(seq=0, kernel="layernorm_fwd_kernel", hash=want["hash"], compile_hash="C",
                       grid=(1151, 1, 1), num_warps=8, num_ctas=1, stream=0, device=0,
                       scratch_bytes_per_cta=40)
    meta = session.sink.meta.of(rec)
    assert meta.buffer_type == "direct" and meta.direct_records == want["direct_records"]
    # no clock bracket ran in this session: the timer's top bits come from the host's clock
    assert abs(meta.timer_ref_ns - time.time_ns()) < 60e9
    assert meta.sampled_warps == want["sampled_warps"] == [0] and meta.sample_ctas == 1


def test_sample_iterations_in_the_metadata_and_a_note_where_it_does_not_apply(tmp_path):
    """--sample-iterations: a kernel whose loop records are lowered directly says so in its
    launch metadata (the loops' third entry); a kernel whose loop records Proton lowers (a loop
    of dots) records every iteration, and the run says that once."""
    from proton_inject.collect.compile_hook import CompiledKernel
    from proton_inject.collect.launches import LaunchRecord
    from proton_inject.collect.session import Session

    session = Session(None, tmp_path / "out", LoweringOptions(sample_iterations=4))
    for name, warps, rules in (("layernorm_fwd_kernel", 8, Rules(kernel_scope=True, loops="both")),
                               ("matmul_kernel", 8, Rules(kernel_scope=True, loops="both"))):
        text = insert_text((SAMPLES / f"cuda-90/{name}.ttgir").read_text(encoding="latin-1"), rules).text
        ir = tmp_path / "out" / "ir" / name / f"{name}.ttgir"
        ir.parent.mkdir(parents=True)
        ir.write_text(text, encoding="latin-1")
        session.hook.compiled[name] = CompiledKernel(name, name, True, file=f"{name}/{name}.ttgir")
        rec = LaunchRecord(seq=0, kernel=name, hash=name, compile_hash=name, grid=(4, 1, 1),
                           num_warps=warps, num_ctas=1, stream=0, device=0, scratch_bytes_per_cta=0)
        meta = session.sink.meta.of(rec)
        if name == "layernorm_fwd_kernel":
            assert meta.buffer_type == "direct" and meta.sample_iterations == 4
            assert meta.direct_loops == [[85, 2, 4]] * 3
            assert not session.result.messages
        else:
            assert meta.buffer_type == "shared" and meta.sample_iterations == 1
            assert session.result.messages == [
                "kernel matmul_kernel: --sample-iterations 4 does not apply (its records are "
                "lowered by Proton: records inside a loop with tensor-core or async-copy work); "
                "every iteration is recorded"]


def test_timer_bits_56_to_63_come_from_the_reference():
    from proton_inject.analyze.direct_blocks import timer_from

    t = np.array([0x18E_A5A5_1234_5678, 0x18E_A5A5_FFFF_FFF0, 0x18F_0000_0000_0010], np.int64)
    hi, lo = (t >> 32) & 0xFFFFFF, t & 0xFFFFFFFF
    for ref in (int(t[0]), int(t[0]) - 10**12, int(t[2]) + 10**15):
        assert (timer_from(hi.astype(np.uint32), lo.astype(np.uint32), ref) == t).all(), hex(ref)
    # a reference half the 2^56 ns period away picks the nearer period
    far = int(t[0]) + (1 << 56) - 10**9
    assert (timer_from(hi.astype(np.uint32), lo.astype(np.uint32), far) == t + (1 << 56)).all()
    assert (timer_from(hi.astype(np.uint32), lo.astype(np.uint32), None) == t & ((1 << 56) - 1)).all()
