"""``profile``: instrumenting kernels while they compile (compile_hook), and its command.

The CPU tests compile a real kernel for ``cuda:90`` through ``triton.compile`` with the hook
installed, as the JIT would in the user's process; tests/gpu/test_gpu_profile_cmd.py runs whole
programs.
"""

from __future__ import annotations

import json
import textwrap

import pytest
from helpers.cli import invoke
from helpers.ttgir import compile_with_hook

import proton_inject
from proton_inject.collect.compile_hook import CompileHook, TreeSource, as_rules
from proton_inject.collect.session import clear_out_dir
from proton_inject.errors import UserError
from proton_inject.formats.rules_file import LineRange
from proton_inject.instrument.rules import Rules
from proton_inject.lower.options import LoweringOptions

KERNEL_SRC = textwrap.dedent(
    """
    import triton
    import triton.language as tl


    @triton.jit
    def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, REPS: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for _ in range(REPS):
            acc += tl.load(x_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, acc, mask=mask)  # proton: store
    """
)


@pytest.fixture(scope="module")
def kernel_mod(tmp_path_factory):
    from proton_inject.dump.kernel_source import load_module

    path = tmp_path_factory.mktemp("src") / "kern.py"
    path.write_text(KERNEL_SRC)
    return load_module(path)


def _source(mod, reps=3, out_div16=True):
    from triton.compiler import ASTSource

    sig = {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr",
           "REPS": "constexpr"}
    attrs = {(0,): [["tt.divisibility", 16]], (1,): [["tt.divisibility", 16]] if out_div16 else [], (2,): []}
    return ASTSource(mod.scale_kernel, signature=sig, constexprs={"BLOCK": 256, "REPS": reps},
                     attrs=attrs)


def test_hook_instruments_at_compile_time_and_writes_reviewable_ir(kernel_mod, tmp_path):
    from proton_inject.dump.aot import override_hash

    src = _source(kernel_mod)
    hook = CompileHook(Rules(kernel_scope=True, loops="both"), tmp_path / "ir")
    ck = compile_with_hook(src, tmp_path / "cache", hook)
    assert ck.asm["ttgir"].count("proton.record start") == 4  # kernel, loop, iteration, mark
    assert ck.metadata.profile_scratch_size > 0
    (c,) = hook.compiled.values()
    assert c.instrumented and c.name == "scale_kernel"
    assert c.hash == override_hash(src)  # the directory `run` looks the kernel up under
    assert [n for _, n in c.scope_names][0] == "kernel"
    assert "store" in [n for _, n in c.scope_names]
    # The IR tree is what insert writes: run can take it as it is.
    ir_file = tmp_path / "ir" / c.file
    text = ir_file.read_text(encoding="latin-1")
    assert text.count("proton.record") == ck.asm["ttgir"].count("proton.record") == 8
    tree = TreeSource(tmp_path / "ir").load()
    assert set(tree.files) == {(c.hash, "scale_kernel")} and tree.wants("scale_kernel")
    assert any(r.get("source") for r in tree.files[(c.hash, "scale_kernel")][2])
    manifest = json.loads((tmp_path / "ir" / "manifest.json").read_text())
    (entry,) = manifest["kernels"]
    assert entry["dump"]["constexprs"] == {"BLOCK": 256, "REPS": 3}
    assert entry["dump"]["compile_hash"] == ck.metadata.hash
    assert hook.summary() == ["instrumented 1 kernel(s) at compile time: scale_kernel"]


