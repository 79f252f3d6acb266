"""The Python API: collect a profile (a block or a whole program), then analyze it, once.

Collection (``collect/``) writes raw launches and run.json; analysis (``analyze/``) decodes
each of those launches once, writing its trace beside ``raw/`` and building the summary the
report prints. ``insert`` instruments a dump tree or a file by rules. ``cli.py`` is a thin
layer over these functions.
"""

from __future__ import annotations

import io
import os
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from proton_inject.analyze import hot_kernels
from proton_inject.analyze.report import ReportResult, run_report
from proton_inject.calibrate import calibrate_missing, visible_devices
from proton_inject.collect.compile_hook import TreeSource
from proton_inject.collect.device_kernels import DeviceKernelTimes
from proton_inject.collect.keep_policy import KeepPolicy
from proton_inject.collect.launches import RunResult
from proton_inject.collect.session import Session, check_out_dir, run_in_session, session_block
from proton_inject.errors import UserError
from proton_inject.formats import auto_report
from proton_inject.formats.diagnostics import headline
from proton_inject.formats.files import output_locks
from proton_inject.instrument.rules import Rules
from proton_inject.lower.options import LoweringOptions


def analyze_run(result: RunResult, gz: bool = True, plot: str | os.PathLike | None = None,
                raw: bool = False, progress: bool = False, trace_format: str = "perfetto",
                jobs: int | None = None, verbose: bool = False) -> ReportResult | None:
    """Decode the launches ``result`` wrote (this process's only: other ranks share ``out``)
    with ``jobs`` processes (None: one per core), write their traces into ``result.out`` and
    return the report; its warnings join the run's messages. None when no launch was kept or
    none could be decoded (said in the messages). ``progress``: a bar on a terminal's stderr."""
    raws = [Path(p) for p in result.files if str(p).endswith(".json") and Path(p).parent.name == "raw"]
    if not raws:
        return None
    try:
        rep = run_report(raws, plot=plot, trace_dir=result.out, gz=gz, raw=raw, progress=progress,
                         trace_format=trace_format, jobs=jobs, verbose=verbose)
    except UserError as e:  # the raw files stay; `report` can retry
        result.messages.append(f"no report: {e}")
        return None
    result.files += [str(f) for f in rep.files]
    result.messages += rep.warnings
    result.details += rep.details
    return rep


def _session(rules: Rules | dict | None, out: str | os.PathLike, instrumented: str | os.PathLike | None,
             options: LoweringOptions | None, kernel: str | None, max_launches: int | None,
             max_pending_mb: float, keep_tuning: bool, autotune_from: str | os.PathLike | None,
             gz: bool, cache: bool = True, measure_overhead: bool = False,
             keep_launches: KeepPolicy | str | None = None, clear_out: bool = True,
             time_all_kernels: bool = False) -> Session:
    if instrumented is None:
        if kernel is not None:
            raise UserError("kernel= selects kernels of an instrumented tree; with compile-time "
                            "instrumentation put it in the rules ({'kernel': REGEX})")
        source: Rules | dict | TreeSource | None = rules
    else:
        if rules is not None:
            raise UserError("rules= applies at compile time; an instrumented tree already holds "
                            "its records (give one or the other)")
        source = TreeSource(instrumented, kernel)
    session = Session(source, out, options, max_launches, max_pending_mb, keep_tuning,
                      autotune_from, keep=keep_launches)
    session.gz = gz
    session.builds.enabled = cache
    session.measure_overhead = measure_overhead
    session.clear_out = clear_out
    session.device_kernels = DeviceKernelTimes() if time_all_kernels else None
    return session


