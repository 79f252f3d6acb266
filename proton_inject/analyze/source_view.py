"""Source view (``report --source``): each kernel's source lines with the regions that cover them.

A region covers the source lines of the ops between its start record and its (last) end
record in the kernel's instrumented IR, nested ops included; so marks, ``--region`` lines,
ops, loops and iterations all show where they are, whatever rule made them. The IR is the one
the run used (``OUT/ir/<hash>/<kernel>.ttgir`` of ``profile``, the tree ``run`` was given, or
a ``.ttgir`` beside the raw launches), accepted only when its records give the launch's scope
names. Without it, each region shows at its own line (its ``loc``). The kernel's source file
is read through ``formats/schema.py`` (bounded, never a FIFO); when it cannot be read, the
view says why in one line and lists the covered line numbers without their text.

Each kernel of the summary gets ``source`` (JSON-ready): the IR used, a note, and per source
file its lines with the scope ids covering each (outermost first); ``format_source`` prints
them with the share, median and count of the innermost region of each line.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proton_inject.errors import UserError
from proton_inject.formats import run_index
from proton_inject.formats.raw import LaunchMeta, read_launch_meta
from proton_inject.formats.schema import MAX_SOURCE_BYTES, FileError, read_bytes
from proton_inject.ttgir.parser import parse_file
from proton_inject.ttgir.tree import Module

_RECORD = re.compile(r'\s*(start|end)\s+"((?:[^"\\]++|\\.)*+)"')
_LOC_IN_NAME = re.compile(r" @\S+:\d+(?:-\d+)?")  # the line column already says where
_SAFE = re.compile(r"[^A-Za-z0-9_.-]")  # as compile_hook names the IR files it writes
# Lines of a kernel's file shown around what its regions cover: the function's own lines
# (from its `def`), never more than this many (a loc far off would print a whole file).
MAX_SPAN_LINES = 2000


@dataclass
class Coverage:
    """What the IR says about one kernel: per scope id, the (file, line) its ops come from,
    and where the function starts."""

    lines: dict[int, set[tuple[str, int]]] = field(default_factory=dict)
    def_file: str | None = None
    def_line: int | None = None
    end_line: int | None = None  # the function's last op line in ``def_file``


def _unescape(name: str) -> str:
    return re.sub(r"\\(.)", r"\1", name)


def coverage(module: Module, kernel: str, scopes: dict[int, str]) -> Coverage | None:
    """The lines each scope of ``kernel`` covers in ``module``; None when the module's records
    do not give ``scopes`` (another build of the kernel, or not its IR at all).

    Scope ids are given as both lowerings number them: a new id per start record in text
    order; an end closes the latest open start of its name (a region that ends at several
    returns ends at the last of them)."""
    funcs = [f for f in module.functions if f.name == kernel] or module.functions[:1]
    if not funcs:
        return None
    fn = funcs[0]
    ops = list(fn.op.walk())[1:]
    starts: list[tuple[str, int]] = []  # (name, op index) per start, in id order
    last_end: dict[int, int] = {}
    open_: dict[str, list[int]] = {}
    for i, op in enumerate(ops):
        m = _RECORD.match(op.head) if op.name == "proton.record" else None
        if m is None:
            continue
        name = _unescape(m.group(2))
        if m.group(1) == "start":
            open_.setdefault(name, []).append(len(starts))
            starts.append((name, i))
        else:
            stack = open_.get(name)
            sid = stack.pop() if stack else max((s for s, (n, _) in enumerate(starts) if n == name),
                                                default=None)
            if sid is not None:
                last_end[sid] = i
    ids = _match_ids([n for n, _ in starts], scopes)
    if ids is None:
        return None
    cov = Coverage()
    p = fn.op.location.primary
    if p is not None:
        cov.def_file, cov.def_line = p.file, p.line
        cov.end_line = max((q.line for op in ops if (q := op.location.primary) is not None
                            and q.file == p.file), default=p.line)
    for scope, k in ids.items():
        lo, hi = starts[k][1], last_end.get(k, len(ops))
        got = cov.lines.setdefault(scope, set())
        for op in ops[lo + 1:hi]:
            p = op.location.primary
            if p is not None and op.name != "proton.record" and p.line > 0:
                got.add((p.file, p.line))
    return cov


def _match_ids(ir_names: list[str], scopes: dict[int, str]) -> dict[int, int] | None:
    """Scope id -> index of its start record: by id where every name agrees, else by name
    where the IR's names are unique; None when some scope has no start."""
    if scopes and all(0 <= s < len(ir_names) and ir_names[s] == n for s, n in scopes.items()):
        return {s: s for s in scopes}
    where = {n: i for i, n in enumerate(ir_names) if ir_names.count(n) == 1}
    if not scopes or any(n not in where for n in scopes.values()):
        return None
    return {s: where[n] for s, n in scopes.items()}


