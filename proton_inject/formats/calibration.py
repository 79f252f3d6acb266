"""The user's cache of calibrated record costs (``proton-inject calibrate``): one entry per
device and record-changing lowering options.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from proton_inject.errors import UserError
from proton_inject.formats.files import user_cache_dir, waiting_lock, write_atomic
from proton_inject.formats.schema import read_json

CACHE_VERSION = 2  # 1: a region around one clock read, no plain reference


def cache_file() -> Path:
    """``$XDG_CACHE_HOME/proton-inject/record_cost.json`` (``~/.cache`` by default)."""
    return user_cache_dir() / "record_cost.json"


@contextmanager
def cache_lock() -> Iterator[None]:
    """Hold the cache's lock (waiting for it): processes meeting a new GPU at once, such as
    the ranks of one job, then calibrate it once, one after the other. OSError if the cache
    directory cannot be made."""
    with waiting_lock(user_cache_dir(make=True) / "record_cost.lock"):
        yield


def cache_key(device: str, clock_bits: int = 64, buffer_type: str = "shared",
              sched_stores: bool = False, selective: bool = False) -> str:
    """One entry per device and record-changing options (``selective``: only some warps record,
    which adds a warp-id test to every record)."""
    key = f"{device}|clock{clock_bits}|{buffer_type}|{'sched' if sched_stores else 'nosched'}"
    return key + "|selective" if selective else key


def _read(path: Path) -> dict[str, Any]:
    try:
        doc = read_json(path, "calibration cache", "", 2**20)
    except UserError:
        return {}  # no cache yet, or a damaged one: calibrate again
    if not isinstance(doc, dict) or doc.get("version") != CACHE_VERSION:
        return {}
    entries = doc.get("entries")
    return entries if isinstance(entries, dict) else {}


def lookup(device: str | None, clock_bits: int = 64, buffer_type: str = "shared",
           sched_stores: bool = False, selective: bool = False) -> float | None:
    """The cached cost of one record in cycles, or None when this device was not calibrated."""
    if not device:
        return None
    e = _read(cache_file()).get(cache_key(device, clock_bits, buffer_type, sched_stores, selective))
    v = e.get("cycles") if isinstance(e, dict) else None
    ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v >= 0
    return float(v) if ok else None


def store(device: str, cycles: float, clock_bits: int = 64, buffer_type: str = "shared",
          sched_stores: bool = False, detail: dict[str, Any] | None = None,
          selective: bool = False) -> Path:
    """Keep a measured cost in the cache (other entries stay)."""
    path = cache_file()
    entries = _read(path)
    entries[cache_key(device, clock_bits, buffer_type, sched_stores, selective)] = {
        "cycles": round(float(cycles), 2), **(detail or {})}
    try:
        user_cache_dir(make=True)
        return write_atomic(path, json.dumps({"version": CACHE_VERSION, "entries": entries},
                                             indent=1, sort_keys=True) + "\n")
    except OSError as e:
        raise UserError(f"{e.filename or path}: cannot keep the measured cost there "
                        f"({e.strerror}); set XDG_CACHE_HOME to a directory of yours") from None
