"""`check` says which warps record as "warp 0 of 4", never "recording warps: 0", which read as
"nothing recorded" (issue 31). Compiles a real instrumented sample for an H100 on the CPU."""

from __future__ import annotations

from helpers import SAMPLES

from proton_inject.instrument.insert import insert_text
from proton_inject.instrument.rules import Rules
from proton_inject.lower.check import check_file, format_report


def test_recording_warps_line_names_warps_of_the_cta(tmp_path):
    path = SAMPLES / "cuda-90/add_kernel.ttgir"
    inst = tmp_path / "add_kernel.ttgir"
    inst.write_text(insert_text(path.read_text(), Rules(kernel_scope=True, marks=False)).text)
    r = check_file(inst)
    assert r.ok and r.recording_warps == [0] and r.num_warps == 4
    assert "     recording warps: warp 0 of 4; every warp with --warps all" in format_report(r)
    assert "recording warps: 0 " not in format_report(r)
