"""Checks on data where it enters the tool: rules files, manifests, raw launch metadata, traces.

Every file the tool reads goes through the bounded reader here (``open_input`` under
``read_bytes``, ``read_text``, ``read_json``, ``read_toml``, ``read_gzip``, ``read_ttgir``,
``read_head``, ``file_sha256``): only a regular file is opened (a FIFO would block forever, a
device never ends), and no more than the limit of its kind is read or inflated, so no input
can hang the tool or exhaust its memory. Nesting deeper than ``MAX_DEPTH`` is refused before
any code recurses over it. ``tests/unit/test_reads.py`` fails on a direct read elsewhere.

Every reader of user-supplied structured data goes through here, so a value of the wrong type
becomes one UserError naming the file and the key, never a traceback deep inside (and a new
field gets its check here, next to the others).
"""

from __future__ import annotations

import errno
import functools
import hashlib
import json
import math
import os
import re
import stat
import tomllib
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from proton_inject.errors import UserError

# Size limits per kind of input: far above any real file (the largest TTGIR of the samples is
# tens of KB, a raw launch's metadata a few KB), low enough that reading one whole cannot
# exhaust memory.
MAX_JSON_BYTES = 64 * 2**20  # manifest.json, autotune.json, run.json
MAX_META_BYTES = 16 * 2**20  # a raw launch's .json
MAX_TTGIR_BYTES = 64 * 2**20
MAX_RULES_BYTES = 2**20  # a rules TOML or pyproject.toml
MAX_SOURCE_BYTES = 64 * 2**20  # a kernel's Python source (marks, its sha256)
# A trace, uncompressed: report warns from 500 MiB on; json.loads needs ~10x its size.
MAX_TRACE_BYTES = 2**30
# A raw profile buffer, uncompressed: a GiB of scratch for 65,536 CTAs (lower/options.py);
# decoding one takes a few times its size.
MAX_RAW_BYTES = 4 * 2**30
# Structured files are a few levels deep (a manifest's kernels[i].regions[j].source is 4); a
# deeper one is not ours, and nesting must never reach the interpreter's recursion limit.
MAX_DEPTH = 64
# CUDA's limits: grid x < 2^31, y and z < 2^16; at most 1024 threads (32 warps) per CTA.
MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_WARPS = 32
MAX_BYTES_PER_CTA = 2**31
SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")
_CHUNK = 2**20


class FileError(UserError):
    """An input file that cannot be read as one: ``reason`` is ``missing``, ``directory``,
    ``special`` (a FIFO, a device, a socket), ``loop``, ``unreadable``, ``huge`` or ``binary``."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


def size_text(n: int) -> str:
    """``n`` bytes in the largest whole binary unit: 64 MiB, 4 GiB, 512 bytes."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n:,} bytes"


