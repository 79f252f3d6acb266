"""Mutants of what users hand the tool, one copy for the property tests and the fuzz scripts.

Each mutator draws its choices through ``draw`` (hypothesis's ``data.draw``), so the tests
shrink a failure to a small case and ``scripts/fuzz_parser.py``/``fuzz_decoder.py`` run the
same mutations for 10^5 cases. Inputs are real: TTGIR samples, and launches recorded on an
H100 (``tests/data``: a shared-memory matmul launch and a directly lowered layernorm).
"""

from __future__ import annotations

import gzip
import json
import shutil
import tempfile
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import strategies as st

from helpers import DATA, SAMPLES, sample_files
from proton_inject.analyze.decode import decode
from proton_inject.analyze.issues import DecodeWarning
from proton_inject.analyze.summary import LaunchData, summarize
from proton_inject.errors import UserError
from proton_inject.formats.raw import load_raw
from proton_inject.formats.traces import trace_bytes
from proton_inject.instrument.insert import insert_text, strip_text
from proton_inject.instrument.rules import Rules

Draw = Callable[[st.SearchStrategy], Any]

# --- TTGIR ---------------------------------------------------------------------------------------

TTGIR_FILES = [p for p in sample_files() if p.stat().st_size < 40000]
# Kernels with an early return (Liger's cross entropy: several blocks, cf terminators).
EARLY_RETURN = sorted(p for name in ("cross_entropy", "fused_linear_cross_entropy")
                      for p in (SAMPLES / "thirdparty").glob(f"*/{name}.ttgir"))
ROUNDTRIP_RULES = Rules(kernel_scope=True, loops="both", marks=False,
                        ops=["tt.load", "tt.store", "ttg.*", "scf.if"])
# Text a hand edit or a broken tool leaves in IR: stray tokens, braces, quotes, attributes.
_STRAY = [b"J", b"}", b"{", b'"', b"%", b"^bb9:", b"loc(#loc)", b" : i32", b"// x", b"\t",
          b"\x00", b"\xff", b"(", b")", b"=", b"scf.yield", b"tt.return", b"#ttg.shared"]


def mutate_lines(lines: list[bytes], draw: Draw) -> list[bytes]:
    """0-3 line edits (delete, duplicate, move; comments, blank and partition lines; a record),
    then 0-2 byte edits inside a line (a stray token, a cut, a swap)."""
    for _ in range(draw(st.integers(0, 3))):
        i = draw(st.integers(0, len(lines) - 1))
        kind = draw(st.sampled_from(["delete", "duplicate", "move", "comment", "blank",
                                     "partition", "record"]))
        indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
        if kind == "delete" and len(lines) > 1:
            del lines[i]
        elif kind == "duplicate":
            lines.insert(i, lines[i])
        elif kind == "move":
            lines.insert(draw(st.integers(0, len(lines) - 1)), lines.pop(i))
        elif kind == "comment":
            lines.insert(i, indent + b"// " + draw(st.sampled_from(
                [b"pred: ^bb0", b"{", b"}", b'"', b"proton.record end \"x\""])) + b"\n")
        elif kind == "blank":
            lines.insert(i, b"\n")
        elif kind == "partition":  # a warp_specialize continuation line in an odd place
            lines.insert(i, indent + b"partition0() num_warps(1) {\n")
            lines.insert(i + 1, indent + b"}\n")
        else:  # a record in the input makes it instrumented: insert refuses it
            lines.insert(i, indent + b'proton.record start "mine"\n')
    for _ in range(draw(st.integers(0, 2))):
        i = draw(st.integers(0, len(lines) - 1))
        line = lines[i]
        at = draw(st.integers(0, max(0, len(line) - 1)))
        kind = draw(st.sampled_from(["token", "cut", "swap"]))
        if kind == "token":
            lines[i] = line[:at] + draw(st.sampled_from(_STRAY)) + line[at:]
        elif kind == "cut":
            lines[i] = line[:at] + line[at + draw(st.integers(1, 8)):]
        elif len(line) > at + 1:
            lines[i] = line[:at] + line[at + 1: at + 2] + line[at: at + 1] + line[at + 2:]
    return lines