@contextmanager
def profile(
    rules: Rules | dict | None = None,
    out: str | os.PathLike = "traces",
    *,
    instrumented: str | os.PathLike | None = None,
    options: LoweringOptions | None = None,
    kernel: str | None = None,
    max_launches: int | None = None,
    max_pending_mb: float = 256,
    keep_tuning: bool = False,
    autotune_from: str | os.PathLike | None = None,
    gz: bool = True,
    quiet: bool = False,
    cache: bool = True,
    measure_overhead: bool = False,
    jobs: int | None = None,
    keep_launches: KeepPolicy | str | None = None,
    calibrate: bool = True,
) -> Iterator[RunResult]:
    """Profile the Triton kernels launched inside the ``with`` block.

    Kernels are instrumented as they compile with ``rules`` (``insert``'s: a ``Rules`` or a
    dict such as ``{"loops": "both"}``; None: kernel body and outer loops), or, with
    ``instrumented=DIR``, taken from a tree that ``insert`` wrote; instrumented builds are
    kept for the next profile in the tool's cache (``cache=False``: compiled afresh, kept
    nowhere). ``keep_launches``: which launches are kept (a ``KeepPolicy``, or its text as
    ``--keep-launches`` takes it, e.g. "all"; None: the first 20 of each kernel and config,
    then 1 in 100, at most 20 of those a second, at most 2000; ``max_launches`` bounds the total). When the block ends
    (normally or not) the launches are written to ``out`` and decoded once into traces; the
    yielded ``RunResult`` is then filled in and its messages go to stderr unless ``quiet``
    (with a progress bar on a terminal). ``jobs``: decoding processes (None: one per core).
    ``calibrate``: measure the records' own cost first on a GPU model this machine's cache
    does not know yet (``calibrate_missing``; False: durations may then include it).
    """
    with output_locks(("out", out)):  # another process writing there is refused
        session = _session(rules, out, instrumented, options, kernel, max_launches,
                           max_pending_mb, keep_tuning, autotune_from, gz, cache,
                           measure_overhead, keep_launches)
        if calibrate:
            calibrate_missing(session.options, stream=io.StringIO() if quiet else None)
        try:
            with session_block(session) as result:
                yield result
        finally:
            analyze_run(session.result, gz=gz, progress=not quiet, jobs=jobs)
            if not quiet:  # (a line each: the whole messages are in result.messages)
                for m in map(headline, session.result.messages):
                    print(f"proton-inject: {m}", file=sys.stderr)
                kept = session.compiler.inductor_kernels_left_instrumented()
                if kept:
                    print(f"proton-inject: {len(kept)} kernel(s) Inductor compiled inside the "
                          f"profile block ({', '.join(kept[:3])}{', ...' if len(kept) > 3 else ''}) "
                          "stay instrumented after it, slower than plain; torch._dynamo.reset() "
                          "recompiles them", file=sys.stderr)


def profile_program(
    argv: Sequence[str],
    rules: Rules | dict | None = None,
    out: str | os.PathLike = "traces",
    *,
    instrumented: str | os.PathLike | None = None,
    options: LoweringOptions | None = None,
    kernel: str | None = None,
    max_launches: int | None = None,
    max_pending_mb: float = 256,
    keep_tuning: bool = False,
    autotune_from: str | os.PathLike | None = None,
    gz: bool = True,
    report: bool = True,
    plot: str | os.PathLike | None = None,
    raw: bool = False,
    progress: bool = False,
    cache: bool = True,
    measure_overhead: bool = False,
    jobs: int | None = None,
    verbose: bool = False,
    keep_launches: KeepPolicy | str | None = None,
    calibrate: bool = True,
    clear_out: bool = True,
    time_all_kernels: bool = False,
) -> tuple[RunResult, ReportResult | None]:
    """Run ``python script.py ARGS`` (or ``-m module``) in this interpreter, profiled as
    ``profile`` does, then analyze what it kept (``report=False``: raw files and run.json only).

    ``result.exit_code`` is the code the program would have exited with; what was collected
    is written and analyzed even when it raises or calls ``sys.exit``. ``jobs`` decoding
    processes (None: one per core); ``progress``: a bar on a terminal's stderr. ``calibrate``:
    as ``profile``'s, before the program starts (its note on stderr). ``clear_out=False``:
    what ``out`` holds is left there (the caller cleared it). ``time_all_kernels``: every
    kernel's GPU time too, Triton's or not, in OUT/device-kernels.json (``profile --auto``;
    collect/device_kernels.py).
    """
    with output_locks(("-o", out), ("--plot", plot)):  # another process writing there: refused
        session = _session(rules, out, instrumented, options, kernel, max_launches,
                           max_pending_mb, keep_tuning, autotune_from, gz, cache,
                           measure_overhead, keep_launches, clear_out, time_all_kernels)
        began = time.perf_counter()
        devices = visible_devices()  # (imports torch: the program then finds it imported)
        found = time.perf_counter()
        if calibrate:  # in a child, before the program: its process stays as without the tool
            calibrate_missing(session.options, devices)
        calibrated = time.perf_counter()
        result = run_in_session(session, argv, "profile" if instrumented is None else "run")
        ran = time.perf_counter()
        rep = (analyze_run(result, gz=gz, plot=plot, raw=raw, progress=progress, jobs=jobs, verbose=verbose)
               if report else None)
        result.seconds.update(torch=found - began, calibrate=calibrated - found)
        if report:
            result.seconds["report"] = time.perf_counter() - ran
    return result, rep


