"""Live-run analysis against hand computations, brute force and scipy."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from trainfabric.diloco import live_analysis as A
from trainfabric.errors import ConfigError


def test_overlaps_by_hand():
    syncs = [(10.0, 12.0), (20.0, 21.0)]
    start = np.array([0.0, 9.0, 12.0, 11.0, 15.0, 21.0, 19.0])
    end = np.array([5.0, 10.0, 13.0, 11.5, 19.9, 30.0, 25.0])
    # [12, 13] starts at the end of [10, 12): outside; [21, 30] likewise
    assert A.overlaps(start, end, syncs).tolist() == [False, True, False, True, False, False, True]


@given(
    st.lists(st.tuples(st.floats(0, 100), st.floats(0, 5)), max_size=6),
    st.lists(st.tuples(st.floats(0, 100), st.floats(0, 20)), min_size=1, max_size=20),
)
def test_overlaps_equals_brute_force(raw_syncs, raw_req):
    syncs, t = [], 0.0
    for gap, dur in raw_syncs:  # serial, non-overlapping syncs
        syncs.append((t + gap, t + gap + dur))
        t += gap + dur
    start = np.array([a for a, _ in raw_req])
    end = start + np.array([d for _, d in raw_req])
    brute = [any(a <= e and s < b for a, b in syncs) for s, e in zip(start, end, strict=True)]
    assert A.overlaps(start, end, syncs).tolist() == brute


def _requests(rng, n=400):
    arrival = np.sort(rng.uniform(0, 100, n))
    ttft = rng.exponential(0.2, n)
    tpot = rng.exponential(0.02, n)
    finish = arrival + ttft + 10 * tpot
    return pd.DataFrame(
        {
            "arrival_s": arrival,
            "finish_s": finish,
            "ttft_s": ttft,
            "tpot_s": tpot,
            "violated": (ttft > 0.5) | (tpot > 0.05),
        }
    )


def test_latency_split_means_and_cis():
    req = _requests(np.random.default_rng(1))
    syncs = [(20.0, 30.0), (60.0, 75.0)]
    res = A.latency_split(req, syncs, horizon_s=100.0)
    inside = A.overlaps(req["arrival_s"], req["finish_s"], syncs)
    assert res["inside"]["requests"] == inside.sum()
    assert res["outside"]["requests"] == (~inside).sum()
    assert res["inside"]["ttft_s"] == pytest.approx(req["ttft_s"][inside].mean())
    assert res["outside"]["slo_violation_rate"] == pytest.approx(req["violated"][~inside].mean())
    ref = stats.bootstrap(
        (req["ttft_s"][inside].to_numpy(),), np.mean, method="percentile", random_state=3
    ).confidence_interval
    lo, hi = res["inside"]["ttft_s_ci"]
    assert lo == pytest.approx(ref.low, rel=0.1) and hi == pytest.approx(ref.high, rel=0.1)
    diff = res["difference"]["tpot_s"]
    assert diff["inside_minus_outside"] == pytest.approx(
        req["tpot_s"][inside].mean() - req["tpot_s"][~inside].mean()
    )
    assert diff["ci"][0] < diff["inside_minus_outside"] < diff["ci"][1]


def test_unfinished_request_lives_to_the_horizon():
    req = pd.DataFrame(
        {
            "arrival_s": [1.0, 2.0],
            "finish_s": [1.5, np.nan],
            "ttft_s": [0.1, np.nan],
            "tpot_s": [0.01, np.nan],
            "violated": [False, True],
        }
    )
    res = A.latency_split(req, [(50.0, 51.0)], horizon_s=60.0)
    assert res["inside"]["requests"] == 1 and res["inside"]["slo_violation_rate"] == 1.0
    assert res["inside"]["ttft_s"] is None and res["inside"]["ttft_s_ci"] == [None, None]


def test_missing_column_names_the_field():
    with pytest.raises(ConfigError, match=r"requests\.tpot_s"):
        A.latency_split(
            pd.DataFrame({"arrival_s": [], "finish_s": [], "ttft_s": [], "violated": []}), [], 1.0
        )


def test_loss_at_equal_tokens_interpolates_and_refuses_extrapolation():
    tokens, loss = [0, 100, 300], [5.0, 4.0, 3.0]
    assert A.loss_at(tokens, loss, 200) == pytest.approx(3.5)
    assert A.loss_at(tokens[::-1], loss[::-1], 50) == pytest.approx(4.5)  # unsorted input
    with pytest.raises(ConfigError, match="eval_curve"):
        A.loss_at(tokens, loss, 301)
    curves = [([0, 100, 300], loss), ([0, 250], [5.0, 3.2])]
    x0 = A.common_point(curves)
    assert x0 == 250
    assert [A.loss_at(x, y, x0) for x, y in curves] == pytest.approx([3.25, 3.2])


def test_ols_matches_scipy_linregress():
    rng = np.random.default_rng(4)
    x = rng.uniform(0, 0.3, 30)
    y = 0.01 + 0.7 * x + rng.normal(0, 0.01, 30)
    ref = stats.linregress(x, y)
    fit = A.ols(x, y)
    assert fit["slope"] == pytest.approx(ref.slope)
    assert fit["intercept"] == pytest.approx(ref.intercept)
    assert fit["r2"] == pytest.approx(ref.rvalue**2)
    assert A.ols([1, 1, 1], [1, 2, 3])["slope"] is None


def test_sync_time_regression_and_explained_share():
    rows = []
    for seed in range(5):
        floor = 0.02 + 0.001 * seed
        rows.append(
            {
                "policy": "no_sync",
                "seed": seed,
                "slo_violation_rate": floor,
                "sync_time_fraction": 0.0,
            }
        )
        for pol, f in (("a", 0.1 + 0.01 * seed), ("b", 0.2 + 0.005 * seed)):
            rows.append(
                {
                    "policy": pol,
                    "seed": seed,
                    "slo_violation_rate": floor + 0.5 * f,
                    "sync_time_fraction": f,
                }
            )
    fit = A.sync_time_regression(pd.DataFrame(rows))
    assert fit["slope"] == pytest.approx(0.5) and fit["r2"] == pytest.approx(1.0)
    assert fit["intercept"] == pytest.approx(0.0, abs=1e-12) and fit["n"] == 10
    # an effect fully explained by the sync-time difference has share 1; half of it 0.5
    assert A.explained_share(0.5, [0.1, 0.1], [0.05, 0.05]) == pytest.approx(1.0)
    assert A.explained_share(0.5, [0.1], [0.1]) == pytest.approx(0.5)
    assert A.explained_share(0.5, [0.1], [0.0]) is None


def test_paired_and_min_attainable_p():
    d = np.array([-1.0, -2, -3, -4, -5, -6, -7, -8, -9, -10])
    res = A.paired(d)
    assert res["min_attainable_p"] == pytest.approx(2 / 1024)
    assert res["p_wilcoxon"] == pytest.approx(stats.wilcoxon(d).pvalue)
    assert res["p_sign"] == pytest.approx(2 / 1024)
    assert res["seeds_lower"] == 10 and res["mean"] == -5.5


def test_effect_ratio_guards():
    r = A.effect_ratio([0.02, 0.04], [0.01, 0.03])
    assert r["sim_vs_real_effect_ratio"] == pytest.approx(1.5)
    zero = A.effect_ratio([0.01, 0.02], [0.0, 0.0])
    assert zero["sim_vs_real_effect_ratio"] is None and "undefined" in zero["ratio_note"]
    noisy = A.effect_ratio([0.01, 0.01, 0.01], [0.05, -0.04, 0.02])
    assert not noisy["real_effect_significant"] and "noise" in noisy["ratio_note"]
    strong = A.effect_ratio([0.01] * 6, [0.02, 0.021, 0.019, 0.02, 0.022, 0.018])
    assert strong["real_effect_significant"] and strong["sim_vs_real_effect_ratio"] == (
        pytest.approx(0.5)
    )
