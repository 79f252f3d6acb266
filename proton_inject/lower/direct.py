"""Our own lowering of records at the top level of a kernel or of its top-level loops: clock
reads, stored by thread 0.

Proton's lowering costs every CTA a set-up and a finalize whatever it records (header stores,
per-warp index upkeep, three globaltimer reads, a barrier), and writes a 40-byte header plus a
word per warp per CTA: the floor of every short-CTA kernel (docs/overhead.md). When each record
runs exactly once per CTA and only warp 0 records, none of that is needed: each record has
a fixed slot. ``lower`` rewrites such a
TTGIR so that each ``proton.record`` becomes one clock read and, just before ``tt.return``,
thread 0 reads the globaltimer and its SM id and stores the CTA's block (``block_bytes``:
two header words, then the clocks) in a few vector stores into
``proton_gpu.global_scratch_alloc`` memory, the launcher's profile scratch as before. What
the tags would say (scope id, start/end) is known from the IR: ``record_table`` goes into the
launch metadata and ``decode`` rebuilds Proton's layout.

Measured on an H100 (Inductor gelu 2^26, 65,536 CTAs, kernel scope; plain = 1): Proton's
global buffer 1.038; Proton's layout written by us with each store where its value is read
1.034, with every store at the end 1.023-1.027 (header register reads, globaltimer reads and
scalar vs vector stores made no difference); a 32-byte block (start and end globaltimer,
SM id, clocks) 1.015; this 16-byte block 1.008 (the same without its globaltimer read 1.008,
two clocks alone in 8 bytes 1.007, the clock reads without any store 1.000, 25 interleaved
rounds): what is left is the bytes each CTA writes, DRAM traffic of a bandwidth-bound kernel.
A record reads ``%clock64`` and keeps its low word: ``%clock`` compiles to a slower read that
slowed a 100-iteration loop region by 60 cycles; with ``%clock64`` a region reads what the
uninstrumented code takes to within 3 cycles (``benchmarks/accuracy.py``). ``eligible`` says
when this applies: an NVIDIA kernel, not warp-specialized, every record at the top level of
a function whose body is one block (so each runs once, in text order, before its one
``tt.return``; or alone inside ``--sample-ctas``' ``scf.if`` there: every CTA then reads the
clocks, and only the sampled ones store them, the same block) or at the top level of the
body of an ``scf.for`` at that level (so each runs once per iteration, in text order) whose
body holds no dot or async copy (``_PIPELINED``).
A loop keeps its first ``cap`` iterations (or iterations 0, N, 2N, ... with
``--sample-iterations N``), each stored as it ends, and its trip count goes with the header:
layer norm 8192^2, every iteration, 1.12 against 1.17 in Proton's shared buffer, of which
the clock reads alone are 1.03 and the stores the rest.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any

from proton_inject.formats.direct_layout import DIRECT_HEADER_WORDS, SM_ID_BITS, block_bytes, layout
from proton_inject.lower.probes import num_warps_of

# Bytes per CTA that records inside loops may take unless --buffer-size says otherwise,
# shared evenly by the recording loops (a loop keeps the first iterations that fit). Each
# kept iteration is stored as it ends. Keeping the clocks in registers instead (iteration
# arguments set by selects, stored after the loop) cost more: 16 more registers per thread
# took the layer norm's occupancy from 8 CTAs per SM to 5 (H100, 8192^2, every iteration:
# 1.51 against 1.13).
LOOP_BYTES = 2048
# One record: the clock's low word (inline asm, so the read stays where the record was).
CLOCK_READ = "{ .reg .b64 %pi_clk; mov.u64 %pi_clk, %clock64; cvt.u32.u64 $0, %pi_clk; }"
_RECORD = re.compile(r'\s*(start|end)\s+"((?:[^"\\]++|\\.)*+)"')
_FOR_HEAD = re.compile(r"\s*(%[\w$.-]+)\s*=\s*(%[\w$.-]+)\s+to\s+(%[\w$.-]+)\s+step\s+(%[\w$.-]+)"
                       r"(?:.*\S)?\s*:\s*(i32|i64)\s*\{?\s*$")
_MAX_SCOPES = 256  # the tag keeps 8 bits of scope id
_GUARD_HEAD = re.compile(r"\s*(%[\w$.-]+)\s*\{?\s*$")  # ``scf.if %p {``
# A store in each iteration keeps the compiler from moving the next iteration's loads above
# it. Loops of dots and async copies keep their records in Proton's shared buffer, which
# cost less there (H100, every iteration: attention 1.001 shared vs 1.032 direct, matmul
# 0.986 vs 1.019), while plain load/store loops gain (layer norm 1.163 vs 1.112).
_PIPELINED = re.compile(r"dot|async")


@dataclass
class _Loop:
    """A top-level ``scf.for`` with records at the top of its body."""

    op: Any
    iv: str
    lb: str
    ub: str
    step: str
    ty: str  # i32 | i64
    trips: int | None  # when its bounds are constants
    step_value: int | None  # when the step is a constant
    records: list = field(default_factory=list)  # indices into the record list
    cap: int = 0  # iterations kept
    stride: int = 0  # words per iteration
    every: int = 1  # keeps iterations 0, every, 2 * every, ...

    @property
    def slots_needed(self) -> int | None:
        """The slots that would keep every sampled iteration, when the trip count is known."""
        return None if self.trips is None else -(-self.trips // self.every)


@dataclass
class LoweringPlan:
    """Where a module's records are and what the direct lowering keeps of them."""

    module: Any
    records: list
    loops: list[_Loop]
    loop_of: list[int]  # per record: its loop's index, -1 at the top level
    func: Any = None  # the function op that holds them
    why: str | None = None  # not eligible: why
    # --sample-ctas: the ``scf.if %pi_ctaN`` around top-level records (each replaced by its
    # records' clock reads) and that predicate, which then guards the block's stores instead
    guards: list = field(default_factory=list)
    sampled: str | None = None