def test_run_takes_the_tree_file_only_for_the_config_it_was_dumped_with(kernel_mod, tmp_path):
    """Issue 27 item 3: Triton's override keys a file by source hash alone, so a config with
    other warps took another config's IR. A tree now gives its file to a compile of the same
    kernel, hash and config; another config is instrumented from its own TTGIR with the tree's
    rules, and the run says so."""
    src = _source(kernel_mod)
    dumped = CompileHook(Rules(kernel_scope=True, loops="both"), tmp_path / "ir")
    compile_with_hook(src, tmp_path / "c0", dumped, num_warps=4)  # the tree: num_warps 4
    (c,) = dumped.compiled.values()
    tree_text = (tmp_path / "ir" / c.file).read_text(encoding="latin-1")
    assert '"ttg.num-warps" = 4' in tree_text

    same = CompileHook(TreeSource(tmp_path / "ir"), tmp_path / "run4")
    ck4 = compile_with_hook(src, tmp_path / "c1", same, num_warps=4)
    (c4,) = same.compiled.values()
    assert c4.instrumented and (tmp_path / "run4" / c4.file).read_text(encoding="latin-1") == tree_text
    assert not same.notes and ck4.metadata.num_warps == 4
    assert [n for _, n in c4.scope_names] == [n for _, n in c.scope_names]

    other = CompileHook(TreeSource(tmp_path / "ir"), tmp_path / "run8")
    ck8 = compile_with_hook(src, tmp_path / "c2", other, num_warps=8)
    (c8,) = other.compiled.values()
    text8 = (tmp_path / "run8" / c8.file).read_text(encoding="latin-1")
    assert c8.instrumented and '"ttg.num-warps" = 8' in text8 and ck8.metadata.num_warps == 8
    assert text8.count("proton.record") == tree_text.count("proton.record")
    assert any("num_warps=4" in n and "num_warps=8" in n and "tree's rules" in n for n in other.notes)

    # --kernel and a tree without a manifest
    assert not TreeSource(tmp_path / "ir", kernel="^other$").wants("scale_kernel")
    with pytest.raises(UserError, match="no manifest.json"):
        TreeSource(tmp_path / "c0").load()
    with pytest.raises(UserError, match="not a valid regular expression"):
        TreeSource(tmp_path / "ir", kernel="(")


def test_a_hash_that_moved_since_the_dump_is_explained(kernel_mod, tmp_path):
    """Issue 27: FlagGems' sort and cumsum kernels compiled under ``run`` with hashes the dump
    never saw. The run's note now names what of the hash differs from the dump's build."""
    dumped = CompileHook(Rules(kernel_scope=True), tmp_path / "ir")
    compile_with_hook(_source(kernel_mod), tmp_path / "c0", dumped)
    (entry,) = json.loads((tmp_path / "ir" / "manifest.json").read_text())["kernels"]
    assert entry["dump"]["divisibility_16"] == ["out_ptr", "x_ptr"] and len(entry["dump"]["fn_key"]) == 16

    moved = CompileHook(TreeSource(tmp_path / "ir"), tmp_path / "run")
    compile_with_hook(_source(kernel_mod, reps=4, out_div16=False), tmp_path / "c1", moved)
    (c,) = moved.compiled.values()
    assert c.instrumented
    (note,) = [n for n in moved.notes if "not in the tree" in n]
    assert "constexpr REPS 3 -> 4" in note and "divisible by 16: no longer out_ptr" in note, note
    assert "source" not in note.split("not in the tree")[1], note  # the function itself did not change


def test_tree_is_read_once_and_keyed_by_the_ir_it_gives(kernel_mod, tmp_path):
    """The build cache's key for a tree (``digest``) is of the IR the run compiles: both come
    from one reading, so an edit of the tree after the session loaded it changes neither;
    the edited tree, loaded anew, has another key."""
    src = _source(kernel_mod)
    dumped = CompileHook(Rules(kernel_scope=True), tmp_path / "ir")
    compile_with_hook(src, tmp_path / "c0", dumped)
    (c,) = dumped.compiled.values()
    tree = TreeSource(tmp_path / "ir").load()
    key = tree.digest()
    ir_file = tmp_path / "ir" / c.file
    loaded = ir_file.read_text(encoding="latin-1")
    ir_file.write_text(loaded + "// edited after the session loaded the tree\n", encoding="latin-1")
    assert tree.digest() == key
    run = CompileHook(tree, tmp_path / "run")
    compile_with_hook(src, tmp_path / "c1", run)
    (r,) = run.compiled.values()
    assert r.instrumented and (tmp_path / "run" / r.file).read_text(encoding="latin-1") == loaded
    assert TreeSource(tmp_path / "ir").digest() != key


