"""Shared fixtures and markers for the test suite."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "ttgir_samples"
DATA = Path(__file__).resolve().parent / "data"
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


@pytest.fixture(scope="session")
def mlir_context():
    """A Triton MLIR context with every dialect TTGIR files use, Proton's included."""
    from proton_inject.lower.proton import mlir_context as make

    return make()
