"""What recording costs, as measured: the overhead class a report quotes for the options a
profile used (``overhead_class``), and what a recorded loop iteration adds to its loop.
Measurements and their commands: ``docs/overhead.md``, ``benchmarks/overhead.py``.
"""

from __future__ import annotations

from typing import Any

from proton_inject.formats import region_kinds

# What profiling cost, kernel time with records / without: ``benchmarks/overhead.py`` (median
# of 7 interleaved rounds, L2 flushed), keyed by the rule kind, who records and the record
# buffer per CTA: global, or shared with its size (its final copy costs ~16 SM-cycles per KiB,
# benchmarks/overhead_parts.py). Only what was measured; other combinations say so.
OVERHEAD_MEASURED_ON = "H100, Triton 3.6, 2026-11-24"
# What a recorded iteration of a loop lowered directly added to the loop around it on an
# H100, 2026-11-24: 4 spins of 2,000 cycles 24 each, 16 spins of 500 cycles 63, 256
# dependent multiply-adds 38 (the gap between iterations was 59, 59 and 42: it does not
# tell the cost either).
DIRECT_ITERATION_CYCLES = (24, 63)
WHOLE, ITER = "kernel + whole loops", "every iteration"
SHARED_BIG, SHARED_SMALL, GLOBAL = "shared buffer > 1 KiB", "shared buffer <= 1 KiB", "global buffer"
DIRECT = "direct stores"  # --buffer-type direct: our own lowering (direct.py)
OVERHEAD_CLASSES = {
    # the defaults where each record runs once per CTA: direct.py's lowering, warp 0
    (WHOLE, "one warp", DIRECT):
        "1.00-1.01 (Inductor rmsnorm 1.00, layer norm 8192^2 1.00, Inductor gelu 1.008; with the "
        "earlier 32-byte block: Liger RMSNorm 1.01, attention 1.00)",
    # the defaults with records inside top-level loops without dots or async copies
    (ITER, "one warp", DIRECT):
        "1.00-1.12 (layer norm 8192^2 1.11-1.12 against 1.16 in Proton's shared buffer, vector add "
        "1.00, softmax 1.01, Liger RMSNorm 1.00; loops of dots or async copies keep Proton's "
        "shared buffer: matmul 0.97-1.01, attention 1.00)",
    # records outside loops in Proton's global buffer, one warp (every warp when persistent)
    (WHOLE, "one warp", GLOBAL):
        "0.99-1.04 (Inductor gelu 1.04, Liger RMSNorm 1.02, Inductor rmsnorm 1.02, vector add 1.01, "
        "layer norm 8192^2 1.00-1.02, attention 1.00, matmul 0.99)",
    (WHOLE, "every warp", GLOBAL):
        "1.00-1.10 (persistent softmax 1.00, the default there; short CTAs: layer norm 8192^2 1.10, "
        "Inductor gelu 1.05, vector add 1.05; attention, matmul, Inductor rmsnorm 1.01)",
    # the defaults with records inside loops: shared memory (its size follows the kernel)
    **dict.fromkeys([(ITER, "one warp", SHARED_SMALL), (ITER, "one warp", SHARED_BIG)],
                    "0.99-1.20 (layer norm 8192^2 1.10-1.20, Liger RMSNorm 1.02, attention 1.00, "
                    "matmul 0.99)"),
    (ITER, "every warp", SHARED_BIG):
        "1.00-1.32 (persistent softmax 1.01; matmul/attention 1.00-1.02; layer norm 8192^2 1.28-1.32, "
        "Proton's default buffer)",
    (ITER, "one warp", GLOBAL): "1.06-1.25 (layer norm 8192^2 1.25, softmax 1.06): shared costs less in loops",
    (ITER, "every warp", GLOBAL): "1.02-1.55 (layer norm 8192^2 1.55, matmul/attention/softmax 1.02)",
    # shared memory for records outside loops (--buffer-type shared)
    (WHOLE, "one warp", SHARED_SMALL):
        "0.99-1.06 (layer norm 8192^2 1.04-1.06, softmax 1.05 with one warp, Inductor gelu 1.04, "
        "attention 1.02, Liger RMSNorm 1.02, vector add 1.01, Inductor rmsnorm 1.01, matmul 0.99)",
    (WHOLE, "one warp", SHARED_BIG):
        "1.02-1.05 (8 KiB buffer; layer norm 1.05, Inductor gelu 1.05, Inductor rmsnorm 1.02, vector add 1.02)",
    (WHOLE, "every warp", SHARED_SMALL):
        "1.00-1.08 (layer norm 1.08, Inductor gelu 1.04, Inductor rmsnorm 1.02, vector add 1.04, softmax 1.00)",
    (WHOLE, "every warp", SHARED_BIG):
        "1.00-1.15 (Proton's default 8 KiB buffer; short CTAs: layer norm 8192^2 1.09-1.14, Liger RMSNorm 1.11, "
        "Inductor gelu 1.15, Inductor rmsnorm 1.04; vector add 1.04, softmax 1.00, matmul/attention <= 1.03)",
}
# --sample-ctas 8, every iteration: loops with records run in two copies (benchmarks/overhead.py
# "loops both cta/8").
SAMPLED_ITER_CLASS = ("0.99-1.06 with 1 CTA in 8 (layer norm 8192^2 0.995 against 1.12 in every CTA; "
                      "matmul/attention 1.05-1.06 against 0.97-1.00: their main loop runs in two "
                      "copies, so do not sample big loops; softmax 1.01, vector add 1.04, Liger "
                      "RMSNorm 1.03)")
