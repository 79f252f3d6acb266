#!/usr/bin/env bash
# Create ./.venv with proton-inject (editable) and its test tools; safe to re-run.
# On a machine without an NVIDIA GPU it installs the CPU build of torch first,
# so pip does not pull the multi-GB CUDA build; a GPU machine gets pip's default.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $($PY --version)" >&2
  "$PY" -m venv .venv
fi
PIP=(.venv/bin/python -m pip install -q --disable-pip-version-check)
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    echo "setup: installing torch (CUDA build, GPU found)" >&2
    "${PIP[@]}" torch
  else
    echo "setup: installing torch==2.13.0 (CPU build, no GPU found)" >&2
    "${PIP[@]}" torch==2.13.0
  fi
fi
echo "setup: installing proton-inject and its dependencies" >&2
"${PIP[@]}" -e '.[dev,plot]'
# WITH_CHROMIUM=1 (CI sets it): a headless browser for the tests that open `report --html`'s
# page (they skip without one); Debian/Ubuntu as root, ~30 s (docs/host-performance.md).
if [ "${WITH_CHROMIUM:-0}" = 1 ] && ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing chromium (headless, for the HTML page's tests)" >&2
    { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium; } \
      >/dev/null || echo "setup: chromium did not install; the page's browser tests will skip" >&2
  else
    echo "setup: no chromium (installing it needs root and apt-get); the page's browser tests will skip" >&2
  fi
fi
echo "setup: done; tools are in .venv/bin" >&2
