"""The C launcher (collect/fast_launch.c), on the CPU: it is compiled with Triton's build helper
and driven through a real session's launch path and slabs, a slab over host memory and, in
place of Triton's C entry point (which needs a GPU), a function that records what it is given.
tests/gpu/test_gpu_launch_path.py runs it on a GPU.

What is checked: a kept launch gets the same slab bytes and the same entry (but its number)
from the C launcher as from the Python one; a launch not kept goes to the entry point with the
throw-away buffer as the Python one sends it; everything the C path does not handle reaches the
Python path untouched; the program's own launch error is raised with the slab left usable; a
launch from inside a launch (a hook's) runs unprofiled; nothing leaks a reference.
"""

from __future__ import annotations

import shutil
import sys
import time
from types import SimpleNamespace

import pytest
import torch

from proton_inject.collect import fast_launch
from proton_inject.collect.keep_policy import KeepPolicy, LaunchCounts
from proton_inject.collect.launch_path import KernelLauncher
from proton_inject.collect.launches import _KernelInfo
from proton_inject.collect.session import Session
from proton_inject.collect.slabs import ALIGN, Slab
from proton_inject.instrument.rules import Rules

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None and shutil.which("clang") is None,
                                reason="no C compiler: the Python path serves every kept launch")

PER_CTA = 1000  # record bytes a CTA: a launch's bytes are not a multiple of ALIGN


class Entry:
    """Stands in for Triton's C entry point: records each call's grid, address and arguments."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.raise_next: Exception | None = None
        self.inside: object = None  # called from inside a launch, as a launch hook would

    def __call__(self, gx, gy, gz, stream, function, coop, pdl, global_scratch, address, *args):
        self.calls.append(((gx, gy, gz), stream, function, coop, pdl, global_scratch, address, args))
        if self.inside is not None:
            inside, self.inside = self.inside, None
            inside()
        if self.raise_next is not None:
            e, self.raise_next = self.raise_next, None
            raise e
        return None


class Inner:
    """The launcher Triton would call for a launch the fast path leaves (not profiled here)."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __call__(self, gx, gy, gz, stream, function, *args):
        self.calls.append(((gx, gy, gz), stream, args))


@pytest.fixture
def setup(tmp_path):
    session = Session(out=tmp_path / "t", source=Rules(loops="both"), keep="all")
    path, slabs = session.launch_path, session.slabs
    path._capturing_here = lambda: False  # (torch's CUDA query; no GPU here)
    path.active = True
    slabs._lock = fast_launch.lock_type()()  # (as LaunchPath.install makes it)
    slab = fast_launch.slab_type()(torch.zeros(1 << 20, dtype=torch.uint8), 0)  # (as the C launchers open)
    slab.opened += 3600  # (not shipped for its age while the test runs)
    slabs._open[0] = slab
    session.buffers.bracket_after[0] = float("inf")  # no clock bracket due
    build = SimpleNamespace(metadata=SimpleNamespace(num_ctas=1))  # (the launcher reads its CTAs alone)
    info = _KernelInfo("k", "h", True, PER_CTA, build, config={"BLOCK": 64})
    w = KernelLauncher(Inner(), info, fast_launch.counts_type()("k", path.policy), path, 0)  # (the C twin)
    w.direct, w.coop, w.pdl, w.per_cta = Entry(), False, True, PER_CTA
    w.counts.seen = 10  # past each build's first (bracketed) launches
    return session, path, slabs, slab, w


def _launch_here(w, *args):
    return w(2, 1, 1, 7, "fn", *args)  # (this line is the program's frame: the call site)


def _python_slab_launches(slabs) -> list:
    """Counts the launches that went through the Python path's Slabs.launch from now on."""
    seen, python_path = [], slabs.launch
    slabs.launch = lambda *a: (seen.append(1), python_path(*a))[1]
    return seen


def _c_twin(setup):
    """The C launcher of the Python one the set-up made (the same build, counts and entry)."""
    session, path, slabs, slab, w = setup
    path.fast = fast_launch.make(path, slabs, session.sink, session.buffers)
    return fast_launch.launcher(path.fast, w.inner, w.info, w.counts, path, 0, w.direct, w.coop, w.pdl,
                                w.per_cta)


