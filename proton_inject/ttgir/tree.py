"""The op tree the parser builds: module -> functions -> regions -> blocks -> ops.

Every node keeps the byte span of its text in the parsed file, so the tree can
render the file back byte for byte and the instrumenter can insert lines at
exact offsets without re-printing anything.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# Ops whose regions run as straight-line code of the kernel (see DESIGN.md,
# "Where records may go"); any other region (tt.reduce combiners...) is off limits.
STRAIGHT_LINE_REGION_OPS = frozenset(
    {"tt.func", "scf.for", "scf.while", "scf.if", "ttg.warp_specialize"}
)
LOOP_OPS = frozenset({"scf.for", "scf.while"})
TERMINATORS = frozenset(
    {"scf.yield", "tt.return", "scf.condition", "ttg.warp_yield", "ttg.warp_return",
     "cf.br", "cf.cond_br", "cf.switch"}
)
# Ops whose printed form omits an operand-less terminator; MLIR re-adds `scf.yield`.
IMPLICIT_YIELD_OPS = frozenset({"scf.for", "scf.if"})


@dataclass(frozen=True)
class FileLoc:
    """One source position."""

    file: str
    line: int
    column: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


@dataclass(frozen=True)
class Location:
    """A location resolved through the loc aliases.

    ``frames`` lists the source positions innermost first (a callsite contributes
    callee then caller; a fused loc all of its parts); ``names`` the variable
    names attached by name locs, innermost first.
    """

    frames: tuple[FileLoc, ...] = ()
    names: tuple[str, ...] = ()

    @property
    def primary(self) -> FileLoc | None:
        """The frame a person would point at: the outermost frame outside Triton itself."""
        for f in reversed(self.frames):
            if not _is_triton_internal(f.file):
                return f
        return self.frames[0] if self.frames else None

    @property
    def name(self) -> str | None:
        return self.names[0] if self.names else None


def _is_triton_internal(path: str) -> bool:
    return "/triton/language/" in path or "/triton/runtime/" in path


UNKNOWN = Location()


@dataclass(eq=False, slots=True)
class Op:
    """One operation. ``start``/``end`` span its text (results through trailing loc)."""

    name: str
    results: list[str]
    start: int
    end: int
    line: int
    column: int
    regions: list[Region] = field(default_factory=list)
    loc_ref: str | None = None  # `#loc12` of a trailing loc(#loc12)
    loc_node: object | None = None  # an inline trailing loc, unresolved
    head: str = ""  # text of the op after its name on its first line
    parent: Block | None = None
    location: Location = UNKNOWN

    @property
    def is_terminator(self) -> bool:
        return self.name in TERMINATORS or self.name.endswith(".return")

    @property
    def result_name(self) -> str | None:
        """First result without `%` or `:N`, e.g. `acc_8` for `%acc_8:2`."""
        if not self.results:
            return None
        return self.results[0].lstrip("%").split(":")[0]

    def walk(self):
        """This op and every op nested in it, in text order (iterative: nesting has no limit)."""
        stack = [self]
        while stack:
            op = stack.pop()
            yield op
            if op.regions:
                stack.extend(reversed([c for r in op.regions for b in r.blocks for c in b.ops]))

    def parent_op(self) -> Op | None:
        return self.parent.parent.parent if self.parent and self.parent.parent else None

    def ancestors(self):
        op = self.parent_op()
        while op is not None:
            yield op
            op = op.parent_op()


@dataclass(eq=False, slots=True)
class Block:
    """A block: an optional `^bb0(...):` label, then ops. ``end`` is the end of its last op."""

    label: str | None
    start: int
    end: int
    ops: list[Op] = field(default_factory=list)
    parent: Region | None = None

    @property
    def terminator(self) -> Op | None:
        return self.ops[-1] if self.ops and self.ops[-1].is_terminator else None


@dataclass(eq=False, slots=True)
class Region:
    """A region from its `{` to its `}` inclusive."""

    start: int
    end: int
    blocks: list[Block] = field(default_factory=list)
    parent: Op | None = None
    index: int = 0


@dataclass(eq=False, slots=True)
class Function:
    """A `tt.func`: its op plus name and visibility."""

    op: Op
    name: str
    visibility: str  # "public" or "private"


_FUNC_HEAD = re.compile(r'\s*(?:(public|private|nested)\s+)?@("(?:[^"\\]++|\\.)*+"|[\w$.]+)')
_FOR_IV = re.compile(r"\s*(%[\w$.-]+)\s*=")


@dataclass(eq=False, slots=True)
class Module:
    """A parsed TTGIR file. ``text`` is the file decoded as latin-1 (offsets are bytes)."""

    path: str
    text: str
    items: list[Op]
    loc_aliases: dict[str, object]
    attr_aliases: list[tuple[int, int]]

    def render(self) -> bytes:
        """Re-render the file from the tree; unmodified trees give the input back exactly."""
        out: list[str] = []
        pos = 0
        for item in self.items:
            out.append(self.text[pos : item.start])
            pos = _render_op(self.text, item, out)
        out.append(self.text[pos:])
        return "".join(out).encode("latin-1")

    def walk(self):
        """Every op in text order."""
        for item in self.items:
            yield from item.walk()

    def block_name(self, block: Block) -> str:
        """`^bb2` for a labelled block, else `^bb0` (the entry block prints no label)."""
        if block.label is None:
            return "^bb0"
        return block.label.split("(", 1)[0].rstrip(":")

    @property
    def functions(self) -> list[Function]:
        funcs = []
        for op in self.walk():
            if op.name == "tt.func":
                m = _FUNC_HEAD.match(op.head)
                name = m.group(2).strip('"') if m else "?"
                vis = (m.group(1) if m else None) or "public"
                funcs.append(Function(op, name, vis))
        return funcs

    def line_of(self, offset: int) -> int:
        return self.text.count("\n", 0, offset) + 1

    def target(self) -> str | None:
        """The `ttg.target` module attribute, e.g. `cuda:90`."""
        m = re.search(r'ttg\.target"?\s*=\s*"([^"]+)"', self.text)
        return m.group(1) if m else None


def line_start(text: str, pos: int) -> int:
    """Offset of the first character of the line holding ``pos``."""
    return text.rfind("\n", 0, pos) + 1


def _render_op(text: str, op: Op, out: list[str]) -> int:
    """Append the text of `op`, children re-rendered from the tree; returns op.end.

    Iterative: the stack holds the ops still to enter and, for each entered op, a
    marker to emit its tail (text after its last child) once its children are done.
    """
    pos = op.start
    stack: list[tuple[Op, bool]] = [(op, False)]
    while stack:
        cur, done = stack.pop()
        if done:
            out.append(text[pos : cur.end])
            pos = cur.end
            continue
        out.append(text[pos : cur.start])
        pos = cur.start
        stack.append((cur, True))
        stack.extend((c, False) for c in reversed(
            [c for r in cur.regions for b in r.blocks for c in b.ops]))
    return pos


def induction_var(op: Op) -> str | None:
    """The induction variable of an `scf.for` (`%k`), else None."""
    if op.name != "scf.for":
        return None
    m = _FOR_IV.match(op.head)
    return m.group(1) if m else None


def loop_depth(op: Op) -> int:
    """How many loops enclose this op (0 for an outermost loop)."""
    return sum(1 for a in op.ancestors() if a.name in LOOP_OPS)


def mlir_op_counts(module: Module) -> dict[str, int]:
    """Op counts as MLIR's own walk sees them, for comparing with Triton's parser.

    The printed form hides two kinds of ops that the parsed module has: the
    operand-less `scf.yield` closing scf.for/scf.if bodies, and the
    `ttg.warp_specialize.partitions` op holding a warp_specialize's partitions.
    MLIR also wraps a file's top level in a `builtin.module` of its own unless it is one
    module (a lit file may hold several).
    """
    counts: dict[str, int] = {}
    top = module.items
    if not (len(top) == 1 and top[0].name in ("module", "builtin.module")):
        counts["builtin.module"] = 1
    for op in module.walk():
        name = "builtin.module" if op.name == "module" else op.name
        counts[name] = counts.get(name, 0) + 1
        if op.name in IMPLICIT_YIELD_OPS:
            for region in op.regions:
                blocks = region.blocks or [None]  # `{ }` or only comments: one empty block
                for block in blocks:
                    if block is None or not block.ops or not block.ops[-1].is_terminator:
                        counts["scf.yield"] = counts.get("scf.yield", 0) + 1
        if op.name == "ttg.warp_specialize" and len(op.regions) > 1:
            key = "ttg.warp_specialize.partitions"
            counts[key] = counts.get(key, 0) + 1
    return counts
