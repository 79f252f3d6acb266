"""Our own lowering of loop-free records: clock reads, stored once per CTA by thread 0.

Proton's lowering costs every CTA a set-up and a finalize whatever it records (header stores,
per-warp index upkeep, three globaltimer reads, a barrier), and writes a 40-byte header plus a
word per warp per CTA: the floor of every short-CTA kernel (issue 9; H100, 65,536-CTA copy
kernel, one region: 1.120). When each record runs exactly once per CTA and only warp 0
records, none of that is needed: each record has a fixed slot. ``lower`` rewrites such a
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
``tt.return``).
"""

from __future__ import annotations

import functools
import re

from .lowering import num_warps_of

# Per-CTA block: word 0 the SM id (bits 0-7) and bits 32-55 of the %globaltimer read after
# the last record (bits 8-31; decode takes bits 56-63 from a full reading, the launch
# metadata's ``timer_ref_ns``), word 1 that read's low 32 bits, then one word per record op in
# text order: the low 32 bits of its %clock64.
DIRECT_HEADER_WORDS = 2
SM_ID_BITS = 8
# One record: the clock's low word (inline asm, so the read stays where the record was).
CLOCK_READ = "{ .reg .b64 %pi_clk; mov.u64 %pi_clk, %clock64; cvt.u32.u64 $0, %pi_clk; }"
_RECORD = re.compile(r'\s*(start|end)\s+"((?:[^"\\]|\\.)*)"')
_MAX_SCOPES = 256  # the tag keeps 8 bits of scope id


@functools.lru_cache(maxsize=8)  # eligible, data_bytes, record_table and lower ask in turn
def _records(text: str):
    """(module, function op, record ops) of an instrumented TTGIR, records in text order."""
    from .ttgir import parse

    module = parse(text)
    records = [op for op in module.walk() if op.name == "proton.record"]
    funcs = {id(f.op): f for f in module.functions}
    return module, funcs, records


def eligible(text: str) -> str | None:
    """None if ``lower`` can lower this TTGIR's records; else why not, in a few words."""
    if not re.search(r'"?ttg\.target"?\s*=\s*"cuda:', text):
        return "not an NVIDIA kernel"
    if "ttg.warp_specialize" in text:
        return "warp-specialized"
    if num_warps_of(text) is None:
        return "no ttg.num-warps"
    if "proton.record" not in text:  # e.g. a module this lowering already rewrote
        return "no records"
    _, funcs, records = _records(text)
    if not records:
        return "no records"
    owners = {id(r.parent) for r in records}  # their blocks
    func = records[0].parent_op()
    if len(owners) != 1 or id(func) not in funcs or len(func.regions[0].blocks) != 1:
        return "records inside loops, branches or several functions or blocks"
    if len(records) // 2 > _MAX_SCOPES:
        return f"more than {_MAX_SCOPES} regions"
    return None


def scope_ids(records) -> list[int]:
    """Each record's scope id as Proton's scope analysis numbers them for straight-line
    records: a new id per start, in order; an end takes the latest open start of its name."""
    ids, open_, nxt = [], {}, 0
    for op in records:
        m = _RECORD.match(op.head)
        kind, name = m.group(1), m.group(2)
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


def record_table(text: str) -> list[list[int]]:
    """``[scope id, 1 if end else 0]`` of each record slot, in slot order: what ``decode``
    needs besides the buffer (the slots hold clocks only)."""
    _, _, records = _records(text)
    return [[i, int(_RECORD.match(op.head).group(1) == "end")]
            for i, op in zip(scope_ids(records), records, strict=True)]


