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
from pathlib import Path
from typing import Any

from proton_inject.collect.buffers import Buffers, _after_session, _DiscardBuffers
from proton_inject.collect.compile_hook import INDUCTOR_PREFIXES, CompileHook, RulesSource, TreeSource, as_rules
from proton_inject.collect.device_ops import in_tool_work, tool_work
from proton_inject.collect.graphs import CudaGraphs
from proton_inject.collect.launches import (
    LaunchRecord,
    RunResult,
    _InFlight,
    _KernelInfo,
    _Pending,
    config_name,
    config_of_autotune,
    config_of_kernel,
)
from proton_inject.collect.patches import Patches
from proton_inject.collect.sink import RawSink
from proton_inject.collect.tuning_hooks import TuningHooks
from proton_inject.dump import tuning
from proton_inject.dump.program import split_program_argv
from proton_inject.errors import UserError
from proton_inject.formats import autotune as autotune_file
from proton_inject.instrument.rules import Rules
from proton_inject.lower.options import LoweringOptions, suggest_buffer_size
from proton_inject.lower.proton import installed


def _rank() -> int | None:
    """This process's rank under torchrun (RANK), None for a single-process program."""
    try:
        return int(os.environ["RANK"]) if "RANK" in os.environ else None
    except ValueError:
        return None








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














# --- the session ------------------------------------------------------------------------------








class Session(TuningHooks, Buffers, CudaGraphs, RawSink):
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
        self.patches = Patches()
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
            self.patches.on_undo(lambda: _allocation.set_profile_allocator(_after_session(prev_alloc)))
            knobs_rt = triton.knobs.runtime
            knobs_rt.launch_enter_hook.add(self._enter)
            knobs_rt.launch_exit_hook.add(self._exit)
            self.patches.on_undo(lambda: knobs_rt.launch_enter_hook.remove(self._enter))
            self.patches.on_undo(lambda: knobs_rt.launch_exit_hook.remove(self._exit))
            prev_listener = triton.knobs.compilation.listener
            triton.knobs.compilation.listener = self._listener(prev_listener)
            self.patches.patch(CompiledKernel, "launch_metadata", self._wrap_launch_metadata)
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
        self.patches.push_scope(triton.knobs.cache.scope())
        self.patches.push_scope(triton.knobs.compilation.scope())
        triton.knobs.cache.dir = cache_dir
        triton.knobs.compilation.dump_ir = False
        self.patches.set_env("TRITON_CACHE_DIR", cache_dir)
        self._load_pins()
        self._install_hook()
        self._setup_inductor()
        # Autotuners time the plain builds (_plain_builds): what the program would build.
        self._plain_mode = triton.knobs.compilation.instrumentation_mode
        self._plain_cache = os.path.join(self._tmp or "", "cache-plain")
        # The session tag keeps the JIT from reusing kernels built in another session.
        tag = f"s{id(self):x}{time.perf_counter_ns():x}"
        hooks = self.patches.push_scope(installed(self.options, target=target, tag=tag))
        self._max_shared = max(h.max_shared for h in hooks.values())
        self._patch_autotuners()
        self._patch_compile()

    def _install_hook(self) -> None:
        """The compile hook in place: each compile's instrumented IR comes from ``source``."""
        import triton

        self.out.mkdir(parents=True, exist_ok=True)
        knobs_rt = triton.knobs.runtime
        self.hook.prev = knobs_rt.add_stages_inspection_hook
        knobs_rt.add_stages_inspection_hook = self.hook
        self.patches.on_undo(lambda: setattr(knobs_rt, "add_stages_inspection_hook", self.hook.prev))
        triton.knobs.compilation.override = False

    def _overrides(self, name: str, src: Any = None) -> bool:
        """A kernel the hook instrumented: if a later stage fails, compile it again plain."""
        return any(c.instrumented and c.name == name for c in self.hook.compiled.values())

    def inductor_kernels_left_instrumented(self) -> list[str]:
        """Instrumented kernels Inductor compiled: it keeps them past the session (the JIT's own
        kernels are keyed by the instrumentation knob and compile plain again)."""
        if "torch._inductor" not in sys.modules:
            return []
        return sorted({c.name for c in self.hook.compiled.values()
                       if c.instrumented and c.name.startswith(INDUCTOR_PREFIXES)})

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
        self.patches.on_undo(lambda: tcc.__dict__.pop("print", None))
        orig = tcc.compile
        safe = self._with_fallback(orig, lambda src: (
            getattr(getattr(src, "fn", None), "__name__", None) or str(getattr(src, "name", "")),
            src))
        safe.__wrapped__ = orig  # type: ignore[attr-defined]
        for mod in (triton, tc, tcc):
            if getattr(mod, "compile", None) is orig:
                self.patches.set_attr(mod, "compile", safe)
        # JIT functions launched before the session hold Triton's compile itself.
        self.patches.patch(JITFunction, "_do_compile",
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

    def _teardown(self) -> None:
        self.result.messages += self.patches.undo_all()
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
            enqueued_ns=time.perf_counter_ns(),
            graph_replay=replay,
        )
        self.result.launches.append(rec)
        return rec

    # -- draining --

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
