"""Lowering records with Triton's own Proton passes inside a compile: the hook installed into
the backend, the one private compile scope, and MLIR helpers.
"""

from __future__ import annotations

import functools
import os
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from proton_inject.errors import UserError
from proton_inject.formats.raw import BufferType
from proton_inject.lower.options import (
    PROFILE_SCRATCH_ALIGNMENT,
    PROFILE_SCRATCH_SIZE_HINT,
    Lowering,
    LoweringOptions,
    max_shared_mem_for,
)


def caller_local(name: str, depth: int, accept: Callable[[Any, dict], bool]) -> Any:
    """The first local ``name`` that ``accept(value, frame_locals)`` takes, looking ``depth``
    frames up from the caller's caller (None if none). Triton's stage functions hold what a
    hook needs (the compile's ``src``, the module being lowered) only as their locals."""
    f = sys._getframe(2)
    for _ in range(depth):
        if f is None:
            break
        value = f.f_locals.get(name)
        if value is not None and accept(value, f.f_locals):
            return value
        f = f.f_back
    return None


@dataclass(frozen=True)
class Lowered:
    """How the lowering lowered one module's records, decided once, while it compiles: the
    options as resolved for that module (buffer type, recording warps, buffer size) and, where
    ``direct.py`` lowered them, its record and loop tables (what the decoder needs)."""

    options: LoweringOptions
    direct_records: list[list[int]] | None = None
    direct_loops: list[list[int]] | None = None

    def to_json(self) -> dict[str, Any]:
        """Plain JSON, kept with a cached build: a later session takes the decision back
        instead of working it out again from the IR (a parse of it at the session's end)."""
        return {"options": self.options.to_json(), "direct_records": self.direct_records,
                "direct_loops": self.direct_loops}

    @classmethod
    def from_json(cls, d: Any) -> Lowered:
        """``to_json``'s form back; ValueError for anything else."""
        def table(v: Any) -> list[list[int]] | None:
            if v is None:
                return None
            if not (isinstance(v, list) and all(isinstance(r, list) and all(
                    isinstance(x, int) and not isinstance(x, bool) for x in r) for r in v)):
                raise ValueError("a table is not a list of lists of ints")
            return v

        if not (isinstance(d, dict) and set(d) == {"options", "direct_records", "direct_loops"}
                and isinstance(d["options"], dict)):
            raise ValueError("not a lowering decision")
        try:
            options = LoweringOptions.from_json(d["options"])
        except (TypeError, UserError) as e:
            raise ValueError(f"its options: {e}") from None
        return cls(options, table(d["direct_records"]), table(d["direct_loops"]))


_decided = threading.local()


def take_decision() -> Lowered | None:
    """The lowering decision of the last module lowered on this thread, once (then None)."""
    d = getattr(_decided, "last", None)
    _decided.last = None
    return d


