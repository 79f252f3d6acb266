"""Property tests on what users hand the tool: rules tables and raw launches from disk.

Any mix of TOML values as rules gives valid rules (that instrument a kernel or say why not) or
one UserError; any mutation of a real H100 launch (bytes of the buffer, of its gzip stream,
fields of its metadata) gives a valid trace and report or one UserError. CI runs a fixed
budget of 100 examples per property; for a longer local run:

    PI_FUZZ_EXAMPLES=5000 .venv/bin/python -m pytest -q -s tests/unit/formats/test_fuzz_inputs.py
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import tempfile
import warnings
import zlib
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from helpers import DATA, SAMPLES
from helpers.limits import memory_limit
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from proton_inject.analyze.decode import decode
from proton_inject.analyze.issues import DecodeWarning
from proton_inject.analyze.summary import LaunchData, summarize
from proton_inject.analyze.trace import trace_bytes
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

_SCALARS = st.one_of(
    st.booleans(), st.integers(-3, 5), st.integers(), st.floats(allow_nan=True),
    st.sampled_from(["", "outer", "iteration", "both", "false", "no", "tt.load", "scf.*", "(",
                     "add_kernel", "x=vector_add.py:20-24", "x=a.py:9-3", "oops", "."]),
    st.text(max_size=12))
_VALUES = st.recursive(_SCALARS, lambda c: st.lists(c, max_size=3) |
                       st.dictionaries(st.text(max_size=5), c, max_size=2), max_leaves=6)
# Mostly plausible values per key (so that valid rules reach insert), some of any type.
_GOOD = {"kernel-scope": st.booleans(), "marks": st.booleans(),
         "loops": st.sampled_from(["outer", "iteration", "both"]), "loop-depth": st.integers(1, 3),
         "kernel": st.sampled_from(["add", "^add_kernel$", "nothing"]),
         "op": st.sampled_from(["tt.load", ["tt.store", "arith.*"], "scf.for"]),
         "region": st.sampled_from(["x=vector_add.py:20-24", ["y=vector_add.py:22"]]),
         "source-root": st.sampled_from([".", "examples"])}
_TABLES = st.dictionaries(st.sampled_from([*RULE_KEYS, "lops", "tool"]), _VALUES, max_size=2) | \
    st.fixed_dictionaries({}, optional={k: v | _VALUES if k == "loops" else v
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

_SRC = DATA / "h100-shortlaunch"
_META = json.loads((_SRC / "00000-matmul_kernel.json").read_text())
_CTAS = 6  # a slice of the real launch keeps each example fast
_BIN = gzip.decompress((_SRC / "00000-matmul_kernel.bin.gz").read_bytes())[
    : _CTAS * _META["bytes_per_cta"]]
_FIELDS = ["grid", "num_warps", "bytes_per_cta", "buffer_size", "scopes", "scope_parents",
           "sampled_warps", "clock_bits", "launch", "bin", "config", "sm_clock_mhz", "kernel"]
_FIELD_VALUES = st.one_of(_VALUES, st.sampled_from(
    [[6], [6, 1, 1], [0], [-1], [2**40], [2**31 - 1, 65535, 65535], 4, 8, 9, 32, 10**9, 1e9, 8320, 8192, 0, 4096, None,
     {"0": "k"}, {"1": 0}, [0, 1], [7], [9], 32, 64, 48, "00000-matmul_kernel.bin",
     "../x.bin", "x.bin.gz", 1755.0, float("nan")]))


def _launch(tmp: Path, meta: dict, data: bytes, gz: bool) -> Path:
    name = "00000-matmul_kernel.bin" + (".gz" if gz else "")
    (tmp / name).write_bytes(data)
    meta = {**meta, "bin": meta.get("bin", name)}
    (tmp / "00000-matmul_kernel.json").write_text(json.dumps(meta))
    return tmp / "00000-matmul_kernel.json"


def _check_trace(d) -> None:
    doc = json.loads(trace_bytes([d]))
    for ev in doc["traceEvents"]:
        if ev.get("ph") == "X":
            assert np.isfinite(ev["ts"]) and ev["dur"] >= 0
    summarize([LaunchData.from_decoded(d)])


@_SETTINGS
@given(data=st.data())
def test_any_mutated_real_launch_gives_a_trace_or_one_clear_error(data):
    meta = {**_META, "grid": [_CTAS, 1, 1]}
    meta.pop("bin")
    fields = st.lists(st.sampled_from(_FIELDS), max_size=2) if data.draw(st.integers(0, 3)) == 0 \
        else st.just([])
    for key in data.draw(fields):
        meta[key] = data.draw(_FIELD_VALUES)
    buf = bytearray(_BIN)
    for _ in range(data.draw(st.integers(0, 4))):
        kind = data.draw(st.sampled_from(["byte", "word", "zeros", "cut", "repeat"]))
        pos = data.draw(st.integers(0, max(0, len(buf) - 1)))
        if kind == "byte" and buf:
            buf[pos] = data.draw(st.integers(0, 255))
        elif kind == "word" and len(buf) >= pos + 4:
            buf[pos & ~3: (pos & ~3) + 4] = data.draw(st.binary(min_size=4, max_size=4))
        elif kind == "zeros":
            n = data.draw(st.integers(1, 9000))
            buf[pos: pos + n] = bytes(len(buf[pos: pos + n]))
        elif kind == "cut":
            del buf[pos:]
        else:
            buf += buf[: data.draw(st.integers(1, 9000))]
    gz = data.draw(st.booleans())
    blob = gzip.compress(bytes(buf), compresslevel=1, mtime=0) if gz else bytes(buf)
    if gz and data.draw(st.integers(0, 3)) == 0:  # damage the gzip stream itself
        blob = bytearray(blob)
        i = data.draw(st.integers(0, len(blob) - 1))
        blob[i] ^= data.draw(st.integers(1, 255))
        blob = bytes(blob[: data.draw(st.integers(0, len(blob)))])
    tmp = Path(tempfile.mkdtemp(prefix="pi-fuzz-"))
    try:
        path = _launch(tmp, meta, blob, gz)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DecodeWarning)
            try:
                raw, m = load_raw(path)
                d = decode(raw, m)
            except UserError as e:
                assert str(e)
                OUTCOMES["launch: error"] += 1
                return
        _check_trace(d)
        OUTCOMES["launch: decoded"] += 1
    finally:
        shutil.rmtree(tmp)


# Metadata: every field of a raw launch's .json, of a shared-memory launch and of a launch
# lowered directly (with loops), set to plausible, wrong-typed, out-of-range or deeply nested
# values; with or without damage to its buffer.
_DIRECT = DATA / "h100-direct-loops"
_DMETA = json.loads((_DIRECT / "00000-layernorm_fwd_kernel.json").read_text())
_DCTAS = 6
_DBIN = gzip.decompress((_DIRECT / "00000-layernorm_fwd_kernel.bin.gz").read_bytes())[
    : _DCTAS * _DMETA["bytes_per_cta"]]
_META_FIELDS = sorted(set(_META) | set(_DMETA) | {"format", "version"})
_IDS = st.sampled_from(["0", "1", "6", "255", "256", "999999999", "-1", "x", "01", "", "1e3"])
_ID_MAPS = st.dictionaries(_IDS, st.one_of(st.text(max_size=4), st.integers(-2, 2**40),
                                           st.none()), max_size=3)
_TABLES_2D = st.one_of(st.lists(st.lists(st.integers(-2, 2**32), max_size=4), max_size=4),
                       st.sampled_from([[[5, 2]], [[5, 2, 3]], [[0, 1]], [[5, 2]] * 4,
                                        [[2**21, 2]], [[5, 2000]], [[0, 0], [0, 1]],
                                        [[255, 0], [255, 1]], [[0, 0, 7]], [[0, 2]],
                                        [[300, 0]], [["0", 0]], [[0]], [[0, 0, 0, 0]]]))
_EDGE = st.sampled_from([None, True, -5, 0, 2**63, -2**63, 2**64, 999_999_999, 1e308, "x" * 300,
                         "../../etc/passwd", [1, 2], {"a": 1}, [[[[0]]]]])
# Per field, values of its own shape (some out of range) besides any value of any type.
_PER_FIELD = {
    "scopes": _ID_MAPS, "scope_parents": _ID_MAPS, "scope_locs": _ID_MAPS,
    "direct_records": _TABLES_2D, "direct_loops": _TABLES_2D,
    "buffer_type": st.sampled_from(["direct", "shared", "global", "tex"]),
    "granularity": st.sampled_from(["warp", "cta", "warpgroup"]),
    "format": st.sampled_from(["proton-inject-raw", "other"]),
    "clock_bracket": st.sampled_from([{"missing": "why"}, {"before": None},
                                      {"before": {"mhz": 1}}, {"before": None, "x": 1},
                                      {"after": dict(_DMETA["clock_bracket"]["after"], t0=-1)}]),
    "timer_ref_ns": st.integers(-1, 2**64), "sample_ctas": st.integers(-1, 2**32),
    "rank": st.integers(-1, 2**21), "record_cost_cycles": st.floats(-1, 1e5),
}


class _Mark:
    """A stand-in argument (hypothesis prints every argument: a 500-deep list would not)."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


