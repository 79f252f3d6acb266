"""``proton-inject dump -- python prog.py``: run the program plain in a child process and keep
the TTGIR of every kernel it compiles, with what ``run`` needs to find it again.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proton_inject.dump import tuning
from proton_inject.dump.aot import AotResult, override_hash, source_facts
from proton_inject.dump.dump_tree import aot_command, write_dump
from proton_inject.dump.signature import constexpr_text
from proton_inject.errors import UserError
from proton_inject.formats import autotune as autotune_file
from proton_inject.formats.files import write_atomic
from proton_inject.formats.manifest import MANIFEST_NAME, read_dump_manifest
from proton_inject.formats.patterns import compile_pattern
from proton_inject.formats.schema import MAX_TTGIR_BYTES, FileError, read_text


@dataclass
class ProgramDump:
    """What ``dump_program`` found: kernels written, kernels left out, the program's exit."""

    kernels: list[AotResult]
    compiled: int  # kernel compiles seen (all names, before --kernel and de-duplication)
    exit_code: int
    notes: list[str] = field(default_factory=list)
    autotune: Any = None  # autotune_file.Decisions the program's autotuners made (written beside)
    autotune_file: Path | None = None


# The program's own Triton cache, for a child whose cache is private (the program's may keep
# no IR) to read saved autotune choices from.
PROGRAM_CACHE_ENV = "PROTON_INJECT_PROGRAM_TRITON_CACHE"

DUMP_CHILD = (
    "import sys; from proton_inject.dump.program import _dump_child; "
    "sys.exit(_dump_child(sys.argv[1:]))"
)


def split_program_argv(argv: Iterable[str], command: str) -> tuple[str, str, list[str]]:
    """``python x.py a`` / ``x.py a`` / ``python -m mod a`` -> (kind, target, args).

    Shared by ``dump`` and ``run``, which both run a program given after ``--``; ``command``
    names the one asking, for the messages.
    """
    args = list(argv)
    if args and (Path(args[0]).name.startswith("python") or args[0] == sys.executable):
        args = args[1:]
    if not args:
        raise UserError(f"{command}: no program given: use proton-inject {command} ... -- "
                        "python script.py ARGS")
    if Path(args[0]).name in ("torchrun", "torch.distributed.run") or args[:2] == ["-m", "torch.distributed.run"]:
        raise UserError(f"{command}: put torchrun outside: torchrun --nproc-per-node N --no-python "
                        f"proton-inject {command} ... -- python script.py ARGS (each rank is then "
                        "profiled, with its rank in the file names)")
    if args[0] == "-m":
        if len(args) < 2:
            raise UserError(f"{command}: -m needs a module name")
        return "module", args[1], args[2:]
    if args[0].startswith("-"):
        raise UserError(f"{command}: python option {args[0]!r} is not supported; give a script or -m")
    if not Path(args[0]).is_file():
        raise UserError(f"{command}: {args[0]}: no such script")
    return "path", args[0], args[1:]


