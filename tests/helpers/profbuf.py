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


def small_launch(launch: int = 0):
    """2 SMs, 3 CTAs, 2 warps, nested regions; clock 1.25 GHz exactly."""
    ctas = []
    t0 = 1_700_000_000_000_000_000
    for i, (sm, start) in enumerate(((0, 0), (1, 40), (0, 9000))):
        c = Cta(pid=i, sm=sm, init=t0 + start, pre=0, post=0)
        for w in range(2):
            c0 = 1_000_000 * (sm + 1) + int((start + 20) * 1.25)
            c.warps[w] = loop_records(c0, iters=2, body=500 + 250 * w, gap=125)
        last = max(r[2] for r in c.warps[0] + c.warps[1])
        c.pre = t0 + int((last - 1_000_000 * (sm + 1)) / 1.25) + 20
        c.post = c.pre + 320
        ctas.append(c)
    buf, meta = write(ctas, num_warps=2, slots=16, scopes={0: "kernel", 1: "iter"})
    meta = LaunchMeta(**{**meta.__dict__, "launch": launch, "scope_parents": {1: 0},
                         "scope_locs": {0: "k.py:3", 1: "k.py:7"}})
    from proton_inject.analyze.decode import decode

    return decode(buf, meta, clock_mhz=1250)
