"""Where the kept launches came from and how many ran: the program's frame that launched each
kernel (``launched_from`` in a launch's metadata) and the launches each kernel made while the
session ran, kept or not (run.json's ``launch_counts``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from proton_inject.formats import run_index


def by_kernel(kernel_and_site: Iterable[tuple[str, str | None]]) -> dict[str, dict[str, int]]:
    """Per kernel: the program's frames that launched its kept launches and how many each
    (launches recorded without one are left out)."""
    out: dict[str, dict[str, int]] = {}
    for kernel, site in kernel_and_site:
        if site is not None:
            sites = out.setdefault(kernel, {})
            sites[site] = sites.get(site, 0) + 1
    return {k: dict(sorted(v.items(), key=lambda kv: -kv[1])) for k, v in sorted(out.items())}


def attach(summary: dict[str, Any], origins: dict[str, dict[str, int]], raws: Sequence[str]) -> dict[str, Any]:
    """``summary`` with who launched its kernels (``by_kernel``) and, from the runs' index
    files, how many launches each made (runs from before launches were counted: neither)."""
    counts = run_index.launch_counts(run_index.index_files_of(raws))
    return summary | ({"launched_from": origins} if origins else {}) | ({"launch_counts": counts} if counts else {})


def format_launches(summary: dict[str, Any]) -> str:
    """The report's lines on launches counted and who launched them ("" when it has neither)."""
    text = ""
    if summary.get("launch_counts"):
        text += "\n\nlaunches (all counted, some kept):\n" + "\n".join(
            f"  {k}: {c['ran']:,} ran, {c['kept']:,} kept" for k, c in summary["launch_counts"].items())
    if summary.get("launched_from"):
        text += "\n\nlaunched from (the program's own frame; kept launches):\n" + "\n".join(
            f"  {kernel}: {site} x{n}" for kernel, sites in summary["launched_from"].items()
            for site, n in sites.items())
    return text
