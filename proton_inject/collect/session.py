"""Run a program with instrumented kernels and collect one profile buffer per launch.

``profile()`` (a context manager) and ``run_program()`` (``proton-inject run``) set up, for the
code they run: Triton's kernel override pointed at a private copy of the instrumented tree
(``.ttgir`` files only: a ``.cubin`` there would replace the instrumented build), a private
compile cache (the cache key does not cover override files), the Proton lowering
(``lowering.installed``), a profile allocator that hands each instrumented launch a zeroed
buffer, and launch hooks that tie each buffer to its launch (kernel, hash, grid, warps,
stream, config). Buffers are copied to pinned host memory on a side stream as kernels finish;
when the program ends, however it ends, what was collected is written under ``out/raw/``.

Raw format (one launch = two files, ``raw/<seq>-<kernel>.bin`` and ``.json``): the ``.bin`` is
the device buffer as the kernel left it, ``grid_size * num_ctas`` blocks of
``scratch_bytes_per_cta`` bytes; the ``.json`` is the launch metadata (see ``LaunchRecord``).
``out/run.json`` lists the launches and the messages of the run.
"""

from __future__ import annotations

import json
import os
import runpy
import shutil
import sys
import tempfile
import threading
import time
import traceback
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proton_inject.collect import bracket, device_ops
from proton_inject.collect.compile_hook import INDUCTOR_PREFIXES, CompileHook, RulesSource, TreeSource, as_rules
from proton_inject.collect.device_ops import in_tool_work, tool_work
from proton_inject.dump import tuning
from proton_inject.dump.program import split_program_argv
from proton_inject.errors import UserError
from proton_inject.formats import autotune as autotune_file
from proton_inject.formats import calibration, clock_bracket
from proton_inject.formats.files import write_atomic
from proton_inject.formats.manifest import jsonable as _jsonable
from proton_inject.instrument.rules import Rules
from proton_inject.lower.options import LoweringOptions, suggest_buffer_size
from proton_inject.lower.probes import records_per_warp_bound
from proton_inject.lower.proton import installed, lowering_skipped

RUN_FORMAT = "proton-inject-run"  # run.json's "format": report tells it from a trace
# Discard buffers captured into graphs we cannot follow: freeing them could let a later
# replay write into someone else's memory.
_KEEP_FOREVER: list[Any] = []


_ALLOC_POOL: Any = None  # one helper thread for device buffers (see _device_empty)
_ALLOC_POOL_LOCK = threading.Lock()


def _device_empty(size: int, device: int, inline: bool = False) -> Any:
    """A device buffer from the default pool, allocated on a helper thread: on the program's
    thread it could come from a CUDA-graph pool (Inductor's cudagraph trees route the thread's
    allocations there and check that pool for unknown tensors). ``inline``: on this thread
    (a global-mode capture forbids allocating from others)."""
    import torch

    def alloc() -> Any:
        with _no_modes():
            return torch.empty(size, dtype=torch.uint8, device=torch.device("cuda", device))

    if inline:
        return alloc()
    global _ALLOC_POOL
    with _ALLOC_POOL_LOCK:
        if _ALLOC_POOL is None:
            from concurrent.futures import ThreadPoolExecutor

            _ALLOC_POOL = ThreadPoolExecutor(1, thread_name_prefix="proton-inject-alloc")
    return _ALLOC_POOL.submit(alloc).result()


class _DiscardBuffers:
    """Device buffers that take records nobody reads (launches not kept, kernels run after
    their session). Reused when large enough, never freed: an in-flight kernel (or a captured
    graph) may still write to them."""

    def __init__(self) -> None:
        self._bufs: list[Any] = []
        self._lock = threading.Lock()

    def get(self, size: int, device: int, inline: bool = False) -> Any:
        with self._lock:
            for b in self._bufs:
                if b.device.index == device and b.numel() >= size:
                    return b
            buf = _device_empty(max(size, 1 << 20), device, inline)
            self._bufs.append(buf)
            return buf


_AFTER_SESSION_BUFFERS = _DiscardBuffers()


def _throwaway_scratch(size: int, alignment: int, stream: int | None) -> Any:
    """Profile scratch for instrumented kernels launched after their session ended.

    Inductor keeps the kernels it compiled inside a ``with profile()`` block; their next
    launch asks Triton for profile scratch, and Triton's default allocator raises in the
    user's code. They get a reused buffer instead (allocated off this thread, which may be
    capturing a CUDA graph); nobody reads it."""
    import torch

    return _AFTER_SESSION_BUFFERS.get(size, torch.cuda.current_device())


def _after_session(prev: Any) -> Any:
    """The profile allocator to restore when a session ends: the program's own if it set one,
    else a throwaway one rather than Triton's default, which raises on instrumented kernels."""
    from triton.runtime import _allocation

    return _throwaway_scratch if isinstance(prev, _allocation.NullAllocator) else prev


def _rank() -> int | None:
    """This process's rank under torchrun (RANK), None for a single-process program."""
    try:
        return int(os.environ["RANK"]) if "RANK" in os.environ else None
    except ValueError:
        return None


def run_index_name(rank: int | None) -> str:
    """run.json, or run.rank<R>.json for one rank of a multi-process job."""
    return "run.json" if rank is None else f"run.rank{rank}.json"


@dataclass
class LaunchRecord:
    """What is known about one instrumented launch whose buffer is kept."""

    seq: int  # order of kept launches in this run, from 0
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
    enqueued_ns: int = 0  # host clock (time.perf_counter_ns) when launched
    all_zero: bool = False
    graph_replay: int | None = None  # replay number of the CUDA graph the launch was captured in
    # Where the clock bracket's rows sit in the copied buffer: (byte offset, CTAs per side);
    # None when the launch had none (then ``clock_bracket`` says why).
    bracket_at: tuple[int, int] | None = None
    clock_bracket: dict[str, Any] | None = None  # LaunchMeta.clock_bracket, set when saved

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


class ProfileBufferTooLarge(Exception):
    """Set up as a subclass of Triton's OutOfResources at run time (autotuners catch it)."""


def _out_of_resources_type() -> type:
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


# --- the instrumented tree -----------------------------------------------------------


def sm_clock_mhz(device: int) -> float | None:
    """The device's max SM clock in MHz, as the driver reports it (CU_DEVICE_ATTRIBUTE_CLOCK_RATE).

    Recorded with every launch: the decoder's fallback rate when a launch is too short for
    its globaltimer reads to determine the clock. None where the driver cannot tell.
    """
    try:
        from triton.runtime import driver

        khz = driver.active.utils.get_device_properties(device).get("sm_clock_rate")
    except Exception:  # a driver without this query must not stop a profiling run
        return None
    return float(khz) / 1000.0 if khz else None










# --- describing launches ------------------------------------------------------------------


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
    wanted: bool | None = None  # a plain build of a kernel we instrument (Session._wanted)


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


