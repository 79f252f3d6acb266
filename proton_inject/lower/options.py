"""Install Triton's own Proton lowering passes for instrumented TTGIR (used by check and run).

Triton's CUDA and HIP backends call ``<Backend>.instrumentation.patch(stage, pm, ctx)`` at two
points of ``make_llir``: ``ttgpuir_to_llvmir`` (before TritonGPU -> LLVM) and ``llvmir_to_llvm``
(after it), and ``load_dialects(ctx)`` whenever they set up an MLIR context. We put a small
object there that adds Proton's passes with the options below, so ``proton.record`` ops in an
overriding TTGIR become clock reads stored into a per-CTA profile buffer. No libproton session
is involved. Where every record runs once per CTA, ``installed()`` also wraps NVIDIA's
``make_llir`` so ``direct.py`` lowers them first (``ProtonLowering.direct_module``), leaving
Proton's passes nothing to do. ``installed()`` also sets
``triton.knobs.compilation.instrumentation_mode``: it is
part of the compile options, so it keys both the on-disk cache and the JIT's in-memory kernel
cache, and instrumented and plain builds of one kernel never replace each other.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from typing import Any

from proton_inject.errors import UserError
from proton_inject.formats.raw import BufferType
from proton_inject.lower.probes import _HIP_TARGET, first_warps, is_persistent, num_warps_of, records_per_warp_bound

# The pass computes the real scratch size itself; a size hint of 1 byte and 128-byte alignment
# are what Triton 3.6's own instrumentation hook passes (and what made the H100 fixtures).
PROFILE_SCRATCH_SIZE_HINT = 1
PROFILE_SCRATCH_ALIGNMENT = 128
# Layout facts of Proton's circular buffer (Triton 3.6): one record is 8 bytes, and each CTA's
# scratch block starts with a 40-byte header followed by one 4-byte word per warp.
BYTES_PER_RECORD = 8
CIRCULAR_HEADER_BYTES = 40
# Without an explicit size, the pass caps the shared buffer at 4% of the device's shared
# memory when it estimates more than one CTA fits per SM.
_AUTO_SHARE = 0.04
# Without an explicit size, a global buffer gets 16 KiB (2048 records) per segment.
GLOBAL_DEFAULT_SEGMENT_BYTES = 16384
# Which warps record when --warps names none: "first" records the first warp of each
# partition (warp 0 of a kernel without warp specialization: its warps run the same code, and
# each recording warp costs records and buffer); "all" records every warp.
WARP_CHOICES = ("first", "all")

GRANULARITIES = ("warp", "warp-group")
# Where records live while the kernel runs: a shared-memory buffer copied out to the profile
# scratch at the end, or the profile scratch itself (global memory, no shared-memory cap);
# "direct" is global memory written by our own lowering (``direct.py``: no per-CTA set-up, for
# records that each run once, by warp 0); "auto" picks one per kernel (``for_kernel``).
AUTO = "auto"  # --buffer-type auto: chosen per kernel (``for_kernel``)


class Lowering(StrEnum):
    """What turns a kernel's records into code: Triton's Proton passes (``proton.py``) or our
    direct lowering (``direct.py``, buffer type direct)."""

    PROTON = "proton"
    DIRECT = "direct"

BUFFER_TYPES = (AUTO, *BufferType)

# Largest shared memory one CTA may use (opt-in), per target, for compiles without a GPU.
# The runtime asks the device instead.
_MAX_SHARED_CUDA = {
    75: 65536,
    80: 166912,
    86: 101376,
    87: 166912,
    89: 101376,
    90: 232448,
    100: 232448,
    103: 232448,
    120: 101376,
    121: 101376,
}
_MAX_SHARED_HIP = {"gfx90a": 65536, "gfx942": 65536, "gfx950": 163840}


@dataclass(frozen=True)
class LoweringOptions:
    """How ``proton.record`` ops are lowered: clock width, buffer, granularity, sampling.

    ``buffer_size`` is the record buffer per CTA in bytes. With ``buffer_type`` "shared" it is
    shared memory (0: Proton's default, at most 4% of the device's shared memory and never
    more than the kernel leaves free); with "global" records go straight to the profile
    scratch in global memory (0: 16 KiB per warp); "direct" is our own lowering of records
    at the top level of the kernel or of a top-level ``scf.for``, by warp 0 (``direct.py``;
    ``buffer_size`` is then the bytes per CTA for records inside loops, 0: ``direct.LOOP_BYTES``;
    ``sample_iterations`` N keeps iterations 0, N, 2N, ...; others fall back to "global");
    "auto" is direct where it applies, else global for a kernel whose records all sit outside
    loops, shared for the others. ``warps``: warp ids that record, "first"
    (the first warp of each partition; every warp of a persistent kernel; chosen per kernel by
    ``for_kernel``) or "all" (None means "all" too). ``auto_size`` (``--buffer-size auto``)
    with ``buffer_size`` 0: a kernel whose records all sit outside loops gets a buffer of just
    the records each warp can write (``auto_buffer_bytes``); in others each recording warp
    keeps its share of Proton's default (``_per_warp_share``). These defaults cut the cost of
    short CTAs (README "What it costs"); check, run, profile and the Python API all
    start from them.
    """

    clock: int = 64
    sched_stores: bool = False
    buffer_size: int = 0
    granularity: str = "warp"
    warps: tuple[int, ...] | str | None = "first"
    metric: str = "cycle"
    buffer_type: str = "auto"
    auto_size: bool = True
    # Records inside loops lowered directly are kept for iterations 0, N, 2N, ... only.
    sample_iterations: int = 1

    def __post_init__(self) -> None:
        if self.clock not in (32, 64):
            raise UserError(f"--clock must be 32 or 64, got {self.clock!r}")
        if self.metric != "cycle":
            raise UserError(f"metric {self.metric!r} is not supported: Proton records 'cycle' only")
        if self.granularity not in GRANULARITIES:
            raise UserError(
                f"--granularity must be one of {', '.join(GRANULARITIES)}, got {self.granularity!r}"
            )
        if self.buffer_type not in BUFFER_TYPES:
            raise UserError(
                f"--buffer-type must be one of {', '.join(BUFFER_TYPES)}, got {self.buffer_type!r}"
            )
        if not isinstance(self.buffer_size, int) or self.buffer_size < 0:
            raise UserError(f"--buffer-size must be a byte count >= 0, got {self.buffer_size!r}")
        n = self.sample_iterations
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n < 2**31:
            raise UserError(f"--sample-iterations {n!r}: must be a whole number of 1 or more "
                            "(1 = every iteration; N = iterations 0, N, 2N, ...)")
        if self.warps is None:
            object.__setattr__(self, "warps", "all")
        if isinstance(self.warps, str):
            if self.warps not in WARP_CHOICES:
                raise UserError(f"--warps {self.warps!r}: expected warp ids such as 0,4, or one "
                                f"of {', '.join(WARP_CHOICES)}")
            if self.warps == "first" and self.granularity != "warp":
                object.__setattr__(self, "warps", "all")  # selection needs warp granularity
        else:
            warps = tuple(sorted(set(int(w) for w in self.warps)))
            if not warps:
                raise UserError("--warps is empty: give warp ids such as 0,4 or leave it out")
            if warps[0] < 0:
                raise UserError(f"--warps: warp ids are >= 0, got {warps[0]}")
            if self.granularity != "warp":
                raise UserError(
                    "--warps (selective sampling) works with --granularity warp only: "
                    "Proton rejects selected ids for other granularities"
                )
            object.__setattr__(self, "warps", warps)
        # "first" as for all warps; for_kernel fits it to the partitions. A direct buffer has
        # a slot per record op (per kept iteration in a loop), no power-of-two segments.
        if self.buffer_size and not 0 < self.buffer_size <= MAX_BUFFER_SIZE:
            raise UserError(f"--buffer-size {self.buffer_size}: must be 1 to {MAX_BUFFER_SIZE} bytes "
                            "(1 GiB) per CTA, e.g. 65536: Proton's lowering takes it as a 32-bit int")
        if self.buffer_size and self.buffer_type != BufferType.DIRECT:
            explicit = not isinstance(self.warps, str)
            _check_buffer_size(self.buffer_size, len(self.warps) if explicit else None)

    @property
    def lowering(self) -> Lowering:
        """Which lowering these options (resolved for a kernel) take."""
        return Lowering.DIRECT if self.buffer_type == BufferType.DIRECT else Lowering.PROTON

    @property
    def in_global_memory(self) -> bool:
        """Whether records go to global memory as the kernel runs (no shared-memory buffer)."""
        return self.buffer_type in (BufferType.GLOBAL, BufferType.DIRECT)

    @property
    def selected(self) -> tuple[int, ...] | None:
        """The recording warp ids (None: every warp). "first" must be resolved per kernel
        (``for_kernel``); unresolved it means warp 0 (a kernel without warp specialization)."""
        if self.warps == "all":
            return None
        return (0,) if self.warps == "first" else self.warps

    def for_kernel(self, text: str, max_shared: int | None = None,
                   hip: bool | None = None) -> LoweringOptions:
        """These options with what depends on the kernel decided from its instrumented TTGIR:
        "first" warps become the first warp of each partition, and ``auto_size`` a byte count.
        The lowering, ``check`` and the runtime's launch metadata all use this, so they agree
        on the buffer's layout. ``max_shared``: the device's shared memory per CTA (default:
        an H100's); ``hip``: whether it is built for AMD (None: as its ``ttg.target`` says)."""
        warps = self.warps
        if warps == "first":
            # A persistent kernel's CTAs loop over many tiles, so what each recording warp
            # costs per CTA hardly counts; and on an H100 one recording warp slowed a
            # persistent softmax by 4.5% (every warp: 0.4%; benchmarks/overhead.py).
            persistent = is_persistent(text) and "ttg.warp_specialize" not in text
            warps = "all" if persistent else first_warps(text)
        btype = self.buffer_type
        if btype in ("auto", "direct"):
            if hip is None:
                hip = _HIP_TARGET.search(text) is not None
            from proton_inject.lower import direct

            # Proton's per-CTA set-up and header are the floor of short CTAs (H100, Inductor
            # gelu 2^26, 65,536 CTAs: 1.040 in Proton's global buffer, 1.008 direct).
            # buffer_size stays what was asked: direct.py's bytes for records inside loops
            # (``direct.data_bytes`` tells the block it gives), so resolving twice is harmless.
            if (not hip and warps not in ("all", None) and tuple(warps) == (0,)
                    and direct.eligible(text, self.buffer_size, self.sample_iterations) is None):
                return replace(self, warps=(0,), buffer_type=BufferType.DIRECT, auto_size=False)
            # Records that each run once per warp cost less written straight to global memory
            # than copied out of a shared buffer at the end (H100: layer norm 1.051 -> 1.018,
            # attention 1.021 -> 1.004); records inside loops cost less in shared memory
            # (layer norm, every iteration: 1.18 vs 1.25). AMD's lowering has no global stores.
            bounded = "proton.record" in text and records_per_warp_bound(text) is not None
            btype = BufferType.GLOBAL if bounded and not hip else BufferType.SHARED
        size = self.buffer_size
        resolved = replace(self, warps=warps, buffer_type=btype, buffer_size=0, auto_size=False)
        # A size given explicitly wins. Records put in global memory because each runs once
        # per warp are sized to them even without --buffer-size auto, never to global's 16 KiB
        # per warp (a GiB of scratch for a grid of 65,536 CTAs).
        chosen_global = self.buffer_type in (AUTO, BufferType.DIRECT) and btype == BufferType.GLOBAL
        if not size and (self.auto_size or chosen_global):
            size = auto_buffer_bytes(text, resolved) or _per_warp_share(text, resolved, max_shared)
        if size and resolved.selected:  # Proton needs a power of two per recording warp
            n = len(resolved.selected)
            per = max(BYTES_PER_RECORD, -(-size // n))
            size = n * (1 << (per - 1).bit_length())
        return replace(resolved, buffer_size=size)

    def mode(self) -> str:
        """The ``instrumentation_mode`` knob value: distinct per options, never ``consan``."""
        warps = self.warps if isinstance(self.warps, str) else ",".join(map(str, self.warps))
        return (
            f"proton-inject:clock{self.clock}:{self.granularity}:warps={warps}"
            f":buffer={self.buffer_type}:{'auto' if self.auto_size else ''}{self.buffer_size}"
            f":sched_stores={int(self.sched_stores)}:iterations={self.sample_iterations}"
        )

    def to_json(self) -> dict[str, Any]:
        """Plain-JSON form (for launch metadata and reports)."""
        d = asdict(self)
        d["warps"] = self.warps if isinstance(self.warps, str) else list(self.warps)
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> LoweringOptions:
        """``to_json``'s form back (TypeError for a field it does not have, UserError for a
        value the options refuse)."""
        w = d.get("warps")
        return cls(**{**d, "warps": tuple(w) if isinstance(w, list) else w})

    def segments(self, num_warps: int) -> int:
        """How many buffer segments the pass makes for a kernel of ``num_warps`` warps."""
        return len(self.selected) if self.selected else num_warps


# Proton's lowering takes the buffer size as a 32-bit int, and a power of two per warp.
MAX_BUFFER_SIZE = 2**30


def _check_buffer_size(size: int, segments: int | None) -> None:
    aligned = -(-size // BYTES_PER_RECORD) * BYTES_PER_RECORD
    if segments:
        per = aligned // segments
        if aligned % segments or per < BYTES_PER_RECORD or per & (per - 1):
            raise UserError(
                f"--buffer-size {size}: with {segments} sampled warps it must be {segments} x a "
                f"power of two >= 8 (e.g. {segments * 1024}): Proton splits it evenly per warp"
            )
    elif aligned & (aligned - 1):
        lower = 1 << (aligned.bit_length() - 1)
        raise UserError(
            f"--buffer-size {size} is not a power of two: Proton splits it evenly over the "
            f"kernel's warps and needs a power of two per warp (try {lower} or {lower * 2})"
        )


def parse_warps(text: str | None) -> tuple[int, ...] | str:
    """``"0,4"`` -> ``(0, 4)``; ``"all"``/``"first"`` as they are; None or empty -> "first"."""
    if text is None or not text.strip():
        return "first"
    if text.strip().lower() in WARP_CHOICES:
        return text.strip().lower()
    out = []
    for part in text.split(","):
        part = part.strip()
        if not re.fullmatch(r"\d+", part):
            raise UserError(f"--warps {text!r}: expected comma-separated warp ids such as 0,4, "
                            "or all")
        out.append(int(part))
    return tuple(out)


# --- sizes ------------------------------------------------------------------------


def max_shared_mem_for(target: Any) -> int:
    """Opt-in shared memory per CTA for a ``GPUTarget`` (table for CPU-only compiles)."""
    if target.backend == "cuda":
        arch = int(target.arch)
        if arch in _MAX_SHARED_CUDA:
            return _MAX_SHARED_CUDA[arch]
        known = [a for a in sorted(_MAX_SHARED_CUDA) if a <= arch]
        return _MAX_SHARED_CUDA[known[-1] if known else 75]
    return _MAX_SHARED_HIP.get(str(target.arch), 65536)


def _next_power_of_two_above(x: int) -> int:
    # LLVM's NextPowerOf2: the smallest power of two strictly greater than x.
    return 1 << max(0, int(x).bit_length()) if x > 0 else 1


def profile_buffer_bytes(
    max_shared: int, kernel_shared: int, num_warps: int, options: LoweringOptions
) -> int:
    """Bytes the lowering gives the record buffer of one CTA (all segments).

    Mirrors the sizing rule of Proton's ConvertProtonToProtonGPU pass in Triton 3.6. Shared:
    half the power of two above each segment's share of the free shared memory, capped at 4%
    of the device's shared memory when more than one CTA fits per SM, then at most
    ``buffer_size``. Global: ``buffer_size``, or 16 KiB per segment; shared memory plays no part.
    """
    segments = options.segments(num_warps)
    if options.buffer_type == BufferType.GLOBAL:
        if options.buffer_size:
            return -(-options.buffer_size // BYTES_PER_RECORD) * BYTES_PER_RECORD
        return GLOBAL_DEFAULT_SEGMENT_BYTES * segments
    used = -(-kernel_shared // BYTES_PER_RECORD) * BYTES_PER_RECORD
    if used >= max_shared:
        max_shared += used  # the pass assumes it fits and lets the launch fail
    per_segment = _next_power_of_two_above((max_shared - used) // segments) // 2
    size = per_segment * segments // BYTES_PER_RECORD * BYTES_PER_RECORD
    if max_shared // max(1, used) > 1:
        cap = int(max_shared * _AUTO_SHARE)
        while size > cap:
            size //= 2
    if options.buffer_size:
        want = -(-options.buffer_size // BYTES_PER_RECORD) * BYTES_PER_RECORD
        size = min(size, want)
    return size


def shared_buffer_bytes(
    max_shared: int, kernel_shared: int, num_warps: int, options: LoweringOptions
) -> int:
    """Shared memory per CTA the record buffer adds to the kernel's (0 for a global buffer)."""
    if options.buffer_type == BufferType.GLOBAL:
        return 0
    return profile_buffer_bytes(max_shared, kernel_shared, num_warps, options)


def profile_scratch_bytes(buffer_bytes: int, num_warps: int) -> int:
    """Global scratch bytes per CTA the kernel flushes records into (header + counts + buffer)."""
    raw = buffer_bytes + CIRCULAR_HEADER_BYTES + 4 * num_warps
    return -(-raw // PROFILE_SCRATCH_ALIGNMENT) * PROFILE_SCRATCH_ALIGNMENT


def records_per_segment(buffer_bytes: int, num_warps: int, options: LoweringOptions) -> int:
    """How many records each warp (segment) keeps before the circular buffer wraps."""
    return buffer_bytes // options.segments(num_warps) // BYTES_PER_RECORD


def suggest_buffer_size(free_shared: int, num_warps: int, options: LoweringOptions) -> int:
    """Largest valid ``--buffer-size`` that fits in ``free_shared`` bytes (0 if none)."""
    segments = options.segments(num_warps)
    per = free_shared // segments
    if per < BYTES_PER_RECORD:
        return 0
    return (1 << (per.bit_length() - 1)) * segments


def _per_warp_share(text: str, options: LoweringOptions, max_shared: int | None) -> int:
    """For ``--buffer-size auto`` when records repeat and fewer warps than all record, in a
    shared buffer: each recording warp keeps the slots Proton's default gives each warp when
    every warp records (its default buffer over the warps), so no warp wraps sooner, and the
    final copy, which moves the whole buffer, moves only the recording warps' part. 0 (Proton's
    default) otherwise, and for warp-specialized kernels."""
    num_warps = num_warps_of(text)
    chosen = options.selected
    if (num_warps is None or not chosen or options.buffer_type != BufferType.SHARED
            or "ttg.warp_specialize" in text or len(chosen) >= num_warps):
        return 0
    every = replace(options, warps="all")
    total = profile_buffer_bytes(max_shared or _MAX_SHARED_CUDA[90], 0, num_warps, every)
    return total // num_warps * len(chosen)


def auto_buffer_bytes(text: str, options: LoweringOptions) -> int | None:
    """``buffer_size`` for ``--buffer-size auto``: the records each warp can write, rounded up
    to the power of two per warp that Proton needs, times the segments; None if unknown."""
    if options.granularity != "warp":
        return None
    num_warps = num_warps_of(text)
    bound = records_per_warp_bound(text) if num_warps is not None else None
    if bound is None:
        return None
    per_warp = max(BYTES_PER_RECORD, 1 << (max(1, bound) * BYTES_PER_RECORD - 1).bit_length())
    return per_warp * options.segments(num_warps)


# --- the hook ----------------------------------------------------------------------


def options_from_cli(
    clock: int = 64,
    sched_stores: bool = False,
    buffer_size: int | str = "auto",
    granularity: str = "warp",
    warps: str | Iterable[int] | None = None,
    buffer_type: str = "auto",
    sample_iterations: int = 1,
) -> LoweringOptions:
    """Build options from command-line values (``warps`` as ``"0,4"``, ``"all"``, or None for
    the default; ``buffer_size`` a byte count or ``"auto"``, the default)."""
    w = parse_warps(warps) if isinstance(warps, str) or warps is None else tuple(warps)
    auto = isinstance(buffer_size, str) and buffer_size.strip().lower() == "auto"
    if auto:
        buffer_size = 0
    elif isinstance(buffer_size, str):
        if not re.fullmatch(r"\s*\d+\s*", buffer_size):
            raise UserError(f"--buffer-size {buffer_size!r}: expected a byte count such as 4096, "
                            "or auto")
        size = buffer_size.strip()
        if len(size) > 10 or int(size) > MAX_BUFFER_SIZE:  # before int() meets a 10^6-digit one
            shown = size if len(size) <= 40 else f"{size[:20]}...({len(size)} digits)"
            raise UserError(f"--buffer-size {shown}: too large; the record buffer is at most "
                            f"{MAX_BUFFER_SIZE} bytes (1 GiB) per CTA, e.g. 65536")
        buffer_size = int(size)
    return LoweringOptions(
        clock=clock, sched_stores=sched_stores, buffer_size=buffer_size,
        granularity=granularity, warps=w, buffer_type=buffer_type, auto_size=auto,
        sample_iterations=sample_iterations,
    )  # fmt: skip
