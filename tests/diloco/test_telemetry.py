"""Telemetry: Prometheus' histogram_quantile against brute force, windows of two scrapes, the
pressures' closed forms, and the Observation builder."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainfabric.diloco import telemetry as T
from trainfabric.diloco.policies import FIELDS
from trainfabric.errors import ConfigError

BOUNDS = T.TTFT_BUCKETS


def test_histogram_quantile_hand_computed():
    """Buckets le=1: 10, le=2: 30, +Inf: 40. p50: rank 20 in (1, 2] -> 1 + 1 * 10/20 = 1.5;
    p10: rank 4 in (0, 1] -> 0.4; p90: rank 36 in +Inf -> the largest finite bound, 2."""
    h = T.Histogram((1.0, 2.0), np.array([10.0, 30.0]), 55.0, 40.0)
    assert h.quantile(0.5) == pytest.approx(1.5)
    assert h.quantile(0.1) == pytest.approx(0.4)
    assert h.quantile(0.9) == 2.0
    assert np.isnan(T.Histogram((1.0,), np.array([0.0])).quantile(0.5))


@given(
    st.integers(0, 2**31 - 1),
    st.integers(1, 400),
    st.floats(1e-3, 1.0),
    st.floats(-6.0, 2.0),
)
def test_histogram_quantile_within_bucket_of_raw_quantile(seed, n, q, mu):
    """The estimate lies in the bucket holding the raw sample's quantile (Prometheus' rank
    definition: the smallest observation x with #(obs <= x) >= q n)."""
    x = np.random.default_rng(seed).lognormal(mu, 1.5, n)
    h = T.Histogram.of(BOUNDS, x)
    est = h.quantile(q)
    xs = np.sort(x)
    k = max(int(np.ceil(q * n)) - 1, 0)
    true = xs[k]
    u = np.r_[0.0, BOUNDS]
    b = np.searchsorted(BOUNDS, true, side="left")  # bucket (u[b], u[b+1]] holds true
    if b >= len(BOUNDS):  # in +Inf: Prometheus returns the largest finite bound
        assert est == BOUNDS[-1]
    else:  # same bucket, so within its width of the raw quantile
        assert u[b] - 1e-12 <= est <= u[b + 1] + 1e-12
        assert abs(est - true) <= u[b + 1] - u[b] + 1e-12


def test_histogram_quantile_exact_for_uniform_within_buckets():
    """Observations spread evenly inside each bucket: linear interpolation is exact."""
    bounds = (1.0, 2.0, 4.0)
    x = np.r_[np.linspace(0, 1, 1001)[1:], np.linspace(1, 2, 1001)[1:], np.linspace(2, 4, 1001)[1:]]
    h = T.Histogram.of(bounds, x)
    for q in (0.1, 0.25, 0.5, 0.8, 0.95):
        assert h.quantile(q) == pytest.approx(np.quantile(x, q), abs=3e-3)


def test_histogram_quantile_vectorised_equals_one_by_one():
    rng = np.random.default_rng(1)
    hs = [T.Histogram.of(BOUNDS, rng.lognormal(-2, 1, rng.integers(0, 30))) for _ in range(20)]
    est = T.histogram_quantile(
        0.9, BOUNDS, np.stack([h.buckets for h in hs]), [h.count for h in hs]
    )
    one = [h.quantile(0.9) for h in hs]
    np.testing.assert_array_equal(est, one)


def test_histogram_validation():
    with pytest.raises(ConfigError, match="histogram.buckets"):
        T.Histogram((1.0, 2.0), np.array([5.0, 3.0]), 0.0, 6.0)
    with pytest.raises(ConfigError, match="histogram.buckets"):
        T.Histogram((1.0, 2.0), np.array([1.0, 3.0]), 0.0, 2.0)
    with pytest.raises(ConfigError, match="histogram.bounds"):
        T.Histogram((2.0, 1.0), np.array([0.0, 0.0]))
    with pytest.raises(ConfigError, match="quantile"):
        T.histogram_quantile(1.5, (1.0,), [0.0], 0.0)


def _sample(t, ttft_obs, itl_obs, running=3, waiting=1, kv=0.25, pre=0):
    return T.ServerSample(
        time_s=t,
        num_requests_running=running,
        num_requests_waiting=waiting,
        kv_cache_usage_perc=kv,
        time_to_first_token_seconds=T.Histogram.of(T.TTFT_BUCKETS, ttft_obs),
        inter_token_latency_seconds=T.Histogram.of(T.ITL_BUCKETS, itl_obs),
        num_preemptions_total=pre,
    )


