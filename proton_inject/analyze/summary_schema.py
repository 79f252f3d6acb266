"""The report's summary (what ``report --json`` prints and ``diff`` reads back), key by key.

``summary.Summary.result`` builds it; the table (``text.py``), the error bars
(``uncertainty.py``), the overhead class (``overhead.py``), the source view and ``diff`` read
it. These types name every key once, with what it holds, so that a reader of any of them
finds here what a key means; the values stay plain JSON (dicts and lists), as the file holds
them.
"""


from typing import Any, NotRequired, TypedDict

from proton_inject.formats.auto_report import AutoReport


class Stats(TypedDict):
    """A distribution over region instances (cycles or ns)."""

    total: float
    mean: float
    min: float
    p5: float
    median: float
    p95: float
    max: float


# A region's error bar: +- cycles (widened by what --measure-overhead measured, where it did)
# and ns (None: the clock is a guess or a bound), a one-sided bias from recorded iterations
# inside it, and where each part comes from, a line each (``uncertainty.py``). Written in
# TypedDict's call form: one key is ``from``.
RegionUncertainty = TypedDict("RegionUncertainty", {
    "cycles": float, "bias_cycles": list[float] | None, "ns": float | None, "from": list[str]})


class RegionRow(TypedDict):
    """One region of a kernel: a row of its table."""

    scope: int  # the region's id in the launches' metadata
    name: str  # its name (``name [scope]`` where two share one)
    loc: str | None  # source ``file:line``
    parent: int | None  # the enclosing region's scope
    launches: int  # launches it ran in
    count: int  # instances
    cycles: Stats
    ns: Stats
    share: float | None  # its time / the CTAs' time (``cta_time_sum_ns``)
    per_unit: list[dict[str, Any]] | None  # per warp (group) where their medians differ
    per_rank: list[dict[str, Any]] | None  # per rank of a multi-process run
    slowest_rank: dict[str, Any] | None
    recorded_iterations_inside: float | None  # recorded loop iterations inside one instance
    kind: NotRequired[str]  # its region kind (``formats/region_kinds.py``); absent: not recorded
    uncertainty: NotRequired[RegionUncertainty]
    below_uncertainty: NotRequired[bool]  # its median is shorter than its error bar


class ClockGroup(TypedDict):
    """Launches whose cycles became ns the same way (``launch_groups.py``)."""

    source: str  # a name of ``clock_sources.CLOCK_SOURCES``
    bracket_missing: str | None
    first_reason: str | None  # why the globaltimer fit was rejected, in the first such launch
    launches: list[int]
    mhz_median: list[float | None]
    lowest: dict[str, Any]
    highest: dict[str, Any]


class KernelClock(TypedDict):
    sources: list[str]
    mhz_median: float | None
    groups: list[ClockGroup]


class Drops(TypedDict):
    """Records the buffers lost or could not pair."""

    records_written: int
    records_dropped: int
    warps_with_drops: int
    ctas_with_drops: int
    unmatched_starts: int
    unmatched_ends: int
    needed_buffer_size: int | None  # the --buffer-size that would have held them all
    buffer_size: int | None
    buffer_type: str  # ``formats.raw.BufferType``


class Sampled(TypedDict):
    warps: list[int] | None  # the warps that recorded (None: every warp)
    every_nth_cta: int
    every_nth_iteration: int
    ctas_with_records: int


class KernelSummary(TypedDict):
    """One kernel (and config): its launches merged."""

    kernel: str
    config: str | None
    launches: list[int]
    ranks: list[int] | None
    device: str | None
    grid: list[int]
    num_warps: int
    ctas: int
    clock: KernelClock
    kernel_wall_ns: float  # first CTA start to last CTA end, per launch, summed
    cta_time_sum_ns: float  # the CTAs' lifetimes over profiled warps: the shares' denominator
    ctas_overlong: dict[str, Any]  # CTAs whose records span more than their lifetime
    events: int
    sampled: Sampled
    per_rank: list[dict[str, Any]] | None
    slowest_rank: dict[str, Any] | None
    regions: list[RegionRow]  # the longest in total first
    drops: Drops
    record_cost_cycles: list[float | None]  # subtracted per record (None: not calibrated)
    warnings: list[str]
    issues: list[dict[str, Any]]  # formats.diagnostics groups
    source: NotRequired[Any]  # the source view (``source_view.attach``)
    perturbation_pct: NotRequired[float]  # what --measure-overhead measured the records to add


class ReportSummary(TypedDict):
    format: str  # "proton-inject-report"
    version: int
    kernels: list[KernelSummary]
    # per kernel, the launches that ran and those kept, where the run's index counted them
    launch_counts: NotRequired[dict[str, dict[str, int]]]
    # per kernel, the program's frames that launched its kept launches, and how many each
    launched_from: NotRequired[dict[str, dict[str, int]]]
    # per kernel Inductor generated: the model's "lines", FX source "nodes" and "aten" ops
    model_source: NotRequired[dict[str, dict[str, list[str]]]]
    # the `profile --auto` ranking (OUT/auto.json) of an input directory that holds one
    auto: NotRequired[AutoReport]
