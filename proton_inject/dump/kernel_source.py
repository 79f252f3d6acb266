"""A kernel as its source file defines it: the JITFunction behind autotune and heuristics
wrappers, its configs, and the heuristics applied to given values.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proton_inject.errors import UserError

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


_AOT_SPEC_RE = re.compile(r"^(?P<file>.+\.py):(?P<kernel>[A-Za-z_]\w*)$")


def aot_spec(args: tuple[str, ...]) -> tuple[str, str] | None:
    """``("examples/matmul.py:matmul_kernel",)`` -> (file, kernel): `dump`'s ahead-of-time form;
    a program's command line -> None."""
    if len(args) == 1:
        m = _AOT_SPEC_RE.match(args[0])
        if m:
            return m.group("file"), m.group("kernel")
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
