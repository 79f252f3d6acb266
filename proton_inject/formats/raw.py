"""Raw launches: ``<prefix>.bin[.gz]`` (the profile buffer as the GPU left it) and
``<prefix>.json`` (``LaunchMeta``, checked field by field before any decoding).
"""

from __future__ import annotations

import gzip
import json
import math
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np

from proton_inject.errors import UserError
from proton_inject.formats.files import write_atomic
from proton_inject.formats.schema import (
    MAX_BYTES_PER_CTA,
    MAX_GRID,
    MAX_META_BYTES,
    MAX_RAW_BYTES,
    MAX_WARPS,
    SAFE_NAME,
    is_int,
    not_a_file,
    read_bytes,
    read_gzip,
    read_head,
    read_json,
    shown,
    type_name,
)

RAW_FORMAT = "proton-inject-raw"


RAW_VERSION = 1


class BufferType(StrEnum):
    """Where a launch's records lived during the run: Proton's shared-memory buffer (copied
    out at the end), its global-memory buffer, or our direct lowering's block per CTA."""

    SHARED = "shared"
    GLOBAL = "global"
    DIRECT = "direct"


def launch_label(launch: int, rank: int | None, kernel: str) -> str:
    """A launch's name in file names and titles: ``00003-add_kernel`` (``rank1-00003-add_kernel``
    for one rank of a multi-process job)."""
    return f"{'' if rank is None else f'rank{rank}-'}{launch:05d}-{kernel}"


def refuse_same_labels(paths: Sequence[str], launches: Sequence[tuple[int, int | None, str] | None],
                       trace_dir: Any, plot: Any) -> None:
    """Launches (number, rank, kernel) of two runs with one label would write one trace file
    (``trace_dir``, one a launch) and one picture (``plot``): refused before any is written."""
    if trace_dir is None and plot is None:
        return
    seen: dict[str, str] = {}
    for p, launch in zip(paths, launches, strict=True):
        label = None if launch is None else launch_label(*launch)
        first = seen.setdefault(label, p) if label is not None else p
        if first is not p:
            opt, out, what = ("--trace", trace_dir, "traces") if trace_dir is not None else ("--plot", plot, "pictures")
            raise UserError(f"{opt} {out}: {first} and {p} are both launch {label}; their {what} "
                            "would overwrite each other: report the runs one at a time"
                            + (", or pass --merge" if opt == "--trace" else ""))


