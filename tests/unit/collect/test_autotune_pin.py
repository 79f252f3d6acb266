"""Autotuning choices recorded by `dump`, carried by `insert`, pinned by `run` (issue 11: a
deterministic program prints the same bytes profiled; near-tied configs picked by timing
noise would break that).

Real Triton Autotuners over a kernel run by Triton's interpreter on CPU tensors (no GPU
here), so a choice really launches its config and changes nothing but what was chosen; the
benchmark is the autotuner's ``do_bench`` hook, which says which config it times. Sessions
install their compile side as in test_autotune_plain.py (helpers/compile_side.py).
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch
import triton
import triton.language as tl
from helpers import SAMPLES
from helpers.cli import invoke
from helpers.compile_side import caching_autotuner, compile_side, session_of
from triton.runtime.autotuner import Autotuner

from proton_inject.dump import program
from proton_inject.dump import tuning as autotune
from proton_inject.dump.program import write_decisions
from proton_inject.formats import autotune as autotune_file

with triton.knobs.runtime.scope():
    triton.knobs.runtime.interpret = True

    @triton.jit
    def scale(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0 + BLOCK, mask=offs < n)


CONFIGS = [triton.Config({"BLOCK": 32}, num_warps=2), triton.Config({"BLOCK": 64}, num_warps=4)]


def _tuned(times: dict[int, float]):
    """An autotuned ``scale`` whose benchmark says ``times[BLOCK]`` and logs what it timed."""
    timed: list[int] = []

    def bench(kernel_call, quantiles):
        kernel_call()
        timed.append(at.timing_block)
        return [times[at.timing_block]] * 3

    at = triton.autotune([triton.Config(dict(c.kwargs), num_warps=c.num_warps) for c in CONFIGS],
                         key=["n"], do_bench=bench)(scale)
    orig_bench = at._bench

    def bench_config(*args, config, **kw):  # which config the benchmark is timing
        at.timing_block = config.kwargs["BLOCK"]
        return orig_bench(*args, config=config, **kw)

    at._bench = bench_config
    return at, timed


def _launch(at, n: int) -> torch.Tensor:
    x = torch.arange(n, dtype=torch.float32)
    out = torch.zeros(n)
    at[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, out, n)
    return out


@pytest.fixture
def restore_autotuner():
    orig = Autotuner.__dict__["run"]
    yield
    Autotuner.run = orig


def _record(tmp_path, times: dict[int, float], sizes=(100, 300)):
    """What `dump`'s child records for launches of ``sizes``; the autotuner used."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    lines = tmp_path / "autotune.jsonl"
    orig = Autotuner.__dict__["run"]
    autotune.record_in_child(str(lines))
    try:
        at, timed = _tuned(times)
        outs = [_launch(at, n) for n in sizes]
        _launch(at, sizes[0])  # a cached key: no second decision
    finally:
        Autotuner.run = orig
    return autotune_file.from_lines(lines), at, timed, outs


def test_dump_records_each_autotune_key_once(tmp_path):
    decisions, at, timed, outs = _record(tmp_path, {32: 2.0, 64: 1.0})
    assert timed == [32, 64, 32, 64]  # two keys, two configs each
    path = write_decisions(decisions, tmp_path / "dump")
    data = json.loads(path.read_text())
    assert data["format"] == 1 and data["inductor"] == []
    entries = sorted(data["triton"], key=lambda e: e["key"])
    assert [e["key"] for e in entries] == [[100, "torch.float32", "torch.float32"],
                                           [300, "torch.float32", "torch.float32"]]
    e = entries[0]
    assert (e["module"], e["kernel"]) == (__name__, "scale")
    assert e["config"] == {"kwargs": {"BLOCK": 64}, "num_warps": 4, "num_stages": 3, "num_ctas": 1,
                           "maxnreg": None, "pre_hook": False}
    assert sorted(t for _, t in e["timings"]) == [[1.0] * 3, [2.0] * 3]
    assert outs[0][:3].tolist() == [64.0, 66.0, 68.0]  # BLOCK 64 ran
    assert len(autotune_file.load(path)) == 2
    # a later dump into the same directory keeps the other keys and replaces its own
    again = autotune.Decisions()
    again.add({**entries[0], "kind": "triton", "config": {**e["config"], "num_warps": 8}})
    merged = autotune_file.load(write_decisions(again, tmp_path / "dump"))
    assert sorted(v["config"]["num_warps"] for v in merged.triton.values()) == [4, 8]


