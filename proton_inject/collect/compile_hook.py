"""Instrument kernels while the program compiles them: ``proton-inject profile``.

Triton 3.6's NVIDIA and AMD backends call ``triton.knobs.runtime.add_stages_inspection_hook``
with their table of compile stages. ``CompileHook`` wraps two of them: ``ttgir`` (print the
module, insert records with the engine ``insert`` uses, write the result to
``OUT/ir/<hash>/<kernel>.ttgir`` with a manifest, parse it back into the compile's MLIR
context) and ``llir`` (lower it with Proton's passes; if that fails, lower the plain module
instead and say so). Kernels the rules leave out are lowered without Proton's passes.

Where a compile's instrumented IR comes from is a source: ``RulesSource`` (``profile``: the
compile's own TTGIR with records inserted by the rules) or ``TreeSource`` (``run``: the tree
``insert`` wrote, by kernel, hash and config). ``collect.session.Session`` installs the hook.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proton_inject.errors import ParseError, UserError
from proton_inject.formats.files import write_atomic
from proton_inject.formats.manifest import (
    REWRITE,
    KernelManifest,
    RegionInfo,
    kernel_entry,
    manifest_kernels,
    rules_entry,
    tree_manifest,
)
from proton_inject.formats.patterns import compile_pattern
from proton_inject.formats.schema import loads_json, read_text, read_ttgir
from proton_inject.instrument.insert import InsertResult, insert_text
from proton_inject.instrument.rules import Rules, rules_from_manifest, rules_from_table
from proton_inject.lower.inline import inline_callees
from proton_inject.lower.proton import Lowered, caller_local, lowering_skipped, skipping, take_decision

_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")
# Why a kernel is built plain: its instrumented build failed earlier in this session (a reason
# of this session only: such a build is never recorded for the next).
FAILED_EARLIER = "instrumented build failed to compile"
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
    scope_kinds: dict[int, str] = field(default_factory=dict)  # each region's kind, from its origin
    cached: bool = False  # taken from the tool's build cache, built by an earlier session
    # How the lowering lowered it, decided while it compiled (a build from the cache: as its
    # record kept it; None where it has none: then worked out again from its IR).
    lowered: Lowered | None = None
    # A kernel Inductor generated: the model's lines, source nodes and ATen ops its metadata
    # names, read in this session as it compiled (never from the build cache: the same kernel
    # source can come from another program's model). LaunchMeta.model_source.
    model_source: dict[str, list[str]] | None = None


def _model_source(name: str) -> dict[str, list[str]] | None:
    """``dump/inductor_origin.at_compile`` for an Inductor kernel compiling now, else None."""
    if not name.startswith(INDUCTOR_PREFIXES):
        return None
    from proton_inject.collect.call_site import _not_the_program
    from proton_inject.dump.inductor_origin import at_compile

    return at_compile(name, _not_the_program())


def _kernel_info(src: Any, metadata: dict[str, Any]) -> dict[str, Any]:
    """What the manifest keeps about a compile besides its regions (as dump records it)."""
    from proton_inject.dump.aot import source_facts
    from proton_inject.formats.manifest import jsonable

    fn = getattr(src, "fn", None)
    info: dict[str, Any] = {"target": str(_target_text(metadata.get("target")))}
    for k in ("num_warps", "num_stages", "num_ctas"):
        if k in metadata:
            info[k] = jsonable(metadata[k])
    if fn is not None:  # signature, constexprs, specialization, fn_key: what `run` compares
        info.update(source_facts(src))
    info["compile_hash"] = str(metadata.get("hash", ""))
    inner = getattr(fn, "fn", None)
    code = getattr(inner, "__code__", None)
    if code is not None:
        info["source_file"] = code.co_filename
    return info


class RulesSource:
    """Where a compile's instrumented IR comes from under ``profile``: the compile's own TTGIR
    with records inserted by ``rules``."""

    def __init__(self, rules: Rules) -> None:
        self.rules = rules

    def wants(self, name: str) -> bool:
        return self.rules.wants_kernel(name)

    def digest(self) -> str:
        """What of this source changes an instrumented build (part of its cache key)."""
        import json

        return "rules " + json.dumps(rules_entry(self.rules), sort_keys=True)

    def instrument(self, name: str, text: str, ohash: str, config: dict[str, Any],
                   src: Any = None) -> InsertResult:
        return insert_text(text, self.rules, f"{name}.ttgir", inline=inline_callees)


class TreeSource:
    """Where a compile's instrumented IR comes from under ``run``: the tree ``insert`` wrote.

    Triton's own override keys a file by source hash alone, so configs that differ only in
    num_warps, num_stages or target took one config's IR (FlagGems layer_norm and var_mean
    computed other values that way: DESIGN's measured facts). Here a compile takes the tree's
    file only when its kernel, hash and config are the ones the file was dumped with; any
    other compile of a kernel the tree holds (another config, or a hash that moved since the
    dump) is instrumented from its own TTGIR with the rules the tree was made with, and the
    run says so once per kernel."""

    def __init__(self, tree: str | os.PathLike, kernel: str | None = None) -> None:
        self.tree = Path(tree)
        self.pattern = _kernel_regex(kernel)
        # (override hash, kernel) -> (the dump's config, its IR, regions); filled by load()
        self.files: dict[tuple[str, str], tuple[dict[str, Any], bytes, list[dict]]] = {}
        self.dumped: dict[str, list[dict[str, Any]]] = {}  # kernel -> what dump recorded of each build
        self.names: set[str] = set()
        self.rules = Rules()
        self._sha = ""  # of the manifest and the IR as load() read them
        self._loaded = False

    def load(self) -> TreeSource:
        """Read the tree (once): its manifest and the IR it lists, kept, so that the cache key
        (``digest``) is of the very IR the run compiles; a missing or unusable tree is a
        UserError."""
        if self._loaded:
            return self
        if not self.tree.is_dir():
            raise UserError(f"{self.tree}: no such directory (give the output of insert)")
        path = self.tree / "manifest.json"
        if not path.is_file():
            raise UserError(f"{self.tree}: no manifest.json: give a directory that "
                            "`proton-inject insert` wrote")
        text = read_text(path, "manifest")
        data = loads_json(text, path, REWRITE)
        kernels = manifest_kernels(data, path)
        recorded = data.get("rules") if isinstance(data, dict) else None
        # (a tree written by hand may lack them: other configs then get the default rules)
        self.rules = Rules() if recorded is None else rules_from_manifest(recorded, str(path))
        for k in kernels:
            rel = str(k.get("file") or "")
            parts = rel.split("/")
            if len(parts) != 2 or not (self.tree / rel).is_file():
                continue
            dump = k.get("dump") if isinstance(k.get("dump"), dict) else {}
            config = {key: dump.get(key) for key in ("num_warps", "num_stages", "target")}
            self.files[(parts[0], str(k.get("kernel")))] = (config, read_ttgir(self.tree / rel),
                                                             list(k.get("regions") or []))
            if dump:
                self.dumped.setdefault(str(k.get("kernel")), []).append(dump)
        self.names = {name for _, name in self.files}
        if not self.files:
            raise UserError(f"{self.tree}: its manifest lists no instrumented .ttgir file: instrument "
                            "a dump first (proton-inject insert DUMP -o INSTRUMENTED)")
        h = hashlib.sha256(text.encode())
        for key in sorted(self.files):
            h.update(self.files[key][1])
        self._sha = h.hexdigest()
        self._loaded = True
        return self

    def digest(self) -> str:
        """The tree's manifest and IR, and the --kernel filter (part of the cache key)."""
        self.load()
        return f"tree {self._sha} kernel {self.pattern.pattern if self.pattern else ''}"

    def wants(self, name: str) -> bool:
        self.load()
        return name in self.names and (self.pattern is None or bool(self.pattern.search(name)))

    def instrument(self, name: str, text: str, ohash: str, config: dict[str, Any],
                   src: Any = None) -> InsertResult:
        entry = self.load().files.get((ohash, name))
        if entry is not None:
            want, ir, regions = entry
            if all(want.get(k) is None or want.get(k) == config.get(k) for k in want):
                return InsertResult(ir.decode("latin-1"),
                                    [KernelManifest(name, "", config.get("target"),
                                                    [_region(r) for r in regions])], [])
            why = (f"the tree's IR was dumped with {_config_text(want)}, this compile has "
                   f"{_config_text(config)}")
        else:
            why = f"its hash is not in the tree ({_moved_hash(self.dumped.get(name, []), src)})"
        res = insert_text(text, self.rules, f"{name}.ttgir", inline=inline_callees)
        res.notes.append(f"kernel {name}: {why}: instrumented from its own TTGIR with the tree's rules")
        return res


