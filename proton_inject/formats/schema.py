"""Checks on data where it enters the tool: rules files, manifests, raw launch metadata, traces.

Every reader of user-supplied structured data goes through here, so a value of the wrong type
becomes one UserError naming the file and the key, never a traceback deep inside (and a new
field gets its check here, next to the others).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from proton_inject.errors import UserError

# Metadata and manifest files are small; a larger one is not ours (and reading it whole could
# exhaust memory).
MAX_JSON_BYTES = 64 * 2**20
# CUDA's limits: grid x < 2^31, y and z < 2^16; at most 1024 threads (32 warps) per CTA.
MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_WARPS = 32
MAX_BYTES_PER_CTA = 2**31
SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")


def read_text(path: str | Path, what: str, limit: int = MAX_JSON_BYTES) -> str:
    """A UTF-8 text file's content; a missing, unreadable, huge or binary file is a UserError."""
    p = Path(path)
    try:
        if p.is_dir():
            raise UserError(f"{p}: is a directory; give the {what} file")
        with open(p, "rb") as f:
            data = f.read(limit + 1)
    except FileNotFoundError:
        raise UserError(f"{p}: no such {what} file") from None
    except OSError as e:
        raise UserError(f"{p}: cannot read the {what} file: {e.strerror or e}") from None
    if len(data) > limit:
        raise UserError(f"{p}: larger than {limit // 2**20} MiB; not a {what} file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{p}: not UTF-8 text (byte {e.start}); not a {what} file") from None


def read_json(path: str | Path, what: str, fix: str) -> Any:
    """Parsed JSON of a small file; ``fix`` says what to do when it is broken."""
    text = read_text(path, what)
    try:
        return json.loads(text)
    except ValueError as e:
        raise UserError(f"{path}: not valid JSON ({e}); {fix}") from None
    except RecursionError:
        raise UserError(f"{path}: JSON nested too deeply; {fix}") from None


def type_name(v: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "an array", dict: "a table"}.get(type(v), type(v).__name__)


def shown(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


# --- rules (a rules TOML file or [tool.proton-inject] of pyproject.toml) -------------------------





# --- manifest.json of a dump or an override tree ------------------------------------------------






# --- raw launch metadata (the .json half of a raw launch) ---------------------------------------








# --- traces written by `report --trace` / `run` --------------------------------------------------


def trace_launches(other: Any, path: str | Path) -> list[dict[str, Any]]:
    """The per-launch summaries of a trace's otherData, checked field by field."""
    fix = "write it again with `proton-inject report RAW --trace DIR`"
    launches = other.get("launches") if isinstance(other, dict) else None
    if not isinstance(launches, list) or not launches:
        raise UserError(f"{path}: otherData.launches is missing or empty; {fix}")
    for i, s in enumerate(launches):
        if not isinstance(s, dict):
            raise UserError(f"{path}: otherData.launches[{i}] must be an object; {fix}")
        checks = (("pid_base", is_int), ("launch", is_int), ("num_warps", is_int),
                  ("kernel", lambda v: isinstance(v, str)),
                  ("grid", lambda v: isinstance(v, list) and all(map(is_int, v))),
                  ("clock", lambda v: isinstance(v, dict)),
                  ("scopes", lambda v: isinstance(v, dict) and all(
                      isinstance(k, str) and k.isdigit() and isinstance(x, str)
                      for k, x in v.items())),
                  ("scope_parents", lambda v: isinstance(v, dict) and all(
                      isinstance(k, str) and k.isdigit() and is_int(x) for k, x in v.items())))
        for key, ok in checks:
            if key not in s or not ok(s[key]):
                raise UserError(f"{path}: otherData.launches[{i}].{key} is missing or of the "
                                f"wrong type; {fix}")
    return launches


def trace_event_error(path: str | Path, index: int, e: Exception) -> UserError:
    """The message for a trace event that lacks a field or has one of the wrong type."""
    what = f"lacks {e.args[0]!r}" if isinstance(e, KeyError) else f"is malformed ({e})"
    return UserError(f"{path}: traceEvents[{index}] {what}; write the trace again with "
                     "`proton-inject report RAW --trace DIR`")


# --- report options ------------------------------------------------------------------------------


def report_options(clock_mhz: float | None, trace_dir: Any, merge: bool, gz: bool,
                   plot: Any) -> None:
    """Option combinations of `report` that would otherwise be ignored or print nonsense."""
    if clock_mhz is not None and not (math.isfinite(clock_mhz) and clock_mhz > 0):
        raise UserError(f"--clock-mhz {clock_mhz}: must be a positive number of MHz, e.g. 1755")
    for flag, on in (("--merge", merge), ("--gz", gz)):
        if on and trace_dir is None:
            raise UserError(f"{flag} only applies to --trace DIR; add --trace DIR or drop {flag}")
    if plot is not None:
        p = Path(plot)
        if p.suffix.lower() != ".png":
            raise UserError(f"--plot {plot}: must name a .png file, e.g. --plot timeline.png")
        if p.exists() and not p.is_file():
            raise UserError(f"--plot {plot}: exists and is not a file")