def test_one_key_chosen_differently_twice_is_not_pinned(tmp_path):
    d = autotune.Decisions()
    entry = {"kind": "triton", "module": "m", "kernel": "k", "configs": "c", "key": [1],
             "config": {"kwargs": {"B": 1}, "num_warps": 4, "num_stages": 3, "num_ctas": 1}}
    d.add(entry)
    d.add({**entry, "config": {**entry["config"], "num_warps": 8}})
    assert d.conflicts == 1 and "chosen differently twice" in d.summary()
    assert d.triton[("m", "k", "c", "[1]")]["conflict"]


def _dump_dir(tmp_path, autotune_text: str | None):
    src = tmp_path / "dump"
    (src / "h1").mkdir(parents=True)
    shutil.copy(SAMPLES / "cuda-90" / "add_kernel.ttgir", src / "h1" / "add_kernel.ttgir")
    if autotune_text is not None:
        (src / autotune_file.FILE_NAME).write_text(autotune_text)
    return src


def test_insert_carries_the_decisions_into_the_tree(tmp_path):
    decisions, *_ = _record(tmp_path, {32: 2.0, 64: 1.0})
    src = _dump_dir(tmp_path, json.dumps(decisions.to_json()))
    out = tmp_path / "inst"
    for _ in range(2):  # the second replaces the tree that holds autotune.json
        res = invoke(["insert", str(src), "-o", str(out)], code=0)
        assert "carried autotune.json (2 autotuning decisions)" in res.output
    assert (out / autotune_file.FILE_NAME).read_bytes() == (src / autotune_file.FILE_NAME).read_bytes()
    assert sorted(p.name for p in out.rglob("*")) == ["add_kernel.ttgir", "autotune.json", "h1",
                                                       "manifest.json"]
    # a damaged file is not carried: run would time every autotuner
    bad = _dump_dir(tmp_path / "bad", "{not json")
    res = invoke(["insert", str(bad), "-o", str(tmp_path / "inst2")], code=0)
    assert "warning:" in res.output and "not carried" in res.output
    assert not (tmp_path / "inst2" / autotune_file.FILE_NAME).exists()


def test_run_takes_recorded_choices_and_times_the_rest(tmp_path):
    # The plain run chose BLOCK 32 for n=100 (its timing then said so).
    decisions, *_ = _record(tmp_path / "plain", {32: 1.0, 64: 1.01}, sizes=(100,))
    session = session_of("run", tmp_path)
    decisions.write(session.source.tree)
    at, timed = _tuned({32: 1.01, 64: 1.0})  # this run's timing would choose BLOCK 64
    with compile_side(session):
        pinned = _launch(at, 100)
        assert timed == [] and at.best_config.kwargs["BLOCK"] == 32  # pinned: never timed
        assert {c.kwargs["BLOCK"]: t for c, t in at.configs_timings.items()} == {32: [1.0] * 3,
                                                                               64: [1.01] * 3}
        _launch(at, 300)  # a key the dump did not see: timed, on the plain builds
        assert timed == [32, 64] and at.best_config.kwargs["BLOCK"] == 64
    assert pinned[:2].tolist() == [32.0, 34.0]
    assert not any(m.startswith("warning") for m in session.result.messages)
    session.conclude()
    (line,) = [m for m in session.result.messages if m.startswith("autotuning:")]
    assert "1 choice(s) taken from" in line and "autotune.json, 1 timed on the plain builds" in line
    # the run records its own choices, for a later run or profile --autotune-from
    assert len(autotune_file.load(session.out / autotune_file.FILE_NAME)) == 2


@pytest.mark.parametrize("text", ["{not json", '{"format": 1, "triton": [{"kernel": "scale"}]}',
                                  '{"format": 7}'])
def test_a_damaged_file_warns_once_and_times(text, tmp_path):
    session = session_of("run", tmp_path)
    (tmp_path / "prof" / "ir" / autotune_file.FILE_NAME).write_text(text)
    at, timed = _tuned({32: 1.0, 64: 2.0})
    with compile_side(session):
        _launch(at, 100)
        _launch(at, 300)
    assert timed == [32, 64, 32, 64]
    warnings = [m for m in session.result.messages if m.startswith("warning")]
    assert len(warnings) == 1 and "autotune.json" in warnings[0], warnings
    session.conclude()
    (line,) = [m for m in session.result.messages if m.startswith("autotuning:")]
    assert "2 timed on the plain builds" in line


