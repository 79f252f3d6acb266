"""Autotuners time the plain builds (issue 11, same results): while Triton's Autotuner or
Inductor's CachingAutotuner benchmarks configs under `run` or `profile`, kernels build as the
program builds them without us, so the autotuner picks the config a plain run picks.

No GPU here: the sessions install their compile side only (override tree or compile hook,
Proton lowering sized for an H100) and kernels compile for cuda:90 down to cubin. The GPU
test (test_gpu_same_program.py) checks the choices and outputs end to end.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from proton_inject.collect.compile_hook import TreeSource
from proton_inject.collect.session import Session
from proton_inject.instrument.rules import Rules
from proton_inject.lower.options import LoweringOptions
from proton_inject.lower.proton import skipping

H100 = GPUTarget("cuda", 90, 32)
RULES = Rules(kernel_scope=True)


@triton.jit
def tuned_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)


SIG = {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
ATTRS = {(0,): [["tt.divisibility", 16]], (1,): [["tt.divisibility", 16]]}


def _src() -> ASTSource:
    return ASTSource(tuned_kernel, signature=SIG, constexprs={"BLOCK": 128}, attrs=ATTRS)


def _jit_compile():
    """Compile as the JIT does: the instrumentation mode in the options."""
    mode = triton.knobs.compilation.instrumentation_mode
    return triton.compile(_src(), target=H100, options={"instrumentation_mode": mode})


def _instrumented(ck) -> bool:
    return "proton.record" in ck.asm["ttgir"] and bool(ck.metadata.profile_scratch_size)


@contextmanager
def _compile_side(session: Session, tmp_path: Path):
    """The session's compile side installed (what start() installs besides the GPU parts)."""
    session._tmp = str(tmp_path / "session")
    os.makedirs(session._tmp, exist_ok=True)
    session.install_compiler(target=H100)
    try:
        yield session
    finally:
        session.uninstall()


def _session(kind: str, tmp_path: Path, keep_tuning: bool = False, compile: Any = None,
             options: LoweringOptions | None = None) -> Session:
    """A profile session, or a run session whose tree a profile session wrote while
    ``compile()`` built the kernel (default: as the JIT does)."""
    prof = Session(RULES, tmp_path / "prof", options, keep_tuning=keep_tuning)
    if kind == "profile":
        return prof
    with _compile_side(prof, tmp_path / "p"):
        assert _instrumented((compile or _jit_compile)())  # writes prof/ir
    return Session(TreeSource(tmp_path / "prof" / "ir"), tmp_path / "run", options, keep_tuning=keep_tuning)


def _plain_reference(tmp_path: Path):
    with triton.knobs.cache.scope():
        triton.knobs.cache.dir = str(tmp_path / "ref-cache")
        return triton.compile(_src(), target=H100, options={"instrumentation_mode": ""})


@pytest.mark.parametrize("kind", ["profile", "run"])
def test_autotuner_benchmarks_the_plain_build_and_restores_after_a_failure(kind, tmp_path):
    ref = _plain_reference(tmp_path)
    session = _session(kind, tmp_path, options=LoweringOptions(buffer_type="shared"))
    built, seen = [], []

    def bench(kernel_call, quantiles):
        seen.append((session._tls.tuning.kwargs["BLOCK"], skipping()))
        built.append(_jit_compile())  # what the JIT builds for this benchmarking launch
        if len(built) == 2:
            raise RuntimeError("benchmark failed")
        return [1.0, 1.0, 1.0]

    at = triton.autotune([triton.Config({"BLOCK": 128}), triton.Config({"BLOCK": 256})],
                         key=[], do_bench=bench)(tuned_kernel)
    at.nargs = {}
    with _compile_side(session, tmp_path / kind):
        knobs = triton.knobs.compilation
        state = (knobs.instrumentation_mode, knobs.override, triton.knobs.cache.dir)
        before = _jit_compile()
        assert at._bench(config=at.configs[0]) == [1.0, 1.0, 1.0]
        with pytest.raises(RuntimeError, match="benchmark failed"):
            at._bench(config=at.configs[1])
        assert (knobs.instrumentation_mode, knobs.override, triton.knobs.cache.dir) == state
        assert not skipping() and session._tls.tuning is None and not getattr(session._tls, "plain", False)
        after = _jit_compile()
    assert seen == [(128, True), (256, True)]
    assert _instrumented(before) and _instrumented(after)
    assert after.metadata.hash == before.metadata.hash  # the plain builds replaced nothing
    for ck in built:  # the program's own build, bit for bit
        assert not _instrumented(ck)
        assert ck.asm["cubin"] == ref.asm["cubin"]
    if kind == "profile":  # plain builds are neither reviewed IR nor "compiled elsewhere"
        assert all(c.instrumented for c in session.hook.compiled.values())


