"""Every kernel's GPU time, whoever launched it, for ``profile --auto``.

Our records see only the Triton kernels we instrument; cuBLAS, cuDNN, NCCL and torch's own
kernels often hold most of a program's GPU time, and only CUPTI sees them. torch's profiler
drives CUPTI: with CUDA activity alone it keeps one record per kernel launch and costs the
host a little per launch (plain ``profile`` runs without it). Copies, memsets and the tool's
own kernels are left out of the table.

A program that starts a torch.profiler of its own would be refused while ours runs (one
profiler per process): ours stops first, keeps what it has seen, and says so. The profiler holds
a record per launch until it stops: it stops when the keep policy's total is reached (the
launches kept, whose regions are opened up, cover the run up to there too), so a long run's
memory stays bounded.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from proton_inject.formats.auto_report import DeviceKernel, write_device_kernels

# Kernels the tool launches itself (collect/_clock_kernel.py, collect/_gate_kernel.py).
TOOL_KERNELS = frozenset({"clock_bracket", "launch_gate"})
NOT_KERNELS = ("Memcpy", "Memset", "Activity Buffer", "cudaDeviceSynchronize", "cudaStreamSynchronize")


class DeviceKernelTimes:
    """torch.profiler's CUDA activity over the program's run, summed per kernel name."""

    def __init__(self, activity: str = "CUDA") -> None:
        self.activity = activity  # (tests on a machine without a GPU take "CPU": the same profiler)
        self._prof: Any = None
        self._thread = 0  # the thread that started it
        self.kernels: dict[str, DeviceKernel] = {}
        self.notes: list[str] = []

    def start(self, patches: Any) -> None:
        """Start timing every kernel; a note (and no table) where torch's profiler cannot."""
        try:
            import torch
            from torch.autograd.profiler import profile
            from torch.profiler import ProfilerActivity

            # torch.autograd's profiler, which torch.profiler's wraps: that one's start imports
            # Inductor (4.6 s on an H200, for a cudagraphs setting we do not read) first.
            cuda = getattr(ProfilerActivity, self.activity) == ProfilerActivity.CUDA
            prof = profile(use_cpu=not cuda, use_device="cuda" if cuda else None, use_kineto=True)
            times = self

            def prepare(orig: Any) -> Any:
                def wrapper(p: Any, *args: Any, **kwargs: Any) -> Any:
                    if times._prof is not None and p is not times._prof:
                        times.stop("the program started a torch.profiler of its own: kernel times "
                                   "cover its run up to then")
                    return orig(p, *args, **kwargs)

                return wrapper

            patches.patch(torch.autograd.profiler.profile, "_prepare_trace", prepare)
            self._prof, self._thread = prof, threading.get_ident()
            with quiet_torch():
                prof.__enter__()
        except Exception as e:  # (an old torch, CUPTI missing): the ranking is of Triton kernels only
            self._prof = None
            self.notes.append(f"other kernels' GPU time not measured: torch.profiler did not start "
                              f"({str(e)[:200]}); shares are of the Triton kernels' time alone")

    def quota_spent(self) -> None:
        """The keep policy's total is reached: stop timing, where this is the thread that started
        it (torch's profiler stops on that thread only; elsewhere it runs on to the end)."""
        if self._prof is not None and threading.get_ident() == self._thread:
            self.stop("kernel times cover the run until the profile kept all it keeps (--keep-launches "
                      "max), as the kept launches' regions do; the launches counted run to the end")

    def stop(self, why: str | None = None) -> None:
        """Stop timing and sum what the profiler saw per kernel name (``why``: a note on what
        the times then leave out)."""
        prof, self._prof = self._prof, None
        if prof is None:
            return
        if why:
            self.notes.append(why)
        try:
            with quiet_torch():
                prof.__exit__(None, None, None)
            events = prof.kineto_results.events()
        except Exception as e:
            self.notes.append(f"other kernels' GPU time not measured: torch.profiler failed at its stop "
                              f"({str(e)[:200]}); shares are of the Triton kernels' time alone")
            return
        for name, ns in device_kernel_events(events):
            k = self.kernels.setdefault(name, DeviceKernel(kernel=name, ns=0.0, launches=0))
            k["ns"] += ns
            k["launches"] += 1

    def finish(self, out: str | os.PathLike) -> None:
        """Stop timing and write OUT/device-kernels.json (formats/auto_report.py)."""
        self.stop()
        write_device_kernels(out, list(self.kernels.values()), self.notes)


@contextmanager
def quiet_torch() -> Iterator[None]:
    """Torch's profiler warns about its own settings (events cleared each cycle): the program's
    stderr gets no line of ours it did not ask for."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        yield


def device_kernel_events(events: Any) -> Any:
    """(name, duration ns) of the kernels among torch.profiler's events: device-side, no
    copies, memsets or tool kernels."""
    from torch.autograd import DeviceType

    for ev in events:
        if ev.device_type() != DeviceType.CUDA:
            continue
        name = ev.name()
        if name in TOOL_KERNELS or name.startswith(NOT_KERNELS):
            continue
        yield name, float(ev.duration_ns())