def test_window_is_the_delta_of_two_scrapes():
    rng = np.random.default_rng(5)
    old_ttft, new_ttft = rng.lognormal(-3, 0.3, 50), rng.lognormal(0, 0.3, 40)
    old_itl, new_itl = rng.lognormal(-4, 0.2, 500), rng.lognormal(-2, 0.2, 300)
    a = _sample(10.0, old_ttft, old_itl, pre=2)
    b = _sample(12.0, np.r_[old_ttft, new_ttft], np.r_[old_itl, new_itl], 7, 4, 0.6, pre=5)
    w = T.window(a, b, 0.5)
    assert w.duration_s == 2.0 and (w.running, w.waiting, w.kv_usage) == (7, 4, 0.6)
    assert (w.first_tokens, w.tokens, w.preemptions) == (40, 300, 3)
    alone = T.Histogram.of(T.TTFT_BUCKETS, new_ttft)  # the window's observations only
    assert w.ttft_s == pytest.approx(alone.quantile(0.5))
    assert w.itl_s == pytest.approx(T.Histogram.of(T.ITL_BUCKETS, new_itl).quantile(0.5))
    # a restarted server: counters went down, the later values are the window's counts
    r = T.window(b, _sample(13.0, new_ttft[:3], new_itl[:5], pre=1))
    assert (r.first_tokens, r.tokens, r.preemptions) == (3, 5, 1)
    with pytest.raises(ConfigError, match="time_s"):
        T.window(b, a)
    with pytest.raises(ConfigError, match="kv_cache_usage_perc"):
        _sample(1.0, [], [], kv=42.0)  # a percentage where vLLM exports a fraction


def test_share_above_exact_at_bounds_and_bracketed_between():
    rng = np.random.default_rng(3)
    x = rng.lognormal(-1.5, 1.2, 500)
    h = T.Histogram.of(BOUNDS, x)
    for slo in (0.1, 0.5, 1.0, 2560.0):  # bucket bounds: exact
        assert h.share_above(slo) == pytest.approx(np.mean(x > slo), abs=1e-12)
    for slo in (0.3, 0.7, 3.0):  # inside a bucket: between the shares at its bounds
        i = np.searchsorted(BOUNDS, slo)
        lo = BOUNDS[i - 1]
        hi = BOUNDS[i]
        assert np.mean(x > hi) - 1e-12 <= h.share_above(slo) <= np.mean(x > lo) + 1e-12
    assert h.share_above(1e4) == pytest.approx(np.mean(x > BOUNDS[-1]))  # the +Inf bucket
    assert np.isnan(T.Histogram.of(BOUNDS, []).share_above(0.5))


def test_inference_pressure_closed_form():
    m = T.PressureModel(tail=0.1, queue_scale=10)
    assert m.inference(0.1, 0, np.nan, np.nan) == pytest.approx(0.1)
    assert m.inference(0.1, 3, 0.01, 0.0) == pytest.approx(0.3)  # queue 3/10
    assert m.inference(0.1, 0, 0.07, 0.0) == pytest.approx(0.7)  # 7% of TTFTs late / 10%
    assert m.inference(0.1, 0, 0.0, 0.08) == pytest.approx(0.8)  # 8% of tokens late
    assert m.inference(0.0, 100, 0.5, 1.0) == 1.0
    np.testing.assert_allclose(
        m.inference(np.array([0.0, 0.5]), np.array([1, 0]), np.array([0.04, np.nan]), 0.0),
        [0.4, 0.5],
    )
    # from two scrapes: 3 of 10 first tokens over 0.5 s -> 0.3 / 0.1 -> capped at 1
    a = _sample(0.0, [], [], waiting=0, kv=0.0)
    b = _sample(1.0, [0.1] * 7 + [0.9] * 3, [0.01] * 50, waiting=0, kv=0.2)
    assert m.of_window(T.window(a, b)) == 1.0
    b = _sample(1.0, [0.1] * 99 + [0.9], [0.01] * 50, waiting=0, kv=0.05)
    assert m.of_window(T.window(a, b)) == pytest.approx(0.1)  # 1% late / 10%


