"""CUDA graphs: launches captured into a graph are profiled on every replay."""

from __future__ import annotations

from typing import Any

from proton_inject.collect.launches import _Pending


class GraphReplays:
    """A session's collaborator for CUDA graphs: launches captured into a graph run on every
    replay; each gets its own buffer, kept alive with the graph, and is copied out after a
    replay the keep policy keeps.

    It needs the undo stack, the thread-local state (``capture``: the graph being captured on
    this thread and its mode), the launch path (its policy, count and captures under way), the
    raw writer (its lock on event calls), the run's lock and result, and from the kept-launch
    side ``record(p, stream, device, replay)``, ``copy_out(rec, p, stream)`` and
    ``count_drop(reason)``; ``stopped()`` says whether the session has ended."""

    def __init__(self, patches: Any, tls: Any, launch_path: Any, writer: Any, lock: Any, result: Any,
                 record: Any, copy_out: Any, count_drop: Any, stopped: Any) -> None:
        self.patches, self._tls, self.launch_path, self.writer = patches, tls, launch_path, writer
        self._lock, self.result, self._record, self._copy_out = lock, result, record, copy_out
        self._count_drop, self._stopped = count_drop, stopped

    def captured(self, p: _Pending) -> None:
        """A kept launch captured into ``p.graph``: nothing ran yet; each replay copies it."""
        with self._lock:
            mine = p.graph.__dict__.get("_proton_inject")
            if not mine or mine[0] is not self:
                mine = (self, [], [0])  # whose, captured launches, replays so far
                p.graph._proton_inject = mine
            mine[1].append(p)

    def install(self) -> None:
        """``torch.cuda.CUDAGraph``'s capture and replay followed (undone with the patches)."""
        import torch

        cls = getattr(torch.cuda, "CUDAGraph", None)
        if cls is None or "capture_begin" not in cls.__dict__ or "replay" not in cls.__dict__:
            return  # captured launches then run unprofiled (counted in in_cuda_graphs)
        tls = self._tls
        replays = self

        def capture_begin(orig: Any) -> Any:
            def wrapper(graph: Any, *args: Any, **kwargs: Any) -> Any:
                mode = kwargs.get("capture_error_mode", args[1] if len(args) > 1 else "global")
                tls.capture = (graph, mode)
                replays.launch_path.capturing += 1  # every launch now asks to be kept
                with replays.writer.gpu_lock:  # (no event call of the writer's in flight)
                    pass
                try:
                    return orig(graph, *args, **kwargs)
                except BaseException:
                    tls.capture = None
                    replays.launch_path.capturing = max(0, replays.launch_path.capturing - 1)
                    raise

            return wrapper

        def capture_end(orig: Any) -> Any:
            def wrapper(graph: Any, *args: Any, **kwargs: Any) -> Any:
                tls.capture = None
                replays.launch_path.capturing = max(0, replays.launch_path.capturing - 1)
                return orig(graph, *args, **kwargs)

            return wrapper

        def replay(orig: Any) -> Any:
            def wrapper(graph: Any, *args: Any, **kwargs: Any) -> Any:
                ret = orig(graph, *args, **kwargs)
                captured = graph.__dict__.get("_proton_inject")
                if captured and captured[0] is replays and not replays._stopped():
                    replays._replayed(captured[1], captured[2])
                return ret

            return wrapper

        self.patches.patch(cls, "capture_begin", capture_begin)
        self.patches.patch(cls, "capture_end", capture_end)
        self.patches.patch(cls, "replay", replay)

    def _replayed(self, captured: list[_Pending], replays: list[int]) -> None:
        """After a graph replay: copy each captured launch's buffer out, on the replay's
        stream, so the next replay (same stream) cannot overwrite it before the copy."""
        import torch

        path = self.launch_path
        with self._lock:
            replays[0] += 1
            if not path.policy.keeps_replay(replays[0]):
                self.result.dropped["CUDA-graph replays not sampled"] = (
                    self.result.dropped.get("CUDA-graph replays not sampled", 0) + len(captured))
                return
            kept = []
            for p in captured:
                if path.policy.total is not None and path.kept >= path.policy.total:
                    self._count_drop(path.bound_reason)
                    continue
                path.kept += 1
                device = p.buffer.device.index
                cur = torch.cuda.current_stream(device)
                kept.append((self._record(p, cur.cuda_stream, device, replay=replays[0]), p, cur))
        for rec, p, cur in kept:  # (outside the lock: it may wait for the writer)
            self._copy_out(rec, p, cur)
