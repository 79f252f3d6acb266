"""A cap on the address space of the test process while a hostile input is handled, so that a
reader which would exhaust memory fails the test (a MemoryError) instead of the machine."""

from __future__ import annotations

import resource
from collections.abc import Iterator
from contextlib import contextmanager


def _address_space() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


@contextmanager
def memory_limit(extra: int = 2 * 2**30) -> Iterator[None]:
    """At most ``extra`` bytes more address space than the process has now (Linux)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    now = _address_space()
    cap = now + extra
    if not now or (hard != resource.RLIM_INFINITY and cap > hard):
        yield
        return
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