class ProtonLowering:
    """The object a Triton backend calls as ``instrumentation``: adds Proton's passes."""

    def __init__(
        self, backend: str, options: LoweringOptions, max_shared: int, arch: str | None = None
    ) -> None:
        self.backend = backend  # "nvidia" or "amd"
        self.options = options
        self.max_shared = max_shared
        self.arch = arch  # AMD only: gfx name for the LLVM conversion

    def load_dialects(self, ctx: Any) -> None:
        from triton._C.libtriton import proton

        proton.load_dialects(ctx)

    def direct_module(self, mod: Any) -> Any:
        """``mod`` with its records lowered by ``direct.py`` where the options resolve to
        "direct" for it; ``mod`` itself otherwise, and if that fails (Proton's passes then
        lower the records into its global buffer, which ``decode`` reads under the same
        metadata)."""
        if skipping() or self.backend != "nvidia" or self.options.buffer_type not in (
                "auto", "direct"):
            return mod
        try:
            text = str(mod)
            if "proton.record" not in text:
                return mod
            o = self.options.for_kernel(text, self.max_shared, hip=False)
            if o.lowering == Lowering.PROTON:
                return mod
            from triton._C.libtriton import ir

            from proton_inject.lower import direct

            lowered = direct.lower(text, o.buffer_size, o.sample_iterations)  # 32-bit clocks
            with tempfile.TemporaryDirectory(prefix="proton-inject-") as tmp:
                path = os.path.join(tmp, "direct.ttgir")
                with open(path, "w", encoding="latin-1") as f:
                    f.write(lowered)
                out = ir.parse_mlir_module(path, mod.context)
            out.context = mod.context
            _decided.last = Lowered(o, direct.record_table(text, o.buffer_size, o.sample_iterations),
                                    direct.loop_table(text, o.buffer_size, o.sample_iterations) or None)
            return out
        except Exception:  # noqa: BLE001 - Proton's lowering is the fallback
            return mod

    def patch(self, stage: str, pm: Any, ctx: Any) -> None:
        from triton._C.libtriton import passes, proton

        self.load_dialects(ctx)
        if skipping():
            return
        o = self.options
        if stage == "ttgpuir_to_llvmir":
            if o.auto_size or o.warps == "first" or o.buffer_type in ("auto", "direct"):
                # The backend's make_llir, which calls this, holds the module as ``mod``.
                mod = caller_local("mod", 3, lambda m, _: hasattr(m, "get_entry_func_name"))
                o = (o.for_kernel(str(mod), self.max_shared, hip=self.backend == "amd")
                     if mod is not None else replace(o, auto_size=False, buffer_type=BufferType.SHARED))
                if o.lowering == Lowering.DIRECT:  # direct_module failed: Proton's global buffer
                    o = replace(self.options, buffer_type=BufferType.GLOBAL).for_kernel(
                        str(mod), self.max_shared, hip=False)
            if getattr(_decided, "last", None) is None or _decided.last.direct_records is None:
                _decided.last = Lowered(o)
            warps = o.selected
            sampling = (
                proton.SAMPLING_STRATEGY.SELECTIVE if warps else proton.SAMPLING_STRATEGY.NONE
            )
            granularity = (
                proton.GRANULARITY.WARP
                if o.granularity == "warp"
                else proton.GRANULARITY.WARP_GROUP
            )
            proton.add_convert_proton_to_protongpu(
                pm,
                proton.METRIC_TYPE.CYCLE,
                sampling,
                ",".join(map(str, warps)) if warps else "",
                granularity,
                proton.BUFFER_STRATEGY.CIRCULAR,
                proton.BUFFER_TYPE.GLOBAL
                if o.buffer_type == BufferType.GLOBAL
                else proton.BUFFER_TYPE.SHARED,
                o.buffer_size,
                self.max_shared,
                PROFILE_SCRATCH_SIZE_HINT,
                PROFILE_SCRATCH_ALIGNMENT,
                o.clock == 64,
            )
            passes.common.add_cse(pm)
            if o.sched_stores:
                proton.add_schedule_buffer_store(pm)
            proton.add_allocate_proton_shared_memory(pm)
        elif stage == "llvmir_to_llvm":
            proton.add_allocate_proton_global_scratch_buffer(pm)
            if self.backend == "nvidia":
                proton.add_convert_proton_nvidia_gpu_to_llvm(pm)
            else:
                proton.add_convert_proton_amd_gpu_to_llvm(pm, self.arch or "gfx942")


_install_lock = threading.RLock()


_skip = threading.local()


@contextmanager
def lowering_skipped() -> Iterator[None]:
    """Compiles on this thread add no Proton passes: a kernel left plain is built as without us."""
    prev = getattr(_skip, "on", False)
    _skip.on = True
    try:
        yield
    finally:
        _skip.on = prev


def skipping() -> bool:
    """Whether compiles on this thread are inside ``lowering_skipped()``."""
    return bool(getattr(_skip, "on", False))


