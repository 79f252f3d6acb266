"""Small file-system helpers shared by every step that writes files."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import re
import shutil
import signal
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path
from typing import IO, Any

from proton_inject.errors import UserError


def user_cache_dir(make: bool = False) -> Path:
    """``$XDG_CACHE_HOME/proton-inject`` (``~/.cache/proton-inject`` by default, also for a
    relative XDG_CACHE_HOME, as the XDG spec says): what the tool keeps between runs (record
    costs, its own kernels' builds), never the program's caches. ``make``: made if missing,
    this user's only (``private_dir``)."""
    root = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(root):
        root = os.path.join(os.path.expanduser("~"), ".cache")
    d = Path(root) / "proton-inject"
    if make:
        os.makedirs(root, 0o700, exist_ok=True)
        private_dir(d, follow=True)  # (a link the user made to put it elsewhere is theirs)
    return d


def private_dir(path: str | os.PathLike, follow: bool = False) -> None:
    """``path`` as a directory of this user's only (made, or narrowed to, 0700); a link (unless
    ``follow``), a file or another user's directory is an OSError."""
    with suppress(FileExistsError):
        os.mkdir(path, 0o700)
    st = os.stat(path) if follow else os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise OSError(errno.EPERM, "not a directory of this user's", str(path))
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def kill_point(name: str) -> None:
    """Tests only: SIGKILL this process at a named point of a write (PROTON_INJECT_TEST_KILL_AT)."""
    if os.environ.get("PROTON_INJECT_TEST_KILL_AT") == name:
        os.kill(os.getpid(), signal.SIGKILL)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _debris(path: Path, kinds: tuple[str, ...]) -> list[tuple[str, Path]]:
    """Temp siblings of ``path`` left by processes that are gone: (kind, path)."""
    pat = re.compile(rf"\.{re.escape(path.name)}\.({'|'.join(kinds)})-(\d+)(\..*)?")
    out = []
    try:
        siblings = list(path.parent.iterdir())
    except OSError:
        return out
    for q in siblings:
        m = pat.fullmatch(q.name)
        if m and int(m.group(2)) != os.getpid() and not _pid_alive(int(m.group(2))):
            out.append((m.group(1), q))
    return out


def _remove(p: Path) -> None:
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        with suppress(FileNotFoundError):
            p.unlink()


def _oserror(path: Path, e: OSError) -> UserError:
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return UserError(f"{path}: cannot write: {e.strerror or e} (nothing was written there); "
                         "free some space or choose another output path")
    return UserError(f"{path}: cannot write: {e.strerror or e}; choose another output path")


_swept: set[Path] = set()


def _sweep_dead(folder: Path, name: str = "*") -> None:
    """Remove the temp files (``.NAME.tmp-PID.*``) that killed runs of ours left in ``folder``."""
    for q in folder.glob(f".{name}.tmp-*"):
        m = re.fullmatch(r"\..+\.tmp-(\d+)\..*", q.name)
        if m and int(m.group(1)) != os.getpid() and not _pid_alive(int(m.group(1))):
            _remove(q)


class _Checked:
    """The file ``atomic_writer`` yields. A write that fails (a full disk) removes the temp
    file at once and is a UserError naming the output, however the caller holds the writer:
    a streaming trace keeps it open across calls (an ExitStack), where an OSError would leave
    the temp file and escape as a traceback."""

    def __init__(self, f: IO, path: Path, tmp: str):
        self._f, self._path, self._tmp = f, path, tmp

    def _failed(self, e: OSError) -> UserError:
        with suppress(OSError):
            self._f.close()  # (its buffer cannot be flushed either)
        with suppress(FileNotFoundError):
            os.unlink(self._tmp)
        return _oserror(self._path, e)

    def write(self, data: Any) -> int:
        try:
            return self._f.write(data)
        except OSError as e:
            raise self._failed(e) from None

    def flush(self) -> None:
        try:
            self._f.flush()
        except OSError as e:
            raise self._failed(e) from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


@contextmanager
def atomic_writer(path: str | os.PathLike, binary: bool = True) -> Iterator[IO]:
    """Open a temp file beside ``path`` for streaming writes; rename it over ``path`` on success.

    Readers never see half a file, and a failure leaves any old ``path`` untouched. The temp
    name carries our pid, so one left by a killed run is removed by the next write there.
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_dir():
            raise UserError(f"{path}: is a directory; give a file name to write")
        with suppress(FileNotFoundError):  # (a device replaced by our file: /dev/null, as root)
            if not stat.S_ISREG(mode := os.stat(path).st_mode):
                from proton_inject.formats.schema import file_kind

                raise UserError(f"{path}: is {file_kind(mode)}, not a regular file; writing "
                                "would replace it: choose another output path")
        if path.parent not in _swept:  # once per directory: run writes thousands of files
            _swept.add(path.parent)
            _sweep_dead(path.parent)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.tmp-{os.getpid()}.", dir=path.parent)
    except OSError as e:
        raise _oserror(path, e) from None
    try:
        # mkstemp creates 0600; give the file the mode a plain open() would.
        os.fchmod(fd, 0o666 & ~_umask())
        if binary:
            f = os.fdopen(fd, "wb")
        else:
            f = os.fdopen(fd, "w", encoding="utf-8", newline="")
        with f:
            yield _Checked(f, path, tmp)
        kill_point("file-written")
        os.replace(tmp, path)
    except BaseException as e:
        with suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise _oserror(path, e) from None
        raise


def write_atomic(path: str | os.PathLike, data: str | bytes) -> Path:
    """Write ``data`` to ``path`` via a temp file + rename, so readers never see half a file."""
    with atomic_writer(path, binary=isinstance(data, bytes)) as f:
        f.write(data)
    return Path(path)


# --- whole trees --------------------------------------------------------------------------------

_RENAME_EXCHANGE = 2


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    if os.environ.get("PROTON_INJECT_TEST_NO_EXCHANGE"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd = -100
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False  # a file system without it: fall back to two renames
    raise OSError(err, os.strerror(err), str(b))


def recover_tree(out: str | os.PathLike) -> None:
    """Undo what a killed ``replace_tree`` left beside ``out``.

    A half-built new tree is deleted; an old tree moved aside is put back if ``out`` is
    missing (killed between the two renames), else deleted.
    """
    out = Path(out)
    debris = _debris(out, ("new", "old"))
    for kind, q in sorted(debris, key=lambda kq: kq[0] != "old"):
        if kind == "old" and not out.exists():
            os.replace(q, out)
        else:
            _remove(q)


def replace_tree(out: str | os.PathLike, build: Callable[[Path], object]) -> Path:
    """Build a directory tree with ``build(tmp)`` beside ``out``, then swap it in whole.

    Killed at any point, ``out`` is the old tree or the new one (swapped in one step where the
    file system allows it); temp trees left by a killed run are removed by the next one.
    """
    out = Path(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        recover_tree(out)
        tmp = out.parent / f".{out.name}.new-{os.getpid()}"
        _remove(tmp)
        tmp.mkdir()
    except OSError as e:
        raise _oserror(out, e) from None
    try:
        build(tmp)
        kill_point("tree-written")
        if not out.exists():
            os.replace(tmp, out)
        elif _exchange(tmp, out):
            kill_point("tree-swapped")
            shutil.rmtree(tmp)  # now the old tree
        else:
            old = out.parent / f".{out.name}.old-{os.getpid()}"
            os.replace(out, old)
            kill_point("between-renames")
            os.replace(tmp, out)
            kill_point("tree-swapped")
            shutil.rmtree(old)
    except BaseException as e:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, OSError):
            raise _oserror(out, e) from None
        raise
    return out


# --- inputs and outputs -------------------------------------------------------------------------


def _lock_holder(fd: int) -> str:
    with suppress(OSError, ValueError):
        return f" (pid {int(os.pread(fd, 32, 0).decode() or 'x')})"
    return ""


_locks_held: set[Path] = set()


@contextmanager
def output_lock(path: str | os.PathLike, opt: str) -> Iterator[None]:
    """Hold ``.NAME.lock`` beside the output ``path`` (a file, a tree or a directory) while
    writing it: a second process writing the same output is refused with a UserError (two
    inserts into one tree: the last writer won, with no word). Beside, not inside: a tree is
    swapped in whole. The lock is ``flock``'s, so a killed holder frees it; the processes of
    one torchrun job (``RANK``) share an output and take one lock per rank."""
    p = Path(path)
    rank = os.environ.get("RANK")
    lock = p.parent / f".{p.name}{f'.rank{rank}' if rank is not None else ''}.lock"
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        key = lock.resolve()
    except OSError:  # (a file on the way): the command's own check of its outputs says so
        yield
        return
    if key in _locks_held:  # this process holds it already (the CLI, then the API under it)
        yield
        return
    try:
        while True:
            # Never through a link planted there (it would create or truncate what it names),
            # never blocking on a FIFO planted there.
            try:
                fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
                             | os.O_NONBLOCK, 0o666)
            except OSError as e:
                if e.errno != errno.ELOOP:
                    raise
                raise UserError(f"{opt} {path}: its lock {lock} is a symbolic link, not ours; "
                                "remove it (or choose another output path)") from None
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                raise UserError(f"{opt} {path}: its lock {lock} is not a regular file; remove "
                                "it (or choose another output path)")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _lock_holder(fd)
                os.close(fd)
                raise UserError(f"{opt} {path}: in use by another proton-inject process"
                                f"{holder} writing there; wait for it to end or choose another "
                                "output path") from None
            # The holder before us may have removed the file after we opened it: lock the
            # file that is there now, or two processes would each hold a lock.
            try:
                if os.stat(lock).st_ino == os.fstat(fd).st_ino:
                    break
            except FileNotFoundError:
                pass
            os.close(fd)
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
    except OSError as e:
        raise _oserror(lock, e) from None
    _locks_held.add(key)
    try:
        yield
    finally:
        _locks_held.discard(key)
        with suppress(FileNotFoundError):
            os.unlink(lock)  # (while still held: a waiter then sees it gone and retries)
        os.close(fd)


def _inside(a: Path, b: Path) -> bool:
    return a == b or b in a.parents


@contextmanager
def waiting_lock(path: str | os.PathLike) -> Iterator[None]:
    """Hold ``flock``'s lock on the file ``path`` (made 0600 if missing), waiting while another
    process holds it; a killed holder frees it. Never through a link planted there, never
    blocking on a FIFO: a lock file that is not a regular file is an OSError."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "a lock file that is not a regular file", str(path))
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@contextmanager
def output_locks(*outputs: tuple[str, str | os.PathLike | None]) -> Iterator[None]:
    """``output_lock`` on each ``(option, path)`` given a path, at once."""
    with ExitStack() as stack:
        for opt, path in outputs:
            if path is not None:
                stack.enter_context(output_lock(path, opt))
        yield


# Linux's bounds, in bytes, on one name and on a whole path; the tool's own names beside an
# output (".NAME.tmp-PID.XXXXXXXX", ".NAME.rank7.lock", ".NAME.new-PID") add up to this.
NAME_MAX, PATH_MAX = 255, 4096
_OWN_SUFFIX = 32


def _check_output_path(opt: str, raw: str, kind: str) -> None:
    """Refuse an output path the OS cannot take (a name or path too long), and one that exists
    as something other than a regular file or a directory (``/dev/null``, a FIFO, a socket,
    or a link to one): replacing it would replace the device itself when run as root. A file
    or a tree given as a symbolic link is refused too: replacing it replaces the link, not
    what it names (a directory that files go into may be a link)."""
    from proton_inject.formats.schema import file_kind

    shown = raw if len(raw) <= 80 else f"{raw[:60]}...({len(os.fsencode(raw)):,} bytes)"
    longest = max(os.fsencode(raw).split(b"/"), key=len)
    if len(longest) + _OWN_SUFFIX > NAME_MAX:
        raise UserError(f"{opt} {shown}: a name in this path is {len(longest):,} bytes; names "
                        f"may have {NAME_MAX - _OWN_SUFFIX} (the file system's {NAME_MAX}, less "
                        "what the tool adds beside it); choose a shorter name")
    if len(os.fsencode(raw)) + _OWN_SUFFIX >= PATH_MAX:
        raise UserError(f"{opt} {shown}: the path is longer than the {PATH_MAX - _OWN_SUFFIX:,} "
                        "bytes the tool can write to; choose a shorter path")
    try:
        link = stat.S_ISLNK(os.lstat(raw).st_mode)
        mode = os.stat(raw).st_mode
    except OSError:  # missing (or a dangling link): created by the write
        return
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        via = f"a symbolic link to {os.readlink(raw)}, which is " if link else ""
        raise UserError(f"{opt} {shown}: is {via}{file_kind(mode)}, not a regular file or a "
                        "directory; writing would replace it: choose another output path")
    if link and kind != "dir":
        raise UserError(f"{opt} {shown}: is a symbolic link (to {os.readlink(raw)}); writing "
                        "would replace the link, not what it names: give the path it names, or "
                        "remove the link")


def check_outputs(inputs: Iterable[tuple[str, str | os.PathLike]],
                  outputs: Iterable[tuple[str, str | os.PathLike, str]]) -> None:
    """Refuse, before any work, outputs that would overwrite inputs or cannot be written.

    ``inputs``: (what, path); ``outputs``: (option, path, kind) where kind is ``file`` (one
    file replaced), ``files`` (a file and others named after it beside it: ``--plot``),
    ``tree`` (a directory replaced whole) or ``dir`` (files written into it).
    An entry whose path is None or empty (an option not given) is left out.
    """
    outputs = [o for o in outputs if o[1]]
    if not outputs:
        return
    for opt, raw, kind in outputs:
        _check_output_path(opt, os.fspath(raw), kind)
    dirs: dict[str, str] = {}  # one realpath per directory: 10^4 launches share a few

    def resolved(p: str | os.PathLike) -> Path:
        text = os.fspath(p)
        head, name = os.path.split(text)
        if not name or name in (".", "..") or ".." in head.split(os.sep):
            return Path(os.path.realpath(text))  # ".." only means something after links
        if head not in dirs:
            dirs[head] = os.path.realpath(head or ".")
        joined = os.path.join(dirs[head], name)
        return Path(os.path.realpath(joined) if os.path.islink(joined) else joined)

    ins = [(what, Path(p), resolved(p)) for what, p in inputs if p]
    for opt, raw, kind in outputs:
        if not raw:
            continue
        path = Path(raw)
        real = Path(os.path.realpath(raw))
        for what, shown, inp in ins:
            if real == inp:
                raise UserError(f"{opt} {raw}: is the {what} {shown}; writing there would "
                                "destroy it; choose another output path")
            if _inside(real, inp):
                raise UserError(f"{opt} {raw}: is inside the {what} {shown}; choose an output "
                                "path outside it")
            if kind != "dir" and _inside(inp, real):
                raise UserError(f"{opt} {raw}: holds the {what} {shown}, which writing it would "
                                "replace; choose another output path")
            if kind == "dir" and inp.parent == real and inp.is_file():
                raise UserError(f"{opt} {raw}: holds the {what} {shown}, which files written "
                                "there could overwrite; choose another directory")
            if kind == "files" and inp.parent == real.parent and inp.is_file():
                raise UserError(f"{opt} {raw}: sits beside the {what} {shown}; the pictures "
                                "written there (one per launch, named after it) could "
                                "overwrite inputs; choose another directory")
        if kind in ("file", "files") and path.is_dir():
            raise UserError(f"{opt} {raw}: is a directory; give a file name to write")
        if kind in ("tree", "dir") and path.exists() and not path.is_dir():
            raise UserError(f"{opt} {raw}: exists and is not a directory; choose a directory")
        # The nearest existing ancestor must be a directory we can create files in (root passes
        # os.access everywhere, so try it).
        # (A tree is built beside itself, so it is its parent that must take new files.)
        anc = path.parent if kind in ("file", "files", "tree") else path
        while not anc.exists() and anc != anc.parent:
            anc = anc.parent
        if not anc.is_dir():
            raise UserError(f"{opt} {raw}: {anc} is a file, not a directory; choose another "
                            "output path")
        try:
            _sweep_dead(anc, "proton-inject-probe")  # one a killed run left
            fd, probe = tempfile.mkstemp(prefix=f".proton-inject-probe.tmp-{os.getpid()}.", dir=anc)
            os.close(fd)
            kill_point("output-probed")
            os.unlink(probe)
        except OSError as e:
            raise UserError(f"{opt} {raw}: cannot create files in {anc} ({e.strerror or e}); "
                            "choose another output path") from None


def find_ttgir(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """Every ``.ttgir`` file under the given directories, plus the files given directly."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            # (a FIFO or a link loop named .ttgir is kept: reading it says what it is)
            found = sorted(q for q in p.rglob("*.ttgir") if not q.is_dir())
            if not found:
                raise UserError(f"{raw}: no .ttgir files in this directory")
            out.extend(found)
        elif p.is_file():
            out.append(p)
        else:
            from proton_inject.formats.schema import not_found

            raise not_found(raw)
    return out
