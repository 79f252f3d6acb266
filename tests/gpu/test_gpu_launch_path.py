"""The launch path on a real GPU: which launches are kept, what every launch costs us, and
that kernels get their own launchers back.

A launch not kept runs through Triton's own launcher (its records go to a throw-away buffer);
a kept one gets a pooled buffer, zeroed on the copy stream after its last use, and is written
by the raw writer thread. These tests check what the program and the report see of that.
"""

from __future__ import annotations

import json

import pytest
import torch
import triton
import triton.language as tl
from helpers import requires_gpu

from proton_inject.analyze.decode import decode
from proton_inject.api import profile
from proton_inject.collect import fast_launch
from proton_inject.collect.launch_path import KernelLauncher
from proton_inject.formats.raw import find_raw, load_raw

pytestmark = [pytest.mark.gpu, requires_gpu]


def _ours(launcher) -> bool:
    """Whether a build's launcher is one of ours (the Python one or the C one)."""
    return isinstance(launcher, (KernelLauncher, fast_launch._module().Launcher))


@triton.jit
def bump_kernel(x_ptr, n, BLOCK: tl.constexpr):
    # Each program its own blocks: two programs adding to one element would race (an element
    # then gains 1 or 2 a launch, as the programs' timing falls, and the counts below mean nothing).
    for start in range(tl.program_id(0) * BLOCK, n, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1.0, mask=offs < n)


def _bump(x: torch.Tensor) -> None:
    bump_kernel[(2,)](x, x.numel(), BLOCK=256)


def test_default_policy_keeps_first_then_one_in_n_and_counts_all(tmp_path):
    x = torch.zeros(1024, device="cuda")
    with profile({"loops": "both", "kernel": "bump_kernel"}, out=tmp_path / "t", quiet=True) as res:
        for _ in range(450):
            _bump(x)
    torch.cuda.synchronize()
    assert float(x.min()) == float(x.max()) == 450.0  # every launch ran, once
    # The first 20, then launches 100, 200, 300 and 400.
    assert len(res.launches) == 24, res.messages
    index = json.loads((tmp_path / "t" / "run.json").read_text())
    assert index["launch_counts"] == {"bump_kernel": 450}
    assert "kernel bump_kernel: 450 launches, 24 kept" in res.messages, res.messages
    raws = find_raw(tmp_path / "t" / "raw")
    assert len(raws) == 24
    for path in (raws[0], raws[-1]):  # a fresh buffer and a reused one decode alike
        data, meta = load_raw(path)
        d = decode(data, meta)
        assert len(d.events) and not d.drops.dropped


def test_kept_launches_all_and_pooled_buffers_come_back_zeroed(tmp_path):
    """keep all: 300 kept launches through a handful of pooled buffers; a buffer reused
    without its zeroing would show the last launch's records twice."""
    x = torch.zeros(1024, device="cuda")
    with profile({"loops": "both"}, out=tmp_path / "t", quiet=True, keep_launches="all") as res:
        for _ in range(300):
            _bump(x)
    assert len(res.launches) == 300 and not any(r.all_zero for r in res.launches)
    counts = set()
    for path in find_raw(tmp_path / "t" / "raw")[::37]:
        d = decode(*load_raw(path))
        counts.add(len(d.events))
    assert len(counts) == 1, counts


def test_launchers_restored_after_the_session(tmp_path):
    x = torch.zeros(1024, device="cuda")
    with profile({"loops": "both"}, out=tmp_path / "t", quiet=True):
        _bump(x)
        cks = bump_kernel.device_caches[torch.cuda.current_device()][0].values()
        ck = next(k for k in cks if _ours(k._run))  # (others: earlier sessions')
    assert not _ours(ck._run)
    _bump(x)  # the instrumented build still launches (throw-away scratch), outside any session
    torch.cuda.synchronize()


def test_cuda_graph_replays_sampled(tmp_path):
    x = torch.zeros(1024, device="cuda")
    with profile({"loops": "both"}, out=tmp_path / "t", quiet=True, keep_launches="first=3,every=50") as res:
        _bump(x)  # compile and load outside the capture
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        g = torch.cuda.CUDAGraph()
        with torch.cuda.stream(s), torch.cuda.graph(g, stream=s):
            _bump(x)
        torch.cuda.current_stream().wait_stream(s)
        for _ in range(120):
            g.replay()
    torch.cuda.synchronize()
    assert float(x.max()) == 1.0 + 120.0  # once before the capture, then 120 replays
    replays = sorted(r.graph_replay for r in res.launches if r.graph_replay is not None)
    assert replays == [1, 2, 3, 50, 100], (replays, res.messages)


