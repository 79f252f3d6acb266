"""Command line: a thin click layer over the Python API of each pipeline step.

Each command parses its options, calls one API function and prints its result.
User errors (``UserError``) print one message and exit 2; ``--debug`` shows the traceback.
"""

from __future__ import annotations

import sys

import click

from .errors import UserError


class _Group(click.Group):
    """Turns UserError into a one-line message and exit code 2, unless --debug."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except UserError as e:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(f"proton-inject: error: {e}", err=True)
            sys.exit(e.exit_code)


@click.group(cls=_Group)
@click.option("--debug", is_flag=True, help="Show tracebacks for user errors.")
@click.version_option(package_name="proton-inject")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """Profile regions inside Triton kernels by instrumenting their TTGIR."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


# --- parse (issue 2): inspect -------------------------------------------------

# --- select + rewrite (issue 3): insert, strip ---------------------------------

# --- compile check (issue 3, shares lowering with the runtime): check ---------

# --- dump / run (issue 4) -----------------------------------------------------

# --- post-process (issue 5): report -------------------------------------------


if __name__ == "__main__":
    main()
