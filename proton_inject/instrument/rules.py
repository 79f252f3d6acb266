"""Select regions to profile: turn an op tree plus rules into a list of regions.

A region is a run of consecutive ops in one straight-line block of the IR; the
instrumenter puts a start record before its first op and an end record after
its last op (kernel scope on a kernel with an early return: in the single exit
block the instrumenter adds). Rules: the whole kernel body, loops (around the loop and/or each
iteration), `# proton:` marks in the kernel source, line ranges given on the
command line, and op-name patterns.
"""

from __future__ import annotations

import fnmatch
import io
import re
import tokenize
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proton_inject.errors import UserError
from proton_inject.formats.rules_file import LOOP_MODES, LineRange
from proton_inject.ttgir.outline import partition_of
from proton_inject.ttgir.tree import (
    LOOP_OPS,
    STRAIGHT_LINE_REGION_OPS,
    Block,
    Function,
    Module,
    Op,
    induction_var,
    loop_depth,
)


@dataclass
class Rules:
    """What to instrument; with no rule set, `with_defaults()` gives kernel scope + outer loops."""

    kernel_scope: bool = False
    loops: str | None = None  # outer | iteration | both
    loop_depth: int | None = None  # only loops nested at most this deep (1 = outermost)
    ranges: list[LineRange] = field(default_factory=list)
    ops: list[str] = field(default_factory=list)
    kernel: str | None = None  # regex on kernel names
    marks: bool = True  # honour `# proton:` comments in the kernel's source
    source_root: str | None = None  # where relative source paths of the IR are found
    # Records run in every Nth CTA only (by linear program id; 1 = every CTA).
    sample_ctas: int = 1

    def __post_init__(self) -> None:
        v = self.sample_ctas
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v < 2**31:
            raise UserError(f"--sample-ctas {v!r}: must be a whole number of 1 or more "
                            "(1 = every CTA; N = every Nth)")
        if self.loops is not None and self.loops not in LOOP_MODES:
            raise UserError(f"--loops {self.loops!r}: expected one of {', '.join(LOOP_MODES)}")
        if self.loop_depth is not None and self.loop_depth < 1:
            raise UserError(f"--loop-depth {self.loop_depth}: must be 1 or more "
                            "(1 = outermost loops only)")
        if self.kernel is not None:
            try:
                re.compile(self.kernel)
            except re.error as e:
                raise UserError(
                    f"--kernel {self.kernel!r}: not a valid regular expression: {e}") from None

    def is_empty(self) -> bool:
        return not (self.kernel_scope or self.loops or self.ranges or self.ops)

    def with_defaults(self) -> Rules:
        """The default when no rule is given: the kernel body and each loop as a whole."""
        if not self.is_empty():
            return self
        return Rules(kernel_scope=True, loops="outer", loop_depth=self.loop_depth,
                     kernel=self.kernel, marks=self.marks, source_root=self.source_root,
                     sample_ctas=self.sample_ctas)

    def wants_kernel(self, name: str) -> bool:
        return self.kernel is None or re.search(self.kernel, name) is not None


def rules_from_table(table: dict, where: str) -> Rules:
    """Rules from a `[tool.proton-inject]` table or a rules TOML file (checked by validate)."""
    from proton_inject.formats.rules_file import rules_table

    return Rules(**rules_table(table, where))


def rules_from_manifest(d: Any, where: str) -> Rules:
    """The rules a tree was instrumented with, from its manifest's ``rules`` (as ``insert``
    and ``profile`` write them: the rules after their defaults)."""
    if not isinstance(d, dict):
        raise UserError(f"{where}: no rules recorded; write the tree again with `proton-inject insert`")
    keys = {"kernel_scope": "kernel-scope", "loops": "loops", "loop_depth": "loop-depth",
            "ranges": "region", "ops": "op", "kernel": "kernel", "marks": "marks",
            "sample_ctas": "sample-ctas"}
    table = {keys[k]: v for k, v in d.items() if k in keys and v is not None}
    return rules_from_table(table, f"{where}: rules")


