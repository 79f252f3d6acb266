"""Select regions to profile: turn an op tree plus rules into a list of regions per kernel.

A region is a run of consecutive ops in one straight-line block of the IR; the
instrumenter puts a start record before its first op and an end record after
its last op (kernel scope on a kernel with an early return: in the single exit
block the instrumenter adds). Rules: the whole kernel body, loops (around the loop and/or each
iteration), `# proton:` marks in the kernel source (`marks.py`), line ranges given on the
command line (`line_ranges.py`), and op-name patterns.
"""

from __future__ import annotations

import fnmatch

from proton_inject.errors import UserError
from proton_inject.instrument.line_ranges import line_range
from proton_inject.instrument.marks import marks_for_kernel, read_marks
from proton_inject.instrument.regions import (
    EXIT_BLOCK,
    KernelSelection,
    Region,
    end_index,
    return_operands,
    returns_of,
    straight_line,
)
from proton_inject.instrument.rules import Rules
from proton_inject.ttgir import Module
from proton_inject.ttgir.outline import region_name as label
from proton_inject.ttgir.outline import source_of
from proton_inject.ttgir.tree import LOOP_OPS, loop_depth


def select(module: Module, rules: Rules,
           notes: list[str] | None = None) -> dict[str, list[Region]]:
    """Regions per kernel name, in the kernels the rules ask for.

    Raises UserError naming kernel, rule and source line for any region that
    cannot be placed correctly.
    """
    rules = rules.with_defaults()
    marks = read_marks(module, rules, notes) if rules.marks else []
    out: dict[str, list[Region]] = {}
    for fn in module.functions:
        if fn.visibility != "public" or not rules.wants_kernel(fn.name):
            continue
        k = KernelSelection(module, fn, rules)
        body = fn.op.regions[0].blocks[0] if fn.op.regions and fn.op.regions[0].blocks else None
        if body is None or not body.ops:
            raise UserError(f"{module.path}:{fn.op.line}: kernel {fn.name} has an empty body")
        if rules.kernel_scope:
            _kernel_scope(k)
        if rules.loops:
            _loops(k)
        for rng in list(rules.ranges) + marks_for_kernel(k, marks):
            line_range(k, rng)
        for pattern in rules.ops:
            _op_pattern(k, pattern)
        if rules.branches:
            _branches(k)
        _check_nesting(k)
        _unique_names(k.regions)
        if notes is not None:
            notes.extend(k.notes)
        out[fn.name] = k.regions
    return out


def _kernel_scope(k: KernelSelection) -> None:
    """The kernel body as one region, `kernel`, from its first op to whichever return the CTA
    takes.

    A body of several blocks (an early return gives `cf.cond_br` to blocks that each end in
    `tt.return`) cannot have its end record before each `tt.return`: Triton 3.6's scope
    analysis refuses one scope closed in several blocks ("The scope name 'kernel' is closed
    without being opened"). So insert gives the instrumented copy a single exit block: each
    `tt.return` becomes `cf.br ^pi_exit`, and `^pi_exit` holds the end record and the one
    `tt.return`. A body whose returns return values (not a kernel's) keeps one region per
    block instead: `kernel` for the entry block, `kernel ^bb2` for the others.
    """
    module = k.module
    region = k.fn.op.regions[0]
    blocks = region.blocks
    if len(blocks) > 1:
        if any(module.block_name(b) == EXIT_BLOCK for b in blocks):
            raise UserError(f"{k.where(k.fn.op)}: kernel {k.fn.name} already has a block "
                            f"{EXIT_BLOCK}, which kernel scope adds to a kernel with an early "
                            "return; rename that block, or leave out --kernel-scope")
        returns = returns_of(k.fn.op)
        if returns and not any(return_operands(op, module.text) for op in returns):
            entry = blocks[0]
            k.add("kernel", entry, 0, max(0, end_index(entry)), "kernel-scope", None, rank=0,
                  to_exit=True)
            return
    for block in blocks:
        end = end_index(block)
        if end < 0:
            continue  # only a terminator (or nothing): nothing to measure
        name = "kernel" if block is blocks[0] else f"kernel {module.block_name(block)}"
        k.add(name, block, 0, end, "kernel-scope", None, rank=0)


