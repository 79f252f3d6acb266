"""Dump TTGIR into the layout that ``TRITON_KERNEL_OVERRIDE`` reads, ahead of time (AOT).

The dump layout is ``<out>/<hash>/<kernel>.ttgir`` plus ``<out>/manifest.json``. ``<hash>``
is the directory name Triton 3.6 itself uses for that kernel's override files:
``triton.compiler.compile`` calls ``get_override_manager(src.hash())``, which names the
directory ``base32(sha256(key))`` (no ``=`` padding), where ``ASTSource.hash()`` builds ``key``
from the function's ``cache_key``, the specialization attributes, the sorted signature types
and the constexpr values. That hash depends on neither the target nor num_warps/num_stages,
so an override file is found for every launch of the kernel with the same specialization.

To get the hash a real launch gets, ``compile_aot`` builds the ``ASTSource`` exactly as the
JIT launcher does (``JITFunction._pack_args``): every parameter is in the signature
(constexprs typed ``"constexpr"``), constexprs are keyed by parameter index, and every pointer
or integer argument gets an attribute entry, ``[["tt.divisibility", 16]]`` or ``[]``.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proton_inject.dump.kernel_source import (
    KernelSpec,
    apply_heuristics,
    describe_config,
    load_kernel,
    load_kernel_spec,
)
from proton_inject.dump.signature import _UNSPECIALIZED_SCALARS, _split_hint, parse_signature
from proton_inject.errors import UserError
from proton_inject.formats.manifest import jsonable
from proton_inject.lower.target import format_target, parse_target

# --- autotune and heuristics wrappers --------------------------------------------


# --- compiling ------------------------------------------------------------------


@dataclass
class AotResult:
    """One kernel compiled ahead of time: its TTGIR and what names it in the override tree."""

    kernel_name: str
    hash: str  # override directory name: base32(sha256(ASTSource key)), as Triton names it
    source_file: str
    target: str
    num_warps: int
    num_stages: int
    num_ctas: int
    signature: dict[str, str]  # every parameter; constexprs typed "constexpr"
    constexprs: dict[str, Any]
    divisibility_16: list[str]  # arguments specialized as divisible by 16
    ttgir: str
    metadata: dict[str, Any] = field(default_factory=dict)
    config: int | None = None  # index of the @triton.autotune config dumped
    config_desc: str | None = None
    fn_key: str | None = None  # source_facts' digest of the function's cache key

    @property
    def ttgir_relpath(self) -> str:
        return f"{self.hash}/{self.kernel_name}.ttgir"


def _string_paths(value: Any, path: tuple[int, ...]) -> list[tuple[tuple[int, ...], str]]:
    """Paths of the strings in a constexpr value (nested in tuples/lists), in Triton's order."""
    if isinstance(value, list | tuple):
        return [hit for i, v in enumerate(value) for hit in _string_paths(v, (*path, i))]
    return [(path, value)] if isinstance(value, str) else []


def build_source(fn, signature: Mapping[str, str], constexprs: Mapping[str, Any], where: str,
                  target=None):
    """The ASTSource the JIT launcher would build for these types and constexpr values.

    Mirrors ``JITFunction._pack_args``: every parameter's specialization is a (type, key)
    pair; the key of a pointer is "D" when 16-byte aligned (plus "S" on AMD with buffer ops,
    for a tensor under 2 GiB), of an integer "D" when divisible by 16, and a constexpr's key
    is its value. Every key that is a string (a string constexpr value too) becomes an
    ``attrs`` entry through the backend's ``parse_attr``, in parameter order.
    """
    from triton.compiler import ASTSource, make_backend

    backend = make_backend(target if target is not None else parse_target("cuda:90"))
    hip = backend.target.backend == "hip"
    params = list(fn.arg_names)
    unknown = [n for n in list(signature) + list(constexprs) if n not in params]
    if unknown:
        raise UserError(
            f"{where}: no parameter named {', '.join(map(repr, unknown))} "
            f"(parameters: {', '.join(params)})"
        )
    both = [n for n in signature if n in constexprs]
    if both:
        raise UserError(f"{where}: {', '.join(both)} given both in the signature and as constexpr")

    full_sig: dict[str, str] = {}
    cx: dict[str, Any] = {}
    keys: list[tuple[tuple[int, ...], str]] = []  # (path, specialization key), in param order
    div16: list[str] = []
    missing: list[str] = []
    for i, p in enumerate(fn.params):
        name = p.name
        given = signature.get(name)
        if name in constexprs or (given is not None and given.lower() == "none"):
            full_sig[name] = "constexpr"
            cx[name] = constexprs.get(name)
            keys += _string_paths(cx[name], (i,))
        elif p.is_constexpr:
            if p.has_default:
                full_sig[name] = "constexpr"
                cx[name] = p.default
                keys += _string_paths(cx[name], (i,))
            else:
                missing.append(f"{name} (constexpr)")
        elif given is not None:
            full_sig[name], key = _arg_key(p, given, where, hip)
            if key is not None:
                if key.startswith("D"):
                    div16.append(name)
                keys.append(((i,), key))
        else:
            missing.append(name)
    if missing:
        raise UserError(
            f"{where}: missing {', '.join(missing)}: give every parameter a type in --signature "
            "or a value with --constexpr" + _wrapper_hint(fn)
        )
    attrs = {path: backend.parse_attr(key) for path, key in keys}
    src = ASTSource(fn, signature=full_sig, constexprs=cx, attrs=attrs)
    return src, full_sig, cx, div16


