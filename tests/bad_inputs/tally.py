"""Count how the corpus fares with the proton_inject on sys.path: tracebacks, modified inputs.

Each case runs in its own process with 4 GiB of address space, so a case that would exhaust
memory counts as a traceback instead of taking the machine down.

    .venv/bin/python tests/bad_inputs/tally.py [-v]      # this checkout
    PYTHONPATH=/path/to/other/checkout .venv/bin/python tests/bad_inputs/tally.py
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from cases import CASES  # noqa: E402
from harness import run_case  # noqa: E402

MEMORY_LIMIT = 4 * 2**30


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def one(index: int, workdir: Path) -> None:
    case = CASES[index]
    o = run_case(case, workdir)
    print(json.dumps({"traceback": o.traceback, "modified": o.modified,
                      "problems": o.problems(case)}))


def main() -> None:
    tracebacks = modified = passing = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i, case in enumerate(CASES):
            p = subprocess.run([sys.executable, __file__, "--one", str(i), f"{tmp}/{i}"],
                               capture_output=True, text=True, preexec_fn=_limit)
            try:
                r = json.loads(p.stdout.strip().splitlines()[-1])
            except (ValueError, IndexError):  # the process died (out of memory, signal)
                r = {"traceback": p.stderr[-2000:] or f"exit {p.returncode}", "modified": [],
                     "problems": [f"died: exit {p.returncode}"]}
            tracebacks += bool(r["traceback"])
            modified += bool(r["modified"])
            passing += not r["problems"]
            if r["problems"] and "-v" in sys.argv:
                print(f"--- {case.name}\n" + "\n".join(r["problems"])[-1500:])
    print(f"{len(CASES)} cases: {passing} pass, {tracebacks} tracebacks, "
          f"{modified} with inputs modified or outputs written")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--one"]:
        one(int(sys.argv[2]), Path(sys.argv[3]))
    else:
        main()
