"""Decided once: how the lowering lowered a kernel travels from its compile to the sink."""

from __future__ import annotations

from helpers.compile_side import compile_side, jit_compile

from proton_inject.collect.session import Session
from proton_inject.instrument.rules import Rules
from proton_inject.lower import direct
from proton_inject.lower.options import LoweringOptions


def test_the_lowering_decision_is_carried_from_the_compile(tmp_path):
    """Decided once: the options the lowering resolved (and, where it lowered the records
    itself, its tables) ride on the compile's record; the sink reads them there."""
    for buffer_type in ("shared", "direct"):
        session = Session(Rules(kernel_scope=True), tmp_path / buffer_type,
                          LoweringOptions(buffer_type=buffer_type))
        session.builds.enabled = False
        with compile_side(session):
            ck = jit_compile()
        entry = session.hook.compiled[ck.metadata.hash]
        # The regions' kinds ride along too (from their manifest origin), for the launch metadata.
        assert set(entry.scope_kinds.values()) == {"kernel"}, entry.scope_kinds
        assert entry.lowered is not None and entry.lowered.options.buffer_type == buffer_type
        if buffer_type == "direct":
            text = (tmp_path / buffer_type / "ir" / entry.file).read_text()
            o = entry.lowered.options
            assert entry.lowered.direct_records == direct.record_table(text, o.buffer_size, o.sample_iterations)
        else:
            assert entry.lowered.direct_records is None
