"""How much of Triton's own lit tests our parser handles, case by case.

    .venv/bin/python scripts/lit_coverage.py DIR_OR_FILE... [-v]

Each .mlir file is split at `// -----` lines (as `triton-opt --split-input-file` does).
A case counts when Triton's own parser (ir.parse_mlir_module, every dialect loaded)
accepts it and it holds an op (cases Triton rejects, or crashes on, are listed apart);
for those it reports whether ours parses it, whether our op counts equal
MLIR's walk, and whether strip after insert (--kernel-scope --loops both, every op)
gives the case back byte for byte. Prints the share and the rest by cause.
The lit files are Triton's: read them from where you keep them, never commit them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from proton_inject.errors import UserError
from proton_inject.instrument.insert import insert_text
from proton_inject.instrument.rules import Rules
from proton_inject.instrument.strip import strip_text
from proton_inject.lower.proton import mlir_context
from proton_inject.ttgir import parse  # noqa: E402
from proton_inject.ttgir.tree import mlir_op_counts  # noqa: E402

_SPLIT = re.compile(r"^// -----[^\n]*\n", re.M)
_NO_OP = "no op (only comments or aliases)"
_NOT_COUNTED = ("mlir-rejects", "mlir-crashes", _NO_OP)
_RULES = Rules(kernel_scope=True, loops="both", ops=["*"], marks=False)


def cases(paths: list[str]):
    files = []
    for p in map(Path, paths):
        files += sorted(p.rglob("*.mlir")) if p.is_dir() else [p]
    for f in files:
        for i, text in enumerate(_SPLIT.split(f.read_text(encoding="latin-1"))):
            yield f"{f}#{i}", text


def mlir_counts(text: str, ctx) -> Counter | str:
    """MLIR's op counts, or why there are none. Parsed in a forked child: some invalid
    cases trip an assertion inside MLIR, which would abort the whole run."""
    from triton._C.libtriton import ir

    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        code = 1
        try:
            with tempfile.NamedTemporaryFile("w", suffix=".mlir", encoding="latin-1") as tmp:
                tmp.write(text)
                tmp.flush()
                os.dup2(os.open(os.devnull, os.O_WRONLY), 2)  # MLIR's diagnostics
                mod = ir.parse_mlir_module(tmp.name, ctx)
            counts: Counter = Counter()
            mod.walk(lambda op: counts.update([op.get_name()]))
            with os.fdopen(write_end, "w") as out:
                json.dump(counts, out)
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end) as inp:
        data = inp.read()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return "mlir-crashes"
    return Counter(json.loads(data)) if os.WEXITSTATUS(status) == 0 else "mlir-rejects"


def check_case(text: str, ctx) -> str:
    """'ok' or the cause of a miss."""
    theirs = mlir_counts(text, ctx)
    if isinstance(theirs, str):
        return theirs
    if theirs == Counter({"builtin.module": 1}):  # MLIR's implicit module alone: not a kernel
        return _NO_OP
    try:
        module = parse(text, "case.mlir")
    except UserError as e:
        return "parse: " + str(e).splitlines()[0].split(": ", 1)[-1][:70]
    if module.render() != text.encode("latin-1"):
        return "render differs"
    ours = Counter(mlir_op_counts(module))
    if ours != theirs:
        diff = (ours - theirs) + (theirs - ours)
        return "op counts: " + ", ".join(sorted(diff)[:3])
    try:
        base = strip_text(text, "case.mlir")  # a case with records: compare without them
        res = insert_text(text, _RULES, "case.mlir", force=True)
    except UserError as e:
        why = str(e).splitlines()[0].removeprefix("case.mlir: ").split(" (")[0]
        return f"ok (insert refused: {why[:60]})"  # without names, so that like causes add up
    if strip_text(res.text.encode("latin-1")) != base:
        return "strip after insert differs"
    return "ok"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    ctx = mlir_context()
    results: dict[str, str] = {}
    for name, text in cases(args.paths):
        results[name] = check_case(text, ctx)
        if args.verbose:
            print(f"{results[name]:60.60}  {name}")
    files = len({n.split("#")[0] for n in results})
    accepted = {n: r for n, r in results.items() if r not in _NOT_COUNTED}
    ok = [n for n, r in accepted.items() if r.startswith("ok")]
    left = Counter(r for r in results.values() if r in _NOT_COUNTED)
    print(f"{len(results)} cases in {files} files; Triton's parser accepts {len(accepted)}"
          + "".join(f"; {n} {why}" for why, n in sorted(left.items())))
    if accepted:
        print(f"ours: {len(ok)}/{len(accepted)} = {100 * len(ok) / len(accepted):.1f}% parse, "
              "count ops like MLIR and strip back to the same bytes")
    for cause, n in Counter(r for r in accepted.values() if r != "ok").most_common():
        print(f"  {n:4d}  {cause}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
