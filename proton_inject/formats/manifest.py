"""manifest.json of a dump or an instrumented tree: its name and version, the kernel entries
(read and checked), and the JSON the writers produce.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from proton_inject import __version__
from proton_inject.errors import UserError
from proton_inject.formats.region_kinds import kind_of
from proton_inject.formats.rules_file import PATTERNS, RANGES, RULES
from proton_inject.formats.schema import (
    MAX_SOURCE_BYTES,
    FileError,
    file_sha256,
    is_int,
    read_json,
    shown,
    type_name,
)

MANIFEST_NAME = "manifest.json"
MANIFEST_VERSION = 1


@dataclass
class RegionInfo:
    """One region as the manifest describes it."""

    name: str
    scope_id: int
    parent: str | None
    parent_id: int | None
    origin: str
    source: str | None
    ir_lines: tuple[int, int]  # first and last op of the region, in the input IR
    partition: str | None

    @property
    def kind(self) -> str:
        """The region's kind (``region_kinds.py``), from the rule that made it."""
        return kind_of(self.origin, self.name)


@dataclass
class KernelManifest:
    """One instrumented kernel's entry in an instrumented tree's manifest."""

    kernel: str
    file: str
    target: str | None
    regions: list[RegionInfo] = field(default_factory=list)
    dump: dict | None = None  # what `dump` recorded about this kernel, if known


def kernel_entry(k: KernelManifest) -> dict:
    """``k`` as its ``kernels`` entry in manifest.json."""
    d = asdict(k)
    for r in d["regions"]:
        r["ir_lines"] = list(r["ir_lines"])
    if d["dump"] is None:
        del d["dump"]
    return d


def rules_entry(rules: Any) -> dict:
    """The ``rules`` of manifest.json from ``instrument.rules.Rules`` (defaults applied)."""
    r, default = rules.with_defaults(), type(rules)()
    out = {}
    for key in RULES:
        v = getattr(r, key.field)
        if key.manifest == "never" or (key.manifest == "set" and v == getattr(default, key.field)):
            continue
        out[key.field] = ([f"{x.name}={x.file}:{x.start}-{x.end}" for x in v] if key.value == RANGES
                          else list(v) if key.value == PATTERNS else v)
    return out


def tree_manifest(rules: Any, kernels: list[dict], left_out: list[dict] | None = None) -> dict:
    """The manifest of an instrumented tree (``insert -o``, or ``profile``'s OUT/ir)."""
    return {"tool": f"proton-inject {__version__}", "format": 1, "rules": rules_entry(rules),
            "kernels": kernels, **({"left_out": left_out} if left_out is not None else {})}


def jsonable(v: Any) -> Any:
    """A value as JSON can hold it: scalars as they are, anything else as its str()."""
    if isinstance(v, bool | int | float | str) or v is None:
        return v
    return str(v)


def source_sha256(path: str, fix: str | None = None) -> str | None:
    """sha256 of a kernel's source file, so `insert` can tell when its marks may have moved;
    None when it is missing or unreadable. A FIFO, a device or a file over
    ``MAX_SOURCE_BYTES`` is a UserError (ending in ``fix``): hashing one would never end."""
    try:
        return file_sha256(path, "kernel source", MAX_SOURCE_BYTES, fix)
    except FileError as e:
        if e.reason in ("missing", "unreadable"):
            return None
        raise


def read_dump_manifest(out_dir: str | os.PathLike) -> dict[str, Any]:
    """The manifest of a dump directory (an empty one if there is none yet)."""
    path = Path(out_dir) / MANIFEST_NAME
    if not path.exists():
        return {"version": MANIFEST_VERSION, "kernels": []}
    from proton_inject.formats.manifest import manifest_kernels
    from proton_inject.formats.schema import read_json

    data = read_json(path, "manifest", "remove it or dump into another directory")
    manifest_kernels(data, path)
    data.setdefault("kernels", [])
    return data


REWRITE = "re-run `proton-inject dump` (or `insert`) to rewrite it"  # a broken manifest's fix


def manifest_kernels(data: Any, path: str | Path) -> list[dict[str, Any]]:
    """The ``kernels`` entries of a manifest.json, each a dict whose file keys are strings."""
    fix = REWRITE
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object with a \"kernels\" list, not "
                        f"{type_name(data)}; {fix}")
    kernels = data.get("kernels", [])
    if not isinstance(kernels, list):
        raise UserError(f"{path}: \"kernels\" must be a list, not {type_name(kernels)}; {fix}")
    for i, k in enumerate(kernels):
        if not isinstance(k, dict):
            raise UserError(f"{path}: kernels[{i}] must be an object, not {type_name(k)}; {fix}")
        _entry_fields(k, f"kernels[{i}]", path, fix)
        dump = k.get("dump")
        if dump is not None:
            if not isinstance(dump, dict):
                raise UserError(f"{path}: kernels[{i}].dump must be an object, not "
                                f"{type_name(dump)}; {fix}")
            _entry_fields(dump, f"kernels[{i}].dump", path, fix)
        regions = k.get("regions", [])
        if not isinstance(regions, list) or not all(isinstance(r, dict) for r in regions):
            raise UserError(f"{path}: kernels[{i}].regions must be a list of objects; {fix}")
        for j, r in enumerate(regions):
            for key in ("scope_id", "parent_id"):
                if r.get(key) is not None and not (is_int(r[key]) and 0 <= r[key] < 2**31):
                    raise UserError(f"{path}: kernels[{i}].regions[{j}].{key} must be a scope id "
                                    f"(an integer from 0), not {shown(r[key])}; {fix}")
            for key in ("source", "name", "parent", "origin", "partition"):
                if r.get(key) is not None and not isinstance(r[key], str):
                    raise UserError(f"{path}: kernels[{i}].regions[{j}].{key} must be a string, "
                                    f"not {shown(r[key])}; {fix}")
            lines = r.get("ir_lines")
            if lines is not None and not (isinstance(lines, list) and len(lines) == 2 and
                                          all(is_int(x) and x >= 0 for x in lines)):
                raise UserError(f"{path}: kernels[{i}].regions[{j}].ir_lines must be [first, "
                                f"last] line numbers, not {shown(lines)}; {fix}")
    return kernels


# The fields of a kernel entry (of a dump's manifest, or the ``dump`` of an instrumented tree's)
# that the tool reads, and the type each must have when present.
_STRING_FIELDS = ("file", "ttgir", "kernel", "hash", "name", "source_file", "source_sha256",
                  "target", "config_desc", "mode", "fn_key")
_COUNT_FIELDS = ("num_warps", "num_stages", "num_ctas", "config")


def _entry_fields(k: dict[str, Any], where: str, path: str | Path, fix: str) -> None:
    for key in _STRING_FIELDS:
        if k.get(key) is not None and not isinstance(k[key], str):
            raise UserError(f"{path}: {where}.{key} must be a string, not {shown(k[key])}; {fix}")
    for key in _COUNT_FIELDS:
        if k.get(key) is not None and not (is_int(k[key]) and 0 <= k[key] < 2**31):
            raise UserError(f"{path}: {where}.{key} must be an integer from 0, not "
                            f"{shown(k[key])}; {fix}")


def read_manifest(path: str | Path) -> list[dict[str, Any]]:
    """The kernels of a manifest.json file, validated."""
    return manifest_kernels(read_json(path, "manifest", REWRITE), path)


def manifest_json(manifest: dict) -> str:
    return json.dumps(manifest, indent=2, sort_keys=True) + "\n"
