"""Timing accuracy: kernels that know how long their loops took, against what the records say.

Cycle truths come from the same kernel launched plain (no records): each loop sits between two
``%clock64`` reads, and the plain launch's cycles between them (median over CTAs) is what the
loop takes when nobody measures it; ``--loops outer`` then puts a region around each loop in
an instrumented launch, and its cycles per CTA are compared with that truth. Loops: spins on
``%clock64`` until N cycles pass (short and long), loops of fixed work (N dependent
multiply-adds), and a loop of spins (its last spin, and the whole loop: nested regions; without
``--quick`` also 16 shorter spins, and the loop of multiply-adds with each iteration recorded).
(Two loops back to back were dropped: without records between them the compiler built the
plain kernel's first loop differently, 28 cycles an iteration against 7, so its plain launch
was no truth for the instrumented one.) Each with the tool's defaults (a region around a top-level loop is
lowered directly, ``direct.py``) and some with Proton's lowerings. ns truths come from the
instrumented launch itself: spins on ``%globaltimer`` until N ns pass (short, long, and right
after a heavy matmul has pulled the clock down), one row per launch (the first warms up) with
the clock that launch's cycles went through and its stated uncertainty. Printed per case: the
truth and the error of the region (per CTA, warp 0: median, p5..p95), raw and after
subtracting the calibrated record cost; then the region's median as ``report`` states it, its
stated uncertainty (``analyze/uncertainty.py``: +- and the one-sided bias of recorded
iterations inside it) and whether the truth lies within it, counted at the end (issue 30's
goal: every region).

    PYTHONPATH=. python benchmarks/accuracy.py --quick     # needs a CUDA GPU; < 2 minutes
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from proton_inject import calibrate  # noqa: E402
from proton_inject._calibration_kernel import record_cost_calibration  # noqa: E402
from proton_inject.analyze.decode import decode  # noqa: E402
from proton_inject.analyze.issues import DecodeWarning  # noqa: E402
from proton_inject.analyze.report import expand_inputs  # noqa: E402
from proton_inject.analyze.summary import LaunchData, summarize  # noqa: E402
from proton_inject.analyze.uncertainty import add_perturbation  # noqa: E402
from proton_inject.api import profile  # noqa: E402
from proton_inject.formats import run_index  # noqa: E402
from proton_inject.formats.raw import load_raw  # noqa: E402
from proton_inject.lower.options import LoweringOptions  # noqa: E402

CLOCK64 = tl.constexpr("mov.u64 $0, %clock64;")
GLOBALTIMER = tl.constexpr("mov.u64 $0, %globaltimer;")
# The loops of fixed work: calibrate's own kernel, n dependent multiply-adds between two
# %clock64 reads (fixed work, unlike a spin, which ends at a time and so absorbs whatever runs
# before it); it stores its cycles, then a bit of its result (so the loop stays).
work_kernel = record_cost_calibration
RULES = {"loops": "outer"}  # a region around each loop, nothing else
DEFAULTS = LoweringOptions()  # the tool's defaults: direct for top-level loops
# Every warp records, Proton's own buffer size: Proton's lowering as it comes.
PROTON = LoweringOptions(warps="all", auto_size=False, buffer_type="shared")
GLOBAL0 = LoweringOptions(buffer_type="global", warps=(0,))  # the defaults before direct.py
# Instrumented/plain launch pairs per cycle case for the measured perturbation (after a first
# pair, which --measure-overhead leaves out).
MEASURED_PAIRS = 50


@triton.jit
def _now(TIMER: tl.constexpr):
    if TIMER:
        return tl.inline_asm_elementwise(GLOBALTIMER, "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    else:
        return tl.inline_asm_elementwise(CLOCK64, "=l", [], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit
def spin_kernel(out_ptr, n, TIMER: tl.constexpr):
    """One region: the spin loop. Stored: the timer from before the loop to its last read in
    it (the ns truth: a %globaltimer read after the loop would add its own long latency), then
    to a read right after the loop (the cycle truth, with the loop's exit)."""
    t0 = _now(TIMER)
    t = t0
    while t - t0 < n:
        t = _now(TIMER)
    t1 = _now(TIMER)
    tl.store(out_ptr + 2 * tl.program_id(0), t - t0)
    tl.store(out_ptr + 2 * tl.program_id(0) + 1, t1 - t0)


@triton.jit
def nested_kernel(out_ptr, n, reps):
    """Regions: the outer loop (scope 0) around ``reps`` spin loops (scope 1). Stored: the
    outer loop's cycles, then the last inner spin's."""
    last = tl.full([], 0, tl.int64)
    o0 = _now(False)
    for _ in range(reps):
        s0 = _now(False)
        s = s0
        while s - s0 < n:
            s = _now(False)
        last = _now(False) - s0
    o1 = _now(False)
    tl.store(out_ptr + 2 * tl.program_id(0), o1 - o0)
    tl.store(out_ptr + 2 * tl.program_id(0) + 1, last)


@dataclass
class ErrorBar:
    """A region's median as ``report`` gives it and its stated uncertainty, in one unit."""

    median: float
    plus_minus: float | None  # None: no error bar (ns through a clock that was not measured)
    bias: tuple[float, float] | None  # recorded iterations inside: the region reads longer by
    perturbation_pct: float | None = None  # --measure-overhead's share, included in plus_minus

    def holds(self, truth: float, truth_pm: float = 0.0) -> bool | None:
        """Whether ``truth`` (known to +-``truth_pm``) meets median -+ plus_minus, less the
        bias; None without a bar."""
        if self.plus_minus is None:
            return None
        lo_b, hi_b = self.bias or (0.0, 0.0)
        return (self.median - self.plus_minus - hi_b <= truth + truth_pm
                and truth - truth_pm <= self.median + self.plus_minus - lo_b)


@dataclass
class Case:
    name: str
    unit: str  # "cycles" or "ns"
    truth: float  # median over CTAs
    raw: np.ndarray  # per CTA error, no compensation
    comp: np.ndarray  # per CTA error, record cost subtracted
    clock: str
    lowering: str = ""  # how the region's records were lowered (the launch's buffer type)
    bar: ErrorBar | None = None  # the region as report states it
    # The truth's own resolution: an ns truth is the difference of two %globaltimer reads,
    # each rounded to the timer's tick (32 ns on an H100), so it is known to +-1 tick; a
    # cycle truth (%clock64) to +-1 cycle, nothing against the bars.
    truth_pm: float = 0.0


def error_bar(d, scope: int, unit: str, measured: dict | None = None) -> ErrorBar | None:
    """Region ``scope`` of decoded launch ``d`` as the report summarizes it (every recorded
    warp), with the uncertainty it states (``measured``: what ``--measure-overhead`` measured,
    as the report reads it from run.json); None when the launch has no such region."""
    [k] = summarize([LaunchData.from_decoded(d)])["kernels"]
    add_perturbation(k, run_index.perturbation_for(measured or {}, k["kernel"], k["config"]))
    r = next((r for r in k["regions"] if r["scope"] == scope), None)
    if r is None:
        return None
    u = r["uncertainty"]
    bias = tuple(u["bias_cycles"]) if u["bias_cycles"] else None
    pert = k.get("perturbation_pct")
    if unit == "cycles":
        return ErrorBar(r["cycles"]["median"], u["cycles"], bias, pert)
    mhz = k["clock"]["mhz_median"]
    return ErrorBar(r["ns"]["median"], u["ns"],
                    tuple(b * 1000.0 / mhz for b in bias) if bias and mhz else None, pert)


def _decode_all(out: str, cost: float) -> list[tuple]:
    raws, _ = expand_inputs([out])
    got = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DecodeWarning)
        for p in raws:
            buf, meta = load_raw(p)
            got.append((decode(buf, meta, record_cost=0.0), decode(buf, meta, record_cost=cost)))
    got.sort(key=lambda x: x[0].meta.launch)
    return got


