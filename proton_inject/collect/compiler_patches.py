"""How a session changes the way kernels build: private caches, the compile hook, the Proton
lowering, and Triton's compile patched so that an instrumented build that fails (or does not
fit the GPU's shared memory) is built again plain, with a warning."""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from proton_inject.collect.compile_hook import INDUCTOR_PREFIXES
from proton_inject.collect.launch_hooks import out_of_resources_type
from proton_inject.lower.options import LoweringOptions
from proton_inject.lower.proton import installed


class CompilerPatches:
    """The compile side of a ``Session`` (a mixin: the session holds the state)."""

    def install_compiler(self, target: Any = None) -> None:
        """What decides how kernels build: private caches, the override tree (or the compile
        hook), Inductor's settings, the Proton lowering, the autotuner and compile patches.
        ``target`` (a ``GPUTarget``) sizes the lowering without a GPU (tests); undone by
        ``uninstall`` (the compile listener with the compilation knobs' scope)."""
        import triton

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
        self._max_shared = max(h.max_shared for h in hooks.values())
        # Instrumented builds: the tool's cache (kept between sessions) or a private one.
        if self._tmp is None:
            self._tmp = tempfile.mkdtemp(prefix="proton-inject-run-")
        cache_dir = self.builds.directory(self._tmp, (self.source.digest(), repr(self.options),
                                                      str(self._max_shared), triton.__version__),
                                          self._session_tag)
        triton.knobs.cache.dir = cache_dir
        self.patches.set_env("TRITON_CACHE_DIR", cache_dir)  # Inductor reads the environment
        self.autotune.patch_autotuners()
        self._patch_compile()
        # Each compile's record goes to the hook (a build from the cache gets its record back).
        triton.knobs.compilation.listener = self._listener(triton.knobs.compilation.listener)

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
        if c is not None and c.lowered is not None and max_shared in (None, self._max_shared):
            return c.lowered.options
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

        return self.explain_out_of_resources(ck, OutOfResources(shared, limit, "shared memory"),
                                             out_of_resources_type())

    def _with_fallback(self, orig: Any, identify: Any) -> Any:
        """``orig`` (Triton's compile or JITFunction._do_compile), falling back to the original
        kernel when an instrumented build fails; ``identify(first_arg)`` gives the kernel's
        name and its source (None where the first argument has no hash)."""
        session = self

        def compile(first: Any, *args: Any, **kwargs: Any) -> Any:
            plain = session.building_plain  # a plain build fails as without us
            try:
                out = orig(first, *args, **kwargs)
            except Exception as e:
                name, src = identify(first)
                if plain or not session._overrides(name, src):
                    raise
                return session._fallback(name, e, lambda: orig(first, *args, **kwargs))
            big = None if plain else session._does_not_fit(out)
            if big is not None:
                return session._fallback(identify(first)[0], big, lambda: orig(first, *args, **kwargs),
                                         "does not fit the GPU's shared memory")
            return out

        return compile
