"""proton-inject: profile regions inside Triton kernels by instrumenting their TTGIR."""

__version__ = "0.1.0"

# `proton_inject.profile(rules=..., out=...)` without importing Triton at package import.
_LAZY = {"profile": "compile_hook", "profile_program": "compile_hook", "CompileSession": "compile_hook"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
