"""The rules, named once (``RULES``: the rules file's keys, the command-line options, the
manifest's entry), the kinds of region they make (``REGION_KINDS``), the reading of a rules
TOML file or ``[tool.proton-inject]`` table, type-checked, and the ``NAME=FILE:START-END``
line ranges it holds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
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


# The kinds of value a rule takes.
FLAG = "flag"  # true/false; on the command line a flag that turns it on
CHOICE = "choice"  # one of ``choices``
COUNT = "count"  # an integer of 1 or more
TEXT = "text"  # a non-empty string (REGEX: a valid regular expression too)
REGEX = "regex"
PATTERNS = "patterns"  # a string or an array of strings; the command line's add to the file's
RANGES = "ranges"  # line ranges NAME=FILE:START-END, as PATTERNS
OFF_FLAG = "off-flag"  # true/false, on by default; on the command line a flag that turns it off


@dataclass(frozen=True)
class RuleKey:
    """One rule, the one place that names it: its ``Rules`` field, its key in a rules TOML
    file or ``[tool.proton-inject]`` table, its command-line option, the kind of value it
    takes, what it does (``help``), what a wrong value must be instead (``want``), and when
    the manifest records it (``manifest``: "always", "set": only when not the default, or
    "never")."""

    field: str
    key: str
    option: str
    value: str
    help: str
    want: str = ""
    choices: tuple[str, ...] = ()
    metavar: str | None = None
    manifest: str = "always"
    makes_regions: bool = False  # a rule that selects regions (with none set: the defaults)

    @property
    def param(self) -> str:
        """The option's parameter name (``--no-marks``: ``no_marks``)."""
        return self.option.lstrip("-").replace("-", "_")


RULES: tuple[RuleKey, ...] = (
    RuleKey("kernel_scope", "kernel-scope", "--kernel-scope", FLAG,
            "One region around each kernel's body.", makes_regions=True),
    RuleKey("loops", "loops", "--loops", CHOICE,
            "A region around each loop, each iteration's body, or both.", choices=LOOP_MODES, makes_regions=True),
    RuleKey("loop_depth", "loop-depth", "--loop-depth", COUNT,
            "Only loops nested at most N deep (1 = outermost).",
            want="an integer of 1 or more (1 = outermost loops only)", metavar="N"),
    RuleKey("ranges", "region", "--region", RANGES,
            "A region around the ops from those source lines (repeatable).",
            want="'load tiles=matmul.py:41-43'", metavar="NAME=FILE:START-END", makes_regions=True),
    RuleKey("ops", "op", "--op", PATTERNS,
            "A region around each op whose name matches the glob (repeatable).",
            want="'tt.dot'", metavar="PATTERN", makes_regions=True),
    RuleKey("kernel", "kernel", "--kernel", REGEX, "Only kernels whose name matches.",
            metavar="REGEX"),
    RuleKey("marks", "marks", "--no-marks", OFF_FLAG,
            "Ignore '# proton:' marks in the kernel source."),
    RuleKey("source_root", "source-root", "--source-root", TEXT,
            "Where relative source paths in the IR are found (default: .).", metavar="DIR",
            manifest="never"),
    RuleKey("sample_ctas", "sample-ctas", "--sample-ctas", COUNT,
            "Record in every Nth CTA only (by linear program id); a loop with records inside "
            "runs in two copies (with and without them). Default 1: every CTA.",
            want="an integer of 1 or more (1 = every CTA; N = every Nth)", metavar="N",
            manifest="set"),
    RuleKey("branches", "branches", "--branches", FLAG,
            "A region around each branch of each if (its then and else bodies).", manifest="set", makes_regions=True),
)
RULE_KEYS = tuple(r.key for r in RULES)

# The kinds of region the rules make (``region_kinds.py`` reads a scope's kind), and how
# often each one's records run (what the measured overhead classes depend on).
ONCE = "once"  # once per CTA or per loop, never per iteration
PER_ITERATION = "per-iteration"  # on every iteration of a loop
ANY = "any"  # wherever the user put it: the overhead classes do not cover it


class Kind(StrEnum):
    """The names of the region kinds (what manifests, raw launches and reports carry)."""

    KERNEL = "kernel"
    LOOP = "loop"
    ITERATION = "iteration"
    OP = "op"
    MARK = "mark"
    LINES = "lines"
    BRANCH = "branch"


@dataclass(frozen=True)
class RegionKind:
    """A region kind: its name, the manifest origin (first word) of its rule, how often its
    records run, and what it is, in a few words."""

    name: str
    origin: str
    runs: str
    help: str


REGION_KINDS: dict[str, RegionKind] = {k.name: k for k in (
    RegionKind(Kind.KERNEL, "kernel-scope", ONCE, "a kernel's body (--kernel-scope)"),
    RegionKind(Kind.LOOP, "loops", ONCE, "a whole loop (--loops outer)"),
    RegionKind(Kind.ITERATION, "loops", PER_ITERATION, "each iteration of a loop's body (--loops iteration)"),
    RegionKind(Kind.OP, "op", ANY, "an op matching a pattern (--op)"),
    RegionKind(Kind.MARK, "mark", ANY, "the lines of a '# proton:' mark in the source"),
    RegionKind(Kind.LINES, "region", ANY, "ops from source lines (--region NAME=FILE:START-END)"),
    RegionKind(Kind.BRANCH, "branches", ANY, "the then or else body of an if (--branches)"),
)}


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
    if not isinstance(table, dict):
        raise UserError(f"{where}: expected a table of rules, not {type_name(table)}")
    table = _hyphenated(table, where)
    unknown = set(table) - set(RULE_KEYS)
    if unknown:
        raise UserError(f"{where}: unknown rule key(s) {', '.join(sorted(unknown))}; "
                        f"known: {', '.join(RULE_KEYS)}")
    return {r.field: _value(r, table[r.key], where) for r in RULES if r.key in table}


def _value(r: RuleKey, v: Any, where: str) -> Any:
    """The value of rule ``r`` in a table, checked."""
    def bad(want: str) -> UserError:
        return UserError(f"{where}: {r.key} = {shown(v)} must be {want}")

    if r.value in (FLAG, OFF_FLAG):
        if not isinstance(v, bool):
            raise bad("true or false (without quotes)")
    elif r.value == CHOICE:
        if v not in r.choices:
            raise bad(f"one of {', '.join(repr(m) for m in r.choices)}")
    elif r.value == COUNT:
        if not is_int(v) or v < 1:
            raise bad(r.want)
    elif r.value in (TEXT, REGEX):
        if not isinstance(v, str) or not v:
            raise bad("a non-empty string")
        if r.value == REGEX:
            compile_pattern(v, f"{where}: {r.key} = {shown(v)}")
    else:  # PATTERNS, RANGES
        items = [v] if isinstance(v, str) else v
        if not isinstance(items, list) or not all(isinstance(x, str) and x for x in items):
            raise bad(f"a string or an array of strings, e.g. {r.want}")
        if r.value == RANGES:
            try:
                return [LineRange.parse(spec) for spec in items]
            except UserError as e:
                raise UserError(f"{where}: {r.key} {str(e).removeprefix('--region ')}") from None
        return list(items)
    return v
