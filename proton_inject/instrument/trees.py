"""Insert and strip over files and trees: the override tree insert writes (its manifest, the
files it carries, kernels left out with why) and the one strip reads back."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from proton_inject.errors import UserError
from proton_inject.formats.files import find_ttgir, replace_tree, write_atomic
from proton_inject.formats.manifest import (
    KernelManifest,
    kernel_entry,
    manifest_json,
    read_manifest,
    source_sha256,
    tree_manifest,
)
from proton_inject.formats.schema import read_ttgir
from proton_inject.instrument.insert import InsertResult, insert_text
from proton_inject.instrument.rules import Rules
from proton_inject.instrument.strip import inlined_note, strip_text
from proton_inject.ttgir import parse_file


def _load_dump_manifest(root: Path) -> dict[str, dict]:
    """Per relative .ttgir path, what `dump` recorded (if the input is a dump directory)."""
    p = root / "manifest.json"
    if not os.path.lexists(p):
        return {}
    out = {}
    for k in read_manifest(p):
        rel = k.get("ttgir") or k.get("file")
        if rel:
            out[rel] = {key: v for key, v in k.items() if key != "regions"}
    return out


def instrument_tree(src: str | Path, rules: Rules, force: bool = False,
                    progress=None, inline=None) -> tuple[dict[str, str], dict, list[str]]:
    """Instrument every .ttgir under src: (relative path -> text, manifest dict, notes).

    Kernels the rules leave out (--kernel, or nothing selected) are not in the
    output, so they run unmodified. So are files that cannot be parsed or
    instrumented: one bad kernel never stops the others; the manifest's
    `left_out` lists them with the reason.
    """
    src = Path(src)
    files = find_ttgir([src])
    dump_info = _load_dump_manifest(src)
    outputs: dict[str, str] = {}
    kernels: list[dict] = []
    notes: list[str] = []
    left_out: list[dict] = []
    for i, path in enumerate(files):
        rel = path.relative_to(src).as_posix()
        if progress:
            progress(i + 1, len(files), rel)
        try:
            res = insert_text(read_ttgir(path), rules, str(path), force=force, inline=inline)
        except UserError as e:
            left_out.append({"file": rel, "reason": _one_line(str(e), str(path))})
            continue
        notes.extend(res.notes)
        selected = [k for k in res.kernels if k.regions]
        if not selected:
            continue
        outputs[rel] = res.text
        for k in selected:
            k.file = rel
            k.dump = dump_info.get(rel)
            kernels.append(kernel_entry(k))
            notes.extend(_changed_source_note(k, src / "manifest.json"))
    return outputs, tree_manifest(rules, kernels, left_out), notes


def _changed_source_note(k: KernelManifest, manifest: Path | str = "manifest.json") -> list[str]:
    """A warning when marks or line ranges are read from a source file that changed since the
    dump: the IR's line numbers are the old file's, so a region may cover other code."""
    dump = k.dump or {}
    recorded, path = dump.get("source_sha256"), dump.get("source_file")
    if not recorded or not path or not any(r.origin in ("mark", "region") for r in k.regions):
        return []
    fix = (f"{manifest} names it as the source_file of kernel {k.kernel}; re-run "
           "`proton-inject dump` or correct that field")
    if source_sha256(path, fix) in (recorded, None):
        return []
    return [f"warning: kernel {k.kernel}: {path} changed since it was dumped; its marks and "
            "line ranges are matched against the dumped IR's line numbers: re-run "
            "`proton-inject dump` if lines moved"]


def _one_line(message: str, path: str) -> str:
    """An error's first line without the file name it starts with (the summary names it)."""
    first = message.splitlines()[0] if message else ""
    return first[len(path) + 1:].strip() if first.startswith(path + ":") else first


def left_out_summary(manifest: dict) -> str | None:
    """"8 of 9 kernels instrumented; left out: FILE: reason; ..." when any file was left out."""
    left = manifest.get("left_out") or []
    if not left:
        return None
    files = {k["file"] for k in manifest["kernels"]}
    total = len(files) + len(left)
    return (f"{len(files)} of {total} kernels instrumented; left out: "
            + "; ".join(f"{x['file']}{':' if x['reason'][:1].isdigit() else ': '}{x['reason']}"
                        for x in left))


# Top-level files of a tree besides .ttgir (the dump's autotuning choices, carried for run).
_TREE_FILES = ("manifest.json", "autotune.json")


def write_tree(outputs: dict[str, str], manifest: dict, out: str | Path,
               extras: dict[str, bytes] | None = None) -> Path:
    """Write the override tree as a whole: build it beside `out`, then swap it in.

    Only .ttgir files, manifest.json and ``extras`` (top-level JSON files such as
    autotune.json) go in: a .cubin/.ptx/.llir there would override the instrumented build
    with the original one.
    """
    out = Path(out)
    _check_replaceable(out)

    def build(tmp: Path) -> None:
        for rel, text in outputs.items():
            write_atomic(tmp / rel, text.encode("latin-1"))
        write_atomic(tmp / "manifest.json", manifest_json(manifest))
        for name, data in (extras or {}).items():
            write_atomic(tmp / name, data)

    return replace_tree(out, build)


