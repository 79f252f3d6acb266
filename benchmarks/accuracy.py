"""Timing accuracy: spin kernels that know how long they spun, against what the records say.

Each CTA spins on ``%clock64`` until N cycles pass (or on ``%globaltimer`` until N ns pass)
and stores what it saw; ``--loops outer`` puts a region around each spin loop. Cases: short
and long spins, a loop of spins (nested regions: its last spin against its truth, the whole
loop against the sum of its spins' truths and by its self time), two spins back to back,
sampled warps, globaltimer spins, and a globaltimer spin right after a heavy matmul has
pulled the clock down. Printed per case: the truth (median over CTAs) and the error of the region (per CTA,
warp 0: median, p5..p95), raw and after subtracting the calibrated record cost. The ns cases
print a row per launch (the first one warms up), with the clock that launch's cycles went
through (globaltimer fit, clock bracket, or a guess) and its stated uncertainty.

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
from proton_inject.compile_hook import profile  # noqa: E402
from proton_inject.decode import DecodeWarning, decode, load_raw  # noqa: E402
from proton_inject.lowering import LoweringOptions  # noqa: E402
from proton_inject.report import expand_inputs  # noqa: E402

CLOCK64 = tl.constexpr("mov.u64 $0, %clock64;")
GLOBALTIMER = tl.constexpr("mov.u64 $0, %globaltimer;")
RULES = {"loops": "outer"}  # a region around each loop, nothing else
# Every warp records, Proton's own buffer size: what the README table was measured with. (The
# tool's default records warp 0 of each partition: the "warp 0 only" case.)
OPTIONS = LoweringOptions(warps="all", auto_size=False, buffer_type="shared")


@triton.jit
def _now(TIMER: tl.constexpr):
    if TIMER:
        return tl.inline_asm_elementwise(GLOBALTIMER, "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    else:
        return tl.inline_asm_elementwise(CLOCK64, "=l", [], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit
def spin_kernel(out_ptr, n, TIMER: tl.constexpr):
    """One region: the spin loop. Truth: the timer from before the loop to its last read."""
    t0 = _now(TIMER)
    t = t0
    while t - t0 < n:
        t = _now(TIMER)
    tl.store(out_ptr + tl.program_id(0), t - t0)


@triton.jit
def nested_kernel(out_ptr, n, reps):
    """Regions: the outer loop (scope 0) around ``reps`` spin loops (scope 1).
    Stored: the sum of the inner spins, each from its own clock reads (the outer region minus
    it is the loop's own overhead), then the last inner spin (its truth)."""
    total = tl.full([], 0, tl.int64)
    last = total
    for _ in range(reps):
        s0 = _now(False)
        s = s0
        while s - s0 < n:
            s = _now(False)
        last = s - s0
        total += last
    tl.store(out_ptr + 2 * tl.program_id(0), total)
    tl.store(out_ptr + 2 * tl.program_id(0) + 1, last)


@triton.jit
def back_to_back_kernel(out_ptr, n):
    """Two spin loops one after the other (scopes 0 and 1), each with its own truth."""
    a0 = _now(False)
    a = a0
    while a - a0 < n:
        a = _now(False)
    b0 = _now(False)
    b = b0
    while b - b0 < n:
        b = _now(False)
    tl.store(out_ptr + 2 * tl.program_id(0), a - a0)
    tl.store(out_ptr + 2 * tl.program_id(0) + 1, b - b0)


@dataclass
class Case:
    name: str
    unit: str  # "cycles" or "ns"
    truth: float  # median over CTAs
    raw: np.ndarray  # per CTA error, no compensation
    comp: np.ndarray  # per CTA error, record cost subtracted
    clock: str
    # "error": region - its truth; "overhead": region - the sum of its children's truths
    # (what the region's own code took, not an error)
    kind: str = "error"


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


def self_per_cta(d, parent: int, child: int, ctas: int) -> np.ndarray:
    """Cycles of ``parent`` in warp 0 of each CTA (one instance per CTA) minus the sum of its
    ``child`` regions there: the parent's own code, by the records alone."""
    e = d.events
    w0 = e.warp == 0
    out = np.full(ctas, np.nan)
    m = w0 & (e.scope == parent)
    out[e.cta[m]] = e.cycles[m]
    m = w0 & (e.scope == child)
    np.subtract.at(out, e.cta[m], e.cycles[m].astype(np.float64))
    return out


def run_case(name, kernel, args, truths, unit, cost, options=None, ctas=264, before=None,
             overhead=()):
    """Launch ``kernel`` twice (the first warms it up) profiled; compare its regions with the
    truths it stored. ``truths``: [(scope, column of out)] per region to check. Columns in
    ``overhead`` hold the sum of the region's children's truths, not its own: the region
    minus it is the region's own overhead, printed as such."""
    import torch

    cols = max(c for _, c in truths) + 1
    out = torch.zeros(ctas * cols, dtype=torch.int64, device="cuda")
    seen = []  # each launch's truths (the second launch overwrites the first's)
    with tempfile.TemporaryDirectory() as tmp:
        with profile(RULES, tmp, options or OPTIONS, quiet=True) as res:
            for i in range(2):
                if before is not None and i == 1:
                    before()
                kernel[(ctas,)](out, *args, num_warps=4)
                seen.append(out.clone())
            torch.cuda.synchronize()
        decoded = _decode_all(res.out, cost)
    # cycles: the second launch; ns: every launch (the clock is what differs between them)
    runs = list(zip(decoded, seen, strict=True))[-1 if unit == "cycles" else 0:]
    cases = []
    for i, ((raw_d, comp_d), out_i) in enumerate(runs):
        truth_all = out_i.view(ctas, cols).cpu().numpy().astype(np.float64)
        for scope, col in truths:
            t = truth_all[:, col]
            r = region_per_cta(raw_d, scope, unit, ctas)
            c = region_per_cta(comp_d, scope, unit, ctas)
            ok = ~np.isnan(r) & ~np.isnan(c)
            label = name if len(truths) == 1 else f"{name}: {raw_d.scope_name(scope)}"
            label += " minus its inner spins = its own overhead" if col in overhead else ""
            label += f" [launch {i}]" if len(runs) > 1 else ""
            cases.append(Case(label, unit, float(np.median(t)), r[ok] - t[ok], c[ok] - t[ok],
                              clock_label(comp_d.clock), "overhead" if col in overhead else "error"))
        for scope, col in truths if overhead else ():
            if col in overhead:  # the same, by the records alone: region - its children
                child = [s for s, p in raw_d.meta.scope_parents.items() if p == scope]
                r, c = (self_per_cta(x, scope, child[0], ctas) for x in (raw_d, comp_d))
                ok = ~np.isnan(r) & ~np.isnan(c)
                cases.append(Case(f"{name}: {raw_d.scope_name(scope)} minus its inner regions = "
                                  "its self time", unit, 0.0, r[ok], c[ok],
                                  clock_label(comp_d.clock), "self"))
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
    """Calibrate the record cost of each options used, then run every case, each compensated
    with the cost of its own options (as ``run`` and ``report`` do); returns
    ({options described: calibration}, cases)."""
    cals: dict[str, dict] = {}

    def cost(options: LoweringOptions) -> float:
        name = calibrate.describe(options)
        if name not in cals:
            cals[name] = calibrate.measure(options, save=False)
        return cals[name]["cycles"]

    r = cost(OPTIONS)
    cases: list[Case] = []
    for n in (2_000, 200_000) if quick else (2_000, 20_000, 200_000):
        cases += run_case(f"spin {n:,} cycles", spin_kernel, (n, False), [(0, 0)], "cycles", r)
    cases += run_case("4 x spin 2,000 cycles", nested_kernel, (2_000, 4), [(0, 0), (1, 1)], "cycles", r,
                      overhead=(0,))
    cases += run_case("back to back 2 x 2,000", back_to_back_kernel, (2_000,), [(0, 0), (1, 1)],
                      "cycles", r)
    warp0 = LoweringOptions(warps=(0,), auto_size=False, buffer_type="shared")
    cases += run_case("spin 2,000 cycles, warp 0 only", spin_kernel, (2_000, False), [(0, 0)], "cycles",
                      cost(warp0), warp0)
    # Warp 0's two records straight to global memory through Proton's lowering (the defaults
    # before direct.py), and the tool's defaults for this kernel: the same records lowered
    # directly (--buffer-type direct).
    global0 = LoweringOptions(buffer_type="global", warps=(0,))
    cases += run_case("spin 2,000 cycles, warp 0, Proton's global buffer", spin_kernel,
                      (2_000, False), [(0, 0)], "cycles", cost(global0), global0)
    defaults = LoweringOptions(buffer_type="direct", warps=(0,))
    cases += run_case("spin 2,000 cycles, defaults (direct, warp 0)", spin_kernel, (2_000, False),
                      [(0, 0)], "cycles", cost(defaults), defaults)
    for n in (20_000, 200_000):
        cases += run_case(f"globaltimer spin {n:,} ns", spin_kernel, (n, True), [(0, 0)], "ns", r)
    cases += run_case("globaltimer 200,000 ns after matmul", spin_kernel, (200_000, True), [(0, 0)], "ns",
                      r, before=heavy_matmul)
    return cals, cases


def _err(e: np.ndarray, unit: str, truth: float) -> str:
    if len(e) == 0:
        return "no regions"
    med, lo, hi = np.median(e), np.percentile(e, 5), np.percentile(e, 95)
    if unit == "ns":
        return f"{100 * med / truth:+.2f}% ({100 * lo / truth:+.2f}..{100 * hi / truth:+.2f})"
    return f"{med:+.0f} ({lo:+.0f}..{hi:+.0f})"


def table(cal: dict[str, dict], cases: list[Case]) -> str:
    rows = [("case", "truth", "raw error", "compensated error", "CTAs", "clock")]
    for c in cases:
        rows.append((c.name, f"{c.truth:,.0f} {c.unit}", _err(c.raw, c.unit, c.truth),
                     _err(c.comp, c.unit, c.truth), str(len(c.comp)), c.clock))
    w = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [f"record cost, {name}: {c['cycles']:g} cycles per record (calibration region p5 "
             f"{c['p5']:g}, p95 {c['p95']:g}, {c['instances']:,} regions) on {c['device']}"
             for name, c in cal.items()]
    lines += ["error = region - truth per CTA (warp 0): median (p5..p95); an 'own overhead' row "
             "gives region - the sum of its inner spins' truths instead (the loop's own code, less "
             "the inner start records the spins absorb), a 'self time' row region - its inner "
             "regions (the loop's own code: negative only if compensation over-corrects)"]
    lines += ["  ".join(v.ljust(w[i]) for i, v in enumerate(r)) for r in rows]
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
