"""The cost of a record, measured once per device and lowering options, and cached.

A region's clock reads can include the records' own work. ``decode`` subtracts a cost per
record (``record_cost``); this module measures it with a calibration kernel that runs a loop
of fixed work between two clock reads with a region around the loop, launched in turn with a
plain copy of the same code (``_calibration_kernel.py``): the cost is the median, over pairs
of launches, of the region's cycles minus the plain loop's (medians over CTAs), at least 0.
The launches alternate so that both sides see the same clock and caches. It is kept in the
user's cache directory, keyed by device name and the options that change what a record does
(clock width, buffer type, store scheduling); not by ptxas, which torch.compile switches to
torch's own for the whole process. What it measured, and why it is built so:
docs/accuracy.md ("Records' cost"). ``profile`` and ``run`` calibrate a GPU model they meet
for the first time before the program starts (``calibrate_missing``), in a child process so
that the program's own process holds none of the calibration's allocations or CUDA state.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from typing import IO, Any

import numpy as np

from proton_inject.errors import UserError
from proton_inject.formats.calibration import cache_file, cache_lock, lookup, store
from proton_inject.formats.raw import BufferType
from proton_inject.formats.region_kinds import Kind, scope_kinds_of
from proton_inject.lower.options import AUTO

LOOP_ITERATIONS = 256  # of the calibration loop
# A calibration child that runs longer is stopped (a cold one: start-up, compiles and five
# variants' launches; README says ~15 s).
CHILD_TIMEOUT_S = 300


def cost_from(decoded: list[Any], plain: list[np.ndarray]) -> dict[str, Any]:
    """The record cost from decoded calibration launches (decoded without compensation) and
    the reference kernel's loop cycles launched in turn with them (each CTA's own clock reads,
    one array per launch, in launch order): per pair of launches, the median cycles of the
    loop region less the reference's median; the cost is the median of those differences, at
    least 0, with the region's spread and the differences' range."""
    if not plain or not any(len(p) for p in plain):
        raise RuntimeError("no plain calibration launch ran")
    diffs, regions = [], []
    for d, p in zip(decoded, plain, strict=False):
        kinds = scope_kinds_of(d.meta.scopes, d.meta.scope_kinds)
        loops = [s for s, kind in kinds.items() if kind == Kind.LOOP]
        v = d.events.cycles[np.isin(d.events.scope, loops)]
        if len(v) and len(p):
            regions.append(v)
            diffs.append(float(np.median(v)) - float(np.median(p)))
    if not regions:
        raise RuntimeError("the calibration launches hold no loop region")
    v = np.concatenate(regions)
    region = float(np.median(v))
    return {"cycles": max(0.0, float(np.median(diffs))), "region": region,
            "plain": float(np.median(np.concatenate(plain))),
            "differences": [round(x, 1) for x in diffs],
            "p5": float(np.percentile(v, 5)), "p95": float(np.percentile(v, 95)),
            "instances": int(len(v))}


def variants(options: Any, hip: bool = False) -> list[Any]:
    """The record-changing options a profile with ``options`` may lower a kernel with, each
    calibrated on its own: ``buffer_type`` "auto" is direct or global for some kernels and
    shared for others (shared only on AMD), and "first" warps are one warp, or every warp in a
    persistent kernel (``LoweringOptions.for_kernel``)."""
    from dataclasses import replace

    types = [options.buffer_type]
    if options.buffer_type == AUTO:
        types = [BufferType.SHARED] if hip else list(BufferType)
    warps = [(0,), "all"] if options.warps == "first" else [options.warps]
    # "direct" lowers only records that warp 0 alone writes (others fall back to "global").
    return [replace(options, buffer_type=t, warps=w) for t in types for w in warps
            if t != BufferType.DIRECT or w == (0,)]


def describe(options: Any) -> str:
    """``shared buffer, one warp`` and the like: what a calibration entry is for."""
    w = options.selected
    who = "every warp" if w is None else "one warp" if len(w) == 1 else f"warps {','.join(map(str, w))}"
    return f"{options.buffer_type} buffer, {who}, clock{options.clock}"


def result_line(options: Any, got: dict[str, Any]) -> str:
    """One calibration's result as ``calibrate`` prints it."""
    d = got["differences"]
    return (f"{got['device']}, {describe(options)}: {got['cycles']:g} cycles per record "
            f"(region minus plain loop in {len(d)} launch pairs: {min(d):g} to {max(d):g}; "
            f"region p5 {got['p5']:g}, p95 {got['p95']:g}, {got['instances']:,} regions)")


