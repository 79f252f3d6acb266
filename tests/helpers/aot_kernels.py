"""Kernel sources the AOT tests compile on the CPU (tests/unit/dump) and launch on the GPU
(tests/gpu), written to a file as `dump` and a program import them."""

from __future__ import annotations

import textwrap
from pathlib import Path

SPEC_SRC = textwrap.dedent(
    """
    import triton
    import triton.language as tl


    @triton.jit(do_not_specialize=["seed"])
    def spec_kernel(x_ptr, y_ptr, mask_ptr, n, seed, scale, flag,
                    MODE: tl.constexpr, PREC: tl.constexpr, HAS_MASK: tl.constexpr,
                    EPS: tl.constexpr, BLOCK: tl.constexpr = 128):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        x = tl.load(x_ptr + offs, mask=m)
        if mask_ptr is not None:
            x = x * tl.load(mask_ptr + offs, mask=m)
        if MODE == "mean":
            x = x / n
        if HAS_MASK:
            x = x + EPS
        if flag:
            x = x * scale
        tl.store(y_ptr + offs, x + seed, mask=m)
    """
)


TUNED_SRC = textwrap.dedent(
    """
    import triton
    import triton.language as tl


    @triton.autotune(
        configs=[triton.Config({"BLOCK": 64}, num_warps=2),
                 triton.Config({"BLOCK": 128}, num_warps=4, num_stages=2),
                 triton.Config({"BLOCK": 128}, num_warps=8, num_stages=2)],
        key=["n"],
    )
    @triton.heuristics({"HAS_B": lambda args: args["b_ptr"] is not None,
                        "EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
    @triton.jit
    def tuned_kernel(a_ptr, b_ptr, n, BLOCK: tl.constexpr, HAS_B: tl.constexpr,
                     EVEN: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(a_ptr + offs, mask=offs < n)
        if HAS_B:
            x += tl.load(b_ptr + offs, mask=offs < n)
        tl.store(a_ptr + offs, x, mask=offs < n)
    """
)


def compiling_program(kernel: str, factor: int, blocks: tuple[int, ...], num_warps: int, tail: str) -> str:
    """A program (no GPU needed) that compiles ``kernel`` (x *= ``factor``) for cuda:90 the way
    the JIT would, once per BLOCK in ``blocks``, then runs ``tail``."""
    return textwrap.dedent(
        f"""
        import sys
        import triton
        import triton.language as tl
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource


        @triton.jit
        def {kernel}(x_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * {factor}, mask=offs < n)


        for block in {blocks!r}:
            src = ASTSource({kernel}, signature={{"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"}},
                            constexprs={{"BLOCK": block}}, attrs={{(0,): [["tt.divisibility", 16]]}})
            triton.compile(src, target=GPUTarget("cuda", 90, 32), options={{"num_warps": {num_warps}}})
        """
    ) + textwrap.dedent(tail)


def write_kernel(folder: Path, name: str, src: str) -> Path:
    """``src`` as ``folder/name.py``, importable as the module ``name``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.py"
    path.write_text(src)
    return path


def binder_hash(fn, target: str, *args, **kwargs) -> str:
    """The override hash JITFunction.run computes for a launch on ``target`` with these args
    (Triton's own binder and packing, no GPU needed)."""
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    from proton_inject.dump.aot import override_hash, parse_target

    backend = make_backend(parse_target(target))
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    bound, spec, opts = binder(*args, **kwargs)
    _, signature, constexprs, attrs = fn._pack_args(backend, {}, bound, spec, opts)
    return override_hash(ASTSource(fn, signature, constexprs, attrs))
