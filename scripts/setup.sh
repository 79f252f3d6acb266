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
echo "setup: done; tools are in .venv/bin" >&2
