"""run.json (run.rank<R>.json): the index a run writes beside its raw launches."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from proton_inject.errors import UserError
from proton_inject.formats.schema import is_number, loads_json, read_text

RUN_FORMAT = "proton-inject-run"  # run.json's "format": report tells it from a trace


def run_index_name(rank: int | None) -> str:
    """run.json, or run.rank<R>.json for one rank of a multi-process job."""
    return "run.json" if rank is None else f"run.rank{rank}.json"


def run_dir_of(raw: str | os.PathLike) -> Path:
    """The run directory of a raw launch, where its run.json is: ``OUT`` of ``OUT/raw/``."""
    return _run_dir_of_folder(Path(raw).parent)


def _run_dir_of_folder(folder: Path) -> Path:
    return folder.parent if folder.name == "raw" else folder


_RANK = re.compile(r"rank(\d+)-")  # a raw launch of one rank (LaunchMeta.label)


def index_files_of(raws: Iterable[str]) -> set[Path]:
    """The index file of each raw launch's own run and rank: ``run.rank<R>.json`` for a
    ``rank<R>-`` launch, else ``run.json`` (another rank's index may not be written yet)."""
    seen: set[tuple[str, int | None]] = set()
    for r in raws:
        m = _RANK.match(os.path.basename(r))
        seen.add((os.path.dirname(r), int(m.group(1)) if m else None))
    return {_run_dir_of_folder(Path(d)) / run_index_name(rank) for d, rank in seen}


def run_trees(run_dir: Path) -> list[Path]:
    """The instrumented trees named by the run's index files (``run`` keeps its ``tree``)."""
    out = []
    for d in read_indexes(sorted(Path(run_dir).glob("run*.json"))):
        tree = d.get("tree")
        if isinstance(tree, str):
            out.append(Path(tree))
    return out


# What an index may say a launch pair's extra time is (us): past it the entry is passed over.
_MAX_EXTRA_US = 1e6


def measured_overheads(index_files: Iterable[Path]) -> dict[str, dict[str | None, dict[str, float]]]:
    """``--measure-overhead``'s extra time per kernel and config name, from some index files:
    ``extra_us`` with its p10 and p90 (instrumented - plain kernel time per launch pair) and
    ``pairs``; config None: over all the kernel's configs (the only entry in indexes of older
    runs). A kernel measured in several files (ranks) keeps the widest bar (``extra_bound_us``);
    entries that are not numbers, out of range or out of order are passed over: the report
    stands without them."""
    out: dict[str, dict[str | None, dict[str, float]]] = {}

    def keep(name: str, config: str | None, m: Any) -> None:
        got = _numbers(m)
        if got is None:
            return
        old = out.setdefault(name, {}).get(config)
        if old is None or extra_bound_us(got) > extra_bound_us(old):
            out[name][config] = got

    # (an index lists every launch: 3 MB over 10^4 of them, parsed only when it holds any)
    for doc in read_indexes(sorted(index_files), '"measured_overhead"'):
        got = doc.get("measured_overhead")
        for name, m in got.items() if isinstance(got, dict) else ():
            if not isinstance(m, dict):
                continue
            keep(name, None, m)
            configs = m.get("configs")
            for config, c in configs.items() if isinstance(configs, dict) else ():
                keep(name, config, c)
    return out


def perturbation_for(measured: dict[str, dict[str | None, dict[str, float]]], kernel: str,
                     config: str | None) -> dict[str, float] | None:
    """The measured extra time of one (kernel, config) of a report: its own config's, or the
    kernel's over all configs where the index has no per-config numbers; else None."""
    got = measured.get(kernel) or {}
    if config is not None and config in got:
        return got[config]
    return got.get(None) if set(got) == {None} else None


def extra_bound_us(m: dict[str, float]) -> float:
    """What the records may add to a launch, in us: the median extra time plus its own
    uncertainty (the pairs' p10..p90 width over sqrt(pairs), ~2.5 standard errors)."""
    width = max(0.0, m["extra_us_p90"] - m["extra_us_p10"])
    return abs(m["extra_us"]) + width / math.sqrt(max(m["pairs"], 1.0))


def _numbers(m: Any) -> dict[str, float] | None:
    """An entry's extra time, or None when it is not one: numbers in range and in order."""
    keys = ("extra_us", "extra_us_p10", "extra_us_p90", "pairs")
    if not (isinstance(m, dict) and all(is_number(m.get(k)) for k in keys)):
        return None
    v = {k: float(m[k]) for k in keys}
    if not (1 <= v["pairs"] <= 1e9 and all(abs(v[k]) <= _MAX_EXTRA_US for k in keys[:3])
            and v["extra_us_p10"] <= v["extra_us_p90"]):
        return None
    return v


def read_indexes(files: Iterable[Path], holding: str = "") -> Iterator[dict]:
    """The readable index files among ``files`` whose text holds ``holding``, parsed; the
    others (missing too) are passed over (report says what is wrong with them where it needs
    them)."""
    for idx in files:
        if not idx.is_file():
            continue
        try:
            text = read_text(idx, "run index")
            if holding not in text:
                continue
            doc = loads_json(text, idx, "")
        except UserError:
            continue
        if isinstance(doc, dict):
            yield doc


def launch_counts(index_files: Iterable[Path]) -> dict[str, dict[str, int]]:
    """Per kernel, over the runs' index files (ranks add up): launches that ran while the
    session was on (``launch_counts``) and launches kept; only runs that counted them."""
    out: dict[str, dict[str, int]] = {}
    for d in read_indexes(index_files, '"launch_counts"'):
        ran, launches = d.get("launch_counts"), d.get("launches")
        if not isinstance(ran, dict) or not isinstance(launches, list):
            continue
        for kernel, n in ran.items():
            if isinstance(n, int) and not isinstance(n, bool) and n >= 0:
                row = out.setdefault(str(kernel), {"ran": 0, "kept": 0})
                row["ran"] += n
        for x in launches:
            if isinstance(x, dict) and x.get("kernel") in out and not x.get("tuning"):
                out[x["kernel"]]["kept"] += 1
    return dict(sorted(out.items()))
