"""On a CUDA GPU: run every example against torch, then check the AOT dump against the JIT.

    PYTHONPATH=. python examples/check_gpu.py

1. Each example's ``main()`` (in its own process) prints its max error.
2. For kernels whose SAMPLE_SPECS match a real launch, the directory Triton's own
   ``TRITON_KERNEL_DUMP`` creates for the launch must be the hash ``compile_aot`` computed.
3. A launch with ``TRITON_KERNEL_OVERRIDE`` pointed at an AOT dump must use the dumped file.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ["vector_add", "softmax", "layernorm", "matmul", "persistent_matmul", "attention",
            "control_flow", "atomics"]

# Launches that match SAMPLE_SPECS entries: (example, spec indexes, python code to run).
LAUNCHES = {
    "vector_add": ([0], "x = torch.randn(2**20, device='cuda'); m.add(x, x)"),
    "matmul": ([0, 1], "a = torch.randn(1024, 768, device='cuda', dtype=torch.float16);"
                       "b = torch.randn(768, 1536, device='cuda', dtype=torch.float16);"
                       "m.matmul(a, b); m.matmul(a, b, 64, 64, 32, 4, 4)"),
    "attention": ([0, 2], "q = torch.randn(2, 4, 1024, 64, device='cuda', dtype=torch.float16);"
                          "m.attention(q, q, q, 0.125); m.attention(q, q, q, 0.125, True)"),
}


def _run(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, **env},
                          capture_output=True, text=True, timeout=300)


def main() -> int:
    import torch

    from proton_inject.dump.aot import compile_aot, load_module, write_dump

    failures = 0
    for name in EXAMPLES:
        p = _run(f"import examples.{name} as m; m.main()", {})
        out = (p.stdout + (p.stderr[-2000:] if p.returncode else "")).strip()
        print(out if p.returncode == 0 else f"{name}: FAILED (rc {p.returncode})\n{out}")
        failures += p.returncode != 0

    major, minor = torch.cuda.get_device_capability()
    target = f"cuda:{major * 10 + minor}"
    for name, (idxs, code) in LAUNCHES.items():
        path = ROOT / "examples" / f"{name}.py"
        specs = [load_module(path).SAMPLE_SPECS[i] for i in idxs]
        results = [compile_aot(path, s["kernel"], s["signature"], s["constexprs"], target,
                               s["num_warps"], s["num_stages"]) for s in specs]
        with tempfile.TemporaryDirectory() as tmp:
            env = {"TRITON_CACHE_DIR": f"{tmp}/cache", "TRITON_KERNEL_DUMP": "1",
                   "TRITON_DUMP_DIR": f"{tmp}/dump"}
            p = _run(f"import torch, examples.{name} as m; {code}", env)
            dumped = sorted(os.listdir(f"{tmp}/dump")) if os.path.isdir(f"{tmp}/dump") else []
        ok = p.returncode == 0 and all(r.hash in dumped for r in results)
        failures += not ok
        print(f"hash {name}: {'OK' if ok else 'MISMATCH'} aot={[r.hash[:12] for r in results]} "
              f"jit_dump={[d[:12] for d in dumped]}")
        if p.returncode:
            print(p.stderr[-2000:])

        with tempfile.TemporaryDirectory() as tmp:
            write_dump(results, f"{tmp}/ovr")
            env = {"TRITON_CACHE_DIR": f"{tmp}/cache", "TRITON_KERNEL_OVERRIDE": "1",
                   "TRITON_OVERRIDE_DIR": f"{tmp}/ovr"}
            p = _run(f"import torch, examples.{name} as m; {code}; torch.cuda.synchronize()", env)
        used = p.stdout.count("Overriding kernel with file")
        ok = p.returncode == 0 and used >= len(results)
        failures += not ok
        print(f"override {name}: {'OK' if ok else 'NOT USED'} ({used} ttgir overrides taken)")
        if p.returncode:
            print(p.stderr[-2000:])
    print(f"{failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
