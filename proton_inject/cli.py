"""Command line: a thin click layer over the Python API of each pipeline step.

Each command parses its options, calls one API function and prints its result.
User errors (``UserError``) print one message and exit 2; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import sys

import click

from proton_inject.cli_options import (
    ProgramCommand,
    build_options,
    gz_option,
    jobs_option,
    lowering_options,
    options_from,
    pending_options,
    raw_option,
    rule_options,
    rules_from,
)
from proton_inject.errors import UserError
from proton_inject.formats.diagnostics import headline
from proton_inject.formats.files import check_outputs, output_locks
from proton_inject.formats.traces import DEFAULT_FORMAT, TRACE_FORMATS


class _Group(click.Group):
    """Turns UserError into a one-line message and exit code 2, unless --debug."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except click.UsageError as e:
            # A command's own option/argument errors (a missing path, a bad choice): the same
            # one-line form as ours rather than click's Usage block.
            if ctx.obj and ctx.obj.get("debug"):
                raise
            name = e.ctx.info_name if e.ctx is not None else "proton-inject"
            click.echo(f"proton-inject: error: {name}: {e.format_message()} "
                       f"(`{name} -h` lists the options)", err=True)
            sys.exit(2)
        except UserError as e:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(f"proton-inject: error: {e}", err=True)
            sys.exit(e.exit_code)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]},
             invoke_without_command=True)