def _moved_hash(dumped: list[dict[str, Any]], src: Any) -> str:
    """What differs between this compile and the dump's builds of the same kernel: the parts
    of the override hash (``source_facts``), against the dumped build that differs least."""
    from proton_inject.dump.aot import source_facts

    unknown = "source, constexprs or argument specialization changed since the dump"
    if src is None:
        return unknown
    now = source_facts(src)
    if now.get("per_process_globals"):
        return (f"it changes in every process: Triton hashes its constexpr global(s) "
                f"{', '.join(now['per_process_globals'])} with their memory address")
    if not dumped:
        return unknown
    best: list[str] | None = None
    for d in dumped:
        diff = _facts_diff(d, now)
        if best is None or len(diff) < len(best):
            best = diff
    if not best:
        return "the dump recorded the same signature, constexprs and specialization; " + unknown
    return f"against the dump's closest build of it: {'; '.join(best)}"


def _facts_diff(dumped: dict[str, Any], now: dict[str, Any]) -> list[str]:
    out = []
    if dumped.get("fn_key") and dumped["fn_key"] != now["fn_key"]:
        out.append("the function's source or the globals and functions it uses changed")
    for key, what in (("constexprs", "constexpr"), ("signature", "argument type")):
        was, is_ = dumped.get(key) or {}, now[key]
        out += [f"{what} {n} {was.get(n)!r} -> {is_.get(n)!r}" for n in sorted(set(was) | set(is_))
                if str(was.get(n)) != str(is_.get(n))]
    was16, now16 = set(dumped.get("divisibility_16") or []), set(now["divisibility_16"])
    if was16 != now16:
        out.append("divisible by 16: " + ", ".join(
            [f"now {n}" for n in sorted(now16 - was16)] + [f"no longer {n}" for n in sorted(was16 - now16)]))
    return out