def _toml(path: Path, what: str) -> dict:
    from proton_inject.formats.schema import read_toml

    return read_toml(path, what)


def load_rules_file(path: str | Path) -> Rules:
    """Read rules from a TOML file: a `[tool.proton-inject]` table or top-level keys."""
    p = Path(path)
    data = _toml(p, "rules")
    tool = data.get("tool")
    if isinstance(tool, dict) and "proton-inject" in tool:
        return rules_from_table(tool["proton-inject"], f"{p} [tool.proton-inject]")
    return rules_from_table(data, str(p))


def rules_from_pyproject(directory: str | Path = ".") -> Rules | None:
    """The `[tool.proton-inject]` table of ./pyproject.toml, if there is one."""
    p = Path(directory) / "pyproject.toml"
    if not p.is_file():
        return None
    tool = _toml(p, "pyproject.toml").get("tool", {})
    table = tool.get("proton-inject") if isinstance(tool, dict) else None
    return rules_from_table(table, f"{p} [tool.proton-inject]") if table is not None else None


# ---- regions -------------------------------------------------------------------


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


class _Kernel:
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


def _end_index(block: Block) -> int:
    """Index of the last op a region may end on: the one before the terminator."""
    return len(block.ops) - 2 if block.terminator is not None else len(block.ops) - 1


def _short(file: str) -> str:
    return Path(file).name


def _var_name(op: Op) -> str | None:
    """A readable variable for a name: the source variable, else a non-numeric SSA name."""
    for cand in (op.location.name, op.result_name, (induction_var(op) or "").lstrip("%")):
        if cand and not cand.isdigit():
            return cand
    return None


def _source_of(op: Op) -> str | None:
    p = op.location.primary
    return f"{_short(p.file)}:{p.line}" if p else None


def _label(kind: str, op: Op) -> str:
    parts = [kind]
    var = _var_name(op)
    if var:
        parts.append(var)
    src = _source_of(op)
    if src:
        parts.append(f"@{src}")
    part = partition_of(op)
    if part:
        parts.append(f"[{part}]")
    return " ".join(parts)


def select(module: Module, rules: Rules,
           notes: list[str] | None = None) -> dict[str, list[Region]]:
    """Regions per kernel name, in the kernels the rules ask for.

    Raises UserError naming kernel, rule and source line for any region that
    cannot be placed correctly.
    """
    rules = rules.with_defaults()
    marks = _read_marks(module, rules, notes) if rules.marks else []
    out: dict[str, list[Region]] = {}
    for fn in module.functions:
        if fn.visibility != "public" or not rules.wants_kernel(fn.name):
            continue
        k = _Kernel(module, fn, rules)
        body = fn.op.regions[0].blocks[0] if fn.op.regions and fn.op.regions[0].blocks else None
        if body is None or not body.ops:
            raise UserError(f"{module.path}:{fn.op.line}: kernel {fn.name} has an empty body")
        if rules.kernel_scope:
            _kernel_scope(k)
        if rules.loops:
            _loops(k)
        for rng in list(rules.ranges) + _marks_for_kernel(k, marks):
            _line_range(k, rng)
        for pattern in rules.ops:
            _op_pattern(k, pattern)
        _check_nesting(k)
        _unique_names(k.regions)
        if notes is not None:
            notes.extend(k.notes)
        out[fn.name] = k.regions
    return out


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


def _kernel_scope(k: _Kernel) -> None:
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
            k.add("kernel", entry, 0, max(0, _end_index(entry)), "kernel-scope", None, rank=0,
                  to_exit=True)
            return
    for block in blocks:
        end = _end_index(block)
        if end < 0:
            continue  # only a terminator (or nothing): nothing to measure
        name = "kernel" if block is blocks[0] else f"kernel {module.block_name(block)}"
        k.add(name, block, 0, end, "kernel-scope", None, rank=0)


