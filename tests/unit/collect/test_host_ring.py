"""The pinned ring kept launches' copies go through: spans taken in launch order, given back in
the same order, never overlapping a copy not yet landed. (Pinning needs a GPU; the ring's block
here is ordinary host memory, the arithmetic is the same.)"""

from __future__ import annotations

import threading

import torch

from proton_inject.collect.buffers import HostRing


def _ring(size: int, wake=lambda: None) -> HostRing:
    ring = HostRing(size, wake)
    ring._mem = torch.zeros(size, dtype=torch.uint8)
    ring.array = ring._mem.numpy()
    return ring


def test_spans_wrap_around_and_never_overlap_a_live_copy():
    ring = _ring(100)
    assert [ring.take(30), ring.take(30), ring.take(30)] == [0, 30, 60]
    ring.release(0)
    assert ring.take(25) == 0  # wraps: [90, 100) is too small, [0, 30) is free
    ring.release(30)
    ring.release(60)
    assert ring.take(40) is not None and ring.take(200) is None  # larger than the ring: never
    live = sorted(ring._spans)
    assert all(a[1] <= b[0] for a, b in zip(live, live[1:], strict=False))


def test_a_full_ring_waits_for_the_writer():
    woken = threading.Event()
    ring = _ring(64, woken.set)
    assert ring.take(64) == 0
    got: list[int | None] = []
    t = threading.Thread(target=lambda: got.append(ring.take(16)))
    t.start()
    assert woken.wait(5)  # it asked the writer to land copies
    assert not got
    ring.release(0)
    t.join(5)
    assert got == [0]


def test_prepared_ahead_the_ring_keeps_its_block_and_the_writer_its_thread():
    from proton_inject.collect.raw_writer import RawWriter

    ring = _ring(64)
    block = ring._mem
    ring.prepare()  # (already there: not made again)
    assert ring._mem is block and ring.take(16) == 0
    writer = RawWriter(lambda item: b"", lambda rec, data: None, 1 << 20, print)
    writer.start()
    thread = writer._thread
    assert thread is not None and thread.is_alive()
    writer.start()
    assert writer._thread is thread  # one thread, started once
    writer.close()
    assert not thread.is_alive()
    writer.start()  # closed: no thread again
    assert writer._thread is None
