"""What the tests share: paths of the checkout and its fixtures, and the GPU skip.

Importable as ``helpers`` (pyproject's pytest ``pythonpath`` puts tests/ on sys.path), so a
test file finds the data wherever it sits under tests/.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "ttgir_samples"
DATA = REPO / "tests" / "data"
TARGETS = ("cuda-80", "cuda-90", "cuda-100", "hip-gfx942")


def sample_files() -> list[Path]:
    """Every uninstrumented sample, sorted."""
    return sorted(p for t in TARGETS for p in (SAMPLES / t).glob("*.ttgir"))


def _has_gpu() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


requires_gpu = pytest.mark.skipif(not _has_gpu(), reason="needs a CUDA GPU")


def load_module(path: Path, name: str):
    """The Python file ``path`` (a benchmark, an example) imported as module ``name``."""
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # a dataclass of the module looks its module up
    spec.loader.exec_module(mod)
    return mod
