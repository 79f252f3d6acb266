"""The user's regular expressions (``--kernel``, a rules file's ``kernel``): compiled by RE2,
whose matching takes time linear in the text whatever the pattern, where Python's ``re``
backtracks for ever on ``(a+)+$`` against a long kernel name. RE2 has no backreferences or
lookarounds; a pattern using them is refused in one line."""

from __future__ import annotations

from typing import Any

import re2

from proton_inject.errors import UserError

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # (RE2 would also print its own parse error on stderr)


def compile_pattern(text: str, label: str) -> Any:
    """``text`` compiled (``.search(name)`` as ``re``'s); a UserError naming ``label`` (e.g.
    "--kernel '(a'") when RE2 cannot compile it."""
    try:
        return re2.compile(text, _OPTIONS)
    except re2.error as e:
        why = e.args[0] if e.args else e
        why = why.decode("utf-8", "replace") if isinstance(why, bytes) else str(why)
        raise UserError(f"{label} is not a valid regular expression: {why} (RE2 syntax: no "
                        "backreferences or lookarounds)") from None


def exact_names(names: list[str]) -> str:
    """A pattern matching exactly these names and no other (each escaped for RE2)."""
    return "^(?:" + "|".join(re2.escape(n) for n in names) + ")$"
