"""run.json (run.rank<R>.json): the index a run writes beside its raw launches."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from proton_inject.errors import UserError
from proton_inject.formats.schema import is_number, loads_json, read_text

RUN_FORMAT = "proton-inject-run"  # run.json's "format": report tells it from a trace


def run_index_name(rank: int | None) -> str:
    """run.json, or run.rank<R>.json for one rank of a multi-process job."""
    return "run.json" if rank is None else f"run.rank{rank}.json"


def run_dir_of(raw: str | os.PathLike) -> Path:
    """The run directory of a raw launch, where its run.json is: ``OUT`` of ``OUT/raw/``."""
    parent = Path(raw).parent
    return parent.parent if parent.name == "raw" else parent


def run_dirs_of(raws: Iterable[str]) -> set[Path]:
    """The run directories of some raw launches (by their folders: 10^4 paths, a few folders)."""
    return {run_dir_of(os.path.join(d, "x")) for d in {os.path.dirname(r) for r in raws}}


def run_trees(run_dir: Path) -> list[Path]:
    """The instrumented trees named by the run's index files (``run`` keeps its ``tree``)."""
    out = []
    for d in _indexes(run_dir):
        tree = d.get("tree")
        if isinstance(tree, str):
            out.append(Path(tree))
    return out


def measured_overheads(run_dirs: Iterable[Path]) -> dict[str, dict[str, float]]:
    """``--measure-overhead``'s numbers per kernel from the index files in ``run_dirs`` (every
    rank's): ``extra_us`` with its p10 and p90 (instrumented - plain kernel time per launch
    pair) and the number of pairs. A kernel measured in several files keeps the widest spread; entries without those
    numbers (older runs, "not measured") are passed over: the report stands without them."""
    keys = ("extra_us", "extra_us_p10", "extra_us_p90", "pairs")
    out: dict[str, dict[str, float]] = {}
    for d in run_dirs:
        # (an index lists every launch: 3 MB over 10^4 of them, parsed only when it holds any)
        for doc in _indexes(d, '"measured_overhead"'):
            got = doc.get("measured_overhead")
            for name, m in got.items() if isinstance(got, dict) else ():
                if not (isinstance(m, dict) and all(is_number(m.get(k)) for k in keys) and m["pairs"] > 0):
                    continue
                new = {k: float(m[k]) for k in keys}
                if name not in out or _widest(new) > _widest(out[name]):
                    out[name] = new
    return out


def _widest(m: dict[str, float]) -> float:
    return max(abs(m["extra_us_p10"]), abs(m["extra_us_p90"]))


def _indexes(run_dir: Path, holding: str = "") -> Iterator[dict]:
    """The readable index files of a run directory (every rank's) whose text holds
    ``holding``, parsed; the others are passed over (report says what is wrong with them
    where it needs them)."""
    for idx in sorted(Path(run_dir).glob("run*.json")):
        try:
            text = read_text(idx, "run index")
            if holding not in text:
                continue
            doc = loads_json(text, idx, "")
        except UserError:
            continue
        if isinstance(doc, dict):
            yield doc
