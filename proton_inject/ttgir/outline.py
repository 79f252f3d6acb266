"""An outline of a parsed TTGIR file that a person can choose regions from."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from .tree import LOOP_OPS, Module, Op, induction_var, loop_depth


@dataclass
class LoopInfo:
    op: str  # scf.for / scf.while
    depth: int
    ir_line: int
    source: str | None  # file:line of the loop in the kernel's source
    induction_var: str | None
    result: str | None
    partition: str | None  # warp_specialize region it runs in, if any


@dataclass
class KernelOutline:
    name: str
    visibility: str
    ir_line: int
    loops: list[LoopInfo] = field(default_factory=list)
    op_counts: Counter = field(default_factory=Counter)
    source_lines: dict[str, Counter] = field(default_factory=dict)  # "file:line" -> op names


def partition_of(op: Op) -> str | None:
    """`default` or `partitionN` when the op runs inside a ttg.warp_specialize region."""
    child = op
    for anc in op.ancestors():
        if anc.name == "ttg.warp_specialize":
            region = child.parent.parent
            return "default" if region.index == 0 else f"partition{region.index - 1}"
        child = anc
    return None


def outline(module: Module) -> list[KernelOutline]:
    """Kernels, their loops, op counts and the source lines their ops come from."""
    kernels = []
    for fn in module.functions:
        k = KernelOutline(fn.name, fn.visibility, fn.op.line)
        for op in fn.op.walk():
            if op is fn.op:
                continue
            k.op_counts[op.name] += 1
            p = op.location.primary
            if p is not None:
                k.source_lines.setdefault(f"{p.file}:{p.line}", Counter())[op.name] += 1
            if op.name in LOOP_OPS:
                k.loops.append(LoopInfo(
                    op=op.name, depth=loop_depth(op), ir_line=op.line,
                    source=f"{p.file}:{p.line}" if p else None,
                    induction_var=induction_var(op), result=op.result_name,
                    partition=partition_of(op)))
        kernels.append(k)
    return kernels


def format_outline(module: Module, max_ops: int = 12) -> str:
    """Render the outline as text for `proton-inject inspect`."""
    if isinstance(max_ops, bool) or not isinstance(max_ops, int) or max_ops < 0:
        raise ValueError(f"max_ops must be a whole number of 0 or more, got {max_ops!r}")
    lines = [f"{module.path}  (target {module.target() or '?'})"]
    for k in outline(module):
        total = sum(k.op_counts.values())
        lines.append(f"  kernel {k.name} ({k.visibility}, IR line {k.ir_line}): {total} ops,"
                     f" {len(k.loops)} loops")
        for lp in k.loops:
            what = lp.result or lp.induction_var or ""
            where = f" [{lp.partition}]" if lp.partition else ""
            lines.append(f"    {'  ' * lp.depth}{lp.op} {what} depth {lp.depth} @ {lp.source}"
                         f" (IR line {lp.ir_line}){where}")
        common = k.op_counts.most_common()
        shown = ", ".join(f"{n} x{c}" for n, c in common[:max_ops])
        more = len(common) - max_ops
        if more > 0:
            shown += f", ... {more} more kinds" if shown else f"{more} kinds"
        lines.append(f"    ops: {shown}")
        lines.append("    source lines:")
        for src, ops in sorted(k.source_lines.items(), key=_source_key):
            names = ", ".join(f"{n}" + (f" x{c}" if c > 1 else "") for n, c in ops.most_common(4))
            lines.append(f"      {src}: {names}")
    return "\n".join(lines)


def _source_key(item):
    src = item[0]
    file, _, line = src.rpartition(":")
    return (file, int(line) if line.isdigit() else 0)
