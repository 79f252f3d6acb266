"""What a session changes in Triton, torch, Inductor and the environment, with its undo.

Every change goes through one ``Patches`` object and is undone in reverse order when the
session ends, so a session leaves the process as it found it (DESIGN: process-wide state in
one object with an undo stack).
"""

from __future__ import annotations

import os
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
