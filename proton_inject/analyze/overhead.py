"""What recording costs, as measured: the overhead class a report quotes for the options a
profile used (``overhead_class``), and what a recorded loop iteration adds to its loop.
The numbers, with where, when and how each was measured, are ``data/measured.json``; the
write-up is ``docs/overhead.md``.
"""

from __future__ import annotations

from proton_inject.analyze.summary_schema import KernelSummary
from proton_inject.formats import region_kinds
from proton_inject.formats.raw import BufferType
from proton_inject.formats.schema import measured

# The measurements, with where and how each was made: proton_inject/data/measured.json.
_MEASURED = measured()
_OVERHEAD = _MEASURED["overhead"]
OVERHEAD_MEASURED_ON = _OVERHEAD["measured_on"]
# What a recorded iteration of a loop lowered directly adds to the loop around it (cycles).
DIRECT_ITERATION_CYCLES = tuple(_MEASURED["direct_iteration_cycles"]["cycles"])
WHOLE, ITER = "kernel + whole loops", "every iteration"
SHARED_BIG, SHARED_SMALL, GLOBAL = "shared buffer > 1 KiB", "shared buffer <= 1 KiB", "global buffer"
DIRECT = "direct stores"  # --buffer-type direct: our own lowering (direct.py)
# kernel time with records / without, by (rule kind, who records, record buffer per CTA)
OVERHEAD_CLASSES = {(c["rules"], c["who"], c["buffer"]): c["ratio"] for c in _OVERHEAD["classes"]}
SAMPLED_ITER_CLASS = _OVERHEAD["sampled_ctas_every_iteration"]["ratio"]  # --sample-ctas, iterations
SAMPLED_ITERATIONS_CLASS = _OVERHEAD["sampled_iterations"]["ratio"]  # --sample-iterations
SAMPLED_CTAS_CLASS = _OVERHEAD["sampled_ctas_whole"]["ratio"]  # --sample-ctas, Proton's global buffer
SAMPLED_DIRECT_CLASS = _OVERHEAD["sampled_ctas_direct"]["ratio"]  # --sample-ctas, lowered directly
# Cycles a region's median may be off by, per buffer type, after the calibrated record cost
# is subtracted and without a calibration (``uncertainty.py``).
RECORD_COST_ERROR = _MEASURED["record_cost_error_cycles"]


def overhead_class(k: KernelSummary) -> str:
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
    if drops.get("buffer_type") == BufferType.DIRECT:
        buf = DIRECT
    elif drops.get("buffer_type") == BufferType.GLOBAL:
        buf = GLOBAL
    else:
        buf = SHARED_SMALL if 0 < size <= 1024 else SHARED_BIG
    got = OVERHEAD_CLASSES.get((rules, who, buf))
    what = f"{rules}, {who}, {buf}"
    smp = (k.get("sampled") or {}).get("every_nth_cta") or 1
    if smp > 1:
        what += f", 1 CTA in {smp}"
        got = (SAMPLED_CTAS_CLASS if rules == WHOLE and buf == GLOBAL
               else SAMPLED_DIRECT_CLASS if rules == WHOLE and buf == DIRECT
               else SAMPLED_ITER_CLASS if rules == ITER else None)
    nth = (k.get("sampled") or {}).get("every_nth_iteration") or 1
    if nth > 1:
        what += f", iterations 0, {nth}, {2 * nth}, ..."
        got = SAMPLED_ITERATIONS_CLASS if rules == ITER and smp == 1 else None
    if got is None:
        return (f"overhead: {what}: not measured yet ({OVERHEAD_MEASURED_ON}: "
                "benchmarks/overhead.py measures it)")
    return f"overhead: {what}: kernel time x {got} (measured on {OVERHEAD_MEASURED_ON})"