def test_kernel_left_out_compiles_as_without_the_tool(kernel_mod, tmp_path):
    hook = CompileHook(Rules(kernel_scope=True, kernel="^other$"), tmp_path / "ir")
    ck = compile_with_hook(_source(kernel_mod), tmp_path / "cache", hook)
    assert "proton.record" not in ck.asm["ttgir"]
    assert not ck.metadata.profile_scratch_size
    (c,) = hook.compiled.values()
    assert not c.instrumented and c.reason == "not matched by --kernel"
    assert not (tmp_path / "ir").exists()
    assert "left out: scale_kernel (not matched by --kernel)" in hook.summary()


def test_a_rule_that_cannot_be_placed_leaves_the_kernel_plain(kernel_mod, tmp_path):
    # Two line ranges whose ops overlap without nesting: insert refuses them; profile runs
    # the kernel plain and says why.
    rules = Rules(ranges=[LineRange.parse("a=kern.py:8-9"), LineRange.parse("b=kern.py:9-12")])
    hook = CompileHook(rules, tmp_path / "ir")
    ck = compile_with_hook(_source(kernel_mod), tmp_path / "cache", hook)
    (c,) = hook.compiled.values()
    assert not c.instrumented and c.reason == "a rule could not be placed"
    assert "proton.record" not in ck.asm["ttgir"]
    assert not ck.metadata.profile_scratch_size
    assert any("scale_kernel runs uninstrumented" in n and "overlap" in n for n in hook.notes)


def test_instrumented_ir_that_does_not_lower_runs_plain(kernel_mod, tmp_path, capfd):
    # Triton 3.6's AMD Proton lowering has no global-memory buffer: its pass pipeline fails.
    from triton.backends.compiler import GPUTarget

    hook = CompileHook(Rules(kernel_scope=True), tmp_path / "ir")
    ck = compile_with_hook(_source(kernel_mod), tmp_path / "cache", hook,
                           GPUTarget("hip", "gfx942", 64), LoweringOptions(buffer_type="global"))
    assert not ck.metadata.profile_scratch_size  # the plain module was lowered
    assert ck.asm["hsaco"]
    (c,) = hook.compiled.values()
    assert not c.instrumented and c.reason == "instrumented IR did not lower"
    assert any("did not lower, so it runs uninstrumented" in n for n in hook.notes)
    assert capfd.readouterr().out == ""  # the compiler's complaint went to stderr only


def test_instrumented_build_is_never_reused_by_a_plaincompile_with_hook(kernel_mod, tmp_path):
    """Even sharing one cache directory, a plain JIT compile never gets the instrumented binary.

    (Inductor leaves the mode out of its options: there the private cache directory profile
    sets up is what keeps them apart; the GPU test below checks the user's cache.)
    """
    cache = tmp_path / "cache"
    src = _source(kernel_mod)
    inst = compile_with_hook(src, cache, CompileHook(Rules(kernel_scope=True), tmp_path / "ir"))
    plain = compile_with_hook(src, cache, None)
    assert "proton.record" in inst.asm["ttgir"]
    assert "proton.record" not in plain.asm["ttgir"]
    assert plain.metadata.hash != inst.metadata.hash
    assert not plain.metadata.profile_scratch_size


def test_previous_hook_still_runs(kernel_mod, tmp_path):
    seen = []
    hook = CompileHook(Rules(kernel_scope=True), tmp_path / "ir",
                       prev=lambda backend, stages, *a: seen.append(sorted(stages)))
    compile_with_hook(_source(kernel_mod), tmp_path / "cache", hook)
    assert seen and "ttgir" in seen[0]


