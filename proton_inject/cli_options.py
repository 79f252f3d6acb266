"""The click options several commands share (insert's rules, the lowering, run's and profile's
buffers and builds), and how run and profile tell their own options from the program's."""

from __future__ import annotations

import difflib

import click

from proton_inject.formats.rules_file import (
    CHOICE,
    COUNT,
    FLAG,
    OFF_FLAG,
    PATTERNS,
    RANGES,
    RULES,
    RuleKey,
)


def options(*opts):
    """One decorator for several click options, listed in ``--help`` in the order given."""
    def apply(f):
        for o in reversed(opts):
            f = o(f)
        return f
    return apply


def _rule_option(r: RuleKey):
    """The click option of a rule (``formats/rules_file.RULES``)."""
    kw: dict = {"help": r.help}
    if r.value in (FLAG, OFF_FLAG):
        kw["is_flag"] = True
    elif r.value == CHOICE:
        kw["type"] = click.Choice(list(r.choices))
    elif r.value == COUNT:
        kw.update(type=int, default=None)
    elif r.value in (PATTERNS, RANGES):
        kw["multiple"] = True
    if r.metavar:
        kw["metavar"] = r.metavar
    return click.option(r.option, r.param, **kw)


rule_options = options(  # the rules of insert, shared with profile: one option per rule
    *map(_rule_option, RULES),
    click.option("--rules", "rules_file", type=click.Path(),
                 help="Rules from a TOML file (default: [tool.proton-inject] in "
                      "./pyproject.toml)."),
)


def rules_from(kw: dict):
    """Rules from the options of ``rule_options`` (popped from ``kw``) over the rules file."""
    from proton_inject.instrument import rules

    rules_file = kw.pop("rules_file")
    from_pyproject = None if rules_file else rules.rules_from_pyproject()
    base = rules.load_rules_file(rules_file) if rules_file else (from_pyproject or rules.Rules())
    if from_pyproject is not None:  # rules the user did not type on this command line
        click.echo("proton-inject: rules from ./pyproject.toml [tool.proton-inject] (options given "
                   "here add to them; --rules FILE replaces them)", err=True)
    return rules.rules_with_flags(base, **{r.param: kw.pop(r.param) for r in RULES})


lowering_options = options(  # the Proton lowering options shared by check and run
    click.option("--clock", type=click.Choice(["32", "64"]), default="64", show_default=True,
                 help="Clock bits read per record (32: cheaper read; wraps every ~2 s)."),
    click.option("--sched-stores", is_flag=True, help="Let Proton schedule record stores."),
    click.option("--buffer-size", default="auto", show_default=True, metavar="BYTES|auto",
                 help="Record buffer per CTA, bytes (0: Proton's default for the type; "
                      "auto: just what each warp can write for kernels with no record "
                      "inside a loop, Proton's default for the others)."),
    click.option("--buffer-type", type=click.Choice(["auto", "shared", "global", "direct"]),
                 default="auto", show_default=True,
                 help="Keep records in shared memory (copied out at the end) or write them "
                      "to global memory (no shared-memory limit; 0 = 16 KiB per warp); "
                      "direct: our own lowering for records that each run once, by warp 0 "
                      "(no per-CTA set-up; NVIDIA); auto: direct where it applies, else "
                      "global for kernels with no record inside a loop, shared for the others."),
    click.option("--sample-iterations", type=click.IntRange(min=1), default=1, metavar="N",
                 help="Keep records inside loops for iterations 0, N, 2N, ... only (loops "
                      "lowered directly; loops of dots or async copies, which Proton lowers, "
                      "record every iteration)."),
    click.option("--granularity", type=click.Choice(["warp", "warp-group"]), default="warp",
                 show_default=True, help="Who records: each warp or each warp group."),
    click.option("--warps", default=None, metavar="0,4|all",
                 help="Record only these warps (default: the first warp of each partition, "
                      "i.e. warp 0 without warp specialization, and every warp of a "
                      "persistent kernel; all: every warp)."),
)  # fmt: skip


pending_options = options(  # run's and profile's: buffers in flight, autotuner launches
    click.option("--max-pending-mb", type=float, default=256, show_default=True,
                 help="Device memory held for buffers not yet copied to the host."),
    click.option("--keep-tuning", is_flag=True, help="Also keep autotuner benchmarking launches "
                 "(configs are then timed instrumented)."),
    click.option("--keep-launches", metavar="SPEC", help="Launches kept: 'all' or first=N,every=N,"
                 "rate=N,max=N (default first=20,every=100,rate=20,max=2000: the first N per kernel and config, "
                 "then 1 in N, at most rate=N a second of those; all counted)."),
    click.option("--sample-launches", type=click.IntRange(min=1), metavar="N",
                 help="Keep 1 in N launches after the first ones, with no rate bound (CUDA-graph replays too)."),
)
build_options = options(  # run's and profile's: the build cache, overhead against plain
    click.option("--no-cache", is_flag=True, help="Compile instrumented kernels afresh and keep "
                 "them nowhere (see `cache`)."),
    click.option("--measure-overhead", is_flag=True, help="Alternate each kernel's launches "
                 "between its plain and instrumented builds and report the kernel-time ratio "
                 "(plain launches are not decoded)."),
    click.option("--no-calibrate", is_flag=True, help="Do not measure the records' own cost on a "
                 "GPU model met for the first time (done once, before the program starts, and "
                 "kept; see `calibrate`): durations may then include the records' own cost."),
)
raw_option = click.option("--raw", is_flag=True,
                           help="Keep the records' own cost in durations (no compensation).")
gz_option = click.option("--gz/--no-gz", default=None, help="Gzip raw buffers and traces (the default).")
jobs_option = click.option("-j", "--jobs", type=click.IntRange(min=1), default=None, metavar="N",
                            help="Decode with N processes (default: one per core; 1: in this process).")


def options_from(kw: dict):
    from proton_inject.lower.options import options_from_cli

    return options_from_cli(
        clock=int(kw.pop("clock")), sched_stores=kw.pop("sched_stores"),
        buffer_size=kw.pop("buffer_size"), granularity=kw.pop("granularity"),
        warps=kw.pop("warps"), buffer_type=kw.pop("buffer_type"),
        sample_iterations=kw.pop("sample_iterations"),
    )  # fmt: skip


class ProgramCommand(click.Command):
    """run and profile: the program after ``--`` keeps its own options; an option before it
    that we do not know is a typo of ours, said as click says it for the other commands."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if "--" in args:  # what follows is the program's: ours are checked strictly
            ctx.ignore_unknown_options = False
            return super().parse_args(ctx, args)
        rest = super().parse_args(ctx, args)  # `run DIR python x.py --lr 3`: unknown ones kept
        program = ctx.params.get("program") or ()
        for word in (ctx.params.get("instrumented"), program[0] if program else None):
            if word and word.startswith("-") and word != "-m":  # not a path nor a program
                name = word.split("=", 1)[0]
                ours = [o for p in self.params for o in (*p.opts, *p.secondary_opts)]
                raise click.NoSuchOption(name, possibilities=difflib.get_close_matches(name, ours),
                                         ctx=ctx)
        return rest