def insert_then_strip(raw: bytes, rules: Rules = ROUNDTRIP_RULES) -> str:
    """``"refused"`` (a UserError: unparsable, already instrumented, nothing to place) or
    ``"instrumented"`` after checking that strip gives ``raw`` back byte for byte."""
    try:
        res = insert_text(raw, rules, "m.ttgir")
    except UserError as e:
        assert str(e)
        return "refused"
    records = [ln.split('"')[0].split() for ln in res.text.splitlines()
               if ln.lstrip().startswith("proton.record ")]
    assert sum(r[1:2] == ["start"] for r in records) == sum(r[1:2] == ["end"] for r in records)
    assert strip_text(res.text.encode("latin-1"), "m.ttgir").encode("latin-1") == raw
    return "instrumented"


# --- raw launches --------------------------------------------------------------------------------

SCALARS = st.one_of(
    st.booleans(), st.integers(-3, 5), st.integers(), st.floats(allow_nan=True),
    st.sampled_from(["", "outer", "iteration", "both", "false", "no", "tt.load", "scf.*", "(",
                     "add_kernel", "x=vector_add.py:20-24", "x=a.py:9-3", "oops", "."]),
    st.text(max_size=12))
VALUES = st.recursive(SCALARS, lambda c: st.lists(c, max_size=3) |
                      st.dictionaries(st.text(max_size=5), c, max_size=2), max_leaves=6)

_SRC = DATA / "h100-shortlaunch"
META = json.loads((_SRC / "00000-matmul_kernel.json").read_text())
CTAS = 6  # a slice of the real launch keeps each case fast
BIN = gzip.decompress((_SRC / "00000-matmul_kernel.bin.gz").read_bytes())[
    : CTAS * META["bytes_per_cta"]]
_FIELDS = ["grid", "num_warps", "bytes_per_cta", "buffer_size", "scopes", "scope_parents",
           "sampled_warps", "clock_bits", "launch", "bin", "config", "sm_clock_mhz", "kernel"]
FIELD_VALUES = st.one_of(VALUES, st.sampled_from(
    [[6], [6, 1, 1], [0], [-1], [2**40], [2**31 - 1, 65535, 65535], 4, 8, 9, 32, 10**9, 1e9, 8320,
     8192, 0, 4096, None, {"0": "k"}, {"1": 0}, [0, 1], [7], [9], 32, 64, 48,
     "00000-matmul_kernel.bin", "../x.bin", "x.bin.gz", 1755.0, float("nan")]))


def write_launch(folder: Path, meta: dict, data: bytes, gz: bool) -> Path:
    """The launch as ``run`` lays it out: ``NNNNN-KERNEL.json`` beside its buffer."""
    name = "00000-matmul_kernel.bin" + (".gz" if gz else "")
    (folder / name).write_bytes(data)
    meta = {**meta, "bin": meta.get("bin", name)}
    (folder / "00000-matmul_kernel.json").write_text(json.dumps(meta))
    return folder / "00000-matmul_kernel.json"


def _check_trace(d) -> None:
    doc = json.loads(trace_bytes([d]))
    for ev in doc["traceEvents"]:
        if ev.get("ph") == "X":
            assert np.isfinite(ev["ts"]) and ev["dur"] >= 0
    summarize([LaunchData.from_decoded(d)])


def decode_launch(meta: dict, blob: bytes, gz: bool) -> str:
    """Write the launch, load, decode, trace and summarize it: ``"decoded"`` or ``"error"`` (one
    UserError of one line); anything else propagates."""
    tmp = Path(tempfile.mkdtemp(prefix="pi-fuzz-"))
    try:
        path = write_launch(tmp, meta, blob, gz)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DecodeWarning)
            try:
                raw, m = load_raw(path)
                _check_trace(decode(raw, m))
            except UserError as e:
                assert str(e) and "\n" not in str(e)
                return "error"
        return "decoded"
    finally:
        shutil.rmtree(tmp)


