"""Measured perturbation (``--measure-overhead``).

A kernel the program launches several times through Triton's JIT has its launches alternate
between the instrumented build and the plain one (compiled as an autotuner's timing build is,
in the program's own cache). Each launch still runs exactly once, so outputs stay identical.
CUDA events recorded by the launch hooks, right before and right after the kernel itself (the
profile buffer's zeroing comes before the first), time each one. A gate kernel ahead of them
holds the stream until the host has enqueued the kernel and the end event (on an idle GPU an
event runs as soon as it is enqueued, and the time would include the host's work in between).
At the end each kernel gets its instrumented/plain ratio: the median over adjacent
(instrumented, plain) pairs after the first, with the 10th-90th percentile of the pairs as its
spread. Launches that ran plain are counted, not decoded. Launches made without the JIT
(Inductor's launchers, a library's cached kernels) or inside a CUDA graph capture are not
alternated.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Any

from proton_inject.collect.device_ops import in_tool_work, tool_work
from proton_inject.collect.launches import config_name

# Pairs per kernel and config: enough for a stable median; past it the kernel runs instrumented.
MAX_PAIRS = 100
# How long the gate holds a stream at most (a host that never opens it: the launch failed).
GATE_LIMIT_NS = 20_000_000
# Where the gate could not be built: GPU cycles of a spin queued instead (~100 us at an H100's
# clocks), which the host's work usually, not always, fits in.
PAD_CYCLES = 200_000


_NEVER_SHUT = 2**31 - 1  # a ticket past every other: every gate opens


class _Timing:
    """One kernel and config: its timed launches in order, (plain?, start event, end event)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.config: str | None = None  # its name as the launch metadata gives it
        self.turn = 0
        self.launches: list[tuple[bool, Any, Any]] = []


