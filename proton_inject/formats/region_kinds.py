"""What kind of region a scope is, by the name manifests, raw launches and reports carry.

A region's kind comes from the rule that made it: the manifest's ``origin`` of the region
(``kind_of``), carried into each launch's metadata as ``scope_kinds``. Its name says nothing
about it: a mark may be called ``loop_x``. ``runs`` says how often such a region's records
run, which is what the measured overhead classes (``analyze/overhead.py``) depend on.

A new kind is one entry in ``REGION_KINDS`` (with the manifest origin its rule writes); its
rule and its selection are in ``instrument/`` (``rules.py``, ``select.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ONCE = "once"  # once per CTA or per loop, never per iteration
PER_ITERATION = "per-iteration"  # on every iteration of a loop
ANY = "any"  # wherever the user put it: the overhead classes do not cover it


@dataclass(frozen=True)
class RegionKind:
    """A region kind: its name, the manifest origin (first word) of its rule, how often its
    records run, and what it is, in a few words."""

    name: str
    origin: str
    runs: str
    help: str


REGION_KINDS: dict[str, RegionKind] = {k.name: k for k in (
    RegionKind("kernel", "kernel-scope", ONCE, "a kernel's body (--kernel-scope)"),
    RegionKind("loop", "loops", ONCE, "a whole loop (--loops outer)"),
    RegionKind("iteration", "loops", PER_ITERATION, "each iteration of a loop's body (--loops iteration)"),
    RegionKind("op", "op", ANY, "an op matching a pattern (--op)"),
    RegionKind("mark", "mark", ANY, "the lines of a '# proton:' mark in the source"),
    RegionKind("lines", "region", ANY, "ops from source lines (--region NAME=FILE:START-END)"),
)}
UNKNOWN = "unknown"  # a scope no manifest described (a kind from a newer version, or none)


def kind_of(origin: str, name: str) -> str:
    """The kind of a region from its manifest ``origin`` and the ``name`` insert gave it.

    One origin, ``loops``, makes two kinds: insert names the whole loop ``loop ...`` and its
    body ``iter ...`` (names the user cannot choose for that origin)."""
    head = origin.split(" ")[0]
    if head == "loops":
        return "iteration" if name.split(" ")[0] == "iter" else "loop"
    return next((k.name for k in REGION_KINDS.values() if k.origin == head), UNKNOWN)


def kind_from_name(name: str) -> str:
    """The kind of a scope of a launch recorded before launches carried ``scope_kinds``: the
    names insert gave the regions of its default rules (``kernel``, ``loop ...``, ``iter
    ...``); any other name is a mark, an op or lines, which one unknown."""
    word = name.split(" ")[0]
    return {"kernel": "kernel", "loop": "loop", "iter": "iteration"}.get(word, UNKNOWN)


def scope_kinds_of(scopes: dict[int, str], scope_kinds: dict[int, str] | None) -> dict[int, str]:
    """Each scope's kind: from ``scope_kinds`` (the launch's metadata), else, for a launch
    recorded without them, from its name (``kind_from_name``)."""
    if scope_kinds is not None:
        return {s: scope_kinds.get(s, UNKNOWN) for s in scopes}
    return {s: kind_from_name(n) for s, n in scopes.items()}


def runs(kind: Any) -> str:
    """How often a region of ``kind`` runs (``ANY`` for an unknown kind)."""
    k = REGION_KINDS.get(kind)
    return k.runs if k is not None else ANY
