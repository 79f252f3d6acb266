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

from .errors import UserError

# Metadata and manifest files are small; a larger one is not ours (and reading it whole could
# exhaust memory).
MAX_JSON_BYTES = 64 * 2**20
# CUDA's limits: grid x < 2^31, y and z < 2^16; at most 1024 threads (32 warps) per CTA.
MAX_GRID = (2**31 - 1, 65535, 65535)
MAX_WARPS = 32
MAX_BYTES_PER_CTA = 2**31
_SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*")


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


def _tname(v: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "an array", dict: "a table"}.get(type(v), type(v).__name__)


def _show(v: Any) -> str:
    s = repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


# --- rules (a rules TOML file or [tool.proton-inject] of pyproject.toml) -------------------------

RULE_KEYS = ("kernel-scope", "loops", "loop-depth", "region", "op", "kernel", "marks",
             "source-root", "sample-ctas")


def rules_table(table: Any, where: str) -> dict[str, Any]:
    """The rule keys of a TOML table, type-checked; a mistake names ``where`` and the key.

    Returns a dict with the Rules field names and Python values; LineRange parsing and the
    value checks of Rules are done here too, so that the CLI option names never get the blame.
    """
    from .rules import LOOP_MODES, LineRange

    if not isinstance(table, dict):
        raise UserError(f"{where}: expected a table of rules, not {_tname(table)}")
    unknown = set(table) - set(RULE_KEYS)
    if unknown:
        raise UserError(f"{where}: unknown rule key(s) {', '.join(sorted(unknown))}; "
                        f"known: {', '.join(RULE_KEYS)}")

    def bad(key: str, want: str) -> UserError:
        return UserError(f"{where}: {key} = {_show(table[key])} must be {want}")

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
        try:
            re.compile(out["kernel"])
        except re.error as e:
            raise UserError(f"{where}: kernel = {_show(out['kernel'])} is not a valid regular "
                            f"expression: {e}") from None
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


# --- manifest.json of a dump or an override tree ------------------------------------------------


def manifest_kernels(data: Any, path: str | Path) -> list[dict[str, Any]]:
    """The ``kernels`` entries of a manifest.json, each a dict whose file keys are strings."""
    fix = "re-run `proton-inject dump` (or `insert`) to rewrite it"
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object with a \"kernels\" list, not "
                        f"{_tname(data)}; {fix}")
    kernels = data.get("kernels", [])
    if not isinstance(kernels, list):
        raise UserError(f"{path}: \"kernels\" must be a list, not {_tname(kernels)}; {fix}")
    for i, k in enumerate(kernels):
        if not isinstance(k, dict):
            raise UserError(f"{path}: kernels[{i}] must be an object, not {_tname(k)}; {fix}")
        for key in ("file", "ttgir", "kernel", "hash"):
            if k.get(key) is not None and not isinstance(k[key], str):
                raise UserError(f"{path}: kernels[{i}].{key} must be a string, not "
                                f"{_show(k[key])}; {fix}")
        regions = k.get("regions", [])
        if not isinstance(regions, list) or not all(isinstance(r, dict) for r in regions):
            raise UserError(f"{path}: kernels[{i}].regions must be a list of objects; {fix}")
        for j, r in enumerate(regions):
            if r.get("scope_id") is not None and not is_int(r["scope_id"]):
                raise UserError(f"{path}: kernels[{i}].regions[{j}].scope_id must be an "
                                f"integer, not {_show(r['scope_id'])}; {fix}")
            if r.get("source") is not None and not isinstance(r["source"], str):
                raise UserError(f"{path}: kernels[{i}].regions[{j}].source must be a string; "
                                f"{fix}")
    return kernels


def read_manifest(path: str | Path) -> list[dict[str, Any]]:
    """The kernels of a manifest.json file, validated."""
    return manifest_kernels(read_json(path, "manifest", "re-run `proton-inject dump` (or "
                                      "`insert`) to rewrite it"), path)


# --- raw launch metadata (the .json half of a raw launch) ---------------------------------------


