"""Line-range regions (``--region NAME=FILE:START-END`` and ``# proton:`` marks): the ops a
source range compiled to, placed as one region, or an error that says where they went."""

from __future__ import annotations

from proton_inject.errors import UserError
from proton_inject.formats.rules_file import LineRange
from proton_inject.instrument.regions import KernelSelection, frame_lines, straight_line
from proton_inject.ttgir.outline import source_of
from proton_inject.ttgir.tree import Block, Op


def line_range(k: KernelSelection, rng: LineRange) -> None:
    fn_op = k.fn.op
    rule = f"{rng.origin} {rng.name!r} ({rng.where or f'{rng.file}:{rng.start}-{rng.end}'})"

    def in_range(op: Op) -> bool:
        return any(rng.start <= ln <= rng.end for ln in frame_lines(op, rng.file))

    matched = [op for op in fn_op.walk() if op is not fn_op and in_range(op)]
    lines = f"{rng.file}:{rng.start}" + (f"-{rng.end}" if rng.end != rng.start else "")
    if not matched and rng.origin == "region":
        # As for --op: over a tree, most kernels may not hold the lines at all; the CLI refuses
        # only when the rules selected nothing in the whole input.
        k.notes.append(f"kernel {k.fn.name}: {rule}: no op of this kernel comes from {lines} "
                       "(`proton-inject inspect` lists the lines that have ops)")
        return
    if not matched:
        raise UserError(
            f"kernel {k.fn.name}: {rule}: no op of the IR comes from {lines}; the code there "
            "may have been folded away or the file may differ from the one compiled. Run "
            f"`proton-inject inspect {k.module.path}` to see which source lines have ops.")
    matched_set = set(matched)
    outer = [op for op in matched if not any(a in matched_set for a in op.ancestors())]
    blocks = {id(op.parent): op.parent for op in outer}
    if len(blocks) > 1:
        found = _hoisting_block(outer, rng)
        if found is not None:
            inner, moved = found
            outer = [op for op in outer if op.parent is inner]
            shown = ", ".join(f"{op.name} (IR line {op.line})" for op in moved[:3])
            k.notes.append(
                f"kernel {k.fn.name}: {rule}: {len(moved)} op(s) from {lines} were moved out of "
                f"the enclosing {inner.parent.parent.name} by the compiler (hoisted or "
                f"pipelined: {shown}{', ...' if len(moved) > 3 else ''}); the region measures "
                "the ops that stayed inside")
            blocks = {id(inner): inner}
    if len(blocks) > 1:
        a, b = outer[0], next(op for op in outer if op.parent is not outer[0].parent)
        split = _body_blocks_of(k, outer)
        if len(split) > 1:  # blocks of the function body: a return lies between the ops
            names = ", ".join(k.module.block_name(blk) for blk in split)
            raise UserError(
                f"kernel {k.fn.name}: {rule}: the ops from {lines} lie on both sides of an "
                f"early return (in blocks {names} of the kernel body: {a.name} at IR line "
                f"{a.line}, {b.name} at IR line {b.line}); a region cannot span a return. "
                "Mark lines on one side of it, or use --kernel-scope for the whole kernel "
                "(one region from its start to whichever return the CTA takes).")
        raise UserError(
            f"kernel {k.fn.name}: {rule}: the ops from {lines} lie in different blocks of the "
            f"IR: {a.name} (IR line {a.line}{_in(a)}) and {b.name} (IR line {b.line}{_in(b)}); "
            "the compiler moved or pipelined them. " + _suggest(k, outer, rng))
    block = outer[0].parent
    if not straight_line(block):
        owner = block.parent.parent
        raise UserError(
            f"kernel {k.fn.name}: {rule}: the ops from {lines} are inside {owner.name} "
            f"(IR line {owner.line}), whose region is not straight-line code; mark the line of "
            f"the {owner.name} itself instead.")
    idx = [block.ops.index(op) for op in outer]
    first, last = min(idx), max(idx)
    for i in range(first, last + 1):
        op = block.ops[i]
        if op in matched_set or not op.location.frames:
            continue  # ops with no location (hoisted constants) do not break a range
        src = source_of(op)
        raise UserError(
            f"kernel {k.fn.name}: {rule}: the ops from {lines} are not contiguous in the IR: "
            f"{op.name} from {src} (IR line {op.line}) sits between {block.ops[first].name} "
            f"(IR line {block.ops[first].line}) and {block.ops[last].name} (IR line "
            f"{block.ops[last].line}). " + _suggest(k, outer, rng))
    if block.ops[last].is_terminator:
        last -= 1
        if last < first:
            raise UserError(f"kernel {k.fn.name}: {rule}: {lines} holds only the terminator "
                            f"{block.ops[first].name} (IR line {block.ops[first].line}); "
                            "there is nothing to measure.")
    k.add(rng.name, block, first, last, rng.origin, lines, rank=2)


def _body_blocks_of(k: KernelSelection, ops: list[Op]) -> list[Block]:
    """The blocks of the kernel's body (several where it returns early) that hold ``ops`` or
    the ops they are nested in, in text order."""
    body = k.fn.op.regions[0].blocks
    held = set()
    for op in ops:
        top = op
        for anc in op.ancestors():
            if anc is k.fn.op:
                break
            top = anc
        held.add(id(top.parent))
    return [blk for blk in body if id(blk) in held]


def _hoisting_block(outer: list[Op], rng: LineRange) -> tuple[Block, list[Op]] | None:
    """When the range lies inside a loop (or if) in the source and the compiler moved some of
    its ops out of that construct (hoisting, pipeline prologue/epilogue), the block inside it
    that holds most of the ops, and the moved ops. None when the ops are split otherwise."""
    blocks = {id(op.parent): op.parent for op in outer}
    # Try the deepest blocks first: the ops that stayed inside the construct are there.
    for block in sorted(blocks.values(), key=lambda b: -sum(1 for _ in b.ops[0].ancestors())):
        owner = None  # the outermost construct around `block` that the range lies inside of
        for anc in block.ops[0].ancestors():
            if anc.name == "tt.func":
                break
            lines = frame_lines(anc, rng.file)
            if lines and min(lines) < rng.start:
                owner = anc
        if owner is None:
            continue
        moved = [op for op in outer if owner not in set(op.ancestors())]
        inside = [op for op in outer if op.parent is not block and op not in moved]
        if moved and not inside:
            return block, moved
    return None


def _in(op: Op) -> str:
    parent = op.parent_op()
    return f", in {parent.name} at IR line {parent.line}" if parent else ""


def _suggest(k: KernelSelection, ops: list[Op], rng: LineRange) -> str:
    """The smallest valid placement around `ops`: their common block, first to last."""
    chains = [[op] + list(op.ancestors()) for op in ops]
    common = None
    for cand in chains[0]:
        block = cand.parent
        if block is not None and all(any(c.parent is block for c in ch) for ch in chains):
            common = block
            break
    if common is None or not straight_line(common):
        return "No single block of straight-line code holds them; mark smaller ranges instead."
    tops = [next(c for c in ch if c.parent is common) for ch in chains]
    idx = sorted(common.ops.index(t) for t in tops)
    span = common.ops[idx[0]: idx[-1] + 1]
    lines = sorted({ln for op in span for o in op.walk() for ln in frame_lines(o, rng.file)})
    if not lines:
        return ""
    return (f"Nearest valid placement: IR lines {span[0].line}-{span[-1].line}, i.e. "
            f"--region '{rng.name}={rng.file}:{lines[0]}-{lines[-1]}' (if no other op "
            "interleaves there), or mark a single line.")