@click.option("--debug", is_flag=True, help="Show tracebacks for user errors.")
@click.version_option(None, "-V", "--version", package_name="proton-inject", prog_name="proton-inject")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """Profile regions inside Triton kernels by instrumenting their TTGIR."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    if ctx.invoked_subcommand is None:  # a bare `proton-inject`: what it can do, not an error
        click.echo(ctx.get_help())
        ctx.exit(0)


# --- read the IR: inspect -------------------------------------------------------


@main.command()
@click.argument("files", nargs=-1, required=True, type=click.Path())
@click.option("--max-ops", type=click.IntRange(min=0), default=12, show_default=True,
              help="Op kinds listed per kernel (0: only how many kinds).")
def inspect(files: tuple[str, ...], max_ops: int) -> None:
    """Print an outline of TTGIR FILES (or dump directories): kernels, loops, ops, source lines."""
    from proton_inject.formats.files import find_ttgir
    from proton_inject.ttgir import parse_file
    from proton_inject.ttgir.outline import format_outline

    for path in find_ttgir(files):
        click.echo(format_outline(parse_file(path), max_ops=max_ops))


# --- rewrite the IR: insert, strip ----------------------------------------------


@main.command()
@click.argument("src", type=click.Path())
@click.option("-o", "--out", type=click.Path(),
              help="Output: a tree for a directory SRC (default: instrumented) or a .ttgir file.")
@rule_options
@click.option("--force", is_flag=True, help="Strip existing records and instrument again.")
@click.option("--check-against", type=click.Path(),
              help="Compare with golden output instead of (or besides) writing; exit 1 on a diff.")
@click.option("--strict", is_flag=True,
              help="Exit 2 if any file of a tree is left out (cannot be parsed, instrumented "
                   "or, with --check, compiled), or a --region or --op made no region.")
@click.option("--check", "compile_check", is_flag=True,
              help="Compile each instrumented file of a tree (as `check`, no GPU) and leave out "
                   "those that fail.")
@click.option("-v", "--verbose", is_flag=True, help="Print whole notes.")
def insert(src, out, force, check_against, strict, compile_check, verbose, **kw) -> None:
    """Insert proton.record regions into the TTGIR of SRC (a dump directory or a .ttgir file).

    With no rule, instruments each kernel's body and each loop (--kernel-scope --loops outer).
    """
    from pathlib import Path

    from tqdm import tqdm  # a bar on a terminal only

    from proton_inject.api import insert as insert_rules

    tree = Path(src).is_dir()
    if not out and not check_against and not tree:  # (a tree's default: the next step's input)
        raise UserError("insert: give -o OUT (where to write) and/or --check-against GOLDEN")
    out = out or (None if check_against else "instrumented")
    if Path(src).exists():  # (else the API says it is missing)
        check_outputs([("input", src), ("--rules file", kw["rules_file"]), ("golden", check_against)],
                      [("-o", out, "tree" if tree else "file")])
    rules = rules_from(kw)
    with tqdm(desc="instrumenting", unit="file", file=sys.stderr, leave=False, disable=None) as bar:
        done = insert_rules(src, out, rules, force, check_against, strict, compile_check,
                            lambda i, n, rel: (setattr(bar, "total", n), bar.update(i - bar.n)))
    if done.left_out:
        click.echo(done.left_out, err=True)
    for note in done.notes:
        note = note if verbose else headline(note)
        click.echo(note if note.startswith("warning: ") else f"note: {note}", err=True)
    for name, file, n in done.kernels:
        click.echo(f"{name} ({file}): {n} region{'s' if n != 1 else ''}")
    if done.carried:
        click.echo(done.carried, err=True)
    if done.written:
        click.echo(f"wrote {done.written}")
    if done.diff:
        click.echo(done.diff, nl=False)
        click.echo(f"instrumented IR differs from {check_against}", err=True)
        sys.exit(1)
    if done.diff is not None:
        click.echo(f"identical to {check_against}")


@main.command()
@click.argument("src", type=click.Path(exists=True))
@click.option("-o", "--out", type=click.Path(), required=True,
              help="Where to write the stripped tree or file.")
def strip(src, out) -> None:
    """Remove every proton.record line from SRC (a tree or a .ttgir file)."""
    from pathlib import Path

    from proton_inject.instrument.trees import strip_path

    check_outputs([("input", src)], [("-o", out, "tree" if Path(src).is_dir() else "file")])
    click.get_current_context().with_resource(output_locks(("-o", out)))
    written, notes = strip_path(src, out)
    for note in notes:
        click.echo(f"note: {note}", err=True)
    click.echo(f"stripped {len(written)} file{'s' if len(written) != 1 else ''} into {out}")


# --- compile it without a GPU: check ---------------------------------------------


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--target", "targets", multiple=True, metavar="cuda:90",
              help="Check files made for this target (repeatable: cuda:80, cuda:90, cuda:100, "
                   "hip:gfx942). Default: each file's own ttg.target.")  # fmt: skip
@lowering_options
def check(paths: tuple[str, ...], targets: tuple[str, ...], **kw) -> None:
    """Compile instrumented TTGIR (files or trees) down to cubin/hsaco, without a GPU.

    Prints each kernel's regions, profile scratch bytes per CTA and shared memory; exits 1 if
    any file fails to compile.
    """
    from proton_inject.lower.check import check_paths, format_report, summary

    reports, skipped = check_paths(paths, list(targets) or None, options_from(kw))
    for r in reports:
        click.echo(format_report(r))
    for note in skipped:
        click.echo(f"skip {note}")
    click.echo(summary(reports, skipped))
    if not all(r.ok for r in reports):
        sys.exit(1)


# --- get the IR, run the program: dump, run -------------------------------------

@main.command(
    "dump",
    epilog="Examples:\n\n"
    "  proton-inject dump --target cuda:90 examples/matmul.py:matmul_kernel "
    "--signature 'a_ptr=*fp16,b_ptr=*fp16,c_ptr=*fp16,M=i32:16,...' "
    "--constexpr BLOCK_M=128 --num-warps 8 -o ttgir_dump",
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.option("-o", "--out", "out_dir", default="ttgir_dump", show_default=True,
              type=click.Path(file_okay=False), help="Dump directory (override layout).")
@click.option("--target", help="AOT: compile for this target: cuda:80, cuda:90, cuda:100, "
              "hip:gfx942 ...")
@click.option("--signature", help="AOT: NAME=TYPE pairs for the non-constexpr parameters, e.g. "
              "'a_ptr=*fp16,M=i32:16' (:16 = divisible by 16; pointers are 16-aligned unless :1).")
@click.option("--constexpr", "constexprs", multiple=True, metavar="NAME=VALUE",
              help="AOT: a constexpr parameter (int, float, true/false, none, tl.DTYPE or string; "
                   "quote a string that looks like another type: ACT='none'); repeatable. "
              "Arguments the JIT specializes to 1 (unit strides) go here too.")
@click.option("--num-warps", type=int, default=None,
              help="AOT: num_warps (default: the autotune config's, else Triton's: 4).")
@click.option("--num-stages", type=int, default=None,
              help="AOT: num_stages (default: the autotune config's, else Triton's for the "
              "target).")
@click.option("--num-ctas", type=int, default=None, help="AOT: num_ctas (default 1).")
@click.option("--config", "config", type=int, default=None, metavar="N",
              help="AOT, @triton.autotune kernel: dump only config N (default: every config).")
@click.option("--kernel", default=None, metavar="REGEX",
              help="Program form: keep only kernels whose name matches.")
def dump_cmd(args, out_dir, target, signature, constexprs, num_warps, num_stages, num_ctas, config,
             kernel):
    """Dump TTGIR into an override tree: OUT/<hash>/<kernel>.ttgir + OUT/manifest.json.

    AOT form: one FILE.py:KERNEL argument and --target compile that kernel on this machine
    (no GPU needed).
    """
    from proton_inject.dump.kernel_source import aot_spec

    spec = aot_spec(args)
    if spec is not None:
        if not target:
            raise UserError(f"{args[0]}: an ahead-of-time dump needs --target (e.g. cuda:90)")
        if kernel:
            raise UserError(f"--kernel {kernel}: only applies to a program's dump; "
                            f"{args[0]} already names the one kernel to dump")
        _dump_aot(spec, out_dir, target, signature, constexprs, num_warps, num_stages, num_ctas,
                  config)
        return
    if not args:
        raise UserError("dump: give FILE.py:KERNEL with --target, or '-- python script.py ...'")
    aot_only = [n for n, v in (("--target", target), ("--signature", signature),
                               ("--constexpr", constexprs), ("--num-warps", num_warps),
                               ("--num-stages", num_stages), ("--num-ctas", num_ctas),
                               ("--config", config))
                if v is not None and v != ()]
    if aot_only:
        raise UserError(
            f"dump: {', '.join(aot_only)} only apply to an ahead-of-time dump of one "
            f"FILE.py:KERNEL, not to {' '.join(args)!r}"
        )
    _dump_program(list(args), out_dir, kernel)


def _dump_aot(spec, out_dir, target, signature, constexprs, num_warps, num_stages, num_ctas,
              config):
    from proton_inject.dump.dump_tree import dump_aot
    from proton_inject.dump.signature import constexpr_text, constexpr_type, parse_constexprs

    source_file, kernel = spec
    check_outputs([("kernel source", source_file)], [("-o", out_dir, "dir")])
    click.get_current_context().with_resource(output_locks(("-o", out_dir)))
    values = parse_constexprs(constexprs)
    if values:  # what each value was read as: a string that looks like another type is quoted
        click.echo("constexprs: " + ", ".join(f"{k}={constexpr_text(v)} ({constexpr_type(v)})"
                                              for k, v in values.items()), err=True)
    results, written, notes = dump_aot(source_file, kernel, signature, values, target, out_dir,
                                       num_warps=num_warps, num_stages=num_stages,
                                       num_ctas=num_ctas, config=config)
    for note in notes:
        click.echo(f"note: {note}", err=True)
    click.echo(f"wrote {len(written)} kernel(s) to {out_dir}:")
    for r in results:
        cfg = f"config [{r.config}] {r.config_desc}: " if r.config is not None else ""
        click.echo(f"  {r.ttgir_relpath}  ({cfg}{r.target}, {r.num_warps} warps, "
                   f"{r.num_stages} stages)")


def _dump_program(argv: list[str], out_dir: str, kernel: str | None = None) -> None:
    """Run a Python program and dump every kernel it compiles; exit with its exit code."""
    from proton_inject.dump.program import dump_program

    check_outputs([], [("-o", out_dir, "dir")])
    click.get_current_context().with_resource(output_locks(("-o", out_dir)))
    res = dump_program(argv, out_dir, kernel=kernel)
    for note in res.notes:
        click.echo(f"note: {note}", err=True)
    # stderr: the program's own stdout must stay what it prints without the tool.
    left = f" ({res.compiled} compiles seen)" if res.compiled != len(res.kernels) else ""
    click.echo(f"wrote {len(res.kernels)} kernel(s) to {out_dir}{left}:", err=True)
    for r in sorted(res.kernels, key=lambda r: r.ttgir_relpath):
        click.echo(f"  {r.ttgir_relpath}  ({r.target}, {r.num_warps} warps, "
                   f"{r.num_stages} stages)", err=True)
    if res.autotune_file is not None:
        click.echo(f"recorded the autotuners' choices ({res.autotune.summary()}) in {res.autotune_file}: "
                   "run uses them", err=True)
    if res.exit_code:
        click.echo(f"dump: the program exited with code {res.exit_code}", err=True)
        sys.exit(res.exit_code)


@main.command(cls=ProgramCommand, context_settings={"ignore_unknown_options": True})
@click.argument("instrumented", type=click.Path())
@click.option("-o", "--out", default="traces", show_default=True, type=click.Path(),
              help="Where raw buffers and traces go.")
@lowering_options
@click.option("--max-launches", type=int, default=None, help="Keep at most N launches.")
@click.option("--kernel", default=None, metavar="REGEX", help="Instrument only these kernels.")
@pending_options
@gz_option
@click.option("-v", "--verbose", is_flag=True, help="Also print whole notes and decode problems per launch.")
@raw_option
@build_options
@jobs_option
@click.argument("program", nargs=-1, required=True, type=click.UNPROCESSED)
def run(instrumented: str, out: str, program: tuple[str, ...], max_launches, kernel,
        max_pending_mb, keep_tuning, gz, verbose, raw, no_cache, measure_overhead, no_calibrate, jobs,
        **kw) -> None:  # fmt: skip
    """Run PROGRAM (-- python script.py ARGS) with the kernels in INSTRUMENTED profiled.

    Exits with the program's own exit code.
    """
    from proton_inject.api import KeepPolicy, profile_program

    check_outputs([("instrumented tree", instrumented)], [("-o", out, "dir")])
    keep = KeepPolicy.from_options(kw.pop("keep_launches"), kw.pop("sample_launches"))
    result, _ = profile_program(
        list(program), out=out, instrumented=instrumented, options=options_from(kw), kernel=kernel,
        max_launches=max_launches, keep_launches=keep, max_pending_mb=max_pending_mb,
        keep_tuning=keep_tuning, gz=gz is not False, raw=raw, progress=True, cache=not no_cache,
        measure_overhead=measure_overhead, jobs=jobs, calibrate=not no_calibrate,
    )  # fmt: skip
    _echo_messages(result, verbose)
    sys.exit(result.exit_code or 0)


def _echo_messages(result, verbose: bool) -> None:
    """A run's messages, a line each (whole with -v; then decode problems per launch)."""
    for m in result.messages:
        click.echo(f"proton-inject: {m if verbose else headline(m)}", err=True)
    for m in result.details if verbose else []:
        click.echo(f"proton-inject:   {m}", err=True)
    n = len(result.launches)
    click.echo(f"proton-inject: {n} launch{'es' if n != 1 else ''} written to {result.out}", err=True)
    if line := result.time_line():  # (what the tool's own time was, beside the program's)
        click.echo(f"proton-inject: {line}", err=True)