def _id_map(d: dict, key: str, where: str, value_ok, want: str) -> dict[int, Any]:
    v = d.get(key, {})
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise UserError(f"{where}: {key} must be an object of scope id -> {want}, "
                        f"not {_tname(v)}")
    out = {}
    for k, x in v.items():
        if not (isinstance(k, str) and k.isascii() and k.isdigit() and len(k) < 10):
            raise UserError(f"{where}: {key} has key {_show(k)}; scope ids are integers")
        if not value_ok(x):
            raise UserError(f"{where}: {key}[{k}] = {_show(x)} must be {want}")
        out[int(k)] = x
    return out


def launch_meta(d: Any, where: str) -> dict[str, Any]:
    """Keyword arguments for ``decode.LaunchMeta``, every field checked (types and bounds).

    A zero, negative or overflowing grid, an impossible warp count or buffer size, or a buffer
    file name that leaves the directory is a UserError, so decoding never sees them.
    """
    from .decode import RAW_FORMAT

    fix = "the file is damaged; rewrite it with `proton-inject run` (or decode.save_raw)"
    if not isinstance(d, dict):
        raise UserError(f"{where}: expected a JSON object, not {_tname(d)}; {fix}")
    if d.get("format", RAW_FORMAT) != RAW_FORMAT:
        raise UserError(f"{where}: not a proton-inject raw launch (format={_show(d.get('format'))})")

    def need(key: str) -> Any:
        if key not in d:
            raise UserError(f"{where}: missing field {key!r}; {fix}")
        return d[key]

    def bad(key: str, want: str) -> UserError:
        return UserError(f"{where}: {key} = {_show(d[key])} must be {want}; {fix}")

    def int_field(key: str, lo: int, hi: int, default: Any = ...) -> Any:
        if default is not ... and d.get(key) is None:
            return default
        v = need(key)
        if not is_int(v) or not lo <= v <= hi:
            raise bad(key, f"an integer from {lo} to {hi}")
        return v

    def str_field(key: str, default: Any = ...) -> Any:
        if default is not ... and d.get(key) is None:
            return default
        v = need(key)
        if not isinstance(v, str):
            raise bad(key, "a string")
        return v

    kernel = str_field("kernel")
    grid = need("grid")
    if not (isinstance(grid, list) and 1 <= len(grid) <= 3 and all(map(is_int, grid))):
        raise bad("grid", "a list of 1 to 3 integers")
    grid = (list(grid) + [1, 1, 1])[:3]
    for g, hi, axis in zip(grid, MAX_GRID, "xyz", strict=True):
        if not 1 <= g <= hi:
            raise UserError(f"{where}: grid {axis} = {g} is outside 1..{hi}: no CUDA launch has "
                            f"that grid; {fix}")
    num_warps = int_field("num_warps", 1, MAX_WARPS)
    sampled = d.get("sampled_warps")
    if sampled is not None:
        if not (isinstance(sampled, list) and sampled and
                all(is_int(w) and 0 <= w < num_warps for w in sampled)):
            raise bad("sampled_warps", f"null or a non-empty list of warp ids below "
                                       f"num_warps={num_warps}")
    clock_bits = int_field("clock_bits", 32, 64, 64)
    if clock_bits not in (32, 64):
        raise bad("clock_bits", "32 or 64")
    buffer_type = str_field("buffer_type", "shared")
    if buffer_type not in ("shared", "global", "direct"):
        raise bad("buffer_type", "'shared', 'global' or 'direct'")
    config = d.get("config")
    if config is not None and not isinstance(config, str):
        raise bad("config", "null or a string")
    device = d.get("device")
    if device is not None and not isinstance(device, str):
        raise bad("device", "null or a string")
    mhz = d.get("sm_clock_mhz")
    if mhz is not None and mhz != 0:
        if not (isinstance(mhz, int | float) and not isinstance(mhz, bool) and
                math.isfinite(mhz) and mhz > 0):
            raise bad("sm_clock_mhz", "null or a positive number")
    cost = d.get("record_cost_cycles")
    if cost is not None and not (isinstance(cost, int | float) and not isinstance(cost, bool) and
                                 math.isfinite(cost) and 0 <= cost < 10_000):
        raise bad("record_cost_cycles", "null or a number of cycles from 0 to 10000")
    bracket = d.get("clock_bracket")
    if bracket is not None and not _clock_bracket_ok(bracket):
        raise bad("clock_bracket", 'null, {"missing": "why"} or {"before": side, "after": side} '
                                   "as proton-inject run writes it")
    table, loops = d.get("direct_records"), d.get("direct_loops")
    if buffer_type == "direct" or table is not None:
        need("direct_records")
        if not (isinstance(loops, list | None) and all(
                isinstance(x, list) and len(x) in (2, 3) and all(is_int(v) for v in x)
                and 1 <= x[0] <= 1 << 20 and 1 <= x[1] <= 1024
                and (len(x) == 2 or 1 <= x[2] < 2**31) for x in loops or [])):
            raise bad("direct_loops", "absent, or a list of [iterations kept, words per "
                                      "iteration(, every Nth iteration)], one per recording loop")
        if not (isinstance(table, list) and table and len(table) <= 512 and all(
                isinstance(r, list) and len(r) in (2, 3) and all(is_int(x) for x in r)
                and 0 <= r[0] < 256 and r[1] in (0, 1)
                and (len(r) == 2 or 0 <= r[2] < len(loops or [])) for r in table)):
            raise bad("direct_records", "a list of [scope id, 0 start | 1 end(, loop index)], "
                                        "one per record op, with buffer_type 'direct'")
    binary = d.get("bin")
    if binary is not None and not (isinstance(binary, str) and _SAFE_NAME.fullmatch(binary) and
                                   binary.endswith((".bin", ".bin.gz"))):
        raise bad("bin", "the name of a .bin or .bin.gz file in the same directory")
    return dict(
        kernel=kernel, grid=tuple(grid), num_warps=num_warps,
        bytes_per_cta=int_field("bytes_per_cta", 4, MAX_BYTES_PER_CTA),
        scopes=_id_map(d, "scopes", where, lambda x: isinstance(x, str), "a name"),
        scope_parents=_id_map(d, "scope_parents", where, is_int, "an integer scope id"),
        scope_locs=_id_map(d, "scope_locs", where, lambda x: isinstance(x, str), "a string"),
        hash=str_field("hash", ""),
        buffer_size=int_field("buffer_size", 0, MAX_BYTES_PER_CTA, None),
        clock_bits=clock_bits, granularity=str_field("granularity", "warp"),
        sampled_warps=None if sampled is None else list(sampled), buffer_type=buffer_type,
        sample_ctas=int_field("sample_ctas", 1, 2**31 - 1, 1),
        config=config, launch=int_field("launch", 0, 10**12, 0), device=device,
        sm_clock_mhz=float(mhz) if mhz else None, rank=int_field("rank", 0, 1 << 20, None),
        record_cost_cycles=None if cost is None else float(cost), clock_bracket=bracket,
        direct_records=None if table is None else [list(r) for r in table],
        direct_loops=None if not loops else [list(x) for x in loops],
        timer_ref_ns=int_field("timer_ref_ns", 0, 2**63 - 1, None),
    )  # fmt: skip


def _clock_bracket_ok(b: Any) -> bool:
    """A launch's clock bracket: a reason it is missing, or up to two measured sides."""
    if not isinstance(b, dict):
        return False
    if "missing" in b:
        return set(b) == {"missing"} and isinstance(b["missing"], str)
    if not set(b) <= {"before", "after"}:
        return False

    def num(v: Any, lo: float) -> bool:
        return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v >= lo

    for side in b.values():
        if side is None:
            continue
        if not (isinstance(side, dict) and num(side.get("mhz"), 1e-9) and
                num(side.get("sem_mhz"), 0) and all(is_int(side.get(k)) and side[k] >= 0
                                                    for k in ("ctas", "sms", "spin_ns", "t0", "t1"))):
            return False
    return True


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
