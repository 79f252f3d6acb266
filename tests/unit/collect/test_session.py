"""Runtime pieces that need no GPU: the override tree, argv, configs, messages, the CLI."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import helpers
import pytest
import torch
import triton
import triton.language as tl
from helpers.aot_kernels import compiling_program
from helpers.cli import invoke
from triton.backends.compiler import GPUTarget
from triton.runtime.errors import OutOfResources

from proton_inject.api import profile
from proton_inject.collect.compiler_patches import ProfileBufferTooLarge, out_of_resources_type
from proton_inject.collect.launches import config_name, config_of_autotune, config_of_kernel
from proton_inject.collect.session import Session
from proton_inject.dump.program import split_program_argv
from proton_inject.errors import UserError
from proton_inject.lower.options import LoweringOptions
from proton_inject.lower.proton import installed

DATA = helpers.DATA / "h100-triton3.6"
H100 = GPUTarget("cuda", 90, 32)
no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")


@triton.jit
def fill_kernel(out_ptr, n, VALUE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.full([BLOCK], VALUE, tl.float32), mask=offs < n)


def _tree(tmp_path: Path) -> Path:
    """An instrumented tree as insert writes one (stale binaries beside it are ignored)."""
    root = tmp_path / "inst"
    kernels = []
    for name in ("add_kernel", "mm_kernel"):
        d = root / f"HASH{name.upper()}"
        d.mkdir(parents=True)
        shutil.copy(DATA / f"{name}.ttgir", d / f"{name}.ttgir")
        (d / f"{name}.cubin").write_bytes(b"\x7fELF stale")
        kernels.append({"kernel": name, "file": f"{d.name}/{name}.ttgir", "target": "cuda:90",
                        "regions": []})
    (root / "manifest.json").write_text(json.dumps({
        "format": 1, "rules": {"kernel_scope": True, "loops": "outer", "loop_depth": 1},
        "kernels": kernels}))
    return root






def test_split_program_argv(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text("print('hi')\n")
    assert split_program_argv(["python", str(script), "-x", "1"], "run") == ("path", str(script), ["-x", "1"])
    assert split_program_argv([str(script)], "run") == ("path", str(script), [])
    assert split_program_argv(["python3", "-m", "pkg.mod", "a"], "run") == ("module", "pkg.mod", ["a"])
    with pytest.raises(UserError, match="no program given"):
        split_program_argv(["python"], "run")
    with pytest.raises(UserError, match="no such script"):
        split_program_argv(["python", str(tmp_path / "nope.py")], "run")
    with pytest.raises(UserError, match="not supported"):
        split_program_argv(["python", "-c", "pass"], "run")
    for argv in (["torchrun", "--nproc-per-node", "2", str(script)],
                 ["python", "-m", "torch.distributed.run", str(script)]):
        with pytest.raises(UserError, match="put torchrun outside: torchrun .* --no-python proton-inject run"):
            split_program_argv(argv, "run")


def test_config_names_from_a_real_compile(tmp_path):
    from triton.compiler import ASTSource

    src = ASTSource(
        fill_kernel,
        signature={"out_ptr": "*fp32", "n": "i32", "VALUE": "constexpr", "BLOCK": "constexpr"},
        constexprs={"VALUE": 3.0, "BLOCK": 128},
    )
    with triton.knobs.cache.scope():
        triton.knobs.cache.dir = str(tmp_path)
        ck = triton.compile(src, target=H100, options={"num_warps": 2, "num_stages": 2})
    cfg = config_of_kernel(ck)
    assert cfg == {"VALUE": 3.0, "BLOCK": 128, "num_warps": 2, "num_stages": 2, "num_ctas": 1}
    assert config_name(cfg).startswith("VALUE=3.0, BLOCK=128, num_warps=2")
    tuned = config_of_autotune(triton.Config({"BLOCK": 64}, num_warps=8, num_stages=4))
    assert tuned == {"BLOCK": 64, "num_warps": 8, "num_stages": 4, "num_ctas": 1}


def test_shared_memory_overflow_message_names_kernel_and_fix(tmp_path):
    with triton.knobs.cache.scope(), triton.knobs.compilation.scope():
        triton.knobs.cache.dir = str(tmp_path)
        triton.knobs.compilation.always_compile = True
        # Every warp recording into Proton's buffer: 8 warps x 1 KiB.
        every_warp = LoweringOptions(warps="all", auto_size=False)
        with installed(every_warp, target=H100):
            mode = triton.knobs.compilation.instrumentation_mode
            ck = triton.compile(str(DATA / "mm_kernel.ttgir"), target=H100, options={"instrumentation_mode": mode})
    s = Session(None, tmp_path / "unused", options=every_warp)
    # As if the device allowed 100 KiB: the 96 KiB pipeline fits, its 8 KiB of records do not.
    oor = OutOfResources(106496, 102400, "shared memory")
    err = s.explain_out_of_resources(ck, oor, out_of_resources_type(), build_max_shared=232448)
    assert isinstance(err, OutOfResources) and isinstance(err, ProfileBufferTooLarge)
    msg = str(err)
    assert "mm_kernel" in msg and "106496 B" in msg and "8192 B of it for the record buffer" in msg
    assert "--buffer-size 4096" in msg  # 4096 B free: 8 warps x 512 B
    other = OutOfResources(5, 4, "threads")
    assert s.explain_out_of_resources(ck, other, out_of_resources_type()) is other


def test_shared_memory_advice_counts_the_warps_that_record(tmp_path):
    """A warp-specialized kernel records in the first warp of each of its 3 partitions by
    default: the advice splits the real buffer over those 3 segments and suggests a size Proton
    takes (3 x a power of two), not one warp's."""
    from helpers.ttgir import compile_lowered

    from proton_inject.instrument.insert import insert_text
    from proton_inject.instrument.rules import Rules

    src = helpers.REPO / "ttgir_samples" / "cuda-90" / "attn_fwd_ws_kernel.ttgir"
    f = tmp_path / "attn_fwd_ws_kernel.ttgir"
    f.write_text(insert_text(src.read_text(), Rules().with_defaults()).text)
    ck = compile_lowered(f, LoweringOptions(), tmp_path / "cache")
    opts = LoweringOptions().for_kernel(ck.asm["ttgir"], 232448)
    assert opts.selected == (0, 4, 8)
    need = int(ck.metadata.shared)
    oor = OutOfResources(need, need - 256, "shared memory")  # as if 256 B were missing
    msg = str(Session(None, tmp_path / "unused").explain_out_of_resources(
        ck, oor, out_of_resources_type(), build_max_shared=232448))
    buf = int(msg.split(" B of it for the record buffer")[0].rsplit("(", 1)[1])
    fit = int(msg.split("--buffer-size ")[1].split(" ")[0])
    per = fit // 3
    assert fit % 3 == 0 and per & (per - 1) == 0, msg  # 3 recording warps, a power of two each
    assert buf - 256 >= fit > (buf - 256) // 2, msg  # the largest that fits




