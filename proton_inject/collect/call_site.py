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


def program_frame(skip: int = 1) -> tuple[str, int, str] | None:
    """(file, line, function) of the program's frame that led here, None if every frame
    belongs to a library (a launch from a library's own thread, say). Kept launches call it
    and format it later (``site_text``), off the launch path."""
    frame = sys._getframe(skip)
    known = _is_library.get
    while frame is not None:
        code = frame.f_code
        name = code.co_filename
        lib = known(name)
        if lib is None:  # (each file is looked at once: this runs on every kept launch)
            lib = classify(name)
        if not lib:
            return name, frame.f_lineno, code.co_name
        frame = frame.f_back
    return None


def classify(name: str) -> bool:
    """Whether the code of file ``name`` is outside the program (remembered in ``_is_library``)."""
    lib = _is_library[name] = name.startswith(_not_the_program()) or name.startswith("<")
    return lib


def site_text(site: tuple[str, int, str] | None) -> str | None:
    """``file:line (function)``, the file relative to the working directory when inside it."""
    return None if site is None else f"{_shown(site[0])}:{site[1]} ({site[2]})"


def call_site(skip: int = 1) -> str | None:
    """``site_text`` of the program's frame that led here (``program_frame``)."""
    return site_text(program_frame(skip + 1))


# File name -> whether it is outside the program. Keyed by the name, not the code object: a
# code object's hash is computed anew from its bytecode and constants each time (0.4 us for
# Triton's launch function on a 2-core VM); a string keeps its hash.
_is_library: dict[str, bool] = {}


@functools.cache
def _shown(path: str) -> str:
    """A path as the user ran it: relative to the working directory when inside it."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel
