"""Plain twins (collect/plain_twins.py): a launch not kept runs the program's own build.

No GPU here: the twin is compiled for an H100 down to cubin under a session's compile side,
and the launchers (C and Python) are driven with a stand-in for Triton's entry point that
records what it was given. The GPU test (test_gpu_launch_path.py) launches twins for real.
"""

from __future__ import annotations

import pytest
from helpers.compile_side import compile_side, instrumented, jit_compile, plain_reference, session_of

from proton_inject.collect import plain_twins
from proton_inject.collect.plain_twins import compile_twin, twin_options


@pytest.mark.parametrize("kind", ["profile", "run"])
def test_the_twin_is_the_programs_own_build_from_its_cache(kind, tmp_path):
    ref = plain_reference(tmp_path)
    session = session_of(kind, tmp_path)
    with compile_side(session):
        inst = jit_compile()
        twin = compile_twin(inst, session.autotune)
        assert instrumented(inst) and not instrumented(twin)
        assert twin.asm["cubin"] == ref.asm["cubin"]  # bit for bit
        # the same cache key as the program's own compile (the options, read back from JSON
        # metadata, hash alike), in the program's own cache: a hit after a plain run
        assert twin.hash == ref.hash
        for k in plain_twins.SAME:
            assert getattr(twin.metadata, k) == getattr(inst.metadata, k)
        assert instrumented(jit_compile())  # the session's compile side as it was
    if kind == "profile":  # the twin is not one of the session's instrumented kernels
        assert all(c.instrumented for c in session.hook.compiled.values())


def test_twin_options_take_the_programs_mode_and_tuples(tmp_path):
    ck = plain_reference(tmp_path)
    opts = twin_options(ck.metadata, "")
    assert opts["instrumentation_mode"] == "" and opts["num_warps"] == ck.metadata.num_warps
    assert all(not isinstance(v, list) for v in opts.values())
    assert isinstance(opts["supported_fp8_dtypes"], tuple)


def test_a_twin_whose_launch_options_differ_is_refused(tmp_path, monkeypatch):
    session = session_of("profile", tmp_path)
    with compile_side(session):
        inst = jit_compile()
        md = inst.metadata._replace(num_warps=inst.metadata.num_warps * 2)
        monkeypatch.setattr(plain_twins, "twin_options", lambda m, mode: twin_options(inst.metadata, mode))

        class Other:  # the build as if it had been compiled with other warps
            src, metadata = inst.src, md

        with pytest.raises(ValueError, match="num_warps"):
            compile_twin(Other, session.autotune)


def test_a_kernel_without_a_twin_keeps_its_launches_and_is_noted_once(tmp_path):
    from types import SimpleNamespace

    from proton_inject.collect.session import Session
    from proton_inject.instrument.rules import Rules

    session = Session(out=tmp_path / "t", source=Rules(loops="both"))
    path = session.launch_path
    path.capturing, path._capturing_here = 0, lambda: False  # (torch's CUDA query; no GPU here)
    inst = plain_reference(tmp_path)
    broken = SimpleNamespace(src=None, metadata=inst.metadata)  # its source cannot compile
    w = SimpleNamespace(plain_fn=None, plain_meta=None)
    for _ in range(2):
        path._twin(broken, w, "tuned_kernel")
    notes = [m for m in session.result.messages if "no plain twin" in m]
    assert w.plain_fn is None and len(notes) == 1 and "kernel tuned_kernel" in notes[0]
    path._capturing_here = lambda: True  # a capture under way: no twin is loaded, nothing noted
    path._no_twin.clear()
    path._twin(broken, w, "tuned_kernel")
    assert len([m for m in session.result.messages if "no plain twin" in m]) == 1