@pytest.mark.parametrize("kind", ["profile", "run"])
def test_keep_tuning_benchmarks_the_instrumented_build(kind, tmp_path):
    session = _session(kind, tmp_path, keep_tuning=True)
    built = []

    def bench(kernel_call, quantiles):
        built.append(_jit_compile())
        return [1.0, 1.0, 1.0]

    at = triton.autotune([triton.Config({"BLOCK": 128})], key=[], do_bench=bench)(tuned_kernel)
    at.nargs = {}
    with _compile_side(session, tmp_path / kind):
        at._bench(config=at.configs[0])
    assert len(built) == 1 and _instrumented(built[0])


def _caching_autotuner():
    from torch._inductor.runtime.hints import DeviceProperties, HeuristicType
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    props = DeviceProperties(type="cuda", index=0, multi_processor_count=132, cc=90, major=9,
                             regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048,
                             max_threads_per_block=1024, warp_size=32)
    meta = {"signature": dict(SIG), "device": props, "constants": {}, "configs": [ATTRS]}
    configs = [triton.Config({"BLOCK": 128}, num_warps=4), triton.Config({"BLOCK": 256}, num_warps=8)]
    return CachingAutotuner(tuned_kernel, meta, configs, None, [], False, HeuristicType.POINTWISE,
                            inductor_meta={})


@pytest.mark.parametrize("kind", ["profile", "run"])
def test_inductor_autotuner_times_plain_builds_of_the_same_configs(kind, tmp_path, monkeypatch):
    from torch._inductor.runtime import triton_helpers
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    # Inductor picks the active GPU driver before compiling; there is none here, and the
    # compile itself is for the GPUTarget its device properties give (cuda:90).
    monkeypatch.setattr(triton_helpers, "set_driver_to_gpu", lambda: None)
    originals = {k: CachingAutotuner.__dict__[k] for k in ("benchmark_all_configs", "coordinate_descent_tuning")}
    at = _caching_autotuner()
    # run's tree holds both configs' kernels (their constexprs differ, so do their hashes)
    session = _session(kind, tmp_path, compile=lambda: [at._precompile_config(c).kernel for c in at.configs][-1])
    with _compile_side(session, tmp_path / kind):
        for k, orig in originals.items():
            assert CachingAutotuner.__dict__[k] is not orig, k  # ours while installed
        inst = [at._precompile_config(c).kernel for c in at.configs]
        # Inductor leaves the mode out of its options: plain and instrumented builds have
        # one cache key, so only the plain builds' own cache keeps them apart.
        with session._tuning("inductor") as plain:
            assert plain
            twins = [at._precompile_config(c).kernel for c in at.configs]
        again = at._precompile_config(at.configs[0]).kernel
    for k, orig in originals.items():
        assert CachingAutotuner.__dict__[k] is orig, k
    assert all(_instrumented(ck) for ck in [*inst, again])
    assert not any(_instrumented(ck) for ck in twins)
    assert [ck.metadata.num_warps for ck in twins] == [4, 8]


@pytest.mark.parametrize("kind", ["profile", "run"])
def test_instrumented_build_over_the_shared_memory_limit_runs_plain(kind, tmp_path):
    """An autotuner that timed plain builds may choose a config whose instrumented build needs
    more shared memory than the GPU has: that kernel runs its plain build, with a warning,
    instead of failing the program's launch."""
    ref = _plain_reference(tmp_path)
    session = _session(kind, tmp_path, options=LoweringOptions(buffer_type="shared"))
    with _compile_side(session, tmp_path / kind):
        inst = _jit_compile()
        assert _instrumented(inst) and inst.metadata.shared > ref.metadata.shared
        session._started = True  # (start()'s GPU parts are not needed to compile)
        session._max_shared = inst.metadata.shared - 1  # as on a GPU with a little less
        try:
            ck = _jit_compile()
        finally:
            session._started = False
    assert not _instrumented(ck) and ck.asm["cubin"] == ref.asm["cubin"]
    assert [f["kernel"] for f in session.result.compile_fallbacks] == ["tuned_kernel"]
    (msg,) = [m for m in session.result.messages if m.startswith("warning")]
    assert "does not fit the GPU's shared memory" in msg and "runs uninstrumented" in msg, msg
