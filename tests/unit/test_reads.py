"""Every file the tool reads is read through ``formats/schema.py`` (issue 31): checked to be a
regular file, read with a size limit for its kind, so a FIFO, a device or a huge file can
neither hang the tool nor exhaust its memory.

Reads every call of ``open``, ``os.open``, ``gzip.open``, ``Path.read_text``/``read_bytes``,
``json.load``, ``tomllib.load`` and ``np.fromfile`` in ``proton_inject`` with ``ast``; one
outside ``formats/schema.py`` fails with its file, function and line unless it opens for
writing or is listed below: files the tool wrote itself during the same command.
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "proton_inject"
HELPER = "formats/schema.py"

# (file, function): why it may read directly.
OWN_FILES = {
    ("collect/compile_hook.py", "_register"): "the IR file this run wrote a moment before",
    ("formats/build_cache.py", "code_digest"): "the package's own sources",
    ("formats/build_cache.py", "open_key_dir"): "a lock on its own cache directory",
    ("formats/build_cache.py", "_lock_alone"): "a lock on a cache directory it may remove",
    ("collect/launch_meta.py", "_kernel_ir"): "the copy of the IR this run put in its override dir",
    ("dump/program.py", "_read_records"): "the records the dump's own child appended",
    ("formats/files.py", "output_lock"): "its own lock file beside an output (the holder's pid)",
    ("formats/files.py", "waiting_lock"): "its own lock files (the calibration cache's, the tool kernels' cache's)",
    ("lower/check.py", "_compile"): "the compiler's diagnostics file in our temp dir",
    ("lower/check.py", "_run_worker"): "the worker's diagnostics and log in our temp dir",
    ("ttgir/parser.py", "_get_parser"): "the package's own grammar file",
    ("collect/fast_launch.py", "_module"): "the package's own C source, compiled once",
}


def _reads(path: Path) -> list[tuple[str, str, int]]:
    """(function, call, line) of every direct file read in ``path``."""
    out: list[tuple[str, str, int]] = []
    stack: list[str] = []

    def mode(call: ast.Call) -> str:
        args = list(call.args[1:2]) + [k.value for k in call.keywords if k.arg == "mode"]
        return args[0].value if args and isinstance(args[0], ast.Constant) else "r"

    class Visitor(ast.NodeVisitor):
        def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
            stack.append(node.name)
            self.generic_visit(node)
            stack.pop()

        def visit_Call(self, node: ast.Call) -> None:
            fn, name = node.func, None
            if isinstance(fn, ast.Name) and fn.id == "open":
                name = "open" if not set(mode(node)) & set("wax") else None
            elif isinstance(fn, ast.Attribute):
                owner = fn.value.id if isinstance(fn.value, ast.Name) else ""
                if fn.attr in ("read_text", "read_bytes", "fromfile"):
                    name = fn.attr
                elif fn.attr == "load" and owner in ("json", "tomllib", "pickle"):
                    name = f"{owner}.load"
                elif fn.attr == "open" and owner in ("gzip", "io"):
                    name = f"{owner}.open"
                elif fn.attr == "open" and owner == "os" and "O_WRONLY" not in ast.unparse(node):
                    name = "os.open"
            if name:
                out.append((".".join(stack) or "<module>", name, node.lineno))
            self.generic_visit(node)

    Visitor().visit(ast.parse(path.read_text(), str(path)))
    return out


def test_every_read_goes_through_the_bounded_reader():
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        if rel == HELPER:
            continue
        for func, call, line in _reads(path):
            if (rel, func.split(".")[0]) not in OWN_FILES:
                bad.append(f"proton_inject/{rel}:{line}: {func}() reads with {call}; use "
                           "formats.schema (read_bytes, read_text, read_json, read_toml, "
                           "read_gzip, read_ttgir, read_head, file_sha256)")
    assert not bad, "\n".join(bad)


def test_the_list_of_own_files_is_current():
    found = {(p.relative_to(PKG).as_posix(), f.split(".")[0])
             for p in PKG.rglob("*.py") for f, _, _ in _reads(p)}
    assert set(OWN_FILES) <= found, set(OWN_FILES) - found
