"""`report --html` on the real H100 launches: the page holds the numbers `--json` prints (read
back with the standard library's HTML parser), its source view and notes, and opens in a real
headless chromium without a console message (those tests skip where chromium is missing)."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import helpers
import pytest
from helpers import browser, load_module
from helpers.cli import invoke

from proton_inject.analyze import html as page
from proton_inject.analyze.plot import TAB10, TAB20
from proton_inject.analyze.text import fitted_rates, kernel_notes

DATA = helpers.DATA
INPUTS = [DATA / "h100-triton3.6", DATA / "h100-direct-loops", DATA / "h100-shortlaunch"]
pytestmark = pytest.mark.filterwarnings("ignore::proton_inject.analyze.issues.DecodeWarning")


class _Cells(HTMLParser):
    """Every number cell (``data-k``/``data-v``) with its text, under its kernel section, its
    table and its row; the sections' ids and the page's text."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: list[dict] = []
        self.rows: list[dict] = []
        self.text: list[str] = []
        self.imgs: list[str] = []
        self._at: dict = {"section": None, "table": None, "row": None}
        self._cell: dict | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "section":
            self._at["section"] = a.get("id")
        elif tag == "table":
            self._at["table"] = a.get("id") or a.get("class")
        elif tag == "tr":
            self._at["row"] = a
            self.rows.append({**self._at, "row": a})
        elif tag == "td" and "data-k" in a:
            self._cell = {**self._at, "k": a["data-k"], "v": a["data-v"], "text": ""}
        elif tag == "img":
            self.imgs.append(a["src"])

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None:
            self.cells.append(self._cell)
            self._cell = None

    def handle_data(self, data):
        self.text.append(data)
        if self._cell is not None:
            self._cell["text"] += data


def _parse(path: Path) -> _Cells:
    p = _Cells()
    p.feed(path.read_text())
    return p


def _shown(text: str) -> float:
    """A cell's text as a number ("1,234.5" -> 1234.5; "83.9%" -> 83.9)."""
    return float(re.sub(r"[,%\s]", "", text))


def _get(d: dict, key: str):
    for part in key.split("."):
        d = (d or {}).get(part)
    return d


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> tuple[dict, Path]:
    """The --json summary (with --source) and the page, written by one command."""
    out = tmp_path_factory.mktemp("page") / "report.html"
    res = invoke(["report", *INPUTS, "--json", "--source", "--html", out, "-j", "1"], code=0)
    assert f"wrote {out}" in res.stderr
    return json.loads(res.stdout), out


def test_kernel_table_holds_the_json_numbers_by_share(made):
    summary, out = made
    got = _parse(out)
    by = {k["kernel"] + str(k["config"]): k for k in summary["kernels"]}
    rows = [r["row"] for r in got.rows if r["table"] == "kernels" and "data-kernel" in r["row"]]
    assert len(rows) == len(summary["kernels"]) == 5
    total = sum(k["kernel_wall_ns"] for k in summary["kernels"])
    cells = [c for c in got.cells if c["table"] == "kernels"]
    walls = [float(c["v"]) for c in cells if c["k"] == "kernel_wall_ns"]
    assert walls == sorted(walls, reverse=True)  # largest share first
    assert sorted(walls) == sorted(k["kernel_wall_ns"] for k in summary["kernels"])
    shares = [float(c["v"]) for c in cells if c["k"] == "wall_share"]
    assert shares == pytest.approx([w / total for w in walls], rel=1e-12)
    for c in cells:
        if c["k"] == "wall_share":
            assert _shown(c["text"]) == pytest.approx(100 * float(c["v"]), abs=0.05)
    mhz = {float(c["v"]) for c in cells if c["k"] == "clock.mhz_median"}
    assert mhz == {k["clock"]["mhz_median"] for k in by.values()}


def test_region_tables_hold_the_json_numbers(made):
    summary, out = made
    got = _parse(out)
    kernels = sorted(summary["kernels"], key=lambda k: -k["kernel_wall_ns"])
    checked = 0
    for c in (c for c in got.cells if c["table"] == "sortable regions"):
        k = kernels[int(c["section"].removeprefix("k"))]
        [r] = [r for r in k["regions"] if r["scope"] == int(c["row"]["data-scope"])]
        want = _get(r, c["k"])
        assert (None if c["v"] == "" else float(c["v"])) == want, (c, want)
        if want is not None:
            scale = 1000 if c["k"] == "ns.total" else 0.01 if c["k"] == "share" else 1
            assert _shown(c["text"]) == pytest.approx(want / scale, abs=0.051), c
        checked += 1
    assert checked == sum(len(k["regions"]) for k in kernels) * 10  # share and 9 columns


def test_source_rows_are_the_source_views(made):
    summary, out = made
    got = _parse(out)
    kernels = sorted(summary["kernels"], key=lambda k: -k["kernel_wall_ns"])
    for n, k in enumerate(kernels):
        present = {r["scope"] for r in k["regions"]}
        want = [" ".join(str(s) for s in ln["regions"] if s in present)
                for f in k["source"]["files"] for ln in f["lines"]]
        rows = [r["row"].get("data-r") for r in got.rows if r["section"] == f"k{n}" and r["table"] == "src"
                and r["row"].get("data-r") is not None]
        assert rows == want
    text = "".join(got.text)
    assert "acc += x * y + i" in text and "tl.dot(a, b, acc)" in text