def test_inference_pressure_is_graded_in_the_simulator():
    """Steady load on the default engines (their queue grows from about 17 requests/s): the
    pressure rises with the rate and is well below 1 at 30% of capacity (5 requests/s),
    where the old signal, the engines' busy fraction, is already high."""
    from trainfabric.diloco.fleet import REGIMES, FleetConfig, pressure_model, server_pressure
    from trainfabric.diloco.serving import BUSY_S, EngineState, advance

    cfg = FleetConfig(windows=300)
    means, busy = [], []
    for rate in (1.5, 5.0, 12.0, 17.0):
        r = REGIMES["steady"].model_copy(update={"rate": rate}).requests(cfg.horizon_s, 0)
        st_ = EngineState.empty(1, cfg.serving)
        p, b = [], []
        for w in range(cfg.windows):
            c = advance(
                st_, r.arrival_s[None], r.prompt_tokens[None], r.output_tokens[None],
                np.array([r.n]), np.array([0]), w + 1.0, np.array([-np.inf]), cfg.serving,
            )  # fmt: skip
            p.append(server_pressure(pressure_model(cfg), c)[0])
            b.append(c[0, BUSY_S] / cfg.serving.replicas)
        means.append(np.mean(p))
        busy.append(np.mean(b))
    assert np.all(np.diff(means) > 0), means
    assert means[1] < 0.2 and busy[1] > 0.6, (means, busy)
    assert means[-1] > 0.8, means


def test_link_utilisation_and_checkpoint():
    # 125 MB in 10 s at 1 Gb/s = 10% ... 12.5e6 B * 8 / (10 s * 1e9) = 0.01
    assert T.link_utilisation((0, 0.0), (12.5e6, 10.0), 1e9) == pytest.approx(0.01)
    assert T.link_utilisation((1e9, 0.0), (2e9, 1.0), 1e9) == 1.0  # capped
    assert T.link_utilisation((5e9, 0.0), (1.25e8, 1.0), 1e9) == pytest.approx(1.0)  # reset
    assert T.link_utilisation((5e9, 0.0), (6.25e7, 1.0), 1e9) == pytest.approx(0.5)
    with pytest.raises(ConfigError, match="time_s"):
        T.link_utilisation((0, 2.0), (1, 1.0), 1e9)
    with pytest.raises(ConfigError, match="rate_bps"):
        T.link_utilisation((0, 0.0), (1, 1.0), 0)
    assert T.checkpoint_pressure(True) == 1.0 and T.checkpoint_pressure(False) == 0.0


def test_telemetry_builds_observations_with_the_ewma_forecast():
    tel = T.Telemetry(2, rate=2.0, window_s=1.0, alpha=0.5)
    obs = tel.observe(0, h=5, tokens=1, loss_delta=0, staleness_s=0, network=0.2,
                      inference=[0.1, 0.3], checkpoint=1)  # fmt: skip
    assert obs.data.shape == (len(FIELDS), 2)
    np.testing.assert_array_equal(obs.inference, [0.1, 0.3])
    np.testing.assert_array_equal(obs.serve_forecast, [0, 0])
    tel.update(requests=np.array([2, 8]))  # loads cap(2/4) = 0.5, cap(8/4) = 1
    tel.update(requests=np.array([0, 4]))  # 0, 1
    obs = tel.observe(2, h=0, tokens=0, loss_delta=0, staleness_s=0, network=0, inference=0,
                      checkpoint=0)  # fmt: skip
    np.testing.assert_allclose(obs.serve_now, [0.0, 1.0])
    np.testing.assert_allclose(obs.serve_forecast, [0.125, 0.75])  # 0.5 x + 0.5 f, twice


@given(st.integers(0, 2**31 - 1), st.integers(0, 60), st.floats(1e-4, 5000.0))
def test_share_above_per_bucket_equals_the_cumulative_form(seed, n, x):
    """The simulator's per-bucket path and the scrape path give the same shares."""
    rng = np.random.default_rng(seed)
    per = rng.integers(0, 5, (3, len(BOUNDS) + 1)) * (rng.uniform(size=(3, 1)) < 0.8)
    per[0, :] = 0 if n == 0 else per[0, :]  # a window without observations
    cum = np.cumsum(per, axis=-1)
    a = T.share_above_per_bucket(x, BOUNDS, per)
    b = T.histogram_share_above(x, BOUNDS, cum[:, :-1], cum[:, -1])
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
