"""The rule keys of a rules TOML file or ``[tool.proton-inject]`` table, type-checked, and
the ``NAME=FILE:START-END`` line ranges they hold.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from proton_inject.errors import UserError
from proton_inject.formats.patterns import compile_pattern
from proton_inject.formats.schema import is_int, shown, type_name

LOOP_MODES = ("outer", "iteration", "both")


@dataclass(frozen=True)
class LineRange:
    """`NAME=FILE:START-END`: profile the ops coming from those source lines."""

    name: str
    file: str
    start: int
    end: int
    origin: str = "region"  # or "mark" when it comes from a `# proton:` comment
    where: str = ""  # where the rule was written, for error messages

    @staticmethod
    def parse(spec: str) -> LineRange:
        m = re.fullmatch(r"\s*([^=]+?)\s*=\s*(.+):(\d+)(?:-(\d+))?\s*", spec)
        if not m:
            raise UserError(f"--region {spec!r}: expected NAME=FILE:START-END, "
                            "e.g. 'load tiles=matmul.py:41-43'")
        start = int(m.group(3))
        end = int(m.group(4) or start)
        if end < start:
            raise UserError(f"--region {spec!r}: END line {end} is before START line {start}")
        return LineRange(m.group(1), m.group(2), start, end, "region", f"--region {spec}")


RULE_KEYS = ("kernel-scope", "loops", "loop-depth", "region", "op", "kernel", "marks",
             "source-root", "sample-ctas")


def _hyphenated(table: dict, where: str) -> dict:
    """The keys as TOML spells them: a Python dict may write ``kernel_scope`` for
    ``kernel-scope``; one key given both ways is refused."""
    out: dict = {}
    for key, v in table.items():
        k = key.replace("_", "-") if isinstance(key, str) else key
        if k in out:
            raise UserError(f"{where}: {k} given twice ({k} and {key}); keep one")
        out[k] = v
    return out


def rules_table(table: Any, where: str) -> dict[str, Any]:
    """The rule keys of a TOML table, type-checked; a mistake names ``where`` and the key.

    Returns a dict with the Rules field names and Python values; LineRange parsing and the
    value checks of Rules are done here too, so that the CLI option names never get the blame.
    """
    from proton_inject.formats.rules_file import LOOP_MODES, LineRange

    if not isinstance(table, dict):
        raise UserError(f"{where}: expected a table of rules, not {type_name(table)}")
    table = _hyphenated(table, where)
    unknown = set(table) - set(RULE_KEYS)
    if unknown:
        raise UserError(f"{where}: unknown rule key(s) {', '.join(sorted(unknown))}; "
                        f"known: {', '.join(RULE_KEYS)}")

    def bad(key: str, want: str) -> UserError:
        return UserError(f"{where}: {key} = {shown(table[key])} must be {want}")

    out: dict[str, Any] = {}
    for key, field in (("kernel-scope", "kernel_scope"), ("marks", "marks")):
        if key in table:
            if not isinstance(table[key], bool):
                raise bad(key, "true or false (without quotes)")
            out[field] = table[key]
    if "loops" in table:
        if table["loops"] not in LOOP_MODES:
            raise bad("loops", f"one of {', '.join(repr(m) for m in LOOP_MODES)}")
        out["loops"] = table["loops"]
    if "sample-ctas" in table:
        if not is_int(table["sample-ctas"]) or table["sample-ctas"] < 1:
            raise bad("sample-ctas", "an integer of 1 or more (1 = every CTA; N = every Nth)")
        out["sample_ctas"] = table["sample-ctas"]
    if "loop-depth" in table:
        v = table["loop-depth"]
        if not is_int(v) or v < 1:
            raise bad("loop-depth", "an integer of 1 or more (1 = outermost loops only)")
        out["loop_depth"] = v
    for key, field in (("kernel", "kernel"), ("source-root", "source_root")):
        if key in table:
            if not isinstance(table[key], str) or not table[key]:
                raise bad(key, "a non-empty string")
            out[field] = table[key]
    if "kernel" in out:
        compile_pattern(out["kernel"], f"{where}: kernel = {shown(out['kernel'])}")
    for key, example in (("region", "'load tiles=matmul.py:41-43'"), ("op", "'tt.dot'")):
        if key not in table:
            continue
        v = table[key]
        items = [v] if isinstance(v, str) else v
        if not isinstance(items, list) or not all(isinstance(s, str) and s for s in items):
            raise bad(key, f"a string or an array of strings, e.g. {example}")
        out[key] = items
    ranges = []
    for spec in out.pop("region", []):
        try:
            ranges.append(LineRange.parse(spec))
        except UserError as e:
            raise UserError(f"{where}: region {str(e).removeprefix('--region ')}") from None
    out["ranges"] = ranges
    out["ops"] = out.pop("op", [])
    return out