# --- instrument as kernels compile: profile ------------------------------------


@main.command(cls=ProgramCommand, context_settings={"ignore_unknown_options": True})
@click.option("-o", "--out", default="traces", show_default=True, type=click.Path(),
              help="Where raw buffers, traces and the instrumented IR (OUT/ir) go.")
@rule_options
@lowering_options
@click.option("--max-launches", type=int, default=None, help="Keep at most N launches.")
@pending_options
@click.option("--no-report", is_flag=True, help="Do not print the report at the end.")
@click.option("--plot", type=click.Path(dir_okay=False), metavar="FILE",
              help="Also write timeline PNGs, as report --plot does.")
@gz_option
@click.option("-v", "--verbose", is_flag=True, help="Also print whole notes and decode problems per launch.")
@raw_option
@click.option("--autotune-from", type=click.Path(exists=True), default=None, metavar="DIR",
              help="Autotuners take the choices recorded in DIR/autotune.json (a dump, or a run's "
                   "or profile's -o) instead of timing configs.")
@build_options
@jobs_option
@click.option("--auto", is_flag=True,
              help="No rules: in one run, every Triton kernel's body, loops and iterations "
                   "instrumented and every kernel (cuBLAS too) timed by torch.profiler; print the "
                   "kernels ranked by GPU time and where the top ones' time goes (also "
                   "OUT/auto.json). Of the rules, only --sample-ctas applies.")
