"""Ahead-of-time dump: target/signature/constexpr parsing, the override layout, and the hash.

Compiles only two tiny kernels (well under a second each on the CPU, no GPU needed).
"""

from __future__ import annotations

import hashlib
import json
import re
import textwrap
from pathlib import Path

import pytest
from helpers.aot_kernels import SPEC_SRC, TUNED_SRC, binder_hash, write_kernel
from helpers.cli import invoke

from proton_inject.dump import aot as override
from proton_inject.dump import dump_tree, program, signature
from proton_inject.errors import UserError

KERNEL_SRC = textwrap.dedent(
    """
    import triton
    import triton.language as tl


    @triton.jit
    def scale_kernel(x_ptr, out_ptr, n, stride, factor, BLOCK: tl.constexpr, REPS: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for _ in range(REPS):
            acc += tl.load(x_ptr + offs * stride, mask=mask) * factor
        tl.store(out_ptr + offs, acc, mask=mask)


    @triton.jit(do_not_specialize=["n"], do_not_specialize_on_alignment=["x_ptr"])
    def pinned_kernel(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, offs, mask=offs < n)


    not_a_kernel = 3
    """
)
SIG = "x_ptr=*fp32,out_ptr=*fp32,n=i32:16,stride=i32,factor=fp32"
CONSTEXPRS = {"BLOCK": 256, "REPS": 2}


@pytest.fixture(scope="module")
def kernel_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("src") / "kernels.py"
    path.write_text(KERNEL_SRC)
    return path


@pytest.fixture(scope="module")
def result(kernel_file) -> override.AotResult:
    return override.compile_aot(kernel_file, "scale_kernel", SIG, CONSTEXPRS, "cuda:90",
                                num_warps=2, num_stages=3)


# --- parsing ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,backend,arch,warp",
    [("cuda:80", "cuda", 80, 32), ("cuda:90", "cuda", 90, 32), ("cuda:100", "cuda", 100, 32),
     ("hip:gfx942", "hip", "gfx942", 64)],
)
def test_parse_target(text, backend, arch, warp):
    t = override.parse_target(text)
    assert (t.backend, t.arch, t.warp_size) == (backend, arch, warp)
    assert override.format_target(t) == text


@pytest.mark.parametrize("text", ["cuda", "cuda:", "cuda:abc", "sm90", "rocm:gfx942",
                                  "hip:942", "", "cuda:90:32", "cuda:70"])
def test_parse_target_rejects(text):
    with pytest.raises(UserError) as e:
        override.parse_target(text)
    msg = str(e.value)
    assert repr(text) in msg
    if text != "cuda:70":
        assert "cuda:90" in msg and "hip:gfx942" in msg  # says what would be accepted


def test_parse_signature():
    assert override.parse_signature("a_ptr=*fp16, b_ptr=*fp16:16 ,M=i32:1,s=fp32") == {
        "a_ptr": "*fp16", "b_ptr": "*fp16:16", "M": "i32:1", "s": "fp32"}
    # tensordesc types contain commas
    sig = override.parse_signature("d=tensordesc<fp16[128, 64]>,K=i32")
    assert sig == {"d": "tensordesc<fp16[128, 64]>", "K": "i32"}


@pytest.mark.parametrize(
    "text,needle",
    [
        ("", "signature is empty"),
        ("a_ptr", "expected NAME=TYPE"),
        ("a_ptr=*fp16,,M=i32", "empty entry"),
        ("a_ptr=*fp16,a_ptr=*fp32", "given twice"),
        ("a_ptr=", "missing type"),
        ("1a=i32", "not a parameter name"),
        ("a_ptr=*float16", "unknown type '*float16'"),
        ("M=int", "unknown type 'int'"),
        ("M=i32:8", "divisibility hint must be :16 or :1"),
    ],
)
def test_parse_signature_rejects(text, needle):
    with pytest.raises(UserError, match=re.escape(needle)):
        override.parse_signature(text)


def test_parse_constexprs():
    got = signature.parse_constexprs(["B=128", "X=0.5", "T=true", "F=False", "S=fp16", "H=-3"])
    assert got == {"B": 128, "X": 0.5, "T": True, "F": False, "S": "fp16", "H": -3}
    assert type(got["B"]) is int and type(got["T"]) is bool


