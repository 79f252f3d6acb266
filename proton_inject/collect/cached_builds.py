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
from pathlib import Path
from typing import Any

from proton_inject.formats import build_cache


class CachedBuilds:
    """A session's collaborator for its instrumented builds: where they are compiled, and
    what a build found in the cache tells the compile hook. It needs only the hook, the undo
    stack and a way to say something once."""

    def __init__(self, hook: Any, patches: Any, note: Any) -> None:
        self.hook, self.patches, self._note_once = hook, patches, note
        self.enabled = True  # kept between sessions (--no-cache: False)
        self.dir: Path | None = None  # this session's key directory in the cache
        self._stable_key = ""
        self._session_tag = ""
        self._checked: dict[str, dict[str, Any]] = {}  # group directory -> its checked record

    def directory(self, private_root: str, key_parts: tuple[str, ...], session_tag: str) -> str:
        """The cache directory of this session's instrumented builds: ``formats/build_cache``'s
        directory for the key of ``key_parts`` (the source's digest, the options, the GPU's
        shared memory, Triton's version), or a private one under ``private_root``
        (``--no-cache``, a custom Triton cache manager, or a cache directory that cannot be
        made). ``session_tag``: what this session's compile options carry instead of the key."""
        import triton
        import triton.compiler.compiler as tcc

        kept = self.enabled and triton.knobs.cache.manager_class is None
        if kept:
            build_cache.max_bytes()  # a bound that is not a number is refused before anything runs
        private = os.path.join(private_root, "cache")
        os.makedirs(private, exist_ok=True)
        if not kept:
            return private
        key = build_cache.build_key(*key_parts)
        try:
            d, lock = build_cache.open_key_dir(key)
        except OSError as e:
            self._note_once(f"note: no build cache ({e.strerror}: {e.filename}); instrumented "
                            "kernels are compiled again in each session")
            return private
        self.patches.on_undo(lambda: os.close(lock))  # (before the session's prune)
        self.dir, self._stable_key, self._session_tag = d, key, session_tag
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

        builds = self
        suffix = f":{self._session_tag}"

        def get_cache_key(src: Any, backend: Any, options: Any, env_vars: Any) -> str:
            mode = str(getattr(options, "instrumentation_mode", "") or "")
            if mode.endswith(suffix):
                try:
                    options = dataclasses.replace(
                        options, instrumentation_mode=f"{mode[:-len(suffix)]}:{builds._stable_key}")
                except Exception:  # not a dataclass: keyed by the session tag, never reused
                    pass
            key = orig(src, backend, options, env_vars)
            if builds.dir is not None and triton.knobs.cache.dir == str(builds.dir):
                # (the directory Triton's compile is about to look in, as it names it)
                group = get_cache_manager(hashlib.sha256(key.encode()).hexdigest()).cache_dir
                builds._check_cached(group, str(getattr(src, "name", "")))
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
        if self.dir is None or not paths:
            return
        group = os.path.dirname(paths[0])
        if Path(group).parent != self.dir:
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