class OverheadMeasurement:
    """A session's collaborator for ``--measure-overhead``: alternate launches and time them.

    It needs the undo stack, the thread-local state it shares with the launch path (``tls``:
    ``measure``, ``measure_start``, ``pending``), the autotuning collaborator (plain builds;
    whether a launch is a tuner's), the compile hook (which kernels are instrumented), the run's
    result, and from the launch side ``stream_obj(handle, device)`` and ``before_kernel(p,
    stream)`` (a kept launch's own work, run after the gate)."""

    def __init__(self, patches: Any, tls: Any, autotune: Any, hook: Any, result: Any,
                 stream_obj: Any, before_kernel: Any) -> None:
        self.patches, self._tls, self.autotune, self.hook, self.result = patches, tls, autotune, hook, result
        self._stream_obj, self._before_kernel = stream_obj, before_kernel
        self._timings: dict[tuple, _Timing] = {}
        self._gates: dict[int, tuple[Any, Any]] = {}  # device: (kernel, its late count)
        self._ticket = 0  # the last one held
        self._gate_flag_host: Any = None

    def install(self) -> None:
        """Launch hooks around every launch (plain ones too: both are timed) and the JIT's
        ``run`` alternating builds; undone with the patches."""
        import triton

        knobs_rt = triton.knobs.runtime
        knobs_rt.launch_enter_hook.add(self._enter)
        knobs_rt.launch_exit_hook.add(self._exit)
        self.patches.on_undo(lambda: knobs_rt.launch_enter_hook.remove(self._enter))
        self.patches.on_undo(lambda: knobs_rt.launch_exit_hook.remove(self._exit))
        self._patch_run()

    def _enter(self, lazy: Any) -> None:
        if not in_tool_work() and getattr(self._tls, "measure", None) is not None:
            self._measure_enter(lazy)

    def _exit(self, lazy: Any) -> None:
        if not in_tool_work() and getattr(self._tls, "measure_start", None) is not None:
            self._measure_exit()  # the kernel's end, before our copy-out is queued

    def _patch_run(self) -> None:
        from triton.runtime.jit import JITFunction

        measure = self

        def wrap(orig: Any) -> Any:
            def run(jf: Any, *args: Any, grid: Any = None, warmup: bool = False, **kwargs: Any) -> Any:
                t = None if warmup else measure._timing_for(jf, kwargs)
                if t is None:
                    return orig(jf, *args, grid=grid, warmup=warmup, **kwargs)
                plain = t.turn % 2 == 1
                t.turn += 1
                measure._tls.measure = (t, plain)
                try:
                    if not plain:
                        return orig(jf, *args, grid=grid, warmup=warmup, **kwargs)
                    with measure.autotune.plain_builds():
                        return orig(jf, *args, grid=grid, warmup=warmup, **kwargs)
                finally:  # (a launch that failed between its hooks leaves nothing behind)
                    measure._tls.measure = measure._tls.measure_start = None
                    measure._open_gate()

            return run

        self.patches.patch(JITFunction, "run", wrap)
        self.patches.on_undo(lambda: self._open_gate(_NEVER_SHUT))

    def compile_gates(self) -> None:
        """The gate kernel for every device and the host-pinned flag it waits on, built before
        any hook is installed (as the bracket is). Without it a spin stands in."""
        import itertools

        import torch

        from proton_inject.collect import bracket, buffers, device_ops
        from proton_inject.collect._gate_kernel import launch_gate

        self._tickets = itertools.count(1)
        try:
            self._gate_flag = buffers._pinned(4).view(torch.int32)
            flag = self._gate_flag.numpy()  # written by the host, read by the gate
            flag[0] = 0
            self._gate_flag_host = flag
            for d in range(torch.cuda.device_count()):
                ck = bracket.compile_tool_kernel(
                    launch_gate, {"flag_ptr": "*i32", "ticket": "i32", "limit_ns": "i64", "late_ptr": "*i32"}, d)
                late = buffers._device_empty(4, d, inline=True).view(torch.int32)
                device_ops.zero(late, torch.cuda.current_stream(d).cuda_stream)
                self._gates[d] = (ck, late)
        except Exception as e:  # never stop profiling for it
            self._gates.clear()
            self.result.messages.append(f"warning: --measure-overhead's gate kernel could not be built "
                                        f"({e})"[:300] + "; a spin stands in")

    def _hold(self, stream: Any) -> None:
        """Hold the launch's stream until ``_open_gate``: the gate, or where it was not built
        a ~100 us spin (``torch.cuda._sleep``, private torch API; absent: nothing)."""
        import torch

        gate = self._gates.get(stream.device.index)
        with tool_work():
            if gate is not None:
                ck, late = gate
                self._ticket = ticket = next(self._tickets)
                ck.run(1, 1, 1, stream.cuda_stream, ck.function, ck.packed_metadata, None, None, None,
                       self._gate_flag, ticket, GATE_LIMIT_NS, late)
                return
            sleep = getattr(torch.cuda, "_sleep", None)
            if sleep is not None:
                with torch.cuda.stream(stream):
                    sleep(PAD_CYCLES)

    def _open_gate(self, ticket: int | None = None) -> None:
        """Let every gate up to ``ticket`` (the last one held) go."""
        flag = self._gate_flag_host
        if flag is not None:
            flag[0] = max(int(flag[0]), self._ticket if ticket is None else ticket)

    def _late_gates(self) -> int:
        """Gates that stopped on their time limit (after a synchronize)."""
        return sum(int(late.item()) for _, late in self._gates.values())

    def _timing_for(self, jf: Any, kwargs: dict[str, Any]) -> _Timing | None:
        """The kernel's timing record when this launch takes part; None to launch as usual."""
        if self.autotune.benchmarking is not None or self.autotune.building_plain:
            return None  # autotuner benchmarking: plain already, and not the program's launch
        import torch

        if torch.cuda.is_current_stream_capturing():
            return None
        name = getattr(jf, "__name__", "?")
        if not self.hook.source.wants(name) or name in self.hook.plain_only:
            return None
        config = tuple(sorted((k, v) for k, v in kwargs.items()
                              if isinstance(v, (int, float, str, bool)) and k not in ("debug",)))
        key = (name, config)
        t = self._timings.get(key)
        if t is None:
            t = self._timings[key] = _Timing(name)
        if len(t.launches) >= 2 * MAX_PAIRS:
            return None
        return t

    def _measure_enter(self, lazy: Any) -> None:
        """Right before a timed launch's kernel: the gate, then the launch's own work (its
        buffer's zeroing and clock bracket's first side, which so still run right before the
        kernel), then the start event."""
        m = getattr(self._tls, "measure", None)
        p = getattr(self._tls, "pending", None)
        deferred = p is not None and p.deferred_stream is not None
        if m is None or (lazy is None and not deferred):
            return
        import torch

        stream = self._stream_obj(p.deferred_stream if deferred else int(lazy.data.get("stream") or 0),
                                  torch.cuda.current_device())
        self._hold(stream)
        with tool_work():
            if deferred:
                self._before_kernel(p, stream.cuda_stream)
            if lazy is None:
                return
            start = torch.cuda.Event(enable_timing=True)
            start.record(stream)
        self._tls.measure_start = (m, start, stream)

    def _measure_exit(self) -> None:
        got = getattr(self._tls, "measure_start", None)
        self._tls.measure_start = None
        if got is None:
            return
        import torch

        (t, plain), start, stream = got
        with tool_work():
            end = torch.cuda.Event(enable_timing=True)
            end.record(stream)
        self._open_gate()
        t.launches.append((plain, start, end))
        pending = getattr(self._tls, "pending", None)  # an instrumented launch's: its config
        if t.config is None and not plain and pending is not None and pending.config is not None:
            t.config = config_name(pending.config)

    def results(self) -> tuple[dict[str, Any], list[str]]:
        """Per kernel: the ratio, its spread and counts (for run.json), and one line each."""
        import torch

        self._open_gate(_NEVER_SHUT)
        torch.cuda.synchronize()
        table, lines = overhead_table((t.name, t.config, [(plain, s.elapsed_time(e)) for plain, s, e in t.launches])
                                      for t in self._timings.values())
        late = self._late_gates()
        if late:
            lines.append(f"measured overhead: {late} timed launches waited past the gate's "
                         f"{GATE_LIMIT_NS // 1_000_000} ms limit: their times may hold the host's own")
        return table, lines


