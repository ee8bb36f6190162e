"""Faults during a training iteration: the draws' maths, failed cables and flaps on small jobs."""

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainfabric.errors import ConfigError
from trainfabric.fabric import iteration_faults as IF
from trainfabric.fabric import topology as T

# -- the draws' maths ----------------------------------------------------------------------------
spans = st.lists(
    st.tuples(st.integers(0, 40), st.integers(0, 10)).map(lambda p: (p[0], p[0] + p[1])),
    min_size=1,
    max_size=8,
)


@given(spans)
def test_merged_intervals_cover_exactly_the_union(pairs):
    """On an integer grid: a point is in the merged union iff it is in some input interval."""
    s, f = np.array(pairs, float).T
    merged = IF.merge_intervals(s, f)
    grid = np.arange(0, 52) + 0.5
    inside = ((grid[:, None] >= s) & (grid[:, None] < f)).any(axis=1)
    in_merged = ((grid[:, None] >= merged[:, 0]) & (grid[:, None] < merged[:, 1])).any(axis=1)
    assert np.array_equal(inside, in_merged)
    assert np.all(merged[1:, 0] > merged[:-1, 1])  # disjoint, sorted, not touching


def test_times_are_uniform_over_the_union_by_length():
    iv = np.array([[0.0, 1.0], [5.0, 8.0]])
    t = IF.time_in_intervals(iv, np.array([0.0, 0.125, 0.25, 0.5, 0.999999]))
    np.testing.assert_allclose(t, [0.0, 0.5, 5.0, 6.0, 8.0], atol=1e-5)
    u = np.random.default_rng(0).random(20000)
    t = IF.time_in_intervals(iv, u)
    assert ((t >= 0) & (t <= 1)).mean() == pytest.approx(0.25, abs=0.01)
    assert not np.any((t > 1) & (t < 5))
    with pytest.raises(ConfigError, match="faults"):
        IF.time_in_intervals(np.zeros((0, 2)), u)


def test_cable_candidates_are_the_used_cables_of_a_side():
    topo = T.multiplane(16, planes=2, switch_radix=8, nic_rate_bps=400e9)
    bits = np.zeros(topo.n_links)
    host = topo.host_down[1, 3]  # traffic into GPU 3 on plane 1 only
    up1 = np.flatnonzero(topo.link_tier == T.UP1)
    spine = topo.reverse[up1[5]]  # traffic on the spine -> leaf direction of cable up1[5]
    bits[[host, spine]] = 1.0
    assert IF.cable_candidates(topo, bits, "nic").tolist() == [topo.host_up[1, 3]]
    assert IF.cable_candidates(topo, bits, "fabric").tolist() == [up1[5]]
    assert set(IF.cable_links(topo, up1[5])) == {up1[5], spine}
    with pytest.raises(ConfigError, match="flap_sides"):
        IF.cable_candidates(topo, bits, "spine")


def test_flap_plan_spreads_draws_and_is_the_same_for_every_call():
    faults = SimpleNamespace(
        flap_sides=["nic", "fabric"], flap_durations_s=[1e-3, 1.0], flap_draws=10
    )
    plan = IF.flap_plan(faults, seed=4)
    assert len(plan) == 12  # ceil(10 / 4) = 3 per (side, duration)
    assert plan.groupby(["side", "duration_s"]).size().eq(3).all()
    pd.testing.assert_frame_equal(plan, IF.flap_plan(faults, seed=4))
    assert not plan.equals(IF.flap_plan(faults, seed=5))


def test_summaries_by_hand():
    fail = pd.DataFrame({"mode": ["ecmp"] * 3, "failed_fraction": 0.1, "slowdown": [1.0, 1.5, 1.2]})
    assert IF.failures_summary(fail) == {
        "ecmp": {"failure_slowdown_median": 1.2, "failure_slowdown_worst": 1.5}
    }
    flaps = pd.DataFrame(
        {
            "mode": "spray",
            "side": "nic",
            "duration_s": 0.001,
            "slowdown": np.arange(1, 102) / 100 + 1,
            "hit": [True] * 26 + [False] * 75,
        }
    )
    s = IF.flaps_summary(flaps)["spray"]
    assert s["flap_slowdown_p50"] == pytest.approx(1.51)
    assert s["flap_slowdown_p99"] == pytest.approx(2.0)
    assert s["flap_slowdown_max"] == pytest.approx(2.01)
    assert s["flap_hit_rate"] == pytest.approx(26 / 101)
    assert s["flap_slowdown_p90_nic_1ms"] == s["flap_slowdown_p90"]
