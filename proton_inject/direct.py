"""Our own lowering of loop-free records: clock reads stored by the CTA's first thread.

Proton's lowering costs every CTA a set-up and a finalize whatever it records (header stores,
per-warp index upkeep, three globaltimer reads, a barrier): about 18 SM-cycles per CTA on an
H100, 12% of a 65,536-CTA copy kernel and the floor of every short-CTA kernel (issue 9). When
each record runs exactly once per CTA and only warp 0 records, none of that machinery is
needed: every record has a fixed slot. ``lower`` rewrites such a TTGIR so that

- at entry the first thread stores the header Proton's finalize would have written (preamble,
  linear program id, SM id, data bytes, init globaltimer);
- each ``proton.record`` becomes a ``%clock64`` (or ``%clock``) read and one store of the
  record, tagged as Proton tags it, into warp 0's segment;
- before ``tt.return`` it stores warp 0's word count and one globaltimer read as both the
  pre-final and post-final times (nothing is copied, so they are the same moment).

The buffer is byte for byte what Proton's global-buffer lowering with ``--warps 0`` writes
(``decode`` reads it unchanged), in ``proton_gpu.global_scratch_alloc`` memory, so the
launcher's profile scratch and our allocator are used as before. Stores of a scalar in
TTGIR are made by thread 0 of the CTA only. ``eligible`` says when this applies: an NVIDIA
kernel, not warp-specialized, every record at the top level of a function whose body is one
block (so each runs once, in text order, before its one ``tt.return``).
"""

from __future__ import annotations

import re

from .lowering import BYTES_PER_RECORD, CIRCULAR_HEADER_BYTES, num_warps_of

PREAMBLE = 0xDEADBEEF
_RECORD = re.compile(r'\s*(start|end)\s+"((?:[^"\\]|\\.)*)"')
_MAX_SCOPES = 256  # the tag keeps 8 bits of scope id


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


def data_bytes(text: str) -> int:
    """Bytes of records per CTA that ``lower`` lays out (one slot per record op)."""
    return BYTES_PER_RECORD * sum(1 for _ in re.finditer(r"\bproton\.record\b", text))