def _check_replaceable(out: Path) -> None:
    """Refuse to replace a directory that holds anything but TTGIR and a manifest."""
    if out.exists() and not out.is_dir():
        raise UserError(f"-o {out}: exists and is not a directory; choose another -o")
    if out.is_dir():
        other = [p for p in out.rglob("*") if p.is_file() and p.suffix != ".ttgir"
                 and not (p.parent == out and p.name in _TREE_FILES)]
        if other:
            raise UserError(f"-o {out}: holds {other[0].relative_to(out)}, which is not TTGIR "
                            "written by proton-inject; choose another -o or remove it")


def strip_path(src: str | Path, out: str | Path) -> tuple[list[Path], list[str]]:
    """Strip records from a tree or a single file into `out`: (the files written, a note per
    file whose original bytes cannot come back: its callees were inlined by insert)."""
    src, out = Path(src), Path(out)
    files = [src] if src.is_file() else find_ttgir([src])
    texts, notes = [], []
    for path in files:
        data = read_ttgir(path)
        texts.append(strip_text(data, str(path)))
        note = inlined_note(data.decode("latin-1"), str(path))
        if note:
            notes.append(note)
    if src.is_file():
        write_atomic(out, texts[0].encode("latin-1"))
        return [out], notes
    rels = [path.relative_to(src) for path in files]
    _check_replaceable(out)

    def build(tmp: Path) -> None:
        for rel, text in zip(rels, texts, strict=True):
            write_atomic(tmp / rel, text.encode("latin-1"))

    replace_tree(out, build)
    return [out / rel for rel in rels], notes


def insert_file(src: str | Path, rules: Rules, force: bool = False, inline=None) -> InsertResult:
    """Instrument a single .ttgir file (``inline`` as for ``insert_text``)."""
    module = parse_file(src)  # for its clear missing-file error
    res = insert_text(module.text, rules, str(src), force=force, inline=inline)
    for k in res.kernels:
        k.file = Path(src).name
    return res


@dataclass
class Inserted:
    """What ``insert_path`` made: the texts by relative path, the tree's manifest (None for a
    single file), notes, the summary of files left out, and (kernel, file, regions) each."""

    outputs: dict[str, str]
    manifest: dict | None
    notes: list[str]
    left_out: str | None
    kernels: list[tuple[str, str, int]]


def insert_path(src: str | Path, rules: Rules, force: bool = False, inline=None,
                progress=None, keep: Callable[[dict, dict], None] | None = None,
                strict: bool = False) -> Inserted:
    """Instrument a tree (``instrument_tree``) or a single file (``insert_file``). ``keep``
    may leave out more files of a tree (``lower.check.leave_out_uncompilable``); a tree with
    files left out is an error under ``strict``, and so is an input where nothing was selected."""
    srcp = Path(src)
    if srcp.is_dir():
        outputs, manifest, notes = instrument_tree(srcp, rules, force, progress, inline)
        if keep is not None and outputs:
            keep(outputs, manifest)
        left = left_out_summary(manifest)
        if left and (strict or not outputs):
            raise UserError(f"{src}: {left}" + ("" if strict else "; nothing to write"))
        if not outputs:
            raise UserError(f"{src}: no kernel matched the rules (--kernel {rules.kernel!r})"
                            if rules.kernel else f"{src}: the rules selected no region"
                            + "".join(f"; {n}" for n in notes[:3]))
        if strict:
            _refuse_unmatched(src, rules, [(r["origin"], r["name"]) for k in manifest["kernels"]
                                           for r in k["regions"]])
        kernels = [(k["kernel"], k["file"], len(k["regions"])) for k in manifest["kernels"]]
        return Inserted(outputs, manifest, notes, left, kernels)
    res = insert_file(srcp, rules, force, inline)
    if not any(k.regions for k in res.kernels):
        raise UserError(f"{src}: the rules selected no region"
                        + (f" (no kernel matches --kernel {rules.kernel!r})"
                           if rules.kernel else "") + "".join(f"; {n}" for n in res.notes[:3]))
    if strict:
        _refuse_unmatched(src, rules, [(r.origin, r.name) for k in res.kernels for r in k.regions])
    return Inserted({srcp.name: res.text}, None, res.notes, None,
                    [(k.kernel, srcp.name, len(k.regions)) for k in res.kernels])


def _refuse_unmatched(src: str | Path, rules: Rules, made: list[tuple[str, str]]) -> None:
    """Under ``--strict``: a ``--region`` or ``--op`` rule that made no region in the whole
    input is an error (without it, a note per kernel)."""
    got = {(origin, re.sub(r" #\d+$", "", name)) for origin, name in made}
    for rng in rules.ranges:
        if rng.origin == "region" and ("region", rng.name) not in got:
            raise UserError(f"{src}: {rng.where or rng.name}: no op of any kernel comes from "
                            f"{rng.file}:{rng.start}-{rng.end} (--strict; `proton-inject inspect "
                            f"{src}` lists the source lines that have ops)")
    for pattern in rules.ops:
        if not any(origin == f"op {pattern}" for origin, _ in got):
            raise UserError(f"{src}: --op {pattern}: matched no op any kernel can place (--strict; "
                            f"`proton-inject inspect {src}` lists each kernel's ops)")


def write_inserted(done: Inserted, out: str | Path, extras: dict[str, bytes] | None = None) -> None:
    """Write ``insert_path``'s result: a tree as a whole (with ``extras``), a file atomically."""
    if done.manifest is not None:
        write_tree(done.outputs, done.manifest, out, extras)
    else:
        write_atomic(out, next(iter(done.outputs.values())).encode("latin-1"))