def test_rules_forms():
    assert as_rules(None) == Rules()
    assert as_rules({"loops": "both"}).loops == "both"
    with pytest.raises(UserError, match="loops"):
        as_rules({"loops": "sideways"})
    with pytest.raises(UserError):
        as_rules(["loops"])


def test_output_dir_is_cleared_only_when_it_is_ours(tmp_path):
    ours = tmp_path / "ours"
    (ours / "raw").mkdir(parents=True)
    (ours / "raw" / "00000-k.bin").write_bytes(b"old")
    (ours / "run.json").write_text("{}")
    (ours / "00000-k.json").write_text("{}")
    (ours / "00001-k.json.gz").write_bytes(b"")
    (ours / "timeline.png").write_bytes(b"keep")
    clear_out_dir(ours)
    assert sorted(p.name for p in ours.iterdir()) == ["timeline.png"]
    # One rank of a multi-process job removes only its own files.
    (ours / "raw").mkdir()
    for name in ("raw/rank0-00000-k.bin", "raw/rank1-00000-k.bin.gz", "rank0-00000-k.json",
                 "rank1-00000-k.json", "rank1-00001-k.json.gz", "run.rank0.json",
                 "run.rank1.json"):
        (ours / name).write_text("{}")
    clear_out_dir(ours, rank=1)
    left = sorted(p.relative_to(ours).as_posix() for p in ours.rglob("*") if p.is_file())
    assert left == ["rank0-00000-k.json", "raw/rank0-00000-k.bin", "run.rank0.json",
                    "timeline.png"]
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match="did not write"):
        clear_out_dir(theirs)
    assert (theirs / "notes.txt").read_text() == "mine"


def test_python_api_is_exported_lazily():
    from proton_inject import api

    assert proton_inject.profile is api.profile and proton_inject.profile_program is api.profile_program
    assert {"profile", "profile_program", "analyze_run"} <= set(dir(proton_inject))
    with pytest.raises(AttributeError):
        proton_inject.no_such_name  # noqa: B018