def measure_all(options: Any = None, device: int = 0, launches: int = 7,
                save: bool = True) -> list[tuple[Any, dict[str, Any]]]:
    """``measure`` for each of ``variants(options)``: [(concrete options, result)]."""
    import torch

    from proton_inject.lower.options import LoweringOptions

    options = options or LoweringOptions()
    hip = bool(getattr(torch.version, "hip", None))
    return [(v, measure(v, device, launches, save)) for v in variants(options, hip)]


def measure(options: Any = None, device: int = 0, launches: int = 7, save: bool = True) -> dict[str, Any]:
    """Run the calibration kernel (needs a GPU) and return (and cache) the record cost.

    The first launch of each kind is left out (cold instruction cache). ``options`` are the concrete
    ``LoweringOptions`` to calibrate (``variants`` gives those of a profile's options).
    """
    import warnings

    import torch
    import triton

    from proton_inject._calibration_kernel import plain_reference, record_cost_calibration
    from proton_inject.analyze.decode import decode
    from proton_inject.analyze.issues import DecodeWarning
    from proton_inject.analyze.report import expand_inputs
    from proton_inject.collect.session import Session, session_block
    from proton_inject.formats.raw import load_raw
    from proton_inject.instrument.rules import Rules
    from proton_inject.lower.options import LoweringOptions

    if not torch.cuda.is_available():
        raise UserError("calibrate needs a CUDA GPU (torch.cuda.is_available() is False); run it "
                        "on the machine you profile on")
    options = options or LoweringOptions()
    name = torch.cuda.get_device_name(device)
    sms = torch.cuda.get_device_properties(device).multi_processor_count

    with tempfile.TemporaryDirectory(prefix="proton-inject-calibrate-") as tmp:
        with torch.cuda.device(device):
            out = torch.zeros(2 * 2 * sms, dtype=torch.int64, device=f"cuda:{device}")
            plain = []

            def reference() -> None:
                # The build compiled before the profile (the JIT keys builds by this knob);
                # under the profile's mode it would be another build. (This did not change
                # the 2,048-2,058 cycles the reference reads in the first every-warp shared
                # calibration of a process, against 2,019 later.)
                comp = triton.knobs.compilation
                mode, comp.instrumentation_mode = comp.instrumentation_mode, ""
                try:
                    plain_reference[(2 * sms,)](out, LOOP_ITERATIONS, num_warps=4)
                finally:
                    comp.instrumentation_mode = mode
                plain.append(out.view(-1, 2)[:, 0].cpu().numpy().copy())

            # Launched in turn, each pair close in time: builds compared across separate
            # stretches drifted (the same plain loop read 2,018-2,098 cycles across runs).
            reference()  # compiled and warmed before the profile starts
            rules = Rules(loops="outer", marks=False, kernel="^record_cost_calibration$")
            with session_block(Session(rules, tmp, options)) as res:  # decoded below
                for _ in range(launches):
                    record_cost_calibration[(2 * sms,)](out, LOOP_ITERATIONS, num_warps=4)
                    torch.cuda.synchronize()
                    reference()
        raws, _ = expand_inputs([res.out])
        decoded = []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DecodeWarning)
            for p in raws:
                buf, meta = load_raw(p)
                decoded.append(decode(buf, meta, record_cost=0.0))  # raw: what is measured
    decoded.sort(key=lambda d: d.meta.launch)
    # The first launch of each leaves out a cold instruction cache (plain[0]: before the profile).
    got = cost_from(decoded[1:] or decoded, plain[2:] if len(decoded) > 1 else plain[1:])
    got["device"] = name
    if save:
        if options.buffer_type == AUTO or options.warps == "first":
            raise ValueError("calibrate.measure: resolve the options first (calibrate.variants)")
        store(name, got["cycles"], options.clock, options.buffer_type, options.sched_stores,
              {k: v for k, v in got.items() if k != "cycles"}, selective=options.selected is not None)
    return got


def missing(options: Any, names: Iterable[str], hip: bool = False) -> list[tuple[str, Any]]:
    """(device name, concrete options) for each of ``variants(options)`` on each device name
    that this machine's cache holds no cost for: what a profile with ``options`` would report
    as not calibrated."""
    return [(n, v) for n in dict.fromkeys(names) for v in variants(options, hip)
            if lookup(n, v.clock, v.buffer_type, v.sched_stores, selective=v.selected is not None) is None]


