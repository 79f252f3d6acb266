"""Autotuning decisions: recorded while `dump` runs the program plain, pinned under `run`.

Timing configs is noisy: configs within a few percent of each other are chosen differently by
two plain runs of one program, and a kernel's output bytes can depend on its config (another
block size adds in another order). So `dump` records what each autotuner chose (Triton's
``@triton.autotune`` per autotune key, Inductor's CachingAutotuner per kernel, coordinate
descent included) in ``autotune.json``; `insert` carries the file into the instrumented tree
and `run` (or `profile --autotune-from`) uses the recorded configs without timing. A decision
that was not recorded (other shapes) is timed as before, on the plain builds.

The file: ``{"format": 1, "triton": [...], "inductor": [...]}``. A Triton entry names the
kernel (``module``, ``kernel``: the function's qualified name), ``configs`` (a digest of the
autotuner's config list), ``key`` (the autotune key as Triton builds it: the key arguments'
values, then the dtype of each tensor argument) and ``config``; ``timings`` and
``bench_time`` are what the plain run measured. An Inductor entry names ``kernel`` and ``src``
(a digest of its source and size hints); ``autotune`` is the config chosen among several,
``coordesc`` the coordinate-descent result (either may be null).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from proton_inject.formats import autotune as autotune_file
from proton_inject.formats.autotune import Decisions
from proton_inject.formats.schema import MAX_JSON_BYTES, read_bytes

_SCALARS = (bool, int, float, str, type(None))


def carried_autotune(dump_dir: str | os.PathLike) -> tuple[dict[str, bytes], str | None]:
    """A dump's autotuning decisions, for insert to carry into its tree (run pins them): the
    files to carry and a line saying what was carried, or why not (a damaged file is left
    behind, so that run times every autotuner)."""
    path = Path(dump_dir) / autotune_file.FILE_NAME
    if not path.is_file():
        return {}, None
    try:
        n = len(autotune_file.load(path))
    except ValueError as e:
        return {}, f"warning: {e}; not carried: run times every autotuner"
    return ({autotune_file.FILE_NAME: read_bytes(path, "autotune", MAX_JSON_BYTES)},
            f"carried {autotune_file.FILE_NAME} ({n} autotuning decisions)")


def config_dict(cfg: Any) -> dict[str, Any]:
    """A triton.Config as JSON: what decides the build, and whether it has a pre_hook."""
    kwargs = {str(k): (v if isinstance(v, _SCALARS) else str(v)) for k, v in cfg.kwargs.items()}
    return {"kwargs": kwargs, "num_warps": cfg.num_warps, "num_stages": cfg.num_stages,
            "num_ctas": cfg.num_ctas, "maxnreg": cfg.maxnreg,
            "pre_hook": cfg.pre_hook is not None}  # fmt: skip


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def _configs_digest(configs: Iterable[Any]) -> str:
    return _digest([config_dict(c) for c in configs])


def tuning_key(at: Any, args: tuple, kwargs: dict) -> tuple:
    """The key Triton's ``Autotuner.run`` caches its choice under (triton 3.6)."""
    all_args = {**dict(zip(at.arg_names, args, strict=False)), **kwargs}
    named = {k: v for k, v in all_args.items() if k in at.arg_names}
    key = [named[k] for k in at.keys if k in named]
    key += [str(v.dtype) for v in named.values() if hasattr(v, "dtype")]
    return tuple(key)


def _size(cache: Any) -> int | None:
    """How many choices an autotuner's cache holds, or None when it cannot say (a library's own
    cache object)."""
    try:
        return len(cache)
    except TypeError:
        return None


def _key_json(key: tuple) -> str | None:
    """The key as the file holds it, or None when a part is not a plain scalar."""
    if not all(isinstance(k, _SCALARS) for k in key):
        return None
    return json.dumps(list(key))


def _triton_id(at: Any, key: tuple) -> tuple[str, str, str, str] | None:
    fn = at.base_fn
    kj = _key_json(key)
    if kj is None:
        return None
    return (getattr(fn, "__module__", "") or "", fn.__qualname__, _configs_digest(at.configs), kj)


def _inductor_id(at: Any) -> tuple[str, str]:
    # Its config list is gone after precompile (Inductor sets it to None): the source and the
    # size hints the configs came from stand for it.
    src = f"{getattr(at.fn, 'src', '') or ''}\n{getattr(at, 'size_hints', None)}"
    return (at.fn.__name__, hashlib.sha256(src.encode()).hexdigest()[:16])