def _loops(k: _Kernel) -> None:
    mode, max_depth = k.rules.loops, k.rules.loop_depth
    for op in k.fn.op.walk():
        if op.name not in LOOP_OPS:
            continue
        block = op.parent
        if not straight_line(block):
            continue
        if max_depth is not None and loop_depth(op) + 1 > max_depth:
            continue
        src = _source_of(op)
        if mode in ("outer", "both"):
            i = block.ops.index(op)
            k.add(_label("loop", op), block, i, i, "loops", src, rank=1)
        if mode in ("iteration", "both"):
            if not op.regions:
                raise UserError(f"{k.where(op)}: {op.name} has no body region, which MLIR would "
                                "refuse; is the file damaged? Re-dump it, or use --loops outer")
            body_region = op.regions[-1]  # scf.for: its body; scf.while: the `do` region
            for body in body_region.blocks:
                end = _end_index(body)
                if end < 0:
                    k.notes.append(f"{k.where(op)}: {op.name} has an empty body; "
                                   "no iteration region")
                    continue
                k.add(_label("iter", op), body, 0, end, "loops", src, rank=2)


def _op_pattern(k: _Kernel, pattern: str) -> None:
    matched = skipped = 0
    for op in k.fn.op.walk():
        if op is k.fn.op or not fnmatch.fnmatchcase(op.name, pattern):
            continue
        block = op.parent
        if op.is_terminator or not straight_line(block):
            skipped += 1
            continue
        i = block.ops.index(op)
        k.add(_label(op.name, op), block, i, i, f"op {pattern}", _source_of(op), rank=3)
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


# ---- line ranges and marks -------------------------------------------------------


def _frame_lines(op: Op, file: str) -> list[int]:
    return [f.line for f in op.location.frames if _same_file(f.file, file)]


def _same_file(ir_file: str, wanted: str) -> bool:
    """`wanted` names the IR's file exactly or as a path suffix (`matmul.py`)."""
    if ir_file == wanted:
        return True
    a, b = Path(ir_file).parts, Path(wanted).parts
    return len(b) <= len(a) and a[-len(b):] == b


def _line_range(k: _Kernel, rng: LineRange) -> None:
    fn_op = k.fn.op
    rule = f"{rng.origin} {rng.name!r} ({rng.where or f'{rng.file}:{rng.start}-{rng.end}'})"

    def in_range(op: Op) -> bool:
        return any(rng.start <= ln <= rng.end for ln in _frame_lines(op, rng.file))

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
        src = _source_of(op)
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


def _body_blocks_of(k: _Kernel, ops: list[Op]) -> list[Block]:
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
            lines = _frame_lines(anc, rng.file)
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


def _suggest(k: _Kernel, ops: list[Op], rng: LineRange) -> str:
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
    lines = sorted({ln for op in span for o in op.walk() for ln in _frame_lines(o, rng.file)})
    if not lines:
        return ""
    return (f"Nearest valid placement: IR lines {span[0].line}-{span[-1].line}, i.e. "
            f"--region '{rng.name}={rng.file}:{lines[0]}-{lines[-1]}' (if no other op "
            "interleaves there), or mark a single line.")


_MARK = re.compile(r"#\s*proton:\s*(?:(begin|end)\s+)?(.+?)\s*$")


def _read_marks(module: Module, rules: Rules, notes: list[str] | None = None) -> list[LineRange]:
    """`# proton:` marks in every source file the IR's locations name that can be read."""
    files = {f.file for op in module.walk() for f in op.location.frames}
    marks: list[LineRange] = []
    for file in sorted(files):
        path = _find_source(file, rules.source_root, module.path)
        if path is None:
            if notes is not None and file.endswith(".py") and not Path(file).is_absolute():
                # Relative paths are relative to where the kernel was compiled.
                notes.append(f"{module.path}: source {file} not found under "
                             f"{rules.source_root or 'the current directory'}, so its "
                             "'# proton:' marks are not read; pass --source-root DIR")
            continue
        marks.extend(_marks_in(path, file, module.path))
    return marks


