"""insert then strip gives the input back byte for byte, for any input the parser accepts:
the samples and mutants of them (lines deleted, duplicated, moved; comments and blank lines
added; stray tokens, cuts: ``tests/helpers/mutants.py``, shared with ``scripts/fuzz_parser.py``). CI runs
a fixed small budget; for a longer local run:

    PI_ROUNDTRIP_EXAMPLES=20000 .venv/bin/python -m pytest -q tests/unit/instrument/test_roundtrip.py

(2,000 examples passed in about 2 minutes on the 2-core VM; CI runs 100, derandomized.)
"""

from __future__ import annotations

import os

import pytest
from helpers import SAMPLES
from helpers.mutants import EARLY_RETURN, ROUNDTRIP_RULES, TTGIR_FILES, insert_then_strip, mutate_lines
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proton_inject.errors import UserError
from proton_inject.instrument.insert import insert_text
from proton_inject.instrument.rules import Rules
from proton_inject.instrument.strip import strip_text

_EXAMPLES = int(os.environ.get("PI_ROUNDTRIP_EXAMPLES", "100"))


@settings(max_examples=_EXAMPLES, deadline=None, derandomize=_EXAMPLES <= 100,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_insert_then_strip_is_the_identity(data):
    path = data.draw(st.sampled_from(TTGIR_FILES))
    # refused (unparsable, already instrumented, nothing to place) or strip gives it back
    insert_then_strip(b"".join(mutate_lines(path.read_bytes().splitlines(keepends=True),
                                            data.draw)))


# Kernels with an early return: kernel scope rewrites each tt.return into a branch to one exit
# block, which strip must undo.


@settings(max_examples=_EXAMPLES, deadline=None, derandomize=_EXAMPLES <= 100,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_insert_then_strip_is_the_identity_with_early_returns(data):
    path = data.draw(st.sampled_from(EARLY_RETURN))
    raw = b"".join(mutate_lines(path.read_bytes().splitlines(keepends=True), data.draw))
    insert_then_strip(raw, Rules(kernel_scope=True, loops=data.draw(st.sampled_from([None, "both"])),
                                 marks=False, sample_ctas=data.draw(st.sampled_from([1, 3]))))


def test_early_return_samples_get_an_exit_block():
    for path in EARLY_RETURN:
        raw = path.read_bytes()
        res = insert_text(raw, ROUNDTRIP_RULES, path.name)
        assert "  ^pi_exit:\n" in res.text, path
        assert strip_text(res.text, path.name).encode("latin-1") == raw


def _ws_sample() -> bytes:
    return (SAMPLES / "cuda-100/attn_fwd_ws_kernel.ttgir").read_bytes()


def test_record_before_a_partition_line_strips_to_that_line_only():
    raw = _ws_sample()
    at = raw.index(b"    partition0(")
    inst = raw[:at] + b'    proton.record end "x"\n' + raw[at:]
    assert strip_text(inst, "ws.ttgir").encode("latin-1") == raw


@pytest.mark.parametrize("more,words", [
    (b' {note = "mine"}', "holds more than a record"),
    # A second op on the record's line: the parser refuses it (MLIR never prints two on a line).
    (b" %9 = arith.constant 0 : i32", "stands inside the text of another op"),
])
def test_a_record_line_holding_more_is_refused_not_cut(more, words):
    raw = _ws_sample()
    at = raw.index(b"    ttg.warp_yield")
    inst = raw[:at] + b'    proton.record end "x"' + more + b"\n" + raw[at:]
    with pytest.raises(UserError, match=words):
        strip_text(inst, "ws.ttgir")


def test_loop_without_a_region_is_a_clear_error():
    raw = (SAMPLES / "cuda-90/add_kernel.ttgir").read_text()
    start = raw.index("scf.for")
    line_end = raw.index("\n", start)
    close = raw.index("    } loc(", line_end)
    broken = raw[:line_end].rstrip(" {") + raw[raw.index("\n", close):]
    with pytest.raises(UserError, match="scf.for has no body region"):
        insert_text(broken, Rules(loops="iteration", marks=False), "m.ttgir")