def _arg_key(p, given: str, where: str, hip: bool) -> tuple[str, str | None]:
    """A typed parameter's type and its specialization key as the JIT builds it ("D": assumed
    divisible by 16; None: the JIT gives it no attribute entry)."""
    from triton import knobs

    name = p.name
    base, hint = _split_hint(name, given)
    scalar = base.lstrip("*")
    if base.startswith("tensordesc") or (
        not base.startswith("*") and scalar in _UNSPECIALIZED_SCALARS
    ):
        return base, None
    if p.do_not_specialize:
        if hint == 16:
            raise UserError(
                f"{where}: {name} is in do_not_specialize, so the JIT never assumes it "
                "divisible by 16: drop the :16 hint"
            )
        return base, None
    if p.do_not_specialize_on_alignment:
        if hint == 16:
            raise UserError(
                f"{where}: {name} is in do_not_specialize_on_alignment, so the JIT never "
                "assumes it divisible by 16: drop the :16 hint"
            )
        hint = 1
    if hint is None:
        hint = 16 if base.startswith("*") else 1
    key = "D" if hint == 16 else ""
    if base.startswith("*") and hip and knobs.amd.use_buffer_ops:
        key += "S"  # AMD: any tensor under 2 GiB may use buffer ops
    return base, key


def _wrapper_hint(fn) -> str:
    """Where missing names come from, for a kernel with autotune/heuristics wrappers."""
    spec = _SPECS.get(id(fn))
    if spec is None:
        return ""
    parts = []
    if spec.configs:
        listing = "; ".join(f"[{i}] {describe_config(c)}" for i, c in enumerate(spec.configs))
        parts.append(f"@triton.autotune configs (choose one with --config N): {listing}")
    if spec.heuristics:
        parts.append(f"@triton.heuristics computes {', '.join(spec.heuristics)}")
    return ". " + "; ".join(parts) if parts else ""


_SPECS: dict[int, KernelSpec] = {}  # JITFunction id -> its wrappers, for messages


def source_facts(src) -> dict[str, Any]:
    """What of a compile's ASTSource goes into its override hash, by parameter name: the
    signature, the constexprs, the arguments specialized as divisible by 16, and ``fn_key``, a
    digest of the function's own cache key (its source and the globals and functions it uses).
    Two compiles whose hashes differ differ in one of these."""
    import hashlib

    fn = src.fn
    names = list(fn.arg_names)

    def name_of(key) -> str:
        idx = key[0] if isinstance(key, tuple) and key else key
        return names[idx] if isinstance(idx, int) and idx < len(names) else str(key)

    attrs = getattr(src, "attrs", {}) or {}
    facts = {
        "signature": {name_of(k): str(v) for k, v in dict(src.signature).items()},
        "constexprs": {name_of(k): jsonable(v) for k, v in dict(src.constants).items()},
        "divisibility_16": sorted(name_of(k) for k, v in attrs.items()
                                  if any(a == ["tt.divisibility", 16] for a in v)),
        "fn_key": hashlib.sha256(str(fn.cache_key).encode()).hexdigest()[:16],
    }
    if moving := per_process_globals(fn):
        facts["per_process_globals"] = moving
    return facts


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def per_process_globals(fn) -> list[str]:
    """Constexpr globals (of the kernel or the functions it calls, at any depth) that Triton
    hashes by a repr holding a memory address, e.g. a ``@tl.constexpr`` Python function
    (FlagGems' sort): the kernel's hash, and so its override and cache entries, changes in
    every process. Each called function is walked itself: Triton merges a callee's globals into
    the caller's before the callee's own cache key has found them."""
    from triton.language.core import constexpr
    from triton.runtime.jit import JITFunction

    found: set[str] = set()
    seen: set[int] = set()
    todo = [fn]
    while todo:
        f = todo.pop()
        if id(f) in seen:
            continue
        seen.add(id(f))
        _ = f.cache_key  # computing it fills used_global_vals
        for (name, _), (val, _) in (getattr(f, "used_global_vals", None) or {}).items():
            if isinstance(val, constexpr) and _ADDRESS.search(repr(val)):
                found.add(name)
        code = getattr(getattr(f, "fn", None), "__code__", None)
        names = getattr(f, "__globals__", None) or {}
        todo += [v for n in (code.co_names if code else ()) if isinstance(v := names.get(n), JITFunction)]
    return sorted(found)


