"""Cheap reads of a TTGIR text: warps per CTA, records per warp, persistent loops, the warps
that record by default.
"""

from __future__ import annotations

import functools
import re


@functools.lru_cache(maxsize=16)  # for_kernel asks twice per kernel (buffer type, size)
def records_per_warp_bound(text: str) -> int | None:
    """Most records one warp can write in a run of this instrumented TTGIR, if the IR fixes it.

    Each ``proton.record`` outside any loop (scf.for/while, or a branch back to an earlier
    block) runs at most once per warp, so their count bounds a warp's records: kernel scope
    and whole-loop regions give two per region. None when a record may repeat, or when the
    kernel is warp-specialized (its partitions' warps are not the module's ``num-warps``).
    """
    from proton_inject.ttgir import parse
    from proton_inject.ttgir.tree import LOOP_OPS

    module = parse(text)
    count = 0
    for op in module.walk():
        if op.name == "ttg.warp_specialize":
            return None
        if op.name == "proton.record":
            if any(a.name in LOOP_OPS for a in op.ancestors()):
                return None
            count += 1
        for region in op.regions:  # a branch back to an earlier (or its own) block is a loop
            labels = [b.label for b in region.blocks]
            for i, block in enumerate(region.blocks):
                term = block.terminator
                if term is None or not term.name.startswith("cf."):
                    continue
                for target in re.findall(r"\^[\w$.-]+", term.head):
                    if target in labels and labels.index(target) <= i:
                        return None
    return count


# A persistent kernel's tile loop starts at the program id and strides over tiles: by the grid
# size (``range(pid, n, tl.num_programs(0))``) or by a constant the caller set to it
# (``range(pid, n, NUM_SMS)``, as in Triton's persistent matmul tutorial): any step but 1.
# Only the loop counts: the lowering reads the module as MLIR prints it, where the CTA
# sampler's own reads of the grid size have lost their names (``%pi_cta0_gx``).
_PROGRAM_ID = re.compile(r"(%(?!pi_)[\w$.-]+) = tt\.get_program_id\b")


_FOR_FROM = re.compile(r"scf\.for %[\w$.-]+ = (%[\w$.-]+) to %[\w$.-]+ step (%[\w$.-]+)")


_ONE = re.compile(r"(%[\w$.-]+) = arith\.constant 1 : i(?:32|64)\b")


def is_persistent(text: str) -> bool:
    """Whether a kernel's CTAs loop over tiles: a loop from the program id whose step is not 1."""
    pids, ones = set(_PROGRAM_ID.findall(text)), set(_ONE.findall(text))
    return any(lb in pids and step not in ones for lb, step in _FOR_FROM.findall(text))


_PARTITION_WARPS = re.compile(r"\bnum_warps\((\d+)\)\s*\{")


def first_warps(text: str) -> tuple[int, ...]:
    """The first warp of each partition of a kernel: ``(0,)`` without ``ttg.warp_specialize``.

    Partition warps follow the module's ``ttg.num-warps`` and are placed as Triton 3.6's
    AllocateWarpGroups pass places them: every ``ttg.warp_specialize`` is padded with empty
    partitions to whole warp groups of the largest one, then its partitions get start ids by
    size, largest first (ties in partition order). ``tests/unit/lower/test_lowering.py`` checks this
    against the pass itself.
    """
    if "ttg.warp_specialize" not in text:
        return (0,)
    from proton_inject.ttgir import parse

    base = num_warps_of(text) or 4
    module = parse(text)
    specs = [[int(n) for n in _PARTITION_WARPS.findall(module.text, op.start, op.end)]
             for op in module.walk() if op.name == "ttg.warp_specialize"]
    groups = -(-max((sum(s) for s in specs), default=0) // 4)
    out = {0}
    for sizes in specs:
        pad, left = [], groups * 4 - sum(sizes)
        while left > 0:  # padding partitions: powers of two, largest first
            pad.append(1 << (left.bit_length() - 1))
            left -= pad[-1]
        order = sorted(range(len(sizes) + len(pad)), key=lambda i: -(sizes + pad)[i])
        start = base
        for i in order:
            if i < len(sizes):
                out.add(start)
            start += (sizes + pad)[i]
    return tuple(sorted(out))


_NUM_WARPS = re.compile(r'"ttg\.num-warps"\s*=\s*(\d+)')


_HIP_TARGET = re.compile(r'"?ttg\.target"?\s*=\s*"hip:')


def num_warps_of(text: str) -> int | None:
    """The module's ``ttg.num-warps`` (None if the TTGIR does not say)."""
    m = _NUM_WARPS.search(text)
    return int(m.group(1)) if m else None
