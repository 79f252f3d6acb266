"""Autotuners and Inductor under a session: configs timed on plain builds or pinned to recorded
choices. ``Autotuning`` is the session's collaborator for it: it owns the pinned choices, this
run's own choices, and the switch to plain builds while a tuner times configs."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from proton_inject.dump import tuning
from proton_inject.errors import UserError
from proton_inject.formats import autotune as autotune_file
from proton_inject.formats.files import write_atomic
from proton_inject.lower.proton import lowering_skipped


class Autotuning:
    """How a session treats the program's autotuners and Inductor: configs are timed on plain
    builds (or pinned to recorded choices), Inductor compiles in this process.

    It needs from the session only: the undo stack (``patches``), the thread-local state its
    hooks share with the launch path (``tls``: ``tuning``, ``plain``, ``autotuner``), where the
    run's choices go, a way to say something once (``note``), the run's result (files and
    messages) and the raw writer (held while configs are timed)."""

    def __init__(self, patches: Any, tls: threading.local, *, keep_tuning: bool,
                 autotune_from: str | None, explicit: bool, decisions_dir: Path, rank: int | None,
                 note: Any, result: Any, writer: Any) -> None:
        self.patches, self._tls, self.keep_tuning = patches, tls, keep_tuning
        self.autotune_from, self._explicit_pins = autotune_from, explicit
        self._decisions_at, self.rank, self._note_once = decisions_dir, rank, note
        self.result, self.writer = result, writer
        self.tuner: tuning.Tuner | None = None
        self.pins_file: Path | None = None
        self._pins_error: str | None = None
        self._decided = autotune_file.Decisions()  # this run's own choices, written to autotune.json
        self.plain_mode = ""  # instrumentation_mode before the session (the plain builds')
        self.plain_cache = ""  # compile cache of the plain builds autotuners time

    @property
    def benchmarking(self) -> Any:
        """What this thread's launches benchmark for an autotuner: the config being timed, or
        "inductor"; None outside autotuning."""
        return getattr(self._tls, "tuning", None)

    @property
    def building_plain(self) -> bool:
        """Whether this thread compiles and launches the program's plain builds now."""
        return getattr(self._tls, "plain", False)

    def load_pins(self) -> None:
        """The autotuning choices this session pins (``autotune_from``), once. A damaged file
        in the tree is a warning (autotuners then time, as without one); one named explicitly
        (profile --autotune-from) that is missing or damaged is a UserError."""
        if self.tuner is not None:
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
                    self.pins_file = path
                except ValueError as e:
                    if explicit:
                        raise UserError(f"--autotune-from: {e}") from e
                    self._pins_error = str(e)
                    self._note_once(f"warning: {e}; autotuners time the plain builds instead")
        self.tuner = tuning.Tuner(pins, record=self._decided.add,
                                     note=lambda text: self._note_once(f"warning: {text}"))

    def setup_inductor(self) -> None:
        """torch.compile: compile in this process, skip its graph caches, use Triton's launcher."""
        self.patches.set_env("TORCHINDUCTOR_COMPILE_THREADS", "1")
        self.patches.set_env("TORCHINDUCTOR_FX_GRAPH_CACHE", "0")
        self.patches.set_env("TORCHINDUCTOR_AUTOGRAD_CACHE", "0")
        self.patches.set_env("TORCHINDUCTOR_USE_STATIC_CUDA_LAUNCHER", "0")
        # The worker pool would compile without our lowering; the static launcher passes no
        # profile buffer; cached graphs would skip compiling (and the override) altogether.
        # Inductor's autotune cache stays on, as in the plain run: its choices are then the
        # plain run's (its entries are named by the hash of each kernel's module, whose text
        # holds the cache settings, so those must stay the plain run's too). (Imported by the
        # program during the session, the configs read the variables above already; these
        # settings then stay after it, as the import did.)
        def configure(icfg: Any) -> None:
            self.patches.set_attr(icfg, "compile_threads", 1)
            self.patches.set_attr(icfg, "fx_graph_cache", False)
            self.patches.set_attr(icfg, "use_static_cuda_launcher", False)
            if self.keep_tuning:  # choices timed on instrumented builds stay out of the user's cache
                self.patches.set_attr(icfg, "autotune_local_cache", False)

        self.patches.when_imported("torch._functorch.config",
                                   lambda fcfg: self.patches.set_attr(fcfg, "enable_autograd_cache", False))
        self.patches.when_imported("torch._inductor.config", configure)

    @contextmanager
    def plain_builds(self) -> Iterator[None]:
        """Compiles and launches of this block use the program's own builds: no override, no
        Proton lowering, the instrumentation mode of before the session (the JIT keys its
        kernels by it, so it picks the plain build) and a cache of their own (Inductor's
        compile options leave the mode out, so plain and instrumented builds share a key)."""
        import triton

        comp, cache = triton.knobs.compilation, triton.knobs.cache
        prev = (comp.instrumentation_mode, comp.override, cache.dir, getattr(self._tls, "plain", False))
        comp.instrumentation_mode, comp.override = self.plain_mode, False
        cache.dir, self._tls.plain = self.plain_cache or cache.dir, True
        try:
            with lowering_skipped():
                yield
        finally:
            comp.instrumentation_mode, comp.override, cache.dir, self._tls.plain = prev

    @contextmanager
    def timing(self, what: Any) -> Iterator[bool]:
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
                with self.plain_builds(), self.writer.held():
                    yield True
        finally:
            tls.tuning = prev

    def patch_autotuners(self) -> None:
        from triton.runtime.autotuner import Autotuner

        autotuning = self

        def bench(orig: Any) -> Any:
            def wrapper(at: Any, *args: Any, **kwargs: Any) -> Any:
                with autotuning.timing(kwargs.get("config")):
                    return orig(at, *args, **kwargs)

            return wrapper

        # While the autotuner runs, the launch path can ask it which config won.
        self.patches.patch(Autotuner, "_bench", bench)
        self.patches.patch(Autotuner, "run", _running(self._tls))
        tuner = self.tuner or tuning.Tuner()
        self.patches.patch(Autotuner, "run", tuner.triton_run)  # recorded choices first, no timing
        # Choices saved by cache_results / TRITON_CACHE_AUTOTUNING live in the program's cache:
        # read (and write) them there, so a profile takes the plain run's config. Not under
        # --keep-tuning: choices timed on instrumented builds must not reach the program's cache.
        if "check_disk_cache" in Autotuner.__dict__:
            if not self.keep_tuning:
                self.patches.patch(Autotuner, "check_disk_cache", tuning.saved_choices_in(self.plain_cache))
            self.patches.patch(Autotuner, "check_disk_cache", tuner.triton_disk_cache)
        self.patches.when_imported("torch._inductor.runtime.triton_heuristics",
                                   lambda heur: self._patch_inductor_tuner(heur, tuner))

    def _patch_inductor_tuner(self, heur: Any, tuner: tuning.Tuner) -> None:
        cls = getattr(heur, "CachingAutotuner", None)
        if cls is not None and "benchmark_all_configs" in cls.__dict__:
            self.patches.patch(cls, "benchmark_all_configs", self._inductor_benchmark)
        if cls is not None and "coordinate_descent_tuning" in cls.__dict__:
            self.patches.patch(cls, "coordinate_descent_tuning", self._inductor_coordesc)
            self.patches.patch(cls, "coordinate_descent_tuning", tuner.inductor_coordesc)
        if cls is not None and "autotune_to_one_config" in cls.__dict__:
            self.patches.patch(cls, "autotune_to_one_config", tuner.inductor_autotune)

    def _plain_launcher(self, at: Any, launcher: Any) -> Any:
        """An Inductor launcher of ``launcher``'s config built from the plain kernel."""
        with self.plain_builds():
            return at._precompile_config(launcher.config).make_launcher()

    def _inductor_benchmark(self, orig: Any) -> Any:
        """CachingAutotuner.benchmark_all_configs: its launchers were made from instrumented
        builds at precompile, so it times launchers of plain builds of the same configs and
        answers with the instrumented ones (autotune_to_one_config keeps the fastest)."""
        autotuning = self

        def wrapper(at: Any, *args: Any, **kwargs: Any) -> Any:
            pinned = autotuning.tuner.inductor_pinned_timings(at) if autotuning.tuner else None
            if pinned is not None:  # the recorded config wins; nothing is timed
                reset = getattr(at, "reset_to_zero_args", None)
                if reset is not None:
                    reset(*args, **kwargs)  # as after Inductor's own benchmarking
                return pinned
            with autotuning.timing("inductor") as plain:
                inst = list(getattr(at, "launchers", None) or [])
                if not plain or not inst:
                    return orig(at, *args, **kwargs)
                try:
                    twins = [autotuning._plain_launcher(at, launcher) for launcher in inst]
                except Exception as e:  # time the instrumented builds, as before, and say so
                    autotuning._note_once(f"autotuning timed instrumented builds (a plain build failed: {e}); "
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
        autotuning = self

        def wrapper(at: Any, launcher: Any, *args: Any, **kwargs: Any) -> Any:
            pinned = autotuning.tuner.inductor_pinned_coordesc(at) if autotuning.tuner else None
            if pinned is not None:
                return pinned
            with autotuning.timing("inductor") as plain:
                try:
                    start = autotuning._plain_launcher(at, launcher) if plain else None
                except Exception as e:
                    autotuning._note_once(f"autotuning timed instrumented builds (a plain build failed: {e}); "
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
                autotuning._note_once(f"kernel {getattr(at.fn, '__name__', '?')}: the instrumented build "
                                   f"of its tuned config failed ({e}); it runs uninstrumented")
                return winner

        return wrapper

    def summary(self) -> list[str]:
        """One line: how many autotuning choices were pinned to recorded ones, how many timed."""
        t = self.tuner
        if t is None or not (t.pinned or t.timed or t.saved):
            return []
        timed = (f"{t.timed} timed on the plain builds" if not self.keep_tuning
                 else f"{t.timed} timed on the instrumented builds (--keep-tuning)")
        if t.saved:
            timed = f"{t.saved} read from the program's saved choices (TRITON_CACHE_AUTOTUNING), {timed}"
        if t.near_tied:
            timed += f" ({t.near_tied} with configs within 2% of the fastest: a plain run may choose another)"
        if self.pins_file is not None:
            tail = " (not recorded: other shapes or kernels than then)" if t.timed else ""
            return [f"autotuning: {t.pinned} choice(s) taken from {self.pins_file}, {timed}{tail}"]
        hint = ("" if self.keep_tuning or self._pins_error else
                "; near-tied configs may be chosen differently than in a plain run: "
                + ("--autotune-from DIR uses recorded choices" if self.autotune_from is None
                   else "dump and insert again to record the plain run's choices"))
        return [f"autotuning: {timed}{hint}"]

    def write_decisions(self) -> None:
        """This run's autotuning choices, for a later run or profile (--autotune-from)."""
        if not len(self._decided):
            return
        name = autotune_file.FILE_NAME if self.rank is None else f"rank{self.rank}-{autotune_file.FILE_NAME}"
        try:
            path = write_atomic(self._decisions_at / name, json.dumps(self._decided.to_json(), indent=1) + "\n")
        except OSError as e:
            self.result.messages.append(f"could not write {name}: {e}")
            return
        self.result.files.append(str(path))


def _running(tls: Any) -> Any:
    """An ``Autotuner.run`` wrapper factory: while the run lasts, ``tls.autotuner`` is the
    autotuner (the launch path asks it which config won); the previous one comes back after.
    (Every launch of an autotuned kernel passes here: no more than that.)"""

    def make(orig: Any) -> Any:
        def run(at: Any, *args: Any, **kwargs: Any) -> Any:
            prev = tls.autotuner
            tls.autotuner = at
            try:
                return orig(at, *args, **kwargs)
            finally:
                tls.autotuner = prev

        return run

    return make
