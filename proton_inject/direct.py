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


def lower(text: str, clock_bits: int = 64, defer: bool = True, reads_first: bool = False) -> str:
    """``text`` with its records lowered as described above (``eligible`` must be None).

    ``defer``: each record site keeps only its clock read, and every store (header, records,
    counts) waits until just before ``tt.return``, so none of them comes between the kernel's
    first loads and its entry; otherwise each store sits where its value is read."""
    why = eligible(text)
    if why:
        raise ValueError(f"records cannot be lowered directly: {why}")
    module, _, records = _records(text)
    func = records[0].parent_op()
    warps = num_warps_of(text)
    ids = scope_ids(records)
    n = len(records)
    data_word = CIRCULAR_HEADER_BYTES // 4 + warps  # warp 0's segment starts here
    nbytes = -(-(4 * data_word + BYTES_PER_RECORD * n) // 8) * 8
    wide = data_word % 2 == 0  # a record is one 8-byte store where it is 8-byte aligned
    body = func.regions[0].blocks[0]
    indent = " " * (body.ops[0].column - 1)
    names = _Names(text)
    base = names.new("base")

    def const(value: int, ty: str) -> tuple[str, str]:
        v = names.new("c")
        return v, f"{v} = arith.constant {value} : {ty}"

    def store(word: int, value: str, ty: str) -> list[str]:
        c, line = const(word, "i32")
        p = names.new("p")
        out = [line, f"{p} = tt.addptr {base}, {c} : !tt.ptr<i32>, i32"]
        if ty == "i64":
            q = names.new("p")
            out += [f"{q} = tt.bitcast {p} : !tt.ptr<i32> -> !tt.ptr<i64>"]
            p = q
        return out + [f"tt.store {p}, {value} : !tt.ptr<{ty}>"]

    def read(reg: str, ty: str) -> tuple[str, str]:
        v = names.new("r")
        c = "l" if ty == "i64" else "r"
        return v, (f'{v} = tt.elementwise_inline_asm "mov.{"u64" if ty == "i64" else "u32"} $0, '
                   f'%{reg};" {{constraints = "={c}", packed_element = 1 : i32, pure = false}} '
                   f"-> {ty}")

    # Entry: the init time and, when ``reads_first``, the header's register reads, whose
    # latency then overlaps the kernel's first loads; the stores whenever the stores go.
    t0, line = read("globaltimer", "i64")
    entry = [line]
    x, y, z, gx, gy = (names.new("pid") for _ in range(5))
    zy, zyy, prod, lin = (names.new("pid") for _ in range(4))  # (z * gy + y) * gx + x
    sm, smline = read("smid", "i32")
    reads = [f"{x} = tt.get_program_id x : i32", f"{y} = tt.get_program_id y : i32",
             f"{z} = tt.get_program_id z : i32", f"{gx} = tt.get_num_programs x : i32",
             f"{gy} = tt.get_num_programs y : i32",
             f"{zy} = arith.muli {z}, {gy} : i32", f"{zyy} = arith.addi {zy}, {y} : i32",
             f"{prod} = arith.muli {zyy}, {gx} : i32", f"{lin} = arith.addi {prod}, {x} : i32",
             smline]
    header = [f"{base} = proton_gpu.global_scratch_alloc {{alignment = 128 : i32, "
              f"nbytes = {nbytes} : i32, offset = 0 : i32}} : !tt.ptr<i32>"]
    if reads_first:
        entry += reads
    else:
        header += reads
    pre, line = const(PREAMBLE - (1 << 32), "i32")
    header += [line, *store(0, pre, "i32"), *store(1, lin, "i32"), *store(2, sm, "i32")]
    size, line = const(BYTES_PER_RECORD * n, "i32")
    header += [line, *store(3, size, "i32"), *store(4, t0, "i64")]

    def record(k: int, op) -> tuple[list[str], list[str]]:
        """(the clock read, the lines that tag and store it)"""
        is_end = _RECORD.match(op.head).group(1) == "end"
        tag = (int(is_end) << 31) | (ids[k] << 23)
        word = data_word + 2 * k
        c32, l32 = const(32, "i64")
        ctag, ltag = const(tag, "i64")
        if clock_bits == 64:
            clk, now = read("clock64", "i64")
            cmask, lmask = const(0x7FF, "i64")
            hi, hib, tag64, lo = (names.new("t") for _ in range(4))
            out = [l32, lmask, ltag, f"{hi} = arith.shrui {clk}, {c32} : i64",
                   f"{hib} = arith.andi {hi}, {cmask} : i64",
                   f"{tag64} = arith.ori {hib}, {ctag} : i64",
                   f"{lo} = arith.shli {clk}, {c32} : i64"]
        else:
            clk32, now = read("clock", "i32")
            clk, lo = names.new("t"), names.new("t")
            tag64 = ctag
            out = [f"{clk} = arith.extui {clk32} : i32 to i64", l32, ltag,
                   f"{lo} = arith.shli {clk}, {c32} : i64"]
        if wide:  # little-endian: the tag word first, then the clock's low word
            rec = names.new("t")
            return [now], out + [f"{rec} = arith.ori {lo}, {tag64} : i64", *store(word, rec, "i64")]
        t32, hi32, l32s = names.new("t"), names.new("t"), names.new("t")
        return [now], out + [f"{t32} = arith.trunci {tag64} : i64 to i32",
                             f"{hi32} = arith.shrui {lo}, {c32} : i64",
                             f"{l32s} = arith.trunci {hi32} : i64 to i32",
                             *store(word, t32, "i32"), *store(word + 1, l32s, "i32")]

    sites = [record(k, op) for k, op in enumerate(records)]
    late = header + [line for _, stores in sites for line in stores] if defer else []
    count, line = const(2 * n, "i32")
    late += [line, *store(CIRCULAR_HEADER_BYTES // 4, count, "i32")]
    t1, line = read("globaltimer", "i64")
    late += [line, *store(6, t1, "i64"), *store(8, t1, "i64")]

    ret = body.ops[-1]
    if ret.name != "tt.return":
        raise ValueError("the kernel's function does not end with tt.return")
    # (offset, end, lines, goes before the op at offset)
    edits = [(body.ops[0].start, body.ops[0].start, entry + ([] if defer else header), True)]
    edits += [(op.start, op.end, now + ([] if defer else stores), False)
              for op, (now, stores) in zip(records, sites, strict=True)]
    edits.append((ret.start, ret.start, late, True))
    out, pos = [], 0
    for start, end, lines, before in sorted(edits, key=lambda e: (e[0], not e[3])):
        out.append(module.text[pos:start])
        block = ("\n" + indent).join(lines)
        out.append(block + ("\n" + indent if before else ""))
        pos = end
    out.append(module.text[pos:])
    return "".join(out)


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
