"""Sizes a newcomer can read (issue 28): no module over 600 lines, no class over 300, no
function over 80 unless it says why in a ``# long: <reason>`` comment on the line before its
``def`` (or its first body line).

Reads the package with ``ast``; a function is counted from its ``def`` to its last line (a
click command's option decorators are not its body).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "proton_inject"
MAX_MODULE, MAX_CLASS, MAX_FUNCTION = 600, 300, 80
_REASON = re.compile(r"#\s*long:\s*\S")


def _excused(lines: list[str], node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """A ``# long: <reason>`` comment on the line before the ``def`` (its decorators) or on
    the line of the body's first statement (after the docstring, if any)."""
    first = min([node.lineno] + [d.lineno for d in node.decorator_list])
    before = lines[first - 2] if first >= 2 else ""
    body = node.body[1] if len(node.body) > 1 and ast.get_docstring(node) else node.body[0]
    candidates = [before, lines[body.lineno - 2], lines[body.lineno - 1]]
    return any(_REASON.search(line) for line in candidates)


def _too_long(path: Path, root: Path = PKG) -> list[str]:
    text = path.read_text()
    lines = text.splitlines()
    rel = path.relative_to(root.parent)
    out = []
    if len(lines) > MAX_MODULE:
        out.append(f"{rel}: {len(lines)} lines (module at most {MAX_MODULE}): split it by job")
    for node in ast.walk(ast.parse(text, str(path))):
        if not isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        n = node.end_lineno - node.lineno + 1
        if isinstance(node, ast.ClassDef) and n > MAX_CLASS:
            out.append(f"{rel}:{node.lineno}: class {node.name}: {n} lines (at most {MAX_CLASS})")
        elif (not isinstance(node, ast.ClassDef) and n > MAX_FUNCTION
              and not _excused(lines, node)):
            out.append(f"{rel}:{node.lineno}: {node.name}(): {n} lines (at most {MAX_FUNCTION}, "
                       "or a '# long: <reason>' comment before its def)")
    return out


def test_modules_classes_and_functions_stay_readable():
    bad = [msg for path in sorted(PKG.rglob("*.py")) for msg in _too_long(path)]
    assert not bad, "too long:\n" + "\n".join(bad)


def test_the_check_sees_long_functions_and_their_reasons(tmp_path):
    # The rule itself on a made-up package: a long function fails unless it gives a reason.
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION))
    (tmp_path / "pkg").mkdir()
    f = tmp_path / "pkg" / "m.py"
    f.write_text(f"def long_one():\n{body}\n\n# long: one table, read top to bottom\n"
                 f"def excused():\n{body}\n\ndef excused_inside():\n    '''doc'''\n"
                 f"    # long: a state machine\n{body}")
    found = _too_long(f, tmp_path / "pkg")
    assert [m.split(": ")[1] for m in found] == ["long_one()"]
