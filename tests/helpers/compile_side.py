"""A session's compile side without a GPU: what ``Session.install_compiler`` installs for an
H100 (cuda:90), an autotunable kernel compiled as the JIT compiles it, and Inductor's
CachingAutotuner over it. Shared by the tests of autotuning under a session."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from proton_inject.collect.compile_hook import TreeSource
from proton_inject.collect.session import Session
from proton_inject.instrument.rules import Rules
from proton_inject.lower.options import LoweringOptions

H100 = GPUTarget("cuda", 90, 32)
RULES = Rules(kernel_scope=True)


@triton.jit
def tuned_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)


SIG = {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}
ATTRS = {(0,): [["tt.divisibility", 16]], (1,): [["tt.divisibility", 16]]}


def tuned_source() -> ASTSource:
    return ASTSource(tuned_kernel, signature=SIG, constexprs={"BLOCK": 128}, attrs=ATTRS)


def jit_compile():
    """``tuned_kernel`` compiled as the JIT compiles it: the instrumentation mode in the options."""
    mode = triton.knobs.compilation.instrumentation_mode
    return triton.compile(tuned_source(), target=H100, options={"instrumentation_mode": mode})


def plain_reference(tmp_path: Path):
    """``tuned_kernel`` compiled as a plain run compiles it, in a cache of its own."""
    with triton.knobs.cache.scope():
        triton.knobs.cache.dir = str(tmp_path / "ref-cache")
        return triton.compile(tuned_source(), target=H100, options={"instrumentation_mode": ""})


def instrumented(ck) -> bool:
    return "proton.record" in ck.asm["ttgir"] and bool(ck.metadata.profile_scratch_size)


@contextmanager
def compile_side(session: Session) -> Iterator[Session]:
    """The session's compile side installed for an H100 (what start() installs besides the
    GPU parts), undone after the block."""
    session.install_compiler(target=H100)
    try:
        yield session
    finally:
        session.uninstall()


def session_of(kind: str, tmp_path: Path, keep_tuning: bool = False, compile: Any = None,
               options: LoweringOptions | None = None) -> Session:
    """A profile session, or a run session whose tree a profile session wrote while
    ``compile()`` built the kernel (default: ``jit_compile``)."""
    prof = Session(RULES, tmp_path / "prof", options, keep_tuning=keep_tuning)
    if kind == "profile":
        return prof
    with compile_side(prof):
        assert instrumented((compile or jit_compile)())  # writes prof/ir
    return Session(TreeSource(tmp_path / "prof" / "ir"), tmp_path / "run", options, keep_tuning=keep_tuning)


def caching_autotuner():
    """Inductor's CachingAutotuner over ``tuned_kernel``, two configs (4 and 8 warps), for an
    H100's device properties."""
    from torch._inductor.runtime.hints import DeviceProperties, HeuristicType
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    props = DeviceProperties(type="cuda", index=0, multi_processor_count=132, cc=90, major=9,
                             regs_per_multiprocessor=65536, max_threads_per_multi_processor=2048,
                             max_threads_per_block=1024, warp_size=32)
    meta = {"signature": dict(SIG), "device": props, "constants": {}, "configs": [ATTRS]}
    configs = [triton.Config({"BLOCK": 128}, num_warps=4), triton.Config({"BLOCK": 256}, num_warps=8)]
    return CachingAutotuner(tuned_kernel, meta, configs, None, [], False, HeuristicType.POINTWISE,
                            inductor_meta={})
