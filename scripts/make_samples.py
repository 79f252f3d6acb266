#!/usr/bin/env python3
"""Regenerate ttgir_samples/: compile every SAMPLE_SPECS entry of examples/*.py on the CPU.

For each target in TARGETS and each spec, ``proton_inject.dump.aot.compile_aot`` compiles the
kernel (no GPU needed) and the TTGIR is written to
``ttgir_samples/<target dir>/<kernel>[_<variant>].ttgir``, with absolute paths in ``loc(...)``
made relative (repo files to the repo root, Triton's own files to its site-packages dir), so
the output is byte-identical on every machine with the same Triton. Combinations Triton
rejects are skipped and listed. Every written file is then parsed back with Triton's MLIR
parser. ``ttgir_samples/README.md`` is rewritten with the listing.

    python scripts/make_samples.py            # regenerate (2 worker processes)
    python scripts/make_samples.py --check    # fail if the files on disk differ
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import hashlib
import multiprocessing as mp
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from proton_inject.errors import UserError  # noqa: E402
from proton_inject.formats.files import write_atomic  # noqa: E402

TARGETS = ["cuda:80", "cuda:90", "cuda:100", "hip:gfx942"]
OUT = ROOT / "ttgir_samples"
EXAMPLES = ROOT / "examples"
# Ops the README counts per file: what the corpus is meant to cover.
FEATURES = {
    "scf.for": r"\bscf\.for\b",
    "scf.while": r"\bscf\.while\b",
    "scf.if": r"\bscf\.if\b",
    "tt.reduce": r"\btt\.reduce\b",
    "ttg.warp_specialize": r"\bttg\.warp_specialize\(",
    "TMA": r"\bttng\.async_tma_\w+|\bttng\.tensormap_create\b|\btt\.descriptor_(?:load|store)\b",
    "tt.dot/mma": r"\btt\.dot\b|\bttng\.warp_group_dot\b|\bttng\.tc_gen5_mma\b",
    "atomics": r"\btt\.atomic_\w+",
}


def target_dir(target: str) -> str:
    """``cuda:90`` -> ``cuda-90`` (no colon in paths)."""
    return target.replace(":", "-")


def sample_name(spec: dict) -> str:
    variant = spec.get("variant") or ""
    return f"{spec['kernel']}_{variant}" if variant else spec["kernel"]


def relativize_locs(text: str) -> str:
    """Rewrite absolute paths inside ``loc("...")`` so the file does not depend on the machine."""
    import triton

    site = str(Path(triton.__file__).resolve().parent.parent) + os.sep
    root = str(ROOT) + os.sep

    def fix(m: re.Match) -> str:
        path = m.group(1)
        for prefix in (root, site):
            if path.startswith(prefix):
                return f'loc("{path[len(prefix):]}"'
        return m.group(0)

    return re.sub(r'loc\("(/[^"]*)"', fix, text)


def _compile_job(job: tuple[str, int, str]) -> tuple[str, int, str, str | None, str | None, float]:
    """Worker: compile one (example, spec index, target); return (..., ttgir or None, error)."""
    from proton_inject.dump.aot import compile_aot
    from proton_inject.dump.kernel_source import load_module

    rel, idx, target = job
    path = ROOT / rel
    spec = load_module(path).SAMPLE_SPECS[idx]
    t0 = time.perf_counter()
    try:
        r = compile_aot(path, spec["kernel"], spec["signature"], spec.get("constexprs", {}),
                        target, spec.get("num_warps", 4), spec.get("num_stages", 3))
    except UserError as e:
        return rel, idx, target, None, str(e).replace(str(ROOT) + os.sep, ""), 0.0
    return rel, idx, target, relativize_locs(r.ttgir), None, time.perf_counter() - t0


def collect_specs() -> list[tuple[str, int, dict]]:
    from proton_inject.dump.kernel_source import load_module

    out = []
    for path in sorted(EXAMPLES.glob("*.py")):
        mod = load_module(path)
        for i, spec in enumerate(getattr(mod, "SAMPLE_SPECS", [])):
            out.append((str(path.relative_to(ROOT)), i, spec))
    return out


def parse_check(paths: list[Path]) -> list[str]:
    """Parse each file with Triton's MLIR parser (core + NVIDIA + AMD dialects); errors."""
    from triton._C.libtriton import ir
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend

    backends = [make_backend(GPUTarget("cuda", 90, 32)), make_backend(GPUTarget("hip", "gfx942", 64))]
    errors = []
    for p in paths:
        ctx = ir.context()
        ir.load_dialects(ctx)
        for b in backends:
            b.load_dialects(ctx)
        try:
            ir.parse_mlir_module(str(p), ctx)
        except Exception as e:  # the parser raises RuntimeError; keep going to list all
            errors.append(f"{p.relative_to(ROOT)}: {e}")
    return errors


