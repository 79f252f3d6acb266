"""diff's goals on a GPU (issue 30): what two profiles of one program flag, and whether a 5%
slowdown injected into one loop is found.

The kernel has two loops of dependent multiply-adds on independent data (``tl.range``, BODY
multiply-adds per iteration each); the constexpr EXTRA_A adds that many more to loop A's body
only (2 of 40: 5% of its work). The program is profiled ``--trials`` times as it is (base) and
as many times with EXTRA_A (slow), interleaved base, slow, base, ..., each in its own
``proton_inject.profile`` session (its own compile, ``--launches`` launches) with the default
rules (kernel body and outer loops). Then, with diff's own API (``load_side``, ``diff_sides``):

- null: every pair of base profiles; a region is flagged when its verdict is slower or faster
  (goal: at most 1 in 100 regions compared);
- injected: base k against slow k; found when loop A is slower (goal: in >= 95% of trials),
  and loop B must never be flagged (goal: 0). The kernel region holds loop A, so it may be
  flagged too; the table says how often.

A line per profile and per diff goes to ``--out`` as the benchmark goes (the whole file
rewritten atomically each time); one summary table is printed at the end.

    PYTHONPATH=. python benchmarks/diff_noise.py --out diff_noise.log   # needs a CUDA GPU

Not yet run on a GPU (written 2026-11-26 without one): 30 profile sessions, each compiling
the kernel once (the session keeps its builds private), estimated at 1-2 minutes on an H100.
"""

from __future__ import annotations

import argparse
import inspect
import sys
import tempfile
import time
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from proton_inject.analyze.diff import FASTER, MIN_CHANGE_PCT, SLOWER, diff_sides, load_side  # noqa: E402
from proton_inject.formats.files import write_atomic  # noqa: E402

GOAL_NULL_PCT = 1.0  # regions flagged in two profiles of one program, at most (%)
GOAL_FOUND_PCT = 95.0  # trials in which the slowed loop is flagged, at least (%)


@triton.jit
def two_loops_kernel(x_ptr, out_ptr, n_iter, BODY: tl.constexpr, EXTRA_A: tl.constexpr,
                     BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    a = x
    for _ in tl.range(0, n_iter):  # loop A
        for _k in tl.static_range(BODY + EXTRA_A):
            a = a * 0.999 + 0.001
    b = x + 1.0
    for _ in tl.range(0, n_iter):  # loop B
        for _k in tl.static_range(BODY):
            b = b * 0.998 + 0.002
    tl.store(out_ptr + offs, a + b)


def loop_locs() -> dict[str, str]:
    """``file:line`` of loops A and B, as region locations name them."""
    lines, first = inspect.getsourcelines(two_loops_kernel.fn)
    out = {}
    for i, text in enumerate(lines):
        for name in ("A", "B"):
            if text.rstrip().endswith(f"# loop {name}"):
                out[name] = f"{Path(__file__).name}:{first + i}"
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path, help="the log, written as the benchmark goes")
    ap.add_argument("--trials", type=int, default=15,
                    help="profiles of each program (null pairs: trials x (trials-1) / 2)")
    ap.add_argument("--launches", type=int, default=2, help="launches per profile")
    ap.add_argument("--body", type=int, default=40, help="multiply-adds per loop iteration")
    ap.add_argument("--extra", type=int, default=2, help="multiply-adds added to loop A's body")
    ap.add_argument("--iterations", type=int, default=64, help="iterations of each loop")
    ap.add_argument("--ctas", type=int, default=264, help="CTAs per launch (2 per SM of an H100)")
    ap.add_argument("--min-change", type=float, default=MIN_CHANGE_PCT,
                    help="diff's --min-change (its default is a placeholder this measures)")
    a = ap.parse_args(argv)
    if a.trials < 2 or a.launches < 1 or a.body < 1 or a.extra < 1 or a.iterations < 1 or a.ctas < 2:
        ap.error("--trials needs at least 2; --launches, --body, --extra, --iterations at least 1; "
                 "--ctas at least 2")
    return a