def lower(text: str, clock_bits: int = 64, packed: bool = True) -> str:
    """``text`` with its records lowered as described above (``eligible`` must be None).

    Record sites keep only their clock read, and every store waits until just before
    ``tt.return``, so none of them comes between the kernel's entry and its first loads
    (H100, 65,536-CTA gelu: 1.034 with each store where its value is read, 1.023 at the
    end). ``packed``: the stores are one inline-asm block of the widest aligned vector stores
    (a CTA's header and records in a few requests) instead of one scalar store per word."""
    why = eligible(text)
    if why:
        raise ValueError(f"records cannot be lowered directly: {why}")
    module, _, records = _records(text)
    func = records[0].parent_op()
    warps = num_warps_of(text)
    ids = scope_ids(records)
    n = len(records)
    data_word = CIRCULAR_HEADER_BYTES // 4 + warps  # warp 0's segment starts here
    nbytes = -(-(4 * data_word + BYTES_PER_RECORD * n) // 16) * 16
    body = func.regions[0].blocks[0]
    indent = " " * (body.ops[0].column - 1)
    names = _Names(text)
    base = names.new("base")
    c32, l32 = names.new("c"), None

    def const(value: int, ty: str) -> tuple[str, str]:
        v = names.new("c")
        return v, f"{v} = arith.constant {value} : {ty}"

    def read(reg: str, ty: str) -> tuple[str, str]:
        v = names.new("r")
        c = "l" if ty == "i64" else "r"
        return v, (f'{v} = tt.elementwise_inline_asm "mov.{"u64" if ty == "i64" else "u32"} $0, '
                   f'%{reg};" {{constraints = "={c}", packed_element = 1 : i32, pure = false}} '
                   f"-> {ty}")

    def halves(v64: str) -> tuple[list[str], str, str]:
        """Lines splitting an i64 into its (low, high) i32 words."""
        lo, sh, hi = names.new("w"), names.new("w"), names.new("w")
        return ([f"{lo} = arith.trunci {v64} : i64 to i32", f"{sh} = arith.shrui {v64}, {c32} : i64",
                 f"{hi} = arith.trunci {sh} : i64 to i32"], lo, hi)

    t0, line = read("globaltimer", "i64")
    entry = [line]
    sites = [read("clock64" if clock_bits == 64 else "clock", "i64" if clock_bits == 64 else "i32")
             for _ in records]
    late = [f"{c32} = arith.constant 32 : i64"]
    words: dict[int, str] = {}  # word index in the CTA's block -> i32 value
    x, y, z, gx, gy = (names.new("pid") for _ in range(5))
    zy, zyy, prod, lin = (names.new("pid") for _ in range(4))  # (z * gy + y) * gx + x
    late += [f"{x} = tt.get_program_id x : i32", f"{y} = tt.get_program_id y : i32",
             f"{z} = tt.get_program_id z : i32", f"{gx} = tt.get_num_programs x : i32",
             f"{gy} = tt.get_num_programs y : i32",
             f"{zy} = arith.muli {z}, {gy} : i32", f"{zyy} = arith.addi {zy}, {y} : i32",
             f"{prod} = arith.muli {zyy}, {gx} : i32", f"{lin} = arith.addi {prod}, {x} : i32"]
    sm, line = read("smid", "i32")
    late.append(line)
    pre, line = const(PREAMBLE - (1 << 32), "i32")
    size, line2 = const(BYTES_PER_RECORD * n, "i32")
    count, line3 = const(2 * n, "i32")
    zero, line4 = const(0, "i32")
    late += [line, line2, line3, line4]
    t1, line = read("globaltimer", "i64")
    late.append(line)
    words.update({0: pre, 1: lin, 2: sm, 3: size})
    for w, v in ((4, t0), (6, t1), (8, t1)):
        lines, lo, hi = halves(v)
        late += lines
        words[w], words[w + 1] = lo, hi
    words.update({CIRCULAR_HEADER_BYTES // 4 + i: zero for i in range(warps)})
    words[CIRCULAR_HEADER_BYTES // 4] = count  # warp 0 wrote 2 words per record
    for k, (op, (clk, _)) in enumerate(zip(records, sites, strict=True)):
        is_end = _RECORD.match(op.head).group(1) == "end"
        tag = (int(is_end) << 31) | (ids[k] << 23)
        ctag, line = const(tag, "i32")
        late.append(line)
        if clock_bits == 64:  # the tag word carries clock bits 42-32
            lines, lo, hi = halves(clk)
            cmask, lmask = const(0x7FF, "i32")
            hib, tagw = names.new("w"), names.new("w")
            late += lines + [lmask, f"{hib} = arith.andi {hi}, {cmask} : i32",
                             f"{tagw} = arith.ori {hib}, {ctag} : i32"]
        else:
            lo, tagw = clk, ctag
        words[data_word + 2 * k], words[data_word + 2 * k + 1] = tagw, lo
    late += [f"{base} = proton_gpu.global_scratch_alloc {{alignment = 128 : i32, "
             f"nbytes = {nbytes} : i32, offset = 0 : i32}} : !tt.ptr<i32>"]
    late += _packed_stores(base, words, names) if packed else _scalar_stores(base, words, names)

    ret = body.ops[-1]
    if ret.name != "tt.return":
        raise ValueError("the kernel's function does not end with tt.return")
    edits = [(body.ops[0].start, body.ops[0].start, entry, True)]
    edits += [(op.start, op.end, [line], False) for op, (_, line) in zip(records, sites, strict=True)]
    edits.append((ret.start, ret.start, late, True))
    out, pos = [], 0
    for start, end, lines, before in sorted(edits, key=lambda e: (e[0], not e[3])):
        out.append(module.text[pos:start])
        out.append(("\n" + indent).join(lines) + ("\n" + indent if before else ""))
        pos = end
    out.append(module.text[pos:])
    return "".join(out)


def _runs(words: dict[int, str]) -> list[tuple[int, list[str]]]:
    """The words as (first word, values) vector stores: 4 words where 16-byte aligned, else 2
    where 8-byte aligned, else 1."""
    out, w, last = [], min(words), max(words)
    while w <= last:
        for width in (4, 2, 1):
            if w % width == 0 and all(w + i in words for i in range(width)):
                out.append((w, [words[w + i] for i in range(width)]))
                w += width
                break
        else:
            w += 1  # a hole: nothing to store there
    return out


def _packed_stores(base: str, words: dict[int, str], names: _Names) -> list[str]:
    """One inline-asm block in which thread 0 of the CTA stores ``words`` with vector stores."""
    addr, dummy = names.new("a"), names.new("a")
    values = sorted(set(words.values()))
    slot = {v: i + 2 for i, v in enumerate(values)}  # $0 dummy result, $1 address
    body = ["{ .reg .pred %p; .reg .b32 %t; mov.u32 %t, %tid.x; setp.eq.u32 %p, %t, 0;"]
    for w, vals in _runs(words):
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


def _scalar_stores(base: str, words: dict[int, str], names: _Names) -> list[str]:
    """One ``tt.store`` per word (made by thread 0 of the CTA: a scalar store)."""
    out = []
    for w, v in sorted(words.items()):
        c, p = names.new("c"), names.new("p")
        out += [f"{c} = arith.constant {w} : i32", f"{p} = tt.addptr {base}, {c} : !tt.ptr<i32>, i32",
                f"tt.store {p}, {v} : !tt.ptr<i32>"]
    return out


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
