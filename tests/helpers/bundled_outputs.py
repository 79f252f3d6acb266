"""What `report` prints and writes for the bundled H100 data (tests/data/h100-*), as files.

``outputs(dataset, work)`` runs the report commands a user runs on one bundled dataset and
returns {file name: bytes}: the tables (with ``-v``'s warnings and details), the JSON
summary, ``--source`` where the data has its IR, ``--raw``, and for each trace format the
SHA-256 of every trace written (a trace is megabytes: its digest is kept, and the report
read back from the JSON traces in full). tests/unit/analyze/test_bundled_outputs.py compares
them with tests/data/expected/; after a change meant to alter them, regenerate with

    python tests/helpers/bundled_outputs.py

and review ``git diff tests/data/expected`` before committing.
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
from pathlib import Path

if __name__ == "__main__":  # run as a script: this checkout and tests/ first on the path
    sys.path[:0] = [str(Path(__file__).resolve().parents[2]), str(Path(__file__).resolve().parents[1])]

from click.testing import CliRunner

from helpers import DATA, REPO
from proton_inject.cli import main

DATASETS = ("h100-triton3.6", "h100-direct", "h100-direct-loops", "h100-shortlaunch")
EXPECTED = DATA / "expected"
TRACE_FORMATS = ("perfetto", "json")


def _report(argv: list[str], work: Path) -> bytes:
    """stdout, then stderr, of ``proton-inject report ARGV`` (exit 0), ``work`` written WORK
    and this checkout REPO (the source view names the kernels' files by their full path)."""
    res = CliRunner().invoke(main, ["report", *argv, "-j", "1"])
    assert res.exit_code == 0, (argv, res.output, res.exception)
    text = res.stdout + "--- stderr\n" + res.stderr
    return text.replace(str(work), "WORK").replace(str(REPO), "REPO").encode()


def _digests(folder: Path) -> bytes:
    """``sha256  size  name`` of each file in ``folder``, by name."""
    return "".join(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.stat().st_size}  {p.name}\n"
                   for p in sorted(folder.iterdir())).encode()


def outputs(dataset: str, work: Path) -> dict[str, bytes]:
    """Every output compared for ``dataset``, by the name of its expected file."""
    data = str(DATA / dataset)
    got = {"report.txt": _report([data, "-v"], work),
           "report.json": _report([data, "--json"], work),
           "report-raw.txt": _report([data, "--raw"], work)}
    if any((DATA / dataset).glob("*.ttgir")):
        got["report-source.txt"] = _report([data, "--source"], work)
    for fmt in TRACE_FORMATS:
        for merge in ([], ["--merge"]):
            name = f"traces-{fmt}{'-merged' if merge else ''}"
            folder = work / name
            _report([data, "--trace", str(folder), "--trace-format", fmt, "--no-gz", *merge], work)
            got[f"{name}.sha256"] = _digests(folder)
            if fmt == "json":
                got[f"{name}-report.txt"] = _report([str(folder), "-v"], work)
    return got


if __name__ == "__main__":
    for ds in DATASETS:
        with tempfile.TemporaryDirectory() as tmp:
            for name, blob in outputs(ds, Path(tmp)).items():
                (EXPECTED / ds).mkdir(parents=True, exist_ok=True)
                (EXPECTED / ds / name).write_bytes(blob)
        print(f"wrote {EXPECTED / ds}")