@click.option("--auto-share", type=float, default=None, metavar="SHARE",
              help="With --auto: open up the fewest kernels holding this share of GPU time "
                   "[default: 0.8].")
@click.option("--auto-top", type=int, default=None, metavar="N",
              help="With --auto: open up at most N kernels [default: 3].")
@click.argument("program", nargs=-1, required=True, type=click.UNPROCESSED)
def profile(out, program, max_launches, max_pending_mb, keep_tuning, no_report, plot, gz, verbose,
            raw, autotune_from, no_cache, measure_overhead, no_calibrate, jobs, auto, auto_share, auto_top,
            **kw):
    """Run PROGRAM (-- python script.py ARGS) once, instrumenting kernels as they compile.

    Takes insert's rules (default: kernel body and outer loops) and run's options. The
    instrumented IR lands in OUT/ir (reviewable, and usable with run); the report goes to
    stderr. Exits with the program's own exit code. With --auto, it chooses the rules.
    """
    from proton_inject.api import KeepPolicy, profile_program
    from proton_inject.formats.schema import report_options

    check_outputs([("--rules file", kw["rules_file"])], [("-o", out, "dir"), ("--plot", plot, "files")])
    report_options(None, None, False, None, plot)  # before the program runs, not after
    if not auto and (auto_share is not None or auto_top is not None):
        raise UserError(f"{'--auto-share' if auto_share is not None else '--auto-top'} goes with "
                        "--auto (profile --auto ... -- python script.py)")
    if auto:
        _profile_auto(out, program, max_launches, max_pending_mb, keep_tuning, no_report, plot, gz,
                      verbose, raw, autotune_from, no_cache, measure_overhead, no_calibrate, jobs,
                      auto_share, auto_top, kw)
    rules = rules_from(kw)
    keep = KeepPolicy.from_options(kw.pop("keep_launches"), kw.pop("sample_launches"))
    result, rep = profile_program(
        list(program), rules, out, options=options_from(kw), max_launches=max_launches,
        keep_launches=keep,
        max_pending_mb=max_pending_mb, keep_tuning=keep_tuning, autotune_from=autotune_from,
        gz=gz is not False, plot=plot, raw=raw, progress=True, cache=not no_cache, verbose=verbose,
        measure_overhead=measure_overhead, jobs=jobs, calibrate=not no_calibrate,
    )  # fmt: skip
    _echo_messages(result, verbose)
    if rep is not None:
        if not no_report:  # (its warnings are among the messages above)
            click.echo(rep.text, err=True)
        for f in rep.files:
            if str(f).endswith(".png"):  # (traces are listed in run.json)
                click.echo(f"wrote {f}", err=True)
    sys.exit(result.exit_code or 0)


