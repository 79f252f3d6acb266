"""Ahead-of-time dump: target/signature/constexpr parsing, the override layout, and the hash.

Compiles only two tiny kernels (well under a second each on the CPU, no GPU needed).
"""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from proton_inject import override
from proton_inject.cli import main
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
    got = override.parse_constexprs(["B=128", "X=0.5", "T=true", "F=False", "S=fp16", "H=-3"])
    assert got == {"B": 128, "X": 0.5, "T": True, "F": False, "S": "fp16", "H": -3}
    assert type(got["B"]) is int and type(got["T"]) is bool


@pytest.mark.parametrize("items,needle", [(["B"], "expected NAME=VALUE"), (["B="], "missing value"),
                                          (["B=1", "B=2"], "given twice"), (["=3"], "not a parameter")])
def test_parse_constexprs_rejects(items, needle):
    with pytest.raises(UserError, match=needle):
        override.parse_constexprs(items)


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
    src, *_ = override._build_source(
        fn, override.parse_signature(SIG.replace(",stride=i32", "")), {**CONSTEXPRS, "stride": 1},
        "t")
    assert _jit_hash(fn, x, x, 4096, 1, 0.5, BLOCK=256, REPS=2) == override.override_hash(src)


def test_hash_honours_do_not_specialize(kernel_file):
    torch = pytest.importorskip("torch")
    fn = override.load_kernel(kernel_file, "pinned_kernel")
    src, *_ = override._build_source(fn, {"x_ptr": "*fp32", "n": "i32"}, {"BLOCK": 64}, "t")
    assert _jit_hash(fn, torch.empty(64), 64, BLOCK=64) == override.override_hash(src)
    with pytest.raises(UserError, match="do_not_specialize, so the JIT"):
        override._build_source(fn, {"x_ptr": "*fp32", "n": "i32:16"}, {"BLOCK": 64}, "t")
    with pytest.raises(UserError, match="do_not_specialize_on_alignment"):
        override._build_source(fn, {"x_ptr": "*fp32:16", "n": "i32"}, {"BLOCK": 64}, "t")


def test_hash_is_triton_dump_dir_name(result, kernel_file, tmp_path):
    """Triton's own TRITON_KERNEL_DUMP names the directory of this source the same way."""
    import triton

    fn = override.load_kernel(kernel_file, "scale_kernel")
    src, *_ = override._build_source(fn, override.parse_signature(SIG), CONSTEXPRS, "t")
    with triton.knobs.cache.scope(), triton.knobs.compilation.scope():
        triton.knobs.cache.dir = str(tmp_path / "cache")
        triton.knobs.cache.dump_dir = str(tmp_path / "dump")
        triton.knobs.compilation.dump_ir = True
        triton.compile(src, target=override.parse_target("cuda:90"), options={"num_warps": 2})
    assert [p.name for p in (tmp_path / "dump").iterdir()] == [result.hash]


def test_dump_is_picked_up_by_triton_override(result, tmp_path, capfd):
    import triton

    fn = override.load_kernel(result.source_file, "scale_kernel")
    src, *_ = override._build_source(fn, override.parse_signature(SIG), CONSTEXPRS, "t")
    override.write_dump([result], tmp_path / "dump")
    with triton.knobs.cache.scope(), triton.knobs.compilation.scope():
        triton.knobs.cache.dir = str(tmp_path / "cache")
        triton.knobs.cache.override_dir = str(tmp_path / "dump")
        triton.knobs.compilation.override = True
        triton.compile(src, target=override.parse_target("cuda:90"), options={"num_warps": 2})
    out = capfd.readouterr().out
    assert f"Overriding kernel with file {tmp_path / 'dump' / result.ttgir_relpath}" in out


def test_write_dump_layout(result, tmp_path):
    out = tmp_path / "dump"
    written = override.write_dump([result], out)
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
    }