def file_kind(mode: int) -> str:
    """What a path of this ``st_mode`` is, in words: "a named pipe (FIFO)", "a character device"..."""
    return ("a directory" if stat.S_ISDIR(mode) else "a named pipe (FIFO)" if stat.S_ISFIFO(mode)
            else "a character device" if stat.S_ISCHR(mode) else "a block device"
            if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a file")


def _os_error(p: Path, e: OSError, what: str, fix: str) -> FileError:
    if isinstance(e, FileNotFoundError):
        if os.path.islink(p):
            return FileError(f"{p}: is a symbolic link to {os.readlink(p)}, which does not "
                             f"exist; {fix}", "missing")
        return FileError(f"{p}: no such {what} file", "missing")
    if e.errno == errno.ELOOP:
        return FileError(f"{p}: is a symbolic link loop; {fix}", "loop")
    if isinstance(e, PermissionError):
        return FileError(f"{p}: cannot read the {what} file: {e.strerror}; check its "
                         "permissions", "unreadable")
    return FileError(f"{p}: cannot read the {what} file: {e.strerror or e}", "unreadable")


def not_a_file(path: str | Path, what: str, fix: str | None = None) -> FileError:
    """Why ``path`` is not a regular file (missing, a directory, a FIFO, a link loop...)."""
    p = Path(path)
    fix = fix or f"give the {what} file"
    try:
        mode = os.stat(p).st_mode
    except OSError as e:
        return _os_error(p, e, what, fix)
    if stat.S_ISDIR(mode):
        return FileError(f"{p}: is a directory; {fix}", "directory")
    if stat.S_ISREG(mode):
        return FileError(f"{p}: cannot read the {what} file", "unreadable")
    return FileError(f"{p}: is {file_kind(mode)}, not a regular file; {fix}", "special")


def not_found(path: str | Path, what: str = "file or directory") -> FileError:
    """The error for an input path that is neither a regular file nor a directory: a missing
    path says so; a FIFO, a device or a symbolic link loop is named for what it is."""
    p = Path(path)
    if not os.path.lexists(p):
        return FileError(f"{p}: no such {what}", "missing")
    return not_a_file(p, what, "give a regular file or a directory")


@contextmanager
def open_input(path: str | Path, what: str, fix: str | None = None) -> Iterator[tuple[int, int]]:
    """``(fd, size)`` of a regular file opened for reading; anything else is a FileError.

    The path is stat'ed before it is opened, so a device is never opened, and opened without
    blocking, so a FIFO put there in between cannot hang us (its fstat then refuses it).
    """
    p = Path(path)
    fix = fix or f"give the {what} file"
    try:
        if not stat.S_ISREG(os.stat(p).st_mode):
            raise not_a_file(p, what, fix)
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise _os_error(p, e, what, fix) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FileError(f"{p}: is {file_kind(st.st_mode)}, not a regular file; {fix}", "special")
        yield fd, st.st_size
    finally:
        os.close(fd)


def _huge(p: Path, what: str, limit: int, inflated: bool = False,
          fix: str | None = None) -> FileError:
    verb = "inflates to more than" if inflated else "is larger than"
    return FileError(f"{p}: {verb} {size_text(limit)}; {fix or f'not a {what} file'}", "huge")


def _read_fd(fd: int, size: int, limit: int) -> bytes:
    """Up to ``limit + 1`` bytes of an open file (``size``: what fstat said, a hint)."""
    chunks: list[bytes] = []
    n = 0
    while n <= limit:
        b = os.read(fd, min(limit + 1 - n, max(size + 1 - n, _CHUNK)))
        if not b:
            break
        chunks.append(b)
        n += len(b)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def read_bytes(path: str | Path, what: str, limit: int, fix: str | None = None,
               truncate: bool = False, huge_fix: str | None = None) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes (the first ``limit`` when
    ``truncate``); a missing, special, unreadable or larger file is a FileError (``fix`` says
    what to do instead of giving a FIFO or a device, ``huge_fix`` instead of a larger file).

    Every input file the tool reads whole goes through here (or ``read_gzip``), so none can
    hang it (a FIFO) or exhaust its memory (``/dev/zero``, a huge file).
    """
    p = Path(path)
    try:
        with open_input(p, what, fix) as (fd, size):
            if size > limit and not truncate:
                raise _huge(p, what, limit, fix=huge_fix)
            data = _read_fd(fd, min(size, limit), limit)
    except MemoryError:
        raise FileError(f"{p}: not enough memory to read this {what} file; free some memory "
                        "or use a machine with more", "huge") from None
    except OSError as e:
        raise _os_error(p, e, what, fix or f"give the {what} file") from None
    if len(data) > limit:
        if not truncate:
            raise _huge(p, what, limit, fix=huge_fix)
        data = data[:limit]
    return data


def read_gzip(path: str | Path, what: str, limit: int, fix: str, truncate: bool = False,
              huge_fix: str | None = None) -> bytes | bytearray:
    """The inflated content of a gzip file, read and inflated in chunks: at most ``limit``
    bytes (the first ``limit`` when ``truncate``, else more is a FileError), so a gzip bomb
    costs no more memory than ``limit``. A damaged stream is a FileError ending in ``fix``."""
    p = Path(path)
    z = zlib.decompressobj(wbits=31)
    data = bytearray()  # (grows in place: no second copy at the end)
    try:
        with open_input(p, what) as (fd, _):
            while not z.eof and len(data) <= limit:
                chunk = z.unconsumed_tail or os.read(fd, _CHUNK)
                if not chunk:
                    raise zlib.error("the stream ends early")
                data += z.decompress(chunk, min(limit + 1 - len(data), 64 * _CHUNK))
    except zlib.error as e:
        raise FileError(f"{p}: damaged gzip file ({e}); {fix}", "binary") from None
    except MemoryError:
        raise FileError(f"{p}: not enough memory to inflate this {what} file; free some memory "
                        "or use a machine with more", "huge") from None
    except OSError as e:
        raise _os_error(p, e, what, f"give the {what} file") from None
    if len(data) > limit:
        if not truncate:
            raise _huge(p, what, limit, inflated=True, fix=huge_fix)
        del data[limit:]
    return bytes(data) if len(data) <= _CHUNK else data


def read_head(path: str | Path, n: int) -> bytes:
    """The first ``n`` bytes of a regular file; b"" for anything else (a FIFO, a device, a
    missing or unreadable file), for sniffing a file's kind without ever blocking."""
    try:
        with open_input(path, "") as (fd, _):
            return os.read(fd, n)
    except (UserError, OSError):
        return b""


def file_sha256(path: str | Path, what: str, limit: int, fix: str | None = None) -> str:
    """sha256 of a regular file of at most ``limit`` bytes, read in chunks."""
    p = Path(path)
    h = hashlib.sha256()
    n = 0
    try:
        with open_input(p, what, fix) as (fd, _):
            while b := os.read(fd, _CHUNK):
                n += len(b)
                if n > limit:
                    raise _huge(p, what, limit)
                h.update(b)
    except OSError as e:
        raise _os_error(p, e, what, fix or f"give the {what} file") from None
    return h.hexdigest()


def read_ttgir(path: str | Path) -> bytes:
    """A TTGIR file's bytes (parsers and writers keep them as latin-1 text)."""
    return read_bytes(path, "TTGIR", MAX_TTGIR_BYTES, "give a .ttgir file (e.g. from "
                      "`proton-inject dump`)")


def read_text(path: str | Path, what: str, limit: int = MAX_JSON_BYTES,
              fix: str | None = None) -> str:
    """A UTF-8 text file's content; a missing, special, unreadable, huge or binary file is a
    FileError."""
    data = read_bytes(path, what, limit, fix)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise FileError(f"{path}: not UTF-8 text (byte {e.start}); not a {what} file",
                        "binary") from None


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether parsed JSON/TOML nests lists and tables more than ``limit`` deep (iterative:
    code that recurses over the value later must not meet the recursion limit)."""
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        items = v.values() if isinstance(v, dict) else v if isinstance(v, list) else None
        if items is None:
            continue
        if depth > limit:
            return True
        stack.extend((x, depth + 1) for x in items if isinstance(x, dict | list))
    return False


class _NotANumber(ValueError):
    pass


def _refuse_constant(name: str) -> float:
    raise _NotANumber(name)


def loads_json(data: str | bytes, where: str | Path, fix: str) -> Any:
    """Parsed JSON text (of ``where``); invalid or too deeply nested JSON is a UserError, and
    so are NaN and Infinity, which Python's json reads but no number the tool writes is."""
    try:
        value = json.loads(data, parse_constant=_refuse_constant)
    except _NotANumber as e:
        raise UserError(f"{where}: holds {e}, which is not a number; {fix}") from None
    except RecursionError:
        value = None
        deep = True
    except ValueError as e:
        raise UserError(f"{where}: not valid JSON ({e}); {fix}") from None
    else:
        deep = too_deep(value)
    if deep:
        raise UserError(f"{where}: JSON nested more than {MAX_DEPTH} levels deep; {fix}")
    return value


def read_json(path: str | Path, what: str, fix: str, limit: int = MAX_JSON_BYTES) -> Any:
    """Parsed JSON of a small file; ``fix`` says what to do when it is broken."""
    return loads_json(read_text(path, what, limit), path, fix)


@functools.cache
def measured() -> dict[str, Any]:
    """The package's measured numbers (``proton_inject/data/measured.json``: each with where,
    when and how it was measured), read once."""
    path = Path(__file__).resolve().parents[1] / "data" / "measured.json"
    return read_json(path, "measured data", "reinstall proton-inject: its data file is damaged")


def read_toml(path: str | Path, what: str, limit: int = MAX_RULES_BYTES) -> dict[str, Any]:
    """A TOML file's table; invalid or too deeply nested TOML is a UserError."""
    text = read_text(path, what, limit)
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"{path}: not valid TOML: {e}") from None
    except RecursionError:
        table = None
    if table is None or too_deep(table):
        raise UserError(f"{path}: TOML nested more than {MAX_DEPTH} levels deep; not a {what} "
                        "file")
    return table