def _spread(values: list[float]) -> tuple[float, float, float]:
    """Median, 10th and 90th percentile (nearest rank) of some values."""
    v = sorted(values)
    return statistics.median(v), v[int(0.1 * (len(v) - 1))], v[int(round(0.9 * (len(v) - 1)))]


def overhead_table(timed: Iterable[tuple[str, str | None, list[tuple[bool, float]]]]
                   ) -> tuple[dict[str, Any], list[str]]:
    """``measured_overhead`` from each (kernel, config name)'s launches in order: (ran plain?,
    ms).

    Per kernel: the instrumented/plain ratio of adjacent (instrumented, plain) pairs and the
    instrumented - plain difference in us (what the records added to the kernel's own time: the
    launch's fixed cost, which dilutes a short kernel's ratio, cancels in it); median and
    10th-90th percentile of each, over all its configs, and the difference per config
    (``configs``: a config's extra time is its own; the report divides it by that config's
    kernel time)."""
    ratios: dict[str, list[float]] = {}
    extra_us: dict[str, list[float]] = {}
    per_config: dict[str, dict[str, list[float]]] = {}
    plain_runs: dict[str, int] = {}
    for name, config, launches in timed:
        # The first launch of each build is left out: it may load the module (CUDA's lazy
        # loading), which an H100 run showed as a 2.4x slower first plain launch.
        times = launches[2:]
        pairs = [(inst, plain_ms) for (p0, inst), (p1, plain_ms) in zip(times[::2], times[1::2], strict=False)
                 if not p0 and p1 and plain_ms > 0]
        ratios.setdefault(name, []).extend(i / p for i, p in pairs)
        extra = [1000.0 * (i - p) for i, p in pairs]
        extra_us.setdefault(name, []).extend(extra)
        if config is not None and extra:
            per_config.setdefault(name, {}).setdefault(config, []).extend(extra)
        plain_runs[name] = plain_runs.get(name, 0) + sum(1 for p, _ in launches if p)
    table: dict[str, Any] = {}
    lines = []
    for name in sorted(ratios):
        if not ratios[name]:
            table[name] = {"pairs": 0}
            lines.append(f"measured overhead: {name}: not measured (launched once)")
            continue
        med, lo, hi = _spread(ratios[name])
        n = len(ratios[name])
        table[name] = {"ratio": med, "p10": lo, "p90": hi, **_extra(extra_us[name]),
                       "launches_plain": plain_runs[name],
                       "configs": {c: _extra(x) for c, x in sorted(per_config.get(name, {}).items())}}
        lines.append(f"measured overhead: {name}: instrumented/plain kernel time {med:.3f} "
                     f"(p10..p90 {lo:.3f}..{hi:.3f}, {n} pairs; {table[name]['extra_us']:+.2f} us a "
                     f"launch; {plain_runs[name]} launches ran plain, not decoded)")
    return table, lines


def _extra(values: list[float]) -> dict[str, float]:
    """The extra time of some launch pairs (us): median, p10, p90 and how many."""
    med, lo, hi = _spread(values)
    return {"extra_us": round(med, 4), "extra_us_p10": round(lo, 4), "extra_us_p90": round(hi, 4),
            "pairs": len(values)}
