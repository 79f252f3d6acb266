"""proton-inject: profile regions inside Triton kernels by instrumenting their TTGIR."""

__version__ = "0.1.0"