def override_hash(src) -> str:
    """Directory name Triton's override/dump managers use for ``src`` (see module doc)."""
    from triton.runtime.cache import _base32

    return _base32(src.hash())


def _variants(spec: KernelSpec, constexprs: dict[str, Any], config: int | None,
              options: dict[str, Any], where: str) -> list[tuple[int | None, dict, dict]]:
    """(config index, constexprs, options) of each compile a dump makes for this kernel."""
    user_opts = {k: v for k, v in options.items() if v is not None}
    if not spec.configs:
        if config is not None:
            raise UserError(f"{where}: --config {config}: the kernel has no @triton.autotune")
        return [(None, constexprs, user_opts)]
    if config is not None:
        if not 0 <= config < len(spec.configs):
            raise UserError(f"{where}: --config {config}: the kernel has {len(spec.configs)} "
                            f"autotune configs (0 to {len(spec.configs) - 1})")
        chosen = [config]
    elif all(set(c.kwargs) <= set(constexprs) for c in spec.configs) and (
            any(c.kwargs for c in spec.configs) or "num_warps" in user_opts):
        return [(None, constexprs, user_opts)]  # every tuned value given: the user's config
    else:
        chosen = list(range(len(spec.configs)))
    out = []
    for i in chosen:
        c = spec.configs[i]
        opts = {k: getattr(c, k, None) for k in ("num_warps", "num_stages", "num_ctas", "maxnreg")}
        opts = {k: v for k, v in opts.items() if v is not None}
        out.append((i, {**c.kwargs, **constexprs}, {**opts, **user_opts}))
    return out


def compile_aot_all(
    source_file: str | os.PathLike,
    kernel_name: str,
    signature: Mapping[str, str] | str,
    constexprs: Mapping[str, Any] | None,
    target,
    num_warps: int | None = None,
    num_stages: int | None = None,
    num_ctas: int | None = None,
    config: int | None = None,
) -> list[AotResult]:
    """Compile a kernel for ``target`` on this machine (no GPU needed): one result, or one per
    ``@triton.autotune`` config unless ``config`` picks one (or every tuned value is given in
    ``constexprs``). ``@triton.heuristics`` values are computed as a launch would.

    Options left None take Triton's defaults for the target (what a launch without them gets).
    Uses a private, temporary Triton cache so the user's cache is neither read nor written,
    and switches off any ``TRITON_KERNEL_OVERRIDE``/``TRITON_KERNEL_DUMP`` for the compile.
    """
    if isinstance(signature, str):
        signature = parse_signature(signature)
    constexprs = dict(constexprs or {})
    gpu_target = parse_target(target) if isinstance(target, str) else target
    where = f"{source_file}:{kernel_name}"
    for opt, val in (("num_warps", num_warps), ("num_stages", num_stages), ("num_ctas", num_ctas)):
        if val is not None and (not isinstance(val, int) or val < 1):
            raise UserError(f"{where}: {opt} must be a positive integer, got {val!r}")
    spec = load_kernel_spec(source_file, kernel_name)
    _SPECS[id(spec.fn)] = spec
    options = {"num_warps": num_warps, "num_stages": num_stages, "num_ctas": num_ctas}
    results = []
    for idx, cx, opts in _variants(spec, constexprs, config, options, where):
        cx = apply_heuristics(spec, signature, cx, opts, where)
        r = _compile_one(spec.fn, signature, cx, opts, gpu_target, source_file, where)
        if idx is not None:
            r.config = idx
            r.config_desc = describe_config(spec.configs[idx])
        results.append(r)
    return results