# --- counting what diff said ------------------------------------------------------------------


def _label(row: dict[str, Any]) -> str:
    return f"{row['name']} ({row['loc']})" if row.get("loc") else row["name"]


def flagged(data: dict[str, Any]) -> tuple[int, list[str]]:
    """Regions compared in a diff, and those flagged (slower or faster) with their change."""
    rows = [r for k in data["kernels"] for r in k["regions"]]
    return len(rows), [f"{_label(r)} {r['change_pct']:+.2f}%" for r in rows
                       if r["verdict"] in (SLOWER, FASTER)]


def injected(data: dict[str, Any], target: str) -> dict[str, Any]:
    """Of a diff against the slowed program: the target region's row (found: verdict slower),
    the regions of the same kind flagged besides it, and the others flagged (enclosing ones)."""
    rows = [r for k in data["kernels"] for r in k["regions"]]
    hit = [r for r in rows if r.get("loc") == target]
    if len(hit) != 1:
        raise ValueError(f"the diff has {len(hit)} regions at {target}, expected one: "
                         f"{[_label(r) for r in rows]}")
    t = hit[0]
    others = [r for r in rows if r is not t and r["verdict"] in (SLOWER, FASTER)]
    return {"found": t["verdict"] == SLOWER, "change": t["change_pct"], "interval": t["interval_pct"],
            "same_kind": [_label(r) for r in others if r["kind"] == t["kind"]],
            "enclosing": [_label(r) for r in others if r["kind"] != t["kind"]]}


@dataclass
class Tally:
    null_regions: int = 0
    null_flagged: list[str] = field(default_factory=list)
    trials: int = 0
    found: int = 0
    changes: list[float] = field(default_factory=list)
    same_kind: list[str] = field(default_factory=list)  # other loops flagged, over all trials
    enclosing: int = 0  # trials in which an enclosing region (the kernel) was flagged

    def add_null(self, data: dict[str, Any]) -> None:
        n, f = flagged(data)
        self.null_regions += n
        self.null_flagged += f

    def add_injected(self, got: dict[str, Any]) -> None:
        self.trials += 1
        self.found += got["found"]
        if got["change"] is not None:
            self.changes.append(got["change"])
        self.same_kind += got["same_kind"]
        self.enclosing += bool(got["enclosing"])


def _pct(n: int, of: int) -> str:
    return f"{100 * n / of:.1f}%" if of else "-"


def table(t: Tally, min_change: float) -> str:
    """The summary: each goal, what was measured, met or not."""
    null_rate = 100 * len(t.null_flagged) / t.null_regions if t.null_regions else None
    found_rate = 100 * t.found / t.trials if t.trials else None
    rows = [("test", "count", "of", "rate", "goal", "met"),
            ("same program: regions flagged", str(len(t.null_flagged)), str(t.null_regions),
             _pct(len(t.null_flagged), t.null_regions), f"<= {GOAL_NULL_PCT:g}%",
             "-" if null_rate is None else "yes" if null_rate <= GOAL_NULL_PCT else "NO"),
            ("loop A slowed: loop A flagged slower", str(t.found), str(t.trials),
             _pct(t.found, t.trials), f">= {GOAL_FOUND_PCT:g}%",
             "-" if found_rate is None else "yes" if found_rate >= GOAL_FOUND_PCT else "NO"),
            ("loop A slowed: other loops flagged", str(len(t.same_kind)), str(t.trials),
             _pct(len(t.same_kind), t.trials), "0", "-" if not t.trials else "yes" if not t.same_kind else "NO"),
            ("loop A slowed: kernel region flagged", str(t.enclosing), str(t.trials),
             _pct(t.enclosing, t.trials), "(holds loop A)", "")]
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(v.ljust(w[i]) if i == 0 else v.rjust(w[i]) for i, v in enumerate(r)).rstrip()
             for r in rows]
    if t.changes:
        c = sorted(t.changes)
        lines.append(f"loop A's change as diff measured it: median {c[len(c) // 2]:+.2f}% "
                     f"(min {c[0]:+.2f}%, max {c[-1]:+.2f}%) over {len(c)} trials")
    lines.append(f"diff --min-change {min_change:g}% (changes within it are within noise)")
    if t.null_flagged:
        lines.append("flagged in the same program: " + "; ".join(t.null_flagged[:6]) +
                     (" ..." if len(t.null_flagged) > 6 else ""))
    if t.same_kind:
        lines.append("other loops flagged: " + "; ".join(t.same_kind[:6]))
    return "\n".join(lines)


