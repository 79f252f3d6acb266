"""Where a program's GPU time goes (``profile --auto``): its kernels ranked by GPU time, the top
ones picked, and each picked kernel's time split over the regions and source lines its kept
launches measured, all from one run.

A kernel's GPU time is every launch's, as torch.profiler timed it in the run
(device-kernels.json); where it has none for a Triton kernel, it is estimated as the kept
launches' mean wall time (``kernel_wall_ns`` over its launches, as the summary computes it)
times the launches that ran (run.json's ``launch_counts``). A region's share is its time over the
kernel region's time (instances summed over the recorded warps, as the report's shares are);
what the kernel region holds outside its top-level child regions is "unattributed" (none in a
kernel without loops: its one region, over its lines, is as far as its time splits).

OUT/auto.json's keys, writer and reader: ``formats/auto_report.py``; ``report OUT`` prints it
again (``attach_auto``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from proton_inject.analyze.source_view import ns_text, region_depth
from proton_inject.errors import UserError
from proton_inject.formats.auto_report import (
    AUTO_FILE,
    AutoReport,
    DeviceKernels,
    HotKernel,
    HotRegion,
    KernelShare,
    read_auto,
)
from proton_inject.formats.rules_file import Kind


def rank_kernels(summary: dict[str, Any], share: float = 0.8, top: int = 3,
                 device: DeviceKernels | None = None) -> list[KernelShare]:
    """The run's kernels by GPU time, longest first; ``top`` set on the fewest
    instrumented ones (at most ``top``) that together hold at least ``share`` of it.

    ``device``: every kernel's GPU time as the run's torch.profiler saw it (Triton's
    and the rest: cuBLAS, torch's own); a kernel's time and share are then measured, over all
    of them. Without it (or for a kernel it lacks) a Triton kernel's time is estimated from
    its kept launches."""
    wall: dict[str, float] = {}
    kept: dict[str, int] = {}
    for k in summary["kernels"]:  # (a kernel's configs together)
        wall[k["kernel"]] = wall.get(k["kernel"], 0.0) + k["kernel_wall_ns"]
        kept[k["kernel"]] = kept.get(k["kernel"], 0) + len(k["launches"])
    counts = summary.get("launch_counts") or {}
    timed = {d["kernel"]: d for d in (device or {}).get("kernels", [])}
    rows: list[KernelShare] = []
    for name in sorted(set(wall) | set(counts) | set(timed)):
        n_kept = kept.get(name, 0)
        seen = max(counts.get(name, {}).get("ran", 0), n_kept)
        d = timed.get(name)
        if d is not None and d["launches"] > 0:
            seen, est = d["launches"], d["ns"]
            per: float | None = est / seen
        else:
            per = wall[name] / n_kept if n_kept else None
            est = None if per is None else per * seen
        rows.append(KernelShare(kernel=name, launches_seen=seen, launches_kept=n_kept, ns_per_launch=per,
                                est_gpu_ns=est, share=None, top=False,
                                instrumented=name in wall or name in counts, measured=d is not None))
    total = sum(r["est_gpu_ns"] or 0.0 for r in rows)
    for r in rows:
        if r["est_gpu_ns"] is not None and total > 0:
            r["share"] = r["est_gpu_ns"] / total
    rows.sort(key=lambda r: (-(r["est_gpu_ns"] if r["est_gpu_ns"] is not None else -1.0), r["kernel"]))
    held, picked = 0.0, 0
    for r in rows:
        if held >= share or picked >= top or not r["est_gpu_ns"]:
            break
        if r["instrumented"]:  # (the others cannot be opened up: the next one is looked at)
            r["top"] = True
            held += r["share"] or 0.0
            picked += 1
    return rows


def _kernel_region(regions: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The kernel body's region (reports of older runs carry no kinds: the outer "kernel")."""
    for r in regions:
        if r.get("kind") == Kind.KERNEL or (r.get("kind") is None and r["parent"] is None
                                            and r["name"] == "kernel"):
            return r
    return None


def _spans(lines: list[int]) -> list[list[int]]:
    """Sorted line numbers as [first, last] runs of consecutive lines."""
    out: list[list[int]] = []
    for n in sorted(set(lines)):
        if out and n == out[-1][1] + 1:
            out[-1][1] = n
        else:
            out.append([n, n])
    return out


def _innermost_lines(k: dict[str, Any]) -> dict[int, dict[str, list[list[int]]]]:
    """Per scope, the source lines (by file) where it is the innermost region (the source view's
    ``source``; none without it)."""
    got: dict[int, dict[str, list[int]]] = {}
    for f in (k.get("source") or {}).get("files", []):
        for row in f["lines"]:
            if row["regions"]:
                got.setdefault(row["regions"][-1], {}).setdefault(f["file"], []).append(row["line"])
    return {s: {f: _spans(ns) for f, ns in by_file.items()} for s, by_file in got.items()}


def open_up(k: dict[str, Any]) -> HotKernel:
    """One kernel summary of the run as a ``HotKernel``."""
    regions = k["regions"]
    parents = {r["scope"]: r["parent"] for r in regions}
    root = _kernel_region(regions)
    base = root["ns"]["total"] if root is not None and root["ns"]["total"] > 0 else None
    lines = _innermost_lines(k)
    children: dict[int | None, list[dict[str, Any]]] = {}
    for r in regions:  # (regions come longest first: siblings stay so)
        p = r["parent"] if r["parent"] in parents else None
        children.setdefault(p, []).append(r)
    ordered: list[dict[str, Any]] = []
    todo = list(reversed(children.get(None, [])))
    while todo:
        r = todo.pop()
        ordered.append(r)
        todo += reversed(children.get(r["scope"], []))
    rows = [HotRegion(scope=r["scope"], name=r["name"], kind=r.get("kind"), parent=r["parent"],
                      depth=region_depth(r["scope"], parents), loc=r["loc"], count=r["count"],
                      ns_total=r["ns"]["total"], ns_median=r["ns"]["median"],
                      share_of_kernel=None if base is None else r["ns"]["total"] / base,
                      lines=lines.get(r["scope"], {}))
            for r in ordered]
    left = None
    if base is not None:
        tops = children.get(root["scope"], [])
        left = max(0.0, base - sum(r["ns"]["total"] for r in tops)) if tops else 0.0
    src = k.get("source") or {}
    return HotKernel(kernel=k["kernel"], config=k["config"], launches=len(k["launches"]),
                     kernel_ns=base, regions=rows, unattributed_ns=left,
                     unattributed_share=None if left is None else left / base,
                     source_note=src.get("note") if src else "no source view")


def hot_kernels(summary: dict[str, Any], names: list[str]) -> list[HotKernel]:
    """The run's kernels among ``names``, opened up, in the order of ``names``."""
    order = {n: i for i, n in enumerate(names)}
    picked = [k for k in summary["kernels"] if k["kernel"] in order]
    return [open_up(k) for k in sorted(picked, key=lambda k: order[k["kernel"]])]


SHOWN = 20  # kernels printed in the ranking (auto.json holds all)
NAME_WIDTH = 100  # a longer name (C++ templates: torch's, cuBLAS's) is cut in the middle


def _name(name: str) -> str:
    return name if len(name) <= NAME_WIDTH else name[:NAME_WIDTH - 31] + "~" + name[-30:]


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}%"


