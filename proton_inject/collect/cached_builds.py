"""Instrumented builds kept between sessions (issue 29): the session side of
``formats/build_cache.py``.

A session compiles its instrumented builds into the cache directory of its build key, with
Triton's cache key made stable across sessions (``_stable_cache_key``); after each compile the
hook's record of it goes beside the build, and a build found in the cache gives the hook that
record back (``after_compile``), so a cached kernel is profiled as one compiled in this session.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from proton_inject.formats import build_cache


class CachedBuilds:
    """Mixed into ``Session``: where its instrumented builds are compiled and found."""

    def _instrumented_cache(self) -> str:
        """The cache directory of this session's instrumented builds: ``formats/build_cache``'s
        directory for its key, or a private one (``--no-cache``, a custom Triton cache manager,
        or a cache directory that cannot be made)."""
        import triton
        import triton.compiler.compiler as tcc

        if self._tmp is None:
            self._tmp = tempfile.mkdtemp(prefix="proton-inject-run-")
        private = os.path.join(self._tmp, "cache")
        os.makedirs(private, exist_ok=True)
        if not self.build_cache or triton.knobs.cache.manager_class is not None:
            return private
        key = build_cache.build_key(self.source.digest(), repr(self.options), str(self._max_shared),
                                    triton.__version__)
        try:
            d = build_cache.build_dir(key)
            d.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            self._note_once(f"note: no build cache ({e.strerror}: {e.filename}); instrumented "
                            "kernels are compiled again in each session")
            return private
        self._builds = d
        self._stable_key = key
        self.patches.set_attr(tcc, "get_cache_key", self._stable_cache_key(tcc.get_cache_key))
        return str(d)

    def _stable_cache_key(self, orig: Any) -> Any:
        """Triton's cache key with this session's tag replaced by the build key, so a later
        session with the same rules, options and code finds the build; a build cached without
        its hook record (a session that died mid-compile) is removed, so it compiles again."""
        import hashlib

        import triton
        from triton.runtime.cache import get_cache_manager

        session = self
        suffix = f":{self._session_tag}"

        def get_cache_key(src: Any, backend: Any, options: Any, env_vars: Any) -> str:
            mode = str(getattr(options, "instrumentation_mode", "") or "")
            if mode.endswith(suffix):
                try:
                    options = dataclasses.replace(
                        options, instrumentation_mode=f"{mode[:-len(suffix)]}:{session._stable_key}")
                except Exception:  # not a dataclass: keyed by the session tag, never reused
                    pass
            key = orig(src, backend, options, env_vars)
            if session._builds is not None and triton.knobs.cache.dir == str(session._builds):
                # (the directory Triton's compile is about to look in, as it names it)
                group = get_cache_manager(hashlib.sha256(key.encode()).hexdigest()).cache_dir
                if build_cache.has_build_without_sidecar(group):
                    shutil.rmtree(group, ignore_errors=True)
            return key

        return get_cache_key

    def after_compile(self, metadata: dict[str, Any], metadata_group: dict[str, str], cache_hit: bool) -> None:
        """A compile into the tool's cache: record what the hook did beside the build, or, when
        the build came from the cache, tell the hook what it did then."""
        paths = list((metadata_group or {}).values())
        if self._builds is None or not paths:
            return
        group = Path(paths[0]).parent
        if group.parent != self._builds:
            return  # a plain build, in the program's cache
        chash = str(metadata.get("hash", ""))
        if cache_hit:
            rec = build_cache.read_sidecar(group)
            if rec is not None and chash not in self.hook.compiled:
                try:
                    self.hook.restore(chash, rec)
                except (KeyError, TypeError, ValueError) as e:
                    self._note_once(f"note: a cached build of {rec.get('name')} has an unusable "
                                    f"record ({e}); `proton-inject cache clear` removes it")
            return
        rec = self.hook.record(chash)
        if rec is not None:
            try:
                build_cache.write_sidecar(group, rec)
            except OSError:
                pass  # not cached for next time; this session is unaffected