def _timings(at: Any) -> list:
    out = []
    for cfg, t in (getattr(at, "configs_timings", None) or {}).items():
        vals = list(t) if isinstance(t, list | tuple) else [t]
        out.append([config_dict(cfg), [float(v) for v in vals]])
    return out


# --- what an autotuner does: record, and pin ---------------------------------------------------


class Tuner:
    """Records each decision autotuners make (``record``, called with an entry) and, where
    ``pins`` holds the decision, makes them take it without timing. ``note`` receives
    warnings (each once). Counts ``pinned`` and ``timed`` decisions, and ``saved``: Triton
    choices its autotuner read from disk (cache_results / TRITON_CACHE_AUTOTUNING)."""

    def __init__(self, pins: Decisions | None = None, record: Callable[[dict], None] | None = None,
                 note: Callable[[str], None] | None = None) -> None:
        self.pins = pins
        self.record = record
        self.note = note or (lambda text: None)
        self.pinned = 0
        self.timed = 0
        self.saved = 0
        self.near_tied = 0  # timed Triton choices whose runner-up was within 2% (noise decides)
        self._lock = threading.Lock()
        self._tls = threading.local()  # per thread: its autotuner runs, whether each read from disk
        self._warned: set[str] = set()
        self._pinned_kernels: set[tuple[str, str]] | None = None  # (module, qualname) in pins.triton

    def _warn(self, text: str) -> None:
        with self._lock:
            if text in self._warned:
                return
            self._warned.add(text)
        self.note(text)

    def _count(self, pinned: bool) -> None:
        with self._lock:
            if pinned:
                self.pinned += 1
            else:
                self.timed += 1

    def _emit(self, entry: dict) -> None:
        if self.record is None:
            return
        try:
            self.record(entry)
        except Exception as e:  # never the program's failure
            self._warn(f"could not record an autotuning decision: {e}")

    # -- Triton's Autotuner --

    def triton_run(self, orig: Any) -> Any:
        """Wrap ``Autotuner.run``: pin a recorded key's config before Triton looks in its
        cache, record the config of a key it tuned."""
        tuner = self

        def run(at: Any, *args: Any, **kwargs: Any) -> Any:
            # The key is made only where it is needed (Triton makes it again: microseconds on
            # every launch of an autotuned kernel): before the run where a choice of this kernel
            # is pinned (or its cache has no size to compare), else after it, where the run added
            # a choice to the autotuner's cache.
            key, fresh, pinned, tuned = None, False, False, len(at.configs) > 1
            held = _size(at.cache) if tuned else None
            if tuned and (held is None or tuner._may_pin(at)):
                try:
                    key = tuning_key(at, args, kwargs)
                    fresh = key not in at.cache
                    pinned = fresh and tuner._pin_triton(at, key, args, kwargs)
                except Exception as e:  # the autotuner then does what it does without us
                    tuner._warn(f"autotune pinning skipped for {getattr(at.base_fn, '__name__', '?')}: {e!r}")
                    tuned = False
            # One cell per run on this thread's stack: an autotuned kernel may launch another
            # (in its benchmark or its launch), whose run must not answer for this one.
            runs = tuner._tls.__dict__.setdefault("runs", [])
            runs.append(cell := [False])
            try:
                ret = orig(at, *args, **kwargs)
            finally:
                runs.pop()
            if tuned and key is None and (_size(at.cache) or 0) > held:  # (this run made a choice)
                try:
                    key, fresh = tuning_key(at, args, kwargs), True
                except Exception:
                    pass
            if fresh and key in at.cache:
                if not pinned:
                    with tuner._lock:
                        if cell[0]:
                            tuner.saved += 1
                        else:
                            tuner.timed += 1
                            tuner.near_tied += _near_tie(getattr(at, "configs_timings", None))
                tuner._record_triton(at, key)
            return ret

        return run

    def triton_disk_cache(self, orig: Any) -> Any:
        """Wrap ``Autotuner.check_disk_cache``: note a choice read from disk (not timed)."""
        tuner = self

        def check_disk_cache(at: Any, *args: Any, **kwargs: Any) -> Any:
            found = orig(at, *args, **kwargs)
            runs = tuner._tls.__dict__.get("runs")
            if runs:  # (the innermost run of this thread is the one that asked)
                runs[-1][0] = found is True
            return found

        return check_disk_cache

    def _may_pin(self, at: Any) -> bool:
        """Whether the pins hold any choice of ``at``'s kernel (they are read once, before any
        run; the set of kernels they name is made on first use)."""
        if self.pins is None or not self.pins.triton:
            return False
        if self._pinned_kernels is None:
            self._pinned_kernels = {ident[:2] for ident in self.pins.triton}
        fn = at.base_fn
        return (getattr(fn, "__module__", "") or "", fn.__qualname__) in self._pinned_kernels

    def _pin_triton(self, at: Any, key: tuple, args: tuple, kwargs: dict) -> bool:
        """Put the recorded choice for ``key`` where Triton's run looks first; whether it did."""
        ident = _triton_id(at, key) if self.pins is not None else None
        entry = self.pins.triton.get(ident) if ident else None
        if entry is None or entry.get("conflict"):
            return False
        want = entry["config"]
        cfg = next((c for c in at.configs if config_dict(c) == want), None)
        if cfg is None:
            self._warn(f"kernel {at.base_fn.__name__}: the recorded config ({want}) is not one of its "
                       "autotune configs; it is timed instead")
            return False
        by_desc = {json.dumps(config_dict(c), sort_keys=True): c for c in at.configs}
        timings = {}
        for item in entry.get("timings") or []:  # the plain run's, for a program that reads them
            if isinstance(item, list) and len(item) == 2 and isinstance(item[1], list):
                c = by_desc.get(json.dumps(item[0], sort_keys=True))
                if c is not None:
                    timings[c] = item[1]
        # What Triton's benchmark() leaves behind: the choice, its timings, the reset of
        # reset_to_zero arguments before the real launch.
        at.cache[key] = cfg
        at.configs_timings = timings or {cfg: [0.0, 0.0, 0.0]}
        at.bench_time = float(entry.get("bench_time") or 0.0)
        full = {**dict(zip(at.arg_names, args, strict=False)), **kwargs, **cfg.all_kwargs()}
        at.pre_hook(full, reset_only=True)
        self._count(True)
        return True

    def _record_triton(self, at: Any, key: tuple) -> None:
        fn = at.base_fn
        if _key_json(key) is None:
            return
        self._emit({"kind": "triton", "module": getattr(fn, "__module__", "") or "", "kernel": fn.__qualname__,
                    "configs": _configs_digest(at.configs), "key": list(key),
                    "config": config_dict(at.cache[key]), "timings": _timings(at),
                    "bench_time": float(getattr(at, "bench_time", 0.0) or 0.0)})

    # -- Inductor's CachingAutotuner --

    def inductor_entry(self, at: Any) -> dict | None:
        """The choices recorded for Inductor's CachingAutotuner ``at`` (its kernel, source and
        size hints), or None: none recorded, or recorded differently twice."""
        if self.pins is None:
            return None
        entry = self.pins.inductor.get(_inductor_id(at))
        return None if entry is None or entry.get("conflict") else entry

    def inductor_pinned_timings(self, at: Any) -> dict | None:
        """For ``benchmark_all_configs``: timings that make ``autotune_to_one_config`` keep the
        recorded config's launcher (built if no launcher has it), or None to time them."""
        entry = self.inductor_entry(at)
        want = entry and entry.get("autotune")
        if not want:
            self._count(False)
            return None
        launchers = list(at.launchers)
        best = next((lc for lc in launchers if config_dict(lc.config) == want), None)
        if best is None:
            try:
                best = at._precompile_config(_make_config(want)).make_launcher()
            except Exception as e:
                self._warn(f"kernel {at.fn.__name__}: the recorded config could not be built ({e}); "
                           "it is timed instead")
                self._count(False)
                return None
            at.launchers = [*launchers, best]
        self._count(True)
        return {lc: (0.0 if lc is best else 1.0) for lc in at.launchers}

    def inductor_pinned_coordesc(self, at: Any) -> Any:
        """For ``coordinate_descent_tuning``: the launcher of the recorded result, or None."""
        entry = self.inductor_entry(at)
        want = entry and entry.get("coordesc")
        if not want:
            self._count(False)
            return None
        try:
            cfg = _make_config(want)
            cfg.found_by_coordesc = True  # as Inductor marks its own result: not tuned again
            launcher = at._precompile_config(cfg).make_launcher()
        except Exception as e:
            self._warn(f"kernel {at.fn.__name__}: the recorded coordinate-descent config could not be "
                       f"built ({e}); it is tuned instead")
            self._count(False)
            return None
        self._count(True)
        return launcher

    def inductor_autotune(self, orig: Any) -> Any:
        """Wrap ``autotune_to_one_config``: record the config it kept."""
        tuner = self

        def wrapper(at: Any, *args: Any, **kwargs: Any) -> Any:
            ret = orig(at, *args, **kwargs)
            launchers = getattr(at, "launchers", None) or []
            if len(launchers) == 1:
                tuner._emit({"kind": "inductor", **tuner.inductor_names(at),
                             "autotune": config_dict(launchers[0].config), "coordesc": None})
            return ret

        return wrapper

    def inductor_coordesc(self, orig: Any) -> Any:
        """Wrap ``coordinate_descent_tuning``: record the config it returned."""
        tuner = self

        def wrapper(at: Any, launcher: Any, *args: Any, **kwargs: Any) -> Any:
            winner = orig(at, launcher, *args, **kwargs)
            if winner is not None and getattr(winner, "config", None) is not None:
                tuner._emit({"kind": "inductor", **tuner.inductor_names(at),
                             "autotune": None, "coordesc": config_dict(winner.config)})
            return winner

        return wrapper

    @staticmethod
    def inductor_names(at: Any) -> dict:
        """What autotune.json knows a CachingAutotuner by: its kernel's name and a digest of
        its source and size hints (Inductor drops the config list after precompile)."""
        kernel, src = _inductor_id(at)
        return {"kernel": kernel, "src": src}