# --sample-iterations 4 with every iteration: no cheaper than every iteration, since the
# store stays in the loop's code (benchmarks/overhead.py "loops both:iter/4", 2026-11-24).
SAMPLED_ITERATIONS_CLASS = ("1.00-1.13 (layer norm 8192^2 1.125 against 1.116 for every iteration; "
                            "vector add 1.00, Inductor gelu 1.01, attention 1.00, matmul 0.98)")
# --sample-ctas 8 with the defaults: no cheaper, since every CTA still runs Proton's set-up and
# finalize and the sampled ones add a program-id test.
SAMPLED_CTAS_CLASS = ("1.00-1.04 with 1 CTA in 8 (Inductor gelu 1.04, Inductor rmsnorm 1.03, vector add 1.03, "
                      "Liger RMSNorm 1.03, matmul 1.01, softmax 1.01; no cheaper than recording every CTA: "
                      "each still runs Proton's set-up and finalize)")


def overhead_class(k: dict[str, Any]) -> str:
    """What these options cost in the measurements (``OVERHEAD_CLASSES``), or that they were
    not measured."""
    # each region's kind, as its launches recorded it (by its name in older launches)
    how = {region_kinds.runs(r["kind"] if "kind" in r else region_kinds.kind_from_name(r["name"]))
           for r in k["regions"]}
    if region_kinds.PER_ITERATION in how:
        rules = ITER
    elif how == {region_kinds.ONCE}:
        rules = WHOLE
    else:
        return "overhead: not measured for these regions (marks, ops or line ranges)"
    warps = (k.get("sampled") or {}).get("warps")
    who = "every warp" if not warps else "one warp" if len(warps) == 1 else f"{len(warps)} warps"
    drops = k.get("drops") or {}
    size = drops.get("buffer_size") or 0
    if drops.get("buffer_type") == "direct":
        buf = DIRECT
    elif drops.get("buffer_type") == "global":
        buf = GLOBAL
    else:
        buf = SHARED_SMALL if 0 < size <= 1024 else SHARED_BIG
    got = OVERHEAD_CLASSES.get((rules, who, buf))
    what = f"{rules}, {who}, {buf}"
    smp = (k.get("sampled") or {}).get("every_nth_cta") or 1
    if smp > 1:
        what += f", 1 CTA in {smp}"
        got = (SAMPLED_CTAS_CLASS if rules == WHOLE and buf == GLOBAL
               else SAMPLED_ITER_CLASS if rules == ITER else None)
    nth = (k.get("sampled") or {}).get("every_nth_iteration") or 1
    if nth > 1:
        what += f", iterations 0, {nth}, {2 * nth}, ..."
        got = SAMPLED_ITERATIONS_CLASS if rules == ITER and smp == 1 else None
    if got is None:
        return (f"overhead: {what}: not measured yet ({OVERHEAD_MEASURED_ON}: "
                "benchmarks/overhead.py measures it)")
    return f"overhead: {what}: kernel time x {got} (measured on {OVERHEAD_MEASURED_ON})"
