"""Run a program with instrumented kernels and collect the profile buffers of the launches kept.

A ``Session`` sets up, for the code it runs: a compile hook that instruments each kernel as it
compiles (from rules, or from an instrumented tree by kernel, hash and config), a private
compile cache, the Proton lowering (``lower.proton.installed``), and the launch path
(``launch_path.py``): each instrumented build's launcher wrapped as it loads, launches kept by
the ``KeepPolicy``, a pooled zeroed buffer for each kept one (``BufferPool``), its copy into a
pinned ring (``HostRing``) landed and written by the ``RawWriter``. When the program ends,
however it ends, the raw launches (``formats/raw.py``) and run.json are written under
``out/``; ``api.py`` then analyzes them. Everything it changes is undone through ``Patches``.
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
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from proton_inject.collect import plain_twins
from proton_inject.collect.autotuning import Autotuning
from proton_inject.collect.buffers import BufferPool, LaunchBuffers, after_session
from proton_inject.collect.cached_builds import CachedBuilds
from proton_inject.collect.compile_hook import CompileHook, RulesSource, TreeSource, as_rules
from proton_inject.collect.compiler_patches import Compiler
from proton_inject.collect.device_kernels import DeviceKernelTimes
from proton_inject.collect.graphs import GraphReplays
from proton_inject.collect.keep_policy import KeepPolicy
from proton_inject.collect.launch_path import LaunchPath
from proton_inject.collect.launches import RunResult, SessionThreadState
from proton_inject.collect.measured_overhead import OverheadMeasurement
from proton_inject.collect.patches import Patches
from proton_inject.collect.sink import Sink
from proton_inject.collect.slabs import Slabs
from proton_inject.dump import tuning
from proton_inject.dump.program import split_program_argv
from proton_inject.errors import UserError
from proton_inject.formats import build_cache
from proton_inject.instrument.rules import Rules
from proton_inject.lower.options import LoweringOptions


def _rank() -> int | None:
    """This process's rank under torchrun (RANK), None for a single-process program."""
    try:
        return int(os.environ["RANK"]) if "RANK" in os.environ else None
    except ValueError:
        return None


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


# --- the session ------------------------------------------------------------------------------