def _launch_twice(setup, fast: bool):
    session, path, slabs, slab, w = setup
    if fast:
        w = _c_twin(setup)
    python = _python_slab_launches(slabs)
    _launch_here(w, "a", 1)
    _launch_here(w, "b", 2)
    del slabs.launch
    assert len(python) == (0 if fast else 2)
    return slab, w


def test_the_c_path_keeps_a_launch_as_the_python_path_does(setup):
    session, path, slabs, slab, w = setup
    slab_c, w_c = _launch_twice(setup, fast=True)
    got_c = [e[1:] for e in slab_c.launches]
    calls_c = list(w_c.direct.calls)
    used_c, kept_c = slab_c.used, path.kept
    # The same again through the Python path, in a fresh slab.
    slab.launches.clear()
    slab.used = 0
    path.kept = 0
    w.direct.calls.clear()
    slab_p, w_p = _launch_twice(setup, fast=False)
    got_p = [e[1:] for e in slab_p.launches]
    assert w_c.inner.calls == [] and w_p.inner.calls == []
    assert got_c == got_p and calls_c == w_p.direct.calls and used_c == slab_p.used and kept_c == path.kept
    step = -(-2 * PER_CTA // ALIGN) * ALIGN
    assert [c[6] for c in calls_c] == [slab.base, slab.base + step]
    assert [c[7] for c in calls_c] == [("a", 1), ("b", 2)] and calls_c[0][3:6] == (False, True, None)
    info, grid, stream, device, config, tuning, site, offset, nbytes, bracket = got_c[0]
    assert (info, grid, stream, device, config, tuning) == (w.info, (2, 1, 1), 7, 0, {"BLOCK": 64}, False)
    assert site[0] == __file__ and site[2] == "_launch_here", site
    assert (offset, nbytes, bracket) == (0, 2 * PER_CTA, None)
    assert slab.streams == {7}


def test_what_the_c_path_leaves_reaches_the_python_path(setup):
    session, path, slabs, slab, w = setup
    w = _c_twin(setup)
    w.counts.seen = 0  # a build's first launches: bracketed, by the Python path
    _launch_here(w)
    assert len(slab.launches) == 1 and w.direct.calls  # (the Python path kept it, in the slab)
    w.counts.seen = 10
    path._tls.tuning = "inductor"  # an autotuner timing: dropped by the Python path
    try:
        _launch_here(w)
    finally:
        path._tls.tuning = None
    assert len(w.inner.calls) == 1 and len(slab.launches) == 1
    slab.used = slab.size - 10  # full: the Python path ships it (no GPU: no new slab, unprofiled)
    _launch_here(w)
    assert len(w.inner.calls) == 2 and 0 not in slabs._open


def test_the_programs_launch_error_is_raised_and_the_slab_stays_usable(setup):
    session, path, slabs, slab, w = setup
    w = _c_twin(setup)
    w.direct.raise_next = RuntimeError("an illegal argument")
    with pytest.raises(RuntimeError, match="illegal argument"):
        _launch_here(w)
    assert slab.launches == [] and slabs._depth == 0
    _launch_here(w)  # (the lock was released)
    assert len(slab.launches) == 1


@pytest.mark.parametrize("fast", [True, False], ids=["C", "Python"])
def test_a_launch_from_inside_a_launch_runs_unprofiled(setup, fast):
    session, path, slabs, slab, w = setup  # (the Python launcher: the reference behaves the same)
    w = _c_twin(setup) if fast else w
    w.direct.inside = lambda: _launch_here(w, "hook")
    _launch_here(w, "outer")
    assert [c[2] for c in w.inner.calls] == [("hook",)]
    assert len(slab.launches) == 1 and slabs._depth == 0


def test_no_reference_is_leaked(setup):
    session, path, slabs, slab, w = setup
    w = _c_twin(setup)
    config, info = w.info.config, w.info
    for _ in range(3):
        _launch_here(w, "warm")
    slab.launches.clear()
    w.direct.calls.clear()
    before = sys.getrefcount(config), sys.getrefcount(info), sys.getrefcount(slab)
    python = _python_slab_launches(slabs)
    for _ in range(200):
        _launch_here(w, "x")
    assert not python and len(slab.launches) == 200
    del slabs.launch
    slab.launches.clear()
    w.direct.calls.clear()
    assert (sys.getrefcount(config), sys.getrefcount(info), sys.getrefcount(slab)) == before


def test_the_c_path_s_entries_wait_in_the_slab_and_are_read_in_launch_order(setup):
    """A kept launch of the C path leaves its entry in the slab as C fields; reading
    ``launches`` makes them tuples, before a Python-path launch appends its own."""
    session, path, slabs, slab, w = setup
    c = _c_twin(setup)
    config = w.info.config
    refs = sys.getrefcount(config)
    for launcher in (c, c, c, w, c, c):  # (w: the Python launcher, through Slabs.launch)
        _launch_here(launcher, "x")
    got = slab.launches
    assert [e[8] for e in got] == sorted(e[8] for e in got) and len(got) == 6
    assert [e[0] for e in got] == list(range(got[0][0], got[0][0] + 6))  # one count, in launch order
    assert got[0][1:8] == got[3][1:8] and got[0][2] is got[1][2]  # one grid tuple while it repeats
    got.clear()
    assert sys.getrefcount(config) == refs
    other = fast_launch.slab_type()(torch.zeros(1 << 16, dtype=torch.uint8), 0)
    other.opened += 3600
    slabs._open[0] = other
    for _ in range(4):
        _launch_here(c, "y")  # pending in `other`, never read
    assert sys.getrefcount(config) > refs
    slabs._open[0] = slab
    del other
    assert sys.getrefcount(config) == refs  # released with the slab


def test_the_kept_count_is_held_by_the_c_state_while_it_is_on(setup):
    session, path, slabs, slab, w = setup
    path.kept = 5  # (kept before the C launchers were made)
    c = _c_twin(setup)
    assert path.fast.kept == 5
    _launch_here(c, "x")  # the C path counts it
    _launch_here(w, "y")  # the Python path too, through the same count
    assert path.kept == 7 and path.fast.kept == 7
    path.uninstall()  # the count back in the path
    assert path.fast is None and path.kept == 7


def test_the_slabs_lock_in_c_is_re_entrant_and_owned_by_one_thread():
    import threading

    lock = fast_launch.lock_type()()
    with lock, lock:  # (a launch hook's launch inside a launch)
        got = []
        t = threading.Thread(target=lambda: (lock.acquire(), got.append(1), lock.release()))
        t.start()
        t.join(0.2)
        assert t.is_alive() and not got  # another thread waits, without the GIL
        errors = []

        def release_elsewhere():
            try:
                lock.release()
            except RuntimeError as e:
                errors.append(e)

        other = threading.Thread(target=release_elsewhere)
        other.start()
        other.join(5)
        assert len(errors) == 1  # only its owner releases it
    t.join(5)
    assert got == [1]
    with pytest.raises(RuntimeError, match="un-acquired"):
        lock.release()


def test_a_python_rlock_as_the_slabs_lock_still_serves_the_c_path(setup):
    import threading

    session, path, slabs, slab, w = setup
    slabs._lock = threading.RLock()  # (the Python path's own, where a test or a caller gives one)
    c = _c_twin(setup)
    python = _python_slab_launches(slabs)
    _launch_here(c, "x")
    assert not python and len(slab.launches) == 1 and not slabs._lock._is_owned()


def test_a_launch_not_kept_goes_to_the_entry_point_as_from_the_python_launcher(setup):
    session, path, slabs, slab, w = setup
    discard = torch.zeros(8)  # (stands in for the throw-away device buffer)
    w.counts.next_keep = float("inf")
    w.discard, w.discard_bytes = discard, 2 * PER_CTA
    c = _c_twin(setup)
    c.discard, c.discard_bytes = discard, 2 * PER_CTA
    for launcher in (w, c):
        _launch_here(launcher, "n", 3)
    assert w.direct.calls[0] == w.direct.calls[1] == ((2, 1, 1), 7, "fn", False, True, None, discard, ("n", 3))
    assert w.counts.seen == 12 and slab.launches == [] and not w.inner.calls
    c.discard_bytes = PER_CTA  # too small for 2 CTAs: LaunchPath.not_kept, Triton's own launcher
    # (which asks the profile allocator for a throw-away buffer; here one of host memory)
    host = torch.zeros(4 * PER_CTA, dtype=torch.uint8)
    session.buffers.discard._bufs.append(SimpleNamespace(
        numel=host.numel, data_ptr=host.data_ptr, device=SimpleNamespace(index=0)))
    _launch_here(c, "m")
    assert [x[2] for x in w.inner.calls] == [("m",)] and len(w.direct.calls) == 2
    # the next ones get it by its address: Triton's entry point takes an int without a call
    assert (c.discard, c.discard_bytes) == (host.data_ptr(), 4 * PER_CTA)
    _launch_here(c, "k")
    assert w.direct.calls[2][6] == host.data_ptr() and len(w.inner.calls) == 1


def test_a_launch_not_kept_runs_the_plain_twin_from_either_launcher(setup):
    session, path, slabs, slab, w = setup
    w.counts.next_keep = float("inf")
    w.discard, w.discard_bytes = torch.zeros(8), 2 * PER_CTA  # (unused with a twin)
    c = _c_twin(setup)
    c.discard, c.discard_bytes = w.discard, w.discard_bytes
    assert c.plain_fn is None and c.plain_meta is None  # no twin until one loads
    for launcher in (w, c):
        launcher.plain_fn, launcher.plain_meta = "plain fn", "plain meta"
        _launch_here(launcher, "packed", "launch meta", 3)
    # the twin's function and packed metadata, no profile scratch, the rest as Triton gave it
    want = ((2, 1, 1), 7, "plain fn", False, True, None, None, ("plain meta", "launch meta", 3))
    assert w.direct.calls == [want, want]
    assert w.counts.seen == 12 and slab.launches == [] and not w.inner.calls
    w.counts.next_keep = 0  # a launch kept runs the instrumented build, into the slab
    _launch_here(c, "packed", "launch meta", 3)
    assert w.direct.calls[2][2] == "fn" and w.direct.calls[2][7][0] == "packed" and len(slab.launches) == 1
    c.plain_fn = None  # (a twin that failed: the throw-away buffer, as before)
    c.counts.next_keep = float("inf")
    _launch_here(c, "packed")
    assert w.direct.calls[3][2] == "fn" and w.direct.calls[3][6] is w.discard


def test_the_c_launcher_stands_in_for_triton_s_launcher(setup):
    import copy

    session, path, slabs, slab, w = setup
    w.inner.global_scratch_size = 0
    c = _c_twin(setup)
    assert c.global_scratch_size == 0 and c.inner is w.inner and c.per_cta == PER_CTA
    assert copy.copy(c) is c and copy.deepcopy(c) is c
    with pytest.raises(AttributeError):
        c.no_such_attribute  # noqa: B018


def test_a_slab_of_the_python_class_is_left_to_the_python_path(setup):
    session, path, slabs, slab, w = setup
    c = _c_twin(setup)
    py_slab = Slab(torch.zeros(1 << 16, dtype=torch.uint8), 0)  # (a session without C launchers opens these)
    py_slab.opened += 3600
    slabs._open[0] = py_slab
    python = _python_slab_launches(slabs)
    refs = sys.getrefcount(py_slab)
    _launch_here(c, "p")
    del slabs.launch
    assert len(python) == 1 and len(py_slab.launches) == 1 and c.direct.calls[-1][6] == py_slab.base
    assert sys.getrefcount(py_slab) == refs  # (the C path looked at it and let it be)


@pytest.mark.parametrize("every", [1, 0])
def test_counts_of_either_class_count_and_keep_alike(setup, every):
    """The Python launcher with the Python counts, the C one with the C counts (it takes no
    other): the same counts, next keeps and launches kept."""
    session, path, slabs, slab, w = setup
    path.policy = KeepPolicy(first=0, every=every, total=None)
    c = _c_twin(setup)  # (its policy: the path's as it is made)
    w.counts = LaunchCounts("k", path.policy)
    got = []
    for launcher in (w, c):
        launcher.counts.seen, launcher.counts.next_keep = 10, 11  # the next launch is kept
        kept, plain = len(w.direct.calls), len(w.inner.calls)
        _launch_here(launcher, "x")
        _launch_here(launcher, "y")  # kept again with every=1; with every=0, never again
        got.append((launcher.counts.seen, float(launcher.counts.next_keep), len(w.direct.calls) - kept,
                    len(w.inner.calls) - plain))
    assert got[0] == got[1] == [(12, 13.0, 2, 0), (12, float("inf"), 1, 1)][every == 0]
    with pytest.raises(TypeError):  # (the C launcher reads its counts as C fields)
        fast_launch.launcher(path.fast, w.inner, w.info, w.counts, path, 0, w.direct, w.coop, w.pdl, w.per_cta)


def test_either_launcher_keeps_within_the_policys_rate(setup):
    """Past a build's first launches the policy keeps at most its rate a second (a second's
    worth at once): both launchers, sharing the path's count, keep 2 of 5 and send the rest
    to Triton's own launcher; the count is the path's whichever launcher keeps."""
    session, path, slabs, slab, w = setup
    path.policy = KeepPolicy(first=0, every=1, total=None, rate=2)
    path.started = time.perf_counter()
    c = _c_twin(setup)
    w.counts = LaunchCounts("k", path.policy)
    got = []
    for launcher in (w, c):
        path.sampled = 0
        path.started = path.fast.started = time.perf_counter()  # (the C launchers hold their own copy)
        kept, plain = len(w.direct.calls), len(w.inner.calls)
        for _ in range(5):
            _launch_here(launcher, "x")
        got.append((len(w.direct.calls) - kept, len(w.inner.calls) - plain, path.sampled))
    assert got == [(2, 3, 2), (2, 3, 2)]


def _first_launches(s):
    pass  # (a build's first launches, bracketed: its count is set to 1 below)


def _tuning(s):
    s[1]._tls.tuning = "a tuner"


def _measured(s):
    s[1]._tls.measure = object()


def _tool_work(s):
    from proton_inject.collect import device_ops

    device_ops._state.depth = 1


def _total_reached(s):
    s[1].policy = KeepPolicy(first=0, every=1, total=3)
    s[1].kept = 3


def _bracket_due(s):
    s[0].buffers.bracket_after[0] = 0.0


def _capture_under_way(s):
    s[1]._capturing_here = lambda: True  # (a capture by an API we do not follow)


def _graph_capture(s):
    s[1].capturing = 1


def _slab_too_old(s):
    s[3].opened -= 7200


def _no_slab_open(s):
    s[2]._open.clear()


def _inside_a_launch(s):
    s[2]._depth = 1


LEFT_CASES = [_first_launches, _tuning, _measured, _tool_work, _total_reached, _bracket_due, _capture_under_way,
              _graph_capture, _slab_too_old, _no_slab_open, _inside_a_launch]


@pytest.mark.parametrize("case", LEFT_CASES, ids=lambda f: f.__name__.strip("_"))
def test_every_case_the_c_path_does_not_handle_goes_to_the_python_path_untouched(setup, case):
    """Each case set up, the same launch through the Python launcher and then the C one (made
    after the case: it reads the policy then), the Python path's slab launch answering
    NOT_TAKEN so that both end in Triton's own launcher: the C one must not have called the
    entry point, taken slab bytes, counted a kept launch or drawn a launch number of its own."""
    session, path, slabs, slab, w = setup
    from proton_inject.collect import device_ops
    from proton_inject.collect.slabs import NOT_TAKEN

    got = []
    for make in (lambda: w, lambda: _c_twin(setup)):
        case(setup)
        launcher = make()
        w.counts.seen, w.counts.next_keep = (1 if case is _first_launches else 10), 0  # (kept by the policy)
        slabs.launch = lambda *a: NOT_TAKEN
        seq, kept, used = session.sink.next_seq(), path.kept, slab.used
        try:
            _launch_here(launcher, "left")
        finally:
            del slabs.launch
            path._tls.tuning = path._tls.measure = None
            device_ops._state.depth = 0
        got.append((len(launcher.direct.calls), launcher.inner.calls[-1][2], path.kept - kept, slab.used - used,
                    len(slab.launches), session.sink.next_seq() - seq))
    assert got[0] == got[1] and got[0][:5] == (0, ("left",), 0, 0, 0), got


def test_the_driver_s_capture_query_is_asked_of_the_launch_s_stream(setup):
    """Where the CUDA driver is loaded, the C path asks its cuStreamIsCapturing about the
    launch's own stream instead of torch's query: a function of the same C type stands in."""
    import ctypes

    from proton_inject.collect.slabs import NOT_TAKEN

    session, path, slabs, slab, w = setup
    asked, answer = [], {"rc": 0, "status": 0}

    @ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int))
    def query(stream, status):
        asked.append(stream or 0)
        status[0] = answer["status"]
        return answer["rc"]

    path._capturing_here = lambda: True  # torch's query: not asked where the driver's is
    path.fast = fast_launch.make(path, slabs, session.sink, session.buffers,
                                 stream_query=ctypes.cast(query, ctypes.c_void_p).value)
    c = fast_launch.launcher(path.fast, w.inner, w.info, w.counts, path, 0, w.direct, w.coop, w.pdl, w.per_cta)
    _launch_here(c, "kept")
    assert asked == [7] and len(slab.launches) == 1 and len(w.direct.calls) == 1
    slabs.launch = lambda *a: NOT_TAKEN  # (the Python path: its own buffer would need a GPU)
    for rc, status in ((0, 1), (0, 2), (999, 0)):  # capturing, capture invalidated, an error
        answer.update(rc=rc, status=status)
        _launch_here(c, "left")
    del slabs.launch
    assert asked == [7] * 4 and len(slab.launches) == 1 and len(w.direct.calls) == 1
    assert [x[2] for x in w.inner.calls] == [("left",)] * 3


