"""On a GPU: our direct lowering (``--buffer-type direct``) against Proton's global buffer on the
layer norm example: the same outputs, every region once in every CTA, nested in its kernel
region (each lowering's kernel length printed); and records inside loops."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import load_module, requires_gpu
from helpers.gpu_programs import EXAMPLES, instrumented_tree

from proton_inject.instrument.rules import Rules
from proton_inject.lower.options import LoweringOptions

pytestmark = [pytest.mark.gpu, requires_gpu]


def test_direct_and_protons_global_lowering_agree_on_the_gpu(tmp_path):
    import torch

    from proton_inject.analyze.decode import decode
    from proton_inject.api import profile
    from proton_inject.formats.raw import find_raw, load_raw

    ex = EXAMPLES / "layernorm.py"
    inst = instrumented_tree(tmp_path, ["python", str(ex)], Rules().with_defaults())
    ln = load_module(ex, "pi_layernorm_direct")
    torch.manual_seed(0)
    x = torch.randn(1151, 8232, device="cuda", dtype=torch.float16)  # the example's arguments
    w = torch.rand(8232, device="cuda", dtype=torch.float16)
    b = torch.randn(8232, device="cuda", dtype=torch.float16)
    plain = ln.layernorm(x, w, b)
    medians = {}
    for btype in ("direct", "global"):
        out = tmp_path / btype
        with profile(instrumented=inst, out=out, options=LoweringOptions(buffer_type=btype)) as result:
            got = ln.layernorm(x, w, b)
        assert all(torch.equal(p, q) for p, q in zip(plain, got, strict=True)), btype
        assert [r.kernel for r in result.launches] == ["layernorm_fwd_kernel"], result.messages
        [path] = find_raw(out / "raw")
        data, meta = load_raw(path)
        assert meta.buffer_type == btype and meta.sampled_warps == [0]
        d = decode(data, meta)
        assert not [i for i in d.issues if "clock" not in i.cause and "timer" not in i.cause], d.warnings
        grid = int(np.prod(meta.grid))
        assert sorted(d.ctas.cta.tolist()) == list(range(grid))
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        assert d.ctas.sm.max() < sms and len(set(d.ctas.sm.tolist())) == sms
        assert (d.ctas.init_ns <= d.ctas.prefinal_ns).all()
        ev = d.events
        kernel = next(sid for sid, n in meta.scopes.items() if n == "kernel")
        mk = ev.scope == kernel
        k_start = np.empty(grid, np.int64)
        k_end = np.empty(grid, np.int64)
        k_start[ev.cta[mk]], k_end[ev.cta[mk]] = ev.start[mk], ev.end[mk]
        for sid, name in meta.scopes.items():
            m = ev.scope == sid
            assert sorted(ev.cta[m].tolist()) == list(range(grid)), (btype, name)
            assert (ev.warp[m] == 0).all() and (ev.cycles[m] > 0).all()
            # every loop region lies inside its CTA's kernel region
            assert (ev.start[m] >= k_start[ev.cta[m]]).all() and (ev.end[m] <= k_end[ev.cta[m]]).all()
            medians[(btype, name)] = float(np.median(ev.cycles[m]))
        loops = sum(v for (bt, n), v in medians.items() if bt == btype and n != "kernel")
        assert loops <= medians[(btype, "kernel")], medians
        # records sit inside their CTA's timer reads
        assert (ev.start_ns >= d.ctas.init_ns.min()).all()
    # Printed, not asserted: which lowering adds less to the kernel is a measurement of one
    # launch each (docs/host-performance.md, 2026-11-28 fourth session: on H200s the direct one
    # was 2-12% slower in 4 of 5 runs, faster in 1), not something a test can hold.
    print("\nregion medians (cycles):", medians)


def test_records_inside_loops_lowered_directly_on_the_gpu(tmp_path):
    """The layer norm example with every iteration of its three loops (8,232 columns, 9
    iterations each), outputs unchanged in every run: lowered directly by default and in
    Proton's shared buffer every CTA has all 9 iterations of each loop, with --buffer-size 128
    the first 5 (the drops counted), with --sample-iterations 2 iterations 0, 2, ..., 8; each
    iteration inside its loop's region. Set PI_FIXTURE_OUT to keep the --buffer-size 128
    run's raw files (``tests/data/h100-direct-loops``)."""
    import os
    import shutil

    import torch

    from proton_inject.analyze.decode import decode
    from proton_inject.api import profile
    from proton_inject.formats.raw import find_raw, load_raw

    ex = EXAMPLES / "layernorm.py"
    inst = instrumented_tree(tmp_path, ["python", str(ex)], Rules(kernel_scope=True, loops="both"))
    ln = load_module(ex, "pi_layernorm_loops")
    torch.manual_seed(0)
    x = torch.randn(1151, 8232, device="cuda", dtype=torch.float16)
    w = torch.rand(8232, device="cuda", dtype=torch.float16)
    b = torch.randn(8232, device="cuda", dtype=torch.float16)
    plain = ln.layernorm(x, w, b)
    medians = {}
    runs = {"direct": (LoweringOptions(), 9), "shared": (LoweringOptions(buffer_type="shared"), 9),
            "direct 128": (LoweringOptions(buffer_size=128), 5),
            "direct every 2": (LoweringOptions(sample_iterations=2), 5)}
    for name, (opts, kept) in runs.items():
        out = tmp_path / name.replace(" ", "_")
        with profile(instrumented=inst, out=out, options=opts) as result:
            got = ln.layernorm(x, w, b)
        assert all(torch.equal(p, q) for p, q in zip(plain, got, strict=True)), name
        [path] = find_raw(out / "raw")
        data, meta = load_raw(path)
        assert meta.buffer_type == name.split()[0], result.messages
        assert meta.sample_iterations == opts.sample_iterations
        d = decode(data, meta)
        ev = d.events
        iters = {sid: n for sid, n in meta.scopes.items() if n.startswith("iter")}
        loops = {sid: n for sid, n in meta.scopes.items() if n.startswith("loop")}
        assert len(iters) == len(loops) == 3
        for sid in iters:
            m = ev.scope == sid
            per_cta = np.bincount(ev.cta[m], minlength=1151)
            assert (per_cta == kept).all(), (name, np.unique(per_cta))
            medians[(name, iters[sid])] = float(np.median(ev.cycles[m]))
        # each iteration inside its loop's region, iterations in order
        for it_sid, lp_sid in zip(sorted(iters), sorted(loops), strict=True):
            li, ll = ev.scope == it_sid, ev.scope == lp_sid
            lo, hi = np.empty(1151, np.int64), np.empty(1151, np.int64)
            lo[ev.cta[ll]], hi[ev.cta[ll]] = ev.start[ll], ev.end[ll]
            assert (ev.start[li] >= lo[ev.cta[li]]).all() and (ev.end[li] <= hi[ev.cta[li]]).all()
        if name == "direct 128":
            assert d.drops.dropped == 1151 * 3 * (9 - kept) * 2 and d.drops.ctas_with_drops == 1151
            assert d.drops.needed_buffer_size == 3 * 9 * 2 * 4  # 216 bytes keep all 9
            if os.environ.get("PI_FIXTURE_OUT"):
                keep = Path(os.environ["PI_FIXTURE_OUT"])
                keep.mkdir(parents=True, exist_ok=True)
                for f in path.parent.glob(path.name.replace(".json", "") + ".*"):
                    shutil.copy(f, keep / f.name)
                shutil.copy(next(inst.rglob("layernorm_fwd_kernel.ttgir")), keep)
        else:
            assert d.drops.dropped == 0 and not [i for i in d.issues if "clock" not in i.cause
                                                 and "timer" not in i.cause], d.warnings
    # (memory-bound iterations: their medians moved by 30% between runs of one lowering)
    print("\niteration medians (cycles):", medians)
