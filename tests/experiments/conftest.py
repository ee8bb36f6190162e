"""Shared checks of the experiments' tests."""

import pandas as pd
import pytest

from trainfabric.runs import RunDir, run_sweep


@pytest.fixture
def assert_sweep_resumes(tmp_path):
    """Check that a two-cell ``spec`` swept, with one cell's result deleted, resumes: the
    second run computes only that cell, skips the other, and gives the same table."""

    def check(spec) -> None:
        first = run_sweep(spec, tmp_path / "run", executor="serial", progress=False)
        assert len(first.computed) == 2
        RunDir(first.run_dir).cell_path(first.computed[1]).unlink()
        again = run_sweep(spec, tmp_path / "run", executor="serial", progress=False)
        assert again.computed == [first.computed[1]] and again.skipped == [first.computed[0]]
        pd.testing.assert_frame_equal(again.results, first.results)

    return check