@dataclass
class _InFlight:
    record: LaunchRecord
    device_buffer: Any
    host_buffer: Any
    done: Any  # CUDA event recorded after the copy


# --- the session ------------------------------------------------------------------------------


@contextmanager
def _no_modes() -> Iterator[None]:
    """Outside the program's torch modes (set_default_device, Inductor's): our own tensors
    must land where we say, not where the program's context would put them."""
    import torch
    from torch.utils._python_dispatch import _disable_current_modes

    with torch._C.DisableTorchFunction(), _disable_current_modes():
        yield


def _pinned(nbytes: int) -> Any:
    import torch

    with _no_modes():
        return torch.empty(nbytes, dtype=torch.uint8, device="cpu", pin_memory=True)


def _setting(tls: threading.local, attr: str, value_of: Any) -> Any:
    """A method wrapper factory: while the method runs, ``tls.<attr>`` is
    ``value_of(self, kwargs)``; the previous value comes back afterwards."""

    def make(orig: Any) -> Any:
        def wrapper(obj: Any, *args: Any, **kwargs: Any) -> Any:
            prev = getattr(tls, attr, None)
            setattr(tls, attr, value_of(obj, kwargs))
            try:
                return orig(obj, *args, **kwargs)
            finally:
                setattr(tls, attr, prev)

        return wrapper

    return make


