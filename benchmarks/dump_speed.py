"""Wall time of `proton-inject dump -- python prog.py` against the program alone, and what
Triton's own IR dump (TRITON_KERNEL_DUMP=1, which the dump used before 2026-11-29) costs a
compile. Needs no GPU: the program compiles 6 configurations of a small matmul for cuda:90.

Each round, in turn, each a fresh process: the program with an empty Triton cache, then with
TRITON_KERNEL_DUMP=1 and an empty cache (Triton's IR dump: it also disassembles every cubin);
`dump` with an empty cache, `dump` again on that cache (warm), the program alone on it (warm).

    PYTHONPATH=. python benchmarks/dump_speed.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = '''
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource


@triton.jit
def mm(a, b, c, K, N, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), tl.float32)
    for k in range(0, K, BK):
        acc += tl.dot(tl.load(a + rm[:, None] * K + (k + rk)[None, :]),
                      tl.load(b + (k + rk)[:, None] * N + rn[None, :]))
    tl.store(c + rm[:, None] * N + rn[None, :], acc)


sig = {"a": "*fp16", "b": "*fp16", "c": "*fp32", "K": "i32", "N": "i32",
       "BM": "constexpr", "BN": "constexpr", "BK": "constexpr"}
for bm in (32, 64, 128):
    for bk in (32, 64):
        triton.compile(ASTSource(mm, sig, constexprs={"BM": bm, "BN": 64, "BK": bk}),
                       target=GPUTarget("cuda", 90, 32))
print("compiled 6")
'''


def timed(cmd: list[str], env: dict[str, str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, capture_output=True)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    rounds = ap.parse_args().rounds
    tmp = Path(tempfile.mkdtemp(prefix="pi-dump-speed-"))
    prog = tmp / "prog.py"
    prog.write_text(PROGRAM)
    base = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    dump = [sys.executable, "-m", "proton_inject.cli", "dump", "--", "python", str(prog)]
    cases: dict[str, list[float]] = {k: [] for k in (
        "program, cold cache", "program, cold cache, TRITON_KERNEL_DUMP=1", "dump, cold cache",
        "dump, warm cache", "program, warm cache")}
    for r in range(rounds):
        cold = {**base, "TRITON_CACHE_DIR": str(tmp / f"plain{r}")}
        cases["program, cold cache"].append(timed([sys.executable, str(prog)], cold))
        ir_dump = {**base, "TRITON_CACHE_DIR": str(tmp / f"irdump{r}"), "TRITON_KERNEL_DUMP": "1",
                   "TRITON_DUMP_DIR": str(tmp / f"irdump{r}-out")}
        cases["program, cold cache, TRITON_KERNEL_DUMP=1"].append(timed([sys.executable, str(prog)], ir_dump))
        env = {**base, "TRITON_CACHE_DIR": str(tmp / f"dump{r}")}
        cases["dump, cold cache"].append(timed([*dump[:4], "-o", str(tmp / f"d{r}a"), *dump[4:]], env))
        cases["dump, warm cache"].append(timed([*dump[:4], "-o", str(tmp / f"d{r}b"), *dump[4:]], env))
        cases["program, warm cache"].append(timed([sys.executable, str(prog)], env))
    ref = statistics.median(cases["program, cold cache"])
    print(f"{rounds} rounds, each case a fresh process; x = median over the cold program's median")
    for name, v in cases.items():
        print(f"  {name:<42} {statistics.median(v):6.2f} s ({min(v):.2f}..{max(v):.2f})  "
              f"x{statistics.median(v) / ref:.2f}")


if __name__ == "__main__":
    main()
