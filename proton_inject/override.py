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

import hashlib
import importlib.util
import json
import os
import re
import sys
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import autotune
from .errors import UserError
from .fsutil import write_atomic

MANIFEST_NAME = "manifest.json"
MANIFEST_VERSION = 1

_TARGET_FORMS = "cuda:<sm> (e.g. cuda:80, cuda:90, cuda:100) or hip:<gfx arch> (e.g. hip:gfx942)"


# --- targets ------------------------------------------------------------------


def parse_target(text: str):
    """``"cuda:90"`` -> ``GPUTarget("cuda", 90, 32)``; ``"hip:gfx942"`` -> warp size 64."""
    from triton.backends.compiler import GPUTarget

    s = text.strip() if isinstance(text, str) else ""
    m = re.fullmatch(r"cuda:(?:sm_?)?(\d+)", s)
    if m:
        arch = int(m.group(1))
        if arch < 75:
            raise UserError(f"--target {text!r}: Triton 3.6 compiles for cuda:75 and newer")
        return GPUTarget("cuda", arch, 32)
    m = re.fullmatch(r"hip:(gfx[0-9a-f]+)", s)
    if m:
        return GPUTarget("hip", m.group(1), 64)
    raise UserError(f"--target: unknown target {text!r}: expected {_TARGET_FORMS}")


def format_target(target) -> str:
    """``GPUTarget("cuda", 90, 32)`` -> ``"cuda:90"`` (the form ``parse_target`` reads)."""
    return f"{target.backend}:{target.arch}"


# --- signatures ---------------------------------------------------------------

_SCALAR_TYPES = {
    "i1", "i8", "i16", "i32", "i64", "u1", "u8", "u16", "u32", "u64",
    "fp8e4nv", "fp8e5", "fp8e4b15", "fp8e4b8", "fp8e5b16", "fp16", "bf16", "fp32", "fp64",
}  # fmt: skip
# Scalars the JIT never specializes on divisibility (it passes no attribute for them).
_UNSPECIALIZED_SCALARS = {"u1", "fp16", "bf16", "fp32", "fp64"}
_NAME_RE = re.compile(r"[A-Za-z_]\w*")