def _config_text(c: dict[str, Any]) -> str:
    return ", ".join(f"{k}={c.get(k)}" for k in ("num_warps", "num_stages", "target"))


def _region(d: dict) -> RegionInfo:
    return RegionInfo(**{**{f: d.get(f) for f in RegionInfo.__dataclass_fields__},
                         "ir_lines": tuple(d.get("ir_lines") or (0, 0))})


def _kernel_regex(text: str | None) -> Any:
    """run's --kernel, compiled as every user pattern is (RE2: linear time); None: every kernel."""
    return compile_pattern(text, f"--kernel {text!r}") if text else None


class CompileHook:
    """The stages-inspection hook: instruments each compiled kernel its source selects."""

    def __init__(self, source: Rules | RulesSource | TreeSource, ir_dir: str | os.PathLike,
                 prev: Any = None) -> None:
        self.source = RulesSource(source) if isinstance(source, Rules) else source
        self.rules = self.source.rules
        self.ir_dir = Path(ir_dir)
        self.prev = prev  # a hook installed before ours: it still runs, first
        self.compiled: dict[str, CompiledKernel] = {}  # compile hash -> what happened
        self.notes: list[str] = []
        self._noted: set[str] = set()  # (the same notes: a set answers "said already?" at once)
        self._manifest: dict[str, dict] = {}  # relative file -> manifest entry
        self.plain_only: set[str] = set()  # kernels whose instrumented build failed once
        self.records: dict[str, dict[str, Any]] = {}  # compile hash -> IR and manifest entry
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
                name = str(mod.get_entry_func_name())
                ck = self.compiled.get(str(metadata.get("hash", "")))
                if ck is not None:
                    ck.instrumented, ck.reason = False, "its instrumented IR could not be used"
                self._note(f"kernel {name} runs uninstrumented: its instrumented IR could not be "
                           f"used ({_first_line(e)})")
                inst = None
            state["inst"] = inst
            return inst if inst is not None else mod

        def llir(mod: Any, metadata: dict) -> Any:
            inst, plain = state.get("inst"), state.get("plain")
            if inst is None or mod is not inst:
                with lowering_skipped():
                    return make_llir(mod, metadata)
            try:
                take_decision()  # (none left over from another compile on this thread)
                out = make_llir(mod, metadata)
                ck = self.compiled.get(str(metadata.get("hash", "")))
                if ck is not None:
                    ck.lowered = take_decision()
                return out
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
            if text not in self._noted:
                self._noted.add(text)
                self.notes.append(text)

    def _instrument(self, mod: Any, metadata: dict, src: Any) -> Any:
        """The instrumented module for ``mod``, or None to keep it as it is."""
        from triton._C.libtriton import ir
        from triton.runtime.cache import _base32

        chash = str(metadata.get("hash", ""))
        name = str(mod.get_entry_func_name())
        ohash = _base32(src.hash()) if src is not None else chash[:52]
        entry = CompiledKernel(name, ohash, False)
        self.compiled[chash] = entry
        if not self.source.wants(name):
            entry.reason = "not matched by --kernel"
            return None
        if name in self.plain_only:
            entry.reason = FAILED_EARLIER
            return None
        # A kernel that calls noinline functions comes back with its callees inlined (insert's
        # inline_callees), so Proton's lowering sees one function; one it cannot inline raises.
        text = str(mod)
        try:
            config = {k: (_target_text(metadata.get(k)) if k == "target" else metadata.get(k))
                      for k in ("num_warps", "num_stages", "target")}
            res = self.source.instrument(name, text, ohash, config, src)
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
        k = kernels[0]
        entry.model_source = _model_source(name)
        entry.scope_names = [(r.scope_id, r.name) for r in k.regions]
        entry.scope_parents = [(r.scope_id, r.parent_id) for r in k.regions if r.parent_id is not None]
        entry.scope_locs = {r.scope_id: r.source for r in k.regions if r.source}
        entry.scope_kinds = {r.scope_id: r.kind for r in k.regions}
        d = kernel_entry(k)
        d["dump"] = _kernel_info(src, metadata)
        path = self._register(entry, chash, res.text, d)
        self.records[chash] = {"ir": res.text, "manifest": d, "notes": list(res.notes)}
        inst = ir.parse_mlir_module(str(path), mod.context)
        inst.context = mod.context
        return inst

    def _register(self, entry: CompiledKernel, chash: str, text: str, manifest_entry: dict) -> Path:
        """Write an instrumented build's IR under OUT/ir and list it in the manifest; returns the
        file (the first build of a kernel's hash; a later config with other IR gets its own)."""
        name = entry.name
        rel = f"{entry.hash}/{_SAFE.sub('_', name)}.ttgir"
        path = self.ir_dir / rel
        with self._lock:
            first = rel not in self._manifest
            if first:
                write_atomic(path, text.encode("latin-1"))
        if not first and path.read_bytes() != text.encode("latin-1"):
            # Triton's override hash leaves out num_warps/num_stages; keep the first file.
            rel = f"{entry.hash}/{_SAFE.sub('_', name)}.{chash[:12]}.ttgir.txt"
            path = self.ir_dir / rel
            write_atomic(path, text.encode("latin-1"))
        entry.instrumented, entry.file = True, rel
        if first:
            with self._lock:
                self._manifest[rel] = {**manifest_entry, "file": rel}
                self._write_manifest()
        return path

    # -- builds cached between sessions (formats/build_cache.py) --

    def record(self, chash: str) -> dict[str, Any] | None:
        """What a later session needs to use this session's build ``chash`` from the cache;
        None where the outcome depends on this session (a kernel already failed in it)."""
        entry = self.compiled.get(chash)
        if entry is None or entry.reason == FAILED_EARLIER:
            return None
        extra = self.records.get(chash, {}) if entry.instrumented else {}
        if entry.instrumented and entry.lowered is not None:
            extra = {**extra, "lowered": entry.lowered.to_json()}
        return {"name": entry.name, "hash": entry.hash, "instrumented": entry.instrumented,
                "reason": entry.reason, "scope_names": entry.scope_names,
                "scope_parents": entry.scope_parents,
                "scope_locs": {str(k): v for k, v in entry.scope_locs.items()}, **extra}

    def restore(self, chash: str, rec: dict[str, Any]) -> None:
        """A build taken from the cache: what its compile would have told the hook."""
        entry = CompiledKernel(rec["name"], str(rec.get("hash", "")), False, str(rec.get("reason", "")),
                               cached=True)
        self.compiled[chash] = entry
        if not rec["instrumented"]:
            return
        entry.model_source = _model_source(entry.name)  # (still inside Triton's compile of it)
        entry.scope_names = [(int(i), str(n)) for i, n in rec.get("scope_names") or []]
        entry.scope_parents = [(int(i), int(p)) for i, p in rec.get("scope_parents") or []]
        entry.scope_locs = {int(k): str(v) for k, v in (rec.get("scope_locs") or {}).items()}
        entry.scope_kinds = {r.scope_id: r.kind for r in map(_region, rec["manifest"].get("regions") or [])}
        for n in rec.get("notes") or []:
            self._note(str(n))
        try:  # (a record without it, or not as we write it: worked out again from the IR)
            entry.lowered = Lowered.from_json(rec["lowered"]) if "lowered" in rec else None
        except Exception:  # (never fail the program's compile over it)
            entry.lowered = None
        self._register(entry, chash, str(rec["ir"]), dict(rec["manifest"]))

    def _write_manifest(self) -> None:
        from proton_inject.formats.manifest import manifest_json

        manifest = tree_manifest(self.rules, [self._manifest[k] for k in sorted(self._manifest)])
        write_atomic(self.ir_dir / "manifest.json", manifest_json(manifest))

    def summary(self) -> list[str]:
        """One line for the kernels instrumented, one for those left out (with why)."""
        done = sorted({c.name for c in self.compiled.values() if c.instrumented})
        left: dict[str, str] = {}
        for c in self.compiled.values():
            if not c.instrumented and c.name not in done:
                left.setdefault(c.name, c.reason)
        cached = sorted({c.name for c in self.compiled.values() if c.instrumented and c.cached})
        from_cache = f", {len(cached)} from the build cache" if cached else ""
        out = [f"instrumented {len(done)} kernel(s) at compile time{from_cache}: {', '.join(done) or '-'}"]
        if left:
            out.append("left out: " + ", ".join(f"{n} ({r})" for n, r in sorted(left.items())))
        return out


def _target_text(target: Any) -> str | None:
    """``GPUTarget("cuda", 90, 32)`` -> ``"cuda:90"``, as dump records a target."""
    return f"{target.backend}:{target.arch}" if hasattr(target, "backend") else target


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
