"""Instrument kernels while the program compiles them: ``proton-inject profile``.

Triton 3.6's NVIDIA and AMD backends call ``triton.knobs.runtime.add_stages_inspection_hook``
with their table of compile stages. ``CompileHook`` wraps two of them: ``ttgir`` (print the
module, insert records with the engine ``insert`` uses, write the result to
``OUT/ir/<hash>/<kernel>.ttgir`` with a manifest, parse it back into the compile's MLIR
context) and ``llir`` (lower it with Proton's passes; if that fails, lower the plain module
instead and say so). Kernels the rules leave out are lowered without Proton's passes.

``CompileSession`` is the runtime's ``Session`` with this hook in place of the override tree,
so buffers, autotune handling, torch.compile settings and the private cache are the same as
for ``run``. ``profile()`` and ``profile_program()`` are its Python and command-line entries.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proton_inject.collect.session import (
    LaunchRecord,
    Session,
    clear_out_dir,
    run_index_name,
)
from proton_inject.errors import ParseError, UserError
from proton_inject.formats.files import write_atomic
from proton_inject.instrument.rules import Rules, rules_from_table
from proton_inject.lower.inline import inline_callees
from proton_inject.lower.options import LoweringOptions
from proton_inject.lower.proton import caller_local, lowering_skipped, skipping

_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")
# How Inductor names its kernels: pointwise, reduction, persistent reduction, template, foreach.
INDUCTOR_PREFIXES = ("triton_poi_", "triton_red_", "triton_per_", "triton_tem_", "triton_for_")


@dataclass
class CompiledKernel:
    """What the hook did with one compile (keyed by Triton's compile hash)."""

    name: str
    hash: str  # override directory name, as dump and insert use it
    instrumented: bool
    reason: str = ""  # why not, when not
    file: str = ""  # relative path under OUT/ir
    scope_names: list[tuple[int, str]] = field(default_factory=list)
    scope_parents: list[tuple[int, int]] = field(default_factory=list)
    scope_locs: dict[int, str] = field(default_factory=dict)


def _kernel_info(src: Any, metadata: dict[str, Any]) -> dict[str, Any]:
    """What the manifest keeps about a compile besides its regions (as dump records it)."""
    from proton_inject.formats.manifest import jsonable

    info: dict[str, Any] = {}
    fn = getattr(src, "fn", None)
    names = list(getattr(fn, "arg_names", []) or [])
    consts = {}
    for key, v in sorted((getattr(src, "constants", None) or {}).items(), key=str):
        idx = key[0] if isinstance(key, tuple) and key else key
        consts[names[idx] if isinstance(idx, int) and idx < len(names) else str(key)] = jsonable(v)
    target = metadata.get("target")
    info["target"] = f"{target.backend}:{target.arch}" if hasattr(target, "backend") else str(target)
    for k in ("num_warps", "num_stages", "num_ctas"):
        if k in metadata:
            info[k] = jsonable(metadata[k])
    info["constexprs"] = consts
    info["compile_hash"] = str(metadata.get("hash", ""))
    inner = getattr(fn, "fn", None)
    code = getattr(inner, "__code__", None)
    if code is not None:
        info["source_file"] = code.co_filename
    return info


class CompileHook:
    """The stages-inspection hook: instruments each compiled kernel the rules select."""

    def __init__(self, rules: Rules, ir_dir: str | os.PathLike, prev: Any = None) -> None:
        self.rules = rules
        self.ir_dir = Path(ir_dir)
        self.prev = prev  # a hook installed before ours: it still runs, first
        self.compiled: dict[str, CompiledKernel] = {}  # compile hash -> what happened
        self.notes: list[str] = []
        self._manifest: dict[str, dict] = {}  # relative file -> manifest entry
        self.plain_only: set[str] = set()  # kernels whose instrumented build failed once
        self._lock = threading.Lock()

    def __call__(self, backend: Any, stages: dict, options: Any, language: Any, capability: Any) -> None:
        if self.prev is not None:
            self.prev(backend, stages, options, language, capability)
        if "ttgir" not in stages or "llir" not in stages:
            return
        make_ttgir, make_llir = stages["ttgir"], stages["llir"]
        state: dict[str, Any] = {}  # this compile's plain module and instrumented module

        def ttgir(src: Any, metadata: dict) -> Any:
            mod = make_ttgir(src, metadata)
            state["plain"] = mod
            if skipping():  # a plain build (an autotuner times those): left as it is, unrecorded
                state["inst"] = None
                return mod
            try:
                # The src of the triton.compile call running this stage, from its frame.
                src_of_compile = caller_local(
                    "src", 4, lambda v, loc: hasattr(v, "hash") and "fn_cache_manager" in loc)
                inst = self._instrument(mod, metadata, src_of_compile)
            except Exception as e:  # never break the user's compile over instrumentation
                self._note(f"a kernel was left plain: instrumenting it failed: {e}")
                inst = None
            state["inst"] = inst
            return inst if inst is not None else mod

        def llir(mod: Any, metadata: dict) -> Any:
            inst, plain = state.get("inst"), state.get("plain")
            if inst is None or mod is not inst:
                with lowering_skipped():
                    return make_llir(mod, metadata)
            try:
                return make_llir(mod, metadata)
            except Exception as e:
                ck = self.compiled.get(str(metadata.get("hash", "")))
                name = ck.name if ck else "?"
                if ck:
                    ck.instrumented, ck.reason = False, "instrumented IR did not lower"
                self._note(f"kernel {name}: the instrumented IR did not lower, so it runs "
                           f"uninstrumented ({_first_line(e)}); `proton-inject check` on "
                           f"{self.ir_dir} shows the compiler's message")
                with lowering_skipped():
                    return make_llir(plain, metadata)

        stages["ttgir"] = ttgir
        stages["llir"] = llir

    def _note(self, text: str) -> None:
        with self._lock:
            if text not in self.notes:
                self.notes.append(text)

    def _instrument(self, mod: Any, metadata: dict, src: Any) -> Any:
        """The instrumented module for ``mod``, or None to keep it as it is."""
        from triton._C.libtriton import ir
        from triton.runtime.cache import _base32

        from proton_inject.instrument.insert import _kernel_dict, insert_text

        chash = str(metadata.get("hash", ""))
        name = str(mod.get_entry_func_name())
        ohash = _base32(src.hash()) if src is not None else chash[:52]
        entry = CompiledKernel(name, ohash, False)
        self.compiled[chash] = entry
        if not self.rules.wants_kernel(name):
            entry.reason = "not matched by --kernel"
            return None
        if name in self.plain_only:
            entry.reason = "instrumented build failed to compile"
            return None
        # A kernel that calls noinline functions comes back with its callees inlined (insert's
        # inline_callees), so Proton's lowering sees one function; one it cannot inline raises.
        text = str(mod)
        try:
            res = insert_text(text, self.rules, f"{name}.ttgir", inline=inline_callees)
        except UserError as e:
            entry.reason = ("its IR could not be parsed" if isinstance(e, ParseError)
                            else "a rule could not be placed")
            self._note(f"kernel {name} runs uninstrumented: {e}")
            return None
        for n in res.notes:
            self._note(n)
        kernels = [k for k in res.kernels if k.regions]
        if not kernels:
            entry.reason = "no region selected"
            return None
        rel = f"{ohash}/{_SAFE.sub('_', name)}.ttgir"
        path = self.ir_dir / rel
        with self._lock:
            first = rel not in self._manifest
            if first:
                write_atomic(path, res.text.encode("latin-1"))
        if not first and path.read_bytes() != res.text.encode("latin-1"):
            # Triton's override hash leaves out num_warps/num_stages; keep the first file.
            rel = f"{ohash}/{_SAFE.sub('_', name)}.{chash[:12]}.ttgir.txt"
            path = self.ir_dir / rel
            write_atomic(path, res.text.encode("latin-1"))
        inst = ir.parse_mlir_module(str(path), mod.context)
        inst.context = mod.context
        k = kernels[0]
        entry.instrumented, entry.file = True, rel
        entry.scope_names = [(r.scope_id, r.name) for r in k.regions]
        entry.scope_parents = [(r.scope_id, r.parent_id) for r in k.regions if r.parent_id is not None]
        entry.scope_locs = {r.scope_id: r.source for r in k.regions if r.source}
        if first:
            k.file = rel
            d = _kernel_dict(k)
            d["dump"] = _kernel_info(src, metadata)
            with self._lock:
                self._manifest[rel] = d
                self._write_manifest()
        return inst

    def _write_manifest(self) -> None:
        from proton_inject import __version__
        from proton_inject.formats.manifest import manifest_json
        from proton_inject.instrument.insert import _rules_dict

        manifest = {"tool": f"proton-inject {__version__}", "format": 1,
                    "rules": _rules_dict(self.rules),
                    "kernels": [self._manifest[k] for k in sorted(self._manifest)]}
        write_atomic(self.ir_dir / "manifest.json", manifest_json(manifest))

    def summary(self) -> list[str]:
        """One line for the kernels instrumented, one for those left out (with why)."""
        done = sorted({c.name for c in self.compiled.values() if c.instrumented})
        left: dict[str, str] = {}
        for c in self.compiled.values():
            if not c.instrumented and c.name not in done:
                left.setdefault(c.name, c.reason)
        out = [f"instrumented {len(done)} kernel(s) at compile time: {', '.join(done) or '-'}"]
        if left:
            out.append("left out: " + ", ".join(f"{n} ({r})" for n, r in sorted(left.items())))
        return out


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:200]}" if text else type(e).__name__