def _stride(k: int) -> int:
    """Words per iteration for ``k`` records: 1, 2 or a multiple of 4 (aligned vector stores)."""
    return k if k <= 2 else -(-k // 4) * 4


def _constant(text: str, name: str) -> int | None:
    m = re.search(re.escape(name) + r"\s*=\s*arith\.constant\s+(-?\d+)\s*:\s*i(?:32|64)\b", text)
    return int(m.group(1)) if m else None


@functools.lru_cache(maxsize=8)  # eligible, data_bytes, record_table and lower ask in turn
def plan_lowering(text: str, budget: int, every: int = 1) -> LoweringPlan:
    """Which records sit where, and which iterations each recording loop keeps: every
    ``every``-th, as many as ``budget`` bytes hold (0: ``LOOP_BYTES``)."""
    from proton_inject.ttgir import parse

    module = parse(text)
    records = [op for op in module.walk() if op.name == "proton.record"]
    plan = LoweringPlan(module, records, [], [])
    funcs = {id(f.op) for f in module.functions}
    if not records:
        plan.why = "no records"
        return plan
    func = None
    loops: dict[int, _Loop] = {}
    for i, rec in enumerate(records):
        owner = rec.parent_op()
        pred = plan.sampled if plan.guards and owner is plan.guards[-1] else _cta_guard(owner, funcs, text)
        if pred is not None:  # (a sampled CTA's record at the top level)
            if plan.sampled not in (None, pred):
                plan.why = "records under several CTA predicates"
                return plan
            plan.sampled = pred
            if not plan.guards or plan.guards[-1] is not owner:
                plan.guards.append(owner)
            owner = owner.parent_op()
        if id(owner) in funcs:
            top, where = owner, -1
        elif owner is not None and owner.name == "scf.for" and id(owner.parent_op()) in funcs:
            top = owner.parent_op()
            if id(owner) not in loops:
                m = _FOR_HEAD.match(owner.head)
                if not m or len(owner.regions) != 1 or len(owner.regions[0].blocks) != 1:
                    plan.why = "records in a loop whose bounds cannot be read"
                    return plan
                iv, lb, ub, step, ty = m.groups()
                bounds = [_constant(text, v) for v in (lb, ub, step)]
                trips = (max(0, -(-(bounds[1] - bounds[0]) // bounds[2]))
                         if None not in bounds and bounds[2] > 0 else None)
                loops[id(owner)] = _Loop(owner, iv, lb, ub, step, ty, trips, bounds[2])
            where = list(loops).index(id(owner))
            loops[id(owner)].records.append(i)
        else:
            plan.why = "records inside branches or nested loops"
            return plan
        if func is None:
            func = top
        if top is not func:
            plan.why = "records in several functions"
            return plan
        if len(top.regions[0].blocks) != 1:  # each record would not run once, in text order
            plan.why = ("a kernel body of several blocks (an early return): not every record "
                        "runs in every CTA")
            return plan
        plan.loop_of.append(where)
    plan.loops, plan.func = list(loops.values()), func
    if plan.sampled and plan.loops:  # (the sampler runs such loops in two copies instead)
        plan.why = "records in a loop of a CTA-sampled kernel"
        return plan
    for loop in plan.loops:
        if any(_PIPELINED.search(op.name) for op in loop.op.walk()):
            plan.why = "records inside a loop with tensor-core or async-copy work"
            return plan
    for loop in plan.loops:
        try:  # each iteration must open and close its own regions
            ids = scope_ids([records[i] for i in loop.records])
        except ValueError:
            ids = None
        if ids is None or len(ids) != 2 * len(set(ids)):
            plan.why = "a region that crosses a loop's boundary"
            return plan
    if len(records) // 2 > _MAX_SCOPES:
        plan.why = f"more than {_MAX_SCOPES} regions"
        return plan
    share = (budget or LOOP_BYTES) // max(1, len(plan.loops))
    for loop in plan.loops:
        loop.stride, loop.every = _stride(len(loop.records)), every
        loop.cap = max(1, share // (4 * loop.stride))
        if loop.trips is not None:
            loop.cap = max(1, min(loop.cap, loop.slots_needed))
    return plan


def _cta_guard(op: Any, funcs: set[int], text: str) -> str | None:
    """The predicate of ``op`` when it is a CTA sampler's ``scf.if`` (no else, records only, at
    the top level of a function, on ``id % N == 0``: instrument/sampling.py), else None. The
    compiler prints the sampler's ``%pi_cta0`` under a number, so its definition tells."""
    if op is None or op.name != "scf.if" or op.parent_op() is None or id(op.parent_op()) not in funcs:
        return None
    m = _GUARD_HEAD.match(op.head)
    if not m or len(op.regions) != 1 or len(op.regions[0].blocks) != 1:
        return None
    if not all(o.name in ("proton.record", "scf.yield") for o in op.regions[0].blocks[0].ops):
        return None
    cmp = re.search(rf"^\s*{re.escape(m.group(1))}\s*=\s*arith\.cmpi\s+eq,\s*(%[\w$.-]+),", text, re.M)
    rem = cmp and re.search(rf"^\s*{re.escape(cmp.group(1))}\s*=\s*arith\.rem[su]i\b", text, re.M)
    return m.group(1) if rem else None


def eligible(text: str, budget: int = 0, every: int = 1) -> str | None:
    """None if ``lower`` can lower this TTGIR's records; else why not, in a few words."""
    if not re.search(r'"?ttg\.target"?\s*=\s*"cuda:', text):
        return "not an NVIDIA kernel"
    if "ttg.warp_specialize" in text:
        return "warp-specialized"
    if num_warps_of(text) is None:
        return "no ttg.num-warps"
    if "proton.record" not in text:  # e.g. a module this lowering already rewrote
        return "no records"
    return plan_lowering(text, budget, every).why


def record_kind_and_name(op) -> tuple[str, str]:
    """A ``proton.record`` op's kind ("start" or "end") and its region's name, as written."""
    m = _RECORD.match(op.head)
    return m.group(1), m.group(2)


def scope_ids(records) -> list[int]:
    """Each record's scope id as Proton's scope analysis numbers them: a new id per start, in
    text order; an end takes the latest open start of its name."""
    ids, open_, nxt = [], {}, 0
    for op in records:
        kind, name = record_kind_and_name(op)
        if kind == "start":
            open_.setdefault(name, []).append(nxt)
            ids.append(nxt)
            nxt += 1
        else:
            stack = open_.get(name)
            if not stack:
                raise ValueError(f"record end {name!r} has no open start")
            ids.append(stack.pop())
    return ids


def record_table(text: str, budget: int = 0, every: int = 1) -> list[list[int]]:
    """``[scope id, 1 if end else 0]`` of each record op in text order, with a third entry,
    its loop's index in ``loop_table``, for a record inside a loop: what ``decode`` needs
    besides the buffer (the slots hold clocks only)."""
    plan = plan_lowering(text, budget, every)
    out = []
    for i, op, loop in zip(scope_ids(plan.records), plan.records, plan.loop_of, strict=True):
        row = [i, int(record_kind_and_name(op)[0] == "end")]
        out.append(row if loop < 0 else [*row, loop])
    return out


def loop_table(text: str, budget: int = 0, every: int = 1) -> list[list[int]]:
    """``[cap, stride]`` of each recording loop, ``[cap, stride, every]`` when it samples: the
    iterations its section keeps (its first ones, or iterations 0, every, 2 every, ...) and
    the words each takes."""
    return [[lp.cap, lp.stride] + ([lp.every] if lp.every > 1 else [])
            for lp in plan_lowering(text, budget, every).loops]


def data_bytes(text: str, budget: int = 0, every: int = 1) -> int:
    """Record bytes per CTA (the block less its two header words), the ``buffer_size``
    ``check`` shows."""
    return (block_bytes(record_table(text, budget, every), loop_table(text, budget, every))
            - 4 * DIRECT_HEADER_WORDS)


def lower(text: str, budget: int = 0, every: int = 1) -> str:
    """``text`` with its records lowered as described above (``eligible`` must be None).

    Record sites keep only their clock read. Records inside a loop are stored at the end of
    each iteration, before ``scf.yield``, by thread 0 for the first ``cap`` iterations; the
    timer and SM id reads and every other store wait until just before ``tt.return`` (H100,
    65,536-CTA gelu: 1.034 with each store where its value is read, 1.023 at the end), in
    one inline-asm block of aligned vector stores by thread 0."""
    why = eligible(text, budget, every)
    if why:
        raise ValueError(f"records cannot be lowered directly: {why}")
    plan = plan_lowering(text, budget, every)
    module, records = plan.module, plan.records
    table, loops = record_table(text, budget, every), loop_table(text, budget, every)
    word_of, sections, _ = layout(table, loops)
    func = plan.func
    nbytes = block_bytes(table, loops)
    body = func.regions[0].blocks[0]
    indent = " " * (body.ops[0].column - 1)
    names = _Names(text)
    base, ptr, addr = names.new("base"), names.new("a"), names.new("a")
    # ``addr``: the block's address in thread 0, 0 in the other threads; the stores test it
    # instead of reading %tid.x each time (H100, a loop of 4 spins with a region around each:
    # the region around the loop read 35 cycles more per iteration with a special-register
    # read in each iteration's store)
    alloc = [f"{base} = proton_gpu.global_scratch_alloc {{alignment = 128 : i32, "
             f"nbytes = {nbytes} : i32, offset = 0 : i32}} : !tt.ptr<i32>",
             f"{ptr} = tt.ptr_to_int {base} : !tt.ptr<i32> -> i64",
             f'{addr} = tt.elementwise_inline_asm "{{ .reg .pred %p; .reg .b32 %t; mov.u32 %t, '
             f'%tid.x; setp.eq.u32 %p, %t, 0; selp.b64 $0, $1, 0, %p; }}" {{constraints = '
             f'"=l,l", packed_element = 1 : i32, pure = false}} {ptr} : i64 -> i64']

    def read(reg: str | None, ty: str) -> tuple[str, str]:
        """A special register read (``reg`` None: a record's clock) as a fresh value."""
        v = names.new("r")
        c = "l" if ty == "i64" else "r"
        asm = CLOCK_READ if reg is None else f'mov.{"u64" if ty == "i64" else "u32"} $0, %{reg};'
        return v, (f'{v} = tt.elementwise_inline_asm "{asm}" {{constraints = "={c}", '
                   f"packed_element = 1 : i32, pure = false}} -> {ty}")

    def const(value: int, ty: str) -> tuple[str, str]:
        v = names.new("c")
        return v, f"{v} = arith.constant {value} : {ty}"

    sites = [read(None, "i32") for _ in records]
    edits = _site_edits(plan, [line for _, line in sites])
    late, words = _header_words(read, const, names)
    for k, loop in enumerate(plan.loops):
        count, lines = _trip_count(loop, const, names)
        late += lines
        words[DIRECT_HEADER_WORDS + k] = count
        mine = {word_of[i] - sections[k]: sites[i][0] for i in loop.records}
        edits.append(_iteration_stores(loop, mine, 4 * sections[k], addr, names, const))
    for i, loop in enumerate(plan.loop_of):
        if loop < 0:
            words[word_of[i]] = sites[i][0]
    ret = body.ops[-1]
    if ret.name != "tt.return":
        raise ValueError("the kernel's function does not end with tt.return")
    pad = "\n" + indent
    if plan.sampled:  # 0 outside the sampled CTAs too: they store nothing
        (zero, lzero), kept = const(0, "i64"), names.new("a")
        alloc += [lzero, f"{kept} = arith.select {plan.sampled}, {addr}, {zero} : i64"]
        addr = kept
    if plan.loops:  # the address must be known inside the first recording loop
        first = min(lp.op.start for lp in plan.loops)
        edits.append((first, first, pad.join(alloc) + pad))
    else:
        late += alloc
    late += _packed_stores(addr, words, names, 4 if nbytes % 16 == 0 else 2)
    edits.append((ret.start, ret.start, pad.join(late) + pad))
    out, pos = [], 0
    for start, end, new in sorted(edits, key=lambda e: (e[0], e[1])):
        out.append(module.text[pos:start])
        out.append(new)
        pos = end
    out.append(module.text[pos:])
    return "".join(out)


def _site_edits(plan: LoweringPlan, lines: list[str]) -> list[tuple[int, int, str]]:
    """Each record op replaced by its clock read (``lines``, one per record); a CTA sampler's
    ``scf.if`` around records by their reads, unguarded: every CTA reads its clocks (cheap),
    the block's stores alone test the predicate."""
    line_of = {id(op): line for op, line in zip(plan.records, lines, strict=True)}
    guarded = {id(o) for g in plan.guards for o in g.regions[0].blocks[0].ops}
    edits = [(op.start, op.end, line_of[id(op)]) for op in plan.records if id(op) not in guarded]
    for g in plan.guards:
        inner = [line_of[id(o)] for o in g.regions[0].blocks[0].ops if o.name == "proton.record"]
        edits.append((g.start, g.end, ("\n" + " " * (g.column - 1)).join(inner)))
    return edits


def _header_words(read, const, names: _Names) -> tuple[list[str], dict[int, str]]:
    """The lines that read the globaltimer and the SM id at the end, and the block's two header
    words they make (0: SM id, high timer bits; 1: low timer bits)."""
    gt, gt_line = read("globaltimer", "i64")
    sm, sm_line = read("smid", "i32")
    (c32, l32), (c8, l8), (mask, lmask) = (const(32, "i64"), const(SM_ID_BITS, "i32"),
                                           const((1 << SM_ID_BITS) - 1, "i32"))
    lo, sh, hi, hs, sm8, w0 = (names.new("w") for _ in range(6))
    late = [gt_line, sm_line, l32, l8, lmask,
            f"{lo} = arith.trunci {gt} : i64 to i32", f"{sh} = arith.shrui {gt}, {c32} : i64",
            f"{hi} = arith.trunci {sh} : i64 to i32", f"{hs} = arith.shli {hi}, {c8} : i32",
            f"{sm8} = arith.andi {sm}, {mask} : i32", f"{w0} = arith.ori {sm8}, {hs} : i32"]
    return late, {0: w0, 1: lo}


def _iteration_stores(loop, words: dict[int, str], offset: int, addr: str, names: _Names,
                      const) -> tuple[int, int, str]:
    """The edit that stores each kept iteration's records (``words``: word in the loop's
    section -> clock value) at the end of its body, by thread 0, at ``offset`` bytes into the
    block plus the iteration's slot."""
    iteration, lines = _iteration(loop, names)
    slot, guards = iteration, []
    if loop.every > 1:
        slot, rest = names.new("i"), names.new("i")
        (ce, le) = const(loop.every, "i32")
        lines += [le, f"{slot} = arith.divui {iteration}, {ce} : i32",
                  f"{rest} = arith.remui {iteration}, {ce} : i32"]
        guards.append((rest, 1))
    if loop.trips is None or loop.slots_needed > loop.cap:
        guards.append((slot, loop.cap))
    stride_bytes, off = names.new("a"), names.new("a")
    lines += [f"{stride_bytes} = arith.constant {4 * loop.stride} : i32",
              f"{off} = arith.muli {slot}, {stride_bytes} : i32"]
    lines += _packed_stores(addr, words, names, {1: 1, 2: 2}.get(loop.stride, 4),
                            offset=offset, guards=guards, index=off)
    return _before_yield(loop.op.regions[0].blocks[0], lines)


def _before_yield(blk, lines: list[str]) -> tuple[int, int, str]:
    """An edit that puts ``lines`` at the end of the loop body ``blk``: before its
    ``scf.yield``, or after its last op when the loop yields nothing (no yield printed)."""
    last = blk.ops[-1]
    pad = "\n" + " " * (last.column - 1)
    if last.name == "scf.yield":
        return (last.start, last.start, pad.join(lines) + pad)
    return (last.end, last.end, pad + pad.join(lines))


def _iteration(loop: _Loop, names: _Names) -> tuple[str, list[str]]:
    """The iteration number (i32, from 0) inside ``loop``'s body: (iv - lb) / step."""
    d = names.new("i")
    lines = [f"{d} = arith.subi {loop.iv}, {loop.lb} : {loop.ty}"]
    if loop.step_value != 1:
        q = names.new("i")
        lines.append(f"{q} = arith.divsi {d}, {loop.step} : {loop.ty}")
        d = q
    if loop.ty == "i64":
        t = names.new("i")
        lines.append(f"{t} = arith.trunci {d} : i64 to i32")
        d = t
    return d, lines


def _trip_count(loop: _Loop, const, names: _Names) -> tuple[str, list[str]]:
    """The iterations ``loop`` ran (i32), computed after it from its bounds:
    max(0, ceil((ub - lb) / step))."""
    (one, l1), (zero, l0) = const(1, loop.ty), const(0, loop.ty)
    d, s1, e, n, n0 = (names.new("n") for _ in range(5))
    lines = [l1, l0, f"{d} = arith.subi {loop.ub}, {loop.lb} : {loop.ty}",
             f"{s1} = arith.subi {loop.step}, {one} : {loop.ty}",
             f"{e} = arith.addi {d}, {s1} : {loop.ty}",
             f"{n} = arith.divsi {e}, {loop.step} : {loop.ty}",
             f"{n0} = arith.maxsi {n}, {zero} : {loop.ty}"]
    if loop.ty == "i64":
        t = names.new("n")
        lines.append(f"{t} = arith.trunci {n0} : i64 to i32")
        n0 = t
    return n0, lines


def _runs(words: dict[int, str], widest: int) -> list[tuple[int, list[str]]]:
    """The words as (first word, values) vector stores of at most ``widest`` words: 4 where
    16-byte aligned, else 2 where 8-byte aligned, else 1."""
    out, w, last = [], min(words), max(words)
    while w <= last:
        for width in (x for x in (4, 2, 1) if x <= widest):
            if w % width == 0 and all(w + i in words for i in range(width)):
                out.append((w, [words[w + i] for i in range(width)]))
                w += width
                break
        else:
            w += 1  # a hole: nothing to store there
    return out


def _packed_stores(addr: str, words: dict[int, str], names: _Names, widest: int,
                   offset: int = 0, guards: list[tuple[str, int]] = (),
                   index: str | None = None) -> list[str]:
    """One inline-asm block in which thread 0 of the CTA stores ``words`` (word k at byte
    ``offset + 4 k`` past the i64 address ``addr``, plus ``index`` bytes, an i32 value, if
    given) with vector stores; ``addr`` is 0 in the other threads, which store nothing. With
    ``guards`` (i32 values and bounds) only while each value is below its bound."""
    dummy = names.new("a")
    values = sorted(set(words.values()) | {v for v, _ in guards} | ({index} if index else set()))
    slot = {v: i + 2 for i, v in enumerate(values)}  # $0 dummy result, $1 address
    body = ["{ .reg .pred %p, %q; .reg .b64 %a; setp.ne.u64 %p, $1, 0;"]
    if index:
        body.append(f"cvt.u64.u32 %a, ${slot[index]}; add.u64 %a, %a, $1;")
    else:
        body.append("mov.b64 %a, $1;")
    for value, bound in guards:
        body.append(f"setp.lt.u32 %q, ${slot[value]}, {bound}; and.pred %p, %p, %q;")
    for w, vals in _runs(words, widest):
        regs = ", ".join(f"${slot[v]}" for v in vals)
        vec = {4: ".v4", 2: ".v2", 1: ""}[len(vals)]
        body.append(f"@%p st.global{vec}.b32 [%a+{offset + 4 * w}], "
                    + (f"{{{regs}}};" if vec else f"{regs};"))
    body.append("mov.u32 $0, 0; }")
    cons = ",".join(["=r", "l"] + ["r"] * len(values))
    args = ", ".join(values)
    types = ", ".join(["i64"] + ["i32"] * len(values))
    return [f'{dummy} = tt.elementwise_inline_asm "{" ".join(body)}" {{constraints = "{cons}", '
            f"packed_element = 1 : i32, pure = false}} {addr}, {args} : {types} -> i32"]


class _Names:
    """Fresh SSA names ``%pi_d<kind><n>`` that the TTGIR does not use yet."""

    def __init__(self, text: str) -> None:
        self.n = 0
        self.prefix = "%pi_d"
        while re.search(re.escape(self.prefix) + r"[a-z]", text):
            self.prefix += "d"

    def new(self, kind: str) -> str:
        self.n += 1
        return f"{self.prefix}{kind}{self.n}"
