"""The report as one self-contained HTML page (``report --html``): opens from disk, no server,
nothing fetched (CSS, script and the timeline pictures are inside the file).

It shows the same summary ``report --json`` prints: the kernels by share of their summed wall
time, each kernel's regions, its source lines (``source_view.py``'s lines and the regions
covering them) with a heat colour per line and a bar per region beside them, the timeline
picture of its first launch (``plot.py``) and the notes the text report prints
(``text.py``); first, for a ``profile --auto`` directory, its ranking (``hot_kernels.py``).
Every number cell carries its value from the summary (``data-v``) and the column its key
(``data-k``), so a test can hold the page against ``--json``.
"""

from __future__ import annotations

import base64
import math
import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

from proton_inject.analyze.decode import Decoded
from proton_inject.analyze.hot_kernels import format_auto
from proton_inject.analyze.issues import DecodeWarning
from proton_inject.analyze.launch_origins import model_text
from proton_inject.analyze.plot import region_colors, timeline_png
from proton_inject.analyze.source_view import region_depth
from proton_inject.analyze.summary import LaunchData
from proton_inject.analyze.text import fitted_rates, kernel_notes, kernel_title
from proton_inject.errors import UserError
from proton_inject.formats.files import write_atomic

# The page's pictures: 14 inches wide at this many dots per inch (1,260 pixels), ~50-100 KB
# each; a 12-kernel page stays well under 2 MB (docs/host-performance.md).
PAGE_DPI = 90
MAX_SMS = 16  # SMs drawn per picture, as `--plot` draws them


@dataclass(frozen=True)
class Picture:
    """The timeline picture of one launch of a kernel (PNG), or why there is none."""

    kernel: str
    config: str | None
    launch: int
    png: bytes | None
    note: str | None = None


def first_launches(paths: Sequence[str], facts: Sequence[tuple | None]) -> list[str]:
    """The first launch of each kernel and config among raw launches (``paths``; ``facts``:
    ``report._facts`` of each, None where unreadable): the page shows their pictures."""
    first: dict[tuple[str, str | None], tuple[int, str]] = {}
    for p, f in zip(paths, facts, strict=True):
        if f is not None and f[0] < first.get((f[4], f[6]), (f[0] + 1, p))[0]:
            first[(f[4], f[6])] = (f[0], p)
    return [p for _, p in sorted(first.values())]


def picture_of(decode: Callable[[str], Decoded], path: str) -> Picture | None:
    """The picture of the raw launch at ``path`` (in a worker: decoded again, once per
    kernel); None when it cannot be decoded (the report says why)."""
    with warnings.catch_warnings():  # (the report says them once per kernel and cause)
        warnings.simplefilter("ignore", DecodeWarning)
        try:
            d = decode(path)
        except UserError:
            return None
    return picture(LaunchData.from_decoded(d))