def _backend_classes() -> dict[str, Any]:
    from triton.backends import backends

    return {name: backends[name].compiler for name in ("nvidia", "amd") if name in backends}


def device_target() -> tuple[Any, int]:
    """The active GPU's ``GPUTarget`` and its opt-in shared memory per CTA."""
    from triton.runtime import driver

    target = driver.active.get_current_target()
    props = driver.active.utils.get_device_properties(driver.active.get_current_device())
    return target, int(props["max_shared_mem"])


@contextmanager
def installed(
    options: LoweringOptions | None = None,
    target: Any = None,
    max_shared: int | None = None,
    tag: str = "",
) -> Iterator[dict[str, ProtonLowering]]:
    """Install the Proton lowering on the NVIDIA and AMD backends; restore everything on exit.

    ``target`` (a ``GPUTarget``) sizes the buffer for a compile without a GPU; without it the
    active device is asked. ``tag`` goes into the instrumentation mode so a new session does
    not reuse kernels the JIT compiled in an earlier one (its override files may differ).
    """
    import triton

    options = options or LoweringOptions()
    if target is None:
        target, dev_max = device_target()
        max_shared = max_shared or dev_max
    elif max_shared is None:
        max_shared = max_shared_mem_for(target)
    arch = str(target.arch).split(":")[0] if target.backend == "hip" else None

    with _install_lock:
        classes = _backend_classes()
        saved = {name: cls.__dict__.get("instrumentation") for name, cls in classes.items()}
        # Only NVIDIA has a direct lowering (its make_llir is a plain method; AMD's is static).
        saved_llir = {name: cls.__dict__.get("make_llir") if name == "nvidia" else None
                      for name, cls in classes.items()}
        saved_mode = triton.knobs.compilation.instrumentation_mode
        hooks = {
            name: ProtonLowering(name, options, max_shared, arch if name == "amd" else None)
            for name in classes
        }
        try:
            for name, cls in classes.items():
                cls.instrumentation = hooks[name]
                if saved_llir[name] is not None:
                    cls.make_llir = _direct_first(saved_llir[name], hooks[name])
            triton.knobs.compilation.instrumentation_mode = options.mode() + (
                f":{tag}" if tag else ""
            )
            yield hooks
        finally:
            for name, cls in classes.items():
                cls.instrumentation = saved[name]
                if saved_llir[name] is not None:
                    cls.make_llir = saved_llir[name]
            triton.knobs.compilation.instrumentation_mode = saved_mode


def _direct_first(make_llir: Callable, hook: ProtonLowering) -> Callable:
    """The backend's ``make_llir`` run on ``hook.direct_module(src)``: records that ``direct.py``
    can lower are lowered before Proton's passes see the module."""

    @functools.wraps(make_llir)
    def wrapped(self: Any, src: Any, *args: Any, **kwargs: Any) -> Any:
        return make_llir(self, hook.direct_module(src), *args, **kwargs)

    return wrapped


def mlir_context():
    """A Triton MLIR context that can parse any TTGIR we handle: core, NVIDIA, AMD and Proton."""
    from triton._C.libtriton import amd, ir, nvidia, proton

    ctx = ir.context()
    ir.load_dialects(ctx)
    nvidia.load_dialects(ctx)
    amd.load_dialects(ctx)
    proton.load_dialects(ctx)
    return ctx


def scope_names_of(ttgir_path: str) -> tuple[list[tuple[int, str]], list[tuple[int, int]]]:
    """``(get_scope_id_names, get_scope_id_parents)`` of a TTGIR file: the lowering's scope ids."""
    from triton._C.libtriton import ir, proton

    ctx = mlir_context()
    module = ir.parse_mlir_module(str(ttgir_path), ctx)
    module.context = ctx
    names = [(int(i), str(n)) for i, n in proton.get_scope_id_names(module)]
    parents = [(int(c), int(p)) for c, p in proton.get_scope_id_parents(module)]
    return names, parents