def _loops(k: KernelSelection) -> None:
    mode, max_depth = k.rules.loops, k.rules.loop_depth
    for op in k.fn.op.walk():
        if op.name not in LOOP_OPS:
            continue
        block = op.parent
        if not straight_line(block):
            continue
        if max_depth is not None and loop_depth(op) + 1 > max_depth:
            continue
        src = source_of(op)
        if mode in ("outer", "both"):
            i = block.ops.index(op)
            k.add(label("loop", op), block, i, i, "loops", src, rank=1)
        if mode in ("iteration", "both"):
            if not op.regions:
                raise UserError(f"{k.where(op)}: {op.name} has no body region, which MLIR would "
                                "refuse; is the file damaged? Re-dump it, or use --loops outer")
            body_region = op.regions[-1]  # scf.for: its body; scf.while: the `do` region
            for body in body_region.blocks:
                end = end_index(body)
                if end < 0:
                    k.notes.append(f"{k.where(op)}: {op.name} has an empty body; "
                                   "no iteration region")
                    continue
                k.add(label("iter", op), body, 0, end, "loops", src, rank=2)


def _branches(k: KernelSelection) -> None:
    """A region around each branch of each `scf.if` in straight-line code: ``then ...`` and
    ``else ...`` (an empty else, only its yield, has none)."""
    for op in k.fn.op.walk():
        if op.name != "scf.if" or not straight_line(op.parent):
            continue
        for word, region in zip(("then", "else"), op.regions, strict=False):
            for body in region.blocks:
                end = end_index(body)
                if end >= 0:
                    k.add(label(word, op), body, 0, end, "branches", source_of(op), rank=2)


def _op_pattern(k: KernelSelection, pattern: str) -> None:
    matched = skipped = 0
    for op in k.fn.op.walk():
        if op is k.fn.op or not fnmatch.fnmatchcase(op.name, pattern):
            continue
        block = op.parent
        if op.is_terminator or not straight_line(block):
            skipped += 1
            continue
        i = block.ops.index(op)
        k.add(label(op.name, op), block, i, i, f"op {pattern}", source_of(op), rank=3)
        matched += 1
    if skipped:
        k.notes.append(f"kernel {k.fn.name}: --op {pattern}: {skipped} match(es) skipped "
                       "(terminators or inside regions that are not straight-line code, "
                       "such as tt.reduce combiners)")
    if not matched and not skipped:
        kinds = {op.name for op in k.fn.op.walk() if op is not k.fn.op
                 and not op.is_terminator and straight_line(op.parent)}
        word = pattern.rsplit(".", 1)[-1].strip("*?[]")
        # Kinds that share the pattern's word first, then the tt/ttg/... ops, arith last.
        kinds = sorted(kinds, key=lambda n: (word not in n, n.startswith("arith."), n))
        shown = ", ".join(kinds[:12]) + (", ..." if len(kinds) > 12 else "")
        hint = (" (the compiler rewrites loads: into ttg.async_copy_global_to_local when it "
                "pipelines them, tt.descriptor_load for TMA)" if "load" in pattern else "")
        k.notes.append(f"kernel {k.fn.name}: --op {pattern} matched no op; op kinds in this "
                       f"kernel: {shown}{hint}")
    elif not matched:
        k.notes.append(f"kernel {k.fn.name}: --op {pattern} matched no op it can place")


# ---- nesting and names ---------------------------------------------------------


def _check_nesting(k: KernelSelection) -> None:
    by_block: dict[int, list[Region]] = {}
    for r in k.regions:
        by_block.setdefault(id(r.block), []).append(r)
    for regions in by_block.values():
        regions.sort(key=lambda r: (r.first, -r.last, r.rank))
        for i, a in enumerate(regions):
            for b in regions[i + 1:]:
                if b.first > a.last:
                    break
                if b.last > a.last:  # b starts inside a but ends after it
                    raise UserError(
                        f"kernel {k.fn.name}: regions {a.name!r} ({a.origin}, IR lines "
                        f"{a.first_op.line}-{a.last_op.line}) and {b.name!r} ({b.origin}, IR "
                        f"lines {b.first_op.line}-{b.last_op.line}) overlap without nesting; "
                        "change one so that one contains the other.")


def _unique_names(regions: list[Region]) -> None:
    seen: dict[str, int] = {}
    for r in sorted(regions, key=lambda r: (r.first_op.start, r.rank)):
        n = seen.get(r.name, 0) + 1
        seen[r.name] = n
        if n > 1:
            r.name = f"{r.name} #{n}"