def test_a_recorded_config_the_autotuner_lacks_is_timed_with_a_warning(tmp_path, restore_autotuner):
    decisions, *_ = _record(tmp_path / "plain", {32: 1.0, 64: 2.0})
    for e in decisions.triton.values():
        e["config"]["num_stages"] = 5  # not one of its configs (but the same config list digest)
    tuner = autotune.Tuner(decisions, note=(notes := []).append)
    at, timed = _tuned({32: 2.0, 64: 1.0})
    Autotuner.run = tuner.triton_run(Autotuner.__dict__["run"])
    _launch(at, 100)
    _launch(at, 300)
    assert timed == [32, 64, 32, 64] and (tuner.pinned, tuner.timed) == (0, 2)
    assert len(notes) == 1 and "not one of its autotune configs" in notes[0]


def test_profile_autotune_from_must_name_a_file(tmp_path):
    from proton_inject.collect.session import Session
    from proton_inject.errors import UserError

    session = Session(None, tmp_path / "out", autotune_from=tmp_path)
    with pytest.raises(UserError, match="--autotune-from .*no autotune.json"):
        session.tuner  # noqa: B018 (read on first use)
    (tmp_path / "ir").mkdir()
    (tmp_path / "ir" / autotune_file.FILE_NAME).write_text("[]")
    session = Session(None, tmp_path / "out", autotune_from=tmp_path)
    with pytest.raises(UserError, match="--autotune-from: .*format 1"):
        session.tuner  # noqa: B018 (read on first use)


def test_inductor_kernels_are_known_by_source_and_size_hints():
    a, b = caching_autotuner(), caching_autotuner()
    assert autotune.Tuner.inductor_names(a) == autotune.Tuner.inductor_names(b)
    b.size_hints = {"x": 1024}
    assert autotune.Tuner.inductor_names(a) != autotune.Tuner.inductor_names(b)
    d = autotune.Decisions()
    cfg = autotune.config_dict(triton.Config({"BLOCK": 256}, num_warps=8))
    d.add({"kind": "inductor", **autotune.Tuner.inductor_names(a), "autotune": cfg, "coordesc": None})
    d.add({"kind": "inductor", **autotune.Tuner.inductor_names(a), "autotune": None, "coordesc": cfg})
    loaded = autotune.Decisions.from_json(json.loads(json.dumps(d.to_json())))
    (entry,) = loaded.inductor.values()
    assert entry["autotune"] == entry["coordesc"] == cfg and not entry.get("conflict")
    assert autotune.Tuner(loaded).inductor_entry(a) == entry
    assert autotune.Tuner(loaded).inductor_entry(b) is None


_PROGRAM = """
import torch, triton, triton.language as tl

@triton.jit
def scale(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)

TIMES = iter([2.0, 1.0])  # the second config (BLOCK 64) is the faster
tuned = triton.autotune([triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})], key=["n"],
                        do_bench=lambda call, quantiles: (call(), [next(TIMES)] * 3)[1])(scale)
x = torch.arange(100, dtype=torch.float32)
out = torch.zeros(100)
tuned[lambda m: (triton.cdiv(100, m["BLOCK"]),)](x, out, 100)
print("chosen", tuned.best_config.kwargs["BLOCK"], float(out.sum()))
"""


def test_dump_child_records_the_programs_choices(tmp_path):
    """`dump`'s child process, on a program run by Triton's interpreter (no GPU to compile
    for: only the autotuning part of a dump is exercised)."""
    from helpers.cli import child_env, run_python


    prog = tmp_path / "prog.py"
    prog.write_text(_PROGRAM)
    records = tmp_path / "compiled.jsonl"
    p = run_python(["-c", program.DUMP_CHILD, str(records), "path", str(prog)], cwd=tmp_path,
                   env=child_env(TRITON_INTERPRET="1"), code=0, timeout=120)
    assert p.stdout == "chosen 64 9900.0\n"  # the program's own output, nothing of ours
    decisions = autotune_file.from_lines(program.autotune_lines_path(str(records)))
    (e,) = decisions.triton.values()
    assert (e["module"], e["kernel"], e["key"]) == ("__main__", "scale", [100, "torch.float32", "torch.float32"])
    assert e["config"]["kwargs"] == {"BLOCK": 64}