def _profile_auto(out, program, max_launches, max_pending_mb, keep_tuning, no_report, plot, gz,
                  verbose, raw, autotune_from, no_cache, measure_overhead, no_calibrate, jobs, share,
                  top, kw) -> None:
    """``profile --auto``: refuses rules (it chooses them), prints the ranking and the top
    kernels opened up, and exits with the program's code."""
    from proton_inject.api import KeepPolicy, profile_auto
    from proton_inject.formats.rules_file import RULES

    given = [r.option for r in RULES if kw.get(r.param) and r.field != "sample_ctas"]
    given += ["--rules"] if kw["rules_file"] else []
    if given:
        raise UserError(f"profile --auto chooses the rules itself; drop {', '.join(given)} (or "
                        "drop --auto and keep them)")
    keep = KeepPolicy.from_options(kw.pop("keep_launches"), kw.pop("sample_launches"))
    done = profile_auto(
        list(program), out, share=0.8 if share is None else share, top=3 if top is None else top,
        options=options_from(kw), max_launches=max_launches, max_pending_mb=max_pending_mb,
        keep_tuning=keep_tuning, autotune_from=autotune_from, gz=gz is not False, plot=plot, raw=raw,
        progress=True, cache=not no_cache, measure_overhead=measure_overhead, jobs=jobs,
        verbose=verbose, keep_launches=keep, calibrate=not no_calibrate, sample_ctas=kw["sample_ctas"],
    )  # fmt: skip
    _echo_messages(done.run, verbose)
    if not no_report:
        click.echo(done.text, err=True)
    for f in (done.report.files if done.report is not None else []):
        if str(f).endswith(".png"):
            click.echo(f"wrote {f}", err=True)
    click.echo(f"wrote {', '.join(done.files)}", err=True)
    sys.exit(done.exit_code)


