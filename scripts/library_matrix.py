#!/usr/bin/env python3
"""The real-library matrix (issue 27, item 7): each library's program plain and under proton-inject.

For each program in tests/gpu/programs/ (FlagGems through use_gems, Liger-Kernel, fla,
Inductor default and reduce-overhead) this runs, each as its own process:

  plain (twice: is the program deterministic?)
  proton-inject profile -o W/profile --no-report -- python PROG
  proton-inject dump -o W/dump -- python PROG;  insert W/dump -o W/inst;  run W/inst -o W/run -- python PROG
  proton-inject report W/profile --json;  report W/run --json

and compares every tool run's stdout with the last plain run's, line by line (each program
prints ``op sha256`` lines): with the default ``--caches shared`` the tool's runs come after
it and find the caches, autotune choices included (TRITON_CACHE_AUTOTUNING=1), as it left them. One table row per
(library, path): kernels with instrumented builds, kernels with launches kept, launches
kept and decoded, whether every output is byte-identical (or which ops differ), wall time
plain vs tool. run.json (the tool's index of
a run) gives the kernels, the kept launches and why others were dropped; ``report --json``
gives the decoded launches.

    PYTHONPATH=. python scripts/library_matrix.py --out matrix_out               # everything
    PYTHONPATH=. python scripts/library_matrix.py --out m liger fla --paths profile

matrix.md and matrix.json in --out are rewritten after every step, and every subprocess's
stdout and stderr go to --out/logs/LIBRARY/STEP.{stdout,stderr} (with a gzipped copy of each
run.json), so a run cut off by a time limit (--timeout per step, --budget in all, or SIGTERM)
keeps what it did. The tool's own outputs (traces, dumps) go to --work (default --out/work).
A step that fails is a row with its error; the script itself exits 0 unless its arguments
are wrong. Standard library only; proton-inject runs as ``python -m proton_inject.cli`` with
the checkout on PYTHONPATH (see --cli).

On a GPU machine without network, with the pinned wheels in .whl/ (lark, google-re2, liger-kernel 0.8.5,
fla-core 0.6.0, einops, flag-gems 5.0.2, SQLAlchemy 2.0.48 for FlagGems' config cache):

    python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
    PYTHONPATH=$PWD:/tmp/site python3 scripts/library_matrix.py --out OUT --work /tmp/lm_work \
        --jobs 5 --budget 560 --timeout 420
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MARKER = ".library_matrix"  # in each work dir this script made (it only ever removes those)
BIG_LOG = 4 << 20  # a step's stdout larger than this is kept gzipped


@dataclass(frozen=True)
class Program:
    """A program of tests/gpu/programs and the module it needs."""

    script: str
    args: tuple[str, ...] = ()
    module: str | None = None  # checked with find_spec before running
    quick_args: tuple[str, ...] = ()  # what --quick adds

    def argv(self, quick: bool) -> list[str]:
        return [str(ROOT / self.script), *self.args, *(self.quick_args if quick else ())]


PROGRAMS: dict[str, Program] = {
    "flaggems": Program("tests/gpu/programs/flaggems_ops.py", module="flag_gems", quick_args=("--quick",)),
    "liger": Program("tests/gpu/programs/liger_prog.py", module="liger_kernel"),
    "fla": Program("tests/gpu/programs/fla_prog.py", module="fla"),
    "inductor-default": Program("tests/gpu/programs/inductor_prog.py", ("--mode", "default")),
    "inductor-reduce-overhead": Program("tests/gpu/programs/inductor_prog.py", ("--mode", "reduce-overhead")),
}
PATHS = ("profile", "run")
COLUMNS = ("library", "path", "exit", "kernels instrumented", "kernels with launches kept",
           "launches kept", "launches decoded", "outputs identical", "plain s", "tool s", "notes")
_KERNEL_LINE = re.compile(r"^kernel (.+?): (\d+) instrumented builds?, (\d+) launches kept")
_VERSIONS = r"""
import json, sys, importlib.metadata as md
out = {"python": sys.version.split()[0]}
for d in ("torch", "triton", "liger-kernel", "liger_kernel", "fla-core", "flag_gems", "flag-gems", "einops",
          "lark", "sqlalchemy", "transformers", "proton-inject"):
    try:
        out[d] = md.version(d)
    except Exception:
        pass
