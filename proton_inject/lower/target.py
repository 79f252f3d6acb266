"""Compile targets as the CLI spells them (``cuda:90``, ``hip:gfx942``).
"""

from __future__ import annotations

import re

from proton_inject.errors import UserError

_TARGET_FORMS = "cuda:<sm> (e.g. cuda:80, cuda:90, cuda:100) or hip:<gfx arch> (e.g. hip:gfx942)"
# Compute capabilities of NVIDIA GPUs that Triton 3.6's backend compiles for (Turing on): a
# typo such as cuda:99 would otherwise compile for a GPU that does not exist, or skip every file.
CUDA_ARCHS = (75, 80, 86, 87, 89, 90, 100, 101, 103, 110, 120, 121)


def parse_target(text: str):
    """``"cuda:90"`` -> ``GPUTarget("cuda", 90, 32)``; ``"hip:gfx942"`` -> warp size 64."""
    from triton.backends.compiler import GPUTarget

    s = text.strip() if isinstance(text, str) else ""
    m = re.fullmatch(r"cuda:(?:sm_?)?(\d+)", s)
    if m:
        arch = int(m.group(1))
        if arch < 75:
            raise UserError(f"--target {text!r}: Triton 3.6 compiles for cuda:75 and newer")
        if arch not in CUDA_ARCHS:
            raise UserError(f"--target {text!r}: unknown target: no NVIDIA GPU has compute "
                            f"capability {arch // 10}.{arch % 10}; known: "
                            f"{', '.join(f'cuda:{a}' for a in CUDA_ARCHS)}")
        return GPUTarget("cuda", arch, 32)
    m = re.fullmatch(r"hip:(gfx[0-9a-f]+)", s)
    if m:
        return GPUTarget("hip", m.group(1), 64)
    raise UserError(f"--target: unknown target {text!r}: expected {_TARGET_FORMS}")


def format_target(target) -> str:
    """``GPUTarget("cuda", 90, 32)`` -> ``"cuda:90"`` (the form ``parse_target`` reads)."""
    return f"{target.backend}:{target.arch}"