def ir_candidates(raw: Path, meta: LaunchMeta) -> list[Path]:
    """Where the instrumented IR of a raw launch may be: ``profile``'s ``OUT/ir/<hash>/``
    (a second config's own file too), the tree ``run`` was given (its run.json says), and
    beside the raw launches."""
    run_dir = run_index.run_dir_of(raw)
    name = _SAFE.sub("_", meta.kernel)
    trees = [run_dir / "ir"] + run_index.run_trees(run_dir)
    out: list[Path] = []
    for t in trees:
        if meta.hash and (t / meta.hash).is_dir():
            d = t / meta.hash
            out.append(d / f"{name}.ttgir")
            out += sorted(d.glob(f"{name}.*.ttgir.txt"))
    out += [raw.parent / f"{name}.ttgir", run_dir / f"{name}.ttgir"]
    seen: set[Path] = set()
    return [p for p in out if not (p in seen or seen.add(p)) and p.is_file()]


def find_coverage(raw: Path, meta: LaunchMeta) -> tuple[Path | None, Coverage | None, str | None]:
    """The first IR candidate whose records give the launch's scopes, its coverage, and a
    note when there is none."""
    tried = []
    for p in ir_candidates(raw, meta):
        try:
            cov = coverage(parse_file(p), meta.kernel, meta.scopes)
        except UserError as e:
            tried.append(f"{p}: {e}")
            continue
        if cov is not None:
            return p, cov, None
        tried.append(f"{p}: its records are not this launch's regions")
    why = "; ".join(tried) if tried else f"none found beside {raw.parent}"
    return None, None, f"instrumented IR of {meta.kernel}: {why}; each region shows at its own line"


def read_source(file: str, roots: Sequence[Path]) -> tuple[list[str] | None, Path | None, str | None]:
    """A source file's lines (relative paths looked up under ``roots``), its path, and a
    one-line note when it cannot be read."""
    p = Path(file)
    cands = [p] if p.is_absolute() else [r / p for r in roots]
    path = next((c for c in cands if c.exists()), None)
    if path is None:
        where = "" if p.is_absolute() else f" under {', '.join(map(str, roots))}"
        return None, None, (f"{file}: source not found{where}; showing the lines its regions "
                            "cover (run report from the directory the program ran in)")
    try:
        data = read_bytes(path, "kernel source", MAX_SOURCE_BYTES)
    except FileError as e:
        return None, path, f"{e}; showing the lines its regions cover"
    text = data.decode("utf-8", errors="replace")
    return [ln.rstrip().expandtabs(4) for ln in text.splitlines()], path, None


def _region_loc_lines(kernel: dict[str, Any]) -> dict[int, set[tuple[str, int]]]:
    """Without IR: each region at its own ``loc`` (file:line, or file:start-end of a mark)."""
    out: dict[int, set[tuple[str, int]]] = {}
    for r in kernel["regions"]:
        m = re.fullmatch(r"(.+):(\d+)(?:-(\d+))?", r.get("loc") or "")
        if m:
            lo, hi = int(m.group(2)), int(m.group(3) or m.group(2))
            out[r["scope"]] = {(m.group(1), n) for n in range(lo, min(hi, lo + MAX_SPAN_LINES) + 1)}
    return out


def region_depth(scope: int, parents: dict[int, int | None]) -> int:
    """How many regions ``scope`` is nested in (0: outermost)."""
    d, seen = 0, {scope}
    while (scope := parents.get(scope)) is not None and scope not in seen:
        seen.add(scope)
        d += 1
    return d


def kernel_source(kernel: dict[str, Any], raw: Path | None, meta: LaunchMeta | None,
                  roots: Sequence[Path]) -> dict[str, Any]:
    """The ``source`` entry of one kernel summary (see the module's docstring)."""
    ir, cov, note = (find_coverage(raw, meta) if raw is not None and meta is not None
                     else (None, None, "from a trace: no instrumented IR; each region shows at "
                           "its own line"))
    lines = cov.lines if cov is not None else _region_loc_lines(kernel)
    parents = {r["scope"]: r.get("parent") for r in kernel["regions"]}
    present = {r["scope"] for r in kernel["regions"]}
    by_file: dict[str, dict[int, list[int]]] = {}
    for scope in sorted(lines, key=lambda s: (region_depth(s, parents), s)):
        if scope not in present:
            continue  # a region with no instance in these launches
        for f, n in lines[scope]:
            by_file.setdefault(f, {}).setdefault(n, []).append(scope)
    if cov is not None and cov.def_file is not None:
        by_file.setdefault(cov.def_file, {})
    files = []
    for f in sorted(by_file, key=lambda f: (f != (cov.def_file if cov else None), f)):
        covered = by_file[f]
        text, path, why = read_source(f, roots)
        nums = set(covered)
        if text is not None:
            own = cov is not None and f == cov.def_file and cov.def_line
            lo = cov.def_line if own else min(covered, default=1)
            hi = max(covered, default=lo)
            hi = min(max(hi, cov.end_line or hi) if own else hi, lo + MAX_SPAN_LINES - 1, len(text))
            nums |= set(range(lo, hi + 1))
        rows = [{"line": n,
                 "text": text[n - 1] if text is not None and 0 < n <= len(text) else None,
                 "regions": covered.get(n, [])} for n in sorted(nums)]
        files.append({"file": f, "path": str(path) if path else None, "note": why, "lines": rows})
    # (without IR the kernel region has no loc: listed, not dropped)
    unplaced = sorted((s for s in present if not lines.get(s)), key=lambda s: (region_depth(s, parents), s))
    return {"ir": str(ir) if ir else None, "note": note, "files": files, "no_line": unplaced}