def region_per_cta(d, scope: int, unit: str, ctas: int) -> np.ndarray:
    """The region of ``scope`` in warp 0 of each CTA (its last instance), NaN where missing."""
    e = d.events
    m = (e.scope == scope) & (e.warp == 0)
    val = (e.cycles if unit == "cycles" else e.dur_ns)[m].astype(np.float64)
    out = np.full(ctas, np.nan)
    order = np.argsort(e.start[m], kind="stable")  # the last instance wins
    out[e.cta[m][order]] = val[order]
    return out


def run_case(name, kernel, args, truths, unit, cost, options, cols, ctas=264, before=None,
             rules=RULES):
    """Launch ``kernel`` twice plain and then profiled and compare its regions with the truths
    it stored (``cols`` int64 per CTA). ``truths``: [(scope, column)] per region.
    cycles: the truth is the plain launch's median over CTAs, and the profile measures the
    records' perturbation as ``--measure-overhead`` does (``MEASURED_PAIRS`` pairs of
    instrumented and plain launches after a first pair; the last instrumented launch is
    compared); ns: three profiled launches, the last two compared (``before`` runs before the
    third), each CTA's own value in the same launch (what is checked is the clock that turns
    cycles into ns). The first run of the instrumented build is left out: its region holds ~40
    ns of instruction fetch before the truth's first timer read (an H100's 20 us spin read
    +0.18% on it, -0.01% on the next launch)."""
    import torch

    out = torch.zeros(ctas * cols, dtype=torch.int64, device="cuda")
    for _ in range(2):  # plain: compiled before the profile, kept beside the instrumented build
        kernel[(ctas,)](out, *args, num_warps=4)
    plain = out.view(ctas, cols).cpu().numpy().astype(np.float64)
    measured = unit == "cycles"
    seen = []  # each instrumented launch's truths (the next launch overwrites them)
    with tempfile.TemporaryDirectory() as tmp:
        with profile(rules, tmp, options=options, quiet=True, measure_overhead=measured,
                     keep_launches="all") as res:  # every launch is compared
            for i in range(2 + 2 * MEASURED_PAIRS if measured else 3):
                if before is not None and i == 2:
                    before()
                kernel[(ctas,)](out, *args, num_warps=4)
                if not (measured and i % 2):  # odd launches ran plain: not decoded
                    seen.append(out.clone())
            torch.cuda.synchronize()
        decoded = _decode_all(res.out, cost)
        measured = run_index.measured_overheads([Path(res.out) / "run.json"])
    # cycles: the last launch; ns: all but the first (the clock is what differs between them)
    runs = list(zip(decoded, seen, strict=True))[-1 if unit == "cycles" else 1:]
    cases = []
    for i, ((raw_d, comp_d), out_i) in enumerate(runs):
        same = out_i.view(ctas, cols).cpu().numpy().astype(np.float64)
        for scope, col in truths:
            t = np.full(ctas, np.median(plain[:, col])) if unit == "cycles" else same[:, col]
            r = region_per_cta(raw_d, scope, unit, ctas)
            c = region_per_cta(comp_d, scope, unit, ctas)
            ok = ~np.isnan(r) & ~np.isnan(c)
            label = name if len(truths) == 1 else f"{name}: {raw_d.scope_name(scope)}"
            label += f" [launch {i}]" if len(runs) > 1 else ""
            tick = float(comp_d.clock.tick_ns or 0) if unit == "ns" else 0.0
            cases.append(Case(label, unit, float(np.median(t)), r[ok] - t[ok], c[ok] - t[ok],
                              clock_label(comp_d.clock), raw_d.meta.buffer_type,
                              error_bar(comp_d, scope, unit, measured), tick))
    return cases