# --- the session ----------------------------------------------------------------------------


def as_rules(rules: Rules | dict | None) -> Rules:
    """Rules from a ``Rules``, a dict in the TOML form, or None (the default rules)."""
    if rules is None:
        return Rules()
    if isinstance(rules, Rules):
        return rules
    if isinstance(rules, dict):
        return rules_from_table(rules, "rules")
    raise UserError(f"rules: expected a Rules or a dict, got {type(rules).__name__}")


class CompileSession(Session):
    """A profiling session that instruments kernels as they compile (no instrumented tree)."""

    def __init__(
        self,
        rules: Rules | dict | None = None,
        out: str | os.PathLike = "traces",
        options: LoweringOptions | None = None,
        max_launches: int | None = None,
        max_pending_mb: float = 256,
        keep_tuning: bool = False,
        autotune_from: str | os.PathLike | None = None,
    ) -> None:
        out = Path(out)
        super().__init__(out / "ir", out, options, None, max_launches, max_pending_mb, keep_tuning)
        self.hook = CompileHook(as_rules(rules), out / "ir")
        self._unhooked: set[str] = set()  # kernels launched that never went through the hook
        self.autotune_from = None if autotune_from is None else str(autotune_from)

    def _decisions_dir(self) -> Path:
        """Beside the instrumented IR: ``run OUT/ir`` then takes the same choices."""
        return self.out / "ir"

    def _override_tree(self) -> None:
        import triton

        clear_out_dir(self.out, self.rank)
        self.out.mkdir(parents=True, exist_ok=True)
        knobs_rt = triton.knobs.runtime
        self.hook.prev = knobs_rt.add_stages_inspection_hook
        knobs_rt.add_stages_inspection_hook = self.hook
        self._undo.append(lambda: setattr(knobs_rt, "add_stages_inspection_hook", self.hook.prev))
        triton.knobs.compilation.override = False

    def _overrides(self, name: str, src: Any = None) -> bool:
        """A kernel the hook instrumented: if a later stage fails, compile it again plain."""
        return any(c.instrumented and c.name == name for c in self.hook.compiled.values())

    def _wanted(self, info: Any) -> bool:
        """A kernel the rules instrument (its plain build is what autotuners time)."""
        if info.wanted is None:
            info.wanted = self.hook.rules.wants_kernel(info.name) and info.name not in self.hook.plain_only
        return info.wanted

    def _fallback(self, name: str, error: BaseException, compile_plain: Any, why: str = "failed to compile") -> Any:
        self.hook.plain_only.add(name)
        for c in self.hook.compiled.values():
            if c.name == name and c.instrumented:
                c.instrumented, c.reason = False, f"instrumented build {why}"
        return super()._fallback(name, error, compile_plain, why)

    def _info(self, ck: Any):
        info = super()._info(ck)
        chash = str(getattr(ck.metadata, "hash", ""))
        plain = getattr(self._tls, "plain", False)  # a plain build an autotuner times
        if chash not in self.hook.compiled and hasattr(ck.src, "fn") and not plain:
            self._unhooked.add(info.name)
        return info

    def _ir_path(self, rec: LaunchRecord) -> Path | None:
        c = self.hook.compiled.get(rec.compile_hash)
        return self.out / "ir" / c.file if c and c.file else None

    def _scopes(self, rec: LaunchRecord) -> tuple[list, list]:
        c = self.hook.compiled.get(rec.compile_hash)
        return (list(c.scope_names), list(c.scope_parents)) if c else ([], [])

    def launch_meta(self, rec: LaunchRecord) -> Any:
        meta = super().launch_meta(rec)
        c = self.hook.compiled.get(rec.compile_hash)
        return dataclasses.replace(meta, scope_locs=dict(c.scope_locs)) if c else meta

    def inductor_kernels_left_instrumented(self) -> list[str]:
        """Instrumented kernels Inductor compiled: it keeps them past the session (the JIT's own
        kernels are keyed by the instrumentation knob and compile plain again)."""
        if "torch._inductor" not in sys.modules:
            return []
        return sorted({c.name for c in self.hook.compiled.values()
                       if c.instrumented and c.name.startswith(INDUCTOR_PREFIXES)})

    def _diagnose(self) -> None:
        msgs = self.result.messages
        msgs.extend(self.hook.notes)
        msgs.extend(self.hook.summary())
        if self._unhooked:
            msgs.append(
                f"{', '.join(sorted(self._unhooked))} ran uninstrumented: compiled outside this "
                "process's compiler (a worker process or an on-disk cache of the program's own)"
            )
        super()._diagnose()

    def _write_index(self) -> None:
        super()._write_index()
        path = self.out / run_index_name(self.rank)
        if path.is_file():  # record what each compile became, for report and review
            data = json.loads(path.read_text())
            data["instrumented_dir"] = "ir"
            data["compiled"] = {
                h: {"kernel": c.name, "hash": c.hash, "instrumented": c.instrumented,
                    "reason": c.reason, "file": c.file}
                for h, c in sorted(self.hook.compiled.items())
            }
            write_atomic(path, json.dumps(data, indent=1) + "\n")


# --- public API -----------------------------------------------------------------------------



