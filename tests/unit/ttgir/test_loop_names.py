"""One name per loop (issue 31): inspect called the matmul K loop `acc_76` while insert, the
manifest and the report call it `loop acc @matmul.py:36`. inspect now prints the name insert
gives, for every sample, warp-specialized partitions and repeated names (#2) included."""

from __future__ import annotations

import pytest
from helpers import sample_files

from proton_inject.instrument.insert import insert_text
from proton_inject.instrument.rules import Rules
from proton_inject.ttgir import parse, parse_file
from proton_inject.ttgir.outline import format_outline, outline


@pytest.mark.parametrize("path", sample_files(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_inspect_names_each_loop_as_insert_does(path):
    res = insert_text(path.read_bytes(), Rules(loops="outer", marks=False), path.name)
    inserted = {k.kernel: [r.name for r in k.regions] for k in res.kernels}
    for k in outline(parse_file(path)):
        assert [lp.name for lp in k.loops] == inserted.get(k.name, []), k.name


def test_inspect_prints_the_region_name():
    path = next(p for p in sample_files() if p.parts[-2:] == ("cuda-90", "matmul_kernel.ttgir"))
    text = format_outline(parse_file(path))
    assert "    scf.for loop acc @matmul.py:36 (depth 1, examples/matmul.py:36, IR line 124)" in text
    assert "acc_76" not in text


def test_two_loops_of_one_name_are_told_apart_as_insert_does():
    path = next(p for p in sample_files() if p.parts[-2:] == ("cuda-90", "add_kernel.ttgir"))
    text = path.read_text()
    loop = text[text.index("    scf.for"): text.index("    } loc(#loc9)\n") + 17]
    twice = text.replace(loop, loop + loop)
    res = insert_text(twice, Rules(loops="outer", marks=False), "twice.ttgir")
    names = [r.name for r in res.kernels[0].regions]
    assert names == ["loop i @vector_add.py:17", "loop i @vector_add.py:17 #2"]
    assert [lp.name for lp in outline(parse(twice, "twice.ttgir"))[0].loops] == names