def render_readme(written: dict[str, list[tuple[str, str]]], skipped: list[str],
                  features: dict[str, dict[str, list[str]]]) -> str:
    import triton

    total = sum(len(v) for v in written.values())
    lines = [
        "# TTGIR samples",
        "",
        "Real TTGIR that Triton " + triton.__version__ + " produces for the kernels in `examples/`,",
        "compiled ahead of time on a CPU-only machine (no GPU is needed to make them). They are",
        "test input for the TTGIR parser, the instrumentation rules and the golden-file tests.",
        "",
        "How they were made: `scripts/make_samples.py` imports every `examples/*.py`, reads its",
        "`SAMPLE_SPECS` (kernel, signature, constexprs, num_warps, num_stages, variant) and, for",
        "each target below, compiles it with `proton_inject.dump.aot.compile_aot` (a private",
        "temporary Triton cache; the user's cache is untouched). Absolute paths in `loc(...)` are",
        "rewritten: files of this repository relative to its root (`examples/matmul.py`), Triton's",
        "own files relative to site-packages (`triton/language/standard.py`). The output is",
        "deterministic: rerunning gives identical bytes with the same Triton version.",
        "",
        "Regenerate (after changing an example or upgrading Triton):",
        "",
        "```",
        "python scripts/make_samples.py          # rewrites ttgir_samples/, ~1 minute on 2 cores",
        "python scripts/make_samples.py --check  # exit 1 if the files here are stale",
        "```",
        "",
        "Every file is checked to parse with `triton._C.libtriton.ir.parse_mlir_module(path, ctx)`",
        "where `ctx = ir.context()` has `ir.load_dialects(ctx)` plus `load_dialects(ctx)` of both",
        "the NVIDIA and the AMD backend (`triton.compiler.make_backend(GPUTarget(...))`): the AMD",
        "files use `amdg.*` ops that the core dialects do not include.",
        "",
        f"## Files ({total} in all)",
        "",
    ]
    for target in TARGETS:
        files = written.get(target, [])
        lines.append(f"### `{target_dir(target)}/` (target `{target}`, {len(files)} files)")
        lines.append("")
        for name, src in files:
            lines.append(f"- `{name}.ttgir` from `{src}`")
        lines.append("")
    lines += ["## What they contain", "",
              "Which targets' file of each sample holds each op family (`all` = all four):", ""]
    feats = list(features)
    lines.append("| sample | " + " | ".join(f"`{f}`" for f in feats) + " |")
    lines.append("|---" * (len(feats) + 1) + "|")
    names = sorted({n for lst in written.values() for n, _ in lst})
    for name in names:
        cells = []
        for f in feats:
            ts = [t for t in TARGETS if name in features[f][t]]
            cells.append("all" if len(ts) == len(TARGETS) else ", ".join(ts) or "-")
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    lines += ["", "## Skipped combinations", ""]
    if skipped:
        lines += [f"- {s}" for s in skipped]
    else:
        lines.append("None: Triton compiled every spec for every target.")
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--jobs", "-j", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--check", action="store_true",
                    help="compile into memory and compare with the files on disk; write nothing")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    specs = collect_specs()
    jobs = [(rel, i, t) for rel, i, _ in specs for t in TARGETS]
    spec_of = {(rel, i): s for rel, i, s in specs}
    if args.jobs > 1:
        with cf.ProcessPoolExecutor(args.jobs, mp_context=mp.get_context("spawn")) as pool:
            results = list(pool.map(_compile_job, jobs))
    else:
        results = [_compile_job(j) for j in jobs]

    outputs: dict[Path, str] = {}
    written: dict[str, list[tuple[str, str]]] = {t: [] for t in TARGETS}
    skipped: list[str] = []
    features = {f: {t: [] for t in TARGETS} for f in FEATURES}
    for rel, idx, target, ttgir, err, _secs in results:
        spec = spec_of[(rel, idx)]
        name = sample_name(spec)
        if ttgir is None:
            first = err.splitlines()[0] if err else "unknown error"
            skipped.append(f"`{name}` for `{target}`: {first}")
            continue
        path = OUT / target_dir(target) / f"{name}.ttgir"
        if path in outputs:
            raise SystemExit(f"two specs write {path.relative_to(ROOT)}: give them variants")
        outputs[path] = ttgir
        written[target].append((name, rel))
        for feat, rx in FEATURES.items():
            if re.search(rx, ttgir):
                features[feat][target].append(name)
    for lst in written.values():
        lst.sort()
    readme = render_readme(written, skipped, features)
    compile_s = time.perf_counter() - t0

    existing = {p for t in TARGETS for p in (OUT / target_dir(t)).glob("*.ttgir")}
    if args.check:
        stale = [p for p, text in outputs.items()
                 if not p.exists() or p.read_text(encoding="utf-8") != text]
        stale += sorted(existing - set(outputs))
        readme_path = OUT / "README.md"
        if not readme_path.exists() or readme_path.read_text(encoding="utf-8") != readme:
            stale.append(readme_path)
        for p in stale:
            print(f"stale: {p.relative_to(ROOT)}")
        print(f"{len(outputs)} samples compared, {len(stale)} stale ({compile_s:.1f} s)")
        return 1 if stale else 0

    for path, text in outputs.items():
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            write_atomic(path, text)
    for path in sorted(existing - set(outputs)):
        path.unlink()
    write_atomic(OUT / "README.md", readme)

    errors = parse_check(sorted(outputs))
    nbytes = sum(len(t.encode()) for t in outputs.values())
    digest = hashlib.sha256(b"".join(
        str(p.relative_to(ROOT)).encode() + b"\0" + outputs[p].encode() for p in sorted(outputs)
    )).hexdigest()[:16]
    for t in TARGETS:
        print(f"{target_dir(t)}: {len(written[t])} files")
    for s in skipped:
        print(f"skipped: {s}")
    print(f"{len(outputs)} samples, {nbytes} bytes, digest {digest}, "
          f"{len(skipped)} skipped, {time.perf_counter() - t0:.1f} s")
    for e in errors:
        print(f"parse error: {e}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
