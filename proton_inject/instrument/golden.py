"""Golden files: compare generated IR (and its manifest) with what `insert -o` wrote before."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

from proton_inject.errors import UserError
from proton_inject.formats.files import find_ttgir
from proton_inject.formats.manifest import manifest_json
from proton_inject.formats.schema import not_found, read_text, read_ttgir


def check_golden(golden: str | Path, tree: bool) -> None:
    """Refuse a golden that nothing can be compared with (missing, empty, or a file for a tree
    input): checked before any work, so that nothing is written first."""
    g = Path(golden)
    opt = f"--check-against {golden}"
    if g.is_dir():
        if not any(q.is_file() for q in g.rglob("*.ttgir")):
            raise UserError(f"{opt}: holds no .ttgir file; give the golden "
                            f"{'tree' if tree else 'file'} that `insert -o` wrote")
    elif g.is_file():
        if tree:
            raise UserError(f"{opt}: is a file, but the input is a tree; give the golden tree "
                            "(a directory)")
        if g.stat().st_size == 0:
            raise UserError(f"{opt}: is empty; give the golden file that `insert -o` wrote")
    elif g.exists():
        raise UserError(f"{opt}: is neither a file nor a directory; give the golden that "
                        "`insert -o` wrote")
    else:
        raise UserError(f"{opt}: no such golden file or directory")


def diff_against(outputs: dict[str, str], manifest: dict | None, golden: str | Path) -> str:
    """Unified diff between generated output and a golden tree (or file); '' when equal."""
    check_golden(golden, tree=manifest is not None)
    golden = Path(golden)
    chunks: list[str] = []
    if golden.is_file():
        (rel, text), = outputs.items()
        return _diff(read_ttgir(golden).decode("latin-1"), text, str(golden), rel)
    if not golden.is_dir():
        raise not_found(golden, "golden file or directory")
    want = {p.relative_to(golden).as_posix(): p for p in find_ttgir([golden])}
    for rel in sorted(set(want) | set(outputs)):
        old = read_ttgir(want[rel]).decode("latin-1") if rel in want else ""
        new = outputs.get(rel, "")
        chunks.append(_diff(old, new, f"golden/{rel}", f"generated/{rel}"))
    if manifest is not None and os.path.lexists(golden / "manifest.json"):
        chunks.append(_diff(read_text(golden / "manifest.json", "manifest"),
                            manifest_json(manifest),
                            "golden/manifest.json", "generated/manifest.json"))
    return "".join(chunks)


def _diff(old: str, new: str, a: str, b: str) -> str:
    if old == new:
        return ""
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), a, b))
