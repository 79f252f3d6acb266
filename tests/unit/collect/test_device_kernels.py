"""--auto's timing of every kernel (collect/device_kernels.py) with torch's real profiler.

Without a GPU the profiler records CPU activity only; the same code path takes it here, so a
program that starts a torch.profiler of its own while ours runs is checked for real: ours
stops first and says so, theirs records as it would without the tool."""

from __future__ import annotations

import torch
from torch.profiler import ProfilerActivity, profile

from proton_inject.collect.device_kernels import DeviceKernelTimes, device_kernel_events
from proton_inject.collect.patches import Patches


def test_a_program_profiler_of_its_own_takes_over():
    patches = Patches()
    times = DeviceKernelTimes("CPU")
    times.start(patches)
    try:
        assert times._prof is not None and not times.notes
        x = torch.ones(64)
        with profile(activities=[ProfilerActivity.CPU]) as theirs:
            (x * 3).sum()
        assert "aten::mul" in {e.name for e in theirs.events()}
        assert times._prof is None
        assert times.notes == ["the program started a torch.profiler of its own: kernel times cover its "
                               "run up to then"]
        times.stop()  # (at the session's end: nothing more to do)
        assert len(times.notes) == 1
    finally:
        patches.undo_all()
    # The patch is undone: a profiler afterwards is torch's own again.
    with profile(activities=[ProfilerActivity.CPU]) as later:
        torch.ones(4) + 1
    assert "aten::add" in {e.name for e in later.events()}


def test_only_device_side_events_count_as_kernels():
    times = DeviceKernelTimes("CPU")
    patches = Patches()
    times.start(patches)
    torch.ones(256).cumsum(0)
    prof = times._prof
    times.stop()
    patches.undo_all()
    events = list(prof.kineto_results.events())
    assert any(ev.name() == "aten::cumsum" for ev in events)  # host-side ops were seen ...
    assert list(device_kernel_events(events)) == [] and times.kernels == {}  # ... and are no kernels


def test_a_profiler_that_cannot_start_leaves_a_note():
    times = DeviceKernelTimes("NO_SUCH_ACTIVITY")
    patches = Patches()
    times.start(patches)
    patches.undo_all()
    times.stop()
    assert times.kernels == {} and "torch.profiler did not start" in times.notes[0]


def test_the_timer_stops_when_the_keep_policy_is_spent_on_its_own_thread_only(tmp_path):
    """Its records grow with the launches: it stops where the kept launches stop (the launch
    path's total), on the thread that started it; on another thread it runs on to the end."""
    import threading

    from proton_inject.collect.session import Session

    session = Session(out=tmp_path / "t", keep="first=1,every=1,max=1")
    path = session.launch_path
    times = DeviceKernelTimes("CPU")
    patches = Patches()
    times.start(patches)
    try:
        path.on_quota_spent = times.quota_spent  # (as Session.start wires it)
        elsewhere = threading.Thread(target=times.quota_spent)
        elsewhere.start()
        elsewhere.join()
        assert times._prof is not None and not times.notes  # (not the starting thread: runs on)
        path._quota_spent()
        assert times._prof is None and path.on_quota_spent is None
        assert times.notes == ["kernel times cover the run until the profile kept all it keeps "
                               "(--keep-launches max), as the kept launches' regions do; the launches "
                               "counted run to the end"]
        path._quota_spent()  # (once only)
        assert len(times.notes) == 1
    finally:
        patches.undo_all()


def test_starting_the_timer_imports_no_inductor_and_prints_nothing():
    """torch.profiler's own start imports torch._inductor (seconds of a profile's start);
    ours does not, and torch's profiler warnings stay off the program's stderr."""
    import subprocess
    import sys

    code = """if True:
        import sys, torch
        from proton_inject.collect.device_kernels import DeviceKernelTimes
        from proton_inject.collect.patches import Patches
        times = DeviceKernelTimes("CPU")
        patches = Patches()
        for _ in range(2):  # (a second start is where torch warns about its settings)
            times.start(patches)
            torch.ones(8).sum()
            times.stop()
        patches.undo_all()
        assert not times.notes, times.notes
        print("inductor" if "torch._inductor" in sys.modules else "none")
    """
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "none"
    assert "Warning" not in p.stderr, p.stderr