def compile_aot(
    source_file: str | os.PathLike,
    kernel_name: str,
    signature: Mapping[str, str] | str,
    constexprs: Mapping[str, Any] | None,
    target,
    num_warps: int | None = None,
    num_stages: int | None = None,
    num_ctas: int | None = None,
    config: int | None = None,
) -> AotResult:
    """``compile_aot_all`` for exactly one compile (an autotuned kernel needs ``config``)."""
    results = compile_aot_all(source_file, kernel_name, signature, constexprs, target,
                              num_warps, num_stages, num_ctas, config)
    if len(results) > 1:
        raise UserError(f"{source_file}:{kernel_name}: {len(results)} autotune configs: choose "
                        "one with config=N" + _wrapper_hint(load_kernel(source_file, kernel_name)))
    return results[0]


def _compile_one(fn, signature, constexprs, options, gpu_target, source_file, where) -> AotResult:
    import triton

    src, full_sig, cx, div16 = build_source(fn, signature, constexprs, where, gpu_target)
    with tempfile.TemporaryDirectory(prefix="proton-inject-aot-") as cache_dir:
        with triton.knobs.cache.scope(), triton.knobs.compilation.scope():
            triton.knobs.cache.dir = cache_dir
            triton.knobs.compilation.override = False
            triton.knobs.compilation.dump_ir = False
            try:
                compiled = triton.compile(src, target=gpu_target, options=dict(options))
            except UserError:
                raise
            except Exception as e:
                raise UserError(
                    f"{_error_location(e, fn, source_file) or where}: Triton could not compile "
                    f"{fn.__name__} for {format_target(gpu_target)}: {_error_text(e)}"
                ) from e
            ttgir = compiled.asm["ttgir"]
            meta = compiled.metadata._asdict()

    metadata = {
        k: meta[k]
        for k in ("shared", "tmem_size", "global_scratch_size", "profile_scratch_size", "hash")
        if k in meta
    }
    metadata["triton_version"] = triton.__version__
    return AotResult(
        kernel_name=fn.__name__,
        hash=override_hash(src),
        source_file=str(Path(source_file).resolve()),
        target=format_target(gpu_target),
        num_warps=int(meta["num_warps"]),
        num_stages=int(meta["num_stages"]),
        num_ctas=int(meta.get("num_ctas", 1)),
        signature=full_sig,
        constexprs=cx,
        divisibility_16=div16,
        ttgir=ttgir,
        metadata=metadata,
        fn_key=source_facts(src)["fn_key"],
    )


def _error_location(e: BaseException, fn, source_file) -> str | None:
    """``file:line`` of the kernel statement a Triton CompilationError points at."""
    node = getattr(e, "node", None)
    lineno = getattr(node, "lineno", None)
    if lineno is None or getattr(e, "src", None) is None:
        return None
    return f"{source_file}:{fn.starting_line_number + lineno}"


def _error_text(e: BaseException, max_lines: int = 8) -> str:
    """The innermost error message, with the offending source line for CompilationErrors."""
    from triton.compiler.errors import CompilationError

    inner = e
    while True:
        nxt = inner.__cause__
        if nxt is None or not isinstance(nxt, CompilationError | ValueError | TypeError
                                         | AssertionError | RuntimeError | NotImplementedError):
            break
        inner = nxt
    if isinstance(inner, CompilationError):
        msg = inner.error_message or type(inner).__name__
    else:
        msg = f"{type(inner).__name__}: {inner}".strip()
    lines = [ln for ln in msg.splitlines() if ln.strip()]
    text = "\n  ".join(lines[:max_lines]) + ("\n  ..." if len(lines) > max_lines else "")
    node = getattr(e, "node", None)
    src = getattr(e, "src", None)
    lineno = getattr(node, "lineno", None)
    if src and lineno and 0 < lineno <= len(src.splitlines()):
        code = src.splitlines()[lineno - 1]
        indent = len(code) - len(code.lstrip())
        caret = " " * (max(getattr(node, "col_offset", 0) - indent, 0)) + "^"
        text += f"\n  {code.strip()}\n  {caret}"
    return text


# --- writing the dump -----------------------------------------------------------


# --- dumping the kernels of a running program (program form of `dump`) ---------------------
#
# The program runs in a child interpreter with Triton's IR dump on and a private cache, so
# every kernel compiles (nothing is answered from the user's cache) and its TTGIR lands in
# ``TRITON_DUMP_DIR/<hash>/<kernel>.ttgir`` under the same hash the override will look up. A
# compilation listener in the child records what names each kernel (constexprs,
# specialization, options); the parent turns those records into ``AotResult``s for
# ``write_dump``. torch.compile is told to compile in-process (its worker pool would not carry
# the listener) and to skip its caches (a cached graph compiles nothing).


