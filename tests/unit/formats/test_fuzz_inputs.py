"""Property tests on what users hand the tool: rules tables and raw launches from disk.

Any mix of TOML values as rules gives valid rules (that instrument a kernel or say why not) or
one UserError; any mutation of a real H100 launch (bytes of the buffer, of its gzip stream,
fields of its metadata) gives a valid trace and report or one UserError. The mutators are
``tests/helpers/mutants.py``, shared with ``scripts/fuzz_decoder.py`` (10^5 cases, docs/fuzzing.md).
CI runs a fixed budget of 100 examples per property; for a longer local run:

    PI_FUZZ_EXAMPLES=5000 .venv/bin/python -m pytest -q -s tests/unit/formats/test_fuzz_inputs.py
"""

from __future__ import annotations

import os
import warnings
import zlib
from collections import Counter

import pytest
from helpers import SAMPLES
from helpers.limits import memory_limit
from helpers.mutants import (
    BIN,
    CHANGES,
    CTAS,
    DAMAGE,
    DEEP,
    DMETA,
    META,
    VALUES,
    decode_launch,
    mutated_buffer,
    mutated_metadata,
    write_launch,
)
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from proton_inject.analyze.decode import decode
from proton_inject.analyze.issues import DecodeWarning
from proton_inject.errors import UserError
from proton_inject.formats.raw import load_raw
from proton_inject.formats.rules_file import RULE_KEYS
from proton_inject.instrument.insert import insert_text
from proton_inject.instrument.rules import Rules, rules_from_table

_EXAMPLES = int(os.environ.get("PI_FUZZ_EXAMPLES", "100"))
_SETTINGS = settings(max_examples=_EXAMPLES, deadline=None, derandomize=_EXAMPLES <= 100,
                     database=None,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
OUTCOMES: Counter = Counter()

# --- rules ---------------------------------------------------------------------------------------

# Mostly plausible values per key (so that valid rules reach insert), some of any type.
_GOOD = {"kernel-scope": st.booleans(), "marks": st.booleans(),
         "loops": st.sampled_from(["outer", "iteration", "both"]), "loop-depth": st.integers(1, 3),
         "kernel": st.sampled_from(["add", "^add_kernel$", "nothing"]),
         "op": st.sampled_from(["tt.load", ["tt.store", "arith.*"], "scf.for"]),
         "region": st.sampled_from(["x=vector_add.py:20-24", ["y=vector_add.py:22"]]),
         "source-root": st.sampled_from([".", "examples"])}
_TABLES = st.dictionaries(st.sampled_from([*RULE_KEYS, "lops", "tool"]), VALUES, max_size=2) | \
    st.fixed_dictionaries({}, optional={k: v | VALUES if k == "loops" else v
                                        for k, v in _GOOD.items()})
_ADD = (SAMPLES / "cuda-90/add_kernel.ttgir").read_bytes()


@_SETTINGS
@given(table=_TABLES)
def test_any_rules_table_is_valid_rules_or_one_clear_error(table):
    try:
        rules = rules_from_table(table, "r.toml")
    except UserError as e:
        assert str(e).startswith("r.toml: ") and "\n" not in str(e)
        OUTCOMES["rules: error"] += 1
        return
    assert isinstance(rules, Rules)
    try:
        res = insert_text(_ADD, rules, "a.ttgir")
    except UserError:
        OUTCOMES["rules: valid, insert refused"] += 1
        return
    OUTCOMES["rules: valid, instrumented"] += 1
    assert res.text.count("proton.record start") == res.text.count("proton.record end")


# --- raw launches --------------------------------------------------------------------------------


@_SETTINGS
@given(data=st.data())
def test_any_mutated_real_launch_gives_a_trace_or_one_clear_error(data):
    OUTCOMES["launch: " + decode_launch(*mutated_buffer(data.draw))] += 1


@_SETTINGS
@given(direct=st.booleans(), changes=CHANGES, damage=DAMAGE, gz=st.booleans())
# Classes that crashed once (issue 31), tried on every run whatever the budget:
@example(direct=False, changes=[("direct_loops", 5)], damage=[], gz=True)
@example(direct=False, changes=[("direct_loops", [[1, 2]])], damage=[], gz=False)
@example(direct=False, changes=[("scopes", {"0": "k", "999999999": "x"})], damage=[], gz=True)
@example(direct=True, changes=[("scope_parents", {"1": 999_999_999})], damage=[], gz=True)
@example(direct=True, changes=[("scopes", DEEP)], damage=[], gz=False)
@example(direct=False, changes=[("sm_clock_mhz", 1e308)], damage=[], gz=False)
@example(direct=True, changes=[("clock_bracket", {"after": dict(DMETA["clock_bracket"]["after"],
                                                                mhz=1e308)})], damage=[], gz=False)
def test_any_mutated_launch_metadata_gives_a_trace_or_one_clear_error(direct, changes, damage,
                                                                      gz):
    with memory_limit():
        outcome = decode_launch(*mutated_metadata(direct, changes, damage, gz))
    OUTCOMES["metadata: " + outcome] += 1


def test_largest_grid_and_gzip_bomb_cost_only_what_is_there(tmp_path):
    """The metadata bounds the bytes read; a CUDA-maximum grid must not size the read."""
    meta = {**META, "grid": [2**31 - 1, 65535, 65535]}
    meta.pop("bin")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DecodeWarning)
        d = decode(*load_raw(write_launch(tmp_path, meta, BIN, gz=False)))
    assert len({int(c) for c in d.events.cta}) == CTAS
    assert any("the grid has" in str(w.message) for w in caught)
    # 256 MiB of zeros gzipped (256 KiB on disk) for a 6-CTA launch: only 7 blocks inflate.
    meta["grid"] = [CTAS]
    z = zlib.compressobj(1, zlib.DEFLATED, 31)
    chunk = bytes(2**24)
    bomb = z.compress(BIN) + b"".join(z.compress(chunk) for _ in range(16)) + z.flush()
    raw, m = load_raw(write_launch(tmp_path, meta, bomb, gz=True))
    assert len(raw) == (CTAS + 1) * META["bytes_per_cta"]


@pytest.fixture(scope="module", autouse=True)
def _print_counts():
    yield
    if OUTCOMES:
        print("\nfuzz outcomes:", dict(sorted(OUTCOMES.items())))