def mutated_buffer(draw: Draw) -> tuple[dict, bytes, bool]:
    """The matmul launch with 0-4 edits of its buffer (a byte, a word, zeros, a cut, a repeat),
    sometimes 1-2 metadata fields of any value, plain or gzipped, its gzip stream sometimes
    damaged: ``(meta, file bytes, gz)``."""
    meta = {**META, "grid": [CTAS, 1, 1]}
    meta.pop("bin")
    fields = st.lists(st.sampled_from(_FIELDS), max_size=2) if draw(st.integers(0, 3)) == 0 \
        else st.just([])
    for key in draw(fields):
        meta[key] = draw(FIELD_VALUES)
    buf = bytearray(BIN)
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["byte", "word", "zeros", "cut", "repeat"]))
        pos = draw(st.integers(0, max(0, len(buf) - 1)))
        if kind == "byte" and buf:
            buf[pos] = draw(st.integers(0, 255))
        elif kind == "word" and len(buf) >= pos + 4:
            buf[pos & ~3: (pos & ~3) + 4] = draw(st.binary(min_size=4, max_size=4))
        elif kind == "zeros":
            n = draw(st.integers(1, 9000))
            buf[pos: pos + n] = bytes(len(buf[pos: pos + n]))
        elif kind == "cut":
            del buf[pos:]
        else:
            buf += buf[: draw(st.integers(1, 9000))]
    gz = draw(st.booleans())
    blob = gzip.compress(bytes(buf), compresslevel=1, mtime=0) if gz else bytes(buf)
    if gz and draw(st.integers(0, 3)) == 0:  # damage the gzip stream itself
        damaged = bytearray(blob)
        i = draw(st.integers(0, len(damaged) - 1))
        damaged[i] ^= draw(st.integers(1, 255))
        blob = bytes(damaged[: draw(st.integers(0, len(damaged)))])
    return meta, blob, gz


# Metadata: every field of a raw launch's .json, of a shared-memory launch and of a launch
# lowered directly (with loops), set to plausible, wrong-typed, out-of-range or deeply nested
# values; with or without damage to its buffer.
_DIRECT = DATA / "h100-direct-loops"
DMETA = json.loads((_DIRECT / "00000-layernorm_fwd_kernel.json").read_text())
_DCTAS = 6
_DBIN = gzip.decompress((_DIRECT / "00000-layernorm_fwd_kernel.bin.gz").read_bytes())[
    : _DCTAS * DMETA["bytes_per_cta"]]
_META_FIELDS = sorted(set(META) | set(DMETA) | {"format", "version"})
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
                                      {"after": dict(DMETA["clock_bracket"]["after"], t0=-1)}]),
    "timer_ref_ns": st.integers(-1, 2**64), "sample_ctas": st.integers(-1, 2**32),
    "rank": st.integers(-1, 2**21), "record_cost_cycles": st.floats(-1, 1e5),
}


class Mark:
    """A stand-in value (hypothesis prints every argument: a 500-deep list would not do)."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


DROP = Mark("DROP")  # the field is left out
DEEP = Mark("DEEP")  # the field is a list nested 500 deep

CHANGES = st.lists(st.sampled_from(_META_FIELDS).flatmap(
    lambda key: st.tuples(st.just(key), st.one_of(
        st.just(DROP), st.just(DEEP), _PER_FIELD.get(key, st.nothing()), _EDGE, FIELD_VALUES))),
    min_size=1, max_size=3)
DAMAGE = st.lists(st.tuples(st.integers(0, 2**20), st.binary(min_size=4, max_size=4)), max_size=2)


def mutated_metadata(direct: bool, changes: list, damage: list, gz: bool
                     ) -> tuple[dict, bytes, bool]:
    """The matmul (or, ``direct``, the layernorm) launch with ``changes`` to its metadata
    (``(key, value | DROP | DEEP)``) and ``damage`` to its buffer (``(offset, 4 bytes)``)."""
    meta = {**(DMETA if direct else META), "grid": [_DCTAS if direct else CTAS, 1, 1]}
    meta.pop("bin")
    for key, value in changes:
        if value is DROP:
            meta.pop(key, None)
        else:
            meta[key] = json.loads("[" * 500 + "]" * 500) if value is DEEP else value
    buf = bytearray(_DBIN if direct else BIN)
    for pos, word in damage:
        pos = pos % (len(buf) - 4) & ~3
        buf[pos: pos + 4] = word
    return meta, gzip.compress(bytes(buf), compresslevel=1, mtime=0) if gz else bytes(buf), gz


def draw_metadata(draw: Draw) -> tuple[dict, bytes, bool]:
    return mutated_metadata(draw(st.booleans()), draw(CHANGES), draw(DAMAGE), draw(st.booleans()))


# --- the fuzz scripts' runner --------------------------------------------------------------------


class _Hang(BaseException):
    """The per-case alarm (a BaseException: the tool's own ``except Exception`` must not eat it)."""


class _TimeUp(Exception):
    pass


def _bucket(e: BaseException) -> str:
    """The exception's type and the innermost frame in the package (else the innermost one)."""
    frames = []
    tb = e.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_filename + f":{tb.tb_lineno}")
        tb = tb.tb_next
    ours = [f for f in frames if "/proton_inject/" in f] or frames or ["?"]
    return f"{type(e).__name__} at {'/'.join(Path(ours[-1]).parts[-2:])}"


