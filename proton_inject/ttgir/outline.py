"""An outline of a parsed TTGIR file that a person can choose regions from."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from .tree import LOOP_OPS, Module, Op, induction_var, loop_depth


@dataclass
class LoopInfo:
    op: str  # scf.for / scf.while
    depth: int  # 1 for an outermost loop, as `insert --loop-depth` counts
    ir_line: int
    source: str | None  # file:line of the loop in the kernel's source
    induction_var: str | None
    result: str | None
    partition: str | None  # warp_specialize region it runs in, if any
    name: str  # the region `insert --loops` puts around it, as the manifest and report call it


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


def _var_name(op: Op) -> str | None:
    """A readable variable for a name: the source variable, else a non-numeric SSA name."""
    for cand in (op.location.name, op.result_name, (induction_var(op) or "").lstrip("%")):
        if cand and not cand.isdigit():
            return cand
    return None


def source_of(op: Op) -> str | None:
    """``file.py:LINE`` of the op (the file's name only), as region names give it."""
    p = op.location.primary
    return f"{Path(p.file).name}:{p.line}" if p else None


def region_name(kind: str, op: Op) -> str:
    """The one name of a region around or inside ``op`` (``kind``: loop, iter, an op name) in
    insert, the manifest, traces, the report and inspect: ``loop acc @matmul.py:36``."""
    parts = [kind]
    var = _var_name(op)
    if var:
        parts.append(var)
    src = source_of(op)
    if src:
        parts.append(f"@{src}")
    part = partition_of(op)
    if part:
        parts.append(f"[{part}]")
    return " ".join(parts)


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
                    op=op.name, depth=loop_depth(op) + 1, ir_line=op.line,
                    source=f"{p.file}:{p.line}" if p else None,
                    induction_var=induction_var(op), result=op.result_name,
                    partition=partition_of(op), name=region_name("loop", op)))
        seen: Counter = Counter()
        for lp in k.loops:  # as insert tells apart loops of one name: by their order
            seen[lp.name] += 1
            if seen[lp.name] > 1:
                lp.name += f" #{seen[lp.name]}"
        kernels.append(k)
    return kernels


def format_outline(module: Module, max_ops: int = 12) -> str:
    """Render the outline as text for `proton-inject inspect`."""
    if isinstance(max_ops, bool) or not isinstance(max_ops, int) or max_ops < 0:
        raise ValueError(f"max_ops must be a whole number of 0 or more, got {max_ops!r}")
    lines = [f"{module.path}  (target {module.target() or '?'})"]
    for k in outline(module):
        total = sum(k.op_counts.values())
        n = len(k.loops)
        lines.append(f"  kernel {k.name} ({k.visibility}, IR line {k.ir_line}): {total} ops,"
                     f" {n} loop{'s' if n != 1 else ''}")
        for lp in k.loops:  # (its name holds its partition)
            lines.append(f"    {'  ' * (lp.depth - 1)}{lp.op} {lp.name} (depth {lp.depth}, "
                         f"{lp.source or 'no source line'}, IR line {lp.ir_line})")
        common = k.op_counts.most_common()
        shown = ", ".join(f"{n} x{c}" for n, c in common[:max_ops])
        more = len(common) - max_ops
        if more > 0:
            kinds = f"kind{'s' if more != 1 else ''}"
            shown += f", ... {more} more {kinds}" if shown else f"{more} {kinds}"
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