def test_session_rejects_bad_limits(tmp_path):
    with pytest.raises(UserError, match="--max-launches must be >= 0"):
        Session(None, tmp_path, max_launches=-1)
    with pytest.raises(UserError, match="--max-pending-mb must be > 0"):
        Session(None, tmp_path, max_pending_mb=0)


@no_gpu
def test_no_gpu_is_a_clear_error_and_leaves_nothing_installed(tmp_path):
    mode = triton.knobs.compilation.instrumentation_mode
    with pytest.raises(UserError, match="no CUDA GPU is visible"):
        with profile(instrumented=_tree(tmp_path), out=tmp_path / "traces"):
            pass
    assert triton.knobs.compilation.instrumentation_mode == mode
    assert not (tmp_path / "traces").exists()


def test_cli_run_option_errors(tmp_path):
    root = str(_tree(tmp_path))
    script = tmp_path / "prog.py"
    script.write_text("import sys; sys.exit(3)\n")
    base = ["run", root, "-o", str(tmp_path / "t")]
    r = invoke([*base, "--clock", "48", "--", "python", str(script)])
    assert r.exit_code == 2 and "--clock" in r.output
    r = invoke([*base, "--warps", "a,b", "--", "python", str(script)])
    assert r.exit_code == 2 and "comma-separated warp ids" in r.output
    r = invoke([*base, "--buffer-size", "1000", "--", "python", str(script)])
    assert r.exit_code == 2 and "not a power of two" in r.output
    r = invoke([*base, "--max-launches", "-2", "--", "python", str(script)])
    assert r.exit_code == 2 and "--max-launches must be >= 0" in r.output
    if not torch.cuda.is_available():
        r = invoke([*base, "--", "python", str(script)])
        assert r.exit_code == 2 and "no CUDA GPU is visible" in r.output


_PROGRAM = compiling_program("twice_kernel", 2, (64, 128), 2, """
    print("argv", sys.argv[1:])
    sys.exit(3)
""")


def test_dump_program_writes_ttgir_and_manifest(tmp_path):
    from proton_inject.dump.program import dump_program

    script = tmp_path / "prog.py"
    script.write_text(_PROGRAM)
    res = dump_program(["python", str(script), "--flag"], tmp_path / "dump")
    assert res.exit_code == 3 and res.compiled == 2 and len(res.kernels) == 2
    files = sorted(p.relative_to(tmp_path / "dump").as_posix() for p in (tmp_path / "dump").rglob("*"))
    ttgir = [f for f in files if f.endswith(".ttgir")]
    assert len(ttgir) == 2 and all(f.endswith("/twice_kernel.ttgir") for f in ttgir)
    assert set(files) - set(ttgir) - {f.split("/")[0] for f in ttgir} == {"manifest.json"}
    manifest = json.loads((tmp_path / "dump" / "manifest.json").read_text())
    blocks = sorted(k["constexprs"]["BLOCK"] for k in manifest["kernels"])
    assert blocks == [64, 128]
    k = manifest["kernels"][0]
    assert k["mode"] == "program" and k["program"] == [str(script), "--flag"]
    assert k["target"] == "cuda:90" and k["num_warps"] == 2 and k["divisibility_16"] == ["x_ptr"]
    assert k["source_file"] == str(script)


def test_dump_program_errors(tmp_path):
    from proton_inject.dump.program import dump_program

    script = tmp_path / "prog.py"
    script.write_text(_PROGRAM)
    with pytest.raises(UserError, match="none named like --kernel 'matmul': twice_kernel"):
        dump_program(["python", str(script)], tmp_path / "d1", kernel="matmul")
    quiet = tmp_path / "quiet.py"
    quiet.write_text("print('no kernels here')\n")
    with pytest.raises(UserError, match="compiled no Triton kernel"):
        dump_program(["python", str(quiet)], tmp_path / "d2")
    with pytest.raises(UserError, match="no such script"):
        dump_program(["python", str(tmp_path / "missing.py")], tmp_path / "d3")


def test_own_tensors_ignore_the_programs_default_device():
    """Pinned host buffers once came out as CUDA tensors under the program's default device."""
    import torch

    from proton_inject.collect.buffers import outside_program_modes

    with torch.device("meta"):
        assert torch.empty(2).device.type == "meta"
        with outside_program_modes():
            assert torch.empty(2).device.type == "cpu"
        assert torch.empty(2).device.type == "meta"