def test_constexpr_strings_that_look_like_other_types_stay_strings():
    """Issue 27 item 4: `ACT=none` meant the string for a library's activation switch; quoted,
    a value is never converted, and writing a value back quotes what would not read back."""
    got = signature.parse_constexprs(["A='none'", 'B="1e-5"', "C='08'", "D='true'", "E=none", "F=1e-5"])
    assert got == {"A": "none", "B": "1e-5", "C": "08", "D": "true", "E": None, "F": 1e-5}
    for v in ("none", "1e-5", "08", "true", "gelu", None, 7, 0.5, True):
        assert signature.parse_constexpr_value(signature.constexpr_text(v)) == v
        assert type(signature.parse_constexpr_value(signature.constexpr_text(v))) is type(v)
    with pytest.raises(UserError, match="leading zero"):
        signature.parse_constexprs(["C=08"])
    assert signature.constexpr_type("none") == "str" and signature.constexpr_type(None) == "NoneType"


@pytest.mark.parametrize("items,needle", [(["B"], "expected NAME=VALUE"), (["B="], "missing value"),
                                          (["B=1", "B=2"], "given twice"), (["=3"], "not a parameter")])
def test_parse_constexprs_rejects(items, needle):
    with pytest.raises(UserError, match=needle):
        signature.parse_constexprs(items)


# --- compiling and dumping ---------------------------------------------------------


def test_compile_aot_result(result, kernel_file):
    assert result.kernel_name == "scale_kernel"
    assert re.fullmatch(r"[A-Z2-7]{52}", result.hash)  # base32 of a sha256, no padding
    assert result.target == "cuda:90"
    assert (result.num_warps, result.num_stages, result.num_ctas) == (2, 3, 1)
    assert result.source_file == str(kernel_file.resolve())
    assert result.signature == {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "stride": "i32",
                                "factor": "fp32", "BLOCK": "constexpr", "REPS": "constexpr"}
    assert result.constexprs == CONSTEXPRS
    assert result.divisibility_16 == ["x_ptr", "out_ptr", "n"]
    assert "tt.func public @scale_kernel" in result.ttgir
    assert '"ttg.num-warps" = 2' in result.ttgir and 'ttg.target = "cuda:90"' in result.ttgir
    assert "scf.for" in result.ttgir


def _jit_hash(fn, *args, **kwargs) -> str:
    """The override hash JITFunction.run computes for a launch with these arguments."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    backend = make_backend(GPUTarget("cuda", 90, 32))
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    bound, spec, opts = binder(*args, **kwargs)
    _, signature, constexprs, attrs = fn._pack_args(backend, {}, bound, spec, opts)
    return override.override_hash(ASTSource(fn, signature, constexprs, attrs))


def test_hash_is_the_one_the_jit_launcher_uses(result, kernel_file):
    """Build the ASTSource exactly as JITFunction.run would for real torch arguments."""
    torch = pytest.importorskip("torch")
    fn = override.load_kernel(kernel_file, "scale_kernel")
    x = torch.empty(4096)  # CPU storage is 16-byte aligned, like any CUDA allocation
    assert _jit_hash(fn, x, x, 4096, 3, 0.5, BLOCK=256, REPS=2) == result.hash
    # A unit stride is specialized to the constant 1: it must then be passed as a constexpr.
    src, *_ = override.build_source(
        fn, override.parse_signature(SIG.replace(",stride=i32", "")), {**CONSTEXPRS, "stride": 1},
        "t")
    assert _jit_hash(fn, x, x, 4096, 1, 0.5, BLOCK=256, REPS=2) == override.override_hash(src)


def test_hash_honours_do_not_specialize(kernel_file):
    torch = pytest.importorskip("torch")
    fn = override.load_kernel(kernel_file, "pinned_kernel")
    src, *_ = override.build_source(fn, {"x_ptr": "*fp32", "n": "i32"}, {"BLOCK": 64}, "t")
    assert _jit_hash(fn, torch.empty(64), 64, BLOCK=64) == override.override_hash(src)
    with pytest.raises(UserError, match="do_not_specialize, so the JIT"):
        override.build_source(fn, {"x_ptr": "*fp32", "n": "i32:16"}, {"BLOCK": 64}, "t")
    with pytest.raises(UserError, match="do_not_specialize_on_alignment"):
        override.build_source(fn, {"x_ptr": "*fp32:16", "n": "i32"}, {"BLOCK": 64}, "t")


def test_hash_is_triton_dump_dir_name(result, kernel_file, tmp_path):
    """Triton's own TRITON_KERNEL_DUMP names the directory of this source the same way."""
    import triton

    fn = override.load_kernel(kernel_file, "scale_kernel")
    src, *_ = override.build_source(fn, override.parse_signature(SIG), CONSTEXPRS, "t")
    with triton.knobs.cache.scope(), triton.knobs.compilation.scope():
        triton.knobs.cache.dir = str(tmp_path / "cache")
        triton.knobs.cache.dump_dir = str(tmp_path / "dump")
        triton.knobs.compilation.dump_ir = True
        triton.compile(src, target=override.parse_target("cuda:90"), options={"num_warps": 2})
    assert [p.name for p in (tmp_path / "dump").iterdir()] == [result.hash]