def picture(x: LaunchData) -> Picture:
    """The page's timeline picture of one launch (it needs matplotlib; without it, a note)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return Picture(x.kernel, x.config, x.launch, None, "the timeline picture needs matplotlib: "
                       "pip install 'proton-inject[plot]'")
    return Picture(x.kernel, x.config, x.launch, timeline_png(x, MAX_SMS, PAGE_DPI))


def wall_shares(summary: dict[str, Any]) -> list[float | None]:
    """Each kernel's share of the summed wall time of all kernels in the report (first CTA
    start to last CTA end, summed over its launches)."""
    walls = [k["kernel_wall_ns"] for k in summary["kernels"]]
    total = sum(walls)
    return [w / total if total > 0 else None for w in walls]


def write_page(path: str | os.PathLike, summary: dict[str, Any], pictures: Sequence[Picture | None],
               notices: Sequence[str] = (), inputs: Sequence[str] = ()) -> Path:
    """Write the page for ``summary`` (its kernels with their ``source``, as
    ``source_view.attach`` leaves them) to ``path``."""
    return write_atomic(path, render(summary, pictures, notices, inputs))


def render(summary: dict[str, Any], pictures: Sequence[Picture | None], notices: Sequence[str] = (),
           inputs: Sequence[str] = ()) -> str:
    """The page as text (see the module's docstring)."""
    kernels = summary["kernels"]
    shares = wall_shares(summary)
    order = sorted(range(len(kernels)), key=lambda i: -kernels[i]["kernel_wall_ns"])
    pics = {(p.kernel, p.config): p for p in pictures if p is not None}
    fitted = fitted_rates(summary)
    body = ["<h1>proton-inject report</h1>"]
    if inputs:
        body.append(f"<p class=sub>from {escape(', '.join(map(str, inputs)))}</p>")
    if notices:
        body.append("<ul class='notes warn'>" + "".join(f"<li>{escape(w)}</li>" for w in notices)
                    + "</ul>")
    if "auto" in summary:  # a `profile --auto` directory: its ranking, as the text report prints it
        body.append("<section id=auto><h2>Where the GPU time went (profile --auto)</h2>"
                    f"<pre class=auto>{escape(format_auto(summary['auto']))}</pre></section>")
    body.append(_kernel_table(kernels, shares, order))
    for n, i in enumerate(order):
        k = kernels[i]
        sites = (summary.get("launched_from") or {}).get(k["kernel"])
        model = (summary.get("model_source") or {}).get(k["kernel"])
        body.append(_kernel_section(n, k, shares[i], pics.get((k["kernel"], k["config"])), fitted, sites,
                                    model))
    return (f"<!doctype html>\n<html lang=en><head><meta charset=utf-8>"
            f"<meta name=viewport content='width=device-width, initial-scale=1'>"
            f"<title>proton-inject report</title><style>{_CSS}</style></head>\n"
            f"<body>\n{chr(10).join(body)}\n<script>{_SCRIPT}</script></body></html>\n")


def _fmt(v: float | None, digits: int = 0, scale: float = 1.0, unit: str = "") -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return f"{v / scale:,.{digits}f}{unit}"


def _num(key: str, v: float | None, text: str) -> str:
    """A number cell: the summary's value in ``data-v``, shown as ``text``."""
    return f"<td class=n data-k='{key}' data-v='{'' if v is None else repr(v)}'>{text}</td>"


def _share(key: str, v: float | None, color: str = "#d9480f") -> str:
    """A share cell: the percentage and a bar as long."""
    if v is None:
        return _num(key, None, "-")
    w = max(0.0, min(100.0, 100 * v))
    return (f"<td class='n share' data-k='{key}' data-v='{v!r}'><span class=bar style='width:{w:.1f}%;"
            f"background:{color}'></span><span class=pct>{100 * v:.1f}%</span></td>")


def _kernel_table(kernels: list[dict[str, Any]], shares: list[float | None], order: list[int]) -> str:
    """The kernels, largest share of the summed wall time first, each linked to its section."""
    head = ("<tr><th>#</th><th>kernel</th><th>config</th><th>share of wall time</th>"
            "<th>wall us</th><th>launches</th><th>CTAs</th><th>regions</th><th>clock MHz</th></tr>")
    rows = []
    for n, i in enumerate(order):
        k = kernels[i]
        rows.append(
            f"<tr data-kernel='{escape(k['kernel'])}'><td class=n>{n + 1}</td>"
            f"<td><a href='#k{n}'>{escape(k['kernel'])}</a></td>"
            f"<td class=cfg>{escape(k['config'] or '')}</td>{_share('wall_share', shares[i])}"
            + _num("kernel_wall_ns", k["kernel_wall_ns"], _fmt(k["kernel_wall_ns"], 1, 1000))
            + _num("launches", len(k["launches"]), f"{len(k['launches']):,}")
            + _num("ctas", k["ctas"], f"{k['ctas']:,}") + _num("events", k["events"], f"{k['events']:,}")
            + _num("clock.mhz_median", k["clock"]["mhz_median"], _fmt(k["clock"]["mhz_median"]))
            + "</tr>")
    total = sum(k["kernel_wall_ns"] for k in kernels)
    return ("<h2>Kernels by share of wall time</h2>"
            "<p class=sub>share: a kernel's wall time (first CTA start to last CTA end, summed "
            f"over its launches) over that of all {len(kernels)} kernels in this report "
            f"({_fmt(total, 1, 1000)} us); kernels the run did not instrument are not in it</p>"
            f"<table class='sortable kernels' id=kernels><thead>{head}</thead>"
            f"<tbody>{''.join(rows)}</tbody></table>")


def _kernel_section(n: int, k: dict[str, Any], share: float | None, pic: Picture | None,
                    fitted: dict[str | None, list[float]], sites: dict[str, int] | None,
                    model: dict[str, list[str]] | None = None) -> str:
    """One kernel: its heading, who launched it (``sites``: the program's frames and how many
    kept launches each made, where the launches recorded them; ``model``: for a kernel Inductor
    generated, the model's lines), its regions, source, picture and notes."""
    colors = region_colors([r["scope"] for r in k["regions"]])
    title = escape(k["kernel"]) + (f" <span class=cfg>[{escape(k['config'])}]</span>"
                                   if k["config"] else "")
    pct = "" if share is None else f" <span class=sub>{100 * share:.1f}% of wall time</span>"
    out = [f"<section id=k{n} class=kernel><h2>{n + 1}. {title}{pct}</h2>",
           f"<p class=sub>{escape(kernel_title(k).split(': ', 1)[-1])}</p>"]
    if sites:
        out.append("<p><b>launched from</b> " + "; ".join(
            f"<code>{escape(site)}</code> x{n:,}" for site, n in sites.items()) + "</p>")
    if model:
        out.append(f"<p>{escape(model_text(model))}</p>")
    out.append("<h3>Regions</h3>" + _regions_table(k, colors))
    if k.get("source"):
        out.append(f"<details open><summary>Source</summary>{_source(k, colors)}</details>")
    if pic is not None:
        what = f"Timeline of launch {pic.launch}"
        img = (f"<img alt='{what}' src='data:image/png;base64,{base64.b64encode(pic.png).decode()}'>"
               if pic.png else f"<p class=sub>{escape(pic.note or '')}</p>")
        out.append(f"<details open><summary>{what} (its first in this report)</summary>{img}</details>")
    notes = "".join(f"<li{' class=warn' if t.startswith('WARNING') else ''}>{escape(t)}</li>"
                    for t in kernel_notes(k, fitted))
    out.append(f"<h3>Notes</h3><ul class=notes>{notes}</ul></section>")
    return "\n".join(out)


# The regions table's number columns: heading, the summary's key, digits shown, unit scale.
_REGION_COLS = (("launches", "launches", 0, 1), ("count", "count", 0, 1),
                ("total us", "ns.total", 1, 1000), ("median ns", "ns.median", 1, 1),
                ("+-ns", "uncertainty.ns", 1, 1), ("p5 ns", "ns.p5", 1, 1),
                ("p95 ns", "ns.p95", 1, 1), ("max ns", "ns.max", 1, 1),
                ("median cyc", "cycles.median", 0, 1))


def _get(d: dict[str, Any], key: str) -> Any:
    for part in key.split("."):
        d = (d or {}).get(part)
    return d


def _regions_table(k: dict[str, Any], colors: dict[int, str]) -> str:
    """A row per region, longest in total first (the summary's order): share of CTA time,
    count, time and its spread (p5-p95, max), the error bar."""
    head = "<tr><th></th><th>region</th><th>where</th><th>share</th>" + "".join(
        f"<th>{escape(name)}</th>" for name, *_ in _REGION_COLS) + "</tr>"
    rows = []
    for r in k["regions"]:
        c = colors[r["scope"]]
        cells = "".join(_num(key, _get(r, key), _fmt(_get(r, key), digits, scale))
                        for _, key, digits, scale in _REGION_COLS)
        flag = " (!)" if r.get("below_uncertainty") else ""
        rows.append(f"<tr class=region data-scope={r['scope']}><td><i class=sw style='background:{c}'>"
                    f"</i></td><td>{escape(r['name'])}{flag}</td><td class=loc>{escape(r.get('loc') or '')}"
                    f"</td>{_share('share', r['share'], c)}{cells}</tr>")
    if not rows:
        rows.append(f"<tr><td colspan={4 + len(_REGION_COLS)}>(no complete regions)</td></tr>")
    return (f"<table class='sortable regions'><thead>{head}</thead>"
            f"<tbody>{''.join(rows)}</tbody></table>")


def _self_shares(k: dict[str, Any]) -> dict[int, float]:
    """Per region: its share less its nested regions' (the time of its own lines); it colours
    the lines where it is the innermost region."""
    own = {r["scope"]: r["share"] or 0.0 for r in k["regions"]}
    for r in k["regions"]:
        if r.get("parent") in own:
            own[r["parent"]] -= r["share"] or 0.0
    return {s: max(0.0, v) for s, v in own.items()}


def _heat(v: float) -> str:
    """A line's background: white for none of the kernel's time, deep orange for all of it."""
    light = 100 - 50 * math.sqrt(max(0.0, min(1.0, v)))
    return f"hsl(24,100%,{light:.0f}%)"


def _source(k: dict[str, Any], colors: dict[int, str]) -> str:
    """The kernel's source (``source_view``'s lines): per line the innermost region's share,
    median and count where it changes (as the text view), a bar per region covering the line,
    and the line coloured by the time of its innermost region outside its nested ones."""
    src = k["source"]
    regions = {r["scope"]: r for r in k["regions"]}
    own = _self_shares(k)
    parents = {s: r.get("parent") for s, r in regions.items()}
    col = {s: i for i, s in enumerate(sorted(regions, key=lambda s: (region_depth(s, parents), s)))}
    out = []
    if src.get("ir"):
        out.append(f"<p class=sub>regions from {escape(src['ir'])}</p>")
    if src.get("note"):
        out.append(f"<p class=sub>note: {escape(src['note'])}</p>")
    unplaced = [regions[s] for s in src.get("no_line", []) if s in regions]
    if unplaced:  # (the numbers are in the regions table above)
        out.append("<p class=sub>without a source line: " + ", ".join(
            f"<i class=sw style='background:{colors[r['scope']]}'></i> {escape(r['name'])}" for r in unplaced)
            + "</p>")
    out.append("<p class=sub>colour: the time of the line's innermost region outside its nested "
               "regions, as a share of CTA time; bars: the regions covering the line (outermost "
               "left); numbers: the innermost region, where it changes</p>")
    gutter = 8 * max(1, len(col))
    for f in src["files"]:
        out.append(f"<h4>{escape(f['path'] or f['file'])}</h4>")
        if f.get("note"):
            out.append(f"<p class=sub>note: {escape(f['note'])}</p>")
        rows, shown = [], None
        for row in f["lines"]:
            covering = [s for s in row["regions"] if s in regions]
            inner = covering[-1] if covering else None
            r = regions.get(inner)
            if r is None:
                cells = "<td></td><td></td><td></td><td></td>"
            elif inner == shown:
                cells = "<td></td><td></td><td></td><td class=ditto>\"</td>"
            else:
                cells = (_share("share", r["share"], colors[inner])
                         + _num("ns.median", r["ns"]["median"], _fmt(r["ns"]["median"], 1))
                         + _num("count", r["count"], f"{r['count']:,}")
                         + f"<td class=rname>{escape(r['name'])}</td>")
            shown = inner
            bars = "".join(f"<i style='left:{8 * col[s]}px;background:{colors[s]}'></i>"
                           for s in covering)
            heat = f" style='background:{_heat(own[inner])}'" if inner is not None else ""
            text = escape(row["text"]) if row["text"] is not None else "<span class=sub>(not read)</span>"
            attrs = f" data-r='{' '.join(map(str, covering))}'" + (
                f" data-inner={inner}" if inner is not None else "")
            rows.append(f"<tr{attrs}><td class=ln>{row['line']}</td>{cells}"
                        f"<td class=g style='width:{gutter}px'>{bars}</td><td class=code{heat}>{text}</td></tr>")
        out.append("<div class=wide><table class=src><thead><tr><th>line</th><th>share</th><th>median ns</th>"
                   "<th>count</th><th>region</th><th>regions</th><th>source</th></tr></thead>"
                   f"<tbody>{''.join(rows)}</tbody></table></div>")
    return "\n".join(out)


_CSS = """
body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',sans-serif;margin:1.5em auto;max-width:1400px;
 padding:0 1em;color:#222}
h1{font-size:1.5em;margin:0 0 .2em}h2{font-size:1.2em;margin:1.6em 0 .3em}
h3{font-size:1.05em;margin:1em 0 .3em}h4{font:12px ui-monospace,monospace;margin:.6em 0 .2em}
.sub{color:#666;font-size:.9em;margin:.2em 0}.cfg{color:#666;font-weight:normal}
section.kernel{border-top:2px solid #ddd;margin-top:1.5em}
table{border-collapse:collapse;margin:.3em 0}th,td{padding:2px 8px;vertical-align:top}
th{background:#f3f3f3;text-align:left;font-weight:600;position:sticky;top:0;white-space:nowrap}
table.sortable th{cursor:pointer}table.sortable th:hover{background:#e6e6e6}
tbody tr:nth-child(even){background:#fafafa}td.n{text-align:right;white-space:nowrap;
 font-variant-numeric:tabular-nums}td.loc,td.rname{font:12px ui-monospace,monospace;color:#555}
td.share{position:relative;min-width:7em}.bar{position:absolute;left:0;top:3px;bottom:3px;
 opacity:.35;border-radius:2px}.pct{position:relative}
i.sw{display:inline-block;width:12px;height:12px;border-radius:2px}
tr.region:hover,tr.region.on{background:#fff3bf}
table.src{font:12px/1.35 ui-monospace,SFMono-Regular,Menlo,monospace}table.src td{padding:0 6px}
table.src tbody tr:nth-child(even){background:none}td.ln{color:#999;text-align:right}
td.code{white-space:pre;min-width:40em}.wide{overflow-x:auto}td.ditto{color:#aaa}
td.g{position:relative;padding:0}td.g i{position:absolute;top:0;bottom:0;width:6px}
table.src tr.hl td.ln{background:#ffd43b;color:#000}
ul.notes{padding-left:1.2em}ul.notes li{margin:.25em 0}li.warn,.warn li{color:#a61e4d}
pre.auto{font:12px/1.35 ui-monospace,SFMono-Regular,Menlo,monospace;overflow-x:auto}
details>summary{cursor:pointer;font-weight:600;margin:.8em 0 .3em}img{max-width:100%;height:auto}
"""

# Sorting by a column's values (click its header) and, hovering a region, its source lines.
_SCRIPT = """
(function(){
function val(td){var v=td.getAttribute('data-v');if(v!==null&&v!==''){return parseFloat(v);}
 return td.textContent.trim().toLowerCase();}
document.querySelectorAll('table.sortable').forEach(function(t){
 t.querySelectorAll('thead th').forEach(function(th,i){
  th.addEventListener('click',function(){
   var body=t.tBodies[0],rows=Array.prototype.slice.call(body.rows);
   var desc=th.getAttribute('data-sort')!=='desc';
   t.querySelectorAll('thead th').forEach(function(h){h.removeAttribute('data-sort');});
   th.setAttribute('data-sort',desc?'desc':'asc');
   rows.sort(function(a,b){var x=val(a.cells[i]),y=val(b.cells[i]);
    var c=(typeof x==='number'&&typeof y==='number')?x-y:String(x).localeCompare(String(y));
    return desc?-c:c;});
   rows.forEach(function(r){body.appendChild(r);});});});});
document.querySelectorAll('section.kernel').forEach(function(sec){
 sec.querySelectorAll('tr.region').forEach(function(tr){
  var s=tr.getAttribute('data-scope');
  function mark(on){sec.querySelectorAll('table.src tbody tr').forEach(function(row){
   var r=(row.getAttribute('data-r')||'').split(' ');
   row.classList.toggle('hl',on&&r.indexOf(s)>=0);});}
  tr.addEventListener('mouseenter',function(){mark(true);});
  tr.addEventListener('mouseleave',function(){mark(false);});});});
document.body.setAttribute('data-ready','1');
})();
"""