def test_profile_command_options(tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text("print('hi')\n")
    res = invoke(["profile", "--loops", "sideways", "--", "python", str(prog)])
    assert res.exit_code == 2 and "sideways" in res.output
    invoke(["profile", "-o", str(tmp_path / "o")], code=2)
    res = invoke(["profile", "--", "python", str(tmp_path / "missing.py")])
    assert res.exit_code == 2 and "missing.py: no such script" in res.output
    res = invoke(["profile", "--region", "bad", "--", "python", str(prog)])
    assert res.exit_code == 2 and "--region" in res.output
    help_text = invoke(["profile", "--help"]).output
    for opt in ("--loops", "--op", "--kernel", "--buffer-type", "--max-launches", "--no-report"):
        assert opt in help_text


def test_profile_without_gpu_is_a_clear_error(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    prog = tmp_path / "prog.py"
    prog.write_text("print('hi')\n")
    res = invoke(["profile", "-o", str(tmp_path / "o"), "--", "python", str(prog)], code=2)
    assert "no CUDA GPU" in res.output


def test_after_a_session_instrumented_kernels_get_throwaway_scratch():
    """Triton's default profile allocator raises on an instrumented kernel: a session leaves a
    throwaway one behind instead, and gives back a program's own allocator as it was."""
    from triton.runtime import _allocation

    from proton_inject.collect.buffers import after_session, throwaway_scratch

    assert after_session(_allocation.NullAllocator()) is throwaway_scratch

    def mine(size, alignment, stream):
        return None

    assert after_session(mine) is mine


def test_kernel_calling_a_noinline_function_is_instrumented(tmp_path):
    # Proton's lowering takes one function per module: the hook gets the callee inlined.
    from helpers.real_kernels import calls_kernel
    from triton.compiler import ASTSource

    src = ASTSource(calls_kernel, constexprs={"BLOCK": 128},
                    signature={"x_ptr": "*fp32", "y_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
                    attrs={(0,): [["tt.divisibility", 16]], (1,): [["tt.divisibility", 16]]})
    hook = CompileHook(Rules(kernel_scope=True), tmp_path / "ir")
    ck = compile_with_hook(src, tmp_path / "cache", hook)
    (c,) = hook.compiled.values()
    assert c.instrumented, c.reason
    assert ck.asm["ttgir"].count("tt.func") == 1
    assert ck.asm["ttgir"].count("proton.record start") == 1
    assert ck.metadata.profile_scratch_size > 0


def test_hook_sizes_the_buffer_of_a_loop_free_profile_with_auto(kernel_mod, tmp_path):
    """--buffer-size auto sees the module the hook instrumented (records outside the loop)."""
    from proton_inject.lower.options import profile_scratch_bytes

    src = _source(kernel_mod)
    rules = Rules(kernel_scope=True, marks=False)
    auto = compile_with_hook(src, tmp_path / "c1", CompileHook(rules, tmp_path / "ir1"),
                             options=LoweringOptions(warps="all", auto_size=True))
    default = compile_with_hook(src, tmp_path / "c2", CompileHook(rules, tmp_path / "ir2"),
                                options=LoweringOptions(warps="all", auto_size=False,
                                                        buffer_type="shared"))
    assert auto.metadata.profile_scratch_size == profile_scratch_bytes(2 * 8 * 4, 4)  # 4 warps
    assert default.metadata.profile_scratch_size > auto.metadata.profile_scratch_size
    # --buffer-type auto put these records in global memory: sized to them even with no size
    # asked for, never global's 16 KiB per warp
    unsized = compile_with_hook(src, tmp_path / "c3", CompileHook(rules, tmp_path / "ir3"),
                                options=LoweringOptions(warps="all", auto_size=False))
    assert unsized.metadata.profile_scratch_size == auto.metadata.profile_scratch_size


PER_PROCESS_SRC = textwrap.dedent(
    """
    import triton
    import triton.language as tl


    @tl.constexpr
    def width(n: tl.constexpr):
        return n


    @triton.jit
    def fill(out_ptr, N: tl.constexpr):
        w: tl.constexpr = width(N)
        tl.store(out_ptr + tl.arange(0, w), tl.arange(0, w))


    @triton.jit
    def iota_kernel(out_ptr, N: tl.constexpr):
        fill(out_ptr, N)  # the global sits one call down, as in FlagGems' sort
    """
)


def test_a_hash_that_changes_in_every_process_is_named(kernel_mod, tmp_path):
    """FlagGems' sort kernels use ``@tl.constexpr`` Python functions as globals: Triton hashes
    them by a repr holding the function's address, so each process (here: each load of the
    module) gives the kernel another hash. The dump's facts and the run's note say so."""
    from triton.compiler import ASTSource

    from proton_inject.dump.aot import per_process_globals, source_facts
    from proton_inject.dump.kernel_source import load_module

    def src_of(where):
        where.mkdir()
        (where / "iota.py").write_text(PER_PROCESS_SRC)
        fn = load_module(where / "iota.py").iota_kernel
        return ASTSource(fn, signature={"out_ptr": "*i32", "N": "constexpr"}, constexprs={"N": 64},
                         attrs={(0,): [["tt.divisibility", 16]]})

    first, second = src_of(tmp_path / "p1"), src_of(tmp_path / "p2")
    assert per_process_globals(first.fn) == ["width"]
    assert source_facts(first)["fn_key"] != source_facts(second)["fn_key"]
    compile_with_hook(first, tmp_path / "c0", CompileHook(Rules(kernel_scope=True), tmp_path / "ir"))
    moved = CompileHook(TreeSource(tmp_path / "ir"), tmp_path / "run")
    compile_with_hook(second, tmp_path / "c1", moved)
    (note,) = [n for n in moved.notes if "not in the tree" in n]
    assert "changes in every process" in note and "width" in note, note
    (c,) = moved.compiled.values()
    assert c.instrumented
    assert per_process_globals(kernel_mod.scale_kernel) == []  # no such globals, none named