_DROP = _Mark("DROP")  # the field is left out
_DEEP = _Mark("DEEP")  # the field is a list nested 500 deep


_CHANGE = st.sampled_from(_META_FIELDS).flatmap(lambda key: st.tuples(st.just(key), st.one_of(
    st.just(_DROP), st.just(_DEEP), _PER_FIELD.get(key, st.nothing()), _EDGE, _FIELD_VALUES)))
_WORD = st.tuples(st.integers(0, 2**20), st.binary(min_size=4, max_size=4))


@_SETTINGS
@given(direct=st.booleans(), changes=st.lists(_CHANGE, min_size=1, max_size=3),
       damage=st.lists(_WORD, max_size=2), gz=st.booleans())
# Classes that crashed once (issue 31), tried on every run whatever the budget:
@example(direct=False, changes=[("direct_loops", 5)], damage=[], gz=True)
@example(direct=False, changes=[("direct_loops", [[1, 2]])], damage=[], gz=False)
@example(direct=False, changes=[("scopes", {"0": "k", "999999999": "x"})], damage=[], gz=True)
@example(direct=True, changes=[("scope_parents", {"1": 999_999_999})], damage=[], gz=True)
@example(direct=True, changes=[("scopes", _DEEP)], damage=[], gz=False)
@example(direct=False, changes=[("sm_clock_mhz", 1e308)], damage=[], gz=False)
@example(direct=True, changes=[("clock_bracket", {"after": dict(_DMETA["clock_bracket"]["after"],
                                                                mhz=1e308)})], damage=[], gz=False)
