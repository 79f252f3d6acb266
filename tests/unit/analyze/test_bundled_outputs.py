"""The report text, JSON summary and traces of the bundled H100 data stay byte-identical.

The expected files (tests/data/expected/) were written by tests/helpers/bundled_outputs.py;
a change meant to alter what the report says regenerates them there and shows the diff.
"""

from __future__ import annotations

import pytest
from helpers.bundled_outputs import DATASETS, EXPECTED, outputs


@pytest.mark.filterwarnings("ignore::proton_inject.analyze.issues.DecodeWarning")
@pytest.mark.parametrize("dataset", DATASETS)
def test_report_and_traces_unchanged(tmp_path, dataset):
    got = outputs(dataset, tmp_path)
    expected = sorted(p.name for p in (EXPECTED / dataset).iterdir())
    assert sorted(got) == expected
    for name, blob in got.items():
        want = (EXPECTED / dataset / name).read_bytes()
        assert blob.decode() == want.decode(), f"{dataset}/{name} changed (see bundled_outputs.py)"
