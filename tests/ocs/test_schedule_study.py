"""The E5 experiment (``ocs-e5``): its table and its figure, on a tiny sweep."""

import numpy as np
import pytest

from trainfabric.experiments.ocs_schedule_studies import OcsE5Config, ocs_e5, ocs_e5_figures
from trainfabric.runs import registry


def test_ocs_e5_rows_and_figure():
    cfg = OcsE5Config(families=["gpt", "random"], pods=[8], ocs=[1, 2], rhos=[0.1])
    table = ocs_e5(cfg, seed=0)
    assert len(table) == 2 * 2 * 5  # families x s x schedulers
    assert (table["over_lb"] >= 1 - 1e-9).all()
    np.testing.assert_allclose(table["over_lb"], table["makespan_s"] / table["lower_bound_s"])
    ours = table[table["scheduler"] == "ours"].set_index(["family", "ocs"])["makespan_s"]
    spectra = table[table["scheduler"] == "spectra-like"].set_index(["family", "ocs"])
    assert (ours <= spectra["makespan_s"] * (1 + 1e-9)).all()
    assert len(ocs_e5_figures(table)) == 1


def test_ocs_e5_is_registered_with_a_quick_setting():
    exp = registry.get("ocs-e5")
    assert exp.quick and set(exp.keys) >= {"family", "scheduler"}


@pytest.mark.parametrize(
    "bad",
    [{"pods": [1]}, {"pods": [100_000]}, {"pods": []}, {"ocs": [0]}, {"rhos": [-1.0]},
     {"rhos": [float("nan")]}, {"families": []}],
)  # fmt: skip
def test_e5_config_refuses_bad_sweeps(bad):
    """ocs=[0] and rhos=[-1] once crashed in the worker (ZeroDivisionError, TypeError)."""
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        OcsE5Config(**bad)