def dump_program(
    argv: Iterable[str],
    out_dir: str | os.PathLike,
    kernel: str | None = None,
    timeout: float | None = None,
) -> ProgramDump:
    """Run ``python script.py ARGS`` (or ``-m module``) and dump the TTGIR of every kernel it
    compiles into ``out_dir`` (``<hash>/<kernel>.ttgir`` + ``manifest.json``).

    ``kernel`` (a regex, searched) keeps only matching kernel names. The dump is written even
    when the program fails; its exit code is returned. A program that compiles no kernel is
    a UserError.
    """
    import subprocess

    kind, target, args = split_program_argv(argv, "dump")
    pattern = None
    if kernel:
        pattern = compile_pattern(kernel, f"--kernel {kernel!r}")
    with tempfile.TemporaryDirectory(prefix="proton-inject-dump-") as tmp:
        records_path = os.path.join(tmp, "compiled.jsonl")
        env = dict(os.environ)
        for key in ("TRITON_KERNEL_OVERRIDE", "TRITON_OVERRIDE_DIR", "TRITON_ALWAYS_COMPILE"):
            env.pop(key, None)
        # Each compile's TTGIR is read where Triton's cache keeps it (for a build loaded from
        # the program's cache too), not from Triton's IR dump, which also disassembles every
        # cubin (2.45x a compile: docs/host-performance.md).
        if _cache_may_lack_ir():  # compile in a private cache of Triton's own kind, which keeps IR
            env.pop("TRITON_CACHE_MANAGER", None)
            env.update(TRITON_CACHE_DIR=os.path.join(tmp, "cache"), TRITON_STORE_BINARY_ONLY="0")
            env[PROGRAM_CACHE_ENV] = _program_triton_cache()  # (saved tuning choices stay there)
        env.update(
            TORCHINDUCTOR_COMPILE_THREADS="1",
            # Inductor's graph caches would skip compiling (no dump); its autotune cache
            # stays on, so the dump takes the plain run's choices.
            TORCHINDUCTOR_FX_GRAPH_CACHE="0",
            TORCHINDUCTOR_AUTOGRAD_CACHE="0",
        )
        # The child must import this package as the parent does (editable install or not).
        pkg_root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_root, env.get("PYTHONPATH")) if p)
        cmd = [sys.executable, "-c", DUMP_CHILD, records_path, kind, target, *args]
        try:
            proc = subprocess.run(cmd, env=env, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            raise UserError(f"dump: the program ran longer than {timeout} s") from e
        records = _read_records(records_path)
        results, notes = _program_results(records, pattern)
        decisions = autotune_file.from_lines(autotune_lines_path(records_path))
    where = " ".join([target, *args])
    if not records:
        if not _gpu_visible():
            raise UserError(
                f"dump: {where} compiled no Triton kernel (exit code {proc.returncode}) and no "
                "CUDA GPU is visible here; without one, dump a kernel ahead of time: "
                "proton-inject dump --target cuda:90 FILE.py:KERNEL --signature ... "
                "(`proton-inject dump -h` has an example)")
        raise UserError(
            f"dump: {where} compiled no Triton kernel (exit code {proc.returncode}). Did it "
            "launch one on the GPU? Kernels served from an in-memory cache compile nothing."
        )
    if not results:
        raise UserError(
            f"dump: {where} compiled {len(records)} kernels, none named like --kernel {kernel!r}: "
            f"{', '.join(sorted({r['name'] for r in records}))}"
        )
    write_dump(results, out_dir)
    _mark_program_entries(out_dir, results, [target, *args])
    dumped = ProgramDump(results, len(records), proc.returncode, notes, decisions)
    if len(decisions):
        dumped.autotune_file = write_decisions(decisions, out_dir)
    return dumped


def autotune_lines_path(records_path: str) -> str:
    """Where the child appends the autotuning decisions (beside its compile records)."""
    return os.path.join(os.path.dirname(records_path), "autotune.jsonl")


def write_decisions(decisions: Any, out_dir: str | os.PathLike) -> Path:
    """Write the program's autotuning decisions beside the manifest; decisions an earlier dump
    into this directory recorded for other kernels or keys are kept."""
    old = autotune_file.find_file(out_dir)
    merged = autotune_file.Decisions()
    if old is not None and old.parent == Path(out_dir):
        try:
            merged = autotune_file.load(old)
        except ValueError:
            merged = autotune_file.Decisions()  # a damaged file is replaced
    merged.triton.update(decisions.triton)
    merged.inductor.update(decisions.inductor)
    merged.conflicts = decisions.conflicts
    return merged.write(out_dir)


def _read_records(path: str) -> list[dict[str, Any]]:
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _program_results(records: list[dict[str, Any]], pattern: Any) -> tuple[list[AotResult], list[str]]:
    """One ``AotResult`` per distinct (hash, kernel); notes for what was merged or dropped."""
    notes: list[str] = []
    by_key: dict[tuple[str, str], AotResult] = {}
    per_process: set[str] = set()
    for rec in records:
        if pattern and not pattern.search(rec["name"]):
            continue
        if rec.get("per_process_globals") and rec["name"] not in per_process:
            per_process.add(rec["name"])
            notes.append(
                f"{rec['name']}: its hash changes in every process (Triton hashes its constexpr "
                f"global(s) {', '.join(rec['per_process_globals'])} with their memory address), so "
                "no run finds this IR by hash; run instruments it from its own TTGIR with the tree's rules")
        if not rec.get("ttgir_path"):
            notes.append(f"{rec['name']} ({rec['hash']}): Triton's cache kept no TTGIR for it (the program "
                         "chose its cache?); left out: dump with TRITON_CACHE_DIR set to an empty directory")
            continue
        path = Path(rec["ttgir_path"])  # (this compile's own, in Triton's cache: checked)
        fix = "delete that directory, or dump with TRITON_CACHE_DIR set to an empty one"
        try:
            ttgir = read_text(path, "TTGIR", MAX_TTGIR_BYTES, fix)
        except FileError as e:
            notes.append(f"{rec['name']} ({rec['hash']}): {e}; left out")
            continue
        if not re.search(rf"tt\.func\b[^@\n]*@{re.escape(rec['name'])}\b", ttgir):
            notes.append(f"{rec['name']} ({rec['hash']}): {path} does not hold this kernel's TTGIR "
                         f"(a damaged cache entry?); left out: {fix}")
            continue
        r = AotResult(
            kernel_name=rec["name"], hash=rec["hash"], source_file=rec["source_file"],
            target=rec["target"], num_warps=rec["num_warps"], num_stages=rec["num_stages"],
            num_ctas=rec["num_ctas"], signature=rec["signature"], constexprs=rec["constexprs"],
            divisibility_16=rec["divisibility_16"], ttgir=ttgir,
            metadata={**rec["metadata"], "constexpr_args": rec.get("constexpr_args")},
            fn_key=rec.get("fn_key"),
        )  # fmt: skip
        key = (r.hash, r.kernel_name)
        prev = by_key.get(key)
        by_key[key] = r  # (the tree holds one file per override hash: the last compile's)
        if prev is not None and (prev.num_warps, prev.num_stages) != (r.num_warps, r.num_stages):
            # Triton's override hash leaves out num_warps/num_stages: autotune configs that
            # differ only there share one override file.
            notes.append(
                f"{r.kernel_name}: configs ({prev.num_warps} warps, {prev.num_stages} stages) and "
                f"({r.num_warps} warps, {r.num_stages} stages) share override hash {r.hash} "
                "(Triton's hash ignores num_warps/num_stages); the dump keeps the last compiled, "
                "and run instruments the other config from its own TTGIR with the tree's rules"
            )
    return list(by_key.values()), notes


def _mark_program_entries(out_dir: str | os.PathLike, results: list[AotResult], argv) -> None:
    """Tag the manifest entries this dump wrote as coming from a program run, each with the
    AOT command line that reproduces it."""
    manifest = read_dump_manifest(out_dir)
    mine = {(r.hash, r.kernel_name): r for r in results}
    for e in manifest["kernels"]:
        r = mine.get((e.get("hash"), e.get("name")))
        if r is not None:
            e["mode"] = "program"
            e["program"] = list(argv)
            e["aot_command"] = aot_command(r, out_dir)
    write_atomic(Path(out_dir) / MANIFEST_NAME, json.dumps(manifest, indent=2) + "\n")


def _gpu_visible() -> bool:
    """Whether torch sees a GPU here (a program that compiled nothing may have had none)."""
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def _cache_may_lack_ir() -> bool:
    """Whether Triton's cache here may keep no IR: it keeps binaries only
    (TRITON_STORE_BINARY_ONLY), or it is a cache manager of the program's own choosing."""
    import triton

    return bool(triton.knobs.compilation.store_binary_only) or bool(os.environ.get("TRITON_CACHE_MANAGER"))


def _program_triton_cache() -> str:
    """Where the program's Triton cache is (TRITON_CACHE_DIR, else Triton's default)."""
    import triton

    return str(triton.knobs.cache.dir)


def _dump_child(argv: list[str]) -> int:
    """In the child: record every kernel compile, then run the program as ``__main__``."""
    import runpy
    import traceback

    records_path, kind, target, *args = argv
    import triton

    program_cache = os.environ.pop(PROGRAM_CACHE_ENV, "")
    try:  # the program's autotuning decisions, for run to use the same configs
        patch_inductor = tuning.record_in_child(autotune_lines_path(records_path), program_cache)
    except Exception as e:  # never break the user's program over it
        print(f"proton-inject dump: autotuning decisions are not recorded: {e}", file=sys.stderr)
        patch_inductor = None

    def listener(*, src, metadata, metadata_group, times, cache_hit):
        if patch_inductor is not None:
            patch_inductor()  # Inductor compiles its kernels before it autotunes them
        fn = getattr(src, "fn", None)
        if fn is None:  # an IR file, not a kernel of the program
            return
        try:
            rec = _describe_compile(src, metadata, metadata_group)
        except Exception as e:  # never break the user's program over a manifest detail
            print(f"proton-inject dump: could not describe a kernel: {e}", file=sys.stderr)
            return
        with open(records_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(rec) + "\n")

    triton.knobs.compilation.listener = listener
    sys.argv = [target, *args]
    try:
        if kind == "path":
            sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
            runpy.run_path(target, run_name="__main__")
        else:
            sys.path.insert(0, os.getcwd())
            runpy.run_module(target, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        print(e.code, file=sys.stderr)
        return 1
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


def _describe_compile(src, metadata: dict[str, Any], metadata_group: dict[str, str]) -> dict:
    """A JSON record of one compile: what the manifest needs and where its TTGIR is."""
    import inspect

    fn = src.fn
    target = metadata.get("target")
    target_text = f"{target.backend}:{target.arch}" if hasattr(target, "backend") else str(target)
    inner = getattr(fn, "fn", None)
    try:
        source_file = inspect.getsourcefile(inner) if inner is not None else None
    except TypeError:
        source_file = None
    facts = source_facts(src)
    ttgir_path = next((p for k, p in metadata_group.items() if k.endswith(".ttgir")), None)
    return {
        "name": fn.__name__,
        "hash": override_hash(src),
        "source_file": source_file or getattr(fn, "__module__", "") or "",
        "target": target_text,
        "num_warps": int(metadata.get("num_warps", 0)),
        "num_stages": int(metadata.get("num_stages", 0)),
        "num_ctas": int(metadata.get("num_ctas", 1)),
        **facts,
        # (source_facts names the constexprs in the order src.constants holds them)
        "constexpr_args": dict(zip(facts["constexprs"], map(constexpr_text, dict(src.constants).values()),
                                   strict=True)),
        "kernel_attr": fn.__name__,
        "ttgir_path": ttgir_path,
        "metadata": {
            "hash": metadata.get("hash"),
            "shared": metadata.get("shared"),
            "triton_version": metadata.get("triton_version"),
        },
    }