def type_name(v: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "an array", dict: "a table"}.get(type(v), type(v).__name__)


def shown(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v: Any) -> bool:
    """A finite JSON number (not a boolean) that fits a float."""
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:  # an integer of hundreds of digits
        return False


# --- rules (a rules TOML file or [tool.proton-inject] of pyproject.toml) -------------------------


# --- manifest.json of a dump or an override tree ------------------------------------------------


# --- raw launch metadata (the .json half of a raw launch) ---------------------------------------


# --- traces written by `report --trace` / `run` --------------------------------------------------


def trace_launches(other: Any, path: str | Path) -> list[dict[str, Any]]:
    """The per-launch summaries of a trace's otherData, checked field by field."""
    fix = "write it again with `proton-inject report RAW --trace DIR`"
    launches = other.get("launches") if isinstance(other, dict) else None
    if not isinstance(launches, list) or not launches:
        raise UserError(f"{path}: otherData.launches is missing or empty; {fix}")
    for i, s in enumerate(launches):
        if not isinstance(s, dict):
            raise UserError(f"{path}: otherData.launches[{i}] must be an object; {fix}")
        checks = (("pid_base", is_int), ("launch", is_int), ("num_warps", is_int),
                  ("kernel", lambda v: isinstance(v, str)),
                  ("grid", lambda v: isinstance(v, list) and all(map(is_int, v))),
                  ("clock", lambda v: isinstance(v, dict)),
                  ("scopes", lambda v: isinstance(v, dict) and all(
                      isinstance(k, str) and k.isdigit() and isinstance(x, str)
                      for k, x in v.items())),
                  ("scope_parents", lambda v: isinstance(v, dict) and all(
                      isinstance(k, str) and k.isdigit() and is_int(x) for k, x in v.items())))
        for key, ok in checks:
            if key not in s or not ok(s[key]):
                raise UserError(f"{path}: otherData.launches[{i}].{key} is missing or of the "
                                f"wrong type; {fix}")
    return launches


