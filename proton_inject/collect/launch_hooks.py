"""What a kept launch becomes (its bracket's second half, a LaunchRecord, the copy to the host),
the kernel facts a launch needs, and advice when an instrumented build does not fit."""

from __future__ import annotations

from typing import Any

from proton_inject.collect.device_ops import in_tool_work
from proton_inject.collect.launches import LaunchRecord, _KernelInfo, _Pending
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
                self.builds.after_compile(metadata, metadata_group, cache_hit)
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

    def _count_drop(self, reason: str) -> None:
        with self._lock:
            self.result.dropped[reason] = self.result.dropped.get(reason, 0) + 1

    def _enter(self, lazy: Any) -> None:
        """(--measure-overhead only: no launch hook is installed otherwise.)"""
        if not in_tool_work() and getattr(self._tls, "measure", None) is not None:
            self._measure_enter(lazy)

    def _exit(self, lazy: Any) -> None:
        if not in_tool_work() and getattr(self._tls, "measure_start", None) is not None:
            self._measure_exit()  # the kernel's end, before our copy-out is queued

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
            copy_stream = self._copy_streams.get(device)
            if copy_stream is None:
                copy_stream = self._copy_streams[device] = torch.cuda.Stream(device=device)
        rec.bracket_at = p.bracket_at
        launched = torch.cuda.Event()
        launched.record(s)
        copy_stream.wait_event(launched)
        self._copy_out(rec, p, copy_stream)  # (outside the lock: it may wait for the writer)

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
            tuning=p.tuning,
            graph_replay=replay,
            launched_from=p.launched_from,
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
