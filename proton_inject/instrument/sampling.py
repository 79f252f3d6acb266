"""``--sample-ctas N``: records run in every Nth CTA only, under a predicate computed once per
function (or warp-specialize partition); a loop holding records runs in two copies."""

from __future__ import annotations

import re

from proton_inject.errors import UserError
from proton_inject.instrument.rules import Rules
from proton_inject.ttgir import Module
from proton_inject.ttgir.tree import LOOP_OPS, Block, Op, line_start

# Names of the values CTA sampling adds (`%pi_cta0`, `%pi_cta0_n`, ...): strip removes the ops
# that define them and the `scf.if` around each sampled record.
SAMPLE_PREFIX = re.compile(r"%pi_cta\d")
_SAMPLE_EVERY = re.compile(r"^\s*%pi_cta\d+_n = arith\.constant (\d+) : i32", re.M)


def sampled_ctas(text: str) -> int:
    """N when an instrumented TTGIR records in every Nth CTA only (``--sample-ctas``), else 1."""
    m = _SAMPLE_EVERY.search(text)
    return int(m.group(1)) if m else 1


class CtaSampler:
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
        at = line_start(text, loop.start)
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
        at = line_start(text, first.start)
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
