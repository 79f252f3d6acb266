"""On a GPU: a CTA-sampled profile of the layer norm example records every nth CTA, in warp 0
only, with and without its loops' iteration records (lowered directly without them)."""

from __future__ import annotations

import pytest
from helpers import REPO, load_module, requires_gpu

pytestmark = [pytest.mark.gpu, requires_gpu]


@pytest.mark.parametrize("iterations", [False, True], ids=["whole", "iterations"])
def test_sampled_profile_records_every_nth_cta_in_warp_0_only(tmp_path, iterations):
    import torch

    import proton_inject
    from proton_inject.analyze.report import decode_raw, expand_inputs
    from proton_inject.analyze.summary import LaunchData, summarize
    from proton_inject.analyze.text import format_text

    ln = load_module(REPO / "examples" / "layernorm.py", "ln_example")
    x = torch.randn(1024, 4096, device="cuda", dtype=torch.float16)
    w, b = (torch.randn(4096, device="cuda", dtype=torch.float16) for _ in range(2))
    want = ln.layernorm(x, w, b)
    rules = {"sample-ctas": 4, "marks": False}
    if iterations:  # the loops run in two copies: with their iteration records, and without
        rules.update({"kernel-scope": True, "loops": "both"})
    with proton_inject.profile(rules=rules, out=tmp_path / "o", quiet=True):
        got = ln.layernorm(x, w, b)
    torch.cuda.synchronize()
    assert all(torch.equal(a, b) for a, b in zip(want, got, strict=True))  # y, mean, rstd
    raws, _ = expand_inputs([tmp_path / "o"])
    decoded = decode_raw(raws)
    assert decoded, "no launch was kept"
    d = decoded[0]
    assert d.meta.sample_ctas == 4 and d.meta.sampled_warps == [0]
    parents = sorted(d.meta.scope_parents.values())
    assert parents == ([0, 0, 0, 1, 3, 5] if iterations else [0, 0, 0])  # loops in the kernel
    ctas = set(d.events.cta.tolist())
    assert ctas == set(range(0, 1024, 4))  # every 4th CTA, all of them
    if iterations:  # 4096 columns in blocks of 1024: 4 iterations of each loop, every CTA
        iters = [s for s, n in d.meta.scopes.items() if n.startswith("iter ")]
        for s in iters:
            m = (d.events.scope == s)
            assert m.sum() == 4 * 256 and set(d.events.cta[m].tolist()) == ctas, d.meta.scopes[s]
    assert set(d.events.warp.tolist()) == {0} and not d.drops.dropped
    # records around whole loops are lowered directly (every CTA reads its clocks, the sampled
    # ones store them); iterations' records sit in the loops' sampled copies: Proton's lowering
    assert d.meta.buffer_type == ("shared" if iterations else "direct"), d.meta.buffer_type
    text = format_text(summarize([LaunchData.from_decoded(d)]))
    assert "1 CTA in 4 recorded" in text and "256 of 1,024 CTAs" in text
    print(text)