@dataclass
class InsertResult:
    """What ``insert`` did: the kernels instrumented (name, file, regions), its notes, the
    files it left out (a line, or None), the autotuning choices carried into the tree (a
    line, or None), where it wrote (None: nowhere) and the diff against the golden output
    ('' when identical; None when not compared)."""

    kernels: list[tuple[str, str, int]]
    notes: list[str]
    left_out: str | None
    carried: str | None
    written: str | None
    diff: str | None


def insert(src: str | os.PathLike, out: str | os.PathLike | None, rules: Rules, force: bool = False,
           check_against: str | os.PathLike | None = None, strict: bool = False,
           compile_check: bool = False, progress=None) -> InsertResult:
    """Instrument SRC, a dump tree or one ``.ttgir`` file, by ``rules``; write the result to
    ``out`` (a tree carries the dump's autotuning choices) and/or compare it with the golden
    output ``check_against``. ``force``: strip existing records first; ``compile_check``: leave
    out the files of a tree that do not compile (as ``check``, no GPU); ``strict``: a file left
    out, or a rule that made no region, is an error. ``progress(i, n, file)`` after each file."""
    from proton_inject.dump.tuning import carried_autotune
    from proton_inject.formats.files import check_outputs
    from proton_inject.formats.schema import not_found
    from proton_inject.instrument import golden, trees
    from proton_inject.lower.check import leave_out_uncompilable
    from proton_inject.lower.inline import inline_callees

    srcp = Path(src)
    if not srcp.is_file() and not srcp.is_dir():
        raise not_found(src)
    check_outputs([("input", src), ("golden", check_against)],
                  [("-o", out, "tree" if srcp.is_dir() else "file")])
    if check_against:
        golden.check_golden(check_against, tree=srcp.is_dir())
    with output_locks(("-o", out)):
        done = trees.insert_path(srcp, rules, force, inline_callees, progress,
                                 leave_out_uncompilable if compile_check else None, strict)
        carried = None
        if out:
            extras, carried = carried_autotune(srcp) if srcp.is_dir() else ({}, None)
            trees.write_inserted(done, out, extras)
    diff = golden.diff_against(done.outputs, done.manifest, check_against) if check_against else None
    return InsertResult(done.kernels, done.notes, done.left_out, carried,
                        None if out is None else os.fspath(out), diff)


# --auto's launches kept, unless --keep-launches says otherwise: every Triton kernel is
# instrumented there, so fewer first launches than profile's default (20) keep its records'
# kernel time, torch.profiler's inflation of its time and the decoding small (a few launches of
# thousands of CTAs each are plenty for a kernel's regions); one in 100 after them and the total
# as profile's, so the window torch.profiler times (it stops at the total) stays as long.
AUTO_KEEP = KeepPolicy(first=5)
# --auto records in every CTA unless --sample-ctas says otherwise: on an H200, 1 CTA in 8 (lowered
# directly) saves only the stores, so Inductor's loop-free kernels in a program ran as before and
# its looping one dearer (iterations run in the sampler's loop copies, Proton's lowering), while a
# small grid kept a CTA or two (docs/accuracy.md, eleventh session).
AUTO_SAMPLE_CTAS = 1


@dataclass
class AutoResult:
    """What ``profile_auto`` did: the program's exit code, the ranking and the picked kernels
    opened up (``doc``, as OUT/auto.json holds it; ``text``, as printed), the run and its
    report (None when no launch was decoded), and the files written besides the run's."""

    exit_code: int
    doc: dict
    text: str
    run: RunResult
    report: ReportResult | None
    files: list[str]


