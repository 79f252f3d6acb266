"""What a kept launch's raw file says about it (``LaunchMeta``), from what the session knows:
how its kernel was compiled and lowered, its device, clock and record cost."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from proton_inject.collect.launches import LaunchRecord, config_name
from proton_inject.formats import calibration
from proton_inject.lower.options import LoweringOptions
from proton_inject.lower.probes import records_per_warp_bound


class LaunchMetadata:
    """The sink's collaborator for launches' metadata. It owns what that needs per device
    (names, clocks, the latest timer reference, record costs) and per kernel (what its IR
    and lowering say, read once). It needs the output directory, the lowering options, the
    compile hook, ``max_shared()``, the launch side's ``LaunchBuffers`` (why a launch has no
    clock bracket), a note callback and the rank."""

    def __init__(self, out: Path, options: LoweringOptions, hook: Any, max_shared: Any, buffers: Any,
                 note: Any, rank: int | None) -> None:
        self.out, self.options, self.hook, self._max_shared = out, options, hook, max_shared
        self.buffers, self._note_once, self.rank = buffers, note, rank
        self.device_names: dict[int, str] = {}
        self.device_clocks: dict[int, float | None] = {}
        # The latest full globaltimer value a clock bracket read on each device (direct
        # buffers keep only its low 56 bits: LaunchMeta.timer_ref_ns).
        self.timer_refs: dict[int, int] = {}
        # calibrated, from the user's cache: per device, buffer type and whether warps are chosen
        self._record_costs: dict[tuple[int, str, bool], float | None] = {}
        self._kernel_ir_cache: dict[tuple[str, str], tuple] = {}

    def _ir_path(self, rec: LaunchRecord) -> Path | None:
        c = self.hook.compiled.get(rec.compile_hash)
        return self.out / "ir" / c.file if c and c.file else None

    def _scopes(self, rec: LaunchRecord) -> tuple[list, list]:
        c = self.hook.compiled.get(rec.compile_hash)
        return (list(c.scope_names), list(c.scope_parents)) if c else ([], [])

    def why_no_bracket(self, rec: LaunchRecord) -> str:
        if rec.graph_replay is not None:
            return ("CUDA-graph replay (a bracket kernel cannot be added to the program's graph; "
                    "ns then come from the launch's own timer reads or a guess)")
        if self.buffers.bracket_error:
            return self.buffers.bracket_error
        return ("a clock bracket runs at most once every 10 ms on a device (its cost stays off a "
                "launch-bound program); ns then come from the launch's own timer reads or the "
                "device's other brackets")

    def of(self, rec: LaunchRecord) -> Any:
        """The decoder's ``LaunchMeta`` for a kept launch."""
        from proton_inject.formats.raw import LaunchMeta

        if not rec.scope_names:
            rec.scope_names, rec.scope_parents = self._scopes(rec)

        name = rec.config_name = rec.config_name or config_name(rec.config)
        sampled_warps, sample_ctas = self._sampling(rec)
        return LaunchMeta(
            kernel=rec.kernel,
            grid=rec.grid,
            num_warps=rec.num_warps,
            bytes_per_cta=rec.scratch_bytes_per_cta,
            scopes=dict(rec.scope_names),
            scope_parents=dict(rec.scope_parents),
            scope_locs=dict(c.scope_locs) if (c := self.hook.compiled.get(rec.compile_hash)) else {},
            scope_kinds=dict(c.scope_kinds) if c is not None and c.scope_kinds else None,
            hash=rec.hash,
            clock_bits=self.options.clock,
            granularity=self.options.granularity,
            sampled_warps=sampled_warps,
            sample_ctas=sample_ctas,
            buffer_type=self._kernel_options(rec).buffer_type,
            config=f"[tuning] {name}" if rec.tuning else name,
            launch=rec.seq,
            device=self.device_names.get(rec.device),
            sm_clock_mhz=self.device_clocks.get(rec.device),
            rank=self.rank,
            record_cost_cycles=self._record_cost(rec),
            clock_bracket=rec.clock_bracket,
            direct_records=self._direct_records(rec),
            direct_loops=self._kernel_ir(rec)[3],
            timer_ref_ns=self._timer_ref(rec),
            launched_from=rec.launched_from,
            model_source=c.model_source if c is not None else None,
        )

    def _timer_ref(self, rec: LaunchRecord) -> int | None:
        """A full globaltimer value near a direct launch: a clock bracket's read on its device
        (its own or, for a graph replay, an earlier launch's), else the host's clock (the
        NVIDIA globaltimer counts Unix-epoch ns; only bits 56-63, 2.3 years, are taken)."""
        if self._direct_records(rec) is None:
            return None
        return self.timer_refs.get(rec.device) or time.time_ns()

    def _kernel_options(self, rec: LaunchRecord) -> LoweringOptions:
        """The options as the lowering resolved them for this launch's kernel
        (``LoweringOptions.for_kernel`` on the IR it was compiled from)."""
        return self._kernel_ir(rec)[0]

    def _kernel_ir(self, rec: LaunchRecord) -> tuple[LoweringOptions, int, list[list[int]] | None,
                                                     list[list[int]] | None]:
        """What the launch's instrumented IR says, read once per kernel: the resolved options,
        N of ``--sample-ctas``, and the record and loop tables if ``direct.py`` lowered it."""
        from proton_inject.instrument.sampling import sampled_ctas
        from proton_inject.lower import direct

        cache = self._kernel_ir_cache
        key = (rec.compile_hash or rec.hash, rec.kernel)  # configs may share a hash, not their IR
        if key not in cache:
            path = self._ir_path(rec)
            text = path.read_text(encoding="latin-1") if path else ""
            c = self.hook.compiled.get(rec.compile_hash)
            lowered = c.lowered if c is not None else None
            if lowered is not None:  # what the lowering decided as it compiled the kernel
                opts, table, loops = lowered.options, lowered.direct_records, lowered.direct_loops
                cache[key] = (opts, sampled_ctas(text), table, loops)
                return cache[key]
            opts = self.options.for_kernel(text, self._max_shared())
            if opts.buffer_type == "direct":
                o = self.options
                table = direct.record_table(text, o.buffer_size, o.sample_iterations)
                loops = direct.loop_table(text, o.buffer_size, o.sample_iterations) or None
            else:
                table = loops = None
                n = self.options.sample_iterations
                if n > 1 and records_per_warp_bound(text) is None:  # records inside loops
                    why = direct.eligible(text, self.options.buffer_size, n) or opts.buffer_type
                    self._note_once(f"kernel {rec.kernel}: --sample-iterations {n} does not apply "
                                    f"(its records are lowered by Proton: {why}); every iteration "
                                    "is recorded")
            cache[key] = (opts, sampled_ctas(text), table, loops)
        return cache[key]

    def _direct_records(self, rec: LaunchRecord) -> list[list[int]] | None:
        """The record slots of a kernel ``direct.py`` lowered (None for Proton's lowering)."""
        return self._kernel_ir(rec)[2]

    def _sampling(self, rec: LaunchRecord) -> tuple[list[int] | None, int]:
        """What this launch's kernel sampled: the warps that recorded, as the lowering chose
        them (None: every warp), and N of ``--sample-ctas``."""
        opts, every_nth, _, _ = self._kernel_ir(rec)
        return (list(opts.selected) if opts.selected else None, every_nth)

    def _record_cost(self, rec: LaunchRecord) -> float | None:
        """The calibrated cost of one record for this launch's device and resolved options."""
        o = self._kernel_options(rec)
        key = (rec.device, o.buffer_type, o.selected is not None)
        if key not in self._record_costs:
            self._record_costs[key] = calibration.lookup(
                self.device_names.get(rec.device), o.clock, o.buffer_type, o.sched_stores,
                selective=o.selected is not None)
        return self._record_costs[key]
