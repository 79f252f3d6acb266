"""``# proton:`` marks in the kernel's Python source: read with ``tokenize`` (a mark quoted in a
string does not count), each a line range."""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

from proton_inject.errors import UserError
from proton_inject.formats.rules_file import LineRange
from proton_inject.formats.schema import MAX_SOURCE_BYTES, FileError, read_bytes
from proton_inject.instrument.regions import KernelSelection, frame_lines
from proton_inject.instrument.rules import Rules
from proton_inject.ttgir import Module

_MARK = re.compile(r"#\s*proton:\s*(?:(begin|end)\s+)?(.+?)\s*$")


def read_marks(module: Module, rules: Rules, notes: list[str] | None = None) -> list[LineRange]:
    """`# proton:` marks in every source file the IR's locations name that can be read."""
    files = {f.file for op in module.walk() for f in op.location.frames}
    marks: list[LineRange] = []
    for file in sorted(files):
        path = _find_source(file, rules.source_root, module.path)
        there = Path(file) if Path(file).is_absolute() else Path(rules.source_root or ".") / file
        if path is None and file and _exists(there) and not there.is_dir():  # (stat: never opened)
            if notes is not None:
                notes.append(f"{module.path}: source {there} is not a regular file (a named pipe "
                             "or a device), so its '# proton:' marks are not read")
            continue
        if path is None:
            if notes is not None and file.endswith(".py") and not Path(file).is_absolute():
                # Relative paths are relative to where the kernel was compiled.
                notes.append(f"{module.path}: source {file} not found under "
                             f"{rules.source_root or 'the current directory'}, so its "
                             "'# proton:' marks are not read; pass --source-root DIR")
            continue
        marks.extend(marks_in(path, file, module.path))
    return marks


def _find_source(file: str, root: str | None, ir_path: str) -> Path | None:
    p = Path(file)
    candidates = [p] if p.is_absolute() else [Path(root or ".") / p]
    for c in candidates:
        if _exists(c) and c.is_file():
            return c
    return None


def _exists(p: Path) -> bool:
    """Whether ``p`` exists; a name the OS refuses (a loc naming a 20 MB file name) does not."""
    try:
        return p.exists()
    except OSError:
        return False


def _comments(text: str, path: Path) -> list[tuple[int, str, bool]]:
    """(line, comment text, whether code precedes it) for every real comment: marks
    quoted in strings or docstrings do not count."""
    out = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                out.append((tok.start[0], tok.string, bool(tok.line[: tok.start[1]].strip())))
    except (tokenize.TokenError, SyntaxError) as e:
        raise UserError(f"{path}: cannot read its '# proton:' marks, the file does not "
                        f"tokenize as Python ({e})") from None
    return out


def marks_in(path: Path, ir_file: str, ir_path: str = "the IR") -> list[LineRange]:
    fix = f"{ir_path} names it as its kernel's source: pass --no-marks or --source-root DIR"
    try:
        text = read_bytes(path, "kernel source", MAX_SOURCE_BYTES, fix,
                          huge_fix=fix).decode("utf-8", errors="replace")
    except FileError as e:
        if e.reason in ("missing", "unreadable"):
            return []  # as for a source not found: its marks are not read
        raise
    if "proton:" not in text:
        return []
    out: list[LineRange] = []
    open_marks: dict[str, int] = {}
    for lineno, comment, has_code in _comments(text, path):
        m = _MARK.match(comment)
        if not m:
            continue
        kind, name = m.group(1), m.group(2)
        where = f"{path}:{lineno}"
        if kind and has_code:
            raise UserError(f"{where}: '# proton: {kind} {name}' shares its line with code; put "
                            f"'# proton: {kind} {name}' on a line of its own (it measures the "
                            "lines between begin and end), or use '# proton: NAME' after the "
                            "code of a single line")
        if kind == "begin":
            if name in open_marks:
                raise UserError(f"{where}: '# proton: begin {name}' while the one at line "
                                f"{open_marks[name]} is still open; add '# proton: end {name}'")
            open_marks[name] = lineno
        elif kind == "end":
            if name not in open_marks:
                raise UserError(f"{where}: '# proton: end {name}' has no matching "
                                f"'# proton: begin {name}' above it")
            start = open_marks.pop(name)
            out.append(LineRange(name, ir_file, start + 1, lineno - 1, "mark",
                                 f"{path}:{start}-{lineno}"))
        else:
            if not has_code:
                raise UserError(f"{where}: '# proton: {name}' marks the code on its own line, "
                                f"but this line has none; use '# proton: begin {name}' ... "
                                f"'# proton: end {name}' for a range")
            out.append(LineRange(name, ir_file, lineno, lineno, "mark", where))
    if open_marks:
        name, lineno = next(iter(open_marks.items()))
        raise UserError(f"{path}:{lineno}: '# proton: begin {name}' is never closed; "
                        f"add '# proton: end {name}' after the code to measure")
    return out


def marks_for_kernel(k: KernelSelection, marks: list[LineRange]) -> list[LineRange]:
    """The marks inside the source span of this kernel's ops."""
    out = []
    for mark in marks:
        lines = [ln for op in k.fn.op.walk() for ln in frame_lines(op, mark.file)]
        if lines and min(lines) <= mark.start and mark.end <= max(lines):
            out.append(mark)
    return out
