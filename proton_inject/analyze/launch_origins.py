"""Where the kept launches came from and how many ran: the program's frame that launched each
kernel (``launched_from`` in a launch's metadata), for a kernel Inductor generated the model's
lines its metadata names (``model_source``; its launches come from Inductor's own wrapper), and
the launches each kernel made while the session ran, kept or not (run.json's ``launch_counts``)."""

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


def model_sources(kernel_and_source: Iterable[tuple[str, dict[str, list[str]] | None]]
                  ) -> dict[str, dict[str, list[str]]]:
    """Per kernel: the model's lines, source nodes and ATen ops its launches' ``model_source``
    name, each once in the order met (a kernel compiled for two graphs can name two sets)."""
    out: dict[str, dict[str, list[str]]] = {}
    for kernel, source in kernel_and_source:
        if source:
            mine = out.setdefault(kernel, {"lines": [], "nodes": [], "aten": []})
            for key, have in mine.items():
                have += [v for v in source.get(key) or [] if v not in have]
    return dict(sorted(out.items()))


def attach(summary: dict[str, Any], origins: dict[str, dict[str, int]], raws: Sequence[str],
           sources: dict[str, dict[str, list[str]]] | None = None) -> dict[str, Any]:
    """``summary`` with who launched its kernels (``by_kernel``), the model's lines of those
    Inductor generated (``model_sources``) and, from the runs' index files, how many launches
    each made (runs from before launches were counted: neither)."""
    counts = run_index.launch_counts(run_index.index_files_of(raws))
    return (summary | ({"launched_from": origins} if origins else {}) | ({"model_source": sources} if sources else {})
            | ({"launch_counts": counts} if counts else {}))


def format_launches(summary: dict[str, Any]) -> str:
    """The report's lines on launches counted and who launched them ("" when it has neither)."""
    text = ""
    if summary.get("launch_counts"):
        text += "\n\nlaunches (all counted, some kept):\n" + "\n".join(
            f"  {k}: {c['ran']:,} ran, {c['kept']:,} kept" for k, c in summary["launch_counts"].items())
    sources = summary.get("model_source") or {}
    if summary.get("launched_from") or sources:
        text += "\n\nlaunched from (the program's own frame; kept launches):"
        for kernel in sorted(set(summary.get("launched_from") or {}) | set(sources)):
            text += "".join(f"\n  {kernel}: {site} x{n}"
                            for site, n in (summary.get("launched_from") or {}).get(kernel, {}).items())
            if kernel in sources:
                text += "\n  " + " " * (len(kernel) + 2) + model_text(sources[kernel])
    return text


def model_text(source: dict[str, list[str]]) -> str:
    """``model: m.py:6 (forward) (Inductor: source nodes y; aten.mul, aten._softmax)``."""
    lines = ", ".join(source.get("lines") or []) or "no line kept"
    parts = [f"source nodes {', '.join(source['nodes'])}"] if source.get("nodes") else []
    parts += [", ".join(source["aten"])] if source.get("aten") else []
    return f"model: {lines} (Inductor{': ' + '; '.join(parts) if parts else ''})"