def clock_label(clock) -> str:
    """Which clock a launch used, its rate and stated uncertainty (a guess has none)."""
    u = clock.uncertainty_pct
    tail = f" +-{u:.2g}%" if u is not None else " (a guess)" if clock.source not in (
        "--clock-mhz",) else ""
    return f"{clock.source} {np.median(clock.segment_mhz):.0f} MHz{tail}"


def heavy_matmul(seconds: float = 1.0):
    """Keep the tensor cores busy long enough for the SM clock to come down."""
    import torch

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    t = time.perf_counter()
    while time.perf_counter() - t < seconds:
        for _ in range(10):
            a @ b
        torch.cuda.synchronize()


def measure(quick: bool = True) -> tuple[dict, list[Case]]:
    """Calibrate the record cost of each lowering used, then run every case, each compensated
    with the cost of the lowering it got (as ``run`` and ``report`` do); returns
    ({lowering described: calibration}, cases)."""
    cals: dict[str, dict] = {}

    def cost(options: LoweringOptions) -> float:
        name = calibrate.describe(options)
        if name not in cals:
            cals[name] = calibrate.measure(options, save=False)
        return cals[name]["cycles"]

    direct = LoweringOptions(buffer_type="direct", warps=(0,))  # what DEFAULTS give these loops
    d, g, p = cost(direct), cost(GLOBAL0), cost(PROTON)
    cases: list[Case] = []
    for n in (2_000, 200_000) if quick else (2_000, 20_000, 200_000):
        cases += run_case(f"spin {n:,} cycles", spin_kernel, (n, False), [(0, 1)], "cycles", d,
                          DEFAULTS, 2)
    for n in (100, 1_000):
        cases += run_case(f"work {n:,} iterations", work_kernel, (n,), [(0, 0)], "cycles", d,
                          DEFAULTS, 2)
    cases += run_case("4 x spin 2,000 cycles", nested_kernel, (2_000, 4), [(0, 0), (1, 1)], "cycles",
                      d, DEFAULTS, 2)
    if not quick:  # more records inside loops: what each recorded iteration adds differs
        cases += run_case("16 x spin 500 cycles", nested_kernel, (500, 16), [(0, 0), (1, 1)],
                          "cycles", d, DEFAULTS, 2)
        cases += run_case("work 256 iterations, each recorded", work_kernel, (256,), [(0, 0)],
                          "cycles", d, DEFAULTS, 2, rules={"loops": "both"})
    for label, opts, c in (("Proton's global buffer, warp 0", GLOBAL0, g),
                           ("Proton's lowering, every warp", PROTON, p)):
        cases += run_case(f"spin 2,000 cycles, {label}", spin_kernel, (2_000, False), [(0, 1)],
                          "cycles", c, opts, 2)
        cases += run_case(f"work 1,000 iterations, {label}", work_kernel, (1_000,), [(0, 0)],
                          "cycles", c, opts, 2)
    for n in (20_000, 200_000):
        cases += run_case(f"globaltimer spin {n:,} ns", spin_kernel, (n, True), [(0, 0)], "ns", d,
                          DEFAULTS, 2)
    cases += run_case("globaltimer 200,000 ns after matmul", spin_kernel, (200_000, True), [(0, 0)],
                      "ns", d, DEFAULTS, 2, before=heavy_matmul)
    return cals, cases