def block_bytes(records: int) -> int:
    """Bytes per CTA: the header words, a clock word per record, in 8-byte steps."""
    return -(-4 * (DIRECT_HEADER_WORDS + records) // 8) * 8


def data_bytes(text: str) -> int:
    """Record bytes per CTA (4 per record op), the ``buffer_size`` ``check`` shows."""
    return 4 * len(_records(text)[2])


def lower(text: str) -> str:
    """``text`` with its records lowered as described above (``eligible`` must be None).

    Record sites keep only their clock read; the timer and SM id reads and every store wait
    until just before ``tt.return`` (H100, 65,536-CTA gelu: 1.034 with each store where its
    value is read, 1.023 at the end), in one inline-asm block of aligned vector stores by
    thread 0."""
    why = eligible(text)
    if why:
        raise ValueError(f"records cannot be lowered directly: {why}")
    module, _, records = _records(text)
    func = records[0].parent_op()
    n = len(records)
    nbytes = block_bytes(n)
    body = func.regions[0].blocks[0]
    indent = " " * (body.ops[0].column - 1)
    names = _Names(text)
    base = names.new("base")

    def read(reg: str | None, ty: str) -> tuple[str, str]:
        """A special register read (``reg`` None: a record's clock) as a fresh value."""
        v = names.new("r")
        c = "l" if ty == "i64" else "r"
        asm = CLOCK_READ if reg is None else f'mov.{"u64" if ty == "i64" else "u32"} $0, %{reg};'
        return v, (f'{v} = tt.elementwise_inline_asm "{asm}" {{constraints = "={c}", '
                   f"packed_element = 1 : i32, pure = false}} -> {ty}")

    sites = [read(None, "i32") for _ in records]
    gt, gt_line = read("globaltimer", "i64")
    sm, sm_line = read("smid", "i32")
    c32, c8, mask = names.new("c"), names.new("c"), names.new("c")
    lo, sh, hi, hs, sm8, w0 = (names.new("w") for _ in range(6))
    late = [gt_line, sm_line,
            f"{c32} = arith.constant 32 : i64", f"{c8} = arith.constant {SM_ID_BITS} : i32",
            f"{mask} = arith.constant {(1 << SM_ID_BITS) - 1} : i32",
            f"{lo} = arith.trunci {gt} : i64 to i32", f"{sh} = arith.shrui {gt}, {c32} : i64",
            f"{hi} = arith.trunci {sh} : i64 to i32", f"{hs} = arith.shli {hi}, {c8} : i32",
            f"{sm8} = arith.andi {sm}, {mask} : i32", f"{w0} = arith.ori {sm8}, {hs} : i32"]
    words = {0: w0, 1: lo}
    for k, (clk, _) in enumerate(sites):
        words[DIRECT_HEADER_WORDS + k] = clk
    late += [f"{base} = proton_gpu.global_scratch_alloc {{alignment = 128 : i32, "
             f"nbytes = {nbytes} : i32, offset = 0 : i32}} : !tt.ptr<i32>"]
    late += _packed_stores(base, words, names, 4 if nbytes % 16 == 0 else 2)

    ret = body.ops[-1]
    if ret.name != "tt.return":
        raise ValueError("the kernel's function does not end with tt.return")
    edits = [(op.start, op.end, [line], False) for op, (_, line) in zip(records, sites, strict=True)]
    edits.append((ret.start, ret.start, late, True))
    out, pos = [], 0
    for start, end, lines, before in sorted(edits, key=lambda e: (e[0], not e[3])):
        out.append(module.text[pos:start])
        out.append(("\n" + indent).join(lines) + ("\n" + indent if before else ""))
        pos = end
    out.append(module.text[pos:])
    return "".join(out)


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


def _packed_stores(base: str, words: dict[int, str], names: _Names, widest: int) -> list[str]:
    """One inline-asm block in which thread 0 of the CTA stores ``words`` with vector stores."""
    addr, dummy = names.new("a"), names.new("a")
    values = sorted(set(words.values()))
    slot = {v: i + 2 for i, v in enumerate(values)}  # $0 dummy result, $1 address
    body = ["{ .reg .pred %p; .reg .b32 %t; mov.u32 %t, %tid.x; setp.eq.u32 %p, %t, 0;"]
    for w, vals in _runs(words, widest):
        regs = ", ".join(f"${slot[v]}" for v in vals)
        vec = {4: ".v4", 2: ".v2", 1: ""}[len(vals)]
        body.append(f"@%p st.global{vec}.b32 [$1+{4 * w}], " + (f"{{{regs}}};" if vec else f"{regs};"))
    body.append("mov.u32 $0, 0; }")
    cons = ",".join(["=r", "l"] + ["r"] * len(values))
    args = ", ".join(values)
    types = ", ".join(["i64"] + ["i32"] * len(values))
    return [f"{addr} = tt.ptr_to_int {base} : !tt.ptr<i32> -> i64",
            f'{dummy} = tt.elementwise_inline_asm "{" ".join(body)}" {{constraints = "{cons}", '
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
