"""Inline a kernel's noinline callees with MLIR (Proton's lowering takes one function per module).
"""

from __future__ import annotations

import re
from pathlib import Path

from proton_inject.errors import UserError
from proton_inject.ttgir.parser import parse
from proton_inject.ttgir.tree import Module

_RECORD_AT_EOL = re.compile(r'^([ \t]*proton\.record (?:start|end) "(?:[^"\\\r\n]++|\\.)*+")(?=\r?$)',
                            re.M)


_CALLEE = re.compile(r'\s*(@[\w$.]+|@"(?:[^"\\]++|\\.)*+")')


_NOINLINE = re.compile(r"^([ \t]*tt\.func\b[^\n]*?\bnoinline = )true\b", re.M)


def inline_callees(text: str, module: Module, path: str) -> str:
    """The instrumented text with every function the kernel calls inlined into it.

    Proton's lowering takes one function per module ("only one function per module is
    supported"), and a `@triton.jit(noinline=True)` callee is a second one. On this copy
    only, the noinline flags are cleared and MLIR's inliner and symbol DCE run through
    Triton's bindings; the module comes back printed by MLIR (so not line for line the
    input). A call that cannot be inlined refuses the kernel, naming the callee.
    """
    import tempfile

    from triton._C.libtriton import ir, passes

    from proton_inject.lower.proton import mlir_context

    ctx = mlir_context()
    with tempfile.TemporaryDirectory(prefix="proton-inject-inline.") as tmp:
        file = Path(tmp) / Path(path).name
        # Records carry no loc; MLIR would give them one naming this temporary file.
        copy = _RECORD_AT_EOL.sub(r"\1 loc(unknown)", _NOINLINE.sub(r"\1false", text))
        file.write_text(copy, encoding="latin-1")
        try:
            mod = ir.parse_mlir_module(str(file), ctx)
            mod.context = ctx
            pm = ir.pass_manager(ctx)
            passes.common.add_inliner(pm)
            passes.common.add_symbol_dce(pm)
            pm.run(mod, "inline")
        except RuntimeError as e:
            callees = ", ".join("@" + f.name for f in module.functions if f.visibility != "public")
            raise UserError(f"{path}: the kernel calls {callees or 'other functions'}, which "
                            f"must be inlined for Proton's lowering (one function per module), "
                            f"but MLIR could not ({e}); profile it without this kernel "
                            "(--kernel) or make the callee inlinable") from None
        out = mod.str()
    left = parse(out, path)
    if len(left.functions) > 1:
        called = sorted({m.group(1) for op in left.walk() if op.name == "tt.call"
                         for m in [_CALLEE.match(op.head)] if m})
        names = ", ".join("@" + f.name for f in left.functions)
        why = (f"it calls {', '.join(called)}, which MLIR's inliner left as a call (recursive, "
               "or a declaration without a body)" if called else
               f"the module holds several functions ({names}) that call nothing to inline")
        raise UserError(f"{path}: {why}; Proton's lowering supports one function per module, "
                        "so this kernel cannot be profiled")
    return out
