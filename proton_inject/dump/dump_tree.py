"""Writing a dump: one file per override hash, the manifest entries, and the command that
rebuilds each kernel ahead of time.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from proton_inject.dump.aot import AotResult, compile_aot_all
from proton_inject.dump.signature import _UNSPECIALIZED_SCALARS, constexpr_text, parse_signature
from proton_inject.errors import UserError
from proton_inject.formats.files import write_atomic
from proton_inject.formats.manifest import MANIFEST_NAME, MANIFEST_VERSION, jsonable, read_dump_manifest, source_sha256


def dump_aot(source_file: str, kernel: str, signature: str | None,
             constexprs: Mapping[str, Any], target: str, out_dir: str | os.PathLike,
             num_warps: int | None = None, num_stages: int | None = None,
             num_ctas: int | None = None, config: int | None = None,
             ) -> tuple[list[AotResult], list[Path], list[str]]:
    """The ahead-of-time dump: compile ``kernel`` of ``source_file`` for ``target`` (each
    autotune config, or ``config`` only), keep one build per override hash and write them
    into ``out_dir``; (the builds kept, the files written, notes on the builds dropped)."""
    sig = parse_signature(signature) if signature else {}
    results = compile_aot_all(source_file, kernel, sig, dict(constexprs), target,
                              num_warps=num_warps, num_stages=num_stages, num_ctas=num_ctas,
                              config=config)
    results, notes = one_per_hash(results)
    return results, write_dump(results, out_dir), notes


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
        **({"fn_key": r.fn_key} if r.fn_key else {}),
        "source_sha256": source_sha256(r.source_file),
    }


def _config_text(e: Mapping[str, Any]) -> str:
    cfg = f"config [{e['config']}] {e.get('config_desc')}, " if e.get("config") is not None else ""
    return f"{cfg}{e.get('target')}, {e.get('num_warps')} warps, {e.get('num_stages')} stages"


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

    manifest = read_dump_manifest(out)
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
