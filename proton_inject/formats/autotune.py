"""autotune.json: the autotuners' choices a plain run made (``dump`` records them, ``run`` and
``profile --autotune-from`` pin them). The file and its checks; ``dump/tuning.py`` patches the
autotuners.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from proton_inject.errors import UserError
from proton_inject.formats.files import write_atomic
from proton_inject.formats.schema import MAX_JSON_BYTES, read_bytes, read_json

FILE_NAME = "autotune.json"


FORMAT = 1


class Decisions:
    """Autotuning decisions: what one run chose (recorded), or what a run is to use (pins)."""

    def __init__(self) -> None:
        self.triton: dict[tuple, dict] = {}
        self.inductor: dict[tuple, dict] = {}
        self.conflicts = 0  # one decision recorded twice, differently: left out of the pins

    # -- recording --

    def add(self, entry: dict) -> None:
        """Add one entry (as the file or a record line holds it); the same decision chosen
        differently twice (two autotuner objects of one kernel) pins neither."""
        if entry.get("kind", "triton") == "triton":
            ident = (entry["module"], entry["kernel"], entry["configs"], json.dumps(entry["key"]))
            table, fields = self.triton, ("config",)
        else:
            ident = (entry["kernel"], entry["src"])
            table, fields = self.inductor, ("autotune", "coordesc")
        new = {k: v for k, v in entry.items() if k != "kind"}
        old = table.get(ident)
        if old is None:
            table[ident] = new
            return
        for f in fields:
            a, b = old.get(f), new.get(f)
            if a is None or b is None or a == b:
                old[f] = a if b is None else b
            elif not old.get("conflict"):
                old["conflict"] = True
                self.conflicts += 1

    def to_json(self) -> dict:
        return {"format": FORMAT, "triton": list(self.triton.values()),
                "inductor": list(self.inductor.values())}  # fmt: skip

    def __len__(self) -> int:
        return len(self.triton) + len(self.inductor)

    def summary(self) -> str:
        n_ind = sum(1 for e in self.inductor.values() if e.get("autotune") or e.get("coordesc"))
        text = f"{len(self.triton)} Triton autotune key(s), {n_ind} Inductor kernel(s)"
        return text + (f"; {self.conflicts} chosen differently twice, not pinned" if self.conflicts else "")

    # -- the file --

    @classmethod
    def from_json(cls, data: Any) -> Decisions:
        """Decisions from the file's JSON; ValueError saying what is wrong."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"not an autotune file of format {FORMAT}")
        out = cls()
        for kind in ("triton", "inductor"):
            entries = data.get(kind, [])
            if not isinstance(entries, list):
                raise ValueError(f"'{kind}' is not a list")
            for i, e in enumerate(entries):
                try:
                    out.add({**e, "kind": kind})
                    if kind == "triton":
                        _check_config(e["config"])
                    for f in ("autotune", "coordesc") if kind == "inductor" else ():
                        if e.get(f) is not None:
                            _check_config(e[f])
                except (KeyError, TypeError, ValueError, AttributeError) as err:
                    raise ValueError(f"{kind} entry {i}: {err!r}") from err
        return out

    def write(self, directory: str | os.PathLike) -> Path:
        return write_atomic(Path(directory) / FILE_NAME, json.dumps(self.to_json(), indent=1) + "\n")


def _check_config(c: Any) -> None:
    if not isinstance(c, dict) or not isinstance(c.get("kwargs"), dict):
        raise ValueError("config without kwargs")
    for f in ("num_warps", "num_stages", "num_ctas"):
        if not isinstance(c.get(f), int):
            raise ValueError(f"config {f} is not an integer")


def load(path: str | os.PathLike) -> Decisions:
    """The decisions of an autotune file; ValueError (with the file's name) if it is bad."""
    try:
        data = read_json(path, "autotune", "dump the program again to rewrite it")
    except UserError as e:  # (each message starts with the path)
        raise ValueError(str(e)) from None
    try:
        return Decisions.from_json(data)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from e


def find_file(directory: str | os.PathLike) -> Path | None:
    """The autotune file of a dump, an instrumented tree or a run's output (its ir/ too)."""
    d = Path(directory)
    for p in (d / FILE_NAME, d / "ir" / FILE_NAME):
        if p.is_file():
            return p
    return None


def from_lines(path: str | os.PathLike) -> Decisions:
    """Decisions from the JSON lines the dump's child appends (a torn last line is skipped)."""
    out = Decisions()
    if not os.path.exists(path):
        return out
    text = read_bytes(path, "autotune lines", MAX_JSON_BYTES).decode("utf-8", "replace")
    for line in text.splitlines():
        if line:
            try:
                out.add(json.loads(line))
            except (ValueError, KeyError, TypeError, RecursionError):
                continue
    return out
