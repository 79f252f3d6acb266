"""Real third-party kernels (Liger-Kernel, flash-linear-attention, Inductor output) in CI.

Their TTGIR (ttgir_samples/thirdparty/, made by scripts/make_thirdparty_samples.py) goes
through insert (golden diff), strip (same bytes) and check (compiles to a binary) with
--kernel-scope --loops both, for cuda:80/90/100 and hip:gfx942. Their AOT hash is compared
with the hash real launches used on an H100 and with Triton's own launch binder; that part
needs the pinned packages of the `dev` extra and is skipped where they are not installed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import REPO, TARGETS
from helpers.cli import invoke

from proton_inject.dump.signature import parse_constexprs as _parse_constexprs

THIRDPARTY = REPO / "ttgir_samples" / "thirdparty"
GOLDEN = REPO / "ttgir_samples" / "instrumented" / "thirdparty"
SOURCES = json.loads((THIRDPARTY / "SOURCES.json").read_text())["kernels"]
RULES = ["--kernel-scope", "--loops", "both", "--no-marks"]


@pytest.fixture(scope="module", params=TARGETS)
def instrumented(request, tmp_path_factory):
    target = request.param
    out = tmp_path_factory.mktemp(f"tp-{target}") / "inst"
    res = invoke(["insert", str(THIRDPARTY / target), "-o", str(out), *RULES,
                  "--check-against", str(GOLDEN / target)])
    return target, out, res


def test_every_kernel_is_there_for_every_target():
    names = {f"{k['name']}.ttgir" for k in SOURCES}
    assert len(names) == len(SOURCES) >= 16
    for target in TARGETS:
        assert {p.name for p in (THIRDPARTY / target).glob("*.ttgir")} == names


def test_insert_matches_golden(instrumented):
    target, out, res = instrumented
    assert res.exit_code == 0, res.output[-3000:]
    assert f"identical to {GOLDEN / target}" in res.output
    n = len(list(out.rglob("*.ttgir")))
    assert n == len(SOURCES)  # every kernel got at least its kernel-scope region


def test_strip_gives_the_samples_back(instrumented, tmp_path):
    target, out, _ = instrumented
    invoke(["strip", str(out), "-o", str(tmp_path / "s")], code=0)
    for p in (THIRDPARTY / target).glob("*.ttgir"):
        assert (tmp_path / "s" / p.name).read_bytes() == p.read_bytes(), p.name


def test_instrumented_compiles(instrumented):
    from proton_inject.lower.check import check_paths

    target, out, _ = instrumented
    reports, skipped = check_paths([out])
    assert not skipped and len(reports) == len(SOURCES)
    bad = [(r.path, r.error) for r in reports if not r.ok]
    assert not bad, bad
    # The scope ids and parents Proton's lowering gives are the manifest's.
    manifest = {k["file"]: k["regions"] for k in
                json.loads((out / "manifest.json").read_text())["kernels"]}
    for r in reports:
        regions = manifest[Path(r.path).relative_to(out).as_posix()]
        assert sorted(r.regions) == sorted((x["scope_id"], x["name"]) for x in regions), r.path
        assert sorted(r.parents) == sorted((x["scope_id"], x["parent_id"]) for x in regions
                                           if x["parent_id"] is not None), r.path


EARLY_RETURN = ["cross_entropy", "fused_linear_cross_entropy"]  # Liger: ignored rows return


def test_early_return_kernels_get_one_kernel_region(instrumented):
    """Issue 27 item 5 on Liger 0.8.5's cross entropy: one `kernel` region, from the entry to
    whichever return the CTA takes (a single exit block), with every loop inside it."""
    target, out, _ = instrumented
    kernels = {k["file"]: k for k in json.loads((out / "manifest.json").read_text())["kernels"]}
    for name in EARLY_RETURN:
        assert "cf.cond_br" in (THIRDPARTY / target / f"{name}.ttgir").read_text()
        regions = kernels[f"{name}.ttgir"]["regions"]
        scope = [r for r in regions if r["origin"] == "kernel-scope"]
        assert [(r["name"], r["scope_id"], r["parent"]) for r in scope] == [("kernel", 0, None)]
        loops = [r for r in regions if r["name"].startswith("loop ")]
        assert len(loops) == 3 and all(r["parent"] == "kernel" for r in loops)
        text = (out / f"{name}.ttgir").read_text()
        assert text.count("cf.br ^pi_exit") == 2 and text.count("tt.return") == 1
        assert text.count('proton.record end "kernel"') == 1


# --- the hash of the AOT dump, against real launches and Triton's binder ------------------


def _spec_source(k):
    """(JITFunction, parsed signature, constexprs) of a SOURCES entry; skip if not installed."""
    pytest.importorskip("torch")
    from make_thirdparty_samples import allow_inductor_import, source_path

    from proton_inject.dump import aot as override

    if k["module"].endswith(".py"):
        allow_inductor_import()
    else:
        pytest.importorskip(k["module"].split(".")[0])
    fn = override.load_kernel(source_path(k["module"]), k["kernel"])
    return fn, override.parse_signature(k["signature"]), _parse_constexprs(k["constexprs"])


@pytest.fixture(scope="module", autouse=True)
def _scripts_on_path():
    import sys

    sys.path.insert(0, str(REPO / "scripts"))
    yield
    sys.path.remove(str(REPO / "scripts"))


LAUNCHED = [k for k in SOURCES if k["launch_hash_cuda90"]]


@pytest.mark.parametrize("k", LAUNCHED, ids=[k["name"] for k in LAUNCHED])
def test_aot_hash_is_the_hash_an_h100_launch_used(k):
    from proton_inject.dump import aot as override

    fn, sig, cx = _spec_source(k)
    import torch

    text = (THIRDPARTY / "cuda-90" / f"{k['name']}.ttgir").read_text()
    if "torch/_inductor/runtime/triton_helpers.py" in text and torch.__version__[:4] != "2.11":
        # the kernel's cache key covers the torch helpers it calls, as a launch's does
        pytest.skip(f"calls torch's triton_helpers: its hash is torch 2.11's, here {torch.__version__}")
    src, *_ = override.build_source(fn, sig, cx, k["name"], override.parse_target("cuda:90"))
    assert override.override_hash(src) == k["launch_hash_cuda90"]


def _stand_in_args(fn, sig, cx):
    """Arguments like a real launch's: 16-byte aligned tensors of the signature's dtype (one
    element in for ':1'), integers divisible by 16 or not as the hint says, floats."""
    import torch

    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
              "i64": torch.int64, "i32": torch.int32}
    kwargs = {}
    for p in fn.params:
        name = p.name
        if name in cx:
            kwargs[name] = cx[name]
            continue
        if name not in sig and p.has_default:
            continue  # the launch leaves it at its default
        ty = sig[name]
        base, _, hint = ty.partition(":")
        if base == "none":
            kwargs[name] = None
        elif base.startswith("*"):
            t = torch.empty(64, dtype=dtypes[base[1:]])
            kwargs[name] = t[1:] if hint == "1" else t
        elif base.startswith("i"):
            kwargs[name] = 1024 if hint == "16" else 1000 + 3
        else:
            kwargs[name] = 0.5
    return kwargs


@pytest.mark.parametrize("target", ["cuda:90", "hip:gfx942"])
@pytest.mark.parametrize("k", SOURCES, ids=[k["name"] for k in SOURCES])
def test_aot_hash_matches_tritons_binder(k, target):
    from helpers.aot_kernels import binder_hash

    from proton_inject.dump import aot as override

    fn, sig, cx = _spec_source(k)
    src, *_ = override.build_source(fn, sig, cx, k["name"], override.parse_target(target))
    assert override.override_hash(src) == binder_hash(fn, target, **_stand_in_args(fn, sig, cx))
