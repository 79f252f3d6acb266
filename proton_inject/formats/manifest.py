"""manifest.json of a dump or an instrumented tree: its name and version, the kernel entries
(read and checked), and the JSON the writers produce.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from proton_inject.errors import UserError
from proton_inject.formats.schema import is_int, read_json, shown, type_name

MANIFEST_NAME = "manifest.json"



MANIFEST_VERSION = 1



def jsonable(v: Any) -> Any:
    """A value as JSON can hold it: scalars as they are, anything else as its str()."""
    if isinstance(v, bool | int | float | str) or v is None:
        return v
    return str(v)



def source_sha256(path: str) -> str | None:
    """sha256 of a kernel's source file, so `insert` can tell when its marks may have moved."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None



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


def manifest_kernels(data: Any, path: str | Path) -> list[dict[str, Any]]:
    """The ``kernels`` entries of a manifest.json, each a dict whose file keys are strings."""
    fix = "re-run `proton-inject dump` (or `insert`) to rewrite it"
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a JSON object with a \"kernels\" list, not "
                        f"{type_name(data)}; {fix}")
    kernels = data.get("kernels", [])
    if not isinstance(kernels, list):
        raise UserError(f"{path}: \"kernels\" must be a list, not {type_name(kernels)}; {fix}")
    for i, k in enumerate(kernels):
        if not isinstance(k, dict):
            raise UserError(f"{path}: kernels[{i}] must be an object, not {type_name(k)}; {fix}")
        for key in ("file", "ttgir", "kernel", "hash"):
            if k.get(key) is not None and not isinstance(k[key], str):
                raise UserError(f"{path}: kernels[{i}].{key} must be a string, not "
                                f"{shown(k[key])}; {fix}")
        regions = k.get("regions", [])
        if not isinstance(regions, list) or not all(isinstance(r, dict) for r in regions):
            raise UserError(f"{path}: kernels[{i}].regions must be a list of objects; {fix}")
        for j, r in enumerate(regions):
            if r.get("scope_id") is not None and not is_int(r["scope_id"]):
                raise UserError(f"{path}: kernels[{i}].regions[{j}].scope_id must be an "
                                f"integer, not {shown(r['scope_id'])}; {fix}")
            if r.get("source") is not None and not isinstance(r["source"], str):
                raise UserError(f"{path}: kernels[{i}].regions[{j}].source must be a string; "
                                f"{fix}")
    return kernels


def read_manifest(path: str | Path) -> list[dict[str, Any]]:
    """The kernels of a manifest.json file, validated."""
    return manifest_kernels(read_json(path, "manifest", "re-run `proton-inject dump` (or "
                                      "`insert`) to rewrite it"), path)


def manifest_json(manifest: dict) -> str:
    return json.dumps(manifest, indent=2, sort_keys=True) + "\n"
