"""Rules: what to instrument (kernel scope, loops, line ranges, op patterns, marks, CTA
sampling), and where they come from: a TOML file, ``[tool.proton-inject]`` in pyproject.toml,
an instrumented tree's manifest, or a dict. Selecting regions by them is `select.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from proton_inject.errors import UserError
from proton_inject.formats.patterns import compile_pattern
from proton_inject.formats.rules_file import (
    FLAG,
    LOOP_MODES,
    OFF_FLAG,
    PATTERNS,
    RANGES,
    RULES,
    LineRange,
)


@dataclass
class Rules:
    """What to instrument; with no rule set, `with_defaults()` gives kernel scope + outer loops."""

    kernel_scope: bool = False
    loops: str | None = None  # outer | iteration | both
    loop_depth: int | None = None  # only loops nested at most this deep (1 = outermost)
    ranges: list[LineRange] = field(default_factory=list)
    ops: list[str] = field(default_factory=list)
    kernel: str | None = None  # regex on kernel names
    marks: bool = True  # honour `# proton:` comments in the kernel's source
    source_root: str | None = None  # where relative source paths of the IR are found
    # Records run in every Nth CTA only (by linear program id; 1 = every CTA).
    sample_ctas: int = 1
    branches: bool = False  # a region around each branch of each scf.if
    _kernel: Any = field(default=None, init=False, repr=False, compare=False)  # kernel, compiled

    def __post_init__(self) -> None:
        v = self.sample_ctas
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v < 2**31:
            raise UserError(f"--sample-ctas {v!r}: must be a whole number of 1 or more "
                            "(1 = every CTA; N = every Nth)")
        if self.loops is not None and self.loops not in LOOP_MODES:
            raise UserError(f"--loops {self.loops!r}: expected one of {', '.join(LOOP_MODES)}")
        if self.loop_depth is not None and self.loop_depth < 1:
            raise UserError(f"--loop-depth {self.loop_depth}: must be 1 or more "
                            "(1 = outermost loops only)")
        if self.kernel is not None:
            self._kernel = compile_pattern(self.kernel, f"--kernel {self.kernel!r}")

    def is_empty(self) -> bool:
        """No rule that makes regions is set (``RuleKey.makes_regions``; marks alone add to
        the defaults)."""
        return not any(getattr(self, r.field) for r in RULES if r.makes_regions)

    def with_defaults(self) -> Rules:
        """The default when no rule is given: the kernel body and each loop as a whole."""
        if not self.is_empty():
            return self
        return replace(self, kernel_scope=True, loops="outer")

    def wants_kernel(self, name: str) -> bool:
        return self._kernel is None or self._kernel.search(name) is not None


def rules_with_flags(base: Rules, **given: Any) -> Rules:
    """Command-line options (by parameter name, ``RuleKey.param``) over ``base`` (a rules
    file's rules): an option given replaces the file's value, repeatable ones (``--region``,
    ``--op``) add to its lists, an off flag (``--no-marks``) turns the rule off."""
    values = {}
    for r in RULES:
        mine, v = getattr(base, r.field), given.get(r.param)
        if r.value == FLAG:
            values[r.field] = bool(v) or mine
        elif r.value == OFF_FLAG:
            values[r.field] = mine and not v
        elif r.value == RANGES:
            values[r.field] = mine + [LineRange.parse(s) for s in v or ()]
        elif r.value == PATTERNS:
            values[r.field] = mine + list(v or ())
        else:
            values[r.field] = v if v is not None and v != "" else mine
    return Rules(**values)


def rules_from_table(table: dict, where: str) -> Rules:
    """Rules from a `[tool.proton-inject]` table or a rules TOML file (checked by validate)."""
    from proton_inject.formats.rules_file import rules_table

    return Rules(**rules_table(table, where))


def rules_from_manifest(d: Any, where: str) -> Rules:
    """The rules a tree was instrumented with, from its manifest's ``rules`` (as ``insert``
    and ``profile`` write them: the rules after their defaults)."""
    if not isinstance(d, dict):
        raise UserError(f"{where}: no rules recorded; write the tree again with `proton-inject insert`")
    keys = {r.field: r.key for r in RULES if r.manifest != "never"}
    table = {keys[k]: v for k, v in d.items() if k in keys and v is not None}
    return rules_from_table(table, f"{where}: rules")


def _toml(path: Path, what: str) -> dict:
    from proton_inject.formats.schema import read_toml

    return read_toml(path, what)


def load_rules_file(path: str | Path) -> Rules:
    """Read rules from a TOML file: a `[tool.proton-inject]` table or top-level keys."""
    p = Path(path)
    data = _toml(p, "rules")
    tool = data.get("tool")
    if isinstance(tool, dict) and "proton-inject" in tool:
        return rules_from_table(tool["proton-inject"], f"{p} [tool.proton-inject]")
    return rules_from_table(data, str(p))


def rules_from_pyproject(directory: str | Path = ".") -> Rules | None:
    """The `[tool.proton-inject]` table of ./pyproject.toml, if there is one."""
    p = Path(directory) / "pyproject.toml"
    if not p.is_file():
        return None
    tool = _toml(p, "pyproject.toml").get("tool", {})
    table = tool.get("proton-inject") if isinstance(tool, dict) else None
    return rules_from_table(table, f"{p} [tool.proton-inject]") if table is not None else None