def _near_tie(timings: Any, within: float = 0.02) -> bool:
    """Whether the two fastest of Triton's ``configs_timings`` are within ``within``."""
    firsts = sorted(float(t[0] if isinstance(t, list | tuple) else t) for t in (timings or {}).values())
    return len(firsts) > 1 and firsts[0] > 0 and firsts[1] <= firsts[0] * (1 + within)


def _make_config(c: dict) -> Any:
    """A triton.Config from the file (Inductor's configs have no pre_hook)."""
    import triton

    if c.get("pre_hook"):
        raise ValueError("the config had a pre_hook")
    return triton.Config(dict(c["kwargs"]), num_warps=c["num_warps"], num_stages=c["num_stages"],
                         num_ctas=c["num_ctas"], maxnreg=c.get("maxnreg"))


def caching_autotuner() -> Any:
    """Inductor's CachingAutotuner class, if Inductor is already imported (else None)."""
    heur = sys.modules.get("torch._inductor.runtime.triton_heuristics")
    return getattr(heur, "CachingAutotuner", None)


# --- the dump's child ------------------------------------------------------------------------


def record_in_child(lines_path: str, program_cache: str = "") -> Callable[[], None]:
    """In `dump`'s child: record every decision into ``lines_path`` (JSON lines). Patches
    Triton's Autotuner now; returns a function that patches Inductor's CachingAutotuner once
    it is imported (the child calls it from its compile listener). Where the child's Triton
    cache is private, ``program_cache`` names the program's own: choices saved to disk
    (cache_results / TRITON_CACHE_AUTOTUNING) are read from and written to it, so the dump
    takes a plain run's."""
    from triton.runtime.autotuner import Autotuner

    lock = threading.Lock()

    def record(entry: dict) -> None:
        with lock, open(lines_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")

    def note(text: str) -> None:
        print(f"proton-inject dump: {text}", file=sys.stderr)

    tuner = Tuner(record=record, note=note)
    Autotuner.run = tuner.triton_run(Autotuner.__dict__["run"])
    disk = Autotuner.__dict__.get("check_disk_cache")
    if program_cache and disk is not None:
        Autotuner.check_disk_cache = tuner.triton_disk_cache(saved_choices_in(program_cache)(disk))
    done = []

    def patch_inductor() -> None:
        cls = caching_autotuner()
        if done or cls is None:
            return
        done.append(cls)
        for name, wrap in (("autotune_to_one_config", tuner.inductor_autotune),
                           ("coordinate_descent_tuning", tuner.inductor_coordesc)):
            if name in cls.__dict__:
                setattr(cls, name, wrap(cls.__dict__[name]))

    return patch_inductor


def saved_choices_in(cache_dir: str) -> Callable[[Any], Any]:
    """A wrapper for ``Autotuner.check_disk_cache``: the saved choices (cache_results /
    TRITON_CACHE_AUTOTUNING) are read from and written to ``cache_dir``, the program's own
    Triton cache; the configs it benchmarks on a miss still build where they built before."""
    import triton

    def wrap(orig: Any) -> Any:
        def check_disk_cache(at: Any, tuning_key: Any, configs: Any, bench_fn: Any) -> Any:
            cache = triton.knobs.cache
            prev = cache.dir
            target = cache_dir or prev

            def bench() -> Any:
                cache.dir = prev
                try:
                    return bench_fn()
                finally:
                    cache.dir = target

            cache.dir = target
            try:
                return orig(at, tuning_key, configs, bench)
            finally:
                cache.dir = prev

        return check_disk_cache

    return wrap
