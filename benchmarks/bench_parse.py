"""Parse throughput: our Lark parser against Triton's C++ MLIR parser, side by side.

Parses every sample in ttgir_samples/ and one large file (>= 1 MB) made by
merging the cuda:90 samples that share a warp count into one module (aliases
and function names renamed so nothing collides), with both parsers in the same
process, and prints MB/s for each and the ratio. With --insert it also times
parse + select + rewrite (`--loops both --op tt.load`) on the large file.

    python benchmarks/bench_parse.py [--repeat 5] [--insert]
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from proton_inject.instrument.insert import insert_text  # noqa: E402
from proton_inject.instrument.rules import Rules  # noqa: E402
from proton_inject.lower.proton import mlir_context  # noqa: E402
from proton_inject.ttgir import parse  # noqa: E402
from proton_inject.ttgir.parser import _get_parser  # noqa: E402


def best_of(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


_ALIAS_DEF = re.compile(r"^#([A-Za-z_][\w$.-]*)\s*=", re.M)


def merged_module(files: list[Path], min_bytes: int) -> str:
    """One module holding the functions of `files`, repeated until it has min_bytes."""
    header = None
    aliases: list[str] = []
    bodies: list[str] = []
    trailer_locs: list[str] = []
    size = 0
    copy = 0
    while size < min_bytes:
        for f in files:
            copy += 1
            text = f.read_text()
            tag = f"c{copy}"
            names = [n for n in _ALIAS_DEF.findall(text) if not re.fullmatch(r"loc\d*", n)]

            def rename_attr(m, names=names, tag=tag):
                return f"#{m.group(1)}_{tag}" if m.group(1) in names else m.group(0)

            text = re.sub(r"#([A-Za-z_][\w$.-]*?)(?![\w$.-])", rename_attr, text)
            text = re.sub(r"#loc(\d*)(?![\w$.-])",
                          lambda m, c=copy: f"#loc{c * 100000 + int(m.group(1) or 99999)}", text)
            text = re.sub(r"@(\w+)\(", lambda m, tag=tag: f"@{m.group(1)}_{tag}(", text)
            lines = text.splitlines(keepends=True)
            mod_start = next(i for i, ln in enumerate(lines) if ln.startswith("module"))
            mod_end = max(i for i, ln in enumerate(lines) if ln.startswith("}"))
            if header is None:
                header = lines[mod_start]
            aliases.extend(lines[:mod_start])
            bodies.extend(lines[mod_start + 1:mod_end])
            trailer_locs.extend(lines[mod_end + 1:])
            size += len(text)
    return "".join(aliases) + header + "".join(bodies) + "} loc(#loc99999)\n" + "".join(
        trailer_locs) + '#loc99999 = loc("merged":1:0)\n'


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--insert", action="store_true", help="also time parse+select+rewrite")
    args = ap.parse_args()

    from triton._C.libtriton import ir

    ctx = mlir_context()
    _get_parser()  # build (or load) the grammar outside the timings
    samples = sorted((REPO / "ttgir_samples").glob("*/*.ttgir"))
    rows = []
    total_b = ours_t = mlir_t = 0.0
    for path in samples:
        raw = path.read_bytes()
        t_ours = best_of(lambda raw=raw, p=path: parse(raw, str(p)), args.repeat)
        t_mlir = best_of(lambda p=path: ir.parse_mlir_module(str(p), ctx), args.repeat)
        total_b += len(raw)
        ours_t += t_ours
        mlir_t += t_mlir

    same_warps = [p for p in sorted((REPO / "ttgir_samples/cuda-90").glob("*.ttgir"))
                  if '"ttg.num-warps" = 4 :' in p.read_text()]
    big = merged_module(same_warps, 1 << 20)
    with tempfile.TemporaryDirectory() as tmp:
        big_path = Path(tmp) / "merged.ttgir"
        big_path.write_text(big)
        big_raw = big_path.read_bytes()
        module = parse(big_raw, str(big_path))
        assert module.render() == big_raw
        theirs: Counter = Counter()
        mlir_mod = ir.parse_mlir_module(str(big_path), ctx)
        mlir_mod.walk(lambda op: theirs.update([op.get_name()]))
        n_ops = sum(theirs.values())
        t_big = best_of(lambda: parse(big_raw, str(big_path)), args.repeat)
        t_big_mlir = best_of(lambda: ir.parse_mlir_module(str(big_path), ctx), args.repeat)
        rows.append(("large merged file", len(big_raw), t_big, t_big_mlir))
        if args.insert:
            rules = Rules(loops="both", ops=["tt.load"], marks=False)
            t_ins = best_of(lambda: insert_text(big_raw, rules, str(big_path)), args.repeat)
            rows.append(("  parse+select+rewrite", len(big_raw), t_ins, t_big_mlir))
    rows.insert(0, (f"{len(samples)} samples, summed", total_b, ours_t, mlir_t))

    print(f"{'input':<28}{'bytes':>10}{'ours MB/s':>11}{'MLIR MB/s':>11}{'ours/MLIR':>11}")
    for name, nbytes, t1, t2 in rows:
        print(f"{name:<28}{int(nbytes):>10}{nbytes / t1 / 1e6:>11.2f}{nbytes / t2 / 1e6:>11.2f}"
              f"{t2 / t1:>11.2f}")
    print(f"(large file: {n_ops} ops by MLIR's walk; best of {args.repeat} runs each; "
          "MLIR = triton._C.libtriton.ir.parse_mlir_module, which also verifies)")


if __name__ == "__main__":
    main()
