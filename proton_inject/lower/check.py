"""``proton-inject check``: prove instrumented TTGIR compiles, on a machine with no GPU.

Each file goes through Triton's own pipeline (TTGIR -> LLVM -> PTX -> cubin, or -> hsaco) with
the same Proton lowering the runtime installs (``lowering.installed``), in a private temporary
cache so neither the user's cache nor an earlier build can answer for it. A broken file can
make LLVM abort the whole process, so ``check_paths`` compiles in a worker subprocess and
restarts it after a crash; ``check_file`` is the in-process step that worker runs.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from proton_inject.errors import UserError
from proton_inject.formats.files import find_ttgir, write_atomic
from proton_inject.formats.raw import BufferType
from proton_inject.formats.schema import read_ttgir
from proton_inject.lower.options import (
    Lowering,
    LoweringOptions,
    max_shared_mem_for,
    profile_buffer_bytes,
    profile_scratch_bytes,
    records_per_segment,
)
from proton_inject.lower.probes import num_warps_of
from proton_inject.lower.proton import installed, scope_names_of
from proton_inject.ttgir import parse

_TARGET_RE = re.compile(r'\bttg\.target\s*=\s*"([^"]+)"')
# Lines of MLIR/LLVM diagnostics worth showing; the reproducer dump around them is not.
_SCOPE_ERROR_RE = re.compile(r"error: The scope name '[^']*' ")
_DIAG_RE = re.compile(r"(?:^|\s)(?:error|warning|note):|^LLVM ERROR:|^ptxas|error :", re.I)


@dataclass
class CheckReport:
    """The result of compiling one instrumented TTGIR file for one target."""

    path: str
    target: str
    ok: bool
    kernel: str = ""
    num_warps: int = 0
    regions: list[tuple[int, str]] = field(default_factory=list)  # (scope id, name)
    parents: list[tuple[int, int]] = field(default_factory=list)  # (child id, parent id)
    profile_scratch_bytes: int = 0  # global scratch per CTA the records are flushed to
    shared_bytes: int = 0  # shared memory per CTA, a shared record buffer included
    buffer_bytes: int | None = None  # the record buffer (in shared_bytes, or in the scratch)
    buffer_type: str = "shared"  # where the records live while the kernel runs
    max_shared: int = 0  # the target's shared memory limit per CTA used for sizing
    records_per_warp: int | None = None
    recording_warps: list[int] | None = None  # None: every warp records
    persistent: bool = False  # every warp records by default: a persistent kernel
    binary_bytes: int = 0
    seconds: float = 0.0
    error: str = ""
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> CheckReport:
        d = dict(d)
        d["regions"] = [tuple(x) for x in d.get("regions", [])]
        d["parents"] = [tuple(x) for x in d.get("parents", [])]
        return cls(**d)


# --- targets ------------------------------------------------------------------------


def _parse_target(text: str):
    from proton_inject.lower.target import parse_target

    return parse_target(text)


def file_target(text: str) -> str | None:
    """The ``ttg.target`` module attribute of a TTGIR text (``"cuda:90"``), or None."""
    m = _TARGET_RE.search(text)
    return m.group(1) if m else None


def _canonical(target: str) -> str:
    t = _parse_target(target)
    return f"{t.backend}:{t.arch}"


# --- capturing the compiler's diagnostics -------------------------------------------


@contextmanager
def _fd2_to(path: str) -> Iterator[None]:
    """Send file descriptor 2 (where MLIR and LLVM print) to ``path`` for the duration."""
    sys.stderr.flush()
    saved = os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.dup2(fd, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)


def diagnostics(text: str, limit: int = 20) -> str:
    """The error/note lines of compiler output with their source and caret lines."""
    lines = text.splitlines()
    keep: list[str] = []
    for i, line in enumerate(lines):
        if not _DIAG_RE.search(line) or "reproducer" in line:
            continue
        keep.append(line.rstrip())
        # MLIR follows a located error with the source line and a caret line.
        if i + 2 < len(lines) and lines[i + 2].strip() == "^":
            keep.extend([lines[i + 1].rstrip(), lines[i + 2].rstrip()])
    seen: set[str] = set()
    out = [x for x in keep if not (x in seen or seen.add(x))]
    if len(out) > limit:
        out = out[:limit] + [f"... ({len(out) - limit} more lines)"]
    return "\n".join(out)


# --- one file -------------------------------------------------------------------------


def record_buffer_share(
    total: int, num_warps: int, max_shared: int, options: LoweringOptions
) -> int | None:
    """The record buffer's share of ``total`` shared bytes (None if it cannot be told)."""
    segments = options.segments(num_warps)
    candidates = set()
    per = 8
    while per * segments <= total:
        candidates.add(per * segments)
        per *= 2
    if options.buffer_size:
        candidates.add(-(-options.buffer_size // 8) * 8)
    for b in sorted(candidates, reverse=True):
        if profile_buffer_bytes(max_shared, total - b, num_warps, options) == b:
            return b
    return None


def _global_buffer(scratch: int, num_warps: int, options: LoweringOptions) -> int | None:
    """The global record buffer's size, if the predicted one explains ``scratch`` bytes."""
    b = profile_buffer_bytes(0, 0, num_warps, options)
    return b if profile_scratch_bytes(b, num_warps) == scratch else None


def check_file(
    path: str | os.PathLike,
    target: str | None = None,
    options: LoweringOptions | None = None,
    diag_path: str | None = None,
) -> CheckReport:
    """Compile one instrumented TTGIR file for ``target`` (default: its ``ttg.target``).

    Returns a report with ``ok`` False and the compiler's message when the compile fails;
    raises ``UserError`` for a missing file or an unusable target. A kernel with noinline
    callees (several functions, as the compiler prints them) is compiled with its callees
    inlined, as ``insert`` does: Proton's lowering takes one function per module.
    """
    p = Path(path)
    raw = read_ttgir(p)
    text = raw.decode("utf-8", errors="replace")
    # Parsed here, with its name, before the probes below read it: a damaged file is named
    # in the message (they parse the bare text and would call it <string>).
    module = parse(text, str(path))
    own = file_target(text)
    if target is None:
        if own is None:
            raise UserError(f"{path}: has no ttg.target attribute; pass --target (e.g. cuda:90)")
        target = own
    gpu_target = _parse_target(target)
    with tempfile.TemporaryDirectory(prefix="proton-inject-check-") as tmp:
        if len(module.functions) > 1:
            from proton_inject.lower.inline import inline_callees

            try:  # (latin-1 in, so that MLIR reads the file's own bytes)
                text = inline_callees(raw.decode("latin-1"), module, str(path))
            except UserError as e:
                report, _ = _new_report(str(path), text, gpu_target, options or LoweringOptions())
                report.error = str(e)
                return report
            p = Path(tmp) / p.name
            p.write_text(text, encoding="utf-8")
        report, options = _new_report(str(path), text, gpu_target, options or LoweringOptions())
        if report.error:
            return report
        start = time.perf_counter()
        try:
            compiled = _compile(report, p, gpu_target, options, diag_path, tmp)
            if compiled is not None:
                _read_build(report, compiled, text, options)
        finally:
            report.seconds = round(time.perf_counter() - start, 3)
    return report


def _new_report(path: str, text: str, gpu_target, options: LoweringOptions
                ) -> tuple[CheckReport, LoweringOptions]:
    """The report before compiling (its ``error`` set for options the target cannot lower),
    and the options as the lowering decides them for this kernel."""
    # What the lowering decides per kernel (recording warps, --buffer-size auto), decided here
    # the same way, so the sizes below are predicted for the options it really used.
    chosen = options.warps == "first"
    options = options.for_kernel(text, max_shared_mem_for(gpu_target),
                                 hip=gpu_target.backend == "hip")
    recording = list(options.selected) if options.selected else None
    tname = f"{gpu_target.backend}:{gpu_target.arch}"
    report = CheckReport(
        path=path, target=tname, ok=False, num_warps=num_warps_of(text) or 0,
        buffer_type=options.buffer_type, recording_warps=recording,
        persistent=chosen and recording is None,
    )  # fmt: skip
    report.max_shared = max_shared_mem_for(gpu_target)
    if "proton.record" not in text:
        report.warnings.append("no proton.record in this file: nothing would be profiled")
    if gpu_target.backend == "cuda" and options.granularity != "warp":
        report.error = (
            f"--granularity {options.granularity}: Triton 3.6's NVIDIA Proton lowering supports "
            "warp granularity only ('granularity must be warp for now'); use --granularity warp"
        )
    elif gpu_target.backend == "hip" and options.buffer_type == BufferType.GLOBAL:
        report.error = (
            "--buffer-type global: Triton 3.6's AMD Proton lowering does not implement record "
            "stores to global memory (LLVM ERROR: unimplemented); use --buffer-type shared"
        )
    return report, options


def _compile(report: CheckReport, p: Path, gpu_target, options: LoweringOptions,
             diag_path: str | None, tmp: str):
    """``p`` compiled with the lowering in a private cache, and its scopes read into
    ``report``; None (``report.error`` set from the compiler's diagnostics) when it fails."""
    import triton

    if diag_path is None:
        diag_path = str(Path(tmp) / "diagnostics.log")
    cache_dir = Path(tmp) / "cache"
    with triton.knobs.cache.scope(), triton.knobs.compilation.scope():
        triton.knobs.cache.dir = str(cache_dir)
        triton.knobs.compilation.override = False
        triton.knobs.compilation.dump_ir = False
        triton.knobs.compilation.always_compile = True
        try:
            with _fd2_to(diag_path), installed(options, target=gpu_target):
                # The IR path leaves the mode out of the options unless asked.
                mode = triton.knobs.compilation.instrumentation_mode
                compiled = triton.compile(
                    str(p), target=gpu_target, options={"instrumentation_mode": mode}
                )
                # Only after a clean compile: the scope analysis can crash on bad IR.
                report.regions, report.parents = scope_names_of(str(p))
        except Exception as e:  # the compiler's errors carry no common base class
            captured = Path(diag_path).read_text(errors="replace")
            detail = diagnostics(captured)
            report.error = detail or f"{type(e).__name__}: {e}"
            if detail and str(e) and str(e) not in detail:
                report.error += f"\n({type(e).__name__}: {str(e).splitlines()[0]})"
            return None
        # The scope analysis reports unpaired records as errors but the compile goes
        # on, giving scope ids that do not pair: a run would decode nonsense.
        captured = Path(diag_path).read_text(errors="replace")
        if _SCOPE_ERROR_RE.search(captured):
            report.error = diagnostics(captured)
            return None
    return compiled


def _read_build(report: CheckReport, compiled, text: str, options: LoweringOptions) -> None:
    """The build's sizes into ``report``, with warnings for what would fail at launch."""
    md = compiled.metadata
    report.kernel = str(md.name)
    report.num_warps = int(md.num_warps)
    report.profile_scratch_bytes = int(getattr(md, "profile_scratch_size", 0) or 0)
    report.shared_bytes = int(md.shared or 0)
    binary = compiled.asm.get("cubin") or compiled.asm.get("hsaco") or b""
    report.binary_bytes = len(binary)
    if report.profile_scratch_bytes and options.lowering == Lowering.DIRECT:
        from proton_inject.lower import direct

        report.buffer_bytes = direct.data_bytes(text, options.buffer_size,
                                                options.sample_iterations)
        report.records_per_warp = report.buffer_bytes // 4
    elif report.profile_scratch_bytes:
        if options.buffer_type == BufferType.GLOBAL:
            b = _global_buffer(report.profile_scratch_bytes, report.num_warps, options)
        else:
            b = record_buffer_share(
                report.shared_bytes, report.num_warps, report.max_shared, options
            )
        report.buffer_bytes = b
        if b is not None:
            report.records_per_warp = records_per_segment(b, report.num_warps, options)
            if report.records_per_warp == 0:
                report.warnings.append(
                    "the record buffer holds no record per warp: raise --buffer-size"
                )
    if report.shared_bytes > report.max_shared:
        advice = (
            "the kernel itself needs more than the GPU has"
            if options.in_global_memory
            else "lower --buffer-size or use --buffer-type global"
        )
        report.warnings.append(
            f"shared memory {report.shared_bytes} B exceeds {report.target}'s "
            f"{report.max_shared} B per CTA: the launch will fail; {advice}"
        )
    warps = options.selected
    if warps and report.num_warps and max(warps) >= report.num_warps and (
        "ttg.warp_specialize" not in text
    ):
        report.warnings.append(
            f"--warps {','.join(map(str, warps))}: this kernel has only "
            f"{report.num_warps} warps"
        )
    report.ok = True


# --- many files, isolated ---------------------------------------------------------------


@dataclass
class _Job:
    path: str
    target: str


def plan(
    paths: Iterable[str | os.PathLike], targets: Sequence[str] | None
) -> tuple[list[_Job], list[str]]:
    """Which (file, target) pairs to compile, and a note for each file left out.

    A TTGIR file is made for one target (its ``ttg.target``): ``--target`` picks the files made
    for those targets; a file with no ``ttg.target`` is compiled for each target given.
    """
    wanted = [_canonical(t) for t in targets] if targets else []
    jobs: list[_Job] = []
    skipped: list[str] = []
    for f in find_ttgir(paths):
        own = file_target(read_ttgir(f).decode("utf-8", errors="replace"))
        own_c = _canonical(own) if own else None
        if not wanted:
            if own_c is None:
                raise UserError(f"{f}: has no ttg.target attribute; pass --target (e.g. cuda:90)")
            jobs.append(_Job(str(f), own_c))
        elif own_c is None:
            jobs.extend(_Job(str(f), t) for t in wanted)
        elif own_c in wanted:
            jobs.append(_Job(str(f), own_c))
        else:
            skipped.append(f"{f}: made for {own_c}, not among --target {', '.join(wanted)}")
    if not jobs:
        detail = "\n  ".join(skipped)
        raise UserError(f"no file to check for the targets given:\n  {detail}")
    return jobs, skipped


def _worker_cmd() -> list[str]:
    return [sys.executable, "-m", "proton_inject.lower.check", "--worker"]


def check_paths(
    paths: Iterable[str | os.PathLike],
    targets: Sequence[str] | None = None,
    options: LoweringOptions | None = None,
    isolate: bool = True,
) -> tuple[list[CheckReport], list[str]]:
    """Check every TTGIR file under ``paths``; returns the reports and the skipped-file notes.

    With ``isolate`` (the default) the compiles run in a worker process, restarted when LLVM
    aborts on a file, so one bad file yields a failed report instead of killing the check.
    """
    options = options or LoweringOptions()
    jobs, skipped = plan(paths, targets)
    if not isolate:
        return [check_file(j.path, j.target, options) for j in jobs], skipped
    reports: list[CheckReport] = []
    with tempfile.TemporaryDirectory(prefix="proton-inject-check-") as tmp:
        diag = os.path.join(tmp, "diag.log")
        errlog = os.path.join(tmp, "worker.log")
        while len(reports) < len(jobs):
            reports.extend(_run_worker(jobs[len(reports) :], options, diag, errlog))
    return reports, skipped


def _run_worker(
    jobs: list[_Job], options: LoweringOptions, diag: str, errlog: str
) -> list[CheckReport]:
    """Run jobs in one worker until done or it dies; a death fails the job in flight."""
    with open(errlog, "w") as err:
        proc = subprocess.Popen(
            _worker_cmd(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True
        )
    assert proc.stdin and proc.stdout
    out: list[CheckReport] = []
    try:
        for job in jobs:
            msg = {
                "path": job.path,
                "target": job.target,
                "options": options.to_json(),
                "diag": diag,
            }
            try:
                proc.stdin.write(json.dumps(msg) + "\n")
                proc.stdin.flush()
                line = proc.stdout.readline()
            except BrokenPipeError:
                line = ""
            if not line:
                proc.wait()
                text = Path(diag).read_text(errors="replace") if os.path.exists(diag) else ""
                err = diagnostics(text) or Path(errlog).read_text(errors="replace")[-2000:]
                out.append(
                    CheckReport(
                        path=job.path,
                        target=job.target,
                        ok=False,
                        error=f"the compiler crashed (exit {proc.returncode}):\n{err}".rstrip(),
                    )  # fmt: skip
                )
                return out
            reply = json.loads(line)
            if "user_error" in reply:
                raise UserError(reply["user_error"])
            out.append(CheckReport.from_json(reply))
        return out
    finally:
        if proc.poll() is None:
            proc.stdin.close()
            proc.wait(timeout=60)
        proc.stdout.close()


def _worker_main() -> int:
    """Read jobs as JSON lines on stdin, answer each with a report line on stdout."""
    reply_to = sys.stdout
    sys.stdout = sys.stderr  # anything the compiler prints must not corrupt the replies
    for line in sys.stdin:
        job = json.loads(line)
        opts = dict(job["options"])
        if isinstance(opts.get("warps"), list):
            opts["warps"] = tuple(opts["warps"])
        try:
            rep = check_file(job["path"], job["target"], LoweringOptions(**opts), job["diag"])
            reply = rep.to_json()
        except UserError as e:
            reply = {"user_error": str(e)}
        reply_to.write(json.dumps(reply) + "\n")
        reply_to.flush()
    return 0


# --- printing -----------------------------------------------------------------------


def _region_text(r: CheckReport) -> str:
    if not r.regions:
        return "no regions"
    names = dict(r.regions)
    parent = dict(r.parents)
    parts = []
    for sid, name in sorted(r.regions):
        p = parent.get(sid)
        parts.append(f"{sid} {name!r}" + (f" (in {names.get(p, p)!r})" if p is not None else ""))
    return f"{len(r.regions)} region{'s' if len(r.regions) != 1 else ''}: " + ", ".join(parts)


def format_report(r: CheckReport) -> str:
    """A few lines describing one report, as ``check`` prints them."""
    head = f"{'ok  ' if r.ok else 'FAIL'} {r.target:<11} {r.kernel or Path(r.path).stem}  {r.path}"
    lines = [head]
    if r.ok:
        lines.append(f"     {_region_text(r)}")
        if r.recording_warps:
            ws = r.recording_warps  # ids: "warp 0 of 8", never a bare 0 that reads as none
            lines.append(f"     recording warps: warp{'s' if len(ws) > 1 else ''} "
                         f"{','.join(map(str, ws))} of {r.num_warps}; every warp with --warps all")
        elif r.persistent:
            lines.append("     recording warps: every warp (a persistent kernel: its CTAs loop "
                         "over tiles; --warps 0: one)")
        if r.profile_scratch_bytes and r.buffer_type in (BufferType.GLOBAL, BufferType.DIRECT):
            records = (
                f" ({r.buffer_bytes} B of records, "
                + (f"{r.records_per_warp} clock slots)" if r.buffer_type == BufferType.DIRECT else
                   f"{r.records_per_warp} records/warp)")
                if r.buffer_bytes is not None
                else ""
            )
            lines.append(
                f"     {r.num_warps} warps; shared memory {r.shared_bytes} B (kernel only) of "
                f"{r.max_shared}; {r.seconds:.2f}s"
            )
            lines.append(
                f"     records in global memory: profile scratch {r.profile_scratch_bytes} B/CTA"
                f"{records}" + (
                    "; stored by warp 0's first thread, no per-CTA set-up (--buffer-type direct)"
                    if r.buffer_type == BufferType.DIRECT else "")
            )
        elif r.profile_scratch_bytes:
            if r.buffer_bytes is not None:
                split = (
                    f" (kernel {r.shared_bytes - r.buffer_bytes} + records {r.buffer_bytes}, "
                    f"{r.records_per_warp} records/warp)"
                )
            else:
                split = ""
            lines.append(
                f"     {r.num_warps} warps; profile scratch {r.profile_scratch_bytes} B/CTA; "
                f"shared memory {r.shared_bytes} B{split} of {r.max_shared}; {r.seconds:.2f}s"
            )
        else:
            lines.append(
                f"     {r.num_warps} warps; no profile scratch; shared memory {r.shared_bytes} B"
            )
    else:
        lines.extend("     " + ln for ln in r.error.splitlines())
    lines.extend(f"     warning: {w}" for w in r.warnings)
    return "\n".join(lines)


def summary(reports: Sequence[CheckReport], skipped: Sequence[str]) -> str:
    """One closing line: how many compiled, failed, were skipped."""
    ok = sum(r.ok for r in reports)
    failed = len(reports) - ok
    targets = sorted({r.target for r in reports})
    n = len(reports)
    text = f"{ok} ok, {failed} failed ({n} compile{'s' if n != 1 else ''} for {', '.join(targets)})"
    if skipped:
        text += f", {len(skipped)} file{'s' if len(skipped) != 1 else ''} skipped"
    return text


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        sys.exit(_worker_main())
    sys.exit("usage: python -m proton_inject.lower.check --worker (internal; use proton-inject check)")


def leave_out_uncompilable(outputs: dict[str, str], manifest: dict, options=None) -> None:
    """Compile every instrumented file (`check`, no GPU) and move those that fail from
    `outputs` and the manifest's kernels to its `left_out`: they run unmodified."""
    import tempfile

    from proton_inject.lower.check import check_paths

    with tempfile.TemporaryDirectory(prefix="proton-inject-compile.") as tmp:
        for rel, text in outputs.items():
            write_atomic(Path(tmp) / rel, text.encode("latin-1"))
        reports, _ = check_paths([tmp], None, options)
        failed = {Path(r.path).relative_to(tmp).as_posix(): (r.error or "").replace(tmp + "/", "")
                  for r in reports if not r.ok}
    for rel, error in sorted(failed.items()):
        del outputs[rel]
        first = next((ln.strip() for ln in (error or "").splitlines() if ln.strip()), "")
        manifest["left_out"].append({"file": rel, "reason": "its instrumented IR does not "
                                     f"compile: {first[:300]}"})
    manifest["kernels"] = [k for k in manifest["kernels"] if k["file"] not in failed]
