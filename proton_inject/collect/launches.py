"""What a session knows about a kernel and about each kept launch, and the result of a run."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from proton_inject.formats.manifest import jsonable as _jsonable


@dataclass
class LaunchRecord:
    """What is known about one instrumented launch whose buffer is kept."""

    seq: int  # order of kept launches in this run, from 0 (a launch that failed leaves a gap)
    kernel: str
    hash: str  # override directory name (base32 of the source hash), as in the dump tree
    compile_hash: str  # Triton's compile hash of the instrumented build
    grid: tuple[int, int, int]
    num_warps: int
    num_ctas: int
    stream: int
    device: int
    scratch_bytes_per_cta: int
    config: dict[str, Any] = field(default_factory=dict)  # constexprs + launch options
    config_name: str = ""
    tuning: bool = False  # launched by an autotuner while benchmarking configs
    scope_names: list[tuple[int, str]] = field(default_factory=list)
    scope_parents: list[tuple[int, int]] = field(default_factory=list)
    all_zero: bool = False
    graph_replay: int | None = None  # replay number of the CUDA graph the launch was captured in
    # Where the clock bracket's rows sit in the copied buffer: (byte offset, CTAs per side);
    # None when the launch had none (then ``clock_bracket`` says why).
    bracket_at: tuple[int, int] | None = None
    clock_bracket: dict[str, Any] | None = None  # LaunchMeta.clock_bracket, set when saved
    launched_from: str | None = None  # the program's frame that made the launch (call_site)

    @property
    def label(self) -> str:
        return f"launch {self.seq} of {self.kernel}"

    @property
    def num_blocks(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2] * self.num_ctas


@dataclass
class RunResult:
    """What a profiling session collected and where it wrote it."""

    out: str
    launches: list[LaunchRecord] = field(default_factory=list)
    dropped: dict[str, int] = field(default_factory=dict)  # reason -> launches not kept
    messages: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    exit_code: int | None = None
    # kernel -> launches captured into a CUDA graph that we could not profile (ran as usual)
    in_cuda_graphs: dict[str, int] = field(default_factory=dict)
    compile_fallbacks: list[dict[str, str]] = field(default_factory=list)
    # Decode problems per launch (``messages`` has them once per kernel and cause).
    details: list[str] = field(default_factory=list)
    # --measure-overhead: kernel -> instrumented/plain kernel-time ratio, spread and counts
    measured_overhead: dict[str, dict] = field(default_factory=dict)
    # Where the command's wall time went (TIME_PARTS), seconds; compile_calls: Triton's compiles
    seconds: dict[str, float] = field(default_factory=dict)
    compile_calls: int = 0

    def time_line(self) -> str | None:
        """One line saying where the command's time went, or None before anything was timed."""
        parts = []
        for key, what in TIME_PARTS:
            s = self.seconds.get(key)
            if s is None or (s < 0.005 and key != "program"):  # (calibrating with the cost known, say)
                continue
            n = self.compile_calls
            parts.append(f"{what} {s:.2f} s" + (f" over {n} call{'s' if n != 1 else ''}" if key == "compile" else ""))
        return "time: " + ", ".join(parts) if parts else None


# The parts of a profile's wall time, in order: key in RunResult.seconds, what it is.
# "torch": importing torch and finding the GPUs before the program (the program then finds
# torch imported, so a plain run pays it too); "profiler": --auto's torch.profiler start
# (CUPTI's set-up), part of starting.
TIME_PARTS = (("torch", "loading torch and CUDA"), ("calibrate", "calibrating"), ("start", "starting"),
              ("profiler", "of it torch.profiler's start"), ("program", "the program"),
              ("compile", "of it Triton's compiles and cache loads"), ("stop", "stopping"),
              ("report", "the report"), ("auto", "ranking"))


def config_of_kernel(ck: Any) -> dict[str, Any]:
    """Constexpr values and launch options of a compiled kernel (what names its config)."""
    cfg: dict[str, Any] = {}
    src = getattr(ck, "src", None)
    fn = getattr(src, "fn", None)
    names = list(getattr(fn, "arg_names", []) or [])
    for key, value in sorted((getattr(src, "constants", None) or {}).items()):
        idx = key[0] if isinstance(key, tuple) and key else key
        name = names[idx] if isinstance(idx, int) and idx < len(names) else str(key)
        cfg[name] = _jsonable(value)
    md = ck.metadata
    for opt in ("num_warps", "num_stages", "num_ctas"):
        if hasattr(md, opt):
            cfg[opt] = _jsonable(getattr(md, opt))
    return cfg


def config_of_autotune(config: Any) -> dict[str, Any]:
    """A ``triton.Config`` as a plain dict (kwargs plus num_warps/num_stages/num_ctas)."""
    cfg = {k: _jsonable(v) for k, v in dict(getattr(config, "kwargs", {}) or {}).items()}
    for opt in ("num_warps", "num_stages", "num_ctas", "maxnreg"):
        v = getattr(config, opt, None)
        if v is not None:
            cfg[opt] = _jsonable(v)
    return cfg


def config_name(cfg: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in cfg.items())


@dataclass
class _KernelInfo:
    name: str
    override_hash: str
    instrumented: bool
    scratch: int
    ck: Any
    config: dict[str, Any] | None = None  # config_of_kernel, computed on first launch


@dataclass
class _Pending:
    info: _KernelInfo
    grid: tuple[int, int, int]
    stream: int
    config: dict[str, Any]
    tuning: bool
    buffer: Any = None
    keep: bool = False
    graph: Any = None  # the CUDA graph this launch is being captured into
    bracket: Any = None  # int64 rows of the clock bracket (before, after), in buffer's tail
    bracket_at: tuple[int, int] | None = None
    # (--measure-overhead) the stream whose zeroing and first bracket side wait for the gate
    deferred_stream: int | None = None
    launched_from: str | None = None  # the program's frame (call_site)
    fresh: bool = True  # the buffer is not zeroed yet (not from the pool)
    nbytes: int = 0  # bytes of the buffer the launch uses (records and bracket)


class SessionThreadState(threading.local):
    """What a session's collaborators share per thread. Every key has a default on the class,
    so that a thread that never set one reads the default without an AttributeError raised and
    caught inside getattr (about a microsecond each, and a kept launch reads several)."""

    buffer: Any = None  # the device buffer prepared for the launch under way (LaunchBuffers)
    pending: Any = None  # that launch's _Pending
    capture: Any = None  # (graph, capture mode) while a CUDA graph captures on this thread
    measure: Any = None  # --measure-overhead's timing of the launch under way
    measure_start: Any = None
    plain: bool = False  # the program's plain builds are being compiled and launched (Autotuning)
    tuning: Any = None  # what an autotuner is timing now: a config, or "inductor"
    autotuner: Any = None  # the Triton autotuner whose run this launch is in

