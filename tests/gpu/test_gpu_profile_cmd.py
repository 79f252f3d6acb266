"""On a GPU: ``profile`` runs whole programs (plain, autotuned, torch.compile) with the same
output as a plain run and nothing instrumented left in the user's caches; the Python API under
torch.compile."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest
from helpers import requires_gpu
from helpers.cli import child_env, run_cli, run_python

import proton_inject

pytestmark = [pytest.mark.gpu, requires_gpu]


PROGRAMS = {
    "plain": """
        import torch, triton, triton.language as tl

        @triton.jit
        def add(x, y, out, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            m = offs < n
            tl.store(out + offs, tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m), mask=m)

        x = torch.arange(100000, device="cuda", dtype=torch.float32)
        out = torch.empty_like(x)
        add[(triton.cdiv(x.numel(), 1024),)](x, x, out, x.numel(), BLOCK=1024)
        print("sum", out.sum().item())
    """,
    "autotuned": """
        import torch, triton, triton.language as tl

        # A clear winner: two near-tied configs let a second run choose the other one, whose
        # instrumented build is then (rightly) not in the build cache.
        @triton.autotune(configs=[triton.Config({"BLOCK": 16}, num_warps=1), triton.Config({"BLOCK": 1024})],
                         key=["n"])
        @triton.jit
        def double(x, out, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            m = offs < n
            tl.store(out + offs, tl.load(x + offs, mask=m) * 2, mask=m)

        x = torch.ones(1 << 20, device="cuda")
        out = torch.empty_like(x)
        double[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, out, x.numel())
        print("sum", out.sum().item())
    """,
    # Choices saved to the program's cache (cache_results): the profile reads them, times nothing.
    "autotune_cached": """
        import torch, triton, triton.language as tl

        @triton.autotune(configs=[triton.Config({"BLOCK": 256}), triton.Config({"BLOCK": 1024})],
                         key=["n"], cache_results=True)
        @triton.jit
        def triple(x, out, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            m = offs < n
            tl.store(out + offs, tl.load(x + offs, mask=m) * 3, mask=m)

        x = torch.ones(1 << 20, device="cuda")
        out = torch.empty_like(x)
        triple[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, out, x.numel())
        print("sum", out.sum().item(), "block", triple.best_config.kwargs["BLOCK"])
    """,
    "compiled": """
        import torch

        def f(x):
            return torch.softmax(x * 0.5, dim=-1) + torch.nn.functional.gelu(x)

        x = torch.randn(1024, 512, device="cuda", generator=torch.Generator("cuda").manual_seed(0))
        print("sum %.5e" % torch.compile(f)(x).sum().item())
    """,
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_profile_one_run_output_equal_and_user_cache_clean(name, tmp_path):
    prog = tmp_path / f"{name}.py"
    prog.write_text(textwrap.dedent(PROGRAMS[name]))
    user_cache = tmp_path / "user_cache"
    env = child_env(TRITON_CACHE_DIR=str(user_cache), TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor_cache"),
                    XDG_CACHE_HOME=str(tmp_path / "xdg"))
    plain = run_python([str(prog)], cwd=tmp_path, env=env, code=0, timeout=300)
    if name == "autotune_cached":
        plain = _slower_config_saved(prog, user_cache, env, plain.stdout)
    out = tmp_path / "out"
    prof = run_cli(["profile", "--kernel-scope", "--loops", "both", "-o", str(out), "--", "python", str(prog)],
                   cwd=tmp_path, env=env, code=0, timeout=300)
    assert prof.stdout == plain.stdout
    index = json.loads((out / "run.json").read_text())
    kept = [x for x in index["launches"] if not x["tuning"]]
    assert kept and not any(x["all_zero"] for x in kept)
    assert list((out / "ir").glob("*/*.ttgir"))
    assert "instrumented 0 kernel(s)" not in prof.stderr
    assert "total cyc" in prof.stderr  # the report's table
    assert re.search(r"proton-inject: time: .*the program \d+\.\d\d s, of it Triton's compiles", prof.stderr)
    if name == "autotuned":  # (its plain builds launch with none of our code: nothing counted)
        assert "timed on the plain builds" in prof.stderr, prof.stderr
    if name == "autotune_cached":  # the plain run's saved choice, read from its cache
        assert "1 read from the program's saved choices" in prof.stderr, prof.stderr
        assert index["autotune"]["saved"] == 1 and index["autotune"]["timed"] == 0, index["autotune"]
        assert "autotune benchmarking" not in prof.stderr, prof.stderr
        saved = list(user_cache.rglob("triple.autotune.json"))
        assert len(saved) == 1 and not list((tmp_path / "xdg").rglob("*.autotune.json"))
        dumped = run_cli(["dump", "-o", str(tmp_path / "dump"), "--", "python", str(prog)],
                         cwd=tmp_path, env=env, code=0, timeout=300)
        assert dumped.stdout == plain.stdout, dumped.stderr
        # (its TTGIR read where the warm user cache keeps it: the kernel loaded, not compiled)
        names = [p.name for p in (tmp_path / "dump").glob("*/*.ttgir")]
        assert names and set(names) == {"triple.ttgir"}, dumped.stderr
    # Nothing instrumented reached the user's cache, and a plain run afterwards is plain.
    def instrumented_files() -> list[Path]:
        dirs = [user_cache, tmp_path / "inductor_cache"]
        return [f for d in dirs if d.exists() for f in d.rglob("*")
                if f.is_file() and b"proton.record" in f.read_bytes()]

    assert not instrumented_files()
    # The tool's own kernel (the clock bracket) builds in the tool's cache, not the program's.
    assert not list(user_cache.rglob("clock_bracket*"))
    assert list((tmp_path / "xdg" / "proton-inject" / "triton").rglob("clock_bracket*.cubin"))
    again = run_python([str(prog)], cwd=tmp_path, env=env, timeout=300)
    assert again.stdout == plain.stdout
    assert not instrumented_files()
    if name == "autotuned":  # a second profile takes the instrumented builds from the tool's cache
        prof2 = run_cli(["profile", "--kernel-scope", "--loops", "both", "-o", str(tmp_path / "out2"), "--",
                         "python", str(prog)], cwd=tmp_path, env=env, code=0, timeout=300)
        assert prof2.stdout == plain.stdout, prof2.stderr
        assert (tmp_path / "out2" / "run.json").is_file()
        assert sorted(p.name for p in (tmp_path / "out2" / "ir").rglob("*.ttgir")) == \
            sorted(p.name for p in (out / "ir").rglob("*.ttgir")), "the two profiles' tuners chose differently"
        assert "from the build cache" in prof2.stderr, prof2.stderr
        # Decoded as the first was (the cached builds' lowering decisions taken back, not worked
        # out again): the same regions, recorded as often, in every kernel.
        assert _regions(tmp_path / "out2", tmp_path, env) == _regions(out, tmp_path, env)


def _regions(out: Path, cwd: Path, env: dict) -> dict:
    """Per kernel and config of a run's report: its regions (scope, name, parent, count)."""
    doc = json.loads(run_cli(["report", "--json", str(out)], cwd=cwd, env=env, code=0, timeout=300).stdout)
    return {(k["kernel"], k["config"]): sorted((r["scope"], r["name"], r["parent"], r["count"]) for r in k["regions"])
            for k in doc["kernels"]}


def _slower_config_saved(prog: Path, user_cache: Path, env: dict, first: str):
    """Swap the timings the plain run saved, so the saved choice is the config a new tuning
    would not pick; a plain run now takes it, and so must the tool."""
    (saved,) = user_cache.rglob("triple.autotune.json")
    data = json.loads(saved.read_text())
    (a, ta), (b, tb) = data["configs_timings"]
    data["configs_timings"] = [[a, tb], [b, ta]]
    saved.write_text(json.dumps(data))
    plain = run_python([str(prog)], cwd=prog.parent, env=env, code=0, timeout=300)
    assert plain.stdout.split()[-1] != first.split()[-1], (first, plain.stdout)
    return plain


def test_profile_api_with_torchcompile_with_hook(tmp_path, capfd):
    import torch

    def f(x):
        return torch.softmax(x * 0.5, dim=-1).sum(-1)

    x = torch.randn(512, 512, device="cuda")
    want = f(x)
    compiled = torch.compile(f)
    with proton_inject.profile(rules={"kernel-scope": True}, out=tmp_path / "o") as r:
        got = compiled(x)
        torch.cuda.synchronize()
    assert torch.allclose(got, want, atol=1e-5)
    assert r.launches, r.messages
    assert any(m.startswith("instrumented") and "triton_" in m for m in r.messages), r.messages
    # Inductor keeps the instrumented kernels: after the block they still run, and say so.
    again = compiled(x)
    torch.cuda.synchronize()
    assert torch.equal(again, got)
    assert "stay instrumented after it" in capfd.readouterr().err