def test_any_mutated_launch_metadata_gives_a_trace_or_one_clear_error(direct, changes, damage,
                                                                      gz):
    meta = {**(_DMETA if direct else _META), "grid": [_DCTAS if direct else _CTAS, 1, 1]}
    meta.pop("bin")
    for key, value in changes:
        if value is _DROP:
            meta.pop(key, None)
        else:
            meta[key] = json.loads("[" * 500 + "]" * 500) if value is _DEEP else value
    buf = bytearray(_DBIN if direct else _BIN)
    for pos, word in damage:
        pos = pos % (len(buf) - 4) & ~3
        buf[pos: pos + 4] = word
    blob = gzip.compress(bytes(buf), compresslevel=1, mtime=0) if gz else bytes(buf)
    tmp = Path(tempfile.mkdtemp(prefix="pi-fuzz-"))
    try:
        path = _launch(tmp, meta, blob, gz)
        with warnings.catch_warnings(), memory_limit():
            warnings.simplefilter("ignore", DecodeWarning)
            try:
                raw, m = load_raw(path)
                d = decode(raw, m)
                _check_trace(d)
            except UserError as e:
                assert str(e) and "\n" not in str(e)
                OUTCOMES["metadata: error"] += 1
                return
        OUTCOMES["metadata: decoded"] += 1
    finally:
        shutil.rmtree(tmp)


def test_largest_grid_and_gzip_bomb_cost_only_what_is_there(tmp_path):
    """The metadata bounds the bytes read; a CUDA-maximum grid must not size the read."""
    meta = {**_META, "grid": [2**31 - 1, 65535, 65535]}
    meta.pop("bin")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DecodeWarning)
        d = decode(*load_raw(_launch(tmp_path, meta, _BIN, gz=False)))
    assert len({int(c) for c in d.events.cta}) == _CTAS
    assert any("the grid has" in str(w.message) for w in caught)
    # 256 MiB of zeros gzipped (256 KiB on disk) for a 6-CTA launch: only 7 blocks inflate.
    meta["grid"] = [_CTAS]
    z = zlib.compressobj(1, zlib.DEFLATED, 31)
    chunk = bytes(2**24)
    bomb = z.compress(_BIN) + b"".join(z.compress(chunk) for _ in range(16)) + z.flush()
    raw, m = load_raw(_launch(tmp_path, meta, bomb, gz=True))
    assert len(raw) == (_CTAS + 1) * _META["bytes_per_cta"]


@pytest.fixture(scope="module", autouse=True)
def _print_counts():
    yield
    if OUTCOMES:
        print("\nfuzz outcomes:", dict(sorted(OUTCOMES.items())))