def _split_top_level(text: str, sep: str = ",") -> list[str]:
    """Split on ``sep`` outside ``<...>`` and ``[...]`` (tensordesc types contain commas)."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "<[":
            depth += 1
        elif ch in ">]":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


def _check_type(name: str, ty: str) -> None:
    base = ty.split(":", 1)[0] if not ty.startswith("tensordesc") else ty
    if base.lower() == "none":  # the argument is passed as None: the JIT makes it a constexpr
        return
    if base.startswith("*"):
        pointee = base.lstrip("*")
        if base.startswith("*k"):  # const pointer, as the JIT writes it
            pointee = base[2:]
        if pointee in _SCALAR_TYPES:
            return
    elif base in _SCALAR_TYPES:
        return
    elif re.fullmatch(r"tensordesc<\w+\[[\d, ]+\](?:,.*)?>", base):
        return
    raise UserError(
        f"signature: {name}={ty}: unknown type {base!r}; use a Triton type string such as "
        "*fp16, *fp32, i32, i64, fp32 or tensordesc<fp16[128, 64]> (none for an argument passed "
        "as None), optionally with a divisibility hint :16 (or :1 for none)"
    )


def parse_signature(text: str) -> dict[str, str]:
    """``"a_ptr=*fp16,b_ptr=*fp16:16,M=i32"`` -> ``{"a_ptr": "*fp16", "b_ptr": "*fp16:16", ...}``.

    A type may end in a divisibility hint: ``:16`` (divisible by 16 / 16-byte aligned) or
    ``:1`` (no assumption). Without one, pointers are taken as 16-byte aligned (what the JIT
    sees for any torch tensor) and integers as not divisible by 16.
    """
    if not isinstance(text, str) or not text.strip():
        raise UserError("signature is empty: expected NAME=TYPE pairs such as 'a_ptr=*fp16,M=i32'")
    sig: dict[str, str] = {}
    for raw in _split_top_level(text):
        item = raw.strip()
        if not item:
            raise UserError(f"signature {text!r}: empty entry (two commas in a row?)")
        if "=" not in item:
            raise UserError(f"signature entry {item!r}: expected NAME=TYPE, e.g. 'a_ptr=*fp16'")
        name, ty = (p.strip() for p in item.split("=", 1))
        if not _NAME_RE.fullmatch(name):
            raise UserError(f"signature entry {item!r}: {name!r} is not a parameter name")
        if name in sig:
            raise UserError(f"signature: parameter {name!r} is given twice")
        if not ty:
            raise UserError(f"signature entry {item!r}: missing type after '='")
        _split_hint(name, ty)  # validates the hint
        _check_type(name, ty)
        sig[name] = ty
    return sig


def _split_hint(name: str, ty: str) -> tuple[str, int | None]:
    """``"*fp16:16"`` -> ``("*fp16", 16)``; no hint -> ``(ty, None)``."""
    if ty.startswith("tensordesc"):
        return ty, None
    if ":" not in ty:
        return ty, None
    base, hint = ty.rsplit(":", 1)
    if hint not in ("16", "1"):
        raise UserError(
            f"signature: {name}={ty}: divisibility hint must be :16 or :1 (none); an argument "
            "equal to 1 is a constexpr: pass --constexpr NAME=1"
        )
    return base, int(hint)


def parse_constexpr_value(text: str) -> Any:
    """``"128"`` -> 128, ``"0.5"`` -> 0.5, ``"true"`` -> True, ``"None"`` -> None, else a string."""
    s = text.strip()
    try:
        return int(s)
    except ValueError:
        pass
    try:
        return float(s)
    except ValueError:
        pass
    if s.lower() in ("true", "false"):
        return s.lower() == "true"
    if s.lower() == "none":  # `if MASK is not None:` needs Python's None, not the string
        return None
    if s.startswith("tl."):  # a dtype constexpr (hashed as a dtype, not as a string)
        import triton.language as tl

        dt = getattr(tl, s[3:], None)
        if isinstance(dt, tl.dtype):
            return dt
    return s


def constexpr_text(v: Any) -> str:
    """The ``--constexpr`` text that ``parse_constexpr_value`` reads back as ``v``."""
    import triton.language as tl

    if v is None:
        return "None"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, tl.dtype):
        name = next((n for n in dir(tl) if isinstance(getattr(tl, n), tl.dtype)
                     and getattr(tl, n) == v), str(v))
        return f"tl.{name}"
    return repr(v) if isinstance(v, float) else str(v)


def parse_constexprs(items: Iterable[str]) -> dict[str, Any]:
    """``["BM=128", "EVEN_K=true"]`` -> ``{"BM": 128, "EVEN_K": True}``."""
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise UserError(f"constexpr {item!r}: expected NAME=VALUE, e.g. BLOCK_M=128")
        name, value = (p.strip() for p in item.split("=", 1))
        if not _NAME_RE.fullmatch(name):
            raise UserError(f"constexpr {item!r}: {name!r} is not a parameter name")
        if not value:
            raise UserError(f"constexpr {item!r}: missing value after '='")
        if name in out:
            raise UserError(f"constexpr {name!r} is given twice")
        out[name] = parse_constexpr_value(value)
    return out


# --- loading a kernel from a file ---------------------------------------------

_MODULES: dict[tuple[str, float], Any] = {}


def load_module(path: Path):
    """Import a Python file by path (cached per path and mtime)."""
    key = (str(path), path.stat().st_mtime)
    if key in _MODULES:
        return _MODULES[key]
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    mod_name = f"_proton_inject_aot_{path.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    if spec is None or spec.loader is None:
        raise UserError(f"{path}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    # Sibling imports work as when the file is run as a script.
    sys.path.insert(0, str(path.parent))
    sys.modules[mod_name] = module
    try:
        spec.loader.exec_module(module)
    except SystemExit as e:
        sys.modules.pop(mod_name, None)
        raise UserError(f"{path}: importing it called exit({e.code})") from e
    except Exception as e:
        sys.modules.pop(mod_name, None)
        raise UserError(f"{path}: importing it failed: {type(e).__name__}: {e}") from e
    finally:
        try:
            sys.path.remove(str(path.parent))
        except ValueError:
            pass
    _MODULES[key] = module
    return module


def _unwrap_jit(obj):
    """The JITFunction behind ``@triton.autotune`` / ``@triton.heuristics`` wrappers, or None."""
    from triton.runtime.jit import JITFunction

    for _ in range(8):
        if isinstance(obj, JITFunction):
            return obj
        obj = getattr(obj, "fn", None)
        if obj is None:
            return None
    return None


def load_kernel(source_file: str | os.PathLike, kernel_name: str):
    """The ``JITFunction`` named ``kernel_name`` in ``source_file``; UserError if absent."""
    path = Path(source_file)
    if not path.is_file():
        raise UserError(f"{source_file}: no such file")
    module = load_module(path.resolve())
    obj = getattr(module, kernel_name, None)
    fn = _unwrap_jit(obj) if obj is not None else None
    if fn is None:
        found = sorted(n for n, v in vars(module).items() if _unwrap_jit(v) is not None)
        what = "no Triton kernel" if obj is None else "an object that is not a Triton kernel"
        listing = ", ".join(found) if found else "none"
        raise UserError(
            f"{source_file}: {what} named {kernel_name!r} (Triton kernels there: {listing})"
        )
    return fn


# --- autotune and heuristics wrappers --------------------------------------------


@dataclass
class KernelSpec:
    """A kernel as its module defines it: the JITFunction, its autotune configs (in the
    decorator's order, None without ``@triton.autotune``) and its ``@triton.heuristics``
    values (name -> function of the launch's arguments), in the order the launch applies them."""

    fn: Any
    configs: list | None
    heuristics: dict[str, Any]


def load_kernel_spec(source_file: str | os.PathLike, kernel_name: str) -> KernelSpec:
    """``load_kernel`` plus what its autotune/heuristics wrappers decide at launch time."""
    fn = load_kernel(source_file, kernel_name)
    obj = getattr(load_module(Path(source_file).resolve()), kernel_name)
    configs, heuristics = None, {}
    chain = []
    while obj is not None and obj is not fn:
        chain.append(obj)
        obj = getattr(obj, "fn", None)
    # A launch runs the outermost wrapper first; heuristics see the config's values, so they
    # are applied innermost-last in the order the wrappers call each other.
    for w in chain:
        cfgs = getattr(w, "configs", None)
        if configs is None and isinstance(cfgs, list | tuple) and cfgs and all(
                hasattr(c, "kwargs") for c in cfgs):
            configs = list(cfgs)
        values = getattr(w, "values", None)
        if isinstance(values, dict) and all(callable(v) for v in values.values()):
            heuristics.update(values)
    return KernelSpec(fn, configs, heuristics)


def describe_config(cfg) -> str:
    """``BLOCK=64, num_warps=4, num_stages=3`` for an autotune config."""
    parts = [f"{k}={v}" for k, v in cfg.kwargs.items()]
    parts += [f"{k}={getattr(cfg, k)}" for k in ("num_warps", "num_stages", "num_ctas", "maxnreg")
              if getattr(cfg, k, None) is not None and not (k == "num_ctas" and cfg.num_ctas == 1)]
    return ", ".join(parts)


class _Unknown:
    """A runtime argument's value in a heuristic's ``args`` (known only at launch time)."""

    def __init__(self, name: str):
        self.name = name

    def _fail(self, *a, **k):
        raise _NeedsValue(self.name)

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __floordiv__ = _fail
    __rfloordiv__ = __truediv__ = __rtruediv__ = __mod__ = __rmod__ = __pow__ = _fail
    __lt__ = __le__ = __gt__ = __ge__ = __bool__ = __int__ = __float__ = __index__ = _fail
    __and__ = __or__ = __rshift__ = __lshift__ = __neg__ = __abs__ = __getattr__ = _fail
    __getitem__ = __len__ = __iter__ = _fail

    def __eq__(self, other):
        raise _NeedsValue(self.name)

    __hash__ = object.__hash__


class _NeedsValue(Exception):
    pass


def apply_heuristics(spec: KernelSpec, signature: Mapping[str, str], constexprs: dict[str, Any],
                     options: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``constexprs`` plus the value of each heuristic not given explicitly.

    A heuristic is called as the launch calls it, with every argument by name: constexprs by
    value, ``none`` arguments as None, tensors and scalars as stand-ins that only allow
    ``is None`` tests. One that needs a runtime value is a UserError saying what to pass.
    """
    out = dict(constexprs)
    for name, heur in spec.heuristics.items():
        if name in constexprs:
            continue  # the user's value wins, as for a launch that passes it
        args: dict[str, Any] = {}
        for p in spec.fn.arg_names:
            if p in out:
                args[p] = out[p]
            elif str(signature.get(p, "")).lower() == "none":
                args[p] = None
            else:
                args[p] = _Unknown(p)
        args.update({k: v for k, v in options.items() if v is not None})
        try:
            out[name] = heur(args)
        except _NeedsValue as e:
            raise UserError(
                f"{where}: @triton.heuristics computes {name} from the value of {e.args[0]!r}, "
                f"which is only known at launch: pass --constexpr {name}=VALUE"
            ) from None
        except Exception as e:
            raise UserError(
                f"{where}: @triton.heuristics value {name} failed ({type(e).__name__}: {e}): "
                f"pass --constexpr {name}=VALUE"
            ) from None
    return out


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

    @property
    def ttgir_relpath(self) -> str:
        return f"{self.hash}/{self.kernel_name}.ttgir"


def _string_paths(value: Any, path: tuple[int, ...]) -> list[tuple[tuple[int, ...], str]]:
    """Paths of the strings in a constexpr value (nested in tuples/lists), in Triton's order."""
    if isinstance(value, list | tuple):
        return [hit for i, v in enumerate(value) for hit in _string_paths(v, (*path, i))]
    return [(path, value)] if isinstance(value, str) else []


def _build_source(fn, signature: Mapping[str, str], constexprs: Mapping[str, Any], where: str,
                  target=None):
    """The ASTSource the JIT launcher would build for these types and constexpr values.

    Mirrors ``JITFunction._pack_args``: every parameter's specialization is a (type, key)
    pair; the key of a pointer is "D" when 16-byte aligned (plus "S" on AMD with buffer ops,
    for a tensor under 2 GiB), of an integer "D" when divisible by 16, and a constexpr's key
    is its value. Every key that is a string (a string constexpr value too) becomes an
    ``attrs`` entry through the backend's ``parse_attr``, in parameter order.
    """
    from triton import knobs
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
            base, hint = _split_hint(name, given)
            full_sig[name] = base
            scalar = base.lstrip("*")
            if base.startswith("tensordesc") or (
                not base.startswith("*") and scalar in _UNSPECIALIZED_SCALARS
            ):
                continue  # the JIT gives these no attribute entry
            if p.do_not_specialize:
                if hint == 16:
                    raise UserError(
                        f"{where}: {name} is in do_not_specialize, so the JIT never assumes it "
                        "divisible by 16: drop the :16 hint"
                    )
                continue  # the JIT gives it no attribute entry at all
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
            if hint == 16:
                div16.append(name)
            if base.startswith("*") and hip and knobs.amd.use_buffer_ops:
                key += "S"  # AMD: any tensor under 2 GiB may use buffer ops
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

    src, full_sig, cx, div16 = _build_source(fn, signature, constexprs, where, gpu_target)
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


def jsonable(v: Any) -> Any:
    """A value as JSON can hold it: scalars as they are, anything else as its str()."""
    if isinstance(v, bool | int | float | str) or v is None:
        return v
    return str(v)


def one_per_hash(results: Iterable[AotResult]) -> tuple[list[AotResult], list[str]]:
    """The first result of each (hash, kernel), and a note for each config it stands for.

    Autotune configs that differ only in num_warps/num_stages share an override file (the
    hash leaves those out), so a dump can hold only one of them.
    """
    kept: dict[tuple[str, str], AotResult] = {}
    notes = []
    for r in results:
        first = kept.setdefault((r.hash, r.kernel_name), r)
        if first is not r:
            notes.append(
                f"{r.kernel_name}: config [{r.config}] ({r.config_desc}) has the same override "
                f"hash as config [{first.config}] ({first.config_desc}): Triton's hash ignores "
                f"num_warps/num_stages, so only [{first.config}] is dumped and an instrumented "
                f"run uses its IR for both; dump the other with --config {r.config} into another "
                "-o directory"
            )
    return list(kept.values()), notes


def manifest_entry(r: AotResult) -> dict[str, Any]:
    """The manifest's record of one kernel."""
    return {
        "name": r.kernel_name,
        "hash": r.hash,
        "ttgir": r.ttgir_relpath,
        "source_file": r.source_file,
        "target": r.target,
        "num_warps": r.num_warps,
        "num_stages": r.num_stages,
        "num_ctas": r.num_ctas,
        "signature": dict(r.signature),
        "constexprs": {k: jsonable(v) for k, v in r.constexprs.items()},
        "divisibility_16": list(r.divisibility_16),
        "mode": "aot",
        **({"config": r.config, "config_desc": r.config_desc} if r.config is not None else {}),
        "source_sha256": source_sha256(r.source_file),
    }


def source_sha256(path: str) -> str | None:
    """sha256 of a kernel's source file, so `insert` can tell when its marks may have moved."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def _config_text(e: Mapping[str, Any]) -> str:
    cfg = f"config [{e['config']}] {e.get('config_desc')}, " if e.get("config") is not None else ""
    return f"{cfg}{e.get('target')}, {e.get('num_warps')} warps, {e.get('num_stages')} stages"


def read_manifest(out_dir: str | os.PathLike) -> dict[str, Any]:
    """The manifest of a dump directory (an empty one if there is none yet)."""
    path = Path(out_dir) / MANIFEST_NAME
    if not path.exists():
        return {"version": MANIFEST_VERSION, "kernels": []}
    from .validate import manifest_kernels, read_json

    data = read_json(path, "manifest", "remove it or dump into another directory")
    manifest_kernels(data, path)
    data.setdefault("kernels", [])
    return data


def write_dump(results: Iterable[AotResult], out_dir: str | os.PathLike) -> list[Path]:
    """Write ``<out>/<hash>/<kernel>.ttgir`` for each result and merge them into the manifest.

    Only ``.ttgir`` files go under the hash directories: Triton overrides every stage it
    finds there, and a stale ``.cubin`` would silently replace an instrumented build.
    Entries already in the manifest for other kernels are kept. Returns the written paths.
    """
    import triton

    results = list(results)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise UserError(f"{out}: exists and is not a directory")
    by_key: dict[tuple[str, str], AotResult] = {}
    for r in results:
        key = (r.hash, r.kernel_name)
        prev = by_key.get(key)
        if prev is not None and prev.ttgir != r.ttgir:
            raise UserError(
                f"{r.source_file}:{r.kernel_name}: two compiles ({prev.target}, {prev.num_warps} "
                f"warps, {prev.num_stages} stages and {r.target}, {r.num_warps} warps, "
                f"{r.num_stages} stages) have the same override hash {r.hash}: Triton's override "
                "hash ignores target and launch options, so dump them into separate directories "
                "(for autotune configs: choose one with --config N)"
            )
        by_key[key] = r

    manifest = read_manifest(out)
    # Triton's override hash ignores target, num_warps and num_stages: a file already dumped
    # there for another of them would be silently replaced, and a launch would use this one.
    for e in manifest["kernels"]:
        r = by_key.get((e.get("hash"), e.get("name")))
        if r is None or not (out / r.ttgir_relpath).is_file():
            continue
        new_e = manifest_entry(r)
        fields = ("target", "num_warps", "num_stages", "num_ctas")
        if any(e.get(f) != new_e.get(f) for f in fields):
            raise UserError(
                f"{out / r.ttgir_relpath}: holds {r.kernel_name} dumped for "
                f"{_config_text(e)}; this dump ({_config_text(new_e)}) has the same override "
                "hash (Triton's hash ignores target, num_warps and num_stages) and would replace "
                "it: dump into another -o directory, or delete that one first"
            )
    written: list[Path] = []
    for r in by_key.values():
        written.append(write_atomic(out / r.ttgir_relpath, r.ttgir))
    new_keys = set(by_key)
    kept = [
        e for e in manifest["kernels"] if (e.get("hash"), e.get("name")) not in new_keys
    ]
    entries = kept + [manifest_entry(r) for r in by_key.values()]
    entries.sort(key=lambda e: (str(e.get("name")), str(e.get("hash"))))
    extra = {k: v for k, v in manifest.items() if k not in ("version", "triton_version", "kernels")}
    manifest = {
        "version": MANIFEST_VERSION,
        "triton_version": triton.__version__,
        **extra,
        "kernels": entries,
    }
    write_atomic(out / MANIFEST_NAME, json.dumps(manifest, indent=2) + "\n")
    return written


# --- dumping the kernels of a running program (program form of `dump`) ---------------------
#
# The program runs in a child interpreter with Triton's IR dump on and a private cache, so
# every kernel compiles (nothing is answered from the user's cache) and its TTGIR lands in
# ``TRITON_DUMP_DIR/<hash>/<kernel>.ttgir`` under the same hash the override will look up. A
# compilation listener in the child records what names each kernel (constexprs,
# specialization, options); the parent turns those records into ``AotResult``s for
# ``write_dump``. torch.compile is told to compile in-process (its worker pool would not carry
# the listener) and to skip its caches (a cached graph compiles nothing).


@dataclass
class ProgramDump:
    """What ``dump_program`` found: kernels written, kernels left out, the program's exit."""

    kernels: list[AotResult]
    compiled: int  # kernel compiles seen (all names, before --kernel and de-duplication)
    exit_code: int
    notes: list[str] = field(default_factory=list)
    autotune: Any = None  # autotune.Decisions the program's autotuners made (written beside)
    autotune_file: Path | None = None


_DUMP_CHILD = (
    "import sys; from proton_inject.override import _dump_child; "
    "sys.exit(_dump_child(sys.argv[1:]))"
)


def split_program_argv(argv: Iterable[str], command: str) -> tuple[str, str, list[str]]:
    """``python x.py a`` / ``x.py a`` / ``python -m mod a`` -> (kind, target, args).

    Shared by ``dump`` and ``run``, which both run a program given after ``--``; ``command``
    names the one asking, for the messages.
    """
    args = list(argv)
    if args and (Path(args[0]).name.startswith("python") or args[0] == sys.executable):
        args = args[1:]
    if not args:
        raise UserError(f"{command}: no program given: use proton-inject {command} ... -- "
                        "python script.py ARGS")
    if Path(args[0]).name in ("torchrun", "torch.distributed.run") or args[:2] == ["-m", "torch.distributed.run"]:
        raise UserError(f"{command}: put torchrun outside: torchrun --nproc-per-node N --no-python "
                        f"proton-inject {command} ... -- python script.py ARGS (each rank is then "
                        "profiled, with its rank in the file names)")
    if args[0] == "-m":
        if len(args) < 2:
            raise UserError(f"{command}: -m needs a module name")
        return "module", args[1], args[2:]
    if args[0].startswith("-"):
        raise UserError(f"{command}: python option {args[0]!r} is not supported; give a script or -m")
    if not Path(args[0]).is_file():
        raise UserError(f"{command}: {args[0]}: no such script")
    return "path", args[0], args[1:]


def dump_program(
    argv: Iterable[str],
    out_dir: str | os.PathLike,
    kernel: str | None = None,
    timeout: float | None = None,
) -> ProgramDump:
    """Run ``python script.py ARGS`` (or ``-m module``) and dump the TTGIR of every kernel it
    compiles into ``out_dir`` (``<hash>/<kernel>.ttgir`` + ``manifest.json``).

    ``kernel`` (a regex, searched) keeps only matching kernel names. The dump is written even
    when the program fails; its exit code is returned. A program that compiles no kernel is
    a UserError.
    """
    import subprocess

    kind, target, args = split_program_argv(argv, "dump")
    pattern = None
    if kernel:
        try:
            pattern = re.compile(kernel)
        except re.error as e:
            raise UserError(f"--kernel {kernel!r} is not a valid regular expression: {e}") from e
    with tempfile.TemporaryDirectory(prefix="proton-inject-dump-") as tmp:
        records_path = os.path.join(tmp, "compiled.jsonl")
        env = dict(os.environ)
        for key in ("TRITON_KERNEL_OVERRIDE", "TRITON_OVERRIDE_DIR", "TRITON_ALWAYS_COMPILE"):
            env.pop(key, None)
        env.update(
            TRITON_KERNEL_DUMP="1",
            TRITON_DUMP_DIR=os.path.join(tmp, "dump"),
            TRITON_CACHE_DIR=os.path.join(tmp, "cache"),
            TORCHINDUCTOR_COMPILE_THREADS="1",
            TORCHINDUCTOR_FORCE_DISABLE_CACHES="1",
        )
        # The child must import this package as the parent does (editable install or not).
        pkg_root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, env.get("PYTHONPATH")) if p)
        cmd = [sys.executable, "-c", _DUMP_CHILD, records_path, kind, target, *args]
        try:
            proc = subprocess.run(cmd, env=env, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            raise UserError(f"dump: the program ran longer than {timeout} s") from e
        records = _read_records(records_path)
        dump_dir = Path(env["TRITON_DUMP_DIR"])
        results, notes = _program_results(records, dump_dir, pattern)
        decisions = autotune.from_lines(_autotune_lines(records_path))
    where = " ".join([target, *args])
    if not records:
        raise UserError(
            f"dump: {where} compiled no Triton kernel (exit code {proc.returncode}). Did it "
            "launch one on the GPU? Kernels served from an in-memory cache compile nothing."
        )
    if not results:
        raise UserError(
            f"dump: {where} compiled {len(records)} kernels, none named like --kernel {kernel!r}: "
            f"{', '.join(sorted({r['name'] for r in records}))}"
        )
    write_dump(results, out_dir)
    _mark_program_entries(out_dir, results, [target, *args])
    dumped = ProgramDump(results, len(records), proc.returncode, notes, decisions)
    if len(decisions):
        dumped.autotune_file = _write_decisions(decisions, out_dir)
    return dumped


def _autotune_lines(records_path: str) -> str:
    """Where the child appends the autotuning decisions (beside its compile records)."""
    return os.path.join(os.path.dirname(records_path), "autotune.jsonl")


def _write_decisions(decisions: Any, out_dir: str | os.PathLike) -> Path:
    """Write the program's autotuning decisions beside the manifest; decisions an earlier dump
    into this directory recorded for other kernels or keys are kept."""
    old = autotune.find_file(out_dir)
    merged = autotune.Decisions()
    if old is not None and old.parent == Path(out_dir):
        try:
            merged = autotune.load(old)
        except ValueError:
            merged = autotune.Decisions()  # a damaged file is replaced
    merged.triton.update(decisions.triton)
    merged.inductor.update(decisions.inductor)
    merged.conflicts = decisions.conflicts
    return merged.write(out_dir)


def _read_records(path: str) -> list[dict[str, Any]]:
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _program_results(
    records: list[dict[str, Any]], dump_dir: Path, pattern: re.Pattern[str] | None
) -> tuple[list[AotResult], list[str]]:
    """One ``AotResult`` per distinct (hash, kernel); notes for what was merged or dropped."""
    notes: list[str] = []
    by_key: dict[tuple[str, str], AotResult] = {}
    for rec in records:
        if pattern and not pattern.search(rec["name"]):
            continue
        path = dump_dir / rec["hash"] / f"{rec['name']}.ttgir"
        if not path.is_file():
            path = Path(rec.get("ttgir_path") or "")
        if not path.is_file():
            notes.append(f"{rec['name']} ({rec['hash']}): no TTGIR was dumped; left out")
            continue
        r = AotResult(
            kernel_name=rec["name"], hash=rec["hash"], source_file=rec["source_file"],
            target=rec["target"], num_warps=rec["num_warps"], num_stages=rec["num_stages"],
            num_ctas=rec["num_ctas"], signature=rec["signature"], constexprs=rec["constexprs"],
            divisibility_16=rec["divisibility_16"], ttgir=path.read_text(encoding="utf-8"),
            metadata={**rec["metadata"], "constexpr_args": rec.get("constexpr_args")},
        )  # fmt: skip
        key = (r.hash, r.kernel_name)
        prev = by_key.get(key)
        by_key[key] = r  # Triton's dump rewrote the file: it holds the last compile's IR
        if prev is not None and (prev.num_warps, prev.num_stages) != (r.num_warps, r.num_stages):
            # Triton's override hash leaves out num_warps/num_stages: autotune configs that
            # differ only there share one override file.
            notes.append(
                f"{r.kernel_name}: configs ({prev.num_warps} warps, {prev.num_stages} stages) and "
                f"({r.num_warps} warps, {r.num_stages} stages) share override hash {r.hash} "
                "(Triton's hash ignores num_warps/num_stages); the dump keeps the last compiled, "
                "and an instrumented run will use its IR for both"
            )
    return list(by_key.values()), notes


def aot_command(r: AotResult, out_dir: str | os.PathLike) -> str:
    """The ``proton-inject dump`` command line that compiles this kernel ahead of time under
    the same hash, from what the launch specialized (types, divisibility, constexprs)."""
    import shlex

    sig = []
    for name, ty in r.signature.items():
        if ty == "constexpr":
            continue
        if ty.startswith("*"):
            ty += "" if name in r.divisibility_16 else ":1"
        elif ty not in _UNSPECIALIZED_SCALARS and not ty.startswith("tensordesc"):
            ty += ":16" if name in r.divisibility_16 else ""
        sig.append(f"{name}={ty}")
    cmd = ["proton-inject", "dump", "--target", r.target, f"{r.source_file}:{r.kernel_name}"]
    if sig:
        cmd += ["--signature", ",".join(sig)]
    texts = r.metadata.get("constexpr_args") or {k: constexpr_text(v) for k, v in
                                                 r.constexprs.items()}
    for name, text in texts.items():
        cmd += ["--constexpr", f"{name}={text}"]
    cmd += ["--num-warps", str(r.num_warps), "--num-stages", str(r.num_stages)]
    if r.num_ctas != 1:
        cmd += ["--num-ctas", str(r.num_ctas)]
    return shlex.join([*cmd, "-o", str(out_dir)])


def _mark_program_entries(out_dir: str | os.PathLike, results: list[AotResult], argv) -> None:
    """Tag the manifest entries this dump wrote as coming from a program run, each with the
    AOT command line that reproduces it."""
    manifest = read_manifest(out_dir)
    mine = {(r.hash, r.kernel_name): r for r in results}
    for e in manifest["kernels"]:
        r = mine.get((e.get("hash"), e.get("name")))
        if r is not None:
            e["mode"] = "program"
            e["program"] = list(argv)
            e["aot_command"] = aot_command(r, out_dir)
    write_atomic(Path(out_dir) / MANIFEST_NAME, json.dumps(manifest, indent=2) + "\n")


def _dump_child(argv: list[str]) -> int:
    """In the child: record every kernel compile, then run the program as ``__main__``."""
    import runpy
    import traceback

    records_path, kind, target, *args = argv
    import triton

    try:  # the program's autotuning decisions, for run to use the same configs
        patch_inductor = autotune.record_in_child(_autotune_lines(records_path))
    except Exception as e:  # never break the user's program over it
        print(f"proton-inject dump: autotuning decisions are not recorded: {e}", file=sys.stderr)
        patch_inductor = None

    def listener(*, src, metadata, metadata_group, times, cache_hit):
        if patch_inductor is not None:
            patch_inductor()  # Inductor compiles its kernels before it autotunes them
        fn = getattr(src, "fn", None)
        if fn is None:  # an IR file, not a kernel of the program
            return
        try:
            rec = _describe_compile(src, metadata, metadata_group)
        except Exception as e:  # never break the user's program over a manifest detail
            print(f"proton-inject dump: could not describe a kernel: {e}", file=sys.stderr)
            return
        with open(records_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(rec) + "\n")

    triton.knobs.compilation.listener = listener
    sys.argv = [target, *args]
    try:
        if kind == "path":
            sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
            runpy.run_path(target, run_name="__main__")
        else:
            sys.path.insert(0, os.getcwd())
            runpy.run_module(target, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        print(e.code, file=sys.stderr)
        return 1
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


def _describe_compile(src, metadata: dict[str, Any], metadata_group: dict[str, str]) -> dict:
    """A JSON record of one compile: what the manifest needs and where its TTGIR is."""
    import inspect

    fn = src.fn
    names = list(fn.arg_names)

    def name_of(key) -> str:
        idx = key[0] if isinstance(key, tuple) and key else key
        return names[idx] if isinstance(idx, int) and idx < len(names) else str(key)

    target = metadata.get("target")
    target_text = f"{target.backend}:{target.arch}" if hasattr(target, "backend") else str(target)
    inner = getattr(fn, "fn", None)
    try:
        source_file = inspect.getsourcefile(inner) if inner is not None else None
    except TypeError:
        source_file = None
    attrs = getattr(src, "attrs", {}) or {}
    div16 = sorted(
        name_of(k) for k, v in attrs.items() if any(a == ["tt.divisibility", 16] for a in v)
    )
    ttgir_path = next((p for k, p in metadata_group.items() if k.endswith(".ttgir")), None)
    return {
        "name": fn.__name__,
        "hash": override_hash(src),
        "source_file": source_file or getattr(fn, "__module__", "") or "",
        "target": target_text,
        "num_warps": int(metadata.get("num_warps", 0)),
        "num_stages": int(metadata.get("num_stages", 0)),
        "num_ctas": int(metadata.get("num_ctas", 1)),
        "signature": {name_of(k): str(v) for k, v in dict(src.signature).items()},
        "constexprs": {name_of(k): jsonable(v) for k, v in dict(src.constants).items()},
        "divisibility_16": div16,
        "constexpr_args": {name_of(k): constexpr_text(v) for k, v in dict(src.constants).items()},
        "kernel_attr": fn.__name__,
        "ttgir_path": ttgir_path,
        "metadata": {
            "hash": metadata.get("hash"),
            "shared": metadata.get("shared"),
            "triton_version": metadata.get("triton_version"),
        },
    }
