"""What a session changes in Triton, torch, Inductor and the environment, with its undo.

Every change goes through one ``Patches`` object and is undone in reverse order when the
session ends, so a session leaves the process as it found it (DESIGN: process-wide state in
one object with an undo stack).
"""

from __future__ import annotations

import importlib.abc
import os
import sys
from collections.abc import Callable
from typing import Any


class Patches:
    """An undo stack of the changes a session made."""

    def __init__(self) -> None:
        self._undo: list[Callable[[], Any]] = []

    def on_undo(self, fn: Callable[[], Any]) -> None:
        """Run ``fn`` when the session ends (after the changes made later are undone)."""
        self._undo.append(fn)

    def push_scope(self, cm: Any) -> Any:
        """Enter the context manager ``cm`` (a knobs scope, a lowering); leave it at the end."""
        value = cm.__enter__()
        self._undo.append(lambda: cm.__exit__(None, None, None))
        return value

    def set_env(self, key: str, value: str) -> None:
        old = os.environ.get(key)
        os.environ[key] = value

        def undo() -> None:
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old

        self._undo.append(undo)

    def set_attr(self, obj: Any, name: str, value: Any) -> None:
        """Set ``obj.name`` if it exists (a setting some versions lack is left alone)."""
        if not hasattr(obj, name):
            return
        old = getattr(obj, name)
        setattr(obj, name, value)
        self._undo.append(lambda: setattr(obj, name, old))

    def patch(self, cls: Any, name: str, make: Callable[[Any], Any]) -> None:
        """Replace ``cls.name`` by ``make(original)``."""
        orig = cls.__dict__[name]
        setattr(cls, name, make(orig))
        self._undo.append(lambda: setattr(cls, name, orig))

    def when_imported(self, name: str, fn: Callable[[Any], Any]) -> None:
        """Run ``fn(module)`` on module ``name``: now if it is imported, else right after the
        program imports it during the session. Importing it ourselves could cost seconds (Inductor
        pulls in sympy and Dynamo) that a program which never uses it does not pay."""
        module = sys.modules.get(name)
        if module is not None:
            fn(module)
            return
        finder = _AfterImport(name, fn)
        sys.meta_path.insert(0, finder)
        self._undo.append(lambda: finder in sys.meta_path and sys.meta_path.remove(finder))

    def undo_all(self) -> list[str]:
        """Undo everything, newest first; returns what could not be undone (the rest still is)."""
        errors = []
        while self._undo:
            undo = self._undo.pop()
            try:
                undo()
            except Exception as e:  # keep undoing the rest
                errors.append(f"could not restore a setting: {e}")
        return errors


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader the other finders give for one module, so that
    ``fn`` runs once the module has executed (a failure in ``fn`` never fails the import)."""

    def __init__(self, name: str, fn: Callable[[Any], Any]) -> None:
        self.name, self.fn = name, fn

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        sys.meta_path.remove(self)  # once: a reload is the program's business
        spec.loader = _ThenRun(spec.loader, self.fn)
        return spec


class _ThenRun(importlib.abc.Loader):
    def __init__(self, inner: Any, fn: Callable[[Any], Any]) -> None:
        self._inner, self._fn = inner, fn

    def create_module(self, spec: Any) -> Any:
        return self._inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._inner.exec_module(module)
        try:
            self._fn(module)
        except Exception:  # the session then runs without that patch; the import stands
            pass

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename, ... as the real loader
        return getattr(self._inner, name)