def _find_source(file: str, root: str | None, ir_path: str) -> Path | None:
    p = Path(file)
    candidates = [p] if p.is_absolute() else [Path(root or ".") / p]
    for c in candidates:
        if c.is_file():
            return c
    return None


def _comments(text: str, path: Path) -> list[tuple[int, str, bool]]:
    """(line, comment text, whether code precedes it) for every real comment: marks
    quoted in strings or docstrings do not count."""
    out = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                out.append((tok.start[0], tok.string, bool(tok.line[: tok.start[1]].strip())))
    except (tokenize.TokenError, SyntaxError) as e:
        raise UserError(f"{path}: cannot read its '# proton:' marks, the file does not "
                        f"tokenize as Python ({e})") from None
    return out


def _marks_in(path: Path, ir_file: str, ir_path: str = "the IR") -> list[LineRange]:
    from proton_inject.formats.schema import MAX_SOURCE_BYTES, FileError, read_bytes

    fix = f"{ir_path} names it as its kernel's source: pass --no-marks or --source-root DIR"
    try:
        text = read_bytes(path, "kernel source", MAX_SOURCE_BYTES, fix,
                          huge_fix=fix).decode("utf-8", errors="replace")
    except FileError as e:
        if e.reason in ("missing", "unreadable"):
            return []  # as for a source not found: its marks are not read
        raise
    if "proton:" not in text:
        return []
    out: list[LineRange] = []
    open_marks: dict[str, int] = {}
    for lineno, comment, has_code in _comments(text, path):
        m = _MARK.match(comment)
        if not m:
            continue
        kind, name = m.group(1), m.group(2)
        where = f"{path}:{lineno}"
        if kind and has_code:
            raise UserError(f"{where}: '# proton: {kind} {name}' shares its line with code; put "
                            f"'# proton: {kind} {name}' on a line of its own (it measures the "
                            "lines between begin and end), or use '# proton: NAME' after the "
                            "code of a single line")
        if kind == "begin":
            if name in open_marks:
                raise UserError(f"{where}: '# proton: begin {name}' while the one at line "
                                f"{open_marks[name]} is still open; add '# proton: end {name}'")
            open_marks[name] = lineno
        elif kind == "end":
            if name not in open_marks:
                raise UserError(f"{where}: '# proton: end {name}' has no matching "
                                f"'# proton: begin {name}' above it")
            start = open_marks.pop(name)
            out.append(LineRange(name, ir_file, start + 1, lineno - 1, "mark",
                                 f"{path}:{start}-{lineno}"))
        else:
            if not has_code:
                raise UserError(f"{where}: '# proton: {name}' marks the code on its own line, "
                                f"but this line has none; use '# proton: begin {name}' ... "
                                f"'# proton: end {name}' for a range")
            out.append(LineRange(name, ir_file, lineno, lineno, "mark", where))
    if open_marks:
        name, lineno = next(iter(open_marks.items()))
        raise UserError(f"{path}:{lineno}: '# proton: begin {name}' is never closed; "
                        f"add '# proton: end {name}' after the code to measure")
    return out


def _marks_for_kernel(k: _Kernel, marks: list[LineRange]) -> list[LineRange]:
    """The marks inside the source span of this kernel's ops."""
    out = []
    for mark in marks:
        lines = [ln for op in k.fn.op.walk() for ln in _frame_lines(op, mark.file)]
        if lines and min(lines) <= mark.start and mark.end <= max(lines):
            out.append(mark)
    return out


# ---- nesting and names ---------------------------------------------------------


def _check_nesting(k: _Kernel) -> None:
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
