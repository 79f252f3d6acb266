"""Small TTGIR helpers for tests: compile a kernel ahead of time (plain, with Proton's lowering,
or through the compile hook), add kernel-scope records."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import triton
from triton.backends.compiler import GPUTarget

from proton_inject.lower.options import LoweringOptions
from proton_inject.lower.proton import installed

H100 = GPUTarget("cuda", 90, 32)


def compile_ttgir(fn, signature: dict, constexprs: dict, target, num_warps: int = 4) -> str:
    """TTGIR of ``fn`` compiled for ``target`` on this machine (private cache, no GPU)."""
    from triton.compiler import ASTSource

    sig = {**signature, **{k: "constexpr" for k in constexprs}}
    src = ASTSource(fn, signature=sig, constexprs=constexprs)
    with tempfile.TemporaryDirectory() as cache, triton.knobs.cache.scope():
        triton.knobs.cache.dir = cache
        k = triton.compile(src, target=target, options={"num_warps": num_warps})
        return k.asm["ttgir"]


def add_kernel_scope(text: str, name: str = "kernel") -> str:
    """Put ``proton.record start/end NAME`` around the function body (test-only, line based)."""
    out = []
    for line in text.splitlines(keepends=True):
        if re.match(r"\s*tt\.return\b", line):
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f'{indent}proton.record end "{name}"\n')
        out.append(line)
        if re.match(r"\s*tt\.func\b", line) and line.rstrip().endswith("{"):
            indent = line[: len(line) - len(line.lstrip())] + "  "
            out.append(f'{indent}proton.record start "{name}"\n')
    return "".join(out)


def compile_lowered(path: str | Path, options: LoweringOptions, cache: Path, target=H100,
                    max_shared: int | None = None):
    """The TTGIR file ``path`` compiled with Proton's lowering (always, into ``cache``)."""
    with triton.knobs.cache.scope(), triton.knobs.compilation.scope():
        triton.knobs.cache.dir = str(cache)
        triton.knobs.compilation.always_compile = True
        with installed(options, target=target, max_shared=max_shared):
            mode = triton.knobs.compilation.instrumentation_mode
            return triton.compile(str(path), target=target, options={"instrumentation_mode": mode})


def compile_with_hook(src, cache: Path, hook, target=H100, options: LoweringOptions | None = None,
                      num_warps: int | None = None):
    """Compile ``src`` as a profiled process would: Proton lowering, ``hook`` (a CompileHook) on
    the stages, the given cache; ``hook`` None compiles plain."""
    extra = {} if num_warps is None else {"num_warps": num_warps}
    with triton.knobs.cache.scope(), triton.knobs.compilation.scope():
        triton.knobs.cache.dir = str(cache)
        if hook is None:
            return triton.compile(src, target=target, options={"instrumentation_mode": "", **extra})
        prev = triton.knobs.runtime.add_stages_inspection_hook
        triton.knobs.runtime.add_stages_inspection_hook = hook
        try:
            with installed(options or LoweringOptions(), target=target, tag="test"):
                # The JIT passes the mode in the options (part of the cache key); so do we.
                mode = triton.knobs.compilation.instrumentation_mode
                return triton.compile(src, target=target, options={"instrumentation_mode": mode, **extra})
        finally:
            triton.knobs.runtime.add_stages_inspection_hook = prev
