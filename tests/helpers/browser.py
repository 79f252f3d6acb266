"""A real headless browser for the tests of ``report --html``: Debian's chromium, driven from
its command line (no driver, no Python package). Tests that need it skip where it is not
installed (``apt-get install chromium``).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find() -> str | None:
    """The browser's executable, or None."""
    return next((p for p in map(shutil.which, NAMES) if p), None)


requires_chromium = pytest.mark.skipif(find() is None, reason="needs chromium (apt-get install chromium)")


@dataclass
class Loaded:
    """What the browser made of a page: its DOM after the scripts ran, and the page's console
    messages (uncaught errors included)."""

    dom: str
    console: list[str]
    stderr: str


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        cmd = [find() or "chromium", "--headless", "--disable-gpu", "--no-sandbox",
               "--no-first-run", "--allow-file-access-from-files", f"--user-data-dir={profile}",
               "--enable-logging=stderr", "--v=0", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)


def load(page: Path, timeout: float = 60) -> Loaded:
    """Open ``page`` from disk and dump its DOM once it has loaded."""
    got = _run(["--dump-dom", page.resolve().as_uri()], timeout)
    # chromium logs the page's console as ``...:INFO:CONSOLE(LINE)] "message", source: URL``
    console = [ln for ln in got.stderr.splitlines() if ":CONSOLE" in ln]
    return Loaded(got.stdout, console, got.stderr)


def screenshot(page: Path, out: Path, width: int = 1400, height: int = 2400, timeout: float = 60) -> Path:
    """A PNG of the page as a window of ``width`` x ``height`` pixels shows it."""
    _run(["--hide-scrollbars", f"--window-size={width},{height}", f"--screenshot={out}",
          page.resolve().as_uri()], timeout)
    return out