def test_dump_is_picked_up_by_triton_override(result, tmp_path, capfd):
    import triton

    fn = override.load_kernel(result.source_file, "scale_kernel")
    src, *_ = override.build_source(fn, override.parse_signature(SIG), CONSTEXPRS, "t")
    dump_tree.write_dump([result], tmp_path / "dump")
    with triton.knobs.cache.scope(), triton.knobs.compilation.scope():
        triton.knobs.cache.dir = str(tmp_path / "cache")
        triton.knobs.cache.override_dir = str(tmp_path / "dump")
        triton.knobs.compilation.override = True
        triton.compile(src, target=override.parse_target("cuda:90"), options={"num_warps": 2})
    out = capfd.readouterr().out
    assert f"Overriding kernel with file {tmp_path / 'dump' / result.ttgir_relpath}" in out


def test_write_dump_layout(result, tmp_path):
    out = tmp_path / "dump"
    written = dump_tree.write_dump([result], out)
    assert written == [out / result.hash / "scale_kernel.ttgir"]
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert files == sorted([f"{result.hash}/scale_kernel.ttgir", "manifest.json"])
    assert (out / result.ttgir_relpath).read_text() == result.ttgir
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["version"] == 1 and manifest["triton_version"].startswith("3.6")
    (entry,) = manifest["kernels"]
    assert entry == {
        "name": "scale_kernel",
        "hash": result.hash,
        "ttgir": f"{result.hash}/scale_kernel.ttgir",
        "source_file": result.source_file,
        "target": "cuda:90",
        "num_warps": 2,
        "num_stages": 3,
        "num_ctas": 1,
        "signature": result.signature,
        "constexprs": {"BLOCK": 256, "REPS": 2},
        "divisibility_16": ["x_ptr", "out_ptr", "n"],
        "mode": "aot",
        "source_sha256": hashlib.sha256(Path(result.source_file).read_bytes()).hexdigest(),
        "fn_key": result.fn_key,
    }
    assert len(result.fn_key) == 16


def test_write_dump_merges_and_rejects_hash_clash(result, tmp_path):
    out = tmp_path / "dump"
    other = override.AotResult(**{**result.__dict__, "kernel_name": "other", "hash": "X" * 52})
    dump_tree.write_dump([result], out)
    dump_tree.write_dump([other], out)
    names = [e["name"] for e in json.loads((out / "manifest.json").read_text())["kernels"]]
    assert names == ["other", "scale_kernel"]
    dump_tree.write_dump([result], out)  # rewriting the same kernel replaces its entry
    assert len(json.loads((out / "manifest.json").read_text())["kernels"]) == 2
    clash = override.AotResult(**{**result.__dict__, "num_warps": 8, "ttgir": "different"})
    with pytest.raises(UserError, match="same override hash"):
        dump_tree.write_dump([result, clash], tmp_path / "other")