def test_a_launch_by_an_autotuner_is_kept_with_its_best_config_as_by_the_python_path(setup):
    import triton

    session, path, slabs, slab, w = setup
    path._tls.autotuner = SimpleNamespace(best_config=triton.Config({"BLOCK": 128}, num_warps=8))
    try:
        configs = []
        for launcher in (w, _c_twin(setup)):
            python = _python_slab_launches(slabs)
            _launch_here(launcher, "tuned")
            del slabs.launch
            configs.append((slab.launches[-1][5], len(python)))
    finally:
        path._tls.autotuner = None
    assert configs[0][0] == configs[1][0] and configs[0][0]["BLOCK"] == 128, configs
    assert (configs[0][1], configs[1][1]) == (1, 0)  # the Python path, then the C path, kept it


def test_a_shipped_slab_s_entries_are_read_as_slab_launches_only_when_saved():
    """The ship (on the program's thread) hands the slab's entries over as they are; the save
    (the writer's) reads them as SlabLaunch, in launch order."""
    from proton_inject.collect.slabs import SlabBatch, SlabLaunch

    info = SimpleNamespace(name="k")
    entries = [(s, info, (1, 1, 1), 7, 0, {}, False, None, s * ALIGN, 100, None) for s in range(3)]
    batch = SlabBatch(SimpleNamespace(launches=entries))
    assert batch._launches is None  # nothing made yet
    got = batch.launches
    assert all(isinstance(e, SlabLaunch) for e in got) and [e.seq for e in got] == [0, 1, 2]
    assert got[2].offset == 2 * ALIGN and batch.launches is got and batch.label == "3 launches of k"