def _event_counts(out) -> list[int]:
    return [len(decode(*load_raw(p)).events) for p in find_raw(out / "raw")]


def test_slabs_reused_many_times_come_back_zeroed(tmp_path, monkeypatch):
    """Slabs of 64 KiB hold a few launches each and go back to the pool after their copy:
    a slab reused without its zeroing would show an earlier launch's records in a later one."""
    from proton_inject.collect import slabs

    monkeypatch.setattr(slabs, "SLAB_BYTES", 64 << 10)
    x = torch.zeros(1024, device="cuda")
    with profile({"loops": "both"}, out=tmp_path / "t", quiet=True, keep_launches="all") as res:
        for _ in range(400):
            _bump(x)
    torch.cuda.synchronize()
    assert float(x.max()) == 400.0
    assert len(res.launches) == 400 and not any(r.all_zero for r in res.launches), res.messages
    counts = _event_counts(tmp_path / "t")
    assert len(counts) == 400 and len(set(counts)) == 1 and counts[0] > 0, sorted(set(counts))


def test_slab_launches_on_two_streams_and_one_larger_than_a_slab(tmp_path, monkeypatch):
    """Launches on two streams share a slab (its copy waits for both); a launch larger than
    half a slab keeps a buffer of its own; a slab open longer than its time is shipped by the
    next launch."""
    import time

    from proton_inject.collect import slabs

    monkeypatch.setattr(slabs, "SLAB_BYTES", 256 << 10)
    x = torch.zeros(1024, device="cuda")
    big = torch.zeros(1 << 20, device="cuda")
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    with profile({"loops": "both"}, out=tmp_path / "t", quiet=True, keep_launches="all") as res:
        for i in range(60):
            with torch.cuda.stream(s1 if i % 2 else s2):
                _bump(x if i % 2 else x.clone())
            if i == 30:
                time.sleep(slabs.SHIP_AFTER_S * 2)
        bump_kernel[(512,)](big, big.numel(), BLOCK=256)  # 512 CTAs: past 256 KiB
    torch.cuda.synchronize()
    assert len(res.launches) == 61, res.messages
    assert not any(r.all_zero for r in res.launches)
    grids = {r.grid for r in res.launches}
    assert (512, 1, 1) in grids
    counts = {}
    for p in find_raw(tmp_path / "t" / "raw"):
        d = decode(*load_raw(p))
        counts.setdefault(tuple(d.meta.grid), set()).add(len(d.events))
    assert len(counts[(2, 1, 1)]) == 1 and len(counts[(512, 1, 1)]) == 1, counts


def test_a_kept_launch_that_fails_is_the_programs_error_and_is_not_saved(tmp_path):
    x = torch.zeros(1024, device="cuda")
    with profile({"loops": "both"}, out=tmp_path / "t", quiet=True, keep_launches="all") as res:
        _bump(x)
        with pytest.raises(Exception, match="(?i)pointer|cpu"):  # the launcher refuses host memory
            bump_kernel[(2,)](torch.zeros(1024), 1024, BLOCK=256)
        _bump(x)
    torch.cuda.synchronize()
    assert float(x.max()) == 2.0
    assert len(res.launches) == 2 and not any(r.all_zero for r in res.launches), res.messages
    assert all(r.clock_bracket for r in res.launches)
    assert "before" in res.launches[0].clock_bracket, res.launches[0].clock_bracket


def test_each_builds_first_launches_have_a_clock_bracket(tmp_path):
    """Brackets run at most every 10 ms on a device, but each of a build's first three launches
    has one (a short kernel's own timer reads cannot fit its clock)."""
    x = torch.zeros(1024, device="cuda")
    with profile({"loops": "both"}, out=tmp_path / "t", quiet=True, keep_launches="all") as res:
        for _ in range(6):
            _bump(x)
    assert len(res.launches) == 6
    for r in res.launches[:3]:
        assert set(r.clock_bracket) == {"before", "after"} and all(r.clock_bracket.values()), r.clock_bracket


