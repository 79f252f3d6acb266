"""run.json (run.rank<R>.json): the index a run writes beside its raw launches."""

from __future__ import annotations

RUN_FORMAT = "proton-inject-run"  # run.json's "format": report tells it from a trace


def run_index_name(rank: int | None) -> str:
    """run.json, or run.rank<R>.json for one rank of a multi-process job."""
    return "run.json" if rank is None else f"run.rank{rank}.json"
