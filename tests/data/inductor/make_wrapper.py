"""Makes wrapper-torch2.13.py.txt: the wrapper module (output code) Inductor writes for
``Block`` below, with its comments on each kernel's source nodes and ATen ops.

Run on the CPU machine (no GPU; torch 2.13.0+cpu, Triton 3.6.0):

    TORCHINDUCTOR_CACHE_DIR=/tmp/ind/cache TORCHINDUCTOR_COMPILE_THREADS=1 \
        python tests/data/inductor/make_wrapper.py

Inductor generates Triton kernels for CPU tensors here (``cpu_backend = "triton"``); the only
stand-in is Triton's driver, asked for the target (cuda:90, as the CPU compile checks use):
Triton has no CPU backend, so compiling the kernels then fails, after the wrapper is written.
The comments come from ``torch._inductor.utils.get_kernel_metadata``, the same for any device
(torch 2.11's writes the same lines). The file is copied from the cache as it is.
"""

import glob
import os
import shutil

import torch
from triton.backends.compiler import GPUTarget
from triton.runtime import driver

torch._inductor.config.cpu_backend = "triton"


class _TargetOnly:
    def get_current_target(self):
        return GPUTarget("cuda", 90, 32)


driver.set_active(_TargetOnly())


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(32, 32)

    def forward(self, x):
        y = torch.softmax(x * 0.5, dim=-1)
        return self.lin(y) + torch.nn.functional.gelu(x)


try:
    torch.compile(Block())(torch.randn(64, 32))
except Exception as e:  # (the kernels' compile, after the wrapper was written)
    print("compile stopped as expected:", str(e).splitlines()[0][:200])
[wrapper] = [p for p in glob.glob(os.environ["TORCHINDUCTOR_CACHE_DIR"] + "/*/*.py")
             if "def call(self, args)" in open(p).read()]
shutil.copyfile(wrapper, os.path.join(os.path.dirname(__file__), "wrapper-torch2.13.py.txt"))
print("copied", wrapper)