def attach(summary: dict[str, Any], raws: Sequence[str | Path], source_root: str | Path | None = None) -> None:
    """Give each kernel of ``summary`` its ``source`` (in place). ``raws``: the raw launches
    the summary came from (one per kernel and config is read for its IR); relative source
    paths are looked up under ``source_root``, else the current directory and the run's."""
    want = {(k["kernel"], k["config"]) for k in summary["kernels"]}
    first: dict[tuple[str, str | None], tuple[Path, LaunchMeta]] = {}
    for p in raws:
        if len(first) == len(want):
            break
        try:
            meta = read_launch_meta(p)
        except UserError:
            continue  # left out of the report too
        if (meta.kernel, meta.config) in want:  # (raws may hold kernels the summary leaves out)
            first.setdefault((meta.kernel, meta.config), (Path(p), meta))
    for k in summary["kernels"]:
        raw, meta = first.get((k["kernel"], k["config"]), (None, None))
        if source_root is not None:
            roots = [Path(source_root)]
        else:
            run_dir = raw.parent.parent if raw is not None and raw.parent.name == "raw" else \
                raw.parent if raw is not None else None
            roots = [Path.cwd()] + ([run_dir] if run_dir is not None else [])
        k["source"] = kernel_source(k, raw, meta, roots)


def ns_text(v: float) -> str:
    """A duration in ns as text, in the largest unit it reaches (ns, us, ms, s)."""
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if v >= scale:
            return f"{v / scale:,.1f} {unit}"
    return f"{v:,.0f} ns"


def _share(r: dict[str, Any]) -> str:
    return f"{100 * r['share']:.1f}%" if r.get("share") is not None else "-"


def format_source(summary: dict[str, Any]) -> str:
    """The source view of every kernel with a ``source`` entry, as text: per line, the
    innermost region covering it (share of CTA time, median, instances; shown where it
    changes), then the line's text."""
    out: list[str] = []
    for k in summary["kernels"]:
        src = k.get("source")
        if src is None:
            continue
        regions = {r["scope"]: r for r in k["regions"]}
        title = k["kernel"] + (f" ({k['config']})" if k.get("config") else "")
        out.append(f"source of {title}" + (f", regions from {src['ir']}" if src["ir"] else ""))
        if src["note"]:
            out.append(f"  note: {src['note']}")
        unplaced = [regions[s] for s in src.get("no_line", []) if s in regions]
        if unplaced:
            out.append("  without a source line: " + "; ".join(
                f"{_LOC_IN_NAME.sub('', r['name'])} {_share(r)}, median {ns_text(r['ns']['median'])}, "
                f"count {r['count']:,}" for r in unplaced))
        for f in src["files"]:
            out.append(f"  {f['path'] or f['file']}")
            if f["note"]:
                out.append(f"  note: {f['note']}")
            out.append(f"  {'line':>6}  {'share':>6}  {'median':>9}  {'count':>9}  "
                       f"{'region':<20}  source")
            shown = None
            for row in f["lines"]:
                inner = row["regions"][-1] if row["regions"] else None
                r = regions.get(inner)
                if r is None:
                    cells = ["", "", "", ""]
                elif inner == shown:
                    cells = ["", "", "", '"']
                else:
                    cells = [_share(r), ns_text(r["ns"]["median"]), f"{r['count']:,}",
                             _LOC_IN_NAME.sub("", r["name"])]
                shown = inner
                text = row["text"] if row["text"] is not None else ""
                out.append(f"  {row['line']:>6}  {cells[0]:>6}  {cells[1]:>9}  {cells[2]:>9}  "
                           f"{cells[3][:20]:<20}  {text}".rstrip())
        out.append("")
    return "\n".join(out).rstrip()