def _err(e: np.ndarray, unit: str, truth: float) -> str:
    if len(e) == 0:
        return "no regions"
    med, lo, hi = np.median(e), np.percentile(e, 5), np.percentile(e, 95)
    if unit == "ns":
        return f"{100 * med / truth:+.2f}% ({100 * lo / truth:+.2f}..{100 * hi / truth:+.2f})"
    return f"{med:+.0f} ({lo:+.0f}..{hi:+.0f})"


def _bar(c: Case) -> tuple[str, str]:
    """The stated median and uncertainty of a case's region, and whether its truth is inside."""
    b = c.bar
    if b is None:
        return "no region", "-"
    if b.plus_minus is None:
        return f"{b.median:,.0f} (no error bar)", "no bar"
    bias = f" bias +{b.bias[0]:,.0f}..+{b.bias[1]:,.0f}" if b.bias else ""
    pert = f" (perturbation {b.perturbation_pct:.2g}%)" if b.perturbation_pct is not None else ""
    return f"{b.median:,.0f} +-{b.plus_minus:,.0f}{bias}{pert}", "yes" if b.holds(c.truth, c.truth_pm) else "NO"


def table(cal: dict[str, dict], cases: list[Case]) -> str:
    rows = [("case", "lowering", "truth", "raw error", "compensated error", "CTAs", "clock",
             "stated", "truth within")]
    for c in cases:
        known = f" +-{c.truth_pm:g}" if c.truth_pm else ""
        rows.append((c.name, c.lowering, f"{c.truth:,.0f}{known} {c.unit}", _err(c.raw, c.unit, c.truth),
                     _err(c.comp, c.unit, c.truth), str(len(c.comp)), c.clock, *_bar(c)))
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [f"record cost, {name}: {c['cycles']:g} cycles per record (calibration loop: region "
             f"{c.get('region', float('nan')):g}, plain {c.get('plain', float('nan')):g}, "
             f"launch pairs {min(c['differences']):+g}..{max(c['differences']):+g}, "
             f"{c['instances']:,} regions) on {c['device']}" for name, c in cal.items()]
    lines += ["error = region - truth per CTA (warp 0): median (p5..p95); cycle truths: the "
              "plain launch's cycles between the reads right around the loop (median over CTAs)"]
    lines += ["stated = the region's median as report gives it (every recorded warp) +- its stated "
              "uncertainty (analyze/uncertainty.py; cycle rows: with the perturbation "
              f"--measure-overhead measured over {MEASURED_PAIRS} launch pairs), less the bias of "
              "recorded iterations inside; "
              "within: the two intervals meet (an ns truth is known to +-1 globaltimer tick)"]
    lines += ["  ".join(v.ljust(w[i]) for i, v in enumerate(r)).rstrip() for r in rows]
    verdicts = [_bar(c)[1] for c in cases]
    lines.append(f"truth within the stated uncertainty: {verdicts.count('yes')} of {len(cases)} "
                 f"regions ({verdicts.count('NO')} outside, {verdicts.count('no bar')} without an "
                 f"error bar, {verdicts.count('-')} without the region)")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer cases (under 2 minutes)")
    args = ap.parse_args()
    t = time.perf_counter()
    cal, cases = measure(args.quick)
    print(table(cal, cases))
    print(f"({time.perf_counter() - t:.0f} s)")


if __name__ == "__main__":
    main()