def _lines_text(lines: dict[str, list[list[int]]]) -> str:
    return "; ".join(f"{Path(f).name}:" + ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)
                     for f, spans in lines.items())


def format_auto(doc: AutoReport) -> str:
    """The ranking, then each picked kernel's regions with their share of its time and lines."""
    ks = doc["kernels"]
    if not ks:
        return "\n".join([f"where the GPU time went: the run ({doc['run']}) holds no kernel launch to rank"]
                         + [f"note: {n}" for n in doc["notes"]])
    total = sum(k["est_gpu_ns"] or 0.0 for k in ks)
    measured = any(k["measured"] for k in ks)
    out = [f"where the GPU time went ({doc['run']}: {len(ks)} kernel(s), "
           f"{'' if measured else 'est. '}{total / 1e6:,.3f} ms of kernel time):",
           f"  {'share':>6}  {'ms' if measured else 'est. ms':>10}  {'launches':>10}  kernel"]
    shown = ks[:SHOWN] if len(ks) > SHOWN + 1 else ks
    for k in shown:
        est = "-" if k["est_gpu_ns"] is None else f"{k['est_gpu_ns'] / 1e6:,.3f}"
        out.append(f"  {_pct(k['share']):>6}  {est:>10}  {k['launches_seen']:>10,}  {_name(k['kernel'])}"
                   + ("  *" if k["top"] else "")
                   + ("  (not instrumented)" if not k["instrumented"] else "")
                   + ("  (no launch decoded)" if k["ns_per_launch"] is None else ""))
    if len(shown) < len(ks):
        rest = ks[len(shown):]
        out.append(f"  {_pct(sum(k['share'] or 0.0 for k in rest)):>6}  {'':>10}  "
                   f"{sum(k['launches_seen'] for k in rest):>10,}  ({len(rest)} more kernels: auto.json lists all)")
    if any(k["top"] for k in ks):
        out.append(f"  * opened up below: the fewest instrumented kernels holding >= "
                   f"{100 * doc['share_wanted']:g}% of the time, at most {doc['top_max']} (--auto-share, --auto-top)")
    if measured:
        inst = sum(k["share"] or 0.0 for k in ks if k["instrumented"])
        out.append(f"  ms = every launch's GPU time (torch.profiler); the instrumented "
                   f"(Triton) kernels hold {_pct(inst)} of it; the rest (cuBLAS, torch's own, ...) is "
                   "timed, never opened up")
        timed = [k for k in ks if k["instrumented"] and k["measured"]]
        seen = sum(k["launches_seen"] for k in timed)
        if seen:  # (a kept launch runs its records: few kept, little of the time is theirs)
            kept = sum(min(k["launches_kept"], k["launches_seen"]) for k in timed)
            out.append(f"  {kept:,} of the instrumented kernels' {seen:,} launches were kept: their ms "
                       "include the records' cost (--measure-overhead says how much)")
    else:
        out.append("  est. ms = mean wall time of the kept launches x launches seen")
    share_of = {k["kernel"]: k["share"] for k in ks}
    for h in doc["hot"]:
        title = h["kernel"] + (f" [{h['config']}]" if h["config"] else "")
        out += ["", f"{title}: {_pct(share_of.get(h['kernel']))} of GPU time; its time by region "
                    f"({h['launches']} launch{'es' if h['launches'] != 1 else ''} kept)"]
        names = ["  " * min(r["depth"], 32) + r["name"] for r in h["regions"]]
        width = max(map(len, names), default=6)
        out.append(f"  {'share':>6}  {'median':>9}  {'count':>10}  {'region':<{width}}  lines")
        for r, name in zip(h["regions"], names, strict=True):
            out.append(f"  {_pct(r['share_of_kernel']):>6}  {ns_text(r['ns_median']):>9}  {r['count']:>10,}  "
                       f"{name:<{width}}  {_lines_text(r['lines'])}".rstrip())
        if h["unattributed_share"] is not None and len(h["regions"]) == 1:
            out.append("  (no loop in it: the kernel region holds all its time, over the lines above)")
        elif h["unattributed_share"] is not None:
            out.append(f"  {_pct(h['unattributed_share']):>6}  {'':>9}  {'':>10}  "
                       "unattributed (kernel time outside its top-level regions)")
        else:
            out.append("  (no kernel region: shares and unattributed time unknown)")
        if h["source_note"]:
            out.append(f"  note: {h['source_note']}")
    missing = [k["kernel"] for k in ks if k["top"] and k["kernel"] not in {h["kernel"] for h in doc["hot"]}]
    if missing:
        out.append(f"\nnot opened up: {', '.join(missing)} (no launch of it decoded)")
    out += [f"note: {n}" for n in doc["notes"]]
    return "\n".join(out)


def attach_auto(summary: dict[str, Any], inputs: Sequence[str | os.PathLike]) -> list[str]:
    """Put the auto.json of the report's input directories (a ``profile --auto`` OUT, or its
    raw/) in ``summary["auto"]``, read and checked; a warning line for each one not shown:
    damaged, foreign, or past the first (the report shows one ranking)."""
    found: list[Path] = []
    for p in map(Path, inputs):
        for d in (p, p.parent) if p.name == "raw" else (p,):
            f = d / AUTO_FILE
            if p.is_dir() and os.path.lexists(f) and f not in found:
                found.append(f)
    warns: list[str] = []
    shown = None
    for f in found:
        if shown is not None:
            warns.append(f"{f}: not shown: this report shows one `profile --auto` ranking "
                         f"({shown}'s); report {f.parent} alone for it")
            continue
        try:
            summary["auto"], shown = read_auto(f), f
        except UserError as e:
            warns.append(f"{e} (the ranking is left out of this report)")
    return warns
