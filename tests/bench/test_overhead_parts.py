"""The variants of benchmarks/overhead_parts.py compile for cuda:90 with the sizes it assumes."""

from __future__ import annotations

import helpers
from helpers import load_module
from triton.backends.compiler import GPUTarget

from proton_inject.lower.options import profile_scratch_bytes
from proton_inject.lower.proton import scope_names_of

ROOT = helpers.REPO
H100 = GPUTarget("cuda", 90, 32)


def _bench():
    return load_module(ROOT / "benchmarks" / "overhead_parts.py", "overhead_parts")


def test_variants_have_the_records_and_buffers_the_benchmark_divides_by(tmp_path):
    bench = _bench()
    kernels = bench.variants(H100, tmp_path, 232448)
    assert kernels[("plain", 0, 0)].metadata.profile_scratch_size == 0
    for (btype, k, size), ck in kernels.items():
        if btype == "plain":
            continue
        # The buffer is the size asked for (shared: under the 4% cap), so slopes over it hold.
        assert ck.metadata.profile_scratch_size == profile_scratch_bytes(size, bench.NUM_WARPS)
        extra = ck.metadata.shared - kernels[("plain", 0, 0)].metadata.shared
        assert extra == (size if btype == "shared" else 0), (btype, k, size)
    text = bench.with_regions(bench.plain_ttgir(H100), 3)
    path = tmp_path / "r3.ttgir"
    path.write_text(text)
    names, parents = scope_names_of(str(path))
    assert sorted(n for _, n in names) == ["r0", "r1", "r2"] and not parents
    assert {s for (b, k, s) in kernels if b == "shared"} == {64, 256, 1024, 4096}
