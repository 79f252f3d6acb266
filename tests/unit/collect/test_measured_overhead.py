"""--measure-overhead's arithmetic (issue 30 item 2): from each kernel's timed launches in
order to the ratio and the extra time per launch, first pair left out."""

from __future__ import annotations

import pytest

from proton_inject.collect.measured_overhead import overhead_table


def test_ratio_and_extra_time_come_from_adjacent_pairs_after_the_first():
    # instrumented 12 us, plain 10 us, after a slow first pair (module loading) that must not count
    launches = [(False, 0.050), (True, 0.040)] + [(False, 0.012), (True, 0.010)] * 9
    table, lines = overhead_table([("k", "BLOCK=64", launches), ("once", None, [(False, 0.2)])])
    k = table["k"]
    assert k["pairs"] == 9 and k["launches_plain"] == 10
    assert k["ratio"] == pytest.approx(1.2) and k["p10"] == pytest.approx(1.2) and k["p90"] == pytest.approx(1.2)
    assert k["extra_us"] == pytest.approx(2.0) and k["extra_us_p10"] == pytest.approx(2.0)
    assert k["configs"] == {"BLOCK=64": {"extra_us": pytest.approx(2.0), "extra_us_p10": pytest.approx(2.0),
                                         "extra_us_p90": pytest.approx(2.0), "pairs": 9}}
    assert table["once"] == {"pairs": 0}
    assert "k: instrumented/plain kernel time 1.200" in lines[0] and "+2.00 us a launch" in lines[0]
    assert lines[1] == "measured overhead: once: not measured (launched once)"


def test_a_kernels_configs_are_pooled_and_kept_apart_and_the_spread_is_the_10th_to_90th_percentile():
    flat = [(False, 1.0), (True, 1.0)]
    for i in range(1, 11):  # instrumented 0.1 .. 1.0 us slower
        flat += [(False, 0.010 + i * 1e-4), (True, 0.010)]
    b = [(False, 1.0), (True, 1.0), (False, 0.0105), (True, 0.010)]
    table, _ = overhead_table([("k", "BLOCK=64", flat), ("k", "BLOCK=128", b)])
    k = table["k"]
    assert k["pairs"] == 11  # ten from one config, one from the other
    extra = sorted([i / 10 for i in range(1, 11)] + [0.5])  # us
    assert k["extra_us_p10"] == pytest.approx(extra[1]) and k["extra_us_p90"] == pytest.approx(extra[9])
    assert k["extra_us"] == pytest.approx(extra[5])
    # each config keeps its own extra time (the report divides it by that config's time)
    assert k["configs"]["BLOCK=128"]["extra_us"] == pytest.approx(0.5)
    assert k["configs"]["BLOCK=128"]["pairs"] == 1 and k["configs"]["BLOCK=64"]["pairs"] == 10
    assert k["configs"]["BLOCK=64"]["extra_us"] == pytest.approx(0.55)


def test_the_gate_kernel_compiles_for_an_h100_and_reads_the_host_flag_afresh_each_turn(tmp_path, monkeypatch):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from proton_inject.collect._gate_kernel import launch_gate

    monkeypatch.setattr(triton.knobs.cache, "dir", str(tmp_path))
    src = ASTSource(launch_gate, signature={"flag_ptr": "*i32", "ticket": "i32", "limit_ns": "i64",
                                            "late_ptr": "*i32"})
    ck = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 1})
    ptx = ck.asm["ptx"]
    # a cached load would spin forever on the flag's first value; the limit needs the timer
    assert ptx.count("ld.volatile.global") >= 2 and "%globaltimer" in ptx
    assert "atom.global" in ptx and ck.asm["cubin"]
