"""The clock bracket against the clock a launch actually ran at: what a bracket's stated
uncertainty leaves out.

The bracket (``collect/bracket.py``) measures the SM clock in ~10 us right before and right
after a profiled launch; ``report`` turns the launch's cycles into ns at the mean of the two,
+- their difference plus two standard errors plus 0.1% (``analyze/bracket_rate.SYSTEMATIC_PCT``, set
from this benchmark's runs; before 2026-11-27, half the difference and no floor). Here a
kernel measures its own clock: each CTA waits for a globaltimer edge, reads ``%clock64``,
spins to the edge N ns later and reads it again (at an edge on both ends, the tick and the
reads' latency cancel; a first version read at a random phase of the tick and came out ~50 ns
long, 0.25% at 20 us); cycles / ns, median over CTAs, is the clock the launch ran at. Each
launch is profiled (a region around the spin, so it gets its bracket) in three states of the
chip: idle, right after a heavy matmul (the clock comes down), and with matmuls before and
after. Printed per launch: the bracket's clock and stated uncertainty, the launch's own clock,
their difference and whether it lies within the stated bar; then per span the largest
difference. ns through the bracket are off by that difference (a 200 us region by 0.05% is
100 ns).

    PYTHONPATH=. python benchmarks/bracket_vs_launch.py     # needs a CUDA GPU; ~1 minute
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from accuracy import CLOCK64, GLOBALTIMER, _decode_all, heavy_matmul  # noqa: E402

from proton_inject.api import profile  # noqa: E402

CTAS = 264


@triton.jit
def own_clock_kernel(out_ptr, n):
    """Per CTA: cycles and ns between two globaltimer edges about ``n`` ns apart, each edge
    seen by the first read past it and ``%clock64`` read right after (as the bracket does:
    the globaltimer's 32 ns tick and the reads' latency cancel)."""
    a = tl.inline_asm_elementwise(GLOBALTIMER, "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    t0 = a
    while t0 == a:
        t0 = tl.inline_asm_elementwise(GLOBALTIMER, "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    c0 = tl.inline_asm_elementwise(CLOCK64, "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    t = t0
    while t - t0 < n:
        t = tl.inline_asm_elementwise(GLOBALTIMER, "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    c1 = tl.inline_asm_elementwise(CLOCK64, "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    tl.store(out_ptr + 2 * tl.program_id(0), c1 - c0)
    tl.store(out_ptr + 2 * tl.program_id(0) + 1, t - t0)


def _matmul_short():
    heavy_matmul(0.3)


STATES = {"idle": (None, None), "after matmul": (heavy_matmul, None),
          "between matmuls": (_matmul_short, _matmul_short)}


def measure(spans: list[int], launches: int) -> list[dict]:
    """One row per profiled launch: state, span, the bracket's and the launch's own clock."""
    import torch

    out = torch.zeros(2 * CTAS, dtype=torch.int64, device="cuda")
    own_clock_kernel[(CTAS,)](out, 1000, num_warps=4)  # compiled plain once
    rows = []
    for state, (before, after) in STATES.items():
        for n in spans:
            own = []
            with tempfile.TemporaryDirectory() as tmp:
                with profile({"loops": "outer"}, tmp, quiet=True) as res:
                    for _ in range(launches + 1):  # the first warms up
                        if before is None:
                            time.sleep(0.2)
                        else:
                            before()
                        own_clock_kernel[(CTAS,)](out, n, num_warps=4)
                        v = out.view(CTAS, 2).cpu().numpy().astype(np.float64)
                        own.append(float(np.median(v[:, 0] / v[:, 1])) * 1000.0)
                        if after is not None:
                            after()
                    torch.cuda.synchronize()
                decoded = _decode_all(res.out, 0.0)
            for (d, _), mhz in list(zip(decoded, own, strict=True))[1:]:
                c = d.clock
                br = c.bracket or {}
                rows.append({"state": state, "span_ns": n, "source": c.source,
                             "bracket_mhz": br.get("mhz"), "stated_pct": br.get("uncertainty_pct"),
                             "before": (br.get("before") or {}).get("mhz"),
                             "after": (br.get("after") or {}).get("mhz"), "own_mhz": mhz})
    return rows


def table(rows: list[dict]) -> str:
    head = ("state", "span", "clock used", "bracket MHz", "stated", "before / after", "own MHz",
            "difference", "within")
    out = [head]
    worst: dict[int, list[float]] = {}
    for r in rows:
        if r["bracket_mhz"] is None:
            out.append((r["state"], f"{r['span_ns']:,} ns", r["source"], "none", "", "", f"{r['own_mhz']:.1f}",
                        "", ""))
            continue
        diff = 100.0 * (r["bracket_mhz"] - r["own_mhz"]) / r["own_mhz"]
        worst.setdefault(r["span_ns"], []).append(diff)
        out.append((r["state"], f"{r['span_ns']:,} ns", r["source"], f"{r['bracket_mhz']:.1f}",
                    f"+-{r['stated_pct']:.3f}%", " / ".join("-" if v is None else f"{v:.0f}"
                                                             for v in (r["before"], r["after"])),
                    f"{r['own_mhz']:.1f}", f"{diff:+.3f}%", "yes" if abs(diff) <= r["stated_pct"] else "NO"))
    w = [max(len(str(row[i])) for row in out) for i in range(len(head))]
    lines = ["  ".join(str(v).ljust(w[i]) for i, v in enumerate(row)).rstrip() for row in out]
    for span, d in sorted(worst.items()):
        a = np.abs(d)
        lines.append(f"span {span:,} ns: bracket - own clock over {len(d)} launches: median |diff| "
                     f"{np.median(a):.3f}%, largest {a.max():.3f}%")
    n_in = sum(1 for row in out[1:] if row[-1] == "yes")
    lines.append(f"within the bracket's stated uncertainty: {n_in} of {len(out) - 1} launches")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spans", default="20000,200000,2000000", help="spin lengths in ns")
    ap.add_argument("--launches", type=int, default=5, help="measured launches per state and span")
    args = ap.parse_args()
    t = time.perf_counter()
    rows = measure([int(s) for s in args.spans.split(",")], args.launches)
    print(table(rows))
    print(f"({time.perf_counter() - t:.0f} s)")


if __name__ == "__main__":
    main()
