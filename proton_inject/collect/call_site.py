"""Who launched it: the program's own frame behind a launch.

The frame a kernel engineer wants is the line of their program, not Triton's JIT, torch's
dispatch or a library's wrapper: the first frame, walking out from the launch, whose file lies
outside the standard library, the installed packages and proton-inject itself.
"""

from __future__ import annotations

import functools
import os
import site
import sys
import sysconfig


@functools.cache
def _not_the_program() -> tuple[str, ...]:
    paths = {sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    try:
        paths.update(site.getsitepackages())
        paths.add(site.getusersitepackages())
    except AttributeError:  # (a virtualenv's old site module)
        pass
    paths.add(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # proton_inject/
    return tuple(sorted(os.path.join(os.path.abspath(p), "") for p in paths if p))


def call_site(skip: int = 1) -> str | None:
    """``file:line (function)`` of the program's frame that led here, None if every frame
    belongs to a library (a launch from a library's own thread, say)."""
    outside = _not_the_program()
    frame = sys._getframe(skip)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(outside) and not name.startswith("<"):
            return f"{_shown(name)}:{frame.f_lineno} ({frame.f_code.co_name})"
        frame = frame.f_back
    return None


@functools.cache
def _shown(path: str) -> str:
    """A path as the user ran it: relative to the working directory when inside it."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel
