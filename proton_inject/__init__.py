"""proton-inject: profile regions inside Triton kernels by instrumenting their TTGIR.

The Python API (``proton_inject.api``; Triton is imported on first use):

- ``profile(rules=None, out="traces", *, instrumented=None, ...)``: a context manager that
  profiles the kernels launched inside its block and writes traces to ``out``.
- ``profile_program(argv, rules=None, out="traces", ...)``: the same for a whole program
  (``python script.py ARGS``) run in this interpreter; returns the run and its report.
- ``profile_auto(argv, out="traces", *, share=0.8, top=3, ...)``: ``profile --auto``: the
  program run once, every kernel timed and ranked by GPU time, the top ones opened up.
- ``analyze_run(result)``: decode what a run kept (what both of the above do at the end).
- ``run_report(inputs, ...)``: what ``proton-inject report`` prints and writes, over raw
  launches or traces already on disk.
"""

__version__ = "0.1.0"
__all__ = ["profile", "profile_program", "profile_auto", "analyze_run", "run_report"]

_API = set(__all__)


def __getattr__(name: str):
    if name in _API:
        from proton_inject import api

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
