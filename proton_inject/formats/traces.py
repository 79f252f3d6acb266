"""The trace formats by name: what ``report --trace-format`` and ``run``'s traces offer.

Each format is a writer class (the interface in ``trace_writer.py``), named here by module
and class so that the command line lists the formats without importing numpy; its file
suffix; and a line of help. A new format is a module with its writer and one entry in
``TRACE_FORMATS``; the command line's choices and help come from here.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from proton_inject.errors import UserError

if TYPE_CHECKING:
    from proton_inject.formats.trace_writer import TraceLaunch


@dataclass(frozen=True)
class TraceFormat:
    """A trace format: its writer class (``module:Class`` under ``proton_inject.formats``),
    file suffix (before any ``.gz``) and what it is."""

    writer_name: str
    suffix: str
    help: str
    # whether ``report`` reads its files back (the others are for a viewer or a tool)
    readable: bool = False

    @property
    def writer(self) -> Any:
        """The writer class (implements ``trace_writer.TraceWriter``)."""
        module, cls = self.writer_name.split(":")
        return getattr(importlib.import_module(f"proton_inject.formats.{module}"), cls)


TRACE_FORMATS: dict[str, TraceFormat] = {
    "perfetto": TraceFormat("trace_perfetto:PerfettoFile", ".pftrace", "native Perfetto (.pftrace)"),
    "json": TraceFormat("trace_json:TraceFile", ".json", "Chrome JSON", readable=True),
    "csv": TraceFormat("trace_csv:CsvFile", ".csv", "a table of region instances (CSV), a row each"),
}
DEFAULT_FORMAT = "perfetto"


def trace_format(name: str) -> TraceFormat:
    """The format called ``name``; a user error naming the choices otherwise."""
    if name not in TRACE_FORMATS:
        raise UserError(f"--trace-format {name}: must be one of {', '.join(TRACE_FORMATS)}")
    return TRACE_FORMATS[name]


def trace_writer(name: str, gz: bool) -> tuple[Any, str]:
    """The writer class of format ``name`` and its files' suffix (``.gz`` added when ``gz``)."""
    fmt = trace_format(name)
    return fmt.writer, fmt.suffix + (".gz" if gz else "")


def trace_bytes(launches: Sequence[TraceLaunch], fmt: str = "json") -> bytes:
    """One trace of format ``fmt`` holding the given launches on one time axis, as bytes."""
    from proton_inject.formats.trace_writer import time_zero

    writer = trace_format(fmt).writer
    w = writer(None, min((time_zero(d) for d in launches), default=0), len(launches) > 1)
    for d in launches:
        w.add(d)
    return w.commit()


def write_trace(launches: TraceLaunch | Sequence[TraceLaunch], path: str | os.PathLike,
                gz: bool | None = None, level: int = 1, fmt: str = "json") -> Path:
    """Write one trace file of format ``fmt``; gzip when ``gz`` or when ``path`` ends in
    ``.gz``."""
    from proton_inject.formats.trace_writer import time_zero

    if not isinstance(launches, Sequence):
        launches = [launches]
    path = Path(path)
    gz = bool(gz or (gz is None and path.name.endswith(".gz")))
    if gz and not path.name.endswith(".gz"):
        path = path.with_name(path.name + ".gz")
    w = trace_format(fmt).writer(path, min((time_zero(d) for d in launches), default=0),
                                  len(launches) > 1, gz, level)
    try:
        for d in launches:
            w.add(d)
    except BaseException:
        w.abort()
        raise
    w.commit()
    return path


def write_traces(launches: Sequence[TraceLaunch], out_dir: str | os.PathLike, merge: bool = False,
                 gz: bool = False, fmt: str = "json") -> list[Path]:
    """One trace of format ``fmt`` per launch in ``out_dir`` (``<launch><suffix>``), or one
    ``merged<suffix>`` holding them all."""
    out = Path(out_dir)
    ext = trace_format(fmt).suffix + (".gz" if gz else "")
    if merge:
        return [write_trace(list(launches), out / f"merged{ext}", gz=gz, fmt=fmt)]
    return [write_trace(d, out / f"{d.meta.label}{ext}", gz=gz, fmt=fmt) for d in launches]
