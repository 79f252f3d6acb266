"""Regions: a run of consecutive ops in one straight-line block, measured as one scope, and
what selecting them shares (the kernel being selected in, labels, source lines, the exit block
of a kernel with an early return)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from proton_inject.instrument.rules import Rules
from proton_inject.ttgir.outline import partition_of
from proton_inject.ttgir.tree import (
    STRAIGHT_LINE_REGION_OPS,
    Block,
    Function,
    Module,
    Op,
)


@dataclass(eq=False)
class Region:
    """Ops ``block.ops[first:last+1]`` measured as one scope."""

    name: str
    block: Block
    first: int
    last: int
    origin: str
    source: str | None  # "file:line" or "file:start-end"
    partition: str | None = None
    rank: int = 0  # breaks ties between regions over the same ops: lower is outer
    # The whole body of a function of several blocks (an early return): it starts at the
    # entry block's first op and ends in a single exit block that insert adds (EXIT_BLOCK).
    to_exit: bool = False

    @property
    def first_op(self) -> Op:
        return self.block.ops[self.first]

    @property
    def last_op(self) -> Op:
        return self.block.ops[self.last]


class KernelSelection:
    """Selection state for one function."""

    def __init__(self, module: Module, fn: Function, rules: Rules):
        self.module = module
        self.fn = fn
        self.rules = rules
        self.regions: list[Region] = []
        self.notes: list[str] = []

    def where(self, op: Op) -> str:
        return f"{self.module.path}:{op.line}"

    def add(self, name, block, first, last, origin, source, rank, partition=None,
            to_exit=False) -> None:
        self.regions.append(Region(name, block, first, last, origin, source,
                                   partition if partition is not None else
                                   partition_of(block.ops[first]), rank, to_exit))


def straight_line(block: Block) -> bool:
    """True when every region enclosing the block runs as straight-line kernel code."""
    region = block.parent
    while region is not None:
        owner = region.parent
        if owner is None or owner.name not in STRAIGHT_LINE_REGION_OPS:
            return False
        if owner.name == "tt.func":
            return True
        region = owner.parent.parent if owner.parent else None
    return False


def end_index(block: Block) -> int:
    """Index of the last op a region may end on: the one before the terminator."""
    return len(block.ops) - 2 if block.terminator is not None else len(block.ops) - 1


# The label of the block that the instrumented copy of a kernel with an early return ends
# in: every `tt.return` becomes `cf.br ^pi_exit`, and `^pi_exit` holds the kernel scope's end
# record and the one `tt.return` (strip undoes both).
EXIT_BLOCK = "^pi_exit"


def returns_of(fn_op: Op) -> list[Op]:
    """The `tt.return`s of a function's body (``fn_op``: its `tt.func`), in text order."""
    return [op for region in fn_op.regions for block in region.blocks for op in block.ops
            if op.name == "tt.return"]


def return_operands(op: Op, text: str) -> str:
    """What a `tt.return` returns ('' for a kernel's, which returns nothing)."""
    rest = text[op.start + len("tt.return"):op.end]
    i = rest.find("loc(")
    return (rest[:i] if i >= 0 else rest).strip()


def frame_lines(op: Op, file: str) -> list[int]:
    return [f.line for f in op.location.frames if same_file(f.file, file)]


def same_file(ir_file: str, wanted: str) -> bool:
    """`wanted` names the IR's file exactly or as a path suffix (`matmul.py`)."""
    if ir_file == wanted:
        return True
    a, b = Path(ir_file).parts, Path(wanted).parts
    return len(b) <= len(a) and a[-len(b):] == b
