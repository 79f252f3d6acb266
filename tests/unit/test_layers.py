"""The package's folders are the pipeline: each imports only the folders before it.

Reads every ``import`` of ``proton_inject`` (function-level ones too) with ``ast``; an import
of a later step, or a cycle between modules, fails with the file and line. So a cycle cannot
hide behind an import placed inside a function.
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "proton_inject"

# Pipeline order: a module may import its own folder and the folders listed before it.
LAYERS = ["errors", "formats", "ttgir", "instrument", "lower", "dump", "collect", "analyze",
          "top"]
# Pairs that the order allows but the house forbids: analysis never depends on collection.
FORBIDDEN = {("analyze", "collect")}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "top"
    return parts[1] if parts[1] in LAYERS else "top"


def _imports(path: Path, me: str) -> list[tuple[str, int]]:
    """(imported proton_inject module, line) for every import in ``path`` (module ``me``)."""
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names if a.name.startswith("proton_inject")]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("proton_inject"):
                continue
            for a in node.names:  # `from pkg import module` imports the module
                sub = f"{target}.{a.name}"
                is_module = (PKG.parent / sub.replace(".", "/")).with_suffix(".py").exists() or (
                    PKG.parent / sub.replace(".", "/")).is_dir()
                out.append((sub if is_module else target, node.lineno))
    return out


def _graph() -> dict[str, list[tuple[str, int, Path]]]:
    graph: dict[str, list[tuple[str, int, Path]]] = {}
    for path in sorted(PKG.rglob("*.py")):
        me = _module_name(path)
        graph.setdefault(me, [])
        for target, line in _imports(path, me):
            if target != me and target != "proton_inject":
                graph[me].append((target, line, path))
    return graph


def test_no_module_imports_a_later_step():
    bad = []
    for me, edges in _graph().items():
        mine = LAYERS.index(_layer(me))
        for target, line, path in edges:
            theirs = _layer(target)
            if LAYERS.index(theirs) > mine or (_layer(me), theirs) in FORBIDDEN:
                bad.append(f"{path.relative_to(PKG.parent)}:{line}: {me} ({_layer(me)}) imports "
                           f"{target} ({theirs})")
    assert not bad, "imports against the pipeline order:\n" + "\n".join(bad)


def test_no_import_cycles():
    full = _graph()
    graph = {m: sorted({t for t, _, _ in e if t in full}) for m, e in full.items()}
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles = []

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for t in graph[m]:
            if state.get(t) == 1:
                cycles.append(" -> ".join(path[path.index(t):] + [m, t]))
            elif t not in state:
                visit(t, path + [m])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_the_reader_sees_imports_inside_functions(tmp_path):
    """An import placed inside a function counts, relative or absolute, with its line."""
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from proton_inject.collect import session\n"
                     "    from ..analyze.decode import decode\n")
    got = _imports(probe, "proton_inject.formats.probe")
    assert got == [("proton_inject.collect.session", 2), ("proton_inject.analyze.decode", 3)]
    assert _layer("proton_inject.collect.session") == "collect" and _layer("proton_inject.cli") == "top"