def test_compile_aot_errors(kernel_file, tmp_path):
    with pytest.raises(UserError, match=r"nope\.py: no such file"):
        override.compile_aot(tmp_path / "nope.py", "k", SIG, CONSTEXPRS, "cuda:90")
    with pytest.raises(UserError, match=r"no Triton kernel named 'missing' .*scale_kernel"):
        override.compile_aot(kernel_file, "missing", SIG, CONSTEXPRS, "cuda:90")
    with pytest.raises(UserError, match="not a Triton kernel"):
        override.compile_aot(kernel_file, "not_a_kernel", SIG, CONSTEXPRS, "cuda:90")
    with pytest.raises(UserError, match=r"missing REPS \(constexpr\)"):
        override.compile_aot(kernel_file, "scale_kernel", SIG, {"BLOCK": 256}, "cuda:90")
    with pytest.raises(UserError, match="no parameter named 'bogus'"):
        override.compile_aot(kernel_file, "scale_kernel", SIG + ",bogus=i32", CONSTEXPRS, "cuda:90")
    with pytest.raises(UserError) as e:  # Triton's own error, located in the user's file
        override.compile_aot(kernel_file, "scale_kernel", SIG, {"BLOCK": 100, "REPS": 2}, "cuda:90")
    assert f"{kernel_file}:" in str(e.value) and "power of 2" in str(e.value)
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('boom')\n")
    with pytest.raises(UserError, match="importing it failed: RuntimeError: boom"):
        override.compile_aot(broken, "k", SIG, CONSTEXPRS, "cuda:90")


# --- command line --------------------------------------------------------------------


def _dump_args(spec: str, out: Path, *extra: str) -> list[str]:
    return ["dump", "--target", "hip:gfx942", spec, "--signature", SIG, "--constexpr", "BLOCK=256",
            "--constexpr", "REPS=2", "--num-warps", "4", "-o", str(out), *extra]


def test_cli_dump_aot(kernel_file, tmp_path):
    out = tmp_path / "dump"
    res = invoke(_dump_args(f"{kernel_file}:scale_kernel", out), code=0)
    assert "wrote 1 kernel(s)" in res.output
    (entry,) = json.loads((out / "manifest.json").read_text())["kernels"]
    assert entry["target"] == "hip:gfx942" and entry["num_warps"] == 4
    assert '"ttg.threads-per-warp" = 64' in (out / entry["ttgir"]).read_text()


def test_cli_missing_kernel_exits_2(kernel_file, tmp_path):
    res = invoke(_dump_args(f"{kernel_file}:nope", tmp_path / "d"), code=2)
    assert f"proton-inject: error: {kernel_file}: no Triton kernel named 'nope'" in res.output
    assert "Traceback" not in res.output
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["dump", "x.py:k"], "needs --target"),
        (["dump", "--target", "cuda:90", "--", "python", "t.py"], "only apply to an ahead-of-time"),
        (["dump"], "give FILE.py:KERNEL"),
        (["dump", "--target", "cuda:9x", "x.py:k"], "unknown target 'cuda:9x'"),
    ],
)
def test_cli_dump_usage_errors(argv, needle):
    res = invoke(argv, code=2)
    assert needle in res.output


# --- the hash of every specialization, against Triton's own launch binder -----------------


SPEC_CASES = [
    # (name, launch args builder, --signature, --constexpr)
    ("string and float constexprs, aligned pointers",
     lambda t: ((t(256), t(256), t(256), 4096, 7, 0.5, True), dict(MODE="mean", PREC="ieee",
                                                                   HAS_MASK=True, EPS=1e-6)),
     "x_ptr=*fp32,y_ptr=*fp32,mask_ptr=*fp32,n=i32:16,seed=i32,scale=fp32,flag=u1",
     {"MODE": "mean", "PREC": "ieee", "HAS_MASK": True, "EPS": 1e-6}),
    ("None pointer, odd size, bool false, default BLOCK",
     lambda t: ((t(256), t(256), None, 1000, 32, 2.0, False), dict(MODE="sum", PREC="tf32",
                                                                    HAS_MASK=False, EPS=0.0)),
     "x_ptr=*fp32,y_ptr=*fp32,mask_ptr=none,n=i32,seed=i32,scale=fp32,flag=u1",
     {"MODE": "sum", "PREC": "tf32", "HAS_MASK": False, "EPS": 0.0}),
    ("None constexpr value, unit size, unaligned pointer, explicit BLOCK",
     lambda t: ((t(256)[1:], t(256), t(256), 1, 0, 1.0, True), dict(MODE=None, PREC="ieee",
                                                                     HAS_MASK=None, EPS=3,
                                                                     BLOCK=64)),
     "x_ptr=*fp32:1,y_ptr=*fp32,mask_ptr=*fp32,seed=i32,scale=fp32,flag=u1",
     {"n": 1, "MODE": None, "PREC": "ieee", "HAS_MASK": None, "EPS": 3, "BLOCK": 64}),
    ("a string holding 'D' and 'S' (parsed as keys by the backend)",
     lambda t: ((t(256), t(256), t(256), 64, 5, 1.5, False), dict(MODE="DS", PREC="ieee",
                                                                  HAS_MASK=True, EPS=2.5)),
     "x_ptr=*fp32,y_ptr=*fp32,mask_ptr=*fp32,n=i32:16,seed=i32,scale=fp32,flag=u1",
     {"MODE": "DS", "PREC": "ieee", "HAS_MASK": True, "EPS": 2.5}),
]