def run_fuzz(make: Callable[[Draw], Any], check: Callable[[Any], str],
             save: Callable[[Any, Path], None], cases: int, timeout: float,
             seconds: float | None = None, seed: int | None = None,
             save_dir: Path | None = None) -> dict[str, Any]:
    """Run ``check(make(draw))`` on up to ``cases`` mutants (or until ``seconds`` pass), each
    under a ``timeout`` alarm: outcomes, crashes by bucket, hangs, cases/s. The first input of
    each crash bucket, and every hang, is written under ``save_dir`` by ``save``."""
    import signal
    import time

    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as seeded

    outcomes: Counter = Counter()
    crashes: Counter = Counter()
    hangs: list[str] = []
    start = time.monotonic()

    def alarm(signum, frame):
        raise _Hang()

    @settings(max_examples=cases, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def one(data):
        case = None
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            case = make(data.draw)
            if seconds is not None and time.monotonic() - start > seconds:
                stopped.append(True)
                raise _TimeUp()
            outcomes[check(case)] += 1
        except _TimeUp:
            raise
        except _Hang:
            hangs.append(f"case {sum(outcomes.values()) + sum(crashes.values()) + len(hangs)}")
            if save_dir is not None and case is not None:
                save(case, save_dir / f"hang-{len(hangs)}")
        except Exception as e:  # noqa: BLE001 - every other exception is a crash to count
            bucket = _bucket(e)
            if not crashes[bucket] and save_dir is not None and case is not None:
                save(case, save_dir / f"crash-{len(crashes) + 1}")
            crashes[bucket] += 1
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)

    stopped: list[bool] = []
    old = signal.signal(signal.SIGALRM, alarm)
    try:
        (seeded(seed)(one) if seed is not None else one)()
    except Exception:
        # Stopped by the clock: hypothesis replays the last case to report it, and calls that
        # flaky when an earlier run of the same draws passed. The counts are ours, and whole.
        if not stopped:
            raise
    finally:
        signal.signal(signal.SIGALRM, old)
    elapsed = time.monotonic() - start
    n = sum(outcomes.values()) + sum(crashes.values()) + len(hangs)
    return {"cases": n, "seconds": elapsed, "rate": n / elapsed if elapsed else 0.0,
            "outcomes": dict(outcomes), "crashes": dict(crashes), "hangs": hangs}


def format_summary(name: str, res: dict[str, Any], timeout: float) -> str:
    lines = [f"{name}: {res['cases']:,} cases in {res['seconds']:.1f} s "
             f"({res['rate']:.1f} cases/s)",
             "outcomes: " + ", ".join(f"{k} {v:,}" for k, v in sorted(res["outcomes"].items())),
             f"crashes: {sum(res['crashes'].values())}",
             *(f"  {v:,} x {k}" for k, v in sorted(res["crashes"].items())),
             f"hangs (over {timeout:g} s): {len(res['hangs'])}"]
    return "\n".join(lines)


def fuzz_main(name: str, doc: str, make: Callable[[Draw], Any], check: Callable[[Any], str],
              save: Callable[[Any, Path], None], argv: list[str] | None = None) -> int:
    """The fuzz scripts' command line: run, print the summary (or JSON), exit 1 on a crash or
    a hang."""
    import argparse

    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--cases", type=int, default=100_000)
    ap.add_argument("--seconds", type=float, default=None, help="stop after this long")
    ap.add_argument("--timeout", type=float, default=10.0, help="a case over this is a hang")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--save", type=Path, default=None, help="write crashing inputs here")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    a = ap.parse_args(argv)
    res = run_fuzz(make, check, save, a.cases, a.timeout, a.seconds, a.seed, a.save)
    print(json.dumps(res) if a.json else format_summary(name, res, a.timeout))
    return 1 if res["crashes"] or res["hangs"] else 0