# --- the GPU part -----------------------------------------------------------------------------


class Log:
    """Lines written to ``path`` as they come (the file rewritten atomically each time)."""

    def __init__(self, path: Path):
        self.path, self.lines = path, []

    def __call__(self, line: str) -> None:
        self.lines.append(line)
        write_atomic(self.path, "\n".join(self.lines) + "\n")


def profile_once(out: Path, extra: int, args: argparse.Namespace, x: Any, y: Any) -> None:
    """One profile session of the program: its own compile, ``args.launches`` launches."""
    import torch

    from proton_inject import profile

    with profile(None, out, quiet=True) as res:
        for _ in range(args.launches):
            two_loops_kernel[(args.ctas,)](x, y, args.iterations, BODY=args.body, EXTRA_A=extra,
                                           BLOCK=128, num_warps=4)
        torch.cuda.synchronize()
    if not any(str(f).endswith(".json") and Path(f).parent.name == "raw" for f in res.files):
        raise RuntimeError(f"{out}: the profile kept no launch: {'; '.join(res.messages)}")


def measure(args: argparse.Namespace, log: Log, tmp: Path) -> Tally:
    import torch

    x = torch.rand(args.ctas * 128, device="cuda")
    y = torch.empty_like(x)
    for extra in (0, args.extra):  # plain builds, and the clocks up, before the first profile
        for _ in range(3):
            two_loops_kernel[(args.ctas,)](x, y, args.iterations, BODY=args.body, EXTRA_A=extra,
                                           BLOCK=128, num_warps=4)
    torch.cuda.synchronize()
    locs = loop_locs()
    log(f"loops: A at {locs['A']}, B at {locs['B']}; {args.iterations} iterations of {args.body} "
        f"multiply-adds, loop A +{args.extra} in the slow program; {args.ctas} CTAs, "
        f"{args.launches} launches per profile; {torch.cuda.get_device_name()}")
    sides: dict[str, list[Any]] = {"base": [], "slow": []}
    t0 = time.perf_counter()
    for k in range(args.trials):
        for kind, extra in (("base", 0), ("slow", args.extra)):
            out = tmp / f"{kind}{k}"
            profile_once(out, extra, args, x, y)
            sides[kind].append(load_side(out))
            log(f"profiled {kind} {k} ({time.perf_counter() - t0:.0f} s)")
    t = Tally()
    for i, j in combinations(range(args.trials), 2):
        data = diff_sides(sides["base"][i], sides["base"][j], min_change=args.min_change)
        t.add_null(data)
        n, f = flagged(data)
        log(f"null base {i} vs base {j}: {len(f)} of {n} flagged" + (f": {'; '.join(f)}" if f else ""))
    for k in range(args.trials):
        got = injected(diff_sides(sides["base"][k], sides["slow"][k], min_change=args.min_change),
                       locs["A"])
        t.add_injected(got)
        iv = got["interval"]
        log(f"injected {k}: loop A {got['change']:+.2f}% "
            + (f"[{iv[0]:+.2f}, {iv[1]:+.2f}] " if iv else "") + ("found" if got["found"] else "MISSED")
            + "".join(f"; also flagged: {r}" for r in got["same_kind"] + got["enclosing"]))
    return t


def has_gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not has_gpu():
        print("diff_noise: needs a CUDA GPU (none here); skipped")
        return 0
    log = Log(args.out)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        t = measure(args, log, Path(tmp))
    text = table(t, args.min_change)
    log(text)
    print(text)
    print(f"({time.perf_counter() - t0:.0f} s; log: {args.out})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
