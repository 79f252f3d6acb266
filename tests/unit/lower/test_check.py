"""`check`: instrumented TTGIR compiled through Triton's real pipeline on the CPU."""

from __future__ import annotations

import shutil
from pathlib import Path

import helpers
import pytest
import triton
import triton.language as tl
from helpers.cli import invoke
from helpers.ttgir import add_kernel_scope, compile_ttgir
from triton.backends.compiler import GPUTarget

from proton_inject.errors import UserError
from proton_inject.lower.check import check_file, check_paths, diagnostics, file_target, plan
from proton_inject.lower.options import LoweringOptions

# Proton's own choices (every warp records, its default size): what the fixtures were measured
# with; the tool's defaults (first warp of each partition, --buffer-size auto) differ.
PROTON = LoweringOptions(warps="all", auto_size=False, buffer_type="shared")

DATA = helpers.DATA / "h100-triton3.6"


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(out_ptr + offs, x * 2.0, mask=offs < n)


_SIG = {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"}


@pytest.fixture(scope="module")
def aot_files(tmp_path_factory) -> dict[str, Path]:
    """Uninstrumented TTGIR compiled here for two targets, then given a kernel-scope region."""
    d = tmp_path_factory.mktemp("aot")
    out = {}
    for name, target in (("cuda90", GPUTarget("cuda", 90, 32)), ("gfx942", GPUTarget("hip", "gfx942", 64))):
        text = compile_ttgir(scale_kernel, _SIG, {"BLOCK": 256}, target)
        assert "proton.record" not in text
        p = d / f"scale_{name}.ttgir"
        p.write_text(add_kernel_scope(text))
        out[name] = p
    return out


def test_fixtures_compile_with_measured_sizes():
    add = check_file(DATA / "add_kernel.ttgir", options=PROTON)
    assert add.ok, add.error
    assert (add.kernel, add.target, add.num_warps) == ("add_kernel", "cuda:90", 4)
    assert add.regions == [(0, "kernel"), (1, "iter")] and add.parents == [(1, 0)]
    assert add.profile_scratch_bytes == 8320 and add.shared_bytes == 8192
    assert add.buffer_bytes == 8192 and add.records_per_warp == 256
    mm = check_file(DATA / "mm_kernel.ttgir", options=PROTON)
    assert mm.ok, mm.error
    # 3-stage 128x128x64 fp16 pipeline (96 KiB) + 1 KiB of records per warp: 128 slots,
    # which is why the H100 run (130 records per warp) wrapped.
    assert mm.shared_bytes == 106496 and mm.buffer_bytes == 8192 and mm.records_per_warp == 128
    assert mm.binary_bytes > 1000
    # The defaults: warp 0 records. Records in a loop of dots (not lowered directly: a store
    # per iteration would cost more there): warp 0 keeps the 128 slots each warp had when
    # every warp recorded, and the buffer (copied out whole) is an eighth of Proton's.
    one = check_file(DATA / "mm_kernel.ttgir")
    assert one.recording_warps == [0] and one.buffer_bytes == 1024 and one.records_per_warp == 128
    assert one.shared_bytes == 98304 + 1024 and one.buffer_type == "shared"


def test_aot_kernel_with_inserted_record_compiles_for_cuda_and_hip(aot_files):
    cuda = check_file(aot_files["cuda90"])
    assert cuda.ok, cuda.error
    assert cuda.regions == [(0, "kernel")] and cuda.profile_scratch_bytes > 0
    hip = check_file(aot_files["gfx942"])
    assert hip.ok, hip.error
    assert hip.target == "hip:gfx942" and hip.max_shared == 65536
    assert hip.regions == [(0, "kernel")] and hip.profile_scratch_bytes > 0


def test_options_change_the_build(aot_files):
    small = check_file(aot_files["cuda90"], options=LoweringOptions(warps="all", buffer_size=512))
    default = check_file(aot_files["cuda90"], options=PROTON)
    assert small.buffer_bytes == 512 and default.buffer_bytes == 8192
    auto = check_file(aot_files["cuda90"])  # kernel scope only: 2 clock words, direct
    assert auto.buffer_bytes == 8 and auto.records_per_warp == 2 and auto.recording_warps == [0]
    assert auto.buffer_type == "direct" and auto.profile_scratch_bytes == 16
    assert small.profile_scratch_bytes < default.profile_scratch_bytes


def test_global_buffer_type_moves_records_out_of_shared_memory(aot_files):
    add = check_file(DATA / "add_kernel.ttgir", options=LoweringOptions(buffer_type="global", warps="all"))
    assert add.ok, add.error
    assert add.buffer_type == "global" and add.shared_bytes == 0  # 8192 B with a shared buffer
    # Proton's default for a global buffer: 16 KiB per warp (2048 records), no 4% cap.
    assert add.buffer_bytes == 65536 and add.records_per_warp == 2048
    assert add.profile_scratch_bytes == 65664  # 40 + 4 x 4 header bytes, rounded up to 128
    # The 4096^3 matmul writes 132 records per warp: 256 slots per warp hold them all, where
    # the kernel's 96 KiB of shared memory leaves the shared buffer 128 slots.
    opts = LoweringOptions(buffer_type="global", buffer_size=16384, warps="all")
    mm = check_file(DATA / "mm_kernel.ttgir", options=opts)
    assert mm.ok, mm.error
    assert mm.shared_bytes == 98304 and mm.buffer_bytes == 16384 and mm.records_per_warp == 256
    assert mm.profile_scratch_bytes == 16512
    # Triton 3.6's AMD lowering aborts on record stores to global memory: refused up front.
    hip = check_file(aot_files["gfx942"], options=LoweringOptions(buffer_type="global"))
    assert not hip.ok and "does not implement record stores to global memory" in hip.error


def test_unbalanced_record_fails_with_the_compiler_message(tmp_path):
    text = (DATA / "add_kernel.ttgir").read_text()
    bad = tmp_path / "bad.ttgir"
    bad.write_text(text.replace('      proton.record end "iter"\n', "", 1))
    r = check_file(bad)
    assert not r.ok
    assert "bad.ttgir:30:7: error: The scope name 'iter' is not properly closed" in r.error
    assert "mlir_reproducer" not in r.error and len(r.error.splitlines()) < 15


def test_granularity_warp_group_is_refused_clearly():
    r = check_file(DATA / "add_kernel.ttgir", options=LoweringOptions(granularity="warp-group"))
    assert not r.ok and "warp granularity only" in r.error


def test_user_errors(tmp_path):
    with pytest.raises(UserError, match="no such TTGIR file"):
        check_file(tmp_path / "missing.ttgir")
    text = (DATA / "add_kernel.ttgir").read_text().replace(', ttg.target = "cuda:90"', "")
    p = tmp_path / "no_target.ttgir"
    p.write_text(text)
    assert file_target(text) is None
    with pytest.raises(UserError, match="has no ttg.target attribute; pass --target"):
        check_file(p)
    assert check_file(p, "cuda:90").ok  # given a target it compiles
    with pytest.raises(UserError, match="unknown target"):
        check_file(p, "cuda:banana")


def test_plan_picks_files_by_target(tmp_path, aot_files):
    shutil.copy(DATA / "add_kernel.ttgir", tmp_path / "a.ttgir")
    shutil.copy(aot_files["gfx942"], tmp_path / "b.ttgir")
    jobs, skipped = plan([tmp_path], ["hip:gfx942"])
    assert [(Path(j.path).name, j.target) for j in jobs] == [("b.ttgir", "hip:gfx942")]
    assert len(skipped) == 1 and "made for cuda:90" in skipped[0]
    with pytest.raises(UserError, match="no file to check"):
        plan([tmp_path / "a.ttgir"], ["cuda:100"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no .ttgir files"):
        plan([tmp_path / "empty"], None)


def test_llvm_abort_is_isolated_to_its_file(tmp_path):
    # sm_90 wgmma IR claimed for sm_80: LLVM aborts the process ("Cannot select"). The worker
    # dies, the file fails with that message, and the next file is still checked.
    (tmp_path / "a_bad.ttgir").write_text((DATA / "mm_kernel.ttgir").read_text().replace('"cuda:90"', '"cuda:80"'))
    shutil.copy(DATA / "add_kernel.ttgir", tmp_path / "b_good.ttgir")
    reports, _ = check_paths([tmp_path])
    assert [r.ok for r in reports] == [False, True]
    assert "crashed" in reports[0].error and "LLVM ERROR: Cannot select" in reports[0].error


def test_diagnostics_keep_errors_and_carets():
    text = "x\nf.ttgir:3:5: error: bad thing\n    op\n    ^\n#loc = 1\n{-#\n reproducer\n#-}\n"
    assert diagnostics(text) == "f.ttgir:3:5: error: bad thing\n    op\n    ^"


def test_cli_check_exit_codes(tmp_path):
    ok = invoke(["check", str(DATA), "--target", "cuda:90", "--clock", "32"], code=0)
    assert "2 regions: 0 'kernel', 1 'iter' (in 'kernel')" in ok.output
    # The defaults: warp 0 of add_kernel's 4, lowered directly: header, loop count, kernel
    # clocks and 4 iterations x 2 clocks (its loop runs 4 times) in 96 B (Proton's default,
    # 8 KiB for all 4 warps, was 8320 B/CTA; one warp in Proton's shared buffer 2176).
    assert ("profile scratch 96 B/CTA (88 B of records, 22 clock slots); stored by warp 0's "
            "first thread") in ok.output and "2 ok, 0 failed" in ok.output
    # iterations 0 and 3 of the 4: 2 x 2 clocks fewer
    nth = invoke(["check", str(DATA / "add_kernel.ttgir"), "--sample-iterations", "3"])
    assert nth.exit_code == 0 and "(56 B of records, 14 clock slots)" in nth.output, nth.output
    zero = invoke(["check", str(DATA), "--sample-iterations", "0"])
    assert zero.exit_code == 2 and "--sample-iterations" in zero.output
    bad = tmp_path / "bad.ttgir"
    bad.write_text((DATA / "add_kernel.ttgir").read_text().replace('proton.record end "iter"', ""))
    failed = invoke(["check", str(bad)])
    assert failed.exit_code == 1 and "FAIL" in failed.output and "not properly closed" in failed.output
    missing = invoke(["check", str(tmp_path / "nope.ttgir")])
    assert missing.exit_code == 2 and "no such file or directory" in missing.output
    badopt = invoke(["check", str(DATA), "--buffer-size", "1000"])
    assert badopt.exit_code == 2 and "not a power of two" in badopt.output
    glob = invoke(["check", str(DATA / "mm_kernel.ttgir"), "--buffer-type", "global",
                   "--buffer-size", "16384", "--warps", "all"], code=0)
    assert "shared memory 98304 B (kernel only) of 232448" in glob.output
    assert ("records in global memory: profile scratch 16512 B/CTA (16384 B of records, "
            "256 records/warp)") in glob.output
    badtype = invoke(["check", str(DATA), "--buffer-type", "texture"])
    assert badtype.exit_code == 2 and "--buffer-type" in badtype.output