# profile, run and the Python API alike: what the user can do on this machine instead.
NO_GPU = ("no CUDA GPU is visible (torch.cuda.is_available() is False), and profiling runs "
          "kernels on one; without a GPU, `proton-inject dump --target cuda:90 FILE.py:KERNEL "
          "...` compiles a kernel ahead of time, and `insert` then `check` instrument it and "
          "compile the result (scripts/demo.sh does all three)")


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
        keep: KeepPolicy | str | None = None,
    ) -> None:
        if max_launches is not None and max_launches < 0:
            raise UserError(f"--max-launches must be >= 0, got {max_launches}")
        if max_pending_mb <= 0:
            raise UserError(f"--max-pending-mb must be > 0, got {max_pending_mb}")
        self.options = options or LoweringOptions()
        self.max_pending = int(max_pending_mb * 2**20)
        self.out = Path(out)
        # Where each compile's instrumented IR comes from: rules (profile) or a tree (run).
        if isinstance(source, str | os.PathLike):
            source = TreeSource(source)
        if not isinstance(source, RulesSource | TreeSource):
            source = RulesSource(as_rules(source))
        self.source = source
        self.hook = CompileHook(source, self.out / "ir")
        self.keep_tuning = keep_tuning
        self.result = RunResult(out=str(self.out))
        self._tls = SessionThreadState()
        self._lock = threading.RLock()
        # The launch side: which launches are kept (``keep``: a policy or its --keep-launches
        # text, bounded by --max-launches) and their buffers; the sink (the ring of their
        # copies, the writer that saves them) and the launch path that keeps them come below.
        keep = KeepPolicy.parse(keep) if isinstance(keep, str) else keep
        self.keep_policy = (keep or KeepPolicy()).with_total(max_launches)
        self.pool = BufferPool(self.max_pending)
        capturing = lambda: self.launch_path.capturing > 0  # noqa: E731
        self.buffers = LaunchBuffers(self._tls, self._lock, self.result, self.pool, capturing)
        self.patches = Patches()
        self.builds = CachedBuilds(self.hook, self.patches, self._note_once)  # kept between sessions
        self._tmp: str | None = None
        self._started = False
        self._stopped = False
        self.measure_overhead = False  # alternate plain and instrumented launches, time both
        self.device_kernels: DeviceKernelTimes | None = None  # every kernel's GPU time too (--auto)
        self.rank = _rank()
        self.gz = True  # raw buffers and traces gzipped (run --no-gz: plain)
        self.sink = Sink(self.out, self.options, self.hook, lambda: self.compiler.max_shared, self.buffers,
                         self.pool, self.result, self._lock, self._note_once, self.rank, self.max_pending,
                         capturing, lambda: self.gz)
        self.writer = self.sink.writer
        # Files of an earlier run in out would be mixed into this run's report (once the pins
        # that may come from out are read).
        self.clear_out = True
        # Where the autotuning choices to pin come from (a dump, a tree, a run's output, or the
        # file itself); run: its tree, which insert gave the dump's autotune.json. Named by the
        # user (profile --autotune-from), a missing or damaged file is an error. This run's own
        # choices go beside the instrumented IR (profile: ``run OUT/ir`` then takes them) or,
        # for run, into OUT (its tree keeps the dump's).
        tree = isinstance(source, TreeSource)
        if autotune_from is None and tree:
            autotune_from = source.tree
        self.autotune = Autotuning(
            self.patches, self._tls, keep_tuning=keep_tuning,
            autotune_from=None if autotune_from is None else str(autotune_from),
            explicit=autotune_from is not None and not tree,
            decisions_dir=self.out if tree else self.out / "ir", rank=self.rank,
            note=self._note_once, result=self.result, writer=self.writer)
        self.compiler = Compiler(self.hook, self.options, self.patches, self.autotune, self.builds,
                                 self.result, self._lock)
        self.launch_path = LaunchPath(self.keep_policy, "past --max-launches" if max_launches is not None
                                      else "past --keep-launches max", self._tls, self.autotune, self.hook,
                                      self.compiler, self._count_drop)
        self.graphs = GraphReplays(self.patches, self._tls, self.launch_path, self.writer, self._lock,
                                   self.result, self.sink.record, self.sink.copy_out, self._count_drop,
                                   lambda: self._stopped)
        self.slabs = Slabs(self.pool, self.sink, self.buffers)
        self.launch_path.connect(self.buffers, self.sink, self.graphs, self.slabs)

    # -- what the hooks ask of the session (public: tests and tools watch a session by them) --

    @property
    def benchmarking(self) -> Any:
        """What this thread's launches benchmark for an autotuner: the config being timed, or
        "inductor"; None outside autotuning."""
        return self.autotune.benchmarking

    @property
    def building_plain(self) -> bool:
        """Whether this thread compiles and launches the program's plain builds now (while an
        autotuner times them), not instrumented ones."""
        return self.autotune.building_plain

    def autotuning(self, what: Any) -> AbstractContextManager[bool]:
        """The block as the patched autotuners run their benchmarking of ``what`` (a config, or
        "inductor"): on the plain builds unless ``keep_tuning``; yields whether they are."""
        return self.autotune.timing(what)

    @property
    def tuner(self) -> tuning.Tuner:
        """The autotuning choices this session pins and its counts of choices pinned and timed;
        read on first use (a file named by --autotune-from that is missing or damaged: a
        UserError)."""
        self.autotune.load_pins()
        return self.autotune.tuner

    @property
    def shared_memory_limit(self) -> int | None:
        """The shared memory per CTA (bytes) instrumented builds must fit, else they run plain:
        the GPU's, as the lowering installed for it (``install_compiler``) found it."""
        return self.compiler.max_shared

    @shared_memory_limit.setter
    def shared_memory_limit(self, limit: int | None) -> None:
        self.compiler.max_shared = limit

    def install_compiler(self, target: Any = None) -> None:
        """The compile side alone (``Compiler.install``): what ``start`` installs besides the
        GPU parts; ``target`` (a ``GPUTarget``) sizes the lowering without a GPU (tests)."""
        if self._tmp is None:
            self._tmp = tempfile.mkdtemp(prefix="proton-inject-run-")
        self.compiler.install(target, self._tmp)

    def explain_out_of_resources(self, ck: Any, e: Exception, oor_type: type,
                                 build_max_shared: int | None = None) -> Exception:
        """``Compiler.explain_out_of_resources``: a shared-memory OutOfResources as advice."""
        return self.compiler.explain_out_of_resources(ck, e, oor_type, build_max_shared)

    # -- setup / teardown --

    def start(self) -> Session:
        """Install everything; raises UserError (nothing left installed) if it cannot run."""
        try:
            import torch
        except ImportError as e:  # pragma: no cover - torch is a dependency
            raise UserError("profiling needs PyTorch with CUDA") from e
        if not torch.cuda.is_available():
            raise UserError(NO_GPU)
        if self.options.granularity != "warp":
            raise UserError(
                f"--granularity {self.options.granularity}: Triton 3.6's NVIDIA Proton lowering "
                "supports warp granularity only; use --granularity warp"
            )
        from triton.runtime import _allocation

        if self.options.buffer_type == "global" and getattr(torch.version, "hip", None):
            raise UserError(
                "--buffer-type global: Triton 3.6's AMD Proton lowering does not implement "
                "record stores to global memory; use --buffer-type shared on AMD GPUs"
            )

        if isinstance(self.source, TreeSource):
            self.source.load()  # a bad tree stops the run before the program starts
        self.autotune.load_pins()  # before out is cleared: it may be where the pins come from
        if self.clear_out:
            clear_out_dir(self.out, self.rank)
        self.buffers.compile_brackets()
        if self.measure_overhead:
            self.overhead = OverheadMeasurement(self.patches, self._tls, self.autotune, self.hook, self.result,
                                                self.buffers.stream_obj, self.buffers.before_kernel)
            self.overhead.compile_gates()
        try:
            for d in range(torch.cuda.device_count()):
                self.sink.meta.device_names[d] = torch.cuda.get_device_name(d)
                self.sink.meta.device_clocks[d] = sm_clock_mhz(d)
            self.install_compiler()
            prev_alloc = _allocation._profile_allocator.get()
            _allocation.set_profile_allocator(self.buffers.allocate)
            self.patches.on_undo(lambda: _allocation.set_profile_allocator(after_session(prev_alloc)))
            # (no twins where launches are timed: an instrumented one must run instrumented)
            self.launch_path.install(self.patches, twins=plain_twins.enabled() and not self.measure_overhead)
            self.graphs.install()
            if self.measure_overhead:
                self.overhead.install()
            if self.device_kernels is not None:  # (last: the program's kernels alone are timed)
                began = time.perf_counter()
                self.device_kernels.start(self.patches)
                self.result.seconds["profiler"] = time.perf_counter() - began
                self.launch_path.on_quota_spent = self.device_kernels.quota_spent
        except BaseException:
            self.uninstall()
            raise
        self._started = True
        return self

    def _count_drop(self, reason: str) -> None:
        with self._lock:
            self.result.dropped[reason] = self.result.dropped.get(reason, 0) + 1

    def _note_once(self, text: str) -> None:
        with self._lock:
            if text not in self.result.messages:
                self.result.messages.append(text)

    def uninstall(self) -> None:
        """Undo what ``start`` (or ``install_compiler``) installed, and remove its files."""
        self.result.messages += self.patches.undo_all()
        if self.builds.dir is not None:
            try:
                build_cache.prune()
            except OSError:
                pass
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    # -- the end --

    def stop(self) -> RunResult:
        """Wait for outstanding copies, write everything, explain what went wrong, uninstall."""
        if self._stopped or not self._started:
            return self.result
        self._stopped = True
        try:
            if self.device_kernels is not None:
                self.device_kernels.finish(self.out)
            self.launch_path.uninstall()  # no launch is kept past this point
            try:
                self.slabs.ship_all()
            except Exception as e:  # (the writer still saves what it has)
                self.buffers.failed(e, what="some kept launches could not be copied out")
            self.writer.close()  # every kept launch written
            self.result.launches.sort(key=lambda r: r.seq)  # (slabs' records are made as they are saved)
            if self.measure_overhead:
                try:
                    self.result.measured_overhead, lines = self.overhead.results()
                    self.result.messages += lines
                except Exception as e:  # the GPU in an error state: the rest is still written
                    self.result.messages.append(f"measured overhead: not available ({e})")
            self.conclude()
            t = self.autotune.tuner
            self.sink.write_index(
                str(self.source.tree) if isinstance(self.source, TreeSource) else None,
                self.keep_policy.describe(), self.launch_path.per_kernel(),
                {"pinned": t.pinned if t else 0, "timed": t.timed if t else 0, "saved": t.saved if t else 0,
                 "from": str(self.autotune.pins_file) if self.autotune.pins_file else None})
        finally:
            self.uninstall()
        return self.result

    def conclude(self) -> None:
        """What ``stop`` says and writes once the launches are in, besides run.json: the run's
        messages (what was not profiled and why, autotuning's choices pinned and timed) and
        its own autotuning choices (autotune.json, for a later ``--autotune-from``). Needs no
        GPU: a session of the compile side alone (``install_compiler``) concludes too."""
        self._diagnose()
        self.autotune.write_decisions()

    def _diagnose(self) -> None:
        msgs = self.result.messages
        msgs.extend(self.hook.notes)
        msgs.extend(self.hook.summary())
        if self.launch_path.unhooked:
            msgs.append(
                f"{', '.join(sorted(self.launch_path.unhooked))} ran uninstrumented: compiled outside this "
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
        msgs.extend(self.autotune.summary())
        for reason, n in sorted(self.result.dropped.items()):
            if reason == "autotune benchmarking" and not self.keep_tuning:
                # (the reason outside parentheses: a note's one-line form drops those)
                msgs.append(f"{n} launches of instrumented kernels not kept: autotune benchmarking; "
                            "configs were timed on the plain builds, as without proton-inject")
            else:
                msgs.append(f"{n} instrumented launches not kept: {reason}")
        graphs = self.result.in_cuda_graphs
        if graphs:
            msgs.append(
                f"{sum(graphs.values())} launches captured into CUDA graphs by an API proton-inject "
                f"does not follow ran unprofiled: {', '.join(f'{k} x{n}' for k, n in sorted(graphs.items()))}"
            )
        msgs.extend(_kernel_lines(self.result.launches, self.launch_path.per_kernel(),
                                  self.compiler.overridden, self.keep_policy))


def _kernel_lines(launches: list[Any], seen: dict[str, int], built: dict[str, int], policy: KeepPolicy) -> list[str]:
    """One line per instrumented kernel: its builds, launches and those kept (Triton's
    per-compile override notes are swallowed), and the policy where some were not kept."""
    kept: dict[str, int] = {}
    replayed: dict[str, int] = {}
    for r in launches:
        kept[r.kernel] = kept.get(r.kernel, 0) + 1
        if r.graph_replay is not None:
            replayed[r.kernel] = replayed.get(r.kernel, 0) + 1
    lines = []
    for name in sorted(set(built) | set(seen) | set(kept)):
        builds = f"{built[name]} instrumented builds, " if name in built else ""
        ran = f"{seen[name]:,} launches, " if name in seen else ""
        extra = f", {replayed[name]} of them CUDA-graph replays" if name in replayed else ""
        lines.append(f"kernel {name}: {builds}{ran}{kept.get(name, 0):,} kept{extra}")
    if any(seen.get(k, 0) > n for k, n in kept.items()) or any(k not in kept for k in seen):
        lines.append(f"launches kept: {policy.describe()} (--keep-launches)")
    return lines


# --- running a session (the API in ``api.py`` adds the analysis) -----------------------------


@contextmanager
def session_block(session: Session) -> Iterator[RunResult]:
    """Start ``session``, yield its result, and stop it however the block ends."""
    session.start()
    try:
        yield session.result
    finally:
        session.stop()


def check_out_dir(out: Path) -> None:
    """Refuse an ``out`` that is not a directory, or holds files the tool did not write."""
    if not out.exists():
        return
    if not out.is_dir():
        raise UserError(f"-o {out}: exists and is not a directory")
    ours = (out / "ir").is_dir() or any(out.glob("run*.json"))
    if any(out.iterdir()) and not ours:
        raise UserError(f"-o {out}: exists and holds files proton-inject did not write; "
                        "choose another -o or remove it")


def clear_out_dir(out: Path, rank: int | None = None) -> None:
    """Remove what an earlier run wrote to ``out`` (for one rank: that rank's files only, the
    shared ``ir/`` is rewritten in place); refuse a directory that is not ours."""
    if not out.exists():
        return
    check_out_dir(out)
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
    began = time.perf_counter()
    session.start()
    started = time.perf_counter()
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
        ran = time.perf_counter()
        session.stop()
        timed = session.result.seconds
        timed.update(start=started - began, program=ran - started, stop=time.perf_counter() - ran,
                     compile=session.compiler.compile_seconds)
        session.result.compile_calls = session.compiler.compile_calls
    return session.result