def trace_event_error(path: str | Path, index: int, e: Exception) -> UserError:
    """The message for a trace event that lacks a field or has one of the wrong type."""
    what = f"lacks {e.args[0]!r}" if isinstance(e, KeyError) else f"is malformed ({e})"
    return UserError(f"{path}: traceEvents[{index}] {what}; write the trace again with "
                     "`proton-inject report RAW --trace DIR`")


# --- report options ------------------------------------------------------------------------------


def report_options(clock_mhz: float | None, trace_dir: Any, merge: bool, gz: bool | None,
                   plot: Any, html: Any = None) -> None:
    """Option combinations of `report` that would otherwise be ignored or print nonsense
    (``gz``: None when neither --gz nor --no-gz was given)."""
    if clock_mhz is not None and not (math.isfinite(clock_mhz) and clock_mhz > 0):
        raise UserError(f"--clock-mhz {clock_mhz}: must be a positive number of MHz, e.g. 1755")
    for flag, on in (("--merge", merge), ("--gz", gz is True), ("--no-gz", gz is False)):
        if on and trace_dir is None:
            raise UserError(f"{flag} only applies to --trace DIR; add --trace DIR or drop {flag}")
    for opt, path, example in (("--plot", plot, "timeline.png"), ("--html", html, "report.html")):
        if path is not None and Path(path).suffix.lower() != Path(example).suffix:
            raise UserError(f"{opt} {path}: must name a {Path(example).suffix} file, e.g. {opt} {example}")
