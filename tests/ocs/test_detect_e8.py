"""Experiment ocs-e8 on a tiny setting: its table, the false-alarm and delay rows' internal
consistency, and its figure."""

import numpy as np
import pytest

from trainfabric.experiments.ocs_detect_studies import OcsE8Config, e8_figures, ocs_e8
from trainfabric.runs import registry

TINY = OcsE8Config(
    pods=[8],
    kls=[0.05],
    changes=["hot-pod"],
    fa_deltas=[0.2, 0.05],
    fa_streams=30,
    fa_slots=100,
    delay_deltas=[0.1, 1e-3, 1e-6],
    delay_streams=6,
    glr_change_at=300,
    max_delay_slots=400,
    ablation_kls=[0.05],
)


@pytest.fixture(scope="module")
def table():
    return ocs_e8(TINY, seed=0)


def test_registered_with_quick_setting():
    exp = registry.get("ocs-e8")
    assert exp.config_model is OcsE8Config and exp.quick["fa_streams"] < 400


def test_table_rows(table):
    fa = table[table["part"] == "false_alarm"]
    assert len(fa) == 2 * 4 * 2  # detectors x statistics x deltas
    assert (fa["false_alarm_rate"] <= fa["delta"]).all()
    assert (fa["ci_low"] <= fa["false_alarm_rate"]).all()
    assert (fa["false_alarm_rate"] <= fa["ci_high"]).all()
    assert set(fa["categories"]) == {8, 9, 2, 56}  # marginals, top-8 + other, gradient, pairs
    dl = table[table["part"] == "delay"]
    marg = dl[dl["statistic"] == "marginals"]
    # hot-pod change: the per-source marginals carry the whole KL
    assert np.allclose(marg["kl_stat"], 0.05, rtol=1e-9)
    ok = dl[dl["detected"] == 1]
    assert len(ok) and (ok["mean_delay"] >= 1).all()
    assert ((ok["crossing"] > ok["mean_delay"] - 1) & (ok["crossing"] <= ok["mean_delay"])).all()
    # a smaller delta never alarms earlier on the same streams
    for _, g in ok.groupby(["detector", "statistic"]):
        assert g.sort_values("delta", ascending=False)["mean_delay"].is_monotonic_increasing
    ab = table[table["part"] == "ablation"]
    assert len(ab) == 2  # cusum and glr at n = 8 <= glr_pairs_max_pods
    for _, row in ab.iterrows():  # the union alarms at the first of its components
        delays = [row[f"delay_{s}"] for s in ("marginals", "topr", "gradient")]
        if row["detected_union"] == 1 and all(np.isfinite(delays)):
            assert row["delay_union"] <= min(delays) + 1e-12


def test_figure(table):
    figs = e8_figures(table)
    assert len(figs) == 1 and len(figs[0].axes) >= 2
    assert e8_figures(table.drop(columns="part")) == []
