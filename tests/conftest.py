"""Fixtures every test folder shares (paths and helpers are in tests/helpers/)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def mlir_context():
    """A Triton MLIR context with every dialect TTGIR files use, Proton's included."""
    from proton_inject.lower.proton import mlir_context as make

    return make()


@pytest.fixture(autouse=True, scope="session")
def _own_caches(tmp_path_factory):
    """Tests never touch the user's Triton cache or the tool's build cache (plain builds go to
    the program's Triton cache; instrumented ones to the tool's, kept between sessions)."""
    import os

    root = tmp_path_factory.mktemp("caches")
    saved = {k: os.environ.get(k) for k in ("TRITON_CACHE_DIR", "XDG_CACHE_HOME")}
    os.environ["TRITON_CACHE_DIR"] = str(root / "triton")
    os.environ["XDG_CACHE_HOME"] = str(root / "xdg")
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