@dataclass
class LaunchMeta:
    """What the decoder must know about one instrumented launch besides its raw bytes."""

    kernel: str
    grid: tuple[int, int, int]
    num_warps: int
    bytes_per_cta: int
    scopes: dict[int, str]
    scope_parents: dict[int, int] = field(default_factory=dict)
    scope_locs: dict[int, str] = field(default_factory=dict)
    hash: str = ""
    buffer_size: int | None = None
    clock_bits: int = 64
    granularity: str = "warp"
    sampled_warps: list[int] | None = None
    sample_ctas: int = 1  # records were written in every Nth CTA only (insert --sample-ctas)
    buffer_type: BufferType = BufferType.SHARED  # where records lived during the run
    config: str | None = None
    launch: int = 0
    device: str | None = None
    # The device's max SM clock (driver's CU_DEVICE_ATTRIBUTE_CLOCK_RATE), the fallback rate
    # when the timer reads of a launch cannot determine the clock.
    sm_clock_mhz: float | None = None
    rank: int | None = None  # torchrun's RANK of the process that launched it
    # Cycles one record costs on this device and options (``calibrate``), when known.
    record_cost_cycles: float | None = None
    # The clock measured right before and after the launch (``bracket.py``): {"before":
    # summary | null, "after": summary | null}, or {"missing": why}; None in older files.
    clock_bracket: dict[str, Any] | None = None
    # buffer_type "direct": [scope id, 1 if end(, loop)] of each record op (``direct.record_table``)
    direct_records: list[list[int]] | None = None
    # buffer_type "direct": [iterations kept, words per iteration(, every Nth iteration)] of
    # each recording loop
    direct_loops: list[list[int]] | None = None
    # buffer_type "direct": a full globaltimer value (ns) read near the launch; its blocks keep
    # bits 0-55 of their timer read and take bits 56-63 (2.3 years) from it
    timer_ref_ns: int | None = None
    # Each scope's region kind (``region_kinds.REGION_KINDS``, from the manifest's origin);
    # None in files written before launches carried it.
    scope_kinds: dict[int, str] | None = None
    # The program's own frame that made the launch ("file:line (function)"): the first frame
    # outside the standard library, installed packages and proton-inject; None when unknown.
    launched_from: str | None = None
    # For a kernel Inductor generated, what its own metadata says of the model: {"lines": the
    # model's lines ("file:line (function)"), "nodes": FX source nodes, "aten": ATen ops}
    # (``dump/inductor_origin.py``); None for other kernels and in older files.
    model_source: dict[str, list[str]] | None = None

    @property
    def sample_iterations(self) -> int:
        """N when loops lowered directly kept every Nth iteration only (--sample-iterations)."""
        return max([row[2] for row in self.direct_loops or [] if len(row) > 2] or [1])

    @property
    def loop_scopes(self) -> list[list[int]]:
        """The scopes recorded inside each loop lowered directly (``direct_records``' third
        column), one list per loop: each runs once per kept iteration."""
        out: dict[int, list[int]] = {}
        for row in self.direct_records or []:
            if len(row) > 2 and row[0] not in out.setdefault(row[2], []):
                out[row[2]].append(row[0])
        return [out[k] for k in sorted(out)]

    @property
    def num_ctas(self) -> int:
        """Number of CTAs in the grid."""
        return math.prod(self.grid)  # Python ints: a large grid must not wrap around

    @property
    def segments(self) -> list[int]:
        """Warp ids that own a data segment, in segment order."""
        if self.sampled_warps:
            return sorted(set(int(w) for w in self.sampled_warps))
        return list(range(self.num_warps))

    @property
    def label(self) -> str:
        """Launch label used in file names and titles: ``00003-add_kernel``
        (``rank1-00003-add_kernel`` for one rank of a multi-process job)."""
        return launch_label(self.launch, self.rank, self.kernel)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the ``.json`` half of a raw launch)."""
        return {
            "format": RAW_FORMAT,
            "version": RAW_VERSION,
            "kernel": self.kernel,
            "hash": self.hash,
            "grid": list(self.grid),
            "num_warps": self.num_warps,
            "scopes": {str(k): v for k, v in sorted(self.scopes.items())},
            "scope_parents": {str(k): v for k, v in sorted(self.scope_parents.items())},
            "scope_locs": {str(k): v for k, v in sorted(self.scope_locs.items())},
            "bytes_per_cta": self.bytes_per_cta,
            "buffer_size": self.buffer_size,
            "clock_bits": self.clock_bits,
            "granularity": self.granularity,
            "sampled_warps": self.sampled_warps,
            "sample_ctas": self.sample_ctas,
            "buffer_type": self.buffer_type,
            "config": self.config,
            "launch": self.launch,
            "device": self.device,
            "sm_clock_mhz": self.sm_clock_mhz,
            "rank": self.rank,
            "record_cost_cycles": self.record_cost_cycles,
            "clock_bracket": self.clock_bracket,
            **({"direct_records": self.direct_records} if self.direct_records else {}),
            **({"direct_loops": self.direct_loops} if self.direct_loops else {}),
            **({"timer_ref_ns": self.timer_ref_ns} if self.timer_ref_ns is not None else {}),
            **({"scope_kinds": {str(k): v for k, v in sorted(self.scope_kinds.items())}}
               if self.scope_kinds is not None else {}),
            **({"launched_from": self.launched_from} if self.launched_from is not None else {}),
            **({"model_source": self.model_source} if self.model_source is not None else {}),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "launch metadata") -> LaunchMeta:
        """Inverse of ``to_dict``; a missing or malformed field is a UserError naming it."""
        return cls(**launch_meta(d, where))


def _as_bytes(buffer: Any) -> np.ndarray:
    """View a buffer (bytes, numpy array, CPU torch tensor) as flat uint8 without copying."""
    if hasattr(buffer, "detach") and hasattr(buffer, "cpu"):  # torch tensor
        buffer = buffer.detach().cpu().contiguous().numpy()
    arr = np.asarray(buffer) if isinstance(buffer, np.ndarray) else np.frombuffer(buffer, np.uint8)
    return arr.reshape(-1).view(np.uint8)


def raw_prefix(out_dir: str | os.PathLike, meta: LaunchMeta) -> Path:
    """Where ``save_raw`` should put a launch inside a ``raw/`` directory."""
    return Path(out_dir) / raw_name(meta.kernel, meta.launch, meta.rank)


def raw_name(kernel: str, launch: int, rank: int | None) -> str:
    """A launch's file name in ``raw/``, without its suffix (``raw_prefix``'s last part)."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in kernel)
    head = "" if rank is None else f"rank{rank}-"
    return f"{head}{launch:05d}-{safe}"


def save_raw(path_prefix: str | os.PathLike, buffer: Any, meta: LaunchMeta,
             gz: bool = False) -> tuple[Path, Path]:
    """Write ``<prefix>.bin`` (raw bytes; ``.bin.gz`` if ``gz``) and ``<prefix>.json`` (meta);
    returns both paths."""
    prefix = Path(path_prefix)
    data = _as_bytes(buffer).tobytes()
    bin_path = prefix.with_name(prefix.name + (".bin.gz" if gz else ".bin"))
    json_path = prefix.with_name(prefix.name + ".json")
    if gz:  # level 1: buffers are mostly zeros and record words; -6 buys little, costs 4x
        data = gzip.compress(data, compresslevel=1, mtime=0)
    write_atomic(bin_path, data)
    d = meta.to_dict()
    d["bin"] = bin_path.name
    write_atomic(json_path, json.dumps(d, indent=1) + "\n")
    return bin_path, json_path


def _json_path(path: str | os.PathLike) -> tuple[Path, str]:
    """A raw launch's ``.json`` and its name prefix, from its prefix, ``.json``, ``.bin`` or
    ``.bin.gz`` path."""
    p = Path(path)
    name = p.name
    for suffix in (".bin.gz", ".bin", ".json"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return p.with_name(name + ".json"), name


def _read_meta(json_path: Path) -> tuple[dict[str, Any], LaunchMeta]:
    d = read_json(json_path, "launch metadata", "rewrite it with `proton-inject run`",
                  MAX_META_BYTES)
    return d, LaunchMeta.from_dict(d, str(json_path))


def read_launch_meta(path: str | os.PathLike) -> LaunchMeta:
    """The metadata of one raw launch (its ``.json``; a ``.bin`` path names it too)."""
    return _read_meta(_json_path(path)[0])[1]


def load_raw(path: str | os.PathLike) -> tuple[np.ndarray, LaunchMeta]:
    """Read one raw launch given its prefix, ``.json``, ``.bin`` or ``.bin.gz`` path."""
    p = Path(path)
    json_path, name = _json_path(p)
    if not os.path.lexists(json_path):
        raise UserError(f"{json_path}: launch metadata not found (expected next to the .bin file)")
    d, meta = _read_meta(json_path)
    candidates = [p.with_name(d["bin"])] if d.get("bin") else []
    candidates += [p.with_name(name + ".bin"), p.with_name(name + ".bin.gz")]
    # The grid bounds the bytes worth reading: a huge or gzip-bomb file costs no more memory.
    # A grid asking for more than MAX_RAW_BYTES reads at most that, and a file holding more is
    # refused rather than cut short.
    want = meta.num_ctas * meta.bytes_per_cta + meta.bytes_per_cta
    limit, cut = min(want, MAX_RAW_BYTES), want <= MAX_RAW_BYTES
    big = ("more than proton-inject decodes of one launch: profile fewer warps or CTAs "
           "(--warps, --sample-ctas)")
    for c in candidates:
        if os.path.lexists(c):
            if c.name.endswith(".gz"):
                raw = read_gzip(c, "raw buffer", limit, "copy it again from the run's raw/ "
                                "directory", truncate=cut, huge_fix=big)
            else:
                raw = read_bytes(c, "raw buffer", limit, truncate=cut, huge_fix=big)
            return np.frombuffer(raw, np.uint8), meta
    raise UserError(f"{json_path}: raw buffer {name}.bin not found next to it")


def is_raw_json(path: str | os.PathLike) -> bool:
    """Whether ``path`` is the ``.json`` half of a raw launch (reads only its first bytes)."""
    return f'"format": "{RAW_FORMAT}"'.encode() in read_head(path, 512)


_LAUNCH_NAME = re.compile(r"(?:rank\d+-)?(\d{5,})-.+\.json")  # as LaunchMeta.label writes it


def find_raw(path: str | os.PathLike) -> list[Path]:
    """The raw launch ``.json`` files in a directory (or the file itself), in launch order.

    A file named as ``LaunchMeta.label`` names it is ordered by the launch number in its name
    (its metadata is read when decoded, not here: ~3x faster over 10^4 launches), and taken
    as a launch without reading its head when its buffer (``.bin`` or ``.bin.gz``) lies
    beside it (10^4 opens: 0.5 s of a report's serial start)."""
    p = Path(path)
    if not p.is_dir():
        return [p]
    with os.scandir(p) as it:
        everything = list(it)
    names = {e.name for e in everything}
    entries = sorted((e for e in everything if e.name.endswith(".json")), key=lambda e: e.name)
    found = []
    for e in entries:
        named = _LAUNCH_NAME.fullmatch(e.name)
        try:
            regular, folder = e.is_file(), e.is_dir()
        except OSError:  # a link loop
            regular = folder = False
        if folder:
            continue
        if not regular:  # a FIFO, a device, a link loop: never opened
            if not named:
                raise not_a_file(p / e.name, "launch metadata", f"move it out of {p}")
            # Named as a launch: listed as a damaged one, so that report leaves it out with
            # a note as it does any other, and decodes the rest.
            found.append((int(named.group(1)), e.name))
            continue
        stem = e.name[:-5]
        if named and (stem + ".bin.gz" in names or stem + ".bin" in names):
            found.append((int(named.group(1)), e.name))
            continue
        if not is_raw_json(e.path):  # traces beside them can be huge: never parse those here
            continue
        if named:
            found.append((int(named.group(1)), e.name))
            continue
        try:
            launch = read_json(e.path, "launch metadata", "", MAX_META_BYTES).get("launch", 0)
        except (UserError, AttributeError):
            launch = 0  # load_raw reports what is wrong with it
        found.append((launch if is_int(launch) else 0, e.name))
    return [p / name for _, name in sorted(found)]


_LOC = re.compile(r"(.+):(\d+(?:-\d+)?)")


def unify_locs(locs: dict[Any, str]) -> dict[Any, str]:
    """A kernel's region locations with one name per source file. Loops and ops are located by
    the file's name alone (``matmul.py:36``, as their region names say it), marks and line
    ranges by the path the IR gives (``examples/matmul.py:40``): a bare name that ends exactly
    one of those paths takes that path, so the source view, diff and traces see one file."""
    paths: dict[str, set[str]] = {}
    for loc in locs.values():
        m = _LOC.fullmatch(loc) if isinstance(loc, str) else None
        if m and "/" in m.group(1):
            paths.setdefault(m.group(1).rsplit("/", 1)[1], set()).add(m.group(1))
    out = {}
    for k, loc in locs.items():
        m = _LOC.fullmatch(loc) if isinstance(loc, str) else None
        found = paths.get(m.group(1), ()) if m and "/" not in m.group(1) else ()
        out[k] = f"{next(iter(found))}:{m.group(2)}" if len(found) == 1 else loc
    return out


def _id_map(d: dict, key: str, where: str, value_ok, want: str, optional: bool = False) -> Any:
    """``d[key]``, an object of scope id -> value, checked; when absent {} (None if ``optional``)."""
    v = d.get(key)
    if v is None:
        return None if optional else {}
    if not isinstance(v, dict):
        raise UserError(f"{where}: {key} must be an object of scope id -> {want}, "
                        f"not {type_name(v)}")
    out = {}
    for k, x in v.items():
        if not (isinstance(k, str) and k.isascii() and k.isdigit() and len(k) < 10):
            raise UserError(f"{where}: {key} has key {shown(k)}; scope ids are integers")
        if int(k) > MAX_SCOPE_ID:
            raise UserError(f"{where}: {key} has scope id {int(k)}; scope ids are 0 to "
                            f"{MAX_SCOPE_ID} (a record keeps 8 bits of it)")
        if not value_ok(x):
            raise UserError(f"{where}: {key}[{k}] = {shown(x)} must be {want}")
        if want.endswith("scope id") and not 0 <= x <= MAX_SCOPE_ID:
            raise UserError(f"{where}: {key}[{k}] = {x} is not a scope id (0 to {MAX_SCOPE_ID})")
        out[int(k)] = x
    return out


MAX_SCOPE_ID = 255  # a record's tag keeps 8 bits of scope id (decode.py)


def launch_meta(d: Any, where: str) -> dict[str, Any]:
    """Keyword arguments for ``decode.LaunchMeta``, every field checked (types and bounds).

    A zero, negative or overflowing grid, an impossible warp count or buffer size, or a buffer
    file name that leaves the directory is a UserError, so decoding never sees them.
    """
    fix = "the file is damaged; rewrite it with `proton-inject run` (or decode.save_raw)"
    if not isinstance(d, dict):
        raise UserError(f"{where}: expected a JSON object, not {type_name(d)}; {fix}")
    if d.get("format", RAW_FORMAT) != RAW_FORMAT:
        raise UserError(f"{where}: not a proton-inject raw launch (format={shown(d.get('format'))})")

    def need(key: str) -> Any:
        if key not in d:
            raise UserError(f"{where}: missing field {key!r}; {fix}")
        return d[key]

    def bad(key: str, want: str) -> UserError:
        return UserError(f"{where}: {key} = {shown(d[key])} must be {want}; {fix}")

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
    grid = _grid(need("grid"), bad, where, fix)
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
    if buffer_type not in tuple(BufferType):
        raise bad("buffer_type", "'shared', 'global' or 'direct'")
    _check_optional(d, bad)
    _check_direct(d, buffer_type, need, bad)
    config, device, mhz = d.get("config"), d.get("device"), d.get("sm_clock_mhz")
    cost, bracket = d.get("record_cost_cycles"), d.get("clock_bracket")
    table, loops = d.get("direct_records"), d.get("direct_loops")
    binary = d.get("bin")
    if binary is not None and not (isinstance(binary, str) and SAFE_NAME.fullmatch(binary) and
                                   binary.endswith((".bin", ".bin.gz"))):
        raise bad("bin", "the name of a .bin or .bin.gz file in the same directory")
    return dict(
        kernel=kernel, grid=tuple(grid), num_warps=num_warps,
        bytes_per_cta=int_field("bytes_per_cta", 4, MAX_BYTES_PER_CTA),
        scopes=_id_map(d, "scopes", where, lambda x: isinstance(x, str), "a name"),
        scope_parents=_id_map(d, "scope_parents", where, is_int, "an integer scope id"),
        scope_locs=unify_locs(_id_map(d, "scope_locs", where, lambda x: isinstance(x, str), "a string")),
        hash=str_field("hash", ""),
        buffer_size=int_field("buffer_size", 0, MAX_BYTES_PER_CTA, None),
        clock_bits=clock_bits, granularity=str_field("granularity", "warp"),
        sampled_warps=None if sampled is None else list(sampled), buffer_type=BufferType(buffer_type),
        sample_ctas=int_field("sample_ctas", 1, 2**31 - 1, 1),
        config=config, launch=int_field("launch", 0, 10**12, 0), device=device,
        sm_clock_mhz=float(mhz) if mhz else None, rank=int_field("rank", 0, 1 << 20, None),
        record_cost_cycles=None if cost is None else float(cost), clock_bracket=bracket,
        direct_records=None if table is None else [list(r) for r in table],
        direct_loops=None if not loops else [list(x) for x in loops],
        timer_ref_ns=int_field("timer_ref_ns", 0, 2**63 - 1, None),
        scope_kinds=_id_map(d, "scope_kinds", where, lambda x: isinstance(x, str), "a region kind", True),
        launched_from=d.get("launched_from"), model_source=d.get("model_source"),
    )  # fmt: skip


def _grid(grid: Any, bad: Callable[[str, str], UserError], where: str, fix: str) -> list[int]:
    """The grid as three sizes, each within what a CUDA launch can have."""
    if not (isinstance(grid, list) and 1 <= len(grid) <= 3 and all(map(is_int, grid))):
        raise bad("grid", "a list of 1 to 3 integers")
    grid = (list(grid) + [1, 1, 1])[:3]
    for g, hi, axis in zip(grid, MAX_GRID, "xyz", strict=True):
        if not 1 <= g <= hi:
            raise UserError(f"{where}: grid {axis} = {g} is outside 1..{hi}: no CUDA launch has "
                            f"that grid; {fix}")
    return grid


def _check_optional(d: dict[str, Any], bad: Callable[[str, str], UserError]) -> None:
    """The fields a launch may leave null: config, device, SM clock, record cost, clock bracket."""
    config = d.get("config")
    if config is not None and not isinstance(config, str):
        raise bad("config", "null or a string")
    device = d.get("device")
    if device is not None and not isinstance(device, str):
        raise bad("device", "null or a string")
    origin = d.get("launched_from")
    if origin is not None and not (isinstance(origin, str) and len(origin) <= 4096):
        raise bad("launched_from", "absent, or a string of at most 4,096 characters")
    source = d.get("model_source")
    if source is not None and not (isinstance(source, dict) and set(source) <= {"lines", "nodes", "aten"}
                                   and all(isinstance(v, list) and len(v) <= 256 and all(
                                       isinstance(x, str) and len(x) <= 4096 for x in v) for v in source.values())):
        raise bad("model_source", 'absent, or {"lines": [...], "nodes": [...], "aten": [...]}: lists '
                                  "of at most 256 strings")
    mhz = d.get("sm_clock_mhz")
    if mhz is not None and mhz != 0:
        if not (isinstance(mhz, int | float) and not isinstance(mhz, bool) and
                math.isfinite(mhz) and 0 < mhz <= MAX_CLOCK_MHZ):
            raise bad("sm_clock_mhz", f"null or a positive number of MHz up to {MAX_CLOCK_MHZ}")
    cost = d.get("record_cost_cycles")
    if cost is not None and not (isinstance(cost, int | float) and not isinstance(cost, bool) and
                                 math.isfinite(cost) and 0 <= cost < 10_000):
        raise bad("record_cost_cycles", "null or a number of cycles from 0 to 10000")
    bracket = d.get("clock_bracket")
    if bracket is not None and not _clock_bracket_ok(bracket):
        raise bad("clock_bracket", 'null, {"missing": "why"} or {"before": side, "after": side} '
                                   "as proton-inject run writes it")


def _check_direct(d: dict[str, Any], buffer_type: str, need: Callable[[str], Any],
                  bad: Callable[[str, str], UserError]) -> None:
    """The record and loop tables of a direct-lowering launch, absent from any other."""
    table, loops = d.get("direct_records"), d.get("direct_loops")
    for key, v in (("direct_records", table), ("direct_loops", loops)):
        if v is not None and buffer_type != BufferType.DIRECT:
            raise bad(key, f"absent: it belongs to a launch with buffer_type 'direct', not "
                           f"{buffer_type!r}")
    if buffer_type == BufferType.DIRECT or table is not None:
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


def _clock_bracket_ok(b: Any) -> bool:
    """A launch's clock bracket: a reason it is missing, or up to two measured sides."""
    if not isinstance(b, dict):
        return False
    if "missing" in b:
        return set(b) == {"missing"} and isinstance(b["missing"], str)
    if not set(b) <= {"before", "after"}:
        return False

    def num(v: Any, lo: float) -> bool:
        return (isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and
                lo <= v <= MAX_CLOCK_MHZ)

    for side in b.values():
        if side is None:
            continue
        if not (isinstance(side, dict) and num(side.get("mhz"), 1e-9) and
                num(side.get("sem_mhz"), 0) and all(is_int(side.get(k)) and 0 <= side[k] < 2**63
                                                    for k in ("ctas", "sms", "spin_ns", "t0", "t1"))):
            return False
    return True


# A clock rate above this is not a GPU's (the H100's max SM clock is 1,980 MHz): a larger one
# in metadata would overflow the cycle -> ns conversion.
MAX_CLOCK_MHZ = 10_000
