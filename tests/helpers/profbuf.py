"""A tiny writer of Proton circular profile buffers, for synthetic decoder inputs.

It writes what the Triton 3.6 lowering writes (see the layout in proton_inject/formats/proton_layout.py):
record k of a warp goes to slot k mod slots, the count word holds 2 x records written.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from proton_inject.formats.raw import LaunchMeta


@dataclass
class Cta:
    pid: int
    sm: int
    init: int  # globaltimer ns
    pre: int
    post: int
    # warp id -> records (is_end, scope, clock) in the order the warp wrote them
    warps: dict[int, list[tuple[bool, int, int]]] = field(default_factory=dict)


def write(ctas: list[Cta], num_warps: int, slots: int, clock_bits: int = 64,
          sampled: list[int] | None = None, scopes: dict[int, str] | None = None,
          ) -> tuple[bytes, LaunchMeta]:
    """Buffer bytes and matching LaunchMeta for the given CTAs (in buffer order)."""
    segs = sorted(sampled) if sampled else list(range(num_warps))
    data_bytes = slots * 8 * len(segs)
    meta_words = 10 + num_warps
    stride = -(-(meta_words * 4 + data_bytes) // 128) * 128
    buf = np.zeros((len(ctas), stride // 4), np.uint32)
    for i, c in enumerate(ctas):
        b = buf[i]
        b[0] = 0xDEADBEEF
        b[1], b[2], b[3] = c.pid, c.sm, data_bytes
        for w, t in ((4, c.init), (6, c.pre), (8, c.post)):
            b[w], b[w + 1] = t & 0xFFFFFFFF, t >> 32
        for warp, recs in c.warps.items():
            b[10 + warp] = 2 * len(recs)
            if warp not in segs:
                continue
            base = meta_words + segs.index(warp) * slots * 2
            for k, (is_end, scope, clk) in enumerate(recs):
                tag = (int(is_end) << 31) | ((scope & 0xFF) << 23)
                if clock_bits == 64:
                    tag |= (clk >> 32) & 0x7FF
                s = base + 2 * (k % slots)
                b[s], b[s + 1] = tag, clk & 0xFFFFFFFF
    meta = LaunchMeta(
        kernel="synth", grid=(len(ctas), 1, 1), num_warps=num_warps, bytes_per_cta=stride,
        scopes=scopes or {0: "outer", 1: "inner", 2: "leaf"}, clock_bits=clock_bits,
        sampled_warps=sampled,
    )
    return buf.tobytes(), meta


def loop_records(start: int, iters: int, body: int, gap: int, outer: int = 0,
                 inner: int = 1) -> list[tuple[bool, int, int]]:
    """An outer region around ``iters`` inner regions of ``body`` cycles, ``gap`` apart."""
    recs = [(False, outer, start)]
    t = start + gap
    for _ in range(iters):
        recs += [(False, inner, t), (True, inner, t + body)]
        t += body + gap
    recs.append((True, outer, t))
    return recs
