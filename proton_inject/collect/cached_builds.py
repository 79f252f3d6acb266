"""Instrumented builds kept between sessions: the session side of
``formats/build_cache.py``.

A session compiles its instrumented builds into the cache directory of its build key, with
Triton's cache key made stable across sessions (``_stable_cache_key``); after each compile the
hook's record of it goes beside the build, and a build found in the cache gives the hook that
record back (``after_compile``), so a cached kernel is profiled as one compiled in this session.
"""

from __future__ import annotations

import dataclasses
import os
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

        kept = self.build_cache and triton.knobs.cache.manager_class is None
        if kept:
            build_cache.max_bytes()  # a bound that is not a number is refused before anything runs
        if self._tmp is None:
            self._tmp = tempfile.mkdtemp(prefix="proton-inject-run-")
        private = os.path.join(self._tmp, "cache")
        os.makedirs(private, exist_ok=True)
        if not kept:
            return private
        key = build_cache.build_key(self.source.digest(), repr(self.options), str(self._max_shared),
                                    triton.__version__)
        try:
            d, lock = build_cache.open_key_dir(key)
        except OSError as e:
            self._note_once(f"note: no build cache ({e.strerror}: {e.filename}); instrumented "
                            "kernels are compiled again in each session")
            return private
        self.patches.on_undo(lambda: os.close(lock))  # (before the session's prune)
        self._checked: dict[str, dict[str, Any]] = {}  # group directory -> its checked record
        self._builds = d
        self._stable_key = key
        self.patches.set_attr(tcc, "get_cache_key", self._stable_cache_key(tcc.get_cache_key))
        return str(d)

    def _stable_cache_key(self, orig: Any) -> Any:
        """Triton's cache key with this session's tag replaced by the build key, so a later
        session with the same rules, options and code finds the build; a build cached without
        its hook record (a session that died mid-compile) or one that fails its check is
        removed, so it compiles again."""
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
                session._check_cached(group, str(getattr(src, "name", "")))
            return key

        return get_cache_key

    def _check_cached(self, group: str, name: str) -> None:
        """Check the build in ``group`` before Triton uses it: keep its record for
        ``after_compile``, or remove it (with a note) so that it is compiled again."""
        try:
            rec = build_cache.checked_build(group)
        except build_cache.DamagedBuild as e:
            if not isinstance(e, build_cache.UnfinishedBuild):  # (that one is no news)
                self._note_once(f"note: a cached build of {name} was not used ({e}); it is "
                                "compiled again")
            build_cache.remove_entry(group)
            try:
                build_cache.checked_build(group)  # None: gone (a miss)
            except build_cache.DamagedBuild:  # kept from Triton: its build falls back to plain
                raise RuntimeError(f"a damaged cached build could not be removed: {group}") from None
            return
        if rec is not None:
            self._checked[group] = rec

    def after_compile(self, metadata: dict[str, Any], metadata_group: dict[str, str], cache_hit: bool) -> None:
        """A compile into the tool's cache: record what the hook did beside the build, or, when
        the build came from the cache, tell the hook what it did then."""
        paths = list((metadata_group or {}).values())
        if self._builds is None or not paths:
            return
        group = os.path.dirname(paths[0])
        if Path(group).parent != self._builds:
            return  # a plain build, in the program's cache
        chash = str(metadata.get("hash", ""))
        if cache_hit:
            rec = self._checked.pop(group, None)  # (checked when Triton asked for its key)
            if rec is not None and chash not in self.hook.compiled:
                self.hook.restore(chash, rec)
            return
        rec = self.hook.record(chash)
        if rec is not None:
            try:
                build_cache.write_record(group, rec)
            except (OSError, build_cache.DamagedBuild):
                pass  # not cached for next time; this session is unaffected