try:
    import torch
    out["cuda"] = torch.version.cuda
    out["gpu"] = torch.cuda.get_device_name() if torch.cuda.is_available() else None
except Exception as e:
    out["gpu"] = f"error: {e!r}"
print(json.dumps(out))
"""


# --- running one step --------------------------------------------------------------------


class Matrix:
    """The whole run: options, the results so far, and writing them after every step."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out = Path(args.out).resolve()
        self.work = Path(args.work).resolve() if args.work else self.out / "work"
        self.logs = self.out / "logs"
        self.cli = shlex.split(args.cli) if args.cli else [sys.executable, "-m", "proton_inject.cli"]
        self.python = args.python or sys.executable
        self.deadline = time.monotonic() + args.budget if args.budget else None
        self.lock = threading.RLock()  # re-entrant: the SIGTERM handler may interrupt a write
        self.active: dict[subprocess.Popen, tuple[str, dict[str, Any]]] = {}  # running steps
        self.started = time.strftime("%Y-%m-%d %H:%M:%S %z")
        self.meta: dict[str, Any] = {}
        self.libs: dict[str, dict[str, Any]] = {}  # name -> {"steps": {...}, "rows": [...]}

    # -- environment --

    def env(self, lib: str, step: str) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        env["PYTHONUNBUFFERED"] = "1"
        if self.args.caches != "user":
            base = self.work / lib / "caches"
            if self.args.caches == "fresh":
                base = base / step
            env["TRITON_CACHE_DIR"] = str(base / "triton")
            env["FLAGGEMS_CACHE_DIR"] = str(base / "flaggems")
            env["TORCHINDUCTOR_CACHE_DIR"] = str(base / "inductor")
        if self.args.caches == "shared":
            # Triton's autotuner saves its choices beside the builds, so every run after the
            # first takes the first one's (else each process tunes again, and near-tied
            # configs, as FlagGems' layer_norm on an H100, make even two plain runs differ).
            env["TRITON_CACHE_AUTOTUNING"] = "1"
        return env

    def left(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.monotonic()

    def step(self, lib: str, name: str, argv: list[str]) -> dict[str, Any]:
        """Run one subprocess with its stdout and stderr streamed to files; never raises."""
        logs = self.logs / lib
        logs.mkdir(parents=True, exist_ok=True)
        out_f, err_f = logs / f"{name}.stdout", logs / f"{name}.stderr"
        rec: dict[str, Any] = {"step": name, "argv": argv, "rc": None, "wall_s": None, "timed_out": False,
                               "stdout_file": str(out_f.relative_to(self.out)),
                               "stderr_file": str(err_f.relative_to(self.out)), "error": None}
        left = self.left()
        if left is not None and left < 5:
            rec["error"] = "skipped: --budget spent"
            self.record(lib, rec)
            return rec
        timeout = self.args.timeout if left is None else max(1.0, min(self.args.timeout, left))
        env = self.env(lib, name)
        print(f"[{time.strftime('%H:%M:%S')}] {lib} {name}: {shlex.join(argv)}", file=sys.stderr, flush=True)
        t0 = rec["t0"] = time.monotonic()
        try:
            with open(out_f, "wb") as fo, open(err_f, "wb") as fe:
                fe.write(f"$ {shlex.join(argv)}\n".encode())
                fe.flush()
                p = subprocess.Popen(argv, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL, cwd=ROOT, env=env,
                                     start_new_session=True)
                self.active[p] = (lib, rec)
                try:
                    rec["rc"] = p.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    rec["timed_out"] = True
                    rec["error"] = f"timed out after {timeout:.0f} s"
                    _kill_group(p)
                    rec["rc"] = p.returncode
                finally:
                    self.active.pop(p, None)
        except Exception as e:  # e.g. the interpreter or CLI not found
            rec["error"] = f"{type(e).__name__}: {e}"
        rec["wall_s"] = round(time.monotonic() - t0, 2)
        if out_f.is_file() and out_f.stat().st_size > BIG_LOG:  # report --json of many launches
            with open(out_f, "rb") as f, gzip.open(out_f.with_name(out_f.name + ".gz"), "wb") as g:
                shutil.copyfileobj(f, g)
            out_f.unlink()
            rec["stdout_file"] += ".gz"
        if rec["rc"] not in (0, None) and rec["error"] is None:
            rec["error"] = f"exit {rec['rc']}: {_last_line(err_f)}"
        self.record(lib, rec)
        return rec

    def stop(self, signum: int, frame: Any) -> None:
        """SIGTERM/SIGINT (e.g. an outer ``timeout``): end the running steps' process groups,
        mark them cut off, write what is there and exit."""
        for p, (lib, rec) in list(self.active.items()):
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            rec["error"] = f"cut off: the matrix got signal {signum} after {time.monotonic() - rec['t0']:.0f} s"
            rec["timed_out"] = True
            entry = self.libs.setdefault(lib, {"steps": {}, "rows": []})
            entry["steps"][rec["step"]] = rec
            entry["rows"].append({"library": lib, "path": f"({rec['step']})", "notes": rec["error"]})
        with self.lock:
            self.write()
        print(f"library_matrix: stopped by signal {signum}; wrote {self.out / 'matrix.md'}", file=sys.stderr)
        os._exit(128 + signum)

    def record(self, lib: str, rec: dict[str, Any]) -> None:
        with self.lock:
            self.libs.setdefault(lib, {"steps": {}, "rows": []})["steps"][rec["step"]] = rec
            self.write()

    def set_rows(self, lib: str, rows: list[dict[str, Any]]) -> None:
        with self.lock:
            self.libs.setdefault(lib, {"steps": {}, "rows": []})["rows"] = rows
            self.write()

    # -- output --

    def rows(self) -> list[dict[str, Any]]:
        return [r for name in self.libs for r in self.libs[name]["rows"]]

    def write(self) -> None:
        """matrix.json and matrix.md, written atomically (the caller holds the lock)."""
        data = {"format": "proton-inject-library-matrix", "version": 1, "started": self.started,
                "updated": time.strftime("%Y-%m-%d %H:%M:%S %z"), "command": sys.argv,
                "options": {k: v for k, v in vars(self.args).items()}, "meta": self.meta,
                "rows": self.rows(), "libraries": self.libs}
        _write_atomic(self.out / "matrix.json", json.dumps(data, indent=1, default=str) + "\n")
        _write_atomic(self.out / "matrix.md", self.markdown())

    def markdown(self) -> str:
        m = self.meta
        head = [f"# proton-inject library matrix ({self.started})", ""]
        ver = ", ".join(f"{k} {v}" for k, v in m.items() if k != "error" and v)
        if ver:
            head += [ver, ""]
        head += [f"Command: `{shlex.join(sys.argv)}`", "",
                 "| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
        lines = ["| " + " | ".join(_cell(r.get(c)) for c in COLUMNS) + " |" for r in self.rows()]
        return "\n".join(head + lines) + "\n"


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    return str(v).replace("|", "\\|").replace("\n", " ")


def _write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _kill_group(p: subprocess.Popen) -> None:
    """End the process group this script started for one step (the tool may have children)."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(p.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            p.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _last_line(path: Path) -> str:
    """The last non-empty line of a log (most often the error), shortened."""
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


# --- reading results ---------------------------------------------------------------------


def read_log(m: Matrix, rec: dict[str, Any]) -> str:
    """A step's stdout (gunzipped where it was big)."""
    path = m.out / rec["stdout_file"]
    if path.suffix == ".gz":
        with gzip.open(path, "rt", errors="replace") as f:
            return f.read()
    return path.read_text(errors="replace")


def read_lines(m: Matrix, rec: dict[str, Any] | None) -> list[tuple[str, str]] | None:
    """A step's stdout as (op, hash) pairs; None when the step did not run."""
    if not rec or (rec.get("rc") is None and (rec.get("error") or "").startswith("skipped")):
        return None
    try:
        text = read_log(m, rec)
    except OSError:
        return None
    pairs = []
    for ln in text.splitlines():
        name, _, value = ln.strip().partition(" ")
        if name:
            pairs.append((name, value))
    return pairs


def compare(ref: list[tuple[str, str]] | None, got: list[tuple[str, str]] | None) -> tuple[str, list[str]]:
    """'yes', or 'no: ops...' (which ops differ, are missing or extra), or '-' when either is absent."""
    if ref is None or got is None:
        return "-", []
    if ref == got:
        return "yes", []
    r, g = dict(ref), dict(got)
    differ = [n for n, _ in ref if n in g and g[n] != r[n]]
    missing = [n for n, _ in ref if n not in g]
    extra = [n for n, _ in got if n not in r]
    if not (differ or missing or extra):  # same pairs, another order or duplicates
        differ = ["(order)"]
    parts = differ + [f"{n} (missing)" for n in missing] + [f"{n} (extra)" for n in extra]
    return f"no: {', '.join(parts[:12])}{', ...' if len(parts) > 12 else ''}", parts


def read_index(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def index_summary(index: dict[str, Any] | None) -> dict[str, Any]:
    """Kernels instrumented, kernels with kept launches, kept launches, drops: from run.json."""
    if index is None:
        return {}
    instrumented: dict[str, int] = {}  # kernel -> instrumented builds
    kept_msg: dict[str, int] = {}
    for c in (index.get("compiled") or {}).values():  # profile: what each compile became
        if c.get("instrumented"):
            instrumented[c["kernel"]] = instrumented.get(c["kernel"], 0) + 1
    for msg in index.get("messages") or []:
        mt = _KERNEL_LINE.match(msg)
        if mt and int(mt.group(2)) > 0:
            instrumented[mt.group(1)] = max(instrumented.get(mt.group(1), 0), int(mt.group(2)))
            kept_msg[mt.group(1)] = int(mt.group(3))
    launches = index.get("launches") or []
    kept: dict[str, int] = {}
    for ln in launches:
        kept[ln["kernel"]] = kept.get(ln["kernel"], 0) + 1
    return {
        "kernels_instrumented": sorted(instrumented),
        "kernels_kept": sorted(kept),
        "launches_kept": len(launches),
        "launches_all_zero": sum(1 for ln in launches if ln.get("all_zero")),
        "graph_replays": sum(1 for ln in launches if ln.get("graph_replay") is not None),
        "dropped": index.get("dropped") or {},
        "in_cuda_graphs": index.get("in_cuda_graphs") or {},
        "compile_fallbacks": index.get("compile_fallbacks"),
        "without_kept_launches": sorted(k for k in instrumented if k not in kept),
        "messages": index.get("messages") or [],
    }


def report_summary(m: Matrix, rec: dict[str, Any] | None) -> dict[str, Any]:
    """Launches and kernels decoded, from ``report --json``'s stdout."""
    if not rec or rec.get("rc") != 0:
        return {}
    try:
        text = read_log(m, rec)
        data = json.loads(text[text.index("{"):])
    except (OSError, ValueError) as e:
        return {"error": f"report --json unreadable: {e}"}
    kernels = data.get("kernels") or []
    return {"launches_decoded": sum(len(k.get("launches") or []) for k in kernels),
            "kernels_decoded": sorted({k.get("kernel") for k in kernels}),
            "clock_sources": sorted({s for k in kernels for s in (k.get("clock") or {}).get("sources") or []})}


# --- one library -------------------------------------------------------------------------


def run_library(m: Matrix, lib: str) -> None:
    """Every step for one library, then its rows; a failure is a row, never an exception."""
    try:
        _run_library(m, lib)
    except Exception as e:  # a bug here must not lose the other libraries' rows
        m.set_rows(lib, [{"library": lib, "path": "-", "exit": "-", "notes": f"matrix script error: {e!r}"}])


def _run_library(m: Matrix, lib: str) -> None:
    prog = PROGRAMS[lib]
    a = m.args
    work = m.work / lib
    if work.exists():
        if not (work / MARKER).exists():
            m.set_rows(lib, [{"library": lib, "path": "-", "notes": f"{work} exists and was not made by this "
                              "script: choose another --work"}])
            return
        shutil.rmtree(work)
    work.mkdir(parents=True)
    (work / MARKER).write_text("made by scripts/library_matrix.py; removed by its next run\n")
    if prog.module and not _has_module(m, prog.module):
        m.set_rows(lib, [{"library": lib, "path": "-", "notes": f"skipped: {prog.module} is not installed"}])
        return
    argv = prog.argv(a.quick)
    tool_prog = ["--", "python", *argv]
    limit = ["--max-launches", str(a.max_launches)] if a.max_launches else []

    plains = [m.step(lib, f"plain{i + 1}", [m.python, *argv]) for i in range(max(1, a.plain_runs))]
    # The tool's runs follow the last plain run and share its caches (autotune choices
    # included), as a user's next run would: that run is the one they must match.
    ref_rec = plains[-1]
    ref = read_lines(m, ref_rec) if ref_rec.get("rc") == 0 else None
    rows = [_plain_row(m, lib, plains)]
    m.set_rows(lib, rows)

    if "profile" in a.paths:
        d = work / "profile"
        prof = m.step(lib, "profile", [*m.cli, "profile", "-o", str(d), "--no-report", *limit,
                                       *shlex.split(a.profile_args), *tool_prog])
        rep = _report(m, lib, "report-profile", d, prof)
        rows.append(_tool_row(m, lib, "profile", [prof], prof, d / "run.json", rep, ref, ref_rec))
        m.set_rows(lib, rows)

    if "run" in a.paths:
        dump_dir, inst, d = work / "dump", work / "inst", work / "run"
        dump = m.step(lib, "dump", [*m.cli, "dump", "-o", str(dump_dir), *tool_prog])
        steps = [dump]
        row = _tool_row(m, lib, "dump", [dump], dump, None, None, ref, ref_rec)
        row["kernels instrumented"] = None
        row["notes"] = "; ".join(x for x in (f"{_count_ttgir(dump_dir)} .ttgir files dumped", row["notes"]) if x)
        rows.append(row)
        m.set_rows(lib, rows)
        run = rep = None
        if dump.get("rc") == 0 or _count_ttgir(dump_dir):
            ins = m.step(lib, "insert", [*m.cli, "insert", str(dump_dir), "-o", str(inst),
                                         *shlex.split(a.insert_args)])
            steps.append(ins)
            if ins.get("rc") == 0:
                run = m.step(lib, "run", [*m.cli, "run", str(inst), "-o", str(d), *limit, *tool_prog])
                steps.append(run)
                rep = _report(m, lib, "report-run", d, run)
        rows.append(_tool_row(m, lib, "dump/insert/run", steps, run, d / "run.json", rep, ref, ref_rec))
        m.set_rows(lib, rows)
    print(render_rows(rows), file=sys.stderr, flush=True)


def _has_module(m: Matrix, module: str) -> bool:
    """Whether the programs' interpreter finds ``module`` (without importing it: FlagGems'
    import needs a GPU)."""
    code = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    try:
        return subprocess.run([m.python, "-c", code], env=m.env("-", "-"), timeout=120).returncode == 0
    except Exception:
        return False


def _count_ttgir(d: Path) -> int:
    return sum(1 for _ in d.rglob("*.ttgir")) if d.is_dir() else 0


def _report(m: Matrix, lib: str, name: str, d: Path, tool: dict[str, Any]) -> dict[str, Any] | None:
    """Keep a gzipped copy of the tool's run.json beside the logs (the work dir may not travel);
    then ``report D --json`` where the tool wrote raw launches."""
    if (d / "run.json").is_file():
        try:
            with open(d / "run.json", "rb") as f, gzip.open(m.logs / lib / f"{tool['step']}.run.json.gz", "wb") as g:
                shutil.copyfileobj(f, g)
        except OSError as e:
            print(f"{lib}: could not copy {d / 'run.json'}: {e}", file=sys.stderr)
    if not (d / "raw").is_dir() or not any((d / "raw").iterdir()):
        return None
    return m.step(lib, name, [*m.cli, "report", str(d), "--json"])


def _plain_row(m: Matrix, lib: str, plains: list[dict[str, Any]]) -> dict[str, Any]:
    first = plains[0]
    ref = read_lines(m, first)
    notes = []
    if first.get("error"):
        notes.append(first["error"])
    errors = [n for n, v in ref or [] if v.startswith("error:")]
    if ref is not None:
        notes.append(f"{len(ref)} outputs")
    if errors:
        notes.append(f"ops failing plain: {', '.join(errors)}")
    same = "-"
    if len(plains) > 1:
        same, _ = compare(ref, read_lines(m, plains[1]) if plains[1].get("rc") == 0 else None)
        same = f"deterministic: {same}"
        if plains[1].get("error"):
            notes.append(f"second run: {plains[1]['error']}")
    return {"library": lib, "path": "plain", "exit": "/".join(str(p.get("rc")) for p in plains),
            "outputs identical": same, "plain s": "/".join(_secs(p) for p in plains), "tool s": None,
            "notes": "; ".join(notes), "errors": errors}


def _secs(rec: dict[str, Any] | None) -> str:
    return "-" if not rec or rec.get("wall_s") is None else f"{rec['wall_s']:.1f}"


def _tool_row(m: Matrix, lib: str, path: str, steps: list[dict[str, Any]], prog_step: dict[str, Any] | None,
              index_path: Path | None, rep: dict[str, Any] | None, ref: list[tuple[str, str]] | None,
              ref_rec: dict[str, Any]) -> dict[str, Any]:
    """One row for a tool path: the step that ran the program gives rc and stdout; run.json and
    the report give kernels and launches."""
    notes: list[str] = [f"{s['step']}: {s['error']}" for s in steps if s.get("error")]
    if rep and rep.get("error"):
        notes.append(f"{rep['step']}: {rep['error']}")
    elif rep and rep.get("wall_s") is not None:
        notes.append(f"{rep['step']} {rep['wall_s']:.1f} s")
    got = read_lines(m, prog_step) if prog_step and prog_step.get("rc") is not None else None
    same, _ = compare(ref, got)
    if ref is None:
        same = "- (no plain run to compare)"
    idx = index_summary(read_index(index_path)) if index_path and prog_step else {}
    rsum = report_summary(m, rep)
    if rsum.get("error"):
        notes.append(rsum["error"])
    if idx:
        if idx["without_kept_launches"]:
            w = idx["without_kept_launches"]
            notes.append(f"{len(w)} instrumented kernel(s) without kept launches: "
                         f"{', '.join(w[:8])}{', ...' if len(w) > 8 else ''}")
        if idx["dropped"]:
            notes.append("dropped: " + ", ".join(f"{n} {r}" for r, n in sorted(idx["dropped"].items())))
        if idx["in_cuda_graphs"]:
            notes.append(f"{sum(idx['in_cuda_graphs'].values())} launches in CUDA graphs unprofiled")
        if idx["graph_replays"]:
            notes.append(f"{idx['graph_replays']} kept launches are CUDA-graph replays")
        if idx["launches_all_zero"]:
            notes.append(f"{idx['launches_all_zero']} buffers all zero")
        if idx["compile_fallbacks"]:
            notes.append(f"compile fallbacks: {idx['compile_fallbacks']}")
        keys = ("Recursion", "failed", "not decoded", "hash", "left out", "error")
        notes += [f"tool: {s[:240]}" for s in idx["messages"]
                  if any(k in s for k in keys) and not _KERNEL_LINE.match(s)][:4]
        if rsum.get("clock_sources"):
            notes.append(f"clock: {', '.join(rsum['clock_sources'])}")
    elif index_path and prog_step and prog_step.get("rc") is not None:
        notes.append(f"no {index_path.name}")
    ninst = len(idx["kernels_instrumented"]) if idx else None
    nkept = len(idx["kernels_kept"]) if idx else None
    decoded = rsum.get("launches_decoded")
    if idx and rep is None and prog_step and prog_step.get("rc") is not None:
        decoded = 0  # nothing in raw/ to decode
    ratio = ""
    if prog_step and prog_step.get("wall_s") and ref_rec.get("wall_s"):
        ratio = f" ({prog_step['wall_s'] / ref_rec['wall_s']:.1f}x)"
    tool_s = "+".join(_secs(s) for s in steps) + ratio if steps else None
    return {"library": lib, "path": path,
            "exit": "/".join(str(s.get("rc")) for s in steps),
            "kernels instrumented": ninst,
            "kernels with launches kept": None if nkept is None else
            f"{nkept}/{ninst}" + (f" ({100 * nkept / ninst:.0f}%)" if ninst else ""),
            "launches kept": idx.get("launches_kept") if idx else None,
            "launches decoded": decoded,
            "outputs identical": same, "plain s": _secs(ref_rec), "tool s": tool_s,
            "notes": "; ".join(notes),
            "detail": {"index": {k: v for k, v in idx.items() if k != "messages"} if idx else None,
                       "report": rsum or None}}


def render_rows(rows: list[dict[str, Any]]) -> str:
    return "\n".join("| " + " | ".join(_cell(r.get(c)) for c in COLUMNS) + " |" for r in rows)


# --- main --------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[1:]))
    ap.add_argument("libraries", nargs="*", metavar="LIBRARY",
                    help=f"which programs (default: all): {', '.join(PROGRAMS)}")
    ap.add_argument("--out", required=True, help="where matrix.md, matrix.json and logs/ go")
    ap.add_argument("--work", help="where the tool's outputs go (default: OUT/work); emptied per library")
    ap.add_argument("--paths", default=",".join(PATHS),
                    help="comma-separated tool paths: profile, run (dump/insert/run); default both")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per subprocess (default 600)")
    ap.add_argument("--budget", type=float, default=0,
                    help="seconds for the whole matrix: later steps are skipped (default: no limit)")
    ap.add_argument("--plain-runs", type=int, default=2, help="plain runs per library (default 2)")
    ap.add_argument("--jobs", type=int, default=1,
                    help="libraries run at once (default 1; more share the GPU, so wall times grow)")
    ap.add_argument("--cli", help="the proton-inject command (default: this python -m proton_inject.cli)")
    ap.add_argument("--python", help="interpreter for the plain runs (default: this one)")
    ap.add_argument("--profile-args", default="", help="extra options for profile, e.g. '--kernel-scope --loops both'")
    ap.add_argument("--insert-args", default="", help="extra options for insert, e.g. '--kernel-scope --loops both'")
    ap.add_argument("--max-launches", type=int, help="passed to profile and run")
    ap.add_argument("--quick", action="store_true", help="smaller programs where they have --quick (FlagGems: 12 ops)")
    ap.add_argument("--caches", choices=("shared", "fresh", "user"), default="shared",
                    help="TRITON_CACHE_DIR, FLAGGEMS_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR: one empty set per "
                         "library shared by its runs (default; the first plain run tunes and compiles, and "
                         "TRITON_CACHE_AUTOTUNING=1 saves its choices), "
                         "one empty set per run (every run tunes), or the user's own")
    args = ap.parse_args(argv)
    args.libraries = list(dict.fromkeys(args.libraries)) or list(PROGRAMS)
    unknown = [n for n in args.libraries if n not in PROGRAMS]
    if unknown:
        ap.error(f"unknown library {', '.join(unknown)} (choose from {', '.join(PROGRAMS)})")
    args.paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    bad = [p for p in args.paths if p not in PATHS]
    if bad:
        ap.error(f"--paths: unknown {', '.join(bad)} (choose from {', '.join(PATHS)})")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    m = Matrix(args)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, m.stop)
    m.out.mkdir(parents=True, exist_ok=True)
    m.work.mkdir(parents=True, exist_ok=True)
    rec = m.step("_meta", "versions", [m.python, "-c", _VERSIONS])
    try:
        m.meta = json.loads((m.out / rec["stdout_file"]).read_text().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        m.meta = {"error": rec.get("error") or "could not read versions"}
    with m.lock:
        m.write()
    if args.jobs > 1:
        with ThreadPoolExecutor(args.jobs) as pool:
            list(pool.map(lambda lib: run_library(m, lib), args.libraries))
    else:
        for lib in args.libraries:
            run_library(m, lib)
    with m.lock:
        m.write()
    print((m.out / "matrix.md").read_text())
    print(f"wrote {m.out / 'matrix.md'}, {m.out / 'matrix.json'}, logs in {m.logs}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
