"""The launch path: each instrumented build's own launcher, wrapped; nothing on other launches.

No global launch hook is installed (with one, Triton builds launch metadata for every launch of
every kernel, and Inductor bakes that into the launchers it generates). Instead, when a build of
this session loads (``CompiledKernel._init_handles``), an instrumented one gets its launcher
wrapped in a ``KernelLauncher``: one counter compare a launch decides by the ``KeepPolicy``
whether the launch is kept. A launch not kept goes straight to Triton's launcher (its records
go to a throw-away buffer), or with plain twins on, to the program's own build of the kernel
(plain_twins.py); a kept one gets a pooled, already zeroed buffer, and its copy to the
host is queued for the raw writer. Plain builds (the program's own, the ones autotuners time)
are never wrapped. When the session stops, every wrapped build gets its own launcher back.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from proton_inject.collect import fast_launch, plain_twins
from proton_inject.collect.buffers import BRACKETED_FIRST
from proton_inject.collect.call_site import call_site, program_frame
from proton_inject.collect.device_ops import in_tool_work, tool_work
from proton_inject.collect.keep_policy import NEVER, KeepPolicy, LaunchCounts
from proton_inject.collect.launches import _KernelInfo, _Pending, config_of_autotune, config_of_kernel
from proton_inject.collect.slabs import NOT_TAKEN


def _current_device() -> int:
    import torch

    return torch._C._cuda_getDevice()


def entry_point(inner: Any, info: _KernelInfo) -> tuple[Any, Any, Any, int]:
    """(Triton's C entry point or None, its cooperative and PDL flags, record bytes a CTA) of
    the launcher ``inner`` of an instrumented build."""
    per_cta = int(getattr(info.ck.metadata, "num_ctas", 1) or 1) * info.scratch
    # Triton's CUDA launcher with no global scratch: its entry point can take our buffer.
    plain_entry = (type(inner).__name__ == "CudaLauncher" and not getattr(inner, "global_scratch_size", 1)
                   and all(hasattr(inner, a) for a in ("launch", "launch_cooperative_grid", "launch_pdl")))
    return (inner.launch if plain_entry else None, getattr(inner, "launch_cooperative_grid", False),
            getattr(inner, "launch_pdl", False), per_cta)


class _CountedInC:
    """A count of the path's held in the C launchers' shared state while they are on (they
    count without a Python attribute write), else on the path as ``_NAME``."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name, self.own = name, "_" + name

    def __get__(self, path: Any, owner: type | None = None) -> Any:
        if path is None:  # (the class's attribute)
            return self
        return getattr(path, self.own) if path.fast is None else getattr(path.fast, self.name)

    def __set__(self, path: Any, n: int) -> None:
        setattr(*((path, self.own) if path.fast is None else (path.fast, self.name)), n)


class KernelLauncher:
    """An instrumented build's launcher as Triton calls it (``CompiledKernel.run``): counts
    the launch and, when the policy keeps it, hands it to the session's ``LaunchPath``. A
    launch not kept goes to the launcher's own C entry point with a throw-away buffer, as
    Triton's launcher would after asking the profile allocator (one Python call less than a
    plain launch of the same build). Its C twin (``fast_launch.Launcher``, the usual one) does
    the same and keeps the usual kept launch itself; this one serves where C cannot be built."""

    __slots__ = ("inner", "info", "counts", "path", "device", "direct", "coop", "pdl", "per_cta", "discard",
                 "discard_bytes", "plain_fn", "plain_meta")

    def __init__(self, inner: Any, info: _KernelInfo, counts: LaunchCounts, path: LaunchPath,
                 device: int) -> None:
        self.inner, self.info, self.counts, self.path, self.device = inner, info, counts, path, device
        self.direct, self.coop, self.pdl, self.per_cta = entry_point(inner, info)
        self.discard, self.discard_bytes = None, -1
        self.plain_fn = self.plain_meta = None  # the plain twin's function and packed metadata

    def __call__(self, gx: int, gy: int, gz: int, stream: int, function: Any, *args: Any) -> Any:
        c = self.counts
        c.seen += 1
        if (c.seen < c.next_keep or not self.path.within_rate(c)) and not self.path.capturing:
            if self.plain_fn is not None and args:  # (args[0]: the packed metadata)
                return self.direct(gx, gy, gz, stream, self.plain_fn, self.coop, self.pdl, None, None,
                                   self.plain_meta, *args[1:])
            if self.direct is not None and gx * gy * gz * self.per_cta <= self.discard_bytes:
                return self.direct(gx, gy, gz, stream, function, self.coop, self.pdl, None,
                                   self.discard, *args)
            return self.path.not_kept(self, gx, gy, gz, stream, function, args)
        return self.path.launch(self, gx, gy, gz, stream, function, args)

    def __getattr__(self, name: str) -> Any:  # the launcher's own attributes, as before
        if name in KernelLauncher.__slots__:  # (not set yet: a copy being made)
            raise AttributeError(name)
        return getattr(self.inner, name)


class LaunchPath:
    """Wraps instrumented builds' launchers as they load, keeps launches by the policy, counts
    every launch per build, and gives each build its launcher back at the end."""

    def __init__(self, policy: KeepPolicy, bound_reason: str, tls: Any, autotune: Any, hook: Any,
                 compiler: Any, count_drop: Any) -> None:
        """``tls``: the thread-local state shared with the buffers (``buffer``, ``pending``) and
        the autotuners (``autotuner``); ``autotune``: whether a launch is a tuner's and whether
        plain builds are being made; ``hook``: which builds it compiled; ``compiler``: advice
        when an instrumented build does not fit; ``count_drop(reason)``: a launch not kept.
        The kept side (``connect``) is given once it is made: it needs this path's captures."""
        self._tls, self.autotune, self.hook, self.compiler, self._count_drop = (
            tls, autotune, hook, compiler, count_drop)
        self.buffers: Any = None
        self.sink: Any = None
        self.graphs: Any = None
        self.slabs: Any = None
        self.policy = policy
        self.bound_reason = bound_reason  # what a launch past the total is counted under
        self._kept = 0  # launches kept in all, while the C launchers are off (``kept``)
        self._sampled = 0  # of them past their build's first ones (``sampled``), for the policy's rate
        self.started = time.perf_counter()  # (the rate's clock: from install)
        self.counts: list[LaunchCounts] = []
        self._wrapped: list[tuple[Any, KernelLauncher]] = []
        self._lock = threading.Lock()
        self.active = False
        self.capturing = 0  # CUDA-graph captures under way (the launch path then always asks)
        self._capturing_here: Any = None  # torch's query, bound at install
        self.fast: Any = None  # the C launchers' shared state, when they are on (fast_launch.py)
        self.counts_type: Any = LaunchCounts  # (or its C twin, with the C launchers)
        self._configs: dict[int, tuple[Any, dict[str, Any]]] = {}  # id(autotuner config) -> it, as a dict
        self.unhooked: set[str] = set()  # kernels whose builds never went through the hook
        self.twins = False  # launches not kept run plain twins (plain_twins.py)
        self.on_quota_spent: Any = None  # called once the total is reached (--auto's device timer stops)
        self._twins: list[Any] = []  # the twins in use
        self._no_twin: set[str] = set()  # kernels whose twin failed (noted once)

    # Launches kept in all (the policy's total bounds them) and kept past their build's first
    # ones (the policy's rate bounds them).
    kept = _CountedInC()
    sampled = _CountedInC()

    def within_rate(self, c: LaunchCounts) -> bool:
        """Whether the launch just counted in ``c``, which the policy's count keeps, is within
        its rate (a build's first launches always are); one that is not waits for the next
        count the policy keeps."""
        if c.seen <= self.policy.first or self.policy.rate is None:
            return True
        if self.policy.within_rate(self.sampled, time.perf_counter() - self.started):
            self.sampled += 1
            return True
        c.next_keep = self.policy.next_after(c.seen)
        return False

    def connect(self, buffers: Any, sink: Any, graphs: Any, slabs: Any) -> None:
        """The kept side: a kept launch's bytes in a slab (``Slabs``, the usual case) or a
        buffer of its own (``LaunchBuffers``), its record and copy (``Sink``), a captured
        one's replays (``GraphReplays``)."""
        self.buffers, self.sink, self.graphs, self.slabs = buffers, sink, graphs, slabs

    # -- install / uninstall --

    def install(self, patches: Any, twins: bool = False) -> None:
        """Each build created while the session runs (but the plain ones autotuners time) is
        looked at once, when it loads: ``_init_handles`` overridden on the instance, for its
        first call only (Triton calls it on every launch; the class's stays untouched).
        ``twins``: launches not kept run plain twins (plain_twins.py)."""
        from triton.compiler.compiler import CompiledKernel

        path = self

        def init(orig: Any) -> Any:
            def wrapper(ck: Any, *args: Any, **kwargs: Any) -> Any:
                orig(ck, *args, **kwargs)
                if path.active and not path.autotune.building_plain:
                    ck._init_handles = lambda: path._first_load(ck)

            return wrapper

        patches.patch(CompiledKernel, "__init__", init)
        import torch

        # Whether this thread's current stream is capturing a CUDA graph (by any API).
        self._capturing_here = torch._C._cuda_isCurrentStreamCapturing
        self.started = time.perf_counter()
        if fast_launch.enabled() and self.slabs is not None:
            try:
                self.slabs._lock = fast_launch.lock_type()()  # (before any launch takes it)
                self.fast = fast_launch.make(self, self.slabs, self.sink, self.buffers)
                self.slabs.slab_type = fast_launch.slab_type()
                self.counts_type = fast_launch.counts_type()
            except Exception as e:  # no C compiler or Python headers: the Python path does it all
                self.buffers.result.messages.append(
                    f"note: the C launchers could not be built ({str(e)[:200]}); launches take the "
                    "Python path (slower on the host)")
        self.twins = twins
        self.active = True
        patches.on_undo(self.uninstall)

    def _first_load(self, ck: Any) -> None:
        """The build's first load: Triton's own, then its launcher wrapped if it is ours."""
        ck.__dict__.pop("_init_handles", None)  # later calls go straight to Triton's
        try:
            ck._init_handles()
        except Exception as e:
            advice = self.compiler.explain_out_of_resources(ck, e, self.compiler.oor_type)
            if advice is e:
                raise
            raise advice from e
        if self.active:
            self._loaded(ck)

    def uninstall(self) -> None:
        """Every wrapped build launches through its own launcher again (a launcher that a
        library or Inductor took while we were installed passes straight through)."""
        self.active = False
        # (the counts back here; the C state held this path: no cycle)
        self._kept, self._sampled, self.fast = self.kept, self.sampled, None
        with self._lock:
            for ck, w in self._wrapped:
                if ck._run is w:
                    ck._run = w.inner
                w.counts.next_keep = NEVER
            self._wrapped.clear()

    def _loaded(self, ck: Any) -> None:
        """A build just loaded: wrap its launcher if it is one of ours and instrumented."""
        info = self.kernel_info(ck)
        if not info.instrumented or self.autotune.building_plain or ck._run is None:
            return
        counts = self.counts_type(info.name, self.policy)
        device = _current_device()  # (loaded on it just now)
        if self.fast is not None:
            w = fast_launch.launcher(self.fast, ck._run, info, counts, self, device, *entry_point(ck._run, info))
        else:
            w = KernelLauncher(ck._run, info, counts, self, device)
        with self._lock:
            if self.policy.total is not None and self.kept >= self.policy.total:
                counts.next_keep = NEVER
            self.counts.append(counts)
            self._wrapped.append((ck, w))
        if self.twins and w.direct is not None:
            self._twin(ck, w, info.name)
        ck._run = w

    def _twin(self, ck: Any, w: Any, name: str) -> None:
        """Launches not kept of ``w`` run the plain twin of its build, where one loads."""
        if self.capturing or self._capturing_here():  # (loading a module could break a capture)
            return
        try:
            with tool_work():
                twin = plain_twins.plain_twin(ck, self.autotune)
        except Exception as e:  # its launches not kept run the instrumented build, as before
            if name not in self._no_twin:
                self._no_twin.add(name)
                self.buffers.result.messages.append(
                    f"note: kernel {name}: no plain twin ({str(e)[:200]}); its launches not kept run the "
                    "instrumented build (their kernel time includes the records)")
            return
        self._twins.append(twin)  # (the build holds its module loaded while w may launch it)
        w.plain_fn, w.plain_meta = twin.function, twin.packed_metadata

    def kernel_info(self, ck: Any) -> _KernelInfo:
        """What a launch needs of a build (its name, override hash, profile scratch); a build
        of a kernel the hook never saw is noted (compiled by a worker process or found in an
        on-disk cache of the program's own)."""
        from triton.runtime.cache import _base32

        src = ck.src
        try:
            h = _base32(src.hash())
        except Exception:
            h = ""
        name = getattr(getattr(src, "fn", None), "__name__", None) or str(ck.name)
        scratch = int(getattr(ck.metadata, "profile_scratch_size", 0) or 0)
        chash = str(getattr(ck.metadata, "hash", ""))
        if chash not in self.hook.compiled and hasattr(src, "fn") and not self.autotune.building_plain:
            self.unhooked.add(name)
        return _KernelInfo(name, h, scratch > 0, scratch, ck)

    # -- a launch the policy may keep --

    def not_kept(self, w: KernelLauncher, gx: int, gy: int, gz: int, stream: int, function: Any,
                 args: tuple) -> Any:
        """A launch not kept whose throw-away buffer is too small (or absent): Triton's own
        launcher, through the profile allocator; then the buffer it got serves the next, by its
        address (Triton's entry point takes an int as it is, where a tensor costs it a Python
        call and a driver query a launch; throw-away buffers are never freed)."""
        ret = w.inner(gx, gy, gz, stream, function, *args)
        if w.direct is not None:
            buf = self.buffers.discard.find(gx * gy * gz * w.per_cta, w.device)
            w.discard, w.discard_bytes = (None, -1) if buf is None else (buf.data_ptr(), buf.numel())
        return ret

    def launch(self, w: KernelLauncher, gx: int, gy: int, gz: int, stream: int, function: Any,
               args: tuple) -> Any:
        """A launch the policy keeps: into a slab (the usual case, ``Slabs.launch``), else a
        buffer of its own. Every line here is paid by each kept launch of a launch-bound loop."""
        c = w.counts
        c.next_keep = self.policy.next_after(c.seen)
        if not self.active or in_tool_work():
            return w.inner(gx, gy, gz, stream, function, *args)
        tuning = self.autotune.benchmarking
        if tuning is not None and not self.autotune.keep_tuning:
            self._count_drop("autotune benchmarking")
            return w.inner(gx, gy, gz, stream, function, *args)
        total = self.policy.total
        if total is not None and self.kept >= total and not self.capturing:
            with self._lock:  # (a launch captured into a CUDA graph: the policy picks its replays)
                self._quota_spent()
                self._count_drop(self.bound_reason)
            return w.inner(gx, gy, gz, stream, function, *args)
        size = gx * gy * gz * w.per_cta
        if (w.direct is not None and 0 < size <= self.slabs.largest and not self.capturing
                and getattr(self._tls, "measure", None) is None and not self._capturing_here()):
            stream = stream or 0
            # (unlocked: two threads keeping at once may keep a launch or two past the total)
            self.kept += 1
            ret = self.slabs.launch(w, gx, gy, gz, stream, function, args, size, (
                self.sink.next_seq(), w.info, (gx, gy, gz), stream, w.device, self._config(w.info, tuning),
                tuning is not None, program_frame(3)))  # (frames 1-2: ours)
            if ret is not NOT_TAKEN:
                return ret
            self.kept -= 1
            return w.inner(gx, gy, gz, stream, function, *args)
        return self._own_buffer(w, gx, gy, gz, stream, function, args, tuning, size)

    def _own_buffer(self, w: KernelLauncher, gx: int, gy: int, gz: int, stream: int, function: Any,
                    args: tuple, tuning: Any, size: int) -> Any:
        """A kept launch with a buffer of its own (``LaunchBuffers``): captured into a CUDA graph,
        timed by --measure-overhead, larger than half a slab, or a launcher without the C entry
        point."""
        c = w.counts
        p = _Pending(w.info, (int(gx), int(gy), int(gz)), int(stream or 0),
                     self._config(w.info, tuning), tuning is not None, launched_from=call_site(3))
        try:
            with tool_work():
                buf = self.buffers.for_launch(p, size, c.seen <= BRACKETED_FIRST)
        except Exception as e:  # never fail the program's launch because of us
            self.buffers.failed(e)
            buf = None
        if buf is None:
            return w.inner(gx, gy, gz, stream, function, *args)
        if p.graph is None:
            with self._lock:
                self.kept += 1
        tls = self._tls
        tls.buffer, tls.pending = buf, p
        try:
            ret = w.inner(gx, gy, gz, stream, function, *args)
        except BaseException:
            p.keep = False
            raise
        finally:
            if tls.buffer is not None:  # Triton did not ask for it: nothing was recorded there
                p.keep = False
            tls.buffer = tls.pending = None
        if p.keep and p.deferred_stream is None:
            with tool_work():
                if p.graph is not None:  # captured: nothing ran yet; each replay copies it
                    self.graphs.captured(p)
                else:
                    self.sink.keep(p)
        return ret

    def _quota_spent(self) -> None:
        """The total is reached: no build is kept again. Each keeps its wrapper, whose launch not
        kept goes to Triton's entry point with a throw-away buffer: the build's own launcher
        would ask the profile allocator, a Python call, on every launch from here on."""
        for _, w in self._wrapped:
            w.counts.next_keep = NEVER
        if self.on_quota_spent is not None:
            hook, self.on_quota_spent = self.on_quota_spent, None
            hook()

    def _config(self, info: _KernelInfo, tuning: Any) -> dict[str, Any]:
        at = getattr(self._tls, "autotuner", None)
        if tuning is not None and not isinstance(tuning, str):  # a triton.Config
            return config_of_autotune(tuning)
        best = getattr(at, "best_config", None) if at is not None else None
        if best is not None:  # (made once per config: a dict of its kwargs costs microseconds)
            got = self._configs.get(id(best))
            if got is None or got[0] is not best:
                got = self._configs[id(best)] = (best, config_of_autotune(best))
            return got[1]
        if info.config is None:
            info.config = config_of_kernel(info.ck)
        return info.config

    def per_kernel(self) -> dict[str, int]:
        """Launches seen per kernel name (all its builds together)."""
        out: dict[str, int] = {}
        for c in self.counts:
            out[c.name] = out.get(c.name, 0) + c.seen
        return out
