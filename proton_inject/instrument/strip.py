"""Strip: remove the records insert wrote (and undo its exit block and CTA sampling), giving
back the input's bytes."""

from __future__ import annotations

import re

from proton_inject.errors import UserError
from proton_inject.instrument.regions import EXIT_BLOCK
from proton_inject.instrument.sampling import SAMPLE_PREFIX
from proton_inject.ttgir import Module, parse
from proton_inject.ttgir.tree import LOOP_OPS, Op, line_start

RECORD_OP = "proton.record"


def is_instrumented(module: Module) -> bool:
    return any(op.name == RECORD_OP for op in module.walk())


# A record line as insert writes it; MLIR prints one with its loc (a kernel whose callees
# were inlined comes back printed by MLIR).
_RECORD_LINE = re.compile(
    r'[ \t]*proton\.record (?:start|end) "(?:[^"\\\r\n]++|\\.)*+"(?: loc\(#loc\d*\))?[ \t]*\r?')
# So a record line with a loc marks a file MLIR printed: the kernel with its callees inlined.
_PRINTED_RECORD = re.compile(
    r'^[ \t]*proton\.record (?:start|end) "(?:[^"\\\r\n]++|\\.)*+" loc\(', re.M)


def inlined_note(text: str, path: str) -> str | None:
    """One line saying that stripping ``text`` cannot give the original bytes back, when insert
    inlined its kernel's noinline callees (the file is then MLIR's printing); else None."""
    if not _PRINTED_RECORD.search(text):
        return None
    return (f"{path}: insert inlined this kernel's noinline callees (Proton's lowering takes one "
            "function per module): stripped, it is the inlined kernel as MLIR prints it, not the "
            "original bytes; keep the dump for those")


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
            cuts.add((line_start(text, op.start), line_start(text, original.start), ""))
            cuts.add((nl + 1, len(text) if last < 0 else last + 1, ""))
            continue
        sampled = (op.name == "scf.if" and SAMPLE_PREFIX.match(op.head.strip())
                   and [c.name for c in op.regions[0].blocks[0].ops] == [RECORD_OP])
        if sampled or (op.result_name and SAMPLE_PREFIX.match("%" + op.result_name)):
            # A sampling line of insert's: the predicate's ops, the scf.if around a record.
            nl = text.find("\n", op.end)
            cuts.add((line_start(text, op.start), len(text) if nl < 0 else nl + 1, ""))
            continue
        if op.name != RECORD_OP or (op.parent_op() is not None and op.parent_op().name == "scf.if"
                                    and SAMPLE_PREFIX.match(op.parent_op().head.strip())):
            continue
        start = line_start(text, op.start)
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
    cuts = {(line_start(text, exit_block.start), len(text) if nl < 0 else nl + 1, "")}
    for block in blocks[:-1]:
        for op in block.ops:
            if op.name == "cf.br" and text.startswith(_EXIT_BRANCH, op.start):
                after = text[op.start + len(_EXIT_BRANCH):op.start + len(_EXIT_BRANCH) + 1]
                if after in ("", " ", "\n", "\r"):
                    cuts.add((op.start, op.start + len(_EXIT_BRANCH), "tt.return"))
    return cuts
