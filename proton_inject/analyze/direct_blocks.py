"""The blocks our direct lowering writes (``lower/direct.py``; layout in
``formats/direct_layout.py``), rewritten as Proton's layout (``formats/proton_layout.py``) so
that one decoder (``decode.py``) reads both.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from proton_inject.errors import UserError
from proton_inject.formats.direct_layout import (
    DIRECT_HEADER_WORDS,
    SM_ID_BITS,
    block_bytes,
    layout,
    loop_bytes_needed,
)
from proton_inject.formats.proton_layout import HEADER_WORDS, PREAMBLE
from proton_inject.formats.raw import BufferType, LaunchMeta, _as_bytes


def expand_direct(buffer: Any, meta: LaunchMeta, where: str
                  ) -> tuple[np.ndarray, LaunchMeta, tuple[np.ndarray, int] | None]:
    """A ``direct.py`` buffer rewritten as Proton's layout, with its metadata, so one
    decoder reads both: each CTA's block (``direct.layout``: word 0 SM id and timer bits 32-55,
    word 1 timer bits 0-31, the iterations of each recording loop, a 32-bit clock per record
    slot) becomes a header with the program id (the block's index), the timer read as all
    three times (bits 56-63 from ``meta.timer_ref_ns``), warp 0's count, and its records in
    the order they ran, tagged from ``meta.direct_records``. A CTA whose header is zero did not
    write its block. Also returns, when loops ran more iterations than their sections keep,
    the records each CTA did not keep and the ``--buffer-size`` that would have kept them."""
    rows = [list(r) for r in meta.direct_records or []]
    loops = [list(x) for x in meta.direct_loops or []]
    raw = _as_bytes(buffer)
    size = block_bytes(rows, loops) if rows else None
    if size != meta.bytes_per_cta and raw.size >= 4 and int(raw[:4].view("<u4")[0]) == PREAMBLE:
        # Proton's own layout: the direct lowering failed and Proton's passes lowered the
        # records instead (lowering.ProtonLowering.direct_module falls back to them).
        return raw, replace(meta, buffer_type=BufferType.GLOBAL, direct_records=None, direct_loops=None), None
    if size is None or size != meta.bytes_per_cta:
        raise UserError(
            f"{where}: buffer_type 'direct' with {len(rows)} record slots needs bytes_per_cta="
            f"{size or '?'}, not {meta.bytes_per_cta}; the metadata does not match the kernel "
            "(or the file was written by an older proton-inject: run again)")
    stride = meta.bytes_per_cta
    blocks = np.frombuffer(raw[: raw.size // stride * stride], dtype="<u4").reshape(-1, stride // 4)
    word, tag, loop_of, it_of, members = _slot_order(rows, loops)
    n = len(word)
    ran = blocks[:, :DIRECT_HEADER_WORDS].any(axis=1)
    counts = blocks[:, DIRECT_HEADER_WORDS:DIRECT_HEADER_WORDS + len(loops)].astype(np.int64)
    every = np.asarray([row[2] if len(row) > 2 else 1 for row in loops], np.int64)
    counts = -(-counts // every)  # the iterations each loop would keep with room for all
    caps = np.asarray([row[0] for row in loops], np.int64)
    keep = np.ones((len(blocks), n), bool)
    if loops:
        in_loop = loop_of >= 0
        keep[:, in_loop] = it_of[in_loop] < np.minimum(counts, caps)[:, loop_of[in_loop]]
    keep &= ran[:, None]
    order = np.argsort(~keep, axis=1, kind="stable")  # kept slots first, in the order they ran
    kept = keep.sum(axis=1)
    filled = np.arange(n) < kept[:, None]
    W = meta.num_warps
    head = HEADER_WORDS + W
    out = np.zeros((len(blocks), head + 2 * n), np.uint32)
    t = timer_from(blocks[:, 0] >> SM_ID_BITS, blocks[:, 1], meta.timer_ref_ns)
    t = np.where(ran, t, 0)
    t_words = np.stack([t & 0xFFFFFFFF, t >> 32], axis=1).astype(np.uint32)
    out[:, 0] = np.where(ran, PREAMBLE, 0)
    out[:, 1] = np.where(ran, np.arange(len(blocks), dtype=np.uint32), 0)
    out[:, 2] = blocks[:, 0] & ((1 << SM_ID_BITS) - 1)
    out[:, 3] = np.where(ran, 8 * n, 0)  # (a block never written stays all zero)
    out[:, 4:6] = out[:, 6:8] = out[:, 8:10] = t_words
    out[:, HEADER_WORDS] = 2 * kept
    out[:, head::2] = np.where(filled, tag[order], 0)
    out[:, head + 1::2] = np.where(filled, np.take_along_axis(blocks[:, word], order, axis=1), 0)
    meta = replace(meta, bytes_per_cta=4 * out.shape[1], buffer_size=8 * n, clock_bits=32,
                   sampled_warps=[0], buffer_type=BufferType.DIRECT)
    lost = None
    if loops:
        over = np.maximum(counts - caps, 0) * np.asarray([len(m) for m in members], np.int64)
        missed = np.where(ran, over.sum(axis=1), 0)
        if missed.any():
            need = loop_bytes_needed([row[1] for row in loops], counts[ran].max(axis=0).tolist())
            lost = (missed, need)
    return out.reshape(-1).view(np.uint8), meta, lost


def timer_from(bits_32_55: np.ndarray, low: np.ndarray, ref: int | None) -> np.ndarray:
    """Globaltimer ns from its low 56 bits: the value nearest ``ref`` (a full reading taken
    near the launch) with those bits; bits 56-63 zero where there is no reference."""
    t = (bits_32_55.astype(np.int64) << 32) | low.astype(np.int64)
    if ref is None:
        return t
    span = 1 << 56
    t = t + (int(ref) >> 56 << 56)
    t = np.where(t - ref > span // 2, t - span, t)
    return np.where(ref - t > span // 2, t + span, t)


def _slot_order(rows: list[list[int]], loops: list[list[int]]
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[list[int]]]:
    """Each record slot in the order the records ran: a loop's records, iteration by
    iteration, where its first record stands in the text. Per slot: its word in the block,
    its Proton tag, its loop (-1: none) and iteration; and each loop's records."""
    first_word, _, _ = layout(rows, loops)
    tags = [(row[1] << 31) | (row[0] << 23) for row in rows]
    members = [[q for q, row in enumerate(rows) if len(row) > 2 and row[2] == lp]
               for lp in range(len(loops))]
    word, tag, loop_of, it_of = [], [], [], []
    for r, row in enumerate(rows):
        if len(row) < 3:
            word.append(first_word[r]), tag.append(tags[r]), loop_of.append(-1), it_of.append(0)
        elif r == members[row[2]][0]:
            lp = row[2]
            cap, step = loops[lp][:2]
            for it in range(cap):
                for q in members[lp]:
                    word.append(first_word[q] + it * step), tag.append(tags[q])
                    loop_of.append(lp), it_of.append(it)
    word, tag = np.asarray(word, np.int64), np.asarray(tag, np.uint32)
    loop_of, it_of = np.asarray(loop_of, np.int64), np.asarray(it_of, np.int64)
    return word, tag, loop_of, it_of, members
