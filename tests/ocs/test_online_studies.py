"""Experiments ocs-e7 and ocs-e10 on tiny settings: tables, bounds, figures."""

import numpy as np
import pytest

from trainfabric.experiments.ocs_online_studies import (
    ChurnConfig,
    OnlineConfig,
    loglog_slope,
    ocs_e7,
    ocs_e7_figures,
    ocs_e10,
    ocs_e10_figures,
)


def test_e7_table_and_figure():
    config = OnlineConfig(
        generators=["moe-phases", "jumps"], pods=6, ports=4, ocs=2, slots=[200, 800],
        compare_slots=300, compare_c_rel=[1.0],
    )  # fmt: skip
    table = ocs_e7(config, seed=0)
    curve = table[table["part"] == "curve"]
    assert len(curve) == 4
    assert (curve["regret_s"] <= curve["regret_bound_s"]).all()
    cmp = table[table["part"] == "compare"]
    assert set(cmp["policy"]) == {"threshold", "oracle", "always", "never", "glr"}
    for _, g in cmp.groupby("generator"):
        by = g.set_index("policy")["regret_s"]
        assert by["oracle"] <= by["threshold"] + 1e-12
    theta = table[table["part"] == "theta"]
    assert (theta["switches"] <= theta["switches_bound"]).all()
    assert len(ocs_e7_figures(table)) == 1


@pytest.mark.slow  # 1.5 s or more in the default run (make test-all runs it)
def test_e10_table_and_figure():
    table = ocs_e10(ChurnConfig(generators=["moe-phases"], slots=400), seed=0)
    assert len(table) >= 1
    assert (table["aware"] <= table["naive"]).all()
    assert (table["wiring_moves"] <= table["aware"]).all()
    assert len(ocs_e10_figures(table)) == 1


def test_loglog_slope_recovers_a_power_law():
    x = np.array([10.0, 100.0, 1000.0])
    assert abs(loglog_slope(x, 3 * x**0.5) - 0.5) < 1e-12
    assert np.isnan(loglog_slope([1.0], [2.0]))


def test_empty_sweep_lists_are_refused():
    """``-p slots=[]`` once crashed ocs-e7's worker (min() of an empty sequence)."""
    from pydantic import ValidationError

    from trainfabric.experiments.ocs_online_studies import ChurnConfig, OnlineConfig

    for cls, field in [(OnlineConfig, "slots"), (OnlineConfig, "generators"),
                       (OnlineConfig, "compare_c_rel"), (ChurnConfig, "generators")]:  # fmt: skip
        with pytest.raises(ValidationError):
            cls(**{field: []})
