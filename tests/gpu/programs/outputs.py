"""What the library programs print: one ``name sha256`` line per output, on the real stdout.

Each program runs as ``python tests/gpu/programs/X.py``, so this file, beside it, is importable.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable
from typing import IO

import torch


def digest(obj: object) -> str:
    """sha256 of a (nested tuple of) tensor(s): dtype, shape and raw bytes, moved to the CPU."""
    h = hashlib.sha256()

    def feed(o: object) -> None:
        if isinstance(o, torch.Tensor):
            t = o.detach().cpu().contiguous()
            h.update(f"{t.dtype}{tuple(t.shape)}".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
        elif isinstance(o, (tuple, list)):
            for x in o:
                feed(x)
        else:
            h.update(repr(o).encode())

    feed(obj)
    return h.hexdigest()


def emitter(out: IO[str], prog: str) -> Callable[[str, Callable[[], object]], None]:
    """``emit(name, fn)``: run ``fn`` and print ``name digest`` (or ``name error:Type``) to
    ``out``; one step never stops the others (its error goes to stderr, named by ``prog``)."""

    def emit(name: str, fn: Callable[[], object]) -> None:
        try:
            res = fn()
            torch.cuda.synchronize()
            line = f"{name} {digest(res)}"
        except Exception as e:  # one step never stops the others
            print(f"{prog}: {name}: {type(e).__name__}: {str(e)[:300]}", file=sys.stderr)
            line = f"{name} error:{type(e).__name__}"
        print(line, file=out, flush=True)

    return emit