@pytest.fixture(scope="module")
def spec_kernel(tmp_path_factory):
    path = write_kernel(tmp_path_factory.mktemp("spec"), "spec_kernels", SPEC_SRC)
    return path, override.load_kernel(path, "spec_kernel")


@pytest.mark.parametrize("target", ["cuda:90", "hip:gfx942"])
@pytest.mark.parametrize("case", SPEC_CASES, ids=[c[0] for c in SPEC_CASES])
def test_hash_matches_binder_for_every_specialization(spec_kernel, case, target):
    """Strings, None, bools, floats, do_not_specialize, divisibility; CUDA and AMD keys."""
    torch = pytest.importorskip("torch")
    _, fn = spec_kernel
    _, build, sig, cx = case
    args, kwargs = build(lambda n: torch.empty(n))
    src, *_ = override.build_source(fn, override.parse_signature(sig), cx, "t",
                                     override.parse_target(target))
    assert override.override_hash(src) == binder_hash(fn, target, *args, **kwargs)


def test_string_constexpr_has_an_attrs_entry(spec_kernel):
    """Left out, the hash silently differs from the launch's (Liger cross entropy, fla)."""
    _, fn = spec_kernel
    _, _, sig, cx = SPEC_CASES[0]
    src, *_ = override.build_source(fn, override.parse_signature(sig), cx, "t")
    idx = [p.name for p in fn.params].index("MODE")
    assert src.attrs[(idx,)] == []
    assert src.constants[(idx,)] == "mean"


def test_none_values(spec_kernel):
    assert signature.parse_constexprs(["M=None", "N=none"]) == {"M": None, "N": None}
    assert override.parse_signature("m=none,x=*fp16") == {"m": "none", "x": "*fp16"}
    path, _ = spec_kernel  # `if mask_ptr is not None:` is compiled out for a None argument
    _, _, sig, cx = SPEC_CASES[1]
    r = override.compile_aot(path, "spec_kernel", sig, cx, "cuda:90")
    assert r.signature["mask_ptr"] == "constexpr" and r.constexprs["mask_ptr"] is None
    assert r.ttgir.count("tt.load") == 1


# --- autotune and heuristics ------------------------------------------------------------

TUNED_SIG = "a_ptr=*fp32,b_ptr=none,n=i32:16"


@pytest.fixture(scope="module")
def tuned_file(tmp_path_factory) -> Path:
    return write_kernel(tmp_path_factory.mktemp("tuned"), "tuned", TUNED_SRC)


