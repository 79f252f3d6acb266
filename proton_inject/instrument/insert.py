"""Rewrite TTGIR: insert `proton.record` lines for selected regions, or strip them.

Only whole lines are inserted, so every other byte of the input is kept and a
reviewer's diff shows just the records; the one exception is kernel scope on a
kernel with an early return, whose `tt.return`s become `cf.br ^pi_exit` to a
single exit block (strip undoes it). Output is deterministic: identical input
and rules give identical bytes.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from proton_inject import __version__
from proton_inject.errors import UserError
from proton_inject.formats.files import find_ttgir, replace_tree, write_atomic
from proton_inject.formats.manifest import manifest_json
from proton_inject.formats.schema import read_text, read_ttgir
from proton_inject.instrument.rules import EXIT_BLOCK, Region, Rules, returns_of, select
from proton_inject.ttgir import Module, parse, parse_file
from proton_inject.ttgir.tree import LOOP_OPS, Block, Op

RECORD_OP = "proton.record"


@dataclass
class RegionInfo:
    """One region as the manifest describes it."""

    name: str
    scope_id: int
    parent: str | None
    parent_id: int | None
    origin: str
    source: str | None
    ir_lines: tuple[int, int]  # first and last op of the region, in the input IR
    partition: str | None


@dataclass
class KernelManifest:
    kernel: str
    file: str
    target: str | None
    regions: list[RegionInfo] = field(default_factory=list)
    dump: dict | None = None  # what `dump` recorded about this kernel, if known


@dataclass
class InsertResult:
    text: str
    kernels: list[KernelManifest]
    notes: list[str]


def escape_name(name: str) -> str:
    """A region name as an MLIR string literal body."""
    return name.replace("\\", "\\\\").replace('"', '\\"')


def is_instrumented(module: Module) -> bool:
    return any(op.name == RECORD_OP for op in module.walk())


def insert_text(text: str | bytes, rules: Rules, path: str = "<string>", force: bool = False,
                inline: Callable[[str, Module, str], str] | None = None) -> InsertResult:
    """Instrument one TTGIR text. Raises UserError if it already holds records (unless force).

    A kernel that calls noinline functions needs them inlined for Proton's lowering (one
    function per module): ``inline`` does it (``lower.inline.inline_callees``, which runs
    MLIR); without it such a kernel is refused."""
    module = parse(text, path)
    if is_instrumented(module):
        if not force:
            raise UserError(f"{path}: already instrumented (it holds proton.record ops); "
                            "pass --force to strip them and instrument again, or run "
                            "`proton-inject strip` first")
        module = parse(strip_text(module.text.encode("latin-1"), path), path)
    notes: list[str] = []
    selected = select(module, rules, notes)
    for name, regions in selected.items():
        _check_not_after_terminator(module, name, regions)
    inserts: list[tuple[tuple, str]] = []
    replaced: list[tuple[int, int, str]] = []  # (start, end, new text): `tt.return`s only
    index: dict[int, Region] = {}
    sampler = _Sampler(module, rules, path) if selected else None
    for regions in selected.values():
        for r in regions:
            index[len(index)] = r
            inserts.extend(_records_for(module, r, len(index) - 1, sampler))
            if r.to_exit:
                replaced.extend(_returns_to_exit(r))
    if sampler is not None:
        inserts.extend(sampler.inserts)
    inserts.sort(key=lambda x: x[0])
    # Lines go in at line starts, a replaced `tt.return` starts after its indent: at one
    # offset the inserted lines come first.
    edits = sorted([(key[0], 0, i, key[0], line) for i, (key, line) in enumerate(inserts)]
                   + [(a, 1, 0, b, new) for a, b, new in replaced])
    out: list[str] = []
    pos = 0
    src = module.text
    for offset, _, _, end, line in edits:
        out.append(src[pos:offset])
        out.append(line)
        pos = end
    out.append(src[pos:])
    new_text = "".join(out)
    if inserts and len(module.functions) > 1:
        if inline is None:
            raise UserError(f"{path}: the kernel calls other functions, which Proton's lowering "
                            "needs inlined; pass inline=proton_inject.lower.inline.inline_callees")
        new_text = inline(new_text, module, path)
    kernels = [KernelManifest(name, "", module.target(),
                              _manifest_regions(regions, index, inserts))
               for name, regions in selected.items()]
    return InsertResult(new_text, kernels, notes)






def _check_not_after_terminator(module: Module, kernel: str, regions: list[Region]) -> None:
    """Refuse, before anything is written, a record that would follow its block's terminator:
    MLIR refuses any op after one, so such IR can neither compile nor be stripped. Only a
    damaged file has ops after a terminator (MLIR's parser takes it, its verifier does not)."""
    for r in regions:
        for i, op in enumerate(r.block.ops[: r.last + 1]):
            if op.is_terminator:
                which = "start" if i < r.first else "end"
                raise UserError(
                    f"{module.path}:{op.line}: kernel {kernel}: {r.origin} region {r.name!r}: its "
                    f"{which} record would go after {op.name}, which must end its block, but more "
                    "ops follow it there; MLIR refuses such IR (is the file damaged? dump the "
                    "kernel again)")


def _line_start(text: str, pos: int) -> int:
    return text.rfind("\n", 0, pos) + 1


# Names of the values CTA sampling adds (`%pi_cta0`, `%pi_cta0_n`, ...): strip removes the ops
# that define them and the `scf.if` around each sampled record.
SAMPLE_PREFIX = re.compile(r"%pi_cta\d")
_SAMPLE_EVERY = re.compile(r"^\s*%pi_cta\d+_n = arith\.constant (\d+) : i32", re.M)


def sampled_ctas(text: str) -> int:
    """N when an instrumented TTGIR records in every Nth CTA only (``--sample-ctas``), else 1."""
    m = _SAMPLE_EVERY.search(text)
    return int(m.group(1)) if m else 1


class _Sampler:
    """The predicate of ``--sample-ctas N``: records run under ``scf.if %p``, ``%p`` true in
    every Nth CTA by linear program id, computed once at the start of the function body (or
    of a warp-specialize partition: those regions see no value from outside).

    A record inside a loop cannot sit under a condition on Triton 3.6: its scope analysis is
    path-insensitive, so a conditional start or end inside a loop fails it ("started without
    being closed" at the back edge, or "closed without being opened"). So the outermost loop
    around such records is versioned instead: ``scf.if %p`` runs the loop with its records,
    ``else`` an untouched copy of the original loop (byte for byte, so strip gives it back),
    both yielding the loop's results under its own result names. Iterations themselves still
    cannot be sampled.
    """

    def __init__(self, module: Module, rules: Rules, path: str) -> None:
        self.module = module
        self.path = path
        self.ctas = rules.sample_ctas
        self.inserts: list[tuple[tuple, str]] = []
        self._preds: dict[int, str] = {}  # id(anchor block) -> predicate name
        self._versioned: set[int] = set()  # id() of the loops run in two copies
        if self.ctas > 1 and SAMPLE_PREFIX.search(module.text):
            raise UserError(f"{path}: already uses value names like %pi_cta0, which "
                            "--sample-ctas adds; rename them or do not sample")

    def predicate(self, op: Op, name: str) -> str | None:
        """The i1 value a record before ``op`` runs under (None: always)."""
        if self.ctas <= 1:
            return None
        loops = [a for a in op.ancestors() if a.name in LOOP_OPS]
        if loops:  # recorded unconditionally, inside the sampled copy of the outermost loop
            self._version(loops[-1], name)
            return None
        return self._predicate_at(op)

    def _predicate_at(self, op: Op) -> str:
        block = self._anchor(op)
        if id(block) not in self._preds:
            self._preds[id(block)] = self._emit(block, f"%pi_cta{len(self._preds)}")
        return self._preds[id(block)]

    def _version(self, loop: Op, name: str) -> None:
        """Run ``loop`` with its records in sampled CTAs and an untouched copy elsewhere."""
        if id(loop) in self._versioned:
            return
        self._versioned.add(id(loop))
        text = self.module.text
        at = _line_start(text, loop.start)
        indent = text[at:loop.start]
        nl = text.find("\n", loop.end)
        if indent.strip() or nl < 0 or text[loop.end:nl].strip():
            raise UserError(f"{self.path}:{loop.line}: --sample-ctas: the loop around region "
                            f"'{name}' does not sit on lines of its own; cannot run it in two "
                            "copies. Do not sample, or record outside this loop")
        end = nl + 1
        newline = "\r\n" if text[end - 2:end] == "\r\n" else "\n"
        pred = self._predicate_at(loop)
        head, yields = f"{indent}scf.if {pred} {{{newline}", ""
        if loop.results:
            types = _result_types(loop.head)
            if types is None:
                raise UserError(f"{self.path}:{loop.line}: --sample-ctas: cannot read the result "
                                f"types of this {loop.name} (no '-> (...)' on its first line), "
                                f"so it cannot run in two copies for region '{name}'; do not "
                                "sample, or record outside this loop")
            values = ", ".join(_result_values(r) for r in loop.results)
            head = f"{indent}{', '.join(loop.results)} = scf.if {pred} -> ({types}) {{{newline}"
            yields = f"{indent}  scf.yield {values} : {types}{newline}"
        tail = f"{yields}{indent}}} else {{{newline}{text[at:end]}{yields}{indent}}}{newline}"
        # After the start records at the loop's line (its own region's stays outside), before
        # the end records after it.
        self.inserts.append(((at, 2, 0, 0, 0, -1), head))
        self.inserts.append(((end, -2, 0, 0, 0, -1), tail))

    def _anchor(self, op: Op) -> Block:
        """The entry block of the function or partition region that ``op`` sits in."""
        block = op.parent
        for anc in op.ancestors():
            if anc.name == "tt.func" or (anc.name == "ttg.warp_specialize"
                                         and block.parent.index > 0):
                break
            block = anc.parent
        return block.parent.blocks[0]

    def _emit(self, block: Block, p: str) -> str:
        first = block.ops[0]
        text = self.module.text
        at = _line_start(text, first.start)
        indent = text[at:first.start]
        nl = "\r\n" if text[first.start:text.find("\n", first.start) + 1].endswith("\r\n") else "\n"
        lines = [
            f"{p}_x = tt.get_program_id x : i32", f"{p}_y = tt.get_program_id y : i32",
            f"{p}_z = tt.get_program_id z : i32", f"{p}_gx = tt.get_num_programs x : i32",
            f"{p}_gy = tt.get_num_programs y : i32",
            f"{p}_zy = arith.muli {p}_z, {p}_gy : i32", f"{p}_yz = arith.addi {p}_zy, {p}_y : i32",
            f"{p}_yx = arith.muli {p}_yz, {p}_gx : i32", f"{p}_id = arith.addi {p}_yx, {p}_x : i32",
            f"{p}_n = arith.constant {self.ctas} : i32", f"{p}_r = arith.remsi {p}_id, {p}_n : i32",
            f"{p}_0 = arith.constant 0 : i32", f"{p} = arith.cmpi eq, {p}_r, {p}_0 : i32",
        ]  # fmt: skip
        # Before anything else at that offset (a region starting at the block's first op).
        self.inserts.append(((at, -1, len(self._preds), 0, 0, -1),
                             "".join(f"{indent}{ln}{nl}" for ln in lines)))
        return p


def _result_types(head: str) -> str | None:
    """``T1, T2`` from a loop's first line ``... -> (T1, T2) ... {`` (None if not there)."""
    i = head.rfind("->")
    rest = head[i + 2:].lstrip() if i >= 0 else ""
    if not rest.startswith("("):
        return None
    depth = 0
    for j, ch in enumerate(rest):
        depth += ch in "(<[{"
        depth -= ch in ")>]}"
        if depth == 0:
            return rest[1:j]
    return None


def _result_values(result: str) -> str:
    """``%5:2`` -> ``%5#0, %5#1``; ``%x`` -> ``%x``."""
    name, _, count = result.partition(":")
    return ", ".join(f"{name}#{i}" for i in range(int(count))) if count else name


def _records_for(module: Module, r: Region, idx: int,
                 sampler: _Sampler | None = None) -> list[tuple[tuple, str]]:
    """The two record lines of a region, with sort keys that keep nesting right.

    At one offset, end records come before start records; among ends the inner
    region's comes first, among starts the outer region's. A sampled record is wrapped in
    ``scf.if`` on the sampler's predicate.
    """
    text = module.text
    first, last = r.first_op, r.last_op
    start_at = _line_start(text, first.start)
    indent = text[start_at:first.start]
    if indent.strip():
        raise UserError(f"{module.path}:{first.line}: {first.name} does not start its line; "
                        "cannot insert a record before it")
    nl = text.find("\n", last.end)
    end_at = len(text) if nl < 0 else nl + 1
    after = text[last.end:len(text) if nl < 0 else nl].strip()
    if after and not r.to_exit:  # the record goes after the line: it would follow that too
        raise UserError(f"{module.path}:{module.line_of(last.end)}: {after[:40]!r} follows "
                        f"{last.name} on its line; cannot insert a record after it (put each "
                        "op on a line of its own)")
    end_indent = text[_line_start(text, last.start):last.start]
    end_indent = end_indent[: len(end_indent) - len(end_indent.lstrip(" \t"))]
    name = escape_name(r.name)
    newline = "\r\n" if text[end_at - 2:end_at] == "\r\n" else "\n"
    start_line = f'{indent}{RECORD_OP} start "{name}"{newline}'
    end_line = f'{end_indent}{RECORD_OP} end "{name}"{newline}'
    pred = sampler.predicate(first, r.name) if sampler is not None else None
    if pred is not None:
        start_line = f"{indent}scf.if {pred} {{{newline}  {start_line}{indent}}}{newline}"
        end_line = f"{end_indent}scf.if {pred} {{{newline}  {end_line}{end_indent}}}{newline}"
    if nl < 0:  # last op ends the file without a newline
        end_line = newline + end_line.rstrip("\r\n")
    if r.to_exit:  # the end record goes in the exit block, after the function's last op
        end_at, end_line = _exit_block(module, r, end_line, newline)
    start_key = (start_at, 1, -last.end, r.rank, idx, idx)
    end_key = (end_at, 0, -first.start, -r.rank, -idx, idx)
    return [(start_key, start_line), (end_key, end_line)]


def _exit_block(module: Module, r: Region, end_line: str, newline: str) -> tuple[int, str]:
    """Where the single exit block of a kernel with an early return goes (after the
    function body's last op) and its text: the label, ``end_line`` (the kernel scope's end
    record), and the one ``tt.return``, with the location of the last return in the text."""
    text = module.text
    blocks = r.block.parent.blocks
    last = blocks[-1].ops[-1]
    nl = text.find("\n", last.end)
    if nl < 0:
        raise UserError(f"{module.path}:{last.line}: the function body does not end with a "
                        "line break; cannot add the kernel scope's exit block")
    label = blocks[1]
    label_indent = text[_line_start(text, label.start):label.start]
    ret = returns_of(r.block.parent.parent)[-1]
    indent = text[_line_start(text, ret.start):ret.start]
    if label_indent.strip() or indent.strip():
        raise UserError(f"{module.path}:{ret.line}: a block label or tt.return of kernel "
                        "scope's function does not start its line; cannot add the exit block "
                        "a kernel with an early return needs; leave out --kernel-scope")
    rest = text[ret.start + len("tt.return"):ret.end]
    block = (f"{label_indent}{EXIT_BLOCK}:{newline}{end_line}"
             f"{indent}tt.return{rest}{newline}")
    return nl + 1, block


def _returns_to_exit(r: Region) -> list[tuple[int, int, str]]:
    """Each ``tt.return`` of the function becomes ``cf.br ^pi_exit`` (its location kept)."""
    return [(op.start, op.start + len("tt.return"), f"cf.br {EXIT_BLOCK}")
            for op in returns_of(r.block.parent.parent)]


def _manifest_regions(regions: list[Region], index: dict[int, Region],
                      inserts) -> list[RegionInfo]:
    """Scope ids and parents as the Proton lowering assigns them: by first start in text order."""
    mine = {id(r) for r in regions}
    by_id = {i: r for i, r in index.items() if id(r) in mine}
    ordered = [(key, line) for key, line in inserts if key[-1] in by_id]
    ids: dict[int, int] = {}
    parent: dict[int, int | None] = {}
    stack: list[int] = []
    for key, _line in ordered:
        rid = key[-1]
        if key[1] == 1:  # start
            ids[rid] = len(ids)
            parent[rid] = stack[-1] if stack else None
            stack.append(rid)
        else:
            stack.pop()
    out = []
    for rid, sid in sorted(ids.items(), key=lambda kv: kv[1]):
        r = by_id[rid]
        pid = parent[rid]
        out.append(RegionInfo(
            name=r.name, scope_id=sid,
            parent=by_id[pid].name if pid is not None else None,
            parent_id=ids[pid] if pid is not None else None,
            origin=r.origin, source=r.source,
            ir_lines=(r.first_op.line, (returns_of(r.block.parent.parent)[-1] if r.to_exit
                                        else r.last_op).line),
            partition=r.partition))
    return out


# A record line as insert writes it; MLIR prints one with its loc (a kernel whose callees
# were inlined comes back printed by MLIR).
_RECORD_LINE = re.compile(
    r'[ \t]*proton\.record (?:start|end) "(?:[^"\\\r\n]|\\.)*"(?: loc\(#loc\d*\))?[ \t]*\r?')


def strip_text(data: str | bytes, path: str = "<string>") -> str:
    """Remove every `proton.record` line; the inverse of insert_text.

    Only the record's own line goes, and only when it is exactly a line insert writes:
    an op parsed as spanning more (a record line before a `partitionN(...) {` continuation
    line takes it in) keeps the rest, and a line holding anything else is refused.
    """
    module = parse(data, path)
    text = module.text
    cuts = set()  # (start, end, text that replaces it)
    for op in module.walk():
        if op.name == "tt.func":
            cuts.update(_exit_cuts(module, op, path))
            continue
        if (op.name == "scf.if" and SAMPLE_PREFIX.match(op.head.strip()) and len(op.regions) == 2
                and op.regions[1].blocks and op.regions[1].blocks[0].ops
                and op.regions[1].blocks[0].ops[0].name in LOOP_OPS):
            # A loop insert ran in two copies: keep the else copy (the original bytes).
            original = op.regions[1].blocks[0].ops[0]
            nl, last = text.find("\n", original.end), text.find("\n", op.end)
            cuts.add((_line_start(text, op.start), _line_start(text, original.start), ""))
            cuts.add((nl + 1, len(text) if last < 0 else last + 1, ""))
            continue
        sampled = (op.name == "scf.if" and SAMPLE_PREFIX.match(op.head.strip())
                   and [c.name for c in op.regions[0].blocks[0].ops] == [RECORD_OP])
        if sampled or (op.result_name and SAMPLE_PREFIX.match("%" + op.result_name)):
            # A sampling line of insert's: the predicate's ops, the scf.if around a record.
            nl = text.find("\n", op.end)
            cuts.add((_line_start(text, op.start), len(text) if nl < 0 else nl + 1, ""))
            continue
        if op.name != RECORD_OP or (op.parent_op() is not None and op.parent_op().name == "scf.if"
                                    and SAMPLE_PREFIX.match(op.parent_op().head.strip())):
            continue
        start = _line_start(text, op.start)
        nl = text.find("\n", op.start)
        end = len(text) if nl < 0 else nl + 1
        if not _RECORD_LINE.fullmatch(text, start, len(text) if nl < 0 else nl):
            raise UserError(f"{path}:{op.line}: this proton.record line holds more than a "
                            "record proton-inject writes ('proton.record start|end \"NAME\"'); "
                            "cannot strip it without losing the rest; edit the line by hand")
        if nl < 0 and start > 0:  # the record ended the file: drop the newline before it
            start -= 1
        cuts.add((start, end, ""))
    out, pos = [], 0
    for a, b, new in sorted(cuts):  # records inside a cut copy or block overlap its cut
        if a >= pos:
            out.append(text[pos:a])
            out.append(new)
        pos = max(pos, b)
    out.append(text[pos:])
    return "".join(out)


_EXIT_BRANCH = f"cf.br {EXIT_BLOCK}"


def _exit_cuts(module: Module, fn_op: Op, path: str) -> set[tuple[int, int, str]]:
    """Undo a kernel scope's single exit block (``_exit_block``): the block goes, and each
    ``cf.br ^pi_exit`` is a ``tt.return`` again."""
    text = module.text
    blocks = fn_op.regions[0].blocks if fn_op.regions else []
    exits = [b for b in blocks if module.block_name(b) == EXIT_BLOCK]
    if not exits:
        return set()
    exit_block = exits[0]
    shape = [op.name for op in exit_block.ops]
    if len(exits) > 1 or exit_block is not blocks[-1] or shape not in (
            [RECORD_OP, "tt.return"], ["scf.if", "tt.return"]):
        raise UserError(f"{path}:{exit_block.ops[0].line if exit_block.ops else fn_op.line}: "
                        f"the block {EXIT_BLOCK} is not the exit block proton-inject writes "
                        "(the function's last block: a proton.record end and tt.return); "
                        "cannot strip it; edit it by hand")
    ret = exit_block.ops[-1]
    nl = text.find("\n", ret.end)
    cuts = {(_line_start(text, exit_block.start), len(text) if nl < 0 else nl + 1, "")}
    for block in blocks[:-1]:
        for op in block.ops:
            if op.name == "cf.br" and text.startswith(_EXIT_BRANCH, op.start):
                after = text[op.start + len(_EXIT_BRANCH):op.start + len(_EXIT_BRANCH) + 1]
                if after in ("", " ", "\n", "\r"):
                    cuts.add((op.start, op.start + len(_EXIT_BRANCH), "tt.return"))
    return cuts


# ---- trees and files ---------------------------------------------------------------


def _load_dump_manifest(root: Path) -> dict[str, dict]:
    """Per relative .ttgir path, what `dump` recorded (if the input is a dump directory)."""
    from proton_inject.formats.manifest import read_manifest

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
            kernels.append(_kernel_dict(k))
            notes.extend(_changed_source_note(k, src / "manifest.json"))
    manifest = {"tool": f"proton-inject {__version__}", "format": 1,
                "rules": _rules_dict(rules), "kernels": kernels, "left_out": left_out}
    return outputs, manifest, notes


def _changed_source_note(k: KernelManifest, manifest: Path | str = "manifest.json") -> list[str]:
    """A warning when marks or line ranges are read from a source file that changed since the
    dump: the IR's line numbers are the old file's, so a region may cover other code."""
    dump = k.dump or {}
    recorded, path = dump.get("source_sha256"), dump.get("source_file")
    if not recorded or not path or not any(r.origin in ("mark", "region") for r in k.regions):
        return []
    from proton_inject.formats.manifest import source_sha256

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


def _kernel_dict(k: KernelManifest) -> dict:
    d = asdict(k)
    for r in d["regions"]:
        r["ir_lines"] = list(r["ir_lines"])
    if d["dump"] is None:
        del d["dump"]
    return d


def _rules_dict(rules: Rules) -> dict:
    r = rules.with_defaults()
    return {"kernel_scope": r.kernel_scope, "loops": r.loops, "loop_depth": r.loop_depth,
            "ranges": [f"{x.name}={x.file}:{x.start}-{x.end}" for x in r.ranges],
            "ops": list(r.ops), "kernel": r.kernel, "marks": r.marks,
            **({"sample_ctas": r.sample_ctas} if r.sample_ctas > 1 else {})}




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


def check_golden(golden: str | Path, tree: bool) -> None:
    """Refuse a golden that nothing can be compared with (missing, empty, or a file for a tree
    input): checked before any work, so that nothing is written first."""
    g = Path(golden)
    opt = f"--check-against {golden}"
    if g.is_dir():
        if not any(q.is_file() for q in g.rglob("*.ttgir")):
            raise UserError(f"{opt}: holds no .ttgir file; give the golden "
                            f"{'tree' if tree else 'file'} that `insert -o` wrote")
    elif g.is_file():
        if tree:
            raise UserError(f"{opt}: is a file, but the input is a tree; give the golden tree "
                            "(a directory)")
        if g.stat().st_size == 0:
            raise UserError(f"{opt}: is empty; give the golden file that `insert -o` wrote")
    elif g.exists():
        raise UserError(f"{opt}: is neither a file nor a directory; give the golden that "
                        "`insert -o` wrote")
    else:
        raise UserError(f"{opt}: no such golden file or directory")


def diff_against(outputs: dict[str, str], manifest: dict | None, golden: str | Path) -> str:
    """Unified diff between generated output and a golden tree (or file); '' when equal."""
    check_golden(golden, tree=manifest is not None)
    golden = Path(golden)
    chunks: list[str] = []
    if golden.is_file():
        (rel, text), = outputs.items()
        return _diff(read_ttgir(golden).decode("latin-1"), text, str(golden), rel)
    if not golden.is_dir():
        from proton_inject.formats.schema import not_found

        raise not_found(golden, "golden file or directory")
    want = {p.relative_to(golden).as_posix(): p for p in find_ttgir([golden])}
    for rel in sorted(set(want) | set(outputs)):
        old = read_ttgir(want[rel]).decode("latin-1") if rel in want else ""
        new = outputs.get(rel, "")
        chunks.append(_diff(old, new, f"golden/{rel}", f"generated/{rel}"))
    if manifest is not None and os.path.lexists(golden / "manifest.json"):
        chunks.append(_diff(read_text(golden / "manifest.json", "manifest"),
                            manifest_json(manifest),
                            "golden/manifest.json", "generated/manifest.json"))
    return "".join(chunks)


def _diff(old: str, new: str, a: str, b: str) -> str:
    if old == new:
        return ""
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), a, b))


def strip_path(src: str | Path, out: str | Path) -> list[Path]:
    """Strip records from a tree or a single file into `out`; returns the files written."""
    src, out = Path(src), Path(out)
    if src.is_file():
        write_atomic(out, strip_text(read_ttgir(src), str(src)).encode("latin-1"))
        return [out]
    files = find_ttgir([src])
    texts = {path.relative_to(src): strip_text(read_ttgir(path), str(path)) for path in files}
    _check_replaceable(out)

    def build(tmp: Path) -> None:
        for rel, text in texts.items():
            write_atomic(tmp / rel, text.encode("latin-1"))

    replace_tree(out, build)
    return [out / rel for rel in texts]


def insert_file(src: str | Path, rules: Rules, force: bool = False, inline=None) -> InsertResult:
    """Instrument a single .ttgir file (``inline`` as for ``insert_text``)."""
    module = parse_file(src)  # for its clear missing-file error
    res = insert_text(module.text, rules, str(src), force=force, inline=inline)
    for k in res.kernels:
        k.file = Path(src).name
    return res