def visible_devices() -> dict[str, int]:
    """Each GPU model this process sees: its name and the device to calibrate it on (this
    rank's own, LOCAL_RANK, where it is that model; else the first of that model). Empty
    without CUDA (the session then says why it cannot profile). Asking names starts CUDA's
    runtime here, as the session does right after, but makes no context."""
    try:
        import torch

        if not torch.cuda.is_available():
            return {}
        names = [torch.cuda.get_device_name(d) for d in range(torch.cuda.device_count())]
    except Exception:  # (the session reports a broken CUDA itself)
        return {}
    local = os.environ.get("LOCAL_RANK", "")
    first = int(local) if local.isdigit() and int(local) < len(names) else 0
    found: dict[str, int] = {}
    for d in [first, *range(len(names))]:
        found.setdefault(names[d], d)
    return found


def calibrate_missing(options: Any, devices: dict[str, int] | None = None,
                      stream: IO[str] | None = None) -> list[tuple[str, bool]]:
    """Calibrate what ``missing`` lists for ``devices`` (name: device index; None: this
    process's, ``visible_devices``) in a child process, one note line per GPU model on
    ``stream`` (stderr). A failure is said in its line and the caller goes on uncalibrated.
    Returns [(name, calibrated)] for each model that needed it."""
    from proton_inject.lower.options import LoweringOptions

    options = options or LoweringOptions()
    stream = stream or sys.stderr
    devices = visible_devices() if devices is None else devices
    hip = bool(devices) and _is_hip()
    if not devices or not missing(options, devices, hip):  # (the usual case: no lock, no child)
        return []
    done = []
    try:
        with cache_lock():  # another process may be calibrating the same model: wait, look again
            for name, index in devices.items():
                todo = [v for n, v in missing(options, [name], hip) if n == name]
                if todo:
                    done.append((name, _calibrate_in_child(name, index, todo, stream)))
    except OSError as e:
        stream.write(f"proton-inject: record cost: not calibrated ({e.filename or cache_file()}: "
                     f"{e.strerror}); durations may include the records' own cost\n")
    return done


def _is_hip() -> bool:
    import torch

    return bool(getattr(torch.version, "hip", None))


def _calibrate_in_child(name: str, index: int, todo: list[Any], stream: IO[str]) -> bool:
    """One GPU model's note line, around ``python -m proton_inject.calibrate`` measuring
    ``todo`` on device ``index`` (its output is ours, never the program's)."""
    from dataclasses import asdict

    stream.write(f"proton-inject: record cost: calibrating for {name}, once")
    stream.flush()
    t0 = time.monotonic()
    cmd = [sys.executable, "-m", "proton_inject.calibrate", str(index),
           json.dumps([asdict(v) for v in todo])]
    try:  # (its plain kernel builds in a Triton cache of its own, not the program's)
        with tempfile.TemporaryDirectory(prefix="proton-inject-calibrate-") as triton_cache:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S,
                               stdin=subprocess.DEVNULL, env={**os.environ, "TRITON_CACHE_DIR": triton_cache})
        said = [ln.strip() for ln in (p.stderr or "").splitlines() if ln.strip()]
        why = None if p.returncode == 0 else (said[-1] if said else f"exit code {p.returncode}")
    except (OSError, subprocess.TimeoutExpired) as e:
        why = f"stopped after {CHILD_TIMEOUT_S} s" if isinstance(e, subprocess.TimeoutExpired) else str(e)
    if why is None:
        stream.write(f" ({time.monotonic() - t0:.0f} s); kept in {cache_file()}\n")
    else:
        stream.write(f": failed ({why}); durations may include the records' own cost "
                     "(`proton-inject calibrate` retries)\n")
    stream.flush()
    return why is None


def _child_main(argv: list[str]) -> int:
    """The child of ``calibrate_missing``: DEVICE and a JSON list of concrete options, each
    measured and kept in the cache; a failure is one line on stderr and exit code 1."""
    from proton_inject.lower.options import LoweringOptions

    try:
        device, todo = int(argv[0]), json.loads(argv[1])
        for d in todo:
            measure(LoweringOptions.from_json(d), device)
    except Exception as e:  # one line for the parent's note
        said = str(e) if isinstance(e, UserError) else f"{type(e).__name__}: {e}"
        print(said.splitlines()[0] if said.strip() else type(e).__name__, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