def test_kept_launches_through_the_c_fast_path(tmp_path, monkeypatch):
    """The C launcher (on unless PROTON_INJECT_FAST_LAUNCH=0): past each build's first launches
    (and the launch that opens a slab) kept launches go through the C path, and they decode as
    the Python path's do."""
    from proton_inject.collect import fast_launch, slabs

    python_slab_launches = []
    python_path = slabs.Slabs.launch

    def counted(self, *args):
        python_slab_launches.append(1)
        return python_path(self, *args)

    counts = {}
    for fast in (False, True):
        monkeypatch.setenv(fast_launch.ENV, "1" if fast else "0")
        monkeypatch.setattr(slabs.Slabs, "launch", counted)
        python_slab_launches.clear()
        x = torch.zeros(1024, device="cuda")
        out = tmp_path / f"fast-{fast}"
        with profile({"loops": "both"}, out=out, quiet=True, keep_launches="all") as res:
            for _ in range(200):
                _bump(x)
        torch.cuda.synchronize()
        assert float(x.max()) == float(x.min()) == 200.0
        assert len(res.launches) == 200 and not any(r.all_zero for r in res.launches), res.messages
        assert not any("C launchers" in m for m in res.messages), res.messages
        counts[fast] = sorted(set(_event_counts(out)))
        if fast:  # the first three (bracketed), a slab's opening, and brackets due every 10 ms
            assert len(python_slab_launches) < 40, len(python_slab_launches)
        else:
            assert len(python_slab_launches) == 200
    assert counts[True] == counts[False] and len(counts[True]) == 1, counts


@pytest.mark.parametrize("fast", [True, False], ids=["C launcher", "Python launcher"])
def test_launches_not_kept_run_the_plain_twin(tmp_path, monkeypatch, fast):
    """Plain twins (on by default): a build's launches not kept run the program's own build of
    it (collect/plain_twins.py); the kept ones still record, and every launch runs once."""
    from proton_inject.collect import plain_twins

    monkeypatch.setenv(fast_launch.ENV, "1" if fast else "0")
    monkeypatch.setenv(plain_twins.ENV, "1")
    x = torch.zeros(1024, device="cuda")
    with profile({"loops": "both", "kernel": "bump_kernel"}, out=tmp_path / "t", quiet=True) as res:
        for _ in range(450):
            _bump(x)
        cks = bump_kernel.device_caches[torch.cuda.current_device()][0].values()
        w = next(k._run for k in cks if _ours(k._run))
        assert w.plain_fn is not None and w.plain_meta is not None, res.messages
        assert w.plain_fn != next(k for k in cks if k._run is w).function  # another build's
        assert w.discard is None  # no launch not kept went the throw-away buffer's way
    torch.cuda.synchronize()
    assert float(x.min()) == float(x.max()) == 450.0
    assert len(res.launches) == 24 and not any(r.all_zero for r in res.launches), res.messages
    assert not any("plain twin" in m for m in res.messages), res.messages
    for path in find_raw(tmp_path / "t" / "raw")[::7]:
        d = decode(*load_raw(path))
        assert len(d.events) and not d.drops.dropped


def test_a_capture_by_an_api_we_do_not_follow_is_left_unprofiled(tmp_path):
    """A CUDA graph captured through the driver itself (no torch.cuda.graph for the session to
    see): the launch the policy would keep, the 100th, is captured, with no clock bracket due,
    so that the C path gets as far as its capture query (the driver's, on the launch's stream).
    It must leave the launch to the Python path, which runs it unprofiled: no slab gets bytes
    that a replay would write again."""
    import ctypes

    from proton_inject.collect.session import Session
    from proton_inject.instrument.rules import Rules

    cuda = ctypes.CDLL("libcuda.so.1")
    x = torch.zeros(1024, device="cuda")
    s = torch.cuda.Stream()
    graph, exe = ctypes.c_void_p(), ctypes.c_void_p()
    session = Session(out=tmp_path / "t", source=Rules(loops="both", kernel="^bump_kernel$")).start()
    try:
        for _ in range(99):  # the first 20 kept, then none until the 100th
            _bump(x)
        torch.cuda.synchronize()
        session.buffers.bracket_after[torch.cuda.current_device()] = float("inf")
        with torch.cuda.stream(s):
            handle = ctypes.c_void_p(s.cuda_stream)
            assert cuda.cuStreamBeginCapture_v2(handle, 2) == 0  # (relaxed: the tool's calls may run)
            _bump(x)
            assert cuda.cuStreamEndCapture(handle, ctypes.byref(graph)) == 0
        assert cuda.cuGraphInstantiateWithFlags(ctypes.byref(exe), graph, ctypes.c_ulonglong(0)) == 0
        for _ in range(3):
            assert cuda.cuGraphLaunch(exe, handle) == 0
        s.synchronize()
    finally:
        res = session.stop()
    cuda.cuGraphExecDestroy(exe)
    cuda.cuGraphDestroy(graph)
    assert float(x.min()) == float(x.max()) == 99.0 + 3.0
    assert len(res.launches) == 20 and not any(r.all_zero for r in res.launches), res.messages
    assert any("does not follow ran unprofiled: bump_kernel x1" in m for m in res.messages), res.messages
