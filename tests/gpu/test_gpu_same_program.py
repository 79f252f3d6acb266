"""GPU: profiling never changes what the program does (issue 11).

CUDA graphs (torch.compile reduce-overhead and a hand capture), outputs plain vs profiled,
a kernel whose instrumented build fails to compile, two torchrun ranks on one GPU. Each
program prints exact checksums (float.hex) on stdout; the profiled run must print the same
bytes (so also nothing of ours or Triton's).
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest
import torch
from helpers import load_module, requires_gpu
from helpers.gpu_programs import (
    EXAMPLES,
    cli_child,
    decoded,
    instrumented_tree,
    python_child,
    run_index,
)

from proton_inject.analyze.decode import decode
from proton_inject.formats.raw import find_raw, load_raw

pytestmark = [pytest.mark.gpu, requires_gpu]

# A small Llama-like block: RMSNorm (looped reductions at this width), attention, SiLU MLP.
_MODEL = textwrap.dedent("""
    import sys, torch
    import torch._inductor.config as inductor_config
    import torch.nn.functional as F
    inductor_config.compile_threads = 1  # as under run; a worker pool costs more than it saves here
    torch.manual_seed(0)
    D, H, L = 2048, 16, 1

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = torch.nn.Linear(D, 3 * D, bias=False)
            self.o = torch.nn.Linear(D, D, bias=False)
            self.up = torch.nn.Linear(D, 4 * D, bias=False)
            self.gate = torch.nn.Linear(D, 4 * D, bias=False)
            self.down = torch.nn.Linear(4 * D, D, bias=False)
            self.w1 = torch.nn.Parameter(torch.rand(D) + 0.5)
            self.w2 = torch.nn.Parameter(torch.rand(D) + 0.5)

        def norm(self, x, w):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.norm(x, self.w1)).view(b, t, 3, H, D // H).transpose(1, 3).unbind(2)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, D)
            x = x + self.o(a)
            h = self.norm(x, self.w2)
            return x + self.down(F.silu(self.gate(h)) * self.up(h))

    model = torch.nn.Sequential(*[Block() for _ in range(L)]).cuda()
    mode = sys.argv[1] if len(sys.argv) > 1 else "default"
    f = torch.compile(model, mode=None if mode == "default" else mode)
    x = torch.randn(2, 64, D, device="cuda")
    with torch.no_grad():
        for i in range(4):
            y = f(x)
            print(i, float(y.double().sum()).hex(), float(y.double().abs().sum()).hex())
""")

_LIGER = textwrap.dedent("""
    import torch
    from liger_kernel.transformers import functional as lf
    torch.manual_seed(0)
    x = torch.randn(256, 2048, device="cuda", requires_grad=True)
    w = torch.rand(2048, device="cuda", requires_grad=True)
    up = torch.randn(256, 2048, device="cuda", requires_grad=True)
    y = lf.liger_rms_norm(x, w, 1e-6, in_place=False)
    z = lf.liger_swiglu(y, up)
    z.square().sum().backward()
    for t in (y, z, x.grad, w.grad, up.grad):
        print(float(t.double().sum()).hex())
""")

_AUTOTUNED = textwrap.dedent("""
    import torch, triton, triton.language as tl

    @triton.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=2),
                              triton.Config({"BLOCK": 256}, num_warps=4)], key=["n"])
    @triton.jit
    def rowsum(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        acc = tl.zeros([BLOCK], tl.float32)
        for start in range(0, n, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            acc += tl.load(x_ptr + row * n + offs, mask=offs < n, other=0.0) * 1.5
        tl.store(out_ptr + row, tl.sum(acc))

    torch.manual_seed(0)
    x = torch.randn(512, 8192, device="cuda")
    out = torch.empty(512, device="cuda")
    for _ in range(3):
        rowsum[(512,)](x, out, 8192)
    print("BLOCK", rowsum.best_config.kwargs["BLOCK"], float(out.double().sum()).hex())
""")


# Configs whose sums differ in the last bits (each BLOCK adds in another order): choosing
# another config than the plain run changes the printed bytes. Timings go to stderr.
_CONFIG_BYTES = textwrap.dedent("""
    import hashlib, sys, torch, triton, triton.language as tl
    SHAPES = ((64, 2), (256, 4), (1024, 4), (4096, 8))

    @triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=w) for b, w in SHAPES], key=["n"])
    @triton.jit
    def rowsum(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        acc = tl.zeros([BLOCK], tl.float32)
        for start in range(0, n, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            acc += tl.load(x_ptr + row * n + offs, mask=offs < n, other=0.0)
        tl.store(out_ptr + row, tl.sum(acc))

    def digest(t):
        return hashlib.sha256(t.cpu().numpy().tobytes()).hexdigest()[:16]

    torch.manual_seed(0)
    rows, n = 2048, 16384
    x = torch.randn(rows, n, device="cuda")
    out = torch.empty(rows, device="cuda")
    for _ in range(3):
        rowsum[(rows,)](x, out, n)
    best = rowsum.best_config
    print("chosen BLOCK", best.kwargs["BLOCK"], "warps", best.num_warps, "out", digest(out))
    per = []
    for b, w in SHAPES:  # each config on its own: the bytes it would have given
        o = torch.empty(rows, device="cuda")
        rowsum.fn[(rows,)](x, o, n, BLOCK=b, num_warps=w)
        per.append(digest(o))
    print("configs", len(SHAPES), "distinct outputs", len(set(per)))
    for cfg, t in sorted(rowsum.configs_timings.items(), key=lambda kv: str(kv[0])):
        print("timing", cfg.kwargs["BLOCK"], float(t[0]) * 1e3, "us", file=sys.stderr)
""")


KS = ("--kernel-scope", "--no-marks")
LOOPS = ("--kernel-scope", "--loops", "both", "--no-marks")


def _plain_and_profiled(tmp_path: Path, body: str, argss: tuple[tuple[str, ...], ...] = ((),),
                        inserts: tuple[tuple[str, ...], ...] = (KS,),
                        ) -> dict[tuple[int, int], tuple[str, subprocess.CompletedProcess]]:
    """(args index, rules index) -> (the program's stdout run plainly, its run under `run`).

    One dump (with the first args) serves every args: the kernels are the same. The dump's
    own run of the program is the plain run of the first args (run takes its autotuning
    choices; two plain runs may choose near-tied configs differently). Traces of run (i, j)
    go to traces<i><j>."""
    prog = tmp_path / "prog.py"
    prog.write_text(body)
    dump = cli_child(["dump", "-o", "dump", "--", "python", str(prog), *argss[0]], tmp_path)
    plain = [dump.stdout] + [python_child([str(prog), *args], tmp_path).stdout for args in argss[1:]]
    out = {}
    for j, rules in enumerate(inserts):
        cli_child(["insert", "dump", "-o", f"inst{j}", *rules], tmp_path)
        for i, args in enumerate(argss):
            prof = cli_child(["run", f"inst{j}", "-o", f"traces{i}{j}", "--", "python", str(prog), *args],
                             tmp_path)
            print(prof.stderr[-2000:])
            out[(i, j)] = (plain[i], prof)
    return out


def _same(results: dict[str, tuple[str, str]]) -> bool:
    for name, (plain, prof) in results.items():
        print(f"SAME {name:32s} {plain == prof}\n  plain    {plain!r}\n  profiled {prof!r}")
    return all(a == b for a, b in results.values())


def test_compiled_model_same_outputs(tmp_path):
    """torch.compile (default mode): the profiled run prints the plain run's bytes; Inductor's
    autotuning choices are the dump's (none timed)."""
    runs = _plain_and_profiled(tmp_path, _MODEL, (("default",),))
    index = run_index(tmp_path / "traces00")
    print(f"AUTOTUNE torch.compile default: {index['autotune']}")
    assert _same({"torch.compile default, kernel": (runs[(0, 0)][0], runs[(0, 0)][1].stdout)})
    assert index["autotune"]["timed"] == 0, index["messages"]


def test_reduce_overhead_graph_replays_are_profiled(tmp_path):
    """torch.compile reduce-overhead (CUDA graphs): same stdout as the plain run, and the
    captured kernels are profiled on every replay."""
    runs = _plain_and_profiled(tmp_path, _MODEL, (("reduce-overhead",),))
    plain, prof = runs[(0, 0)]
    ok = _same({"torch.compile reduce-overhead, kernel": (plain, prof.stdout)})
    index = run_index(tmp_path / "traces00")
    replays = [x for x in index["launches"] if x["graph_replay"] is not None]
    print("reduce-overhead:", len(index["launches"]), "launches kept,", len(replays), "from replays,",
          "max replay", max((x["graph_replay"] for x in replays), default=None))
    assert replays, index["messages"]
    assert not index["in_cuda_graphs"] and not any(x["all_zero"] for x in index["launches"])
    assert max(x["graph_replay"] for x in replays) >= 2  # later calls replay the graph
    for p in find_raw(tmp_path / "traces00" / "raw")[:20]:
        assert len(decode(*load_raw(p)).events) > 0
    assert "Overriding kernel" not in prof.stdout + prof.stderr
    rep = cli_child(["report", "traces00"], tmp_path)
    assert "kernel" in rep.stdout
    assert ok


def test_hand_captured_graph_is_profiled_on_every_replay(tmp_path):
    from proton_inject.api import profile

    inst = instrumented_tree(tmp_path, ["python", str(EXAMPLES / "vector_add.py")])
    va = load_module(EXAMPLES / "vector_add.py", "pi_vector_add_graph")
    x = torch.randn(1_000_003, device="cuda")
    with profile(instrumented=inst, out=tmp_path / "traces", quiet=True) as result:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            out = va.add(x, x)  # warm up (compiles) outside the capture
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = va.add(x, x)
        for k in range(3):
            x.add_(1.0)
            g.replay()
            torch.cuda.synchronize()
            assert torch.equal(out, x + x), k
    assert [r.graph_replay for r in result.launches] == [None, 1, 2, 3], result.messages
    assert not result.in_cuda_graphs
    evs = decoded(tmp_path / "traces")
    assert len(evs) == 4 and all(len(d.events) > 0 for d in evs)


def test_liger_and_autotuned_same_outputs(tmp_path):
    results = {}
    (tmp_path / "auto").mkdir()
    runs = _plain_and_profiled(tmp_path / "auto", _AUTOTUNED, inserts=(KS, LOOPS))
    results["autotuned, kernel"] = (runs[(0, 0)][0], runs[(0, 0)][1].stdout)
    results["autotuned, kernel + loops"] = (runs[(0, 1)][0], runs[(0, 1)][1].stdout)
    try:
        import liger_kernel  # noqa: F401

        (tmp_path / "liger").mkdir()
        runs = _plain_and_profiled(tmp_path / "liger", _LIGER, inserts=(KS,))
        results["liger rms_norm+swiglu, kernel"] = (runs[(0, 0)][0], runs[(0, 0)][1].stdout)
    except ImportError:
        print("liger_kernel not installed: Liger case skipped")
    assert _same(results)


def _timings(stderr: str) -> dict[int, float]:
    """BLOCK -> median us, from the program's "timing" lines (its autotuner's own timings)."""
    return {int(w[1]): float(w[2]) for w in (line.split() for line in stderr.splitlines())
            if len(w) == 4 and w[0] == "timing"}


def _kept_configs(index: dict) -> list[str]:
    kept = [x for x in index["launches"] if x["kernel"] == "rowsum" and not x["tuning"]]
    assert len(kept) == 7, index["messages"]  # the 3 autotuned calls, then one per config
    return [x["config"].split(",")[0] for x in kept[:3]]


def test_autotune_picks_the_plain_runs_config(tmp_path):
    """An autotuned kernel whose configs give different bytes. `run` takes the configs the
    dump's plain run chose (autotune.json, carried by insert): the same bytes and config,
    always, with no benchmarking. `profile --autotune-from dump` too. Plain `profile` times
    the plain builds: it must agree only when the fastest config is clearly (>5%) ahead;
    near-tied configs are chosen by noise, as between two plain runs."""
    prog = tmp_path / "prog.py"
    prog.write_text(_CONFIG_BYTES)
    dump = cli_child(["dump", "-o", "dump", "--", "python", str(prog)], tmp_path)
    plain, timings = dump.stdout, _timings(dump.stderr)
    assert plain.splitlines()[1].endswith("distinct outputs 4"), plain
    assert "recorded the autotuners' choices (1 Triton autotune key(s)" in dump.stderr, dump.stderr[-2000:]
    cli_child(["insert", "dump", "-o", "inst", *LOOPS], tmp_path)
    run = cli_child(["run", "inst", "-o", "traces", "--", "python", str(prog)], tmp_path)
    pinned = cli_child(["profile", *LOOPS, "--no-report", "-o", "prof-pinned", "--autotune-from", "dump",
                        "--", "python", str(prog)], tmp_path)
    prof = cli_child(["profile", *LOOPS, "--no-report", "-o", "prof", "--", "python", str(prog)], tmp_path)
    for name, p in (("dump", dump), ("run", run), ("profile --autotune-from", pinned), ("profile", prof)):
        print(f"{name} stderr:\n" + p.stderr[-1500:])
    fastest = sorted(timings.values())
    gap = fastest[1] / fastest[0] - 1
    chosen = plain.split()[2]  # "chosen BLOCK <b> ..."
    print(f"TIMINGS plain {sorted(timings.items())} us; runner-up {gap:+.1%}")
    assert _same({"autotuned configs differ, run": (plain, run.stdout),
                  "autotuned configs differ, profile --autotune-from": (plain, pinned.stdout)})
    for out in ("traces", "prof-pinned"):
        index = run_index(tmp_path / out)
        tuned = _kept_configs(index)
        print(f"CHOSEN {out:11s} plain BLOCK={chosen} profiled {tuned} autotune {index['autotune']}")
        assert tuned == [f"BLOCK={chosen}"] * 3
        assert index["autotune"]["pinned"] == 1 and index["autotune"]["timed"] == 0
        assert "autotune benchmarking" not in index["dropped"]  # nothing was timed
    assert "autotuning: 1 choice(s) taken from" in run.stderr and "Traceback" not in run.stderr
    index = run_index(tmp_path / "prof")
    tuned = _kept_configs(index)
    same = _same({"autotuned configs differ, profile (timed)": (plain, prof.stdout)})
    print(f"CHOSEN prof        plain BLOCK={chosen} profiled {tuned} (timed; runner-up {gap:+.1%})")
    assert index["autotune"]["timed"] == 1 and "timed on the plain builds" in prof.stderr
    if gap > 0.05:
        assert same and tuned == [f"BLOCK={chosen}"] * 3
    else:
        print(f"profile: configs within {gap:.1%} of each other; its choice is not asserted")


def test_failed_instrumented_compile_runs_the_original(tmp_path):
    inst = instrumented_tree(tmp_path, ["python", str(EXAMPLES / "vector_add.py")])
    (f,) = inst.glob("*/add_kernel.ttgir")
    # An op MLIR does not know: insert's parser keeps it, Triton's parser refuses the file.
    text = f.read_text()
    at = text.index('proton.record start "kernel"')
    f.write_text(text[:at] + '"proton_inject.no_such_op"() : () -> ()\n    ' + text[at:])
    prog = tmp_path / "prog.py"
    prog.write_text(f"import sys, torch\nsys.path.insert(0, {str(EXAMPLES)!r})\nimport vector_add as va\n"
                    "x = torch.randn(1_000_003, device='cuda')\n"
                    "print(torch.equal(va.add(x, x), x + x))\n")
    p = cli_child(["run", str(inst), "-o", "traces", "--", "python", str(prog)], tmp_path, code=None)
    print(p.stderr[-3000:])
    assert p.returncode == 0 and p.stdout == "True\n"
    index = run_index(tmp_path / "traces")
    assert index["compiled"] and not any(c["instrumented"] for c in index["compiled"].values())
    assert "kernel add_kernel runs uninstrumented: its instrumented IR could not be used" in p.stderr


_RANKS = textwrap.dedent("""
    import os, sys, torch, torch.distributed as dist
    sys.path.insert(0, sys.argv[1])
    import vector_add as va
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t)
    x = torch.full((1_000_003,), float(rank), device="cuda")
    print(rank, torch.equal(va.add(x, x), x + x), float(t))
    dist.destroy_process_group()
""")


def test_two_ranks_under_torchrun(tmp_path):
    inst = instrumented_tree(tmp_path, ["python", str(EXAMPLES / "vector_add.py")])
    prog = tmp_path / "ranks.py"
    prog.write_text(_RANKS)
    p = python_child(["-m", "torch.distributed.run", "--nproc-per-node", "2",
                      "-m", "proton_inject.cli", "run", str(inst), "-o", "traces", "--",
                      "python", str(prog), str(EXAMPLES)], tmp_path)
    assert sorted(p.stdout.split("\n")) == ["", "0 True 3.0", "1 True 3.0"], p.stdout
    out = tmp_path / "traces"
    assert {run_index(out, f"run.rank{r}.json")["rank"] for r in (0, 1)} == {0, 1}
    names = sorted(q.name for q in (out / "raw").glob("*.json"))
    assert names == ["rank0-00000-add_kernel.json", "rank1-00000-add_kernel.json"], names
    rep = cli_child(["report", "traces", "--json", "--trace", "merged", "--merge",
                     "--trace-format", "json", "--no-gz"], tmp_path)
    (k,) = json.loads(rep.stdout)["kernels"]
    assert k["ranks"] == [0, 1]
    doc = json.loads((tmp_path / "merged" / "merged.json").read_text())
    procs = {e["args"]["name"].split(" SM ")[0] for e in doc["traceEvents"] if e.get("name") == "process_name"}
    assert procs == {"rank 0 add_kernel #0", "rank 1 add_kernel #0"}
