"""The per-CTA block our direct lowering writes (``lower/direct.py``): where each record's clock
sits, read by the decoder.
"""

# Per-CTA block: word 0 the SM id (bits 0-7) and bits 32-55 of the %globaltimer read after
# the last record (bits 8-31; decode takes bits 56-63 from a full reading, the launch
# metadata's ``timer_ref_ns``), word 1 that read's low 32 bits, then one word per recording
# loop (the iterations it ran), one per top-level record op in text order (the low 32 bits of
# its %clock64), and, from a 16-byte boundary, each recording loop's section: ``stride`` words
# per iteration (its records in text order, padded for vector stores) for its first ``cap``
# iterations.
DIRECT_HEADER_WORDS = 2


SM_ID_BITS = 8


def layout(table: list[list[int]], loops: list[list[int]]) -> tuple[list[int], list[int], int]:
    """Where a CTA's block keeps each record: (each record's word in the first iteration,
    each loop's section start, words in all) for ``record_table`` and ``loop_table``."""
    top = DIRECT_HEADER_WORDS + len(loops)
    start = top + sum(len(row) < 3 for row in table)
    if loops:
        start = -(-start // 4) * 4
    sections = []
    for cap, stride, *_ in loops:
        sections.append(start)
        start += -(-cap * stride // 4) * 4
    out, pos = [], [0] * len(loops)
    for row in table:
        if len(row) < 3:
            out.append(top)
            top += 1
        else:
            out.append(sections[row[2]] + pos[row[2]])
            pos[row[2]] += 1
    return out, sections, start


def loop_bytes_needed(strides: list[int], iterations: list[int]) -> int:
    """The ``budget`` whose even share gives each loop (``stride`` words per iteration) a cap
    of at least its ``iterations``: the inverse of ``_plan``'s rule."""
    return len(strides) * max(4 * s * int(n) for s, n in zip(strides, iterations, strict=True))


def block_bytes(table: list[list[int]], loops: list[list[int]] = ()) -> int:
    """Bytes per CTA: the layout's words in 8-byte steps (16 with loops: their vector stores
    need it)."""
    step = 16 if loops else 8
    return -(-4 * layout(table, list(loops))[2] // step) * step
