"""`proton-inject report --html` on a profile of many kernels: the page's size, the time to
write it, and how long headless chromium takes to load it and to paint it.

The profile is built from the real H100 launches in tests/data (add, mm, two layer norms, two
matmuls), each copied under a new kernel name with its instrumented IR and source, until it
holds ``--kernels`` kernels. chromium is timed by its own wall time: the page against an empty
page (the browser's start-up), ``--dump-dom`` (loaded, scripts run) and ``--screenshot``
(laid out and painted), each ``--rounds`` times in turn; and inside the browser, from a
wrapper page's start to the page's load event in its iframe. Medians and spreads are printed.

    python benchmarks/html_page.py --kernels 12 --rounds 5
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from proton_inject.formats.raw import load_raw, save_raw  # noqa: E402

DATA = REPO / "tests" / "data"
# (raw launch, its instrumented IR): the launches a built profile cycles through
LAUNCHES = (
    ("h100-triton3.6/profile_scratch_add.json", "h100-triton3.6/add_kernel.ttgir"),
    ("h100-triton3.6/profile_scratch_mm.json", "h100-triton3.6/mm_kernel.ttgir"),
    ("h100-direct/00000-layernorm_fwd_kernel.json", "h100-direct/layernorm_fwd_kernel.ttgir"),
    ("h100-direct-loops/00000-layernorm_fwd_kernel.json", "h100-direct-loops/layernorm_fwd_kernel.ttgir"),
    ("h100-shortlaunch/00000-matmul_kernel.json", None),
    ("h100-shortlaunch/00001-matmul_kernel.json", None),
)
SOURCES = ("h100-triton3.6/kernels.py",)  # beside the launches; examples/ is the repo's own


def build_profile(out: Path, kernels: int) -> Path:
    """A directory of ``kernels`` raw launches, each of its own kernel (the bundled launches
    under new names), with their IR and source beside them."""
    out.mkdir(parents=True)
    for i in range(kernels):
        raw, ir = LAUNCHES[i % len(LAUNCHES)]
        buf, meta = load_raw(DATA / raw)
        name = f"{meta.kernel}_{i:02d}"
        save_raw(out / f"{i:05d}-{name}", buf, dataclasses.replace(meta, kernel=name, launch=i), gz=True)
        if ir is not None:
            shutil.copy(DATA / ir, out / f"{name}.ttgir")
    for s in SOURCES:
        shutil.copy(DATA / s, out / Path(s).name)
    shutil.copytree(REPO / "examples", out / "examples", dirs_exist_ok=True)
    return out


def _chromium_s(args: list[str]) -> float:
    from helpers import browser

    t = time.perf_counter()
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([browser.find(), "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
                        f"--user-data-dir={profile}", *args], capture_output=True, check=True, timeout=120)
    return time.perf_counter() - t


def _load_s(page: Path) -> float:
    """Seconds from a wrapper page's start to the load event of ``page`` in its iframe (the
    browser's start-up left out), as the wrapper's DOM records it."""
    from helpers import browser

    wrap = page.with_name("wrap.html")
    wrap.write_text("<!doctype html><body><script>var t0=performance.now();</script>"
                    f"<iframe src='{page.name}' style='width:1400px;height:2400px' onload=\""
                    "document.body.setAttribute('data-ms',performance.now()-t0)\"></iframe></body>")
    got = browser.load(wrap)
    m = re.search(r'data-ms="([0-9.]+)"', got.dom)
    if m is None:
        sys.exit(f"no load time in the wrapper's DOM: {got.stderr[-2000:]}")
    return float(m.group(1)) / 1000


def _spread(xs: list[float]) -> str:
    return f"median {statistics.median(xs):.2f} s (min {min(xs):.2f}, max {max(xs):.2f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run = build_profile(Path(tmp) / "run", args.kernels)
        page, blank = Path(tmp) / "page.html", Path(tmp) / "blank.html"
        blank.write_text("<!doctype html><title>blank</title>")
        t = time.perf_counter()
        env = {**os.environ, "PYTHONPATH": str(REPO)}  # this checkout's tool, whatever the venv holds
        got = subprocess.run([sys.executable, "-m", "proton_inject.cli", "report", str(run), "--html", str(page),
                              "-j", "2"], capture_output=True, text=True, cwd=tmp, env=env)
        if got.returncode:
            sys.exit(got.stderr)
        print(f"report --html: {time.perf_counter() - t:.2f} s for {args.kernels} kernels; "
              f"page {page.stat().st_size / 2**20:.2f} MiB")
        times: dict[str, list[float]] = {"blank dump-dom": [], "page dump-dom": [], "blank screenshot": [],
                                         "page screenshot": []}
        shot = ["--hide-scrollbars", "--window-size=1400,2400", f"--screenshot={Path(tmp) / 's.png'}"]
        for _ in range(args.rounds):
            for which, p in (("blank", blank), ("page", page)):
                times[f"{which} dump-dom"].append(_chromium_s(["--dump-dom", p.as_uri()]))
                times[f"{which} screenshot"].append(_chromium_s([*shot, p.as_uri()]))
        for k, v in times.items():
            print(f"{k}: {_spread(v)}")
        loads = [_load_s(page) for _ in range(args.rounds)]
        print(f"page's load event in an iframe (parsed, script run, pictures decoded): {_spread(loads)}")
        for what in ("dump-dom", "screenshot"):
            d = [p - b for p, b in zip(times[f"page {what}"], times[f"blank {what}"], strict=True)]
            print(f"page over blank, {what}: {_spread(d)}")


if __name__ == "__main__":
    main()
