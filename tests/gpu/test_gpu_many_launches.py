"""10,000 instrumented launches: device memory stays under --max-pending-mb, host memory flat.

Each launch keeps a 64 KiB profile buffer (8 CTAs x 4 warps), 640 MiB over the run: held
until the end, it would show in either peak. The program runs in a subprocess per case
(plain, 1,000 and 10,000 profiled launches) that prints its peaks; traces are not written
(decoding 10,000 launches is the report's business, one launch at a time).
"""

from __future__ import annotations

import json
import textwrap

import pytest
from helpers import requires_gpu
from helpers.cli import run_cli, run_python

pytestmark = [pytest.mark.gpu, requires_gpu]

PENDING_MB = 2

PROGRAM = textwrap.dedent('''
    import sys

    import torch
    import triton
    import triton.language as tl


    @triton.jit
    def bump(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=m) + 1.0, mask=m)


    x = torch.zeros(8 * 512, device="cuda")
    for _ in range(int(sys.argv[1])):
        bump[(8,)](x, x.numel(), BLOCK=512, num_warps=4)
    torch.cuda.synchronize()
    assert float(x.min()) == float(x.max()) == float(sys.argv[1])
''')

DRIVER = textwrap.dedent('''
    import json, resource, runpy, sys

    import torch

    mode, inst, out, n, pending = sys.argv[1:6]
    result = None
    if mode == "plain":
        sys.argv = ["prog.py", n]
        runpy.run_path("prog.py", run_name="__main__")
    else:
        from proton_inject.lower.options import LoweringOptions
        from proton_inject.collect.session import Session, run_in_session

        # Every warp, Proton's buffer: 8 KiB per CTA, the sizes this test's limits are set for.
        options = LoweringOptions(warps="all", auto_size=False, buffer_type="shared")
        session = Session(inst, out, options, max_pending_mb=float(pending), keep="all")  # inst: a tree
        session.gz = False
        result = run_in_session(session, ["prog.py", n], "run")
    print(json.dumps({
        "device_peak": torch.cuda.max_memory_allocated(),
        "host_peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "launches": None if result is None else len(result.launches),
        "exit_code": None if result is None else result.exit_code,
        "messages": [] if result is None else result.messages,
    }))
''')


def test_ten_thousand_launches_stay_bounded(tmp_path):
    (tmp_path / "prog.py").write_text(PROGRAM)
    (tmp_path / "driver.py").write_text(DRIVER)
    run_cli(["dump", "-o", "dump", "--", "python", "prog.py", "1"], cwd=tmp_path, code=0, timeout=900)
    run_cli(["insert", "dump", "-o", "inst", "--kernel-scope"], cwd=tmp_path, code=0, timeout=900)

    def measure(mode: str, n: int) -> dict:
        p = run_python(["driver.py", mode, "inst", f"out{n}", str(n), str(PENDING_MB)], cwd=tmp_path,
                       code=0, timeout=900)
        return json.loads(p.stdout.strip().splitlines()[-1])

    plain = measure("plain", 10_000)
    small = measure("run", 1_000)
    big = measure("run", 10_000)
    mib = 2**20
    print(f"\npeaks (MiB)     device  host\n"
          f"plain 10,000    {plain['device_peak'] / mib:6.1f} {plain['host_peak'] / mib:6.0f}\n"
          f"run    1,000    {small['device_peak'] / mib:6.1f} {small['host_peak'] / mib:6.0f}\n"
          f"run   10,000    {big['device_peak'] / mib:6.1f} {big['host_peak'] / mib:6.0f}\n"
          f"--max-pending-mb {PENDING_MB}; buffers written: 10,000 x 64 KiB = 640 MiB")
    assert big["exit_code"] == 0 and big["launches"] == 10_000, big["messages"]
    raw = sorted((tmp_path / "out10000" / "raw").glob("*.bin"))
    assert len(raw) == 10_000
    assert {p.stat().st_size for p in raw[::97]} == {raw[0].stat().st_size}
    # Device: the profiled run holds at most --max-pending-mb of buffers in flight, plus one
    # buffer and the 1 MiB scratch for launches not kept.
    extra = big["device_peak"] - plain["device_peak"]
    assert extra <= (PENDING_MB + 2) * mib, extra / mib
    # Host: ten times the launches costs about the same memory (640 MiB if buffers piled up).
    assert big["host_peak"] - small["host_peak"] < 128 * mib
    # The kept buffers decode: the first, a middle and the last launch.
    from proton_inject.analyze.decode import decode
    from proton_inject.formats.raw import load_raw

    for p in (raw[0], raw[len(raw) // 2], raw[-1]):
        d = decode(*load_raw(p))
        assert len(d.events) == 8 * 4  # one kernel-scope region per warp of every CTA
