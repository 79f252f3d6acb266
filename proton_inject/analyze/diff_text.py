"""``diff``'s comparison as text (one table per kernel) or Markdown (a pull-request comment)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from proton_inject.analyze.diff_stats import FASTER, NA, SAME, SLOWER


def _num(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:,.1f}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:+.1f}%"


def _interval(row: dict[str, Any]) -> str:
    iv = row["interval_pct"]
    if iv is None:
        return f"({row['no_interval']})" if row.get("no_interval") else "-"
    return f"[{iv[0]:+.1f}, {iv[1]:+.1f}]%"


def _label(row: dict[str, Any]) -> str:
    indent = "  " * len(row["path"])
    loc = row["loc"] if row["loc"] and row["loc"] not in row["name"] else None
    moved = f", was {row['moved_from']}" if row.get("moved_from") else ""
    return indent + row["name"] + (f" ({loc}{moved})" if loc else f" ({moved[2:]})" if moved else "")


def _kernel_title(k: dict[str, Any]) -> str:
    cfg = k["config_new"] or k["config_base"]
    head = k["kernel"] + (f" [{cfg}]" if cfg else "")
    nb, nn = k["launches_base"], k["launches_new"]
    head += f": {nb} launch{'es' if nb != 1 else ''} -> {nn}"
    notes = []
    if k["configs_differ"]:
        notes.append(f"configs differ: base [{k['config_base'] or '-'}], new [{k['config_new'] or '-'}]")
    if k["grid_base"] and k["grid_new"] and k["grid_base"] != k["grid_new"]:
        notes.append(f"grids differ: {'x'.join(map(str, k['grid_base']))} -> "
                     f"{'x'.join(map(str, k['grid_new']))}")
    return head + ("; " + "; ".join(notes) if notes else "")


def _head_line(d: dict[str, Any]) -> str:
    iv = d["interval"]
    how = (f"{int(iv['confidence'] * 100)}% interval of the change: {iv['resamples']} bootstrap "
           f"resamples per side (seed {iv['seed']})" if iv["instances"] else "no noise interval")
    fail = f"; fails above +{d['fail_above_pct']:g}% beyond noise" if d["fail_above_pct"] is not None else ""
    return (f"{d['base']} -> {d['new']}: median {d['unit']} per region instance; {how}; "
            f"changes within +-{d['min_change_pct']:g}% are within noise{fail}")


def _counts_line(d: dict[str, Any]) -> str:
    c = d["counts"]
    parts = [f"{c[SLOWER]} slower", f"{c[FASTER]} faster", f"{c[SAME]} within noise"]
    if c[NA]:
        parts.append(f"{c[NA]} not comparable")
    parts += [f"{c['only_base']} only in base", f"{c['only_new']} only in new"]
    if d["kernels_only_base"] or d["kernels_only_new"]:
        parts.append(f"kernels only in base {len(d['kernels_only_base'])}, only in new "
                     f"{len(d['kernels_only_new'])}")
    return "regions: " + ", ".join(parts)


HEADER = ["region", "base n", "new n", "base median", "new median", "base p95", "new p95",
          "change", "interval", "verdict"]


def _row_cells(row: dict[str, Any]) -> list[str]:
    a, b = row["base"], row["new"]
    return [_label(row), f"{a['count']:,}", f"{b['count']:,}", _num(a["median"]),
            _num(b["median"]), _num(a["p95"]), _num(b["p95"]), _pct(row["change_pct"]),
            _interval(row), row["verdict"]]


def _only_lines(k: dict[str, Any], side: str) -> list[str]:
    return [f"only in {side}: {r['name']}" + (f" ({r['loc']})" if r["loc"] and r["loc"] not in r["name"]
                                              else "") +
            f": {r['count']:,} instances, median {_num(r['median'])}"
            for r in k[f"only_{side}"]]


def _kernel_only_lines(d: dict[str, Any], kernel_name: Callable[[str], str]) -> list[str]:
    """One line per kernel that ran on one side only (text and Markdown say them alike)."""
    return [f"kernel only in {side}: {kernel_name(k['kernel'])}"
            + (f" [{k['config']}]" if k["config"] else "")
            + f" ({k['launches']} launch{'es' if k['launches'] != 1 else ''}, {k['regions']} "
              f"region{'s' if k['regions'] != 1 else ''})"
            for side in ("base", "new") for k in d[f"kernels_only_{side}"]]


def format_text(d: dict[str, Any]) -> str:
    """Tables, one per kernel, with the verdict of each region."""
    out = [_head_line(d), ""]
    for k in d["kernels"]:
        out.append(_kernel_title(k))
        rows = [_row_cells(r) for r in k["regions"]]
        widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(HEADER)]
        for cells in [HEADER, *rows]:
            out.append("  " + "  ".join(v.ljust(w) if i in (0, 9) else v.rjust(w)
                                        for i, (v, w) in enumerate(zip(cells, widths, strict=True))
                                        ).rstrip())
        out += ["  " + line for side in ("base", "new") for line in _only_lines(k, side)]
        out.append("")
    out += _kernel_only_lines(d, lambda name: name)
    out.append(_counts_line(d))
    out += [f"note: {n}" for n in d["notes"]]
    if d["failed"]:
        out.append(f"FAILED: {len(d['failed'])} region(s) slower than +{d['fail_above_pct']:g}% "
                   f"beyond noise: {'; '.join(d['failed'])}")
    return "\n".join(out)


def format_markdown(d: dict[str, Any]) -> str:
    """The same as a pull-request comment: a table per kernel."""
    def cell(s: str) -> str:
        return s.replace("|", "\\|")

    out = ["### proton-inject diff", "", cell(_head_line(d)), ""]
    if d["failed"]:
        out += [f"**FAILED**: {len(d['failed'])} region(s) slower than +{d['fail_above_pct']:g}% "
                f"beyond noise: {cell('; '.join(d['failed']))}", ""]
    out += [_counts_line(d), ""]
    for k in d["kernels"]:
        out += [f"#### {cell(_kernel_title(k))}", "",
                "| " + " | ".join(HEADER) + " |", "|" + "|".join(
                    ["---"] + ["---:"] * 8 + ["---"]) + "|"]
        for r in k["regions"]:
            cells = _row_cells(r)
            cells[0] = "&nbsp;" * 2 * len(r["path"]) + cells[0].strip()
            if r["verdict"] in (SLOWER, FASTER):
                cells[9] = f"**{cells[9]}**"
            out.append("| " + " | ".join(cell(c) for c in cells) + " |")
        only = [line for side in ("base", "new") for line in _only_lines(k, side)]
        if only:
            out += [""] + [f"- {cell(line)}" for line in only]
        out.append("")
    out += [f"- {cell(line)}" for line in _kernel_only_lines(d, lambda name: f"`{name}`")]
    out += [f"> note: {cell(n)}" for n in d["notes"]]
    return "\n".join(out).rstrip() + "\n"
