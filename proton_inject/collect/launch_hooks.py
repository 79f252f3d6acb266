"""What a kept launch becomes (its bracket's second half, a LaunchRecord, the copy to the host),
and the kernel facts a launch needs."""

from __future__ import annotations

from typing import Any

from proton_inject.collect.launches import LaunchRecord, _KernelInfo, _Pending


class LaunchHooks:
    """The launch side of a session: which launches are kept, their buffers tied to them, and what
    each kept launch becomes (a LaunchRecord and a copy to the host)."""

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

    def _count_drop(self, reason: str) -> None:
        with self._lock:
            self.result.dropped[reason] = self.result.dropped.get(reason, 0) + 1

    def _keep(self, p: _Pending) -> None:
        """After a kept launch: its bracket's second half, its record, the copy to the host
        (or, captured in a CUDA graph, the note to copy it after each replay)."""
        import torch

        if p.graph is not None:  # captured: nothing ran yet; each replay copies it
            self.graphs.captured(p)
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