def test_inductor_autotuner_keeps_the_recorded_config_untimed(tmp_path, monkeypatch):
    """Inductor's CachingAutotuner under run: benchmark_all_configs answers, without timing
    anything, so that autotune_to_one_config (min of the timings) keeps the recorded config.
    (Its launchers need a GPU driver: the compile results of its configs, which carry the
    same configs, stand in for them.)"""
    from torch._inductor.runtime import triton_helpers

    monkeypatch.setattr(triton_helpers, "set_driver_to_gpu", lambda: None)
    at, other = caching_autotuner(), caching_autotuner()
    other.size_hints = {"x": 4096}  # another kernel as far as the file goes
    want = autotune.config_dict(at.configs[1])  # BLOCK 256, 8 warps
    pins = autotune.Decisions()
    pins.add({"kind": "inductor", **autotune.Tuner.inductor_names(at), "autotune": want, "coordesc": None})
    session = session_of("run", tmp_path, compile=lambda: [at._precompile_config(c).kernel for c in at.configs][-1])
    pins.write(session.source.tree)
    with compile_side(session):
        at.launchers = [at._precompile_config(c) for c in at.configs]
        monkeypatch.setattr(at, "bench", lambda *a, **k: pytest.fail("a config was timed"))
        timings = at.benchmark_all_configs()
        assert session.tuner.inductor_pinned_timings(other) is None  # not recorded: timed
    best = min(timings, key=timings.get)
    assert autotune.config_dict(best.config) == want and best is at.launchers[1]
    assert (session.tuner.pinned, session.tuner.timed) == (1, 1)


def test_saved_choices_are_read_in_the_programs_cache_and_configs_build_where_they_did(tmp_path):
    """Triton's check_disk_cache under the tool: its saved-choice file in the program's cache,
    the configs it benchmarks on a miss built in the cache they were built in before."""
    import triton

    from proton_inject.dump.tuning import saved_choices_in

    seen = {}

    def check_disk_cache(at, tuning_key, configs, bench_fn):  # Triton's order of work
        seen["lookup"] = triton.knobs.cache.dir
        bench_fn()
        seen["put"] = triton.knobs.cache.dir
        return False

    def bench():
        seen["bench"] = triton.knobs.cache.dir

    with triton.knobs.cache.scope():
        triton.knobs.cache.dir = str(tmp_path / "tool")
        assert saved_choices_in(str(tmp_path / "program"))(check_disk_cache)(None, ("k",), [], bench) is False
        assert triton.knobs.cache.dir == str(tmp_path / "tool")
    assert seen == {"lookup": str(tmp_path / "program"), "bench": str(tmp_path / "tool"),
                    "put": str(tmp_path / "program")}


def test_the_key_is_made_only_for_a_run_that_chooses(tmp_path, restore_autotuner, monkeypatch):
    """With no choice of the kernel pinned, a launch whose key is cached makes no key of ours
    (Triton makes it again); the launch that tunes a new key is recorded as before, also when
    the autotuner's cache cannot say its size (a library's own cache object)."""
    made = []
    real = autotune.tuning_key
    monkeypatch.setattr(autotune, "tuning_key", lambda *a: made.append(1) or real(*a))
    triton_run = Autotuner.__dict__["run"]
    for sized in (True, False):
        made.clear()
        recorded = []
        tuner = autotune.Tuner(None, record=recorded.append)
        at, timed = _tuned({32: 2.0, 64: 1.0})
        if not sized:
            at.cache = type("OwnCache", (), {"__init__": lambda s: setattr(s, "d", {}),
                                             "__contains__": lambda s, k: k in s.d,
                                             "__getitem__": lambda s, k: s.d[k],
                                             "__setitem__": lambda s, k, v: s.d.__setitem__(k, v)})()
        Autotuner.run = tuner.triton_run(triton_run)
        for n in (100, 100, 100, 300, 300):
            _launch(at, n)
        assert [e["config"]["kwargs"]["BLOCK"] for e in recorded] == [64, 64] and tuner.timed == 2
        assert len(made) == (2 if sized else 5), made  # (without a size: before every run, as before)