def test_notes_pictures_and_launched_from(made, tmp_path):
    summary, out = made
    got = _parse(out)
    text = " ".join("".join(got.text).split())
    fitted = fitted_rates(summary)
    for k in summary["kernels"]:
        for note in kernel_notes(k, fitted):
            assert " ".join(note.split()) in text
    assert "record cost: not calibrated" in text and "clock: " in text
    assert len(got.imgs) == 5 and all(s.startswith("data:image/png;base64,iVBOR") for s in got.imgs)
    assert "launched from" not in text
    # as the report gives it when the launches recorded the program's frame that made them
    summary["launched_from"] = {"add_kernel": {"train.py:41": 3, "model.py:7": 1}}
    page.write_page(tmp_path / "p.html", summary, [])
    later = " ".join("".join(_parse(tmp_path / "p.html").text).split())
    assert "launched from train.py:41 x3; model.py:7 x1" in later and later.count("launched from") == 1


def test_page_leaves_json_and_text_as_they_were(tmp_path):
    for opts in (["--json"], []):
        plain = invoke(["report", *INPUTS, *opts, "-j", "1"], code=0).stdout
        with_page = invoke(["report", *INPUTS, *opts, "--html", tmp_path / "r.html", "-j", "1"], code=0).stdout
        assert plain == with_page
    assert not any("source" in k for k in json.loads(invoke(
        ["report", *INPUTS, "--json", "--html", tmp_path / "r.html"], code=0).stdout)["kernels"])


def test_region_colours_are_matplotlibs():
    matplotlib = pytest.importorskip("matplotlib")
    from matplotlib.colors import to_hex

    for name, ours in (("tab10", TAB10), ("tab20", TAB20)):
        cmap = matplotlib.colormaps[name]
        assert tuple(to_hex(cmap(i)) for i in range(cmap.N)) == ours


@pytest.mark.parametrize("name", ["report.txt", "report.png"])
def test_html_must_name_an_html_file(tmp_path, name):
    res = invoke(["report", INPUTS[0], "--html", tmp_path / name], code=2)
    assert "--html" in res.output and "must name a .html file" in res.output
    assert not (tmp_path / name).exists()


def test_twelve_kernel_page_is_small(tmp_path):
    bench = load_module(helpers.REPO / "benchmarks" / "html_page.py", "html_page")
    run = bench.build_profile(tmp_path / "run", 12)
    out = tmp_path / "page.html"
    invoke(["report", run, "--html", out, "-j", "2"], cwd=tmp_path, code=0)  # pictures drawn in workers
    assert out.stat().st_size < 2 * 10**6
    assert len(_parse(out).imgs) == 12


@browser.requires_chromium
def test_page_loads_in_chromium_without_console_messages(made):
    _, out = made
    got = browser.load(out)
    assert got.console == [], got.console
    assert 'data-ready="1"' in got.dom, got.stderr[-2000:]  # the page's script ran to its end
    assert got.dom.count("<section") == 5


@browser.requires_chromium
def test_a_broken_script_is_seen(tmp_path):
    """The check above can fail: a page whose script throws shows in the console lines."""
    bad = tmp_path / "bad.html"
    bad.write_text("<!doctype html><body><script>undefinedThing.x = 1;</script></body>")
    got = browser.load(bad)
    assert any("undefinedThing" in ln for ln in got.console), got.stderr[-2000:]


@browser.requires_chromium
def test_screenshot_is_drawn(made, tmp_path):
    _, out = made
    shot = browser.screenshot(out, tmp_path / "shot.png", 1400, 1400)
    png = shot.read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 50_000  # text, tables and a picture drawn


def test_page_from_a_trace(tmp_path):
    out = tmp_path / "t.html"
    invoke(["report", DATA / "golden" / "small_trace.json", "--html", out], code=0)
    got = _parse(out)
    assert len(got.imgs) == 1  # the picture drawn from the trace's own launch
    assert "from a trace: no instrumented IR" in "".join(got.text)


@browser.requires_chromium
def test_sorting_and_hover_work_in_chromium(made, tmp_path):
    """A click on the count heading sorts the largest regions table by count, largest first;
    hovering a region marks the source lines it covers (the page's own script, in chromium)."""
    _, out = made
    probe = """<script>
var sec=Array.prototype.reduce.call(document.querySelectorAll('section.kernel'), function(a, b){
  return b.querySelectorAll('tr.region').length > a.querySelectorAll('tr.region').length ? b : a;});
var t=sec.querySelector('table.regions');
t.querySelectorAll('thead th')[5].click();
document.body.setAttribute('data-sorted', Array.prototype.map.call(t.tBodies[0].rows,
  function(r){return r.cells[5].getAttribute('data-v');}).join(','));
var row=t.tBodies[0].rows[t.tBodies[0].rows.length-1];
row.dispatchEvent(new MouseEvent('mouseenter'));
document.body.setAttribute('data-hover', sec.id+':'+row.getAttribute('data-scope')+':'+
  sec.querySelectorAll('table.src tr.hl').length);
</script></body>"""
    page_copy = tmp_path / "probe.html"
    page_copy.write_text(out.read_text().replace("</body>", probe))
    got = browser.load(page_copy)
    assert got.console == [], got.console
    counts = [float(v) for v in re.search(r'data-sorted="([^"]*)"', got.dom).group(1).split(",")]
    assert counts == sorted(counts, reverse=True) and len(counts) > 1
    sec, scope, marked = re.search(r'data-hover="(k\d+):(\d+):(\d+)"', got.dom).groups()
    first = _parse(out)
    want = sum(1 for r in first.rows if r["section"] == sec and r["table"] == "src"
               and scope in (r["row"].get("data-r") or "").split())
    assert int(marked) == want > 0