# --- read the results: report, diff, calibrate, cache ---------------------------


@main.command()
@click.argument("inputs", nargs=-1, required=True, type=click.Path())
@click.option("--plot", type=click.Path(dir_okay=False), metavar="FILE",
              help="Timeline PNGs, one per launch: FILE for the first, FILE's name with "
                   ".LAUNCH-KERNEL before .png for the others.")
@click.option("--json", "as_json", is_flag=True, help="Print the numbers as JSON instead of tables.")
@click.option("--clock-mhz", type=float, help="SM clock to turn cycles into ns, instead of the fit.")
@click.option("--clocks-locked", is_flag=True,
              help="The SMs ran at the device's max clock throughout (locked, e.g. nvidia-smi -lgc): "
                   "turn cycles into ns at it, as each launch recorded it, instead of the fit.")
@click.option("--trace", "trace_dir", type=click.Path(file_okay=False),
              help="Also write traces of raw inputs into this directory (--trace-format).")
@click.option("--merge", is_flag=True, help="With --trace: one file for all launches.")
@click.option("--gz/--no-gz", default=None, help="With --trace: gzip the traces (the default).")
@click.option("--trace-format", type=click.Choice(list(TRACE_FORMATS)), default=DEFAULT_FORMAT,
              show_default=True, help="With --trace: " + "; ".join(
                  f"{name}: {f.help}" for name, f in TRACE_FORMATS.items()) + ".")
@click.option("-v", "--verbose", is_flag=True, help="Also print whole notes and decode problems per launch.")
@raw_option
@click.option("--source", is_flag=True,
              help="Also print each kernel's source lines with the time of the regions covering them.")
@click.option("--html", type=click.Path(dir_okay=False),
              help="Also write one self-contained HTML page: kernels, regions, source heat, timelines, notes.")
@click.option("--launches", "launches", metavar="SPEC",
              help="Only these launch numbers, e.g. 0-99,250,400- (a big run's first steps).")
