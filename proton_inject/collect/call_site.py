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
    frame = sys._getframe(skip)
    ours = _is_library
    while frame is not None:
        code = frame.f_code
        lib = ours.get(code)
        if lib is None:  # (each code object is looked at once: this runs on every kept launch)
            name = code.co_filename
            lib = ours[code] = name.startswith(_not_the_program()) or name.startswith("<")
        if not lib:
            return f"{_shown(code.co_filename)}:{frame.f_lineno} ({code.co_name})"
        frame = frame.f_back
    return None


_is_library: dict = {}  # code object -> whether its file is outside the program


@functools.cache
def _shown(path: str) -> str:
    """A path as the user ran it: relative to the working directory when inside it."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel
