"""OUT/auto.json (``profile --auto``) and OUT/device-kernels.json (every kernel's GPU time in
its run): their keys, writers, readers and checks.

``analyze/hot_kernels.py`` fills it (the ranking of a run's kernels and the top ones
split over regions and lines) and prints it; ``report OUT`` reads it back. The types below name
every key once, and the reader checks a file against them, key by key.
"""

from __future__ import annotations

import json
import os
import types
from pathlib import Path
from typing import Any, TypedDict, get_args, get_origin, get_type_hints, is_typeddict

from proton_inject.errors import UserError
from proton_inject.formats.files import write_atomic
from proton_inject.formats.schema import is_int, is_number, read_json, type_name

AUTO_FORMAT = "proton-inject-auto"
AUTO_VERSION = 2  # 2: one run; a kernel's share is of every kernel's GPU time where it was timed
AUTO_FILE = "auto.json"  # OUT/auto.json: an AutoReport
DEVICE_FORMAT = "proton-inject-device-kernels"
DEVICE_VERSION = 1
DEVICE_FILE = "device-kernels.json"  # OUT/device-kernels.json: a DeviceKernels


class KernelShare(TypedDict):
    """One kernel of the run, ranked."""

    kernel: str
    launches_seen: int  # launches that ran (run.json's launch_counts; kept ones where not counted)
    launches_kept: int  # launches decoded
    ns_per_launch: float | None  # mean GPU time of a launch (None: none decoded or timed)
    est_gpu_ns: float | None  # the device's kernel time where timed (measured), else
    # ns_per_launch x launches_seen from the kept launches
    share: float | None  # est_gpu_ns / the sum over every kernel with a time
    top: bool  # picked: opened up over its regions and lines
    instrumented: bool  # the run instrumented it (others, cuBLAS say, are timed, never opened up)
    measured: bool  # est_gpu_ns is the device's (torch.profiler's) time of every launch


class DeviceKernel(TypedDict):
    """One kernel name's GPU time over the run, every launch, whoever launched it."""

    kernel: str
    ns: float  # summed kernel durations
    launches: int


class DeviceKernels(TypedDict):
    """OUT/device-kernels.json: every kernel's GPU time, as torch.profiler's CUDA activity
    (CUPTI) saw it, the tool's own kernels, copies and memsets left out."""

    format: str  # "proton-inject-device-kernels"
    version: int
    kernels: list[DeviceKernel]  # the longest first
    notes: list[str]  # what the times leave out (a profiler of the program's own took over, ...)


class HotRegion(TypedDict):
    """One region of a picked kernel, from the detailed run."""

    scope: int
    name: str
    kind: str | None
    parent: int | None
    depth: int  # regions it is nested in (0: outermost)
    loc: str | None
    count: int  # instances
    ns_total: float
    ns_median: float
    share_of_kernel: float | None  # ns_total / the kernel region's ns_total
    lines: dict[str, list[list[int]]]  # file: [first, last] line spans where it is the innermost region


class HotKernel(TypedDict):
    """A picked kernel (and config) opened up: its regions, and what they leave unattributed."""

    kernel: str
    config: str | None
    launches: int  # launches kept in the detailed run
    kernel_ns: float | None  # the kernel region's time (None: no kernel region)
    regions: list[HotRegion]  # depth first, the longest first among siblings
    unattributed_ns: float | None  # kernel_ns minus its top-level child regions (0: it has none)
    unattributed_share: float | None
    source_note: str | None  # why source lines are missing or approximate


class AutoReport(TypedDict):
    format: str  # "proton-inject-auto"
    version: int
    run: str  # the profile directory (its launches, device-kernels.json)
    share_wanted: float  # --auto-share
    top_max: int  # --auto-top
    kernels: list[KernelShare]  # the longest first
    hot: list[HotKernel]
    exit_code: int  # the program's
    notes: list[str]


def write_auto(out: str | os.PathLike, doc: AutoReport) -> Path:
    """Write ``doc`` as OUT/auto.json (atomically)."""
    return write_atomic(Path(out) / AUTO_FILE, json.dumps(doc, indent=1) + "\n")


def write_device_kernels(out: str | os.PathLike, kernels: list[DeviceKernel], notes: list[str]) -> Path:
    """Write a run's device kernel times (atomically)."""
    doc = DeviceKernels(format=DEVICE_FORMAT, version=DEVICE_VERSION,
                        kernels=sorted(kernels, key=lambda k: (-k["ns"], k["kernel"])), notes=notes)
    return write_atomic(Path(out) / DEVICE_FILE, json.dumps(doc, indent=1) + "\n")


def read_device_kernels(path: str | os.PathLike) -> DeviceKernels:
    """A device-kernels.json read back and checked; a damaged or foreign file is a UserError."""
    return _read_checked(path, DeviceKernels, DEVICE_FORMAT, DEVICE_VERSION, "device kernel times",
                         "run `proton-inject profile --auto` again")


def read_auto(path: str | os.PathLike) -> AutoReport:
    """An auto.json read back and checked against ``AutoReport``; a damaged or foreign file
    is a UserError naming it and what is wrong."""
    return _read_checked(path, AutoReport, AUTO_FORMAT, AUTO_VERSION, "`profile --auto`",
                         "write it again with `proton-inject profile --auto`")


def _read_checked(path: str | os.PathLike, tp: Any, fmt: str, version: int, what: str, fix: str) -> Any:
    """The JSON file at ``path``, checked to be ``fmt`` at ``version`` and, key by key, a ``tp``
    (``what``: the kind of file, in messages)."""
    doc = read_json(path, what, fix)
    if not isinstance(doc, dict) or doc.get("format") != fmt:
        raise UserError(f"{path}: not a {what} file (its format is not {fmt!r}); {fix}")
    if doc.get("version") != version:
        raise UserError(f"{path}: version {doc.get('version')!r}; this proton-inject reads version "
                        f"{version}; {fix}")
    wrong = _wrong(doc, tp, "")
    if wrong:
        raise UserError(f"{path}: {wrong}; {fix}")
    return doc


def _kind(v: Any) -> str:
    return "null" if v is None else type_name(v)


_SIMPLE = {str: ("a string", lambda v: isinstance(v, str)), int: ("an integer", is_int),
           float: ("a number", is_number), bool: ("a boolean", lambda v: isinstance(v, bool)),
           type(None): ("null", lambda v: v is None)}


def _wrong(v: Any, tp: Any, where: str) -> str | None:
    """What is wrong with ``v`` as a value of ``tp`` (a TypedDict, list, dict, union or one of
    ``_SIMPLE``), at the key path ``where``; None: nothing."""
    at = where.lstrip(".") or "the file"
    if is_typeddict(tp):
        if not isinstance(v, dict):
            return f"{at} is {_kind(v)}, not an object"
        missing = sorted(tp.__required_keys__ - v.keys())
        if missing:
            return f"{where.lstrip('.') + '.' if where else ''}{missing[0]} is missing"
        hints = get_type_hints(tp)
        return next((w for k, t in hints.items() if k in v and (w := _wrong(v[k], t, f"{where}.{k}"))), None)
    origin, args = get_origin(tp), get_args(tp)
    if origin is list:
        if not isinstance(v, list):
            return f"{at} is {_kind(v)}, not an array"
        return next((w for i, x in enumerate(v) if (w := _wrong(x, args[0], f"{where}[{i}]"))), None)
    if origin is dict:
        if not isinstance(v, dict):
            return f"{at} is {_kind(v)}, not an object"
        return next((w for k, x in v.items() if (w := _wrong(x, args[1], f"{where}.{k}"))), None)
    options = args if origin is types.UnionType else (tp,)
    if any(_SIMPLE[t][1](v) for t in options):
        return None
    return f"{at} is {_kind(v)}, not {' or '.join(_SIMPLE[t][0] for t in options)}"