def test_autotune_dumps_one_file_per_config(tuned_file):
    torch = pytest.importorskip("torch")
    results = override.compile_aot_all(tuned_file, "tuned_kernel", TUNED_SIG, {"EVEN": True},
                                       "cuda:90")
    assert [(r.config, r.num_warps, r.num_stages) for r in results] == [(0, 2, 3), (1, 4, 2),
                                                                      (2, 8, 2)]
    assert [r.constexprs["BLOCK"] for r in results] == [64, 128, 128]
    assert all(r.constexprs["HAS_B"] is False for r in results)  # heuristic computed
    assert results[1].config_desc == "BLOCK=128, num_warps=4, num_stages=2"
    # each is the hash the launch of that config looks up
    fn = override.load_kernel(tuned_file, "tuned_kernel")
    x = torch.empty(1024)
    for r in results:
        assert r.hash == binder_hash(fn, "cuda:90", x, None, 1024, BLOCK=r.constexprs["BLOCK"],
                                      HAS_B=False, EVEN=True)
    kept, notes = dump_tree.one_per_hash(results)
    assert [r.config for r in kept] == [0, 1]
    assert len(notes) == 1 and "config [2]" in notes[0] and "--config 2" in notes[0]
    (one,) = override.compile_aot_all(tuned_file, "tuned_kernel", TUNED_SIG, {"EVEN": True},
                                      "cuda:90", config=2)
    assert (one.config, one.num_warps, one.constexprs["BLOCK"]) == (2, 8, 128)


def test_autotune_and_heuristics_errors(tuned_file):
    with pytest.raises(UserError, match=r"computes EVEN from the value of 'n'.*--constexpr EVEN="):
        override.compile_aot_all(tuned_file, "tuned_kernel", TUNED_SIG, {}, "cuda:90", config=0)
    with pytest.raises(UserError, match=r"--config 3: the kernel has 3 autotune configs"):
        override.compile_aot_all(tuned_file, "tuned_kernel", TUNED_SIG, {"EVEN": True}, "cuda:90",
                                 config=3)
    with pytest.raises(UserError) as e:
        override.compile_aot_all(tuned_file, "tuned_kernel", "a_ptr=*fp32,n=i32", {"EVEN": True},
                                 "cuda:90", config=0)
    msg = str(e.value)
    assert "missing b_ptr" in msg and "[1] BLOCK=128, num_warps=4, num_stages=2" in msg
    assert "@triton.heuristics computes HAS_B, EVEN" in msg


def test_default_options_are_tritons(kernel_file):
    cuda = override.compile_aot(kernel_file, "scale_kernel", SIG, CONSTEXPRS, "cuda:90")
    hip = override.compile_aot(kernel_file, "scale_kernel", SIG, CONSTEXPRS, "hip:gfx942")
    assert (cuda.num_warps, cuda.num_stages) == (4, 3)
    assert (hip.num_warps, hip.num_stages) == (4, 2)


def test_dump_refuses_to_replace_another_config(kernel_file, tmp_path):
    out = tmp_path / "d"
    args = ["dump", "--target", "cuda:90", f"{kernel_file}:scale_kernel", "--signature", SIG,
            "--constexpr", "BLOCK=256", "--constexpr", "REPS=2", "-o", str(out)]
    invoke([*args, "--num-warps", "4"], code=0)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    invoke([*args, "--num-warps", "4"], code=0)  # same config: fine
    res = invoke([*args, "--num-warps", "8"])
    assert res.exit_code == 2 and "4 warps" in res.output and "8 warps" in res.output
    assert "would replace it" in res.output
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_cli_dump_autotuned(tuned_file, tmp_path):
    res = invoke(["dump", "--target", "cuda:90", f"{tuned_file}:tuned_kernel",
                  "--signature", TUNED_SIG, "--constexpr", "EVEN=true",
                  "-o", str(tmp_path / "d")], code=0)
    assert "wrote 2 kernel(s)" in res.output and "config [1] BLOCK=128" in res.output
    entries = json.loads((tmp_path / "d" / "manifest.json").read_text())["kernels"]
    assert sorted(e["config"] for e in entries) == [0, 1]


@pytest.mark.parametrize("cmd", ["dump", "inspect", "insert", "strip", "check", "run", "report"])
def test_every_command_has_dash_h(cmd):
    res = invoke([cmd, "-h"])
    assert res.exit_code == 0 and res.output.startswith(f"Usage: main {cmd}")


# --- the AOT command a program dump writes ------------------------------------------------

