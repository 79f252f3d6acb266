"""Autotuners time the plain builds (issue 11, same results): while Triton's Autotuner or
Inductor's CachingAutotuner benchmarks configs under `run` or `profile`, kernels build as the
program builds them without us, so the autotuner picks the config a plain run picks.

No GPU here: the sessions install their compile side only (override tree or compile hook,
Proton lowering sized for an H100) and kernels compile for cuda:90 down to cubin. The GPU
test (test_gpu_same_program.py) checks the choices and outputs end to end.
"""

from __future__ import annotations

import pytest
import triton
from helpers.compile_side import (
    caching_autotuner,
    compile_side,
    instrumented,
    jit_compile,
    plain_reference,
    session_of,
    tuned_kernel,
)

from proton_inject.lower.options import LoweringOptions
from proton_inject.lower.proton import skipping


@pytest.mark.parametrize("kind", ["profile", "run"])
def test_autotuner_benchmarks_the_plain_build_and_restores_after_a_failure(kind, tmp_path):
    ref = plain_reference(tmp_path)
    session = session_of(kind, tmp_path, options=LoweringOptions(buffer_type="shared"))
    built, seen = [], []

    def bench(kernel_call, quantiles):
        seen.append((session.benchmarking.kwargs["BLOCK"], skipping()))
        built.append(jit_compile())  # what the JIT builds for this benchmarking launch
        if len(built) == 2:
            raise RuntimeError("benchmark failed")
        return [1.0, 1.0, 1.0]

    at = triton.autotune([triton.Config({"BLOCK": 128}), triton.Config({"BLOCK": 256})],
                         key=[], do_bench=bench)(tuned_kernel)
    at.nargs = {}
    with compile_side(session):
        knobs = triton.knobs.compilation
        state = (knobs.instrumentation_mode, knobs.override, triton.knobs.cache.dir)
        before = jit_compile()
        assert at._bench(config=at.configs[0]) == [1.0, 1.0, 1.0]
        with pytest.raises(RuntimeError, match="benchmark failed"):
            at._bench(config=at.configs[1])
        assert (knobs.instrumentation_mode, knobs.override, triton.knobs.cache.dir) == state
        assert not skipping() and session.benchmarking is None and not session.building_plain
        after = jit_compile()
    assert seen == [(128, True), (256, True)]
    assert instrumented(before) and instrumented(after)
    assert after.metadata.hash == before.metadata.hash  # the plain builds replaced nothing
    for ck in built:  # the program's own build, bit for bit
        assert not instrumented(ck)
        assert ck.asm["cubin"] == ref.asm["cubin"]
    if kind == "profile":  # plain builds are neither reviewed IR nor "compiled elsewhere"
        assert all(c.instrumented for c in session.hook.compiled.values())


@pytest.mark.parametrize("kind", ["profile", "run"])
def test_keep_tuning_benchmarks_the_instrumented_build(kind, tmp_path):
    session = session_of(kind, tmp_path, keep_tuning=True)
    built = []

    def bench(kernel_call, quantiles):
        built.append(jit_compile())
        return [1.0, 1.0, 1.0]

    at = triton.autotune([triton.Config({"BLOCK": 128})], key=[], do_bench=bench)(tuned_kernel)
    at.nargs = {}
    with compile_side(session):
        at._bench(config=at.configs[0])
    assert len(built) == 1 and instrumented(built[0])


@pytest.mark.parametrize("kind", ["profile", "run"])
def test_inductor_autotuner_times_plain_builds_of_the_same_configs(kind, tmp_path, monkeypatch):
    from torch._inductor.runtime import triton_helpers
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    # Inductor picks the active GPU driver before compiling; there is none here, and the
    # compile itself is for the GPUTarget its device properties give (cuda:90).
    monkeypatch.setattr(triton_helpers, "set_driver_to_gpu", lambda: None)
    originals = {k: CachingAutotuner.__dict__[k] for k in ("benchmark_all_configs", "coordinate_descent_tuning")}
    at = caching_autotuner()
    # run's tree holds both configs' kernels (their constexprs differ, so do their hashes)
    session = session_of(kind, tmp_path, compile=lambda: [at._precompile_config(c).kernel for c in at.configs][-1])
    with compile_side(session):
        for k, orig in originals.items():
            assert CachingAutotuner.__dict__[k] is not orig, k  # ours while installed
        inst = [at._precompile_config(c).kernel for c in at.configs]
        # Inductor leaves the mode out of its options: plain and instrumented builds have
        # one cache key, so only the plain builds' own cache keeps them apart.
        with session.autotuning("inductor") as plain:
            assert plain
            twins = [at._precompile_config(c).kernel for c in at.configs]
        again = at._precompile_config(at.configs[0]).kernel
    for k, orig in originals.items():
        assert CachingAutotuner.__dict__[k] is orig, k
    assert all(instrumented(ck) for ck in [*inst, again])
    assert not any(instrumented(ck) for ck in twins)
    assert [ck.metadata.num_warps for ck in twins] == [4, 8]


@pytest.mark.parametrize("kind", ["profile", "run"])
def test_instrumented_build_over_the_shared_memory_limit_runs_plain(kind, tmp_path):
    """An autotuner that timed plain builds may choose a config whose instrumented build needs
    more shared memory than the GPU has: that kernel runs its plain build, with a warning,
    instead of failing the program's launch."""
    ref = plain_reference(tmp_path)
    session = session_of(kind, tmp_path, options=LoweringOptions(buffer_type="shared"))
    with compile_side(session):
        inst = jit_compile()
        assert instrumented(inst) and inst.metadata.shared > ref.metadata.shared
        session.shared_memory_limit = inst.metadata.shared - 1  # as on a GPU with a little less
        ck = jit_compile()
    assert not instrumented(ck) and ck.asm["cubin"] == ref.asm["cubin"]
    assert [f["kernel"] for f in session.result.compile_fallbacks] == ["tuned_kernel"]
    (msg,) = [m for m in session.result.messages if m.startswith("warning")]
    assert "does not fit the GPU's shared memory" in msg and "runs uninstrumented" in msg, msg


def test_inductor_keeps_its_autotune_cache_and_only_its_graph_caches_go(tmp_path):
    """Under profile, Inductor must compile every kernel through the hook (graph caches off) yet
    take the plain run's config choices from its autotune cache. force_disable_caches would
    turn that cache off and change the kernels' module text, which names its entries (the
    reduce-overhead and Inductor dump rows of the library matrix differed, H100 2026-11-26).
    Choices timed on instrumented builds (--keep-tuning) stay out of the user's cache."""
    import os

    import torch._functorch.config as fcfg
    import torch._inductor.config as icfg

    before = (icfg.autotune_local_cache, icfg.fx_graph_cache, fcfg.enable_autograd_cache,
              icfg.force_disable_caches, icfg.compile_threads)
    for keep in (False, True):
        with compile_side(session_of("profile", tmp_path / f"keep{keep}", keep_tuning=keep)):
            assert icfg.fx_graph_cache is False and fcfg.enable_autograd_cache is False
            assert icfg.force_disable_caches is False and icfg.compile_threads == 1
            assert icfg.autotune_local_cache is (not keep)
            assert os.environ["TORCHINDUCTOR_FX_GRAPH_CACHE"] == "0"
            assert "TORCHINDUCTOR_FORCE_DISABLE_CACHES" not in os.environ
        assert (icfg.autotune_local_cache, icfg.fx_graph_cache, fcfg.enable_autograd_cache,
                icfg.force_disable_caches, icfg.compile_threads) == before
