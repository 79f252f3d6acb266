"""How a session changes the way kernels build: private caches, the compile hook, the Proton
lowering, and Triton's compile patched so that an instrumented build that fails (or does not
fit the GPU's shared memory) is built again plain, with a warning. ``Compiler`` is the
session's collaborator for it."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

from proton_inject.collect.compile_hook import INDUCTOR_PREFIXES
from proton_inject.lower.options import LoweringOptions, suggest_buffer_size
from proton_inject.lower.proton import installed


class Compiler:
    """The compile side of a session. It needs: the compile hook, the lowering options, the
    undo stack, the autotuning and cached-builds collaborators, the run's result and its lock.
    It finds the GPU's shared memory per CTA (``max_shared``) and counts the instrumented
    builds the override made per kernel (``overridden``)."""

    def __init__(self, hook: Any, options: LoweringOptions, patches: Any, autotune: Any,
                 builds: Any, result: Any, lock: Any) -> None:
        self.hook, self.options, self.patches = hook, options, patches
        self.autotune, self.builds, self.result, self._lock = autotune, builds, result, lock
        self.max_shared: int | None = None  # what instrumented builds must fit, else plain
        self.overridden: dict[str, int] = {}  # kernel -> instrumented builds compiled
        self._session_tag = ""
        self.oor_type: type | None = None  # the advice's error type (a subclass of Triton's), once installed
        # Triton's compile calls while the program ran (builds and cache loads, summed over threads):
        # the part of a profile's wall time spent making or loading builds.
        self.compile_seconds, self.compile_calls = 0.0, 0
        self._depth = threading.local()  # (a compile inside a compile is counted in the outer one)
        self._timing = threading.Lock()  # (its own: the caller may hold the run's lock)

    def install(self, target: Any, private_root: str) -> None:
        """What decides how kernels build: private caches (under ``private_root``), the
        override tree (or the compile hook), Inductor's settings, the Proton lowering, the
        autotuner and compile patches. ``target`` (a ``GPUTarget``) sizes the lowering without
        a GPU (tests); undone with the patches (the listener with the compilation knobs)."""
        import triton

        self.oor_type = out_of_resources_type()
        # Plain builds (those autotuners time) stay in the program's own cache, as without us.
        self.autotune.plain_cache = triton.knobs.cache.dir
        self.patches.push_scope(triton.knobs.cache.scope())
        self.patches.push_scope(triton.knobs.compilation.scope())
        triton.knobs.compilation.dump_ir = False
        self.autotune.load_pins()
        self._install_hook()
        self.autotune.setup_inductor()
        # Autotuners time the plain builds (Autotuning.plain_builds): what the program would build.
        self.autotune.plain_mode = triton.knobs.compilation.instrumentation_mode
        # The session tag keeps the JIT from reusing kernels built in another session (their
        # hook records are that session's); on disk, builds are keyed by _stable_key instead.
        self._session_tag = f"s{id(self):x}{time.perf_counter_ns():x}"
        hooks = self.patches.push_scope(installed(self.options, target=target, tag=self._session_tag))
        self.max_shared = max(h.max_shared for h in hooks.values())
        # Instrumented builds: the tool's cache (kept between sessions) or a private one.
        cache_dir = self.builds.directory(private_root, (self.hook.source.digest(), repr(self.options),
                                                         str(self.max_shared), triton.__version__),
                                          self._session_tag)
        triton.knobs.cache.dir = cache_dir
        self.patches.set_env("TRITON_CACHE_DIR", cache_dir)  # Inductor reads the environment
        self.autotune.patch_autotuners()
        self._patch_compile()
        # Each compile's record goes to the hook (a build from the cache gets its record back).
        triton.knobs.compilation.listener = self._listener(triton.knobs.compilation.listener)

    def _listener(self, prev: Any) -> Any:
        """Triton's compile listener: each compile's record goes to the cached builds (a build
        from the cache gets its record back); the program's own listener runs after."""

        def listener(*, src, metadata, metadata_group, times, cache_hit):
            try:
                self.builds.after_compile(metadata, metadata_group, cache_hit)
            finally:
                if prev is not None:
                    prev(
                        src=src, metadata=metadata, metadata_group=metadata_group,
                        times=times, cache_hit=cache_hit,
                    )  # fmt: skip

        return listener

    def _install_hook(self) -> None:
        """The compile hook in place: each compile's instrumented IR comes from ``source``."""
        import triton

        self.hook.ir_dir.parent.mkdir(parents=True, exist_ok=True)
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
                    self.overridden[name] = self.overridden.get(name, 0) + 1
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
        """Compile the original kernel after its instrumented build failed; warn once."""
        self.hook.plain_only.add(name)
        for c in self.hook.compiled.values():
            if c.name == name and c.instrumented:
                c.instrumented, c.reason = False, f"instrumented build {why}"
        first = (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
        with self.autotune.plain_builds():  # its own cache: the instrumented build may sit under its key
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
        c = self.hook.compiled.get(str(getattr(ck.metadata, "hash", "")))
        if c is not None and c.lowered is not None and max_shared in (None, self.max_shared):
            return c.lowered.options
        try:
            return self.options.for_kernel(ck.asm["ttgir"], max_shared or self.max_shared)
        except Exception:  # advice and checks only: fall back to the options as given
            return self.options

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
        built_for = build_max_shared or self.max_shared or limit
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
            f"kernel {_kernel_name(ck)}: the instrumented build needs {need} B of shared "
            f"memory per CTA ({buf} B of it for the record buffer) but the GPU allows {limit} B; "
            f"{advice}"
        )
        return oor_type(need, limit, "shared memory", msg)

    def _does_not_fit(self, ck: Any) -> Exception | None:
        """Why an instrumented build cannot launch on this GPU (its shared memory with the
        record buffer is over the limit), or None. Autotuners time the plain builds, so one
        may choose a config whose plain build fits and whose instrumented build does not."""
        md = getattr(ck, "metadata", None)
        if md is None or not int(getattr(md, "profile_scratch_size", 0) or 0):
            return None
        shared, limit = int(getattr(md, "shared", 0) or 0), self.max_shared
        if not limit or shared <= limit or self._resolved(ck).in_global_memory:
            return None
        from triton.runtime.errors import OutOfResources

        return self.explain_out_of_resources(ck, OutOfResources(shared, limit, "shared memory"),
                                             out_of_resources_type())

    def _with_fallback(self, orig: Any, identify: Any) -> Any:
        """``orig`` (Triton's compile or JITFunction._do_compile), falling back to the original
        kernel when an instrumented build fails; ``identify(first_arg)`` gives the kernel's
        name and its source (None where the first argument has no hash)."""
        compiler = self

        def compile(first: Any, *args: Any, **kwargs: Any) -> Any:
            depth = getattr(compiler._depth, "n", 0)
            compiler._depth.n = depth + 1
            start = time.perf_counter()
            try:
                return checked(first, *args, **kwargs)
            finally:
                compiler._depth.n = depth
                if depth == 0:
                    with compiler._timing:
                        compiler.compile_seconds += time.perf_counter() - start
                        compiler.compile_calls += 1

        def checked(first: Any, *args: Any, **kwargs: Any) -> Any:
            plain = compiler.autotune.building_plain  # a plain build fails as without us
            try:
                out = orig(first, *args, **kwargs)
            except Exception as e:
                name, src = identify(first)
                if plain or not compiler._overrides(name, src):
                    raise
                return compiler._fallback(name, e, lambda: orig(first, *args, **kwargs))
            big = None if plain else compiler._does_not_fit(out)
            if big is not None:
                return compiler._fallback(identify(first)[0], big, lambda: orig(first, *args, **kwargs),
                                         "does not fit the GPU's shared memory")
            return out

        return compile


def _kernel_name(ck: Any) -> str:
    return getattr(getattr(ck.src, "fn", None), "__name__", None) or str(ck.name)


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