LAUNCH_PROGRAM = textwrap.dedent(
    """
    import sys
    import torch
    import triton
    from triton.compiler import ASTSource, make_backend
    from triton.backends.compiler import GPUTarget
    from triton.runtime.jit import create_function_from_signature
    sys.path.insert(0, sys.argv[1])
    from spec_kernels import spec_kernel

    # No GPU here: bind realistic arguments exactly as a launch does, then compile.
    backend = make_backend(GPUTarget("cuda", 90, 32))
    binder = create_function_from_signature(spec_kernel.signature, spec_kernel.params, backend)
    t = torch.empty(256)
    for args, kw in [((t, t, None, 1000, 3, 2.0, False), dict(MODE="sum", PREC="ieee",
                                                              HAS_MASK=False, EPS=0.0)),
                     ((t[1:], t, t, 4096, 5, 0.5, True), dict(MODE=None, PREC="tf32",
                                                              HAS_MASK=True, EPS=1e-6))]:
        bound, spec, opts = binder(*args, **kw)
        _, sig, cx, attrs = spec_kernel._pack_args(backend, {}, bound, spec, opts)
        triton.compile(ASTSource(spec_kernel, sig, cx, attrs), target=backend.target,
                       options={"num_warps": 2})
    """
)


def test_program_dump_writes_the_aot_command_that_reproduces_it(spec_kernel, tmp_path):
    import shlex

    path, _ = spec_kernel
    prog = tmp_path / "prog.py"
    prog.write_text(LAUNCH_PROGRAM)
    res = program.dump_program(["python", str(prog), str(path.parent)], tmp_path / "dump")
    assert res.exit_code == 0 and len(res.kernels) == 2
    entries = json.loads((tmp_path / "dump" / "manifest.json").read_text())["kernels"]
    for e in entries:
        argv = shlex.split(e["aot_command"])
        assert argv[:2] == ["proton-inject", "dump"] and argv[-2:] == ["-o", str(tmp_path / "dump")]
        out = tmp_path / f"aot_{e['hash']}"
        invoke([*argv[1:-2], "-o", str(out)], code=0)
        (again,) = json.loads((out / "manifest.json").read_text())["kernels"]
        assert (again["hash"], again["num_warps"]) == (e["hash"], 2)
        assert (out / again["ttgir"]).read_text() == (tmp_path / "dump" / e["ttgir"]).read_text()


def test_insert_warns_when_a_marked_source_changed_since_the_dump(tmp_path):
    src = tmp_path / "marked.py"
    src.write_text(textwrap.dedent(
        """
        import triton
        import triton.language as tl


        @triton.jit
        def marked_kernel(x_ptr, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            x = tl.load(x_ptr + offs)  # proton: load
            tl.store(x_ptr + offs, x * 2)
        """))
    dump, inst = tmp_path / "dump", tmp_path / "inst"
    invoke(["dump", "--target", "cuda:90", f"{src}:marked_kernel", "--signature",
            "x_ptr=*fp32", "--constexpr", "BLOCK=64", "-o", str(dump)], code=0)
    res = invoke(["insert", str(dump), "-o", str(inst)])
    assert res.exit_code == 0 and "changed since" not in res.output
    src.write_text(src.read_text() + "# edited after the dump\n")
    res = invoke(["insert", str(dump), "-o", str(tmp_path / "inst2")], code=0)
    assert f"warning: kernel marked_kernel: {src} changed since it was dumped" in res.output


def test_program_dump_of_configs_sharing_a_hash_records_the_dumped_one(spec_kernel, tmp_path):
    """Triton's dump keeps the last compile under a shared hash: the manifest must describe it."""
    path, _ = spec_kernel
    prog = tmp_path / "prog.py"
    again = ('options={"num_warps": 2})\n    triton.compile(ASTSource(spec_kernel, sig, cx, attrs), '
             'target=backend.target, options={"num_warps": 8})')
    prog.write_text(LAUNCH_PROGRAM.replace('options={"num_warps": 2})', again))
    res = program.dump_program(["python", str(prog), str(path.parent)], tmp_path / "dump")
    assert res.compiled == 4 and len(res.kernels) == 2
    assert len(res.notes) == 2 and "keeps the last compiled" in res.notes[0]
    for e in json.loads((tmp_path / "dump" / "manifest.json").read_text())["kernels"]:
        assert e["num_warps"] == 8 and "--num-warps 8" in e["aot_command"]
        assert '"ttg.num-warps" = 8' in (tmp_path / "dump" / e["ttgir"]).read_text()
