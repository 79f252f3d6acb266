"""What kind of region a scope is, by the name manifests, raw launches and reports carry.

A region's kind comes from the rule that made it: the manifest's ``origin`` of the region
(``kind_of``), carried into each launch's metadata as ``scope_kinds``. Its name says nothing
about it: a mark may be called ``loop_x``. ``runs`` says how often such a region's records
run, which is what the measured overhead classes (``analyze/overhead.py``) depend on.

The kinds are listed beside the rules that make them, in ``rules_file.py``
(``REGION_KINDS``): a new kind is an entry there with its rule (``RULES``), the rule's field in
``instrument/rules.py`` and its selection in ``instrument/select.py``.
"""

from __future__ import annotations

from typing import Any

from proton_inject.formats.rules_file import ANY, ONCE, PER_ITERATION, REGION_KINDS, Kind, RegionKind

__all__ = ["ANY", "ONCE", "PER_ITERATION", "REGION_KINDS", "UNKNOWN", "Kind", "RegionKind",
           "kind_from_name", "kind_of", "runs", "scope_kinds_of"]

UNKNOWN = "unknown"  # a scope no manifest described (a kind from a newer version, or none)


def kind_of(origin: str, name: str) -> str:
    """The kind of a region from its manifest ``origin`` and the ``name`` insert gave it.

    One origin, ``loops``, makes two kinds: insert names the whole loop ``loop ...`` and its
    body ``iter ...`` (names the user cannot choose for that origin)."""
    head = origin.split(" ")[0]
    if head == "loops":
        return Kind.ITERATION if name.split(" ")[0] == "iter" else Kind.LOOP
    return next((k.name for k in REGION_KINDS.values() if k.origin == head), UNKNOWN)


def kind_from_name(name: str) -> str:
    """The kind of a scope of a launch recorded before launches carried ``scope_kinds``: the
    names insert gave the regions of its default rules (``kernel``, ``loop ...``, ``iter
    ...``); any other name is a mark, an op or lines, which one unknown."""
    word = name.split(" ")[0]
    return {"kernel": Kind.KERNEL, "loop": Kind.LOOP, "iter": Kind.ITERATION}.get(word, UNKNOWN)


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