def profile_auto(
    argv: Sequence[str],
    out: str | os.PathLike = "traces",
    *,
    share: float = 0.8,
    top: int = 3,
    options: LoweringOptions | None = None,
    max_launches: int | None = None,
    max_pending_mb: float = 256,
    keep_tuning: bool = False,
    autotune_from: str | os.PathLike | None = None,
    gz: bool = True,
    plot: str | os.PathLike | None = None,
    raw: bool = False,
    progress: bool = False,
    cache: bool = True,
    measure_overhead: bool = False,
    jobs: int | None = None,
    verbose: bool = False,
    keep_launches: KeepPolicy | str | None = None,
    calibrate: bool = True,
    sample_ctas: int | None = None,
) -> AutoResult:
    """Where the program's GPU time goes, with no rule chosen, in one run of it.

    The program runs as ``profile_program`` runs it (OUT, with ``options`` and the other
    arguments), every Triton kernel instrumented with its body, loops and iterations (the kept
    launches record them, ``AUTO_KEEP`` unless ``keep_launches`` says otherwise; the others run
    their plain twins), and every kernel on the GPU,
    Triton's or not, timed by torch.profiler (OUT/device-kernels.json). The kernels are ranked
    by GPU time (``analyze/hot_kernels.py``), the fewest instrumented ones holding ``share``
    of it, at most ``top``, are picked and split over their regions and source lines; all of it
    goes to OUT/auto.json. ``calibrate``: as ``profile_program``'s. ``sample_ctas``: records
    in every Nth CTA only (None: ``AUTO_SAMPLE_CTAS``).
    """
    from proton_inject.analyze import source_view

    rules = Rules(kernel_scope=True, loops="both", sample_ctas=AUTO_SAMPLE_CTAS if sample_ctas is None else sample_ctas)
    _check_auto(argv, share, top)
    check_out_dir(Path(out))  # (refused before the GPU is looked for)
    with output_locks(("-o", out), ("--plot", plot)):
        run, rep = profile_program(
            argv, rules, out, options=options, max_launches=max_launches,
            max_pending_mb=max_pending_mb, keep_tuning=keep_tuning, autotune_from=autotune_from, gz=gz,
            plot=plot, raw=raw, progress=progress, cache=cache, measure_overhead=measure_overhead, jobs=jobs,
            verbose=verbose, keep_launches=AUTO_KEEP if keep_launches is None else keep_launches,
            calibrate=calibrate, time_all_kernels=True)
        began = time.perf_counter()
        summary = rep.summary if rep is not None else {"kernels": [], "launch_counts": {}}
        ranked, notes = _ranked(Path(out), summary, share, top)
        picked = [k["kernel"] for k in ranked if k["top"]]
        opened = [k for k in summary["kernels"] if k["kernel"] in picked]
        source_view.attach({"kernels": opened}, [f for f in run.files if _is_raw_launch(f)])
        doc = auto_report.AutoReport(format=auto_report.AUTO_FORMAT, version=auto_report.AUTO_VERSION,
                                     run=str(out), share_wanted=share, top_max=top, kernels=ranked,
                                     hot=hot_kernels.hot_kernels(summary, picked), exit_code=run.exit_code or 0,
                                     notes=notes)
        written = auto_report.write_auto(out, doc)
        run.seconds["auto"] = time.perf_counter() - began
    return AutoResult(run.exit_code or 0, dict(doc), hot_kernels.format_auto(doc), run, rep, [str(written)])


def _check_auto(argv: Sequence[str], share: float, top: int) -> None:
    """``profile_auto``'s arguments, refused before anything runs."""
    from proton_inject.dump.program import split_program_argv

    if not 0 < share <= 1:
        raise UserError(f"--auto-share {share:g}: give the share of GPU time to open up, above 0 "
                        "and at most 1 (0.8: the kernels holding 80% of it)")
    if top < 1:
        raise UserError(f"--auto-top {top}: give how many kernels to open up at most, 1 or more")
    split_program_argv(argv, "profile")  # a bad program
    if "RANK" in os.environ:  # (each rank would write its own auto.json over the others')
        raise UserError("profile --auto: not under torchrun (RANK is set): run it on one process, "
                        "or profile each rank with rules (--kernel-scope --loops both)")


def _is_raw_launch(f: str) -> bool:
    return f.endswith(".json") and Path(f).parent.name == "raw"


def _ranked(out: Path, summary: dict, share: float, top: int) -> tuple[list, list[str]]:
    """The run's kernels ranked (``hot_kernels.rank_kernels``) with every kernel's device time
    (OUT/device-kernels.json), and notes: what those times leave out, or why there are none."""
    device, notes = None, []
    try:
        device = auto_report.read_device_kernels(out / auto_report.DEVICE_FILE)
        notes += device["notes"]
    except UserError as e:
        notes.append(f"{e} (shares are of the Triton kernels' time alone)")
    if not summary["kernels"]:
        notes.append("no launch of an instrumented kernel was decoded: nothing to open up")
    return hot_kernels.rank_kernels(summary, share, top, device), notes
