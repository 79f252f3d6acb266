"""One collector for what went wrong or was guessed while decoding launches.

Decoding says the same thing about every launch of a kernel (a rejected clock fit, damaged
CTAs); printed per launch, by ``run`` and again by ``report``, that buried the one line that
matters. Every place that shows decode problems goes through ``summarize``: one line per
kernel and cause, with counts; the per-launch sentences stay in ``details`` (``--verbose``,
JSON metadata).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Issue:
    """One problem seen in one launch.

    ``cause`` is the same words for the same problem in any launch ("globaltimer fit
    rejected"); ``why`` a short category without numbers ("too few timer anchors"); ``then``
    what was done about it, shared by launches that got the same treatment; ``detail`` the
    full sentence for this launch.
    """

    cause: str
    detail: str
    why: str = ""
    then: str = ""

    def to_dict(self) -> dict[str, str]:
        """JSON-ready form (trace metadata, report JSON)."""
        return asdict(self)

    @classmethod
    def from_json(cls, v: Any) -> Issue:
        """From ``to_dict``'s form, or from a plain warning string of an older trace."""
        if isinstance(v, dict):
            return cls(str(v.get("cause", "")), str(v.get("detail", "")), str(v.get("why") or ""),
                       str(v.get("then") or ""))
        return cls(str(v), str(v))


def summarize(launches: dict[str, int], issues: Iterable[tuple[str, Issue]]) -> list[str]:
    """One line per (kernel, cause, then): ``launches`` maps kernel -> number of launches,
    ``issues`` holds (kernel, issue) pairs, at most one per launch and cause."""
    groups: dict[tuple[str, str, str], list[Issue]] = {}
    for kernel, issue in issues:
        groups.setdefault((kernel, issue.cause, issue.then), []).append(issue)
    out = []
    for (kernel, cause, then), got in groups.items():
        whys: dict[str, int] = {}
        for i in got:
            if i.why:
                whys[i.why] = whys.get(i.why, 0) + 1
        n, of = len(got), max(len(got), launches.get(kernel, 0))
        why = ", ".join(w if c == n else f"{w} x{c}" for w, c in whys.items())
        out.append(f"{kernel}: {cause} on {n} of {of} launch{'es' if of != 1 else ''}"
                   + (f" ({why})" if why else "") + (f"; {then}" if then else ""))
    return out


NOTE_WIDTH = 110  # a note's first line, after "proton-inject: warning: ", fits 135 columns
MORE = " (more: -v)"


def _without_asides(text: str) -> str:
    """``text`` less its parenthesized asides (nested ones too) and the space before each."""
    out: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(" and (depth or not out or out[-1] == " "):
            depth += 1  # an aside opens after a space; "kernel(s)" stays as it is
            if depth == 1 and out:
                out.pop()
        elif ch == ")" and depth:
            depth -= 1
        elif not depth:
            out.append(ch)
    return "".join(out) if depth == 0 else text


def headline(text: str, width: int = NOTE_WIDTH) -> str:
    """A note's first line: ``text`` itself when it fits ``width``, else its asides dropped
    and as many of its ``; ``-clauses as fit (the first one always), ending in ``MORE``; the
    whole note is for ``-v``."""
    if len(text) <= width:
        return text
    short = _without_asides(text)
    clauses = short.split("; ")
    kept = clauses[0]
    for c in clauses[1:]:
        if len(kept) + 2 + len(c) + len(MORE) > width:
            break
        kept += "; " + c
    return kept + MORE
