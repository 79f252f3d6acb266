"""Launch hooks: each launch of an instrumented build is kept (its buffer tied to it) or not,
and why."""

from __future__ import annotations

from typing import Any

from proton_inject.collect.device_ops import in_tool_work, tool_work
from proton_inject.collect.launches import (
    LaunchRecord,
    _KernelInfo,
    _Pending,
    config_name,
    config_of_autotune,
    config_of_kernel,
)
from proton_inject.lower.options import suggest_buffer_size


class LaunchHooks:
    """The launch side of a session: which launches are kept, their buffers tied to them, and what
    each kept launch becomes (a LaunchRecord and a copy to the host)."""

    def _listener(self, prev: Any):
        from triton.runtime.cache import _base32

        def listener(*, src, metadata, metadata_group, times, cache_hit):
            try:
                if hasattr(src, "fn"):
                    name = getattr(src.fn, "__name__", str(src.name))
                    self._compiled.setdefault(name, set()).add(_base32(src.hash()))
                self.after_compile(metadata, metadata_group, cache_hit)
            finally:
                if prev is not None:
                    prev(
                        src=src, metadata=metadata, metadata_group=metadata_group,
                        times=times, cache_hit=cache_hit,
                    )  # fmt: skip

        return listener

    def _info(self, ck: Any) -> _KernelInfo:
        info = self._kernels.get(id(ck))
        if info is None or info.ck is not ck:
            from triton.runtime.cache import _base32

            src = ck.src
            try:
                h = _base32(src.hash())
            except Exception:
                h = ""
            name = getattr(getattr(src, "fn", None), "__name__", None) or str(ck.name)
            scratch = int(getattr(ck.metadata, "profile_scratch_size", 0) or 0)
            info = _KernelInfo(name, h, scratch > 0, scratch, ck)
            self._kernels[id(ck)] = info
            chash = str(getattr(ck.metadata, "hash", ""))
            plain = self.building_plain  # a plain build an autotuner times
            if chash not in self.hook.compiled and hasattr(ck.src, "fn") and not plain:
                self._unhooked.add(info.name)
        return info

    def _wrap_launch_metadata(self, orig: Any):
        session = self
        oor_type = out_of_resources_type()

        def launch_metadata(ck, grid, stream, *args):
            try:
                ret = orig(ck, grid, stream, *args)
            except Exception as e:
                raise session.explain_out_of_resources(ck, e, oor_type) from e
            if in_tool_work():  # launched by a library under our own device work: not ours
                return ret
            info = session._info(ck)
            tuning = session.benchmarking
            if not info.instrumented:
                session._tls.pending = None
                if tuning is not None and session._wanted(info):  # timed on the plain build
                    session._count_drop("autotune benchmarking")
                return ret
            at = getattr(session._tls, "autotuner", None)
            if tuning is not None and not isinstance(tuning, str):  # a triton.Config
                cfg = config_of_autotune(tuning)
            elif at is not None and getattr(at, "best_config", None) is not None:
                cfg = config_of_autotune(at.best_config)
            else:
                if info.config is None:
                    info.config = config_of_kernel(ck)
                cfg = info.config
            g = tuple(int(x) for x in (list(grid) + [1, 1, 1])[:3])
            session._tls.pending = _Pending(info, g, int(stream or 0), cfg, tuning is not None)
            return ret

        return launch_metadata

    def explain_out_of_resources(self, ck: Any, e: Exception, oor_type: type,
                                 build_max_shared: int | None = None) -> Exception:
        """Triton's shared-memory OutOfResources for an instrumented build ``ck`` turned into
        advice (an ``oor_type``: which warps record, the --buffer-size that fits); any other
        error comes back as it is. ``build_max_shared``: the limit the lowering sized the
        buffer for, where it is not this session's GPU's."""
        from triton.runtime.errors import OutOfResources

        if not isinstance(e, OutOfResources) or "shared" not in str(getattr(e, "name", "")):
            return e
        if not int(getattr(ck.metadata, "profile_scratch_size", 0) or 0):
            return e
        nw = int(ck.metadata.num_warps)
        need, limit = int(e.required), int(e.limit)
        # Split with the limit the lowering sized the buffer for (the device's, normally), and
        # the options as the lowering resolved them for this kernel (which warps record: the
        # first of each partition of a warp-specialized kernel; the buffer's type and size).
        built_for = build_max_shared or self._max_shared or limit
        opts = self._resolved(ck, built_for)
        if opts.in_global_memory:
            return e  # records use no shared memory: the kernel itself does not fit
        from proton_inject.lower.check import record_buffer_share

        buf = record_buffer_share(need, nw, built_for, opts) or 0
        fit = suggest_buffer_size(limit - (need - buf), nw, opts) if buf else 0
        advice = (
            f"pass --buffer-size {fit} (or less), or --buffer-type global"
            if fit
            else "instrument fewer regions, or pass --buffer-type global"
        )
        msg = (
            f"kernel {self._info(ck).name}: the instrumented build needs {need} B of shared "
            f"memory per CTA ({buf} B of it for the record buffer) but the GPU allows {limit} B; "
            f"{advice}"
        )
        return oor_type(need, limit, "shared memory", msg)

    def _wanted(self, info: _KernelInfo) -> bool:
        """A kernel the source instruments (its plain build is what autotuners time)."""
        if info.wanted is None:
            info.wanted = self.hook.source.wants(info.name) and info.name not in self.hook.plain_only
        return info.wanted

    def _count_drop(self, reason: str) -> None:
        with self._lock:
            self.result.dropped[reason] = self.result.dropped.get(reason, 0) + 1

    def _want(self, p: _Pending, capturing: bool = False) -> bool:
        reason = None
        if p.tuning and not self.keep_tuning:
            reason = "autotune benchmarking"
        elif capturing:
            return True  # --max-launches applies to each replay
        elif self.max_launches is not None and len(self.result.launches) >= self.max_launches:
            reason = "past --max-launches"
        if reason:
            self.result.dropped[reason] = self.result.dropped.get(reason, 0) + 1
            return False
        return True

    def _enter(self, lazy: Any) -> None:
        if in_tool_work():
            return
        p: _Pending | None = getattr(self._tls, "pending", None)
        if p is not None and p.keep:
            fn = lazy.data.get("function") if lazy is not None else None
            if fn is not None and fn != p.info.ck.function:
                p.keep = False  # a different kernel: this buffer was not its own
        if getattr(self._tls, "measure", None) is not None:
            self._measure_enter(lazy)

    def _exit(self, lazy: Any) -> None:
        if in_tool_work():
            return
        if getattr(self._tls, "measure_start", None) is not None:
            self._measure_exit()  # first: the kernel's end, before our copy-out is queued
        p: _Pending | None = getattr(self._tls, "pending", None)
        self._tls.pending = None
        if p is None or not p.keep or p.buffer is None or p.deferred_stream is not None:
            return  # (deferred work never enqueued: no enter hook ran; the buffer was not zeroed)
        with tool_work():
            self._keep(p)

    def _keep(self, p: _Pending) -> None:
        """After a kept launch: its bracket's second half, its record, the copy to the host
        (or, captured in a CUDA graph, the note to copy it after each replay)."""
        import torch

        if p.graph is not None:
            # Captured: nothing ran yet. The buffer lives with the graph; each replay copies it.
            with self._lock:
                mine = p.graph.__dict__.get("_proton_inject")
                if not mine or mine[0] is not self:
                    mine = (self, [], [0])  # session, captured launches, replays so far
                    p.graph._proton_inject = mine
                mine[1].append(p)
            return
        device = p.buffer.device.index
        s = self._stream_obj(p.stream, device)
        self._run_bracket(p, 1, s.cuda_stream)
        with self._lock:
            rec = self._record(p, p.stream, device)
            rec.bracket_at = p.bracket_at
            copy_stream = self._copy_streams.get(device)
            if copy_stream is None:
                copy_stream = torch.cuda.Stream(device=device)
                self._copy_streams[device] = copy_stream
            launched = torch.cuda.Event()
            launched.record(s)
            copy_stream.wait_event(launched)
            self._copy_out(rec, p.buffer, copy_stream)

    def _record(self, p: _Pending, stream: int, device: int, replay: int | None = None) -> LaunchRecord:
        md = p.info.ck.metadata
        rec = LaunchRecord(
            seq=len(self.result.launches),
            kernel=p.info.name,
            hash=p.info.override_hash,
            compile_hash=str(getattr(md, "hash", "")),
            grid=p.grid,
            num_warps=int(md.num_warps),
            num_ctas=int(getattr(md, "num_ctas", 1)),
            stream=stream,
            device=device,
            scratch_bytes_per_cta=p.info.scratch,
            config=p.config,
            config_name=config_name(p.config),
            tuning=p.tuning,
            graph_replay=replay,
        )
        self.result.launches.append(rec)
        return rec


class ProfileBufferTooLarge(Exception):
    """Set up as a subclass of Triton's OutOfResources at run time (autotuners catch it)."""


def out_of_resources_type() -> type:
    from triton.runtime.errors import OutOfResources

    class _ProfileBufferTooLarge(OutOfResources, ProfileBufferTooLarge):
        def __init__(self, required: int, limit: int, name: str, message: str = "") -> None:
            super().__init__(required, limit, name)
            self.message = message

        def __str__(self) -> str:
            return self.message or super().__str__()

        def __reduce__(self):
            return (type(self), (self.required, self.limit, self.name, self.message))

    return _ProfileBufferTooLarge