@jobs_option
def report(inputs, plot, as_json, clock_mhz, clocks_locked, trace_dir, merge, gz, trace_format,
           verbose, raw, source, html, launches, jobs) -> None:
    """Summarize raw launches (traces/raw/) or traces: a table per kernel."""
    from proton_inject.analyze.clock_sources import Clock
    from proton_inject.analyze.pool import keep_freed_memory
    from proton_inject.analyze.report import run_report

    if clock_mhz and clocks_locked:
        raise UserError("report: give --clock-mhz or --clocks-locked, not both")
    keep_freed_memory()  # this process is the tool's own (not the user's program): as in the workers
    res = run_report(inputs, plot=plot, as_json=as_json, clock_mhz=clock_mhz,
                     trace_dir=trace_dir, merge=merge, gz=gz,
                     raw=raw, launches=launches, progress=True, trace_format=trace_format, source=source, jobs=jobs,
                     verbose=verbose, clock=(Clock.CLOCKS_LOCKED, True) if clocks_locked else None,
                     html=html)
    for w in res.warnings:
        click.echo(f"proton-inject: warning: {w if verbose else headline(w)}", err=True)
    for w in res.details if verbose else []:
        click.echo(f"proton-inject:   {w}", err=True)
    click.echo(res.text)
    for f in res.files:
        click.echo(f"wrote {f}", err=True)


@main.command()
@click.argument("base", type=click.Path())
@click.argument("new", type=click.Path())
@click.option("--fail-above", type=float, metavar="PCT",
              help="Exit 1 when a region is slower by more than PCT percent beyond noise (CI).")
@click.option("--markdown", is_flag=True, help="Print Markdown tables (a pull-request comment).")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@click.option("--unit", type=click.Choice(["cycles", "ns"]), default="cycles", show_default=True,
              help="Compare cycles (the records' own clock) or ns (through each launch's clock).")
@click.option("--min-change", type=float, default=1.0, show_default=True, metavar="PCT",
              help="Changes within +-PCT percent are within noise whatever the interval says.")
@click.option("--resamples", type=int, default=400, show_default=True,
              help="Bootstrap resamples per region and side.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the bootstrap.")
def diff(base, new, fail_above, markdown, as_json, unit, min_change, resamples, seed) -> None:
    """Compare two runs region by region: BASE and NEW are run/profile directories, raw
    launches, traces or `report --json` files."""
    from proton_inject.analyze.diff import run_diff

    if markdown and as_json:
        raise UserError("diff: give --markdown or --json, not both")
    res = run_diff(base, new, unit=unit, fail_above=fail_above, min_change=min_change,
                   resamples=resamples, seed=seed, progress=True,
                   fmt="json" if as_json else "markdown" if markdown else "text")
    click.echo(res.text)
    if res.error:
        raise UserError(res.error)
    sys.exit(res.exit_code)


@main.command()
@lowering_options
@click.option("--device", type=int, default=0, show_default=True, help="CUDA device to calibrate.")
def calibrate(device, **kw) -> None:
    """Measure what a record pair adds to a region on this GPU (needs a GPU; cached)."""
    from proton_inject import calibrate as cal
    from proton_inject.formats.calibration import cache_file

    for opts, got in cal.measure_all(options_from(kw), device=device):
        click.echo(cal.result_line(opts, got))
    click.echo(f"cached in {cache_file()}", err=True)


@main.group()
def cache() -> None:
    """The tool's cache of instrumented builds (profile and run reuse them between sessions)."""


@cache.command("info")
def cache_info() -> None:
    """Where the cache is, how many builds it holds and its size bound."""
    from proton_inject.formats import build_cache
    from proton_inject.formats.schema import size_text

    i = build_cache.info()
    click.echo(f"{i['path']}: {i['builds']} build(s), {size_text(i['bytes'])} of at most "
               f"{size_text(i['max_bytes'])} (PROTON_INJECT_CACHE_MAX_MB); last used {i['last_used'] or '-'}")


@cache.command("clear")
def cache_clear() -> None:
    """Remove every cached build (the next profile compiles its kernels again) but those of
    sessions running now."""
    from proton_inject.formats import build_cache
    from proton_inject.formats.schema import size_text

    freed, kept = build_cache.clear()
    in_use = f"; kept {size_text(kept)} that running sessions use" if kept else ""
    click.echo(f"removed {size_text(freed)} of builds from {build_cache.builds_root()}{in_use}")


if __name__ == "__main__":
    main()