class Session:
    """One profiling session: the program's kernels are instrumented as they compile, from
    ``source`` (rules: ``profile``; an instrumented tree: ``run``), and the launches of
    instrumented builds are kept. Use ``api.profile()`` or ``api.profile_program()``."""

    def __init__(
        self,
        source: Rules | dict | RulesSource | TreeSource | str | os.PathLike | None = None,
        out: str | os.PathLike = "traces",
        options: LoweringOptions | None = None,
        max_launches: int | None = None,
        max_pending_mb: float = 256,
        keep_tuning: bool = False,
        autotune_from: str | os.PathLike | None = None,
    ) -> None:
        if max_launches is not None and max_launches < 0:
            raise UserError(f"--max-launches must be >= 0, got {max_launches}")
        if max_pending_mb <= 0:
            raise UserError(f"--max-pending-mb must be > 0, got {max_pending_mb}")
        self.options = options or LoweringOptions()
        self.max_launches = max_launches
        self.max_pending = int(max_pending_mb * 2**20)
        self.out = Path(out)
        # Where each compile's instrumented IR comes from: rules (profile) or a tree (run).
        if isinstance(source, str | os.PathLike):
            source = TreeSource(source)
        if not isinstance(source, RulesSource | TreeSource):
            source = RulesSource(as_rules(source))
        self.source = source
        self.hook = CompileHook(source, self.out / "ir")
        self._unhooked: set[str] = set()  # kernels launched that never went through the hook
        self.keep_tuning = keep_tuning
        self.result = RunResult(out=str(self.out))
        self._tls = threading.local()
        self._lock = threading.RLock()
        self._kernels: dict[int, _KernelInfo] = {}
        self._inflight: deque[_InFlight] = deque()
        self._finished: list[_InFlight] = []
        self._pending_bytes = 0
        self._finished_bytes = 0
        self._discard = _DiscardBuffers()  # for launches not kept
        self._streams: dict[int, Any] = {}
        self._copy_streams: dict[int, Any] = {}
        self._compiled: dict[str, set[str]] = {}  # kernel name -> override hashes compiled
        self._undo: list[Any] = []
        self._tmp: str | None = None
        self._max_shared: int | None = None
        self._device_names: dict[int, str] = {}
        self._device_clocks: dict[int, float | None] = {}
        # The latest full globaltimer value a clock bracket read on each device (direct
        # buffers keep only its low 56 bits: LaunchMeta.timer_ref_ns).
        self._timer_refs: dict[int, int] = {}
        # Clock-bracket kernel per device and its CTAs (one per SM); why, where there is none.
        self._brackets: dict[int, tuple[Any, int]] = {}
        self._bracket_error: str | None = None
        # calibrated, from the user's cache: per device, buffer type and whether warps are chosen
        self._record_costs: dict[tuple[int, str, bool], float | None] = {}
        self._started = False
        self._stopped = False
        self._overridden: dict[str, int] = {}  # kernel -> instrumented builds compiled
        self._plain_mode = ""  # instrumentation_mode before the session (the plain builds')
        self._plain_cache = ""  # compile cache of the plain builds autotuners time
        self.rank = _rank()
        self.gz = True  # raw buffers and traces gzipped (run --no-gz: plain)
        # Files of an earlier run in out would be mixed into this run's report (once the pins
        # that may come from out are read).
        self.clear_out = True
        # Where the autotuning choices to pin come from (a dump, a tree, a run's output, or the
        # file itself); run: its tree, which insert gave the dump's autotune.json.
        if autotune_from is None and isinstance(source, TreeSource):
            autotune_from = source.tree  # run: the tree carries the dump's autotune.json
        self.autotune_from: str | None = None if autotune_from is None else str(autotune_from)
        # Named by the user (profile --autotune-from): missing or damaged is an error.
        self._explicit_pins = autotune_from is not None and not isinstance(source, TreeSource)
        self._tuner: tuning.Tuner | None = None
        self._pins_file: Path | None = None
        self._pins_error: str | None = None
        self._decided = autotune_file.Decisions()  # this run's own choices, written to autotune.json

    # -- setup / teardown --

    def start(self) -> Session:
        """Install everything; raises UserError (nothing left installed) if it cannot run."""
        try:
            import torch
        except ImportError as e:  # pragma: no cover - torch is a dependency
            raise UserError("proton-inject run needs PyTorch with CUDA") from e
        if not torch.cuda.is_available():
            raise UserError(
                "no CUDA GPU is visible (torch.cuda.is_available() is False): run needs one. "
                "To validate instrumented IR without a GPU use: proton-inject check DIR"
            )
        if self.options.granularity != "warp":
            raise UserError(
                f"--granularity {self.options.granularity}: Triton 3.6's NVIDIA Proton lowering "
                "supports warp granularity only; use --granularity warp"
            )
        import triton
        from triton.compiler.compiler import CompiledKernel
        from triton.runtime import _allocation

        if self.options.buffer_type == "global" and getattr(torch.version, "hip", None):
            raise UserError(
                "--buffer-type global: Triton 3.6's AMD Proton lowering does not implement "
                "record stores to global memory; use --buffer-type shared on AMD GPUs"
            )

        if isinstance(self.source, TreeSource):
            self.source.load()  # a bad tree stops the run before the program starts
        self._load_pins()  # before out is cleared: it may be where the pins come from
        if self.clear_out:
            clear_out_dir(self.out, self.rank)
        self._compile_brackets()
        self._tmp = tempfile.mkdtemp(prefix="proton-inject-run-")
        try:
            for d in range(torch.cuda.device_count()):
                self._device_names[d] = torch.cuda.get_device_name(d)
                self._device_clocks[d] = sm_clock_mhz(d)
            self._install_compiler()
            prev_alloc = _allocation._profile_allocator.get()
            _allocation.set_profile_allocator(self._allocate)
            self._undo.append(lambda: _allocation.set_profile_allocator(_after_session(prev_alloc)))
            knobs_rt = triton.knobs.runtime
            knobs_rt.launch_enter_hook.add(self._enter)
            knobs_rt.launch_exit_hook.add(self._exit)
            self._undo.append(lambda: knobs_rt.launch_enter_hook.remove(self._enter))
            self._undo.append(lambda: knobs_rt.launch_exit_hook.remove(self._exit))
            prev_listener = triton.knobs.compilation.listener
            triton.knobs.compilation.listener = self._listener(prev_listener)
            self._patch(CompiledKernel, "launch_metadata", self._wrap_launch_metadata)
            self._patch_cuda_graphs()
        except BaseException:
            self._teardown()
            raise
        self._started = True
        return self

    def _install_compiler(self, target: Any = None) -> None:
        """What decides how kernels build: private caches, the override tree (or the compile
        hook), Inductor's settings, the Proton lowering, the autotuner and compile patches.
        ``target`` (a ``GPUTarget``) sizes the lowering without a GPU (tests); undone by
        ``_teardown``."""
        import triton

        cache_dir = os.path.join(self._tmp or "", "cache")
        os.makedirs(cache_dir, exist_ok=True)
        # Knobs and the environment (Inductor reads TRITON_CACHE_DIR from the environment).
        self._push_scope(triton.knobs.cache.scope())
        self._push_scope(triton.knobs.compilation.scope())
        triton.knobs.cache.dir = cache_dir
        triton.knobs.compilation.dump_ir = False
        self._set_env("TRITON_CACHE_DIR", cache_dir)
        self._load_pins()
        self._install_hook()
        self._setup_inductor()
        # Autotuners time the plain builds (_plain_builds): what the program would build.
        self._plain_mode = triton.knobs.compilation.instrumentation_mode
        self._plain_cache = os.path.join(self._tmp or "", "cache-plain")
        # The session tag keeps the JIT from reusing kernels built in another session.
        tag = f"s{id(self):x}{time.perf_counter_ns():x}"
        hooks = self._push_scope(installed(self.options, target=target, tag=tag))
        self._max_shared = max(h.max_shared for h in hooks.values())
        self._patch_autotuners()
        self._patch_compile()

    def _compile_brackets(self) -> None:
        """The clock-bracket kernel for every device, built before any hook is installed (so
        no rule instruments it and the override leaves it alone). Without it launches keep
        their records; their clock is then fitted or guessed, and said so."""
        import torch

        try:
            for d in range(torch.cuda.device_count()):
                self._brackets[d] = (bracket.compile_for(d),
                                     torch.cuda.get_device_properties(d).multi_processor_count)
        except Exception as e:  # never stop profiling for it
            self._brackets.clear()
            self._bracket_error = f"bracket kernel could not be built ({e})"[:300]
            self.result.messages.append(f"warning: clock {self._bracket_error}; launches whose own "
                                        "timer reads cannot fit the clock get a guessed one")

    def _run_bracket(self, p: _Pending, side: int, stream: int) -> None:
        """Enqueue one side (0 before, 1 after) of ``p``'s bracket on the launch's stream."""
        entry = self._brackets.get(p.buffer.device.index)
        if p.bracket is None or entry is None:  # none, or a launch failed since it was set up
            p.bracket = p.bracket_at = None
            return
        ck, ctas = entry
        try:
            bracket.launch(ck, p.bracket[side], ctas, stream)
        except Exception as e:  # never fail the program's launch because of us
            p.bracket = p.bracket_at = None
            self._bracket_error = f"a bracket launch failed ({e})"[:300]
            self._brackets.clear()
            self.result.messages.append(f"warning: clock {self._bracket_error}; later launches have "
                                        "none")

    def _load_pins(self) -> None:
        """The autotuning choices this session pins (``autotune_from``), once. A damaged file
        in the tree is a warning (autotuners then time, as without one); one named explicitly
        (profile --autotune-from) that is missing or damaged is a UserError."""
        if self._tuner is not None:
            return
        pins, src = None, self.autotune_from
        explicit = self._explicit_pins
        if src and not self.keep_tuning:  # --keep-tuning: the user wants the tuning launches
            path = Path(src) if Path(src).is_file() else autotune_file.find_file(src)
            if path is None and explicit:
                raise UserError(f"--autotune-from {src}: no {autotune_file.FILE_NAME} there (dump writes one "
                                "when the program autotunes; run and profile write one into their -o)")
            if path is not None:
                try:
                    pins = autotune_file.load(path)
                    self._pins_file = path
                except ValueError as e:
                    if explicit:
                        raise UserError(f"--autotune-from: {e}") from e
                    self._pins_error = str(e)
                    self._note_once(f"warning: {e}; autotuners time the plain builds instead")
        self._tuner = tuning.Tuner(pins, record=self._decided.add,
                                     note=lambda text: self._note_once(f"warning: {text}"))


    def _install_hook(self) -> None:
        """The compile hook in place: each compile's instrumented IR comes from ``source``."""
        import triton

        self.out.mkdir(parents=True, exist_ok=True)
        knobs_rt = triton.knobs.runtime
        self.hook.prev = knobs_rt.add_stages_inspection_hook
        knobs_rt.add_stages_inspection_hook = self.hook
        self._undo.append(lambda: setattr(knobs_rt, "add_stages_inspection_hook", self.hook.prev))
        triton.knobs.compilation.override = False

    def _decisions_dir(self) -> Path:
        """profile: beside the instrumented IR (``run OUT/ir`` then takes the same choices);
        run: in OUT, as before (its tree keeps the dump's)."""
        return self.out if isinstance(self.source, TreeSource) else self.out / "ir"

    def _overrides(self, name: str, src: Any = None) -> bool:
        """A kernel the hook instrumented: if a later stage fails, compile it again plain."""
        return any(c.instrumented and c.name == name for c in self.hook.compiled.values())

    def _ir_path(self, rec: LaunchRecord) -> Path | None:
        c = self.hook.compiled.get(rec.compile_hash)
        return self.out / "ir" / c.file if c and c.file else None

    def _scopes(self, rec: LaunchRecord) -> tuple[list, list]:
        c = self.hook.compiled.get(rec.compile_hash)
        return (list(c.scope_names), list(c.scope_parents)) if c else ([], [])

    def inductor_kernels_left_instrumented(self) -> list[str]:
        """Instrumented kernels Inductor compiled: it keeps them past the session (the JIT's own
        kernels are keyed by the instrumentation knob and compile plain again)."""
        if "torch._inductor" not in sys.modules:
            return []
        return sorted({c.name for c in self.hook.compiled.values()
                       if c.instrumented and c.name.startswith(INDUCTOR_PREFIXES)})

    def _push_scope(self, cm: Any) -> Any:
        value = cm.__enter__()
        self._undo.append(lambda: cm.__exit__(None, None, None))
        return value

    def _set_env(self, key: str, value: str) -> None:
        old = os.environ.get(key)
        os.environ[key] = value

        def undo() -> None:
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old

        self._undo.append(undo)

    def _set_attr(self, obj: Any, name: str, value: Any) -> None:
        if not hasattr(obj, name):
            return
        old = getattr(obj, name)
        setattr(obj, name, value)
        self._undo.append(lambda: setattr(obj, name, old))

    def _patch(self, cls: Any, name: str, make: Any) -> None:
        orig = cls.__dict__[name]
        setattr(cls, name, make(orig))
        self._undo.append(lambda: setattr(cls, name, orig))

    def _setup_inductor(self) -> None:
        """torch.compile: compile in this process, skip its caches, use Triton's launcher."""
        self._set_env("TORCHINDUCTOR_COMPILE_THREADS", "1")
        self._set_env("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "1")
        self._set_env("TORCHINDUCTOR_USE_STATIC_CUDA_LAUNCHER", "0")
        try:
            import torch._inductor.config as icfg
        except Exception:  # Inductor missing or broken: plain Triton still works
            return
        # The worker pool would compile without our lowering; the static launcher passes no
        # profile buffer; cached graphs would skip compiling (and the override) altogether.
        self._set_attr(icfg, "compile_threads", 1)
        self._set_attr(icfg, "force_disable_caches", True)
        self._set_attr(icfg, "use_static_cuda_launcher", False)
        self._set_attr(icfg, "autotune_local_cache", False)
        self._set_attr(icfg, "fx_graph_cache", False)

    @contextmanager
    def _plain_builds(self) -> Iterator[None]:
        """Compiles and launches of this block use the program's own builds: no override, no
        Proton lowering, the instrumentation mode of before the session (the JIT keys its
        kernels by it, so it picks the plain build) and a cache of their own (Inductor's
        compile options leave the mode out, so plain and instrumented builds share a key)."""
        import triton

        comp, cache = triton.knobs.compilation, triton.knobs.cache
        prev = (comp.instrumentation_mode, comp.override, cache.dir, getattr(self._tls, "plain", False))
        comp.instrumentation_mode, comp.override = self._plain_mode, False
        cache.dir, self._tls.plain = self._plain_cache or cache.dir, True
        try:
            with lowering_skipped():
                yield
        finally:
            comp.instrumentation_mode, comp.override, cache.dir, self._tls.plain = prev

    @contextmanager
    def _tuning(self, what: Any) -> Iterator[bool]:
        """Launches of this block are autotune benchmarking (``what``: the config, or
        "inductor"). Unless they are kept (--keep-tuning), they run the plain builds, so the
        autotuner times what it times without us and picks the config a plain run picks.
        Yields whether the plain builds are in use."""
        tls = self._tls
        prev = getattr(tls, "tuning", None)
        tls.tuning = what
        try:
            if self.keep_tuning:
                yield False
            else:
                with self._plain_builds():
                    yield True
        finally:
            tls.tuning = prev

    def _patch_autotuners(self) -> None:
        from triton.runtime.autotuner import Autotuner

        session = self

        def bench(orig: Any) -> Any:
            def wrapper(at: Any, *args: Any, **kwargs: Any) -> Any:
                with session._tuning(kwargs.get("config")):
                    return orig(at, *args, **kwargs)

            return wrapper

        # While the autotuner runs, the launch hook can ask it which config won.
        self._patch(Autotuner, "_bench", bench)
        self._patch(Autotuner, "run", _setting(self._tls, "autotuner", lambda at, kw: at))
        tuner = self._tuner or tuning.Tuner()
        self._patch(Autotuner, "run", tuner.triton_run)  # recorded choices first, no timing
        heur = sys.modules.get("torch._inductor.runtime.triton_heuristics")
        if heur is None:
            try:
                import torch._inductor.runtime.triton_heuristics as heur
            except Exception:
                heur = None
        cls = getattr(heur, "CachingAutotuner", None) if heur else None
        if cls is not None and "benchmark_all_configs" in cls.__dict__:
            self._patch(cls, "benchmark_all_configs", self._inductor_benchmark)
        if cls is not None and "coordinate_descent_tuning" in cls.__dict__:
            self._patch(cls, "coordinate_descent_tuning", self._inductor_coordesc)
            self._patch(cls, "coordinate_descent_tuning", tuner.inductor_coordesc)
        if cls is not None and "autotune_to_one_config" in cls.__dict__:
            self._patch(cls, "autotune_to_one_config", tuner.inductor_autotune)

    def _plain_launcher(self, at: Any, launcher: Any) -> Any:
        """An Inductor launcher of ``launcher``'s config built from the plain kernel."""
        with self._plain_builds():
            return at._precompile_config(launcher.config).make_launcher()

    def _inductor_benchmark(self, orig: Any) -> Any:
        """CachingAutotuner.benchmark_all_configs: its launchers were made from instrumented
        builds at precompile, so it times launchers of plain builds of the same configs and
        answers with the instrumented ones (autotune_to_one_config keeps the fastest)."""
        session = self

        def wrapper(at: Any, *args: Any, **kwargs: Any) -> Any:
            pinned = session._tuner.inductor_pinned_timings(at) if session._tuner else None
            if pinned is not None:  # the recorded config wins; nothing is timed
                reset = getattr(at, "reset_to_zero_args", None)
                if reset is not None:
                    reset(*args, **kwargs)  # as after Inductor's own benchmarking
                return pinned
            with session._tuning("inductor") as plain:
                inst = list(getattr(at, "launchers", None) or [])
                if not plain or not inst:
                    return orig(at, *args, **kwargs)
                try:
                    twins = [session._plain_launcher(at, launcher) for launcher in inst]
                except Exception as e:  # time the instrumented builds, as before, and say so
                    session._note_once(f"autotuning timed instrumented builds (a plain build failed: {e}); "
                                       "it may choose other configs than a plain run")
                    return orig(at, *args, **kwargs)
                at.launchers = twins
                try:
                    timings = orig(at, *args, **kwargs)
                finally:
                    at.launchers = inst
                back = {id(t): launcher for t, launcher in zip(twins, inst, strict=True)}
                return {back[id(t)]: v for t, v in timings.items()}

        return wrapper

    def _inductor_coordesc(self, orig: Any) -> Any:
        """CachingAutotuner.coordinate_descent_tuning: compiles and times configs it tries;
        all of that on plain builds, then the winner is built instrumented."""
        session = self

        def wrapper(at: Any, launcher: Any, *args: Any, **kwargs: Any) -> Any:
            pinned = session._tuner.inductor_pinned_coordesc(at) if session._tuner else None
            if pinned is not None:
                return pinned
            with session._tuning("inductor") as plain:
                try:
                    start = session._plain_launcher(at, launcher) if plain else None
                except Exception as e:
                    session._note_once(f"autotuning timed instrumented builds (a plain build failed: {e}); "
                                       "it may choose other configs than a plain run")
                    start = None
                if start is None:
                    return orig(at, launcher, *args, **kwargs)
                winner = orig(at, start, *args, **kwargs)
            if winner is start:
                return launcher
            try:
                return at._precompile_config(winner.config).make_launcher()
            except Exception as e:  # the winner's plain build still runs the program
                session._note_once(f"kernel {getattr(at.fn, '__name__', '?')}: the instrumented build "
                                   f"of its tuned config failed ({e}); it runs uninstrumented")
                return winner

        return wrapper

    def _note_once(self, text: str) -> None:
        with self._lock:
            if text not in self.result.messages:
                self.result.messages.append(text)

    def _patch_compile(self) -> None:
        """Triton prints 'Overriding kernel with file ...' on stdout for every override: count it
        instead (the program's stdout stays its own). An instrumented build that fails to
        compile is compiled again from the original source, with a warning."""
        import triton
        import triton.compiler as tc
        import triton.compiler.compiler as tcc
        from triton.runtime.jit import JITFunction

        def quiet_print(*args: Any, **kwargs: Any) -> None:
            text = " ".join(map(str, args))
            if "Overriding kernel with file" in text:
                name = Path(text.split()[-1]).stem
                with self._lock:
                    self._overridden[name] = self._overridden.get(name, 0) + 1
                return
            print(*args, **kwargs)

        tcc.print = quiet_print  # shadows the builtin in that module only
        self._undo.append(lambda: tcc.__dict__.pop("print", None))
        orig = tcc.compile
        safe = self._with_fallback(orig, lambda src: (
            getattr(getattr(src, "fn", None), "__name__", None) or str(getattr(src, "name", "")),
            src))
        safe.__wrapped__ = orig  # type: ignore[attr-defined]
        for mod in (triton, tc, tcc):
            if getattr(mod, "compile", None) is orig:
                self._set_attr(mod, "compile", safe)
        # JIT functions launched before the session hold Triton's compile itself.
        self._patch(JITFunction, "_do_compile",
                    lambda orig: self._with_fallback(orig, lambda jf: (getattr(jf, "__name__", ""), None)))

    def _fallback(self, name: str, error: BaseException, compile_plain: Any, why: str = "failed to compile") -> Any:
        self.hook.plain_only.add(name)
        for c in self.hook.compiled.values():
            if c.name == name and c.instrumented:
                c.instrumented, c.reason = False, f"instrumented build {why}"
        """Compile the original kernel after its instrumented build failed; warn once."""
        first = (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
        with self._plain_builds():  # its own cache: the instrumented build may sit under its key
            out = compile_plain()  # its own failure is the program's, as without us
        with self._lock:
            self.result.compile_fallbacks.append({"kernel": name, "error": first})
            self.result.messages.append(
                f"warning: kernel {name}: the instrumented build {why} ({first}); it runs uninstrumented"
            )
        return out

    def _resolved(self, ck: Any, max_shared: int | None = None) -> LoweringOptions:
        """The options as the lowering resolved them for this instrumented build (its warps,
        buffer type and size); the options as given if its TTGIR is not at hand."""
        try:
            return self.options.for_kernel(ck.asm["ttgir"], max_shared or self._max_shared)
        except Exception:  # advice and checks only: fall back to the options as given
            return self.options

    def _does_not_fit(self, ck: Any) -> Exception | None:
        """Why an instrumented build cannot launch on this GPU (its shared memory with the
        record buffer is over the limit), or None. Autotuners time the plain builds, so one
        may choose a config whose plain build fits and whose instrumented build does not."""
        md = getattr(ck, "metadata", None)
        if md is None or not int(getattr(md, "profile_scratch_size", 0) or 0):
            return None
        shared, limit = int(getattr(md, "shared", 0) or 0), self._max_shared
        if not limit or shared <= limit or self._resolved(ck).in_global_memory:
            return None
        from triton.runtime.errors import OutOfResources

        return self._explain_oor(ck, OutOfResources(shared, limit, "shared memory"), _out_of_resources_type())


    def _with_fallback(self, orig: Any, identify: Any) -> Any:
        """``orig`` (Triton's compile or JITFunction._do_compile), falling back to the original
        kernel when an instrumented build fails; ``identify(first_arg)`` gives the kernel's
        name and its source (None where the first argument has no hash)."""
        session = self

        def compile(first: Any, *args: Any, **kwargs: Any) -> Any:
            plain = getattr(session._tls, "plain", False)  # a plain build fails as without us
            try:
                out = orig(first, *args, **kwargs)
            except Exception as e:
                name, src = identify(first)
                if plain or not session._started or not session._overrides(name, src):
                    raise
                return session._fallback(name, e, lambda: orig(first, *args, **kwargs))
            big = None if plain or not session._started else session._does_not_fit(out)
            if big is not None:
                return session._fallback(identify(first)[0], big, lambda: orig(first, *args, **kwargs),
                                         "does not fit the GPU's shared memory")
            return out

        return compile

    def _patch_cuda_graphs(self) -> None:
        """Launches captured into a CUDA graph run on every replay: each captured launch gets
        its own buffer, kept alive with the graph, copied out after every replay."""
        import torch

        cls = getattr(torch.cuda, "CUDAGraph", None)
        if cls is None or "capture_begin" not in cls.__dict__ or "replay" not in cls.__dict__:
            return  # captured launches then run unprofiled (counted in in_cuda_graphs)
        tls = self._tls
        session = self

        def capture_begin(orig: Any) -> Any:
            def wrapper(graph: Any, *args: Any, **kwargs: Any) -> Any:
                mode = kwargs.get("capture_error_mode", args[1] if len(args) > 1 else "global")
                tls.capture = (graph, mode)
                return orig(graph, *args, **kwargs)

            return wrapper

        def capture_end(orig: Any) -> Any:
            def wrapper(graph: Any, *args: Any, **kwargs: Any) -> Any:
                tls.capture = None
                return orig(graph, *args, **kwargs)

            return wrapper

        def replay(orig: Any) -> Any:
            def wrapper(graph: Any, *args: Any, **kwargs: Any) -> Any:
                ret = orig(graph, *args, **kwargs)
                captured = graph.__dict__.get("_proton_inject")
                if captured and captured[0] is session and not session._stopped:
                    session._replayed(captured[1], captured[2])
                return ret

            return wrapper

        self._patch(cls, "capture_begin", capture_begin)
        self._patch(cls, "capture_end", capture_end)
        self._patch(cls, "replay", replay)

    def _teardown(self) -> None:
        while self._undo:
            undo = self._undo.pop()
            try:
                undo()
            except Exception as e:  # keep undoing the rest
                self.result.messages.append(f"could not restore a setting: {e}")
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    # -- hooks --

    def _listener(self, prev: Any):
        from triton.runtime.cache import _base32

        def listener(*, src, metadata, metadata_group, times, cache_hit):
            try:
                if hasattr(src, "fn"):
                    name = getattr(src.fn, "__name__", str(src.name))
                    self._compiled.setdefault(name, set()).add(_base32(src.hash()))
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
            plain = getattr(self._tls, "plain", False)  # a plain build an autotuner times
            if chash not in self.hook.compiled and hasattr(ck.src, "fn") and not plain:
                self._unhooked.add(info.name)
        return info

    def _wrap_launch_metadata(self, orig: Any):
        session = self
        oor_type = _out_of_resources_type()

        def launch_metadata(ck, grid, stream, *args):
            try:
                ret = orig(ck, grid, stream, *args)
            except Exception as e:
                raise session._explain_oor(ck, e, oor_type) from e
            if in_tool_work():  # launched by a library under our own device work: not ours
                return ret
            info = session._info(ck)
            tuning = getattr(session._tls, "tuning", None)
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

    def _explain_oor(self, ck: Any, e: Exception, oor_type: type, build_max_shared: int | None = None) -> Exception:
        """Turn Triton's shared-memory OutOfResources for an instrumented build into advice."""
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
        from proton_inject.lower.check import _buffer_split

        buf = _buffer_split(need, nw, built_for, opts) or 0
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

    def _stream_obj(self, stream: int, device: int):
        import torch

        cur = torch.cuda.current_stream(device)
        if cur.cuda_stream == stream:
            return cur
        s = self._streams.get(stream)
        if s is None:
            s = torch.cuda.ExternalStream(stream, device=device)
            self._streams[stream] = s
        return s

    def _allocate(self, size: int, alignment: int, stream: int | None):
        try:
            if in_tool_work():  # a kernel a library launched from inside our own device work
                import torch

                return self._discard.get(size, torch.cuda.current_device())
            with tool_work():
                return self._allocate_buffer(size, stream)
        except Exception as e:  # never fail the program's launch because of us
            import torch

            self._tls.pending = None
            with self._lock:
                if not any(m.startswith("profile buffer allocation failed") for m in self.result.messages):
                    self.result.messages.append(f"profile buffer allocation failed ({e!r}); "
                                                "those launches ran unprofiled")
            return torch.empty(size, dtype=torch.uint8, device=torch.device("cuda", torch.cuda.current_device()))

    def _allocate_buffer(self, size: int, stream: int | None):
        import torch

        pending: _Pending | None = getattr(self._tls, "pending", None)
        device = torch.cuda.current_device()
        capturing = torch.cuda.is_current_stream_capturing()
        graph, mode = getattr(self._tls, "capture", None) or (None, "global")
        # A global-mode capture forbids allocating from other threads: take the graph's pool.
        inline = capturing and mode == "global"
        keep = pending is not None and self._want(pending, capturing)
        if keep and capturing and graph is None:  # captured by an API we do not follow
            with self._lock:
                name = pending.info.name
                self.result.in_cuda_graphs[name] = self.result.in_cuda_graphs.get(name, 0) + 1
            keep = False
        if not keep:
            buf = self._discard.get(size, device, inline)
            if capturing:  # the graph writes to it on every replay, after this session too
                if graph is not None:
                    graph.__dict__.setdefault("_proton_inject_keep", []).append(buf)
                else:
                    _KEEP_FOREVER.append(buf)
            return buf
        s = self._stream_obj(int(stream or 0), device)
        if not capturing:  # event queries are illegal during a capture
            with self._lock:
                self._poll()
                while self._pending_bytes + size > self.max_pending and self._inflight:
                    self._retire(self._inflight.popleft(), wait=True)
        # Outside a capture the clock bracket's rows ride in the buffer's tail: one allocation,
        # one copy. A captured launch has none (a bracket kernel would join the user's graph).
        ctas = 0 if capturing or device not in self._brackets else self._brackets[device][1]
        at = -(-size // 128) * 128
        buf = _device_empty(at + clock_bracket.bracket_bytes(ctas) if ctas else size, device, inline)
        # The driver's memset, not zero_(), which a library may re-route to a Triton kernel; in a
        # capture it becomes part of the graph: zeroed on every replay.
        device_ops.zero(buf, s.cuda_stream)
        pending.buffer = buf
        pending.keep = True
        pending.graph = graph if capturing else None
        if ctas:
            pending.bracket = buf[at:].view(torch.int64).view(2, -1)
            pending.bracket_at = (at, ctas)
            self._run_bracket(pending, 0, s.cuda_stream)
        return buf[:size] if ctas else buf

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

    def _exit(self, lazy: Any) -> None:
        if in_tool_work():
            return
        p: _Pending | None = getattr(self._tls, "pending", None)
        self._tls.pending = None
        if p is None or not p.keep or p.buffer is None:
            return
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
            host = _pinned(p.buffer.numel())
            with torch.cuda.stream(copy_stream):
                device_ops.copy_to_host(host, p.buffer, copy_stream.cuda_stream)
                done = torch.cuda.Event()
                done.record(copy_stream)
            self._inflight.append(_InFlight(rec, p.buffer, host, done))
            self._pending_bytes += p.buffer.numel()

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
            enqueued_ns=time.perf_counter_ns(),
            graph_replay=replay,
        )
        self.result.launches.append(rec)
        return rec

    def _replayed(self, captured: list[_Pending], replays: list[int]) -> None:
        """After a graph replay: copy each captured launch's buffer out, on the replay's
        stream, so the next replay (same stream) cannot overwrite it before the copy."""
        import torch

        with self._lock:
            replays[0] += 1
            self._poll()
            for p in captured:
                if self.max_launches is not None and len(self.result.launches) >= self.max_launches:
                    reason = "past --max-launches"
                    self.result.dropped[reason] = self.result.dropped.get(reason, 0) + 1
                    continue
                device = p.buffer.device.index
                cur = torch.cuda.current_stream(device)
                rec = self._record(p, cur.cuda_stream, device, replay=replays[0])
                host = _pinned(p.buffer.numel())
                with torch.cuda.stream(cur):
                    device_ops.copy_to_host(host, p.buffer, cur.cuda_stream)
                    done = torch.cuda.Event()
                    done.record(cur)
                self._inflight.append(_InFlight(rec, p.buffer, host, done))
                self._pending_bytes += p.buffer.numel()
            while self._pending_bytes > self.max_pending and self._inflight:
                self._retire(self._inflight.popleft(), wait=True)

    # -- draining --

    def _poll(self) -> None:
        while self._inflight and self._inflight[0].done.query():
            self._retire(self._inflight.popleft(), wait=False)

    def _retire(self, item: _InFlight, wait: bool) -> None:
        if wait:
            item.done.synchronize()
        self._pending_bytes -= item.device_buffer.numel()
        item.device_buffer = None
        self._finished.append(item)
        self._finished_bytes += item.host_buffer.numel()
        if self._finished_bytes > self.max_pending:
            self._write_finished()

    def _write_finished(self) -> None:
        for item in self._finished:
            self._save(item.record, item.host_buffer.numpy())
            item.host_buffer = None
        self._finished.clear()
        self._finished_bytes = 0

    def _save(self, rec: LaunchRecord, data: Any) -> None:
        from proton_inject.formats.raw import raw_prefix, save_raw

        if rec.bracket_at is not None:
            at, ctas = rec.bracket_at
            rows = data[at: at + clock_bracket.bracket_bytes(ctas)].view("<i8").reshape(2, ctas, -1)
            rec.clock_bracket = {"before": clock_bracket.summarize(rows[0]),
                                 "after": clock_bracket.summarize(rows[1])}
            for side in rec.clock_bracket.values():
                if side:
                    self._timer_refs[rec.device] = side["t0"]
        else:
            rec.clock_bracket = {"missing": self._why_no_bracket(rec)}
        data = data[: rec.scratch_bytes_per_cta * rec.num_blocks]  # without a bracket's tail
        rec.all_zero = not bool(data.any())
        if not rec.scope_names:
            rec.scope_names, rec.scope_parents = self._scopes(rec)
        meta = self.launch_meta(rec)
        for path in save_raw(raw_prefix(self.out / "raw", meta), data, meta, gz=self.gz):
            self.result.files.append(str(path))

    def _why_no_bracket(self, rec: LaunchRecord) -> str:
        if rec.graph_replay is not None:
            return ("CUDA-graph replay (a bracket kernel cannot be added to the program's graph; "
                    "ns then come from the launch's own timer reads or a guess)")
        return self._bracket_error or "bracket kernel did not run"

    def launch_meta(self, rec: LaunchRecord) -> Any:
        """The decoder's ``LaunchMeta`` for a kept launch."""
        from proton_inject.formats.raw import LaunchMeta

        name = rec.config_name
        return LaunchMeta(
            kernel=rec.kernel,
            grid=rec.grid,
            num_warps=rec.num_warps,
            bytes_per_cta=rec.scratch_bytes_per_cta,
            scopes=dict(rec.scope_names),
            scope_parents=dict(rec.scope_parents),
            scope_locs=dict(c.scope_locs) if (c := self.hook.compiled.get(rec.compile_hash)) else {},
            hash=rec.hash,
            clock_bits=self.options.clock,
            granularity=self.options.granularity,
            sampled_warps=self._sampling(rec)[0],
            sample_ctas=self._sampling(rec)[1],
            buffer_type=self._kernel_options(rec).buffer_type,
            config=f"[tuning] {name}" if rec.tuning else name,
            launch=rec.seq,
            device=self._device_names.get(rec.device),
            sm_clock_mhz=self._device_clocks.get(rec.device),
            rank=self.rank,
            record_cost_cycles=self._record_cost(rec),
            clock_bracket=rec.clock_bracket,
            direct_records=self._direct_records(rec),
            direct_loops=self._kernel_ir(rec)[3],
            timer_ref_ns=self._timer_ref(rec),
        )

    def _timer_ref(self, rec: LaunchRecord) -> int | None:
        """A full globaltimer value near a direct launch: a clock bracket's read on its device
        (its own or, for a graph replay, an earlier launch's), else the host's clock (the
        NVIDIA globaltimer counts Unix-epoch ns; only bits 56-63, 2.3 years, are taken)."""
        if self._direct_records(rec) is None:
            return None
        return self._timer_refs.get(rec.device) or time.time_ns()


    def _kernel_options(self, rec: LaunchRecord) -> LoweringOptions:
        """The options as the lowering resolved them for this launch's kernel
        (``LoweringOptions.for_kernel`` on the IR it was compiled from)."""
        return self._kernel_ir(rec)[0]

    def _kernel_ir(self, rec: LaunchRecord) -> tuple[LoweringOptions, int, list[list[int]] | None,
                                                     list[list[int]] | None]:
        """What the launch's instrumented IR says, read once per kernel: the resolved options,
        N of ``--sample-ctas``, and the record and loop tables if ``direct.py`` lowered it."""
        from proton_inject.instrument.insert import sampled_ctas
        from proton_inject.lower import direct

        cache = self.__dict__.setdefault("_kernel_ir_cache", {})
        key = (rec.compile_hash or rec.hash, rec.kernel)  # configs may share a hash, not their IR
        if key not in cache:
            path = self._ir_path(rec)
            text = path.read_text(encoding="latin-1") if path else ""
            opts = self.options.for_kernel(text, self._max_shared)
            if opts.buffer_type == "direct":
                o = self.options
                table = direct.record_table(text, o.buffer_size, o.sample_iterations)
                loops = direct.loop_table(text, o.buffer_size, o.sample_iterations) or None
            else:
                table = loops = None
                n = self.options.sample_iterations
                if n > 1 and records_per_warp_bound(text) is None:  # records inside loops
                    why = direct.eligible(text, self.options.buffer_size, n) or opts.buffer_type
                    self._note_once(f"kernel {rec.kernel}: --sample-iterations {n} does not apply "
                                    f"(its records are lowered by Proton: {why}); every iteration "
                                    "is recorded")
            cache[key] = (opts, sampled_ctas(text), table, loops)
        return cache[key]

    def _direct_records(self, rec: LaunchRecord) -> list[list[int]] | None:
        """The record slots of a kernel ``direct.py`` lowered (None for Proton's lowering)."""
        return self._kernel_ir(rec)[2]

    def _sampling(self, rec: LaunchRecord) -> tuple[list[int] | None, int]:
        """What this launch's kernel sampled: the warps that recorded, as the lowering chose
        them (None: every warp), and N of ``--sample-ctas``."""
        opts, every_nth, _, _ = self._kernel_ir(rec)
        return (list(opts.selected) if opts.selected else None, every_nth)

    def _record_cost(self, rec: LaunchRecord) -> float | None:
        """The calibrated cost of one record for this launch's device and resolved options."""
        o = self._kernel_options(rec)
        key = (rec.device, o.buffer_type, o.selected is not None)
        if key not in self._record_costs:
            self._record_costs[key] = calibration.lookup(
                self._device_names.get(rec.device), o.clock, o.buffer_type, o.sched_stores,
                selective=o.selected is not None)
        return self._record_costs[key]


    # -- the end --

    def stop(self) -> RunResult:
        """Wait for outstanding copies, write everything, explain what went wrong, uninstall."""
        if self._stopped or not self._started:
            return self.result
        self._stopped = True
        try:
            try:
                with self._lock:
                    while self._inflight:
                        self._retire(self._inflight.popleft(), wait=True)
                    self._write_finished()
            except Exception as e:  # e.g. the program left the GPU in an error state
                self.result.messages.append(f"could not read back {len(self._inflight)} profile buffers: {e}")
            self._diagnose()
            self._write_decisions()
            self._write_index()
        finally:
            self._teardown()
        return self.result

    def _autotune_summary(self) -> list[str]:
        """One line: how many autotuning choices were pinned to recorded ones, how many timed."""
        t = self._tuner
        if t is None or not (t.pinned or t.timed):
            return []
        timed = (f"{t.timed} timed on the plain builds" if not self.keep_tuning
                 else f"{t.timed} timed on the instrumented builds (--keep-tuning)")
        if t.near_tied:
            timed += f" ({t.near_tied} with configs within 2% of the fastest: a plain run may choose another)"
        if self._pins_file is not None:
            tail = " (not recorded: other shapes or kernels than then)" if t.timed else ""
            return [f"autotuning: {t.pinned} choice(s) taken from {self._pins_file}, {timed}{tail}"]
        hint = ("" if self.keep_tuning or self._pins_error else
                "; near-tied configs may be chosen differently than in a plain run: "
                + ("--autotune-from DIR uses recorded choices" if self.autotune_from is None
                   else "dump and insert again to record the plain run's choices"))
        return [f"autotuning: {timed}{hint}"]

    def _write_decisions(self) -> None:
        """This run's autotuning choices, for a later run or profile (--autotune-from)."""
        if not len(self._decided):
            return
        name = autotune_file.FILE_NAME if self.rank is None else f"rank{self.rank}-{autotune_file.FILE_NAME}"
        try:
            path = write_atomic(self._decisions_dir() / name, json.dumps(self._decided.to_json(), indent=1) + "\n")
        except OSError as e:
            self.result.messages.append(f"could not write {name}: {e}")
            return
        self.result.files.append(str(path))


    def _diagnose(self) -> None:
        msgs = self.result.messages
        msgs.extend(self.hook.notes)
        msgs.extend(self.hook.summary())
        if self._unhooked:
            msgs.append(
                f"{', '.join(sorted(self._unhooked))} ran uninstrumented: compiled outside this "
                "process's compiler (a worker process or an on-disk cache of the program's own)"
            )
        if isinstance(self.source, TreeSource):
            seen = {c.name for c in self.hook.compiled.values()}
            never = sorted(n for n in self.source.names if n not in seen and self.source.wants(n))
            if never:
                msgs.append(f"{', '.join(never)}: in the tree but never compiled: the program did "
                            "not launch them (or launched them before profiling started)")
        zero = [r for r in self.result.launches if r.all_zero]
        if zero:
            names = sorted({r.kernel for r in zero})
            msgs.append(
                f"{len(zero)} profile buffers are all zeros ({', '.join(names)}): the kernel ran "
                "without writing records (its records sit where this launch did not go)"
            )
        if not self.result.launches and not msgs:
            msgs.append("no instrumented kernel was launched while profiling")
        msgs.extend(self._autotune_summary())
        for reason, n in sorted(self.result.dropped.items()):
            if reason == "autotune benchmarking" and not self.keep_tuning:
                msgs.append(f"{n} launches of instrumented kernels not kept (autotune benchmarking: "
                            "configs were timed on the plain builds, as without proton-inject)")
            else:
                msgs.append(f"{n} instrumented launches not kept ({reason})")
        graphs = self.result.in_cuda_graphs
        if graphs:
            msgs.append(
                f"{sum(graphs.values())} launches captured into CUDA graphs by an API proton-inject "
                f"does not follow ran unprofiled: {', '.join(f'{k} x{n}' for k, n in sorted(graphs.items()))}"
            )
        # One line per instrumented kernel (Triton's per-compile override notes are swallowed).
        kept: dict[str, int] = {}
        replayed: dict[str, int] = {}
        for r in self.result.launches:
            kept[r.kernel] = kept.get(r.kernel, 0) + 1
            if r.graph_replay is not None:
                replayed[r.kernel] = replayed.get(r.kernel, 0) + 1
        for name, n in sorted(self._overridden.items()):
            extra = f", {replayed[name]} of them CUDA-graph replays" if name in replayed else ""
            msgs.append(f"kernel {name}: {n} instrumented builds, {kept.get(name, 0)} launches kept{extra}")


    def _write_index(self) -> None:
        from proton_inject.formats.raw import raw_prefix

        # Always written (report reads it to explain a run that kept nothing).
        index = {
            "version": 1,
            "format": RUN_FORMAT,
            "rank": self.rank,
            "instrumented_dir": "ir",
            **({"tree": str(self.source.tree)} if isinstance(self.source, TreeSource) else {}),
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
                    "raw": f"raw/{raw_prefix(Path(), self.launch_meta(r)).name}.bin{'.gz' if self.gz else ''}",
                    "all_zero": r.all_zero,
                    "graph_replay": r.graph_replay,
                }  # fmt: skip
                for r in self.result.launches
            ],
            "dropped": self.result.dropped,
            "in_cuda_graphs": self.result.in_cuda_graphs,
            "compile_fallbacks": self.result.compile_fallbacks,
            "autotune": {"pinned": self._tuner.pinned if self._tuner else 0,
                         "timed": self._tuner.timed if self._tuner else 0,
                         "from": str(self._pins_file) if self._pins_file else None},
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


# --- running a session (the API in ``api.py`` adds the analysis) -----------------------------


@contextmanager
def session_block(session: Session) -> Iterator[RunResult]:
    """Start ``session``, yield its result, and stop it however the block ends."""
    session.start()
    try:
        yield session.result
    finally:
        session.stop()


def clear_out_dir(out: Path, rank: int | None = None) -> None:
    """Remove what an earlier run wrote to ``out`` (for one rank: that rank's files only, the
    shared ``ir/`` is rewritten in place); refuse a directory that is not ours."""
    if not out.exists():
        return
    if not out.is_dir():
        raise UserError(f"-o {out}: exists and is not a directory")
    ours = (out / "ir").is_dir() or any(out.glob("run*.json"))
    if any(out.iterdir()) and not ours:
        raise UserError(f"-o {out}: exists and holds files proton-inject did not write; "
                        "choose another -o or remove it")
    if rank is None:
        shutil.rmtree(out / "raw", ignore_errors=True)
        shutil.rmtree(out / "ir", ignore_errors=True)
        stale = [*out.glob("*.json"), *out.glob("*.json.gz")]
    else:
        head = f"rank{rank}-"
        stale = [*out.glob(f"raw/{head}*"), *out.glob(f"{head}*.json"),
                 *out.glob(f"{head}*.json.gz"), out / f"run.rank{rank}.json"]
    for f in stale:
        if f.is_file():
            f.unlink()



def run_in_session(session: Session, argv: Sequence[str], command: str) -> RunResult:
    """Start ``session``, run the program of ``argv`` in it as ``__main__``, stop it.

    ``command`` names the caller in messages about a bad program argv.
    """
    kind, target, args = split_program_argv(argv, command)
    session.start()
    saved_argv, saved_path0 = sys.argv, list(sys.path)
    code = 0
    try:
        if kind == "path":
            sys.argv = [target, *args]
            sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
            runpy.run_path(target, run_name="__main__")
        else:
            sys.argv = [target, *args]
            sys.path.insert(0, os.getcwd())
            runpy.run_module(target, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        traceback.print_exc()
        code = 130
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path0
        session.result.exit_code = code
        session.stop()
    return session.result
