"""The raw sink: kept launches from device to host to disk (raw files, their metadata, run.json).
``Sink`` is the session's collaborator for it."""

from __future__ import annotations

import itertools
import json
import threading
from pathlib import Path
from typing import Any

from proton_inject.collect import device_ops
from proton_inject.collect.buffers import HostRing, _pinned
from proton_inject.collect.call_site import site_text
from proton_inject.collect.launch_meta import LaunchMetadata
from proton_inject.collect.launches import LaunchRecord, _Pending
from proton_inject.collect.raw_writer import InFlight, RawWriter
from proton_inject.collect.slabs import SlabBatch
from proton_inject.formats import clock_bracket
from proton_inject.formats.files import write_atomic
from proton_inject.formats.run_index import RUN_FORMAT, run_index_name
from proton_inject.lower.options import LoweringOptions


class Sink:
    """Kept launches, from device to disk: what a kept launch becomes (its bracket's second half,
    a LaunchRecord, the copy to the host), then raw files with their metadata, and run.json.

    It owns the copy streams, the pinned ring, the raw writer and what launches' metadata
    needs per device (names, clocks, timer references, record costs). It needs: the output
    directory, the lowering options, the compile hook (how each kernel was built) and
    ``max_shared()`` (the GPU's shared memory per CTA, once the compiler knows it), the launch
    side's ``LaunchBuffers`` and pool, the run's result and lock, a note
    callback, the rank, the pending-bytes bound, ``capturing()`` and ``gz()`` (whether raw
    buffers are gzipped, set on the session after it is made)."""

    def __init__(self, out: Path, options: LoweringOptions, hook: Any, max_shared: Any, buffers: Any,
                 pool: Any, result: Any, lock: Any, note: Any, rank: int | None, max_pending: int,
                 capturing: Any, gz: Any) -> None:
        self.out, self.options, self.hook, self._max_shared = out, options, hook, max_shared
        self.buffers, self.pool, self.result, self._lock = buffers, pool, result, lock
        self._note_once, self.rank, self._gz = note, rank, gz
        self.writer = RawWriter(self.land, self.save, max_pending, self._writer_error, capturing)
        self.host_ring = HostRing(min(max_pending, 32 << 20), self.writer.wake)
        self._copy_lock = threading.Lock()
        self._copy_streams: dict[int, Any] = {}
        # The next kept launch's number (LaunchRecord.seq: launch order; a launch that failed
        # leaves a gap), a C call: every kept launch draws one.
        self.next_seq = itertools.count().__next__
        self.meta = LaunchMetadata(out, options, hook, max_shared, buffers, note, rank)

    def _writer_error(self, text: str) -> None:
        """A kept launch could not be read back or written (said once per cause)."""
        self.result.details.append(text)
        self._note_once(f"some profile buffers could not be saved ({text.split(': ', 1)[-1][:200]})")

    def copy_stream(self, device: int) -> Any:
        """The stream kept launches' bytes are copied out on (one per device, made once)."""
        s = self._copy_streams.get(device)
        if s is None:
            import torch

            with self._lock:
                s = self._copy_streams.get(device)
                if s is None:
                    s = self._copy_streams[device] = torch.cuda.Stream(device=device)
        return s

    def prepare(self, device: int) -> None:
        """What copying kept launches out of ``device`` needs, made ahead: its copy stream, the
        pinned ring and the writer's thread (made at a slab's first copy, they cost that launch
        milliseconds in the middle of the program's loop)."""
        self.copy_stream(device)
        self.host_ring.prepare()
        self.writer.start()

    def keep(self, p: _Pending) -> None:
        """After a kept launch with a buffer of its own (not a captured one): its bracket's
        second half, its record, the copy to the host."""
        import torch

        device = p.buffer.device.index
        s = self.buffers.stream_obj(p.stream, device)
        self.buffers.run_bracket(p, 1, s.cuda_stream)
        with self._lock:
            rec = self.record(p, p.stream, device)
        copy_stream = self.copy_stream(device)
        rec.bracket_at = p.bracket_at
        launched = torch.cuda.Event()
        launched.record(s)
        copy_stream.wait_event(launched)
        self.copy_out(rec, p, copy_stream)  # (outside the lock: it may wait for the writer)

    def record(self, p: _Pending, stream: int, device: int, replay: int | None = None) -> LaunchRecord:
        return self._record(self.next_seq(), p.info, p.grid, stream, device, p.config, p.tuning,
                            p.launched_from, replay)

    def _record(self, seq: int, info: Any, grid: tuple[int, int, int], stream: int, device: int,
                config: dict, tuning: bool, launched_from: str | None, replay: int | None = None
                ) -> LaunchRecord:
        md = info.ck.metadata
        rec = LaunchRecord(
            seq=seq,
            kernel=info.name,
            hash=info.override_hash,
            compile_hash=str(getattr(md, "hash", "")),
            grid=grid,
            num_warps=int(md.num_warps),
            num_ctas=int(getattr(md, "num_ctas", 1)),
            stream=stream,
            device=device,
            scratch_bytes_per_cta=info.scratch,
            config=config,
            tuning=tuning,
            graph_replay=replay,
            launched_from=launched_from,
        )
        self.result.launches.append(rec)
        return rec

    def copy_out(self, rec: LaunchRecord, p: _Pending, stream: Any) -> None:
        """Enqueue the copy of a kept launch's buffer to pinned host memory on ``stream`` (a
        torch stream, after the launch), then its zeroing for its next use (a buffer captured
        into a CUDA graph is zeroed by the graph itself), and hand it to the raw writer."""
        self._copy(rec, p.buffer, p.nbytes or p.buffer.numel(), stream, zero=p.graph is None)

    def ship(self, batch: SlabBatch, buf: Any, nbytes: int, stream: Any) -> None:
        """Enqueue the copy of a slab's first ``nbytes`` (its launches' bytes) to pinned host
        memory on ``stream`` (after the launches), their zeroing, and hand it to the writer."""
        self._copy(batch, buf, nbytes, stream, zero=True)

    def _copy(self, what: LaunchRecord | SlabBatch, buf: Any, n: int, stream: Any, zero: bool) -> None:
        import torch

        with self._copy_lock:  # the ring's spans and the writer's queue in one order
            at = self.host_ring.take(n)
            try:
                host = _pinned(n) if at is None else None  # (larger than the whole ring: its own)
                dst = host.data_ptr() if at is None else self.host_ring.address(at)
                device_ops.copy_to_host(dst, buf, stream.cuda_stream, n)
                if zero:
                    device_ops.zero(buf, stream.cuda_stream, n)
                done = torch.cuda.Event()
                done.record(stream)
            except BaseException:  # (a span never released would stop the ring for good)
                if at is not None:
                    self.host_ring.release(at)
                raise
            if zero:
                self.pool.busy(buf, done)
            self.writer.put(InFlight(what, host, at, n, done))

    def land(self, item: InFlight) -> Any:
        """(raw writer) A launch's copy is done: its bytes out of pinned memory, which is free
        for the next copies."""
        if item.host_buffer is not None:
            data = item.host_buffer.numpy()[: item.nbytes].copy()
            item.host_buffer = None
            return data
        data = self.host_ring.array[item.host_offset: item.host_offset + item.nbytes].copy()
        self.host_ring.release(item.host_offset)
        return data

    def save(self, what: LaunchRecord | SlabBatch, data: Any) -> None:
        """(raw writer) Save a landed launch, or each launch of a landed slab."""
        if isinstance(what, SlabBatch):
            for e in what.launches:
                with self._lock:
                    rec = self._record(e.seq, e.info, e.grid, e.stream, e.device, e.config, e.tuning,
                                       site_text(e.launched_from))
                rec.bracket_at = e.bracket_at
                try:  # (one launch that cannot be saved does not lose the rest of its slab)
                    self._save_one(rec, data[e.offset: e.offset + e.nbytes])
                except Exception as err:
                    self._writer_error(f"could not save {rec.label}: {err}")
        else:
            self._save_one(what, data)

    def _save_one(self, rec: LaunchRecord, data: Any) -> None:
        from proton_inject.formats.raw import raw_prefix, save_raw

        if rec.bracket_at is not None:
            at, ctas = rec.bracket_at
            rows = data[at: at + clock_bracket.bracket_bytes(ctas)].view("<i8").reshape(2, ctas, -1)
            rec.clock_bracket = {"before": clock_bracket.summarize(rows[0]),
                                 "after": clock_bracket.summarize(rows[1])}
            for side in rec.clock_bracket.values():
                if side:
                    self.meta.timer_refs[rec.device] = side["t0"]
        else:
            rec.clock_bracket = {"missing": self.meta.why_no_bracket(rec)}
        data = data[: rec.scratch_bytes_per_cta * rec.num_blocks]  # without a bracket's tail
        rec.all_zero = not bool(data.any())
        meta = self.meta.of(rec)
        for path in save_raw(raw_prefix(self.out / "raw", meta), data, meta, gz=self._gz()):
            self.result.files.append(str(path))

    def write_index(self, tree: str | None, keep_policy: str, launch_counts: dict[str, int],
                    autotune: dict[str, Any]) -> None:
        """run.json: the run's launches, what was not kept and why, and what the session knew
        (the tree of ``run``, the keep policy and launch counts, the autotuners' choices)."""
        from proton_inject.formats.raw import raw_name

        # Always written (report reads it to explain a run that kept nothing).
        index = {
            "version": 1,
            "format": RUN_FORMAT,
            "rank": self.rank,
            "instrumented_dir": "ir",
            **({"tree": tree} if tree is not None else {}),
            "options": self.options.to_json(),
            "launches": [
                {
                    "seq": r.seq,
                    "kernel": r.kernel,
                    "hash": r.hash,
                    "grid": list(r.grid),
                    "num_warps": r.num_warps,
                    "config": r.config_name,
                    "tuning": r.tuning,
                    "raw": f"raw/{raw_name(r.kernel, r.seq, self.rank)}.bin{'.gz' if self._gz() else ''}",
                    "all_zero": r.all_zero,
                    "graph_replay": r.graph_replay,
                }  # fmt: skip
                for r in self.result.launches
            ],
            "dropped": self.result.dropped,
            "keep_policy": keep_policy,
            "launch_counts": launch_counts,
            "in_cuda_graphs": self.result.in_cuda_graphs,
            "compile_fallbacks": self.result.compile_fallbacks,
            **({"measured_overhead": self.result.measured_overhead} if self.result.measured_overhead else {}),
            "autotune": autotune,
            "compiled": {
                h: {"kernel": c.name, "hash": c.hash, "instrumented": c.instrumented,
                    "reason": c.reason, "file": c.file}
                for h, c in sorted(self.hook.compiled.items())
            },
            "exit_code": self.result.exit_code,
            "messages": self.result.messages,
            "details": self.result.details,
        }
        path = write_atomic(self.out / run_index_name(self.rank), json.dumps(index, indent=1) + "\n")
        self.result.files.append(str(path))
