"""Small TTGIR helpers for tests: compile a kernel ahead of time, add kernel-scope records."""

from __future__ import annotations

import re
import tempfile

import triton


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