def test_write_dump_merges_and_rejects_hash_clash(result, tmp_path):
    out = tmp_path / "dump"
    other = override.AotResult(**{**result.__dict__, "kernel_name": "other", "hash": "X" * 52})
    override.write_dump([result], out)
    override.write_dump([other], out)
    names = [e["name"] for e in json.loads((out / "manifest.json").read_text())["kernels"]]
    assert names == ["other", "scale_kernel"]
    override.write_dump([result], out)  # rewriting the same kernel replaces its entry
    assert len(json.loads((out / "manifest.json").read_text())["kernels"]) == 2
    clash = override.AotResult(**{**result.__dict__, "num_warps": 8, "ttgir": "different"})
    with pytest.raises(UserError, match="same override hash"):
        override.write_dump([result, clash], tmp_path / "other")


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
    res = CliRunner().invoke(main, _dump_args(f"{kernel_file}:scale_kernel", out))
    assert res.exit_code == 0, res.output
    assert "wrote 1 kernel(s)" in res.output
    (entry,) = json.loads((out / "manifest.json").read_text())["kernels"]
    assert entry["target"] == "hip:gfx942" and entry["num_warps"] == 4
    assert '"ttg.threads-per-warp" = 64' in (out / entry["ttgir"]).read_text()


def test_cli_missing_kernel_exits_2(kernel_file, tmp_path):
    res = CliRunner().invoke(main, _dump_args(f"{kernel_file}:nope", tmp_path / "d"))
    assert res.exit_code == 2
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
    res = CliRunner().invoke(main, argv)
    assert res.exit_code == 2
    assert needle in res.output


# --- the hash of every specialization, against Triton's own launch binder -----------------

SPEC_SRC = textwrap.dedent(
    """
    import triton
    import triton.language as tl


    @triton.jit(do_not_specialize=["seed"])
    def spec_kernel(x_ptr, y_ptr, mask_ptr, n, seed, scale, flag,
                    MODE: tl.constexpr, PREC: tl.constexpr, HAS_MASK: tl.constexpr,
                    EPS: tl.constexpr, BLOCK: tl.constexpr = 128):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        x = tl.load(x_ptr + offs, mask=m)
        if mask_ptr is not None:
            x = x * tl.load(mask_ptr + offs, mask=m)
        if MODE == "mean":
            x = x / n
        if HAS_MASK:
            x = x + EPS
        if flag:
            x = x * scale
        tl.store(y_ptr + offs, x + seed, mask=m)
    """
)


def _binder_hash(fn, target: str, *args, **kwargs) -> str:
    """The override hash JITFunction.run computes for a launch on ``target`` with these args."""
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    backend = make_backend(override.parse_target(target))
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    bound, spec, opts = binder(*args, **kwargs)
    _, signature, constexprs, attrs = fn._pack_args(backend, {}, bound, spec, opts)
    return override.override_hash(ASTSource(fn, signature, constexprs, attrs))


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
    path = tmp_path_factory.mktemp("spec") / "spec_kernels.py"
    path.write_text(SPEC_SRC)
    return path, override.load_kernel(path, "spec_kernel")


@pytest.mark.parametrize("target", ["cuda:90", "hip:gfx942"])
@pytest.mark.parametrize("case", SPEC_CASES, ids=[c[0] for c in SPEC_CASES])
def test_hash_matches_binder_for_every_specialization(spec_kernel, case, target):
    """Strings, None, bools, floats, do_not_specialize, divisibility; CUDA and AMD keys."""
    torch = pytest.importorskip("torch")
    _, fn = spec_kernel
    _, build, sig, cx = case
    args, kwargs = build(lambda n: torch.empty(n))
    src, *_ = override._build_source(fn, override.parse_signature(sig), cx, "t",
                                     override.parse_target(target))
    assert override.override_hash(src) == _binder_hash(fn, target, *args, **kwargs)


def test_string_constexpr_has_an_attrs_entry(spec_kernel):
    """Left out, the hash silently differs from the launch's (Liger cross entropy, fla)."""
    _, fn = spec_kernel
    _, _, sig, cx = SPEC_CASES[0]
    src, *_ = override._build_source(fn, override.parse_signature(sig), cx, "t")
    idx = [p.name for p in fn.params].index("MODE")
    assert src.attrs[(idx,)] == []
    assert src.constants[(idx,)] == "mean"


def test_none_values(spec_kernel):
    assert override.parse_constexprs(["M=None", "N=none"]) == {"M": None, "N": None}
    assert override.parse_signature("m=none,x=*fp16") == {"m": "none", "x": "*fp16"}
    path, _ = spec_kernel  # `if mask_ptr is not None:` is compiled out for a None argument
    _, _, sig, cx = SPEC_CASES[1]
    r = override.compile_aot(path, "spec_kernel", sig, cx, "cuda:90")
    assert r.signature["mask_ptr"] == "constexpr" and r.constexprs["mask_ptr"] is None
    assert r.ttgir.count("tt.load") == 1
