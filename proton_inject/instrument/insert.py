"""Rewrite TTGIR: insert `proton.record` lines for the selected regions.

Only whole lines are inserted, so every other byte of the input is kept and a
reviewer's diff shows just the records; the one exception is kernel scope on a
kernel with an early return, whose `tt.return`s become `cf.br ^pi_exit` to a
single exit block (strip undoes it). Output is deterministic: identical input
and rules give identical bytes. Stripping is `strip.py`, CTA sampling
`sampling.py`, files and trees `trees.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from proton_inject.errors import UserError
from proton_inject.formats.manifest import KernelManifest, RegionInfo
from proton_inject.instrument.regions import EXIT_BLOCK, Region, returns_of
from proton_inject.instrument.rules import Rules
from proton_inject.instrument.sampling import CtaSampler
from proton_inject.instrument.select import select
from proton_inject.instrument.strip import RECORD_OP, is_instrumented, strip_text
from proton_inject.ttgir import Module, parse
from proton_inject.ttgir.tree import line_start


@dataclass
class InsertResult:
    text: str
    kernels: list[KernelManifest]
    notes: list[str]


def escape_name(name: str) -> str:
    """A region name as an MLIR string literal body."""
    return name.replace("\\", "\\\\").replace('"', '\\"')


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
    sampler = CtaSampler(module, rules, path) if selected else None
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


def _records_for(module: Module, r: Region, idx: int,
                 sampler: CtaSampler | None = None) -> list[tuple[tuple, str]]:
    """The two record lines of a region, with sort keys that keep nesting right.

    At one offset, end records come before start records; among ends the inner
    region's comes first, among starts the outer region's. A sampled record is wrapped in
    ``scf.if`` on the sampler's predicate.
    """
    text = module.text
    first, last = r.first_op, r.last_op
    start_at = line_start(text, first.start)
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
    end_indent = text[line_start(text, last.start):last.start]
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
    label_indent = text[line_start(text, label.start):label.start]
    ret = returns_of(r.block.parent.parent)[-1]
    indent = text[line_start(text, ret.start):ret.start]
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
