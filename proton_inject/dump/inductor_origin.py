"""The model's source behind a kernel Inductor generated, from Inductor's own metadata.

An Inductor kernel's own source names nothing of the model (its ``inductor_meta`` holds the
kernel's name and tuning settings). The wrapper module Inductor writes around the kernels (its
output code) says, in comments above each kernel's definition ``NAME = async_compile.triton(
'NAME', ...)``, which FX source nodes the kernel computes and their ATen ops ("Topologically
Sorted Source Nodes: [...], Original ATen: [...]") and, per source node, the post-grad nodes
("Source node to ATen node mapping"); each of those nodes keeps in ``meta["stack_trace"]`` the
frames of the model's code that made it. No file holds those frames (torch 2.11 and 2.13 alike,
unless provenance tracking is on), but while Inductor compiles a kernel in this process both are
at hand: the wrapper module is executing that definition (its frame is on the stack) and
``torch._inductor.virtualized.V.graph`` is the graph being lowered. ``at_compile`` reads them
then, from inside Triton's compile of the kernel.
"""

from __future__ import annotations

import linecache
import os
import re
import sys
from collections.abc import Iterable, Sequence
from typing import Any

_NODES = re.compile(r"^# (?:Topologically Sorted|Unsorted) Source Nodes: \[(.*)\], Original ATen: \[(.*)\]$")
_MAPPED = re.compile(r"^#   (\S+) => (.+)$")
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')
MAX_LINES = 16  # model lines kept per kernel (a kernel fusing a whole block can name many)


def definition_comments(lines: Sequence[str], name: str
                        ) -> tuple[list[str], list[str], dict[str, list[str]]] | None:
    """From the wrapper module's ``lines``: the source nodes, ATen ops and source node ->
    post-grad nodes that the comments above kernel ``name``'s definition list; None when it is
    not defined there or has no such comment."""
    start = f"{name} = async_compile.triton("
    at = next((i for i, line in enumerate(lines) if line.startswith(start)), None)
    if at is None:
        return None
    block = []
    for line in reversed(lines[:at]):
        if not line.startswith("#"):
            break
        block.append(line.rstrip("\n"))
    block.reverse()
    head = next((m for m in map(_NODES.match, block) if m), None)
    if head is None:
        return None
    nodes, aten = (_names(g) for g in head.groups())
    mapping = {m[1]: _names(m[2]) for m in map(_MAPPED.match, block) if m}
    return nodes, aten, mapping


def _names(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def model_line(stack_trace: str, outside: tuple[str, ...] = ()) -> str | None:
    """``file:line (function)`` of the innermost frame of an FX node's stack trace whose file
    is not under ``outside`` (installed packages: a module of torch.nn the model called);
    the innermost of all where every frame is; None without frames."""
    frames = _FRAME.findall(stack_trace or "")
    if not frames:
        return None
    mine = [f for f in frames if not os.path.abspath(f[0]).startswith(outside)] or frames
    path, line, func = mine[-1]
    rel = os.path.relpath(path)
    return f"{path if rel.startswith('..') else rel}:{line} ({func})"


def model_lines(graph_nodes: Iterable[Any], nodes: list[str], mapping: dict[str, list[str]],
                outside: tuple[str, ...] = ()) -> list[str]:
    """The model's lines behind source ``nodes`` (in their order): each one's post-grad nodes
    (``mapping``) looked up by name among ``graph_nodes`` (FX nodes), their stack traces'
    lines, each once."""
    wanted = {n for src in nodes for n in mapping.get(src, [])}
    traces = {n.name: n.meta.get("stack_trace") for n in graph_nodes if n.name in wanted}
    out: list[str] = []
    for src in nodes:
        for n in mapping.get(src, []):
            line = model_line(traces.get(n) or "", outside)
            if line is not None and line not in out:
                out.append(line)
    return out[:MAX_LINES]


def at_compile(name: str, outside: tuple[str, ...] = ()) -> dict[str, list[str]] | None:
    """For Inductor kernel ``name`` being compiled now, inside Inductor's own compile of it
    (in this process): ``{"lines": model lines, "nodes": source nodes, "aten": ATen ops}``
    (``formats/raw.py`` ``LaunchMeta.model_source``); None when no wrapper module defining it
    is on the stack (a kernel not from Inductor, or one compiled elsewhere) or it has no such
    comment. ``lines`` is empty when the graph is not at hand or keeps no stack traces.
    ``outside``: path prefixes of files that are not the program's (installed packages)."""
    frame = sys._getframe(1)
    start = f"{name} = async_compile.triton("
    while frame is not None:
        code = frame.f_code
        if code.co_name == "<module>" and linecache.getline(code.co_filename, frame.f_lineno).startswith(start):
            break
        frame = frame.f_back
    if frame is None:
        return None
    found = definition_comments(linecache.getlines(frame.f_code.co_filename), name)
    if found is None:
        return None
    nodes, aten, mapping = found
    return {"lines": model_lines(_graph_nodes(), nodes, mapping, outside), "nodes": nodes, "aten": aten}


def _graph_nodes() -> list[Any]:
    """The FX nodes of the graph Inductor is lowering now (none outside its compile)."""
    try:
        from torch._inductor.virtualized import V

        return list(V.graph.graph.nodes)
    except Exception:  # (no graph set: V.graph is a stand-in without one)
        return []
