"""Change detectors (ocs.detect): exactness of the bounded-work update against a rescan of the
raw history, the thresholds against closed forms, the method-of-types bound by enumeration,
and the API's validation."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.optimize import brentq
from scipy.special import rel_entr
from scipy.stats import multinomial

from trainfabric.errors import ConfigError
from trainfabric.ocs.detect.detectors import (
    CusumDetector,
    GlrDetector,
    SplitStore,
    cusum_threshold,
    glr_threshold,
    kl_divergence,
)


def candidates(n: int, density: int | None) -> list[int]:
    """C_n from its definition: s in [0, n) with s a multiple of 2^max(0, floor(log2(n-s)) - b)."""
    if density is None:
        return list(range(n))
    return [s for s in range(n) if s % 2 ** max(0, int(math.log2(n - s)) - density) == 0]


def brute_cusum(history: np.ndarray, p0: np.ndarray, density) -> float:
    """max over C_n of N KL(p^ || p0) of the segment after s, from the raw slots."""
    best = 0.0
    for s in candidates(len(history), density):
        seg = history[s:].sum(0)
        if seg.sum() > 0:
            best = max(best, seg.sum() * kl_divergence(seg / seg.sum(), p0))
    return best


def brute_glr(history: np.ndarray, density) -> float:
    """max over C_n, s >= 1 of the two-segment log-likelihood ratio, from the raw slots."""
    total = history.sum(0)
    if total.sum() == 0:
        return 0.0
    q = total / total.sum()
    best = 0.0
    for s in candidates(len(history), density):
        if s == 0:
            continue
        value = 0.0
        for seg in (history[:s].sum(0), history[s:].sum(0)):
            if seg.sum() > 0:
                value += seg.sum() * kl_divergence(seg / seg.sum(), q)
        best = max(best, value)
    return best


def test_kl_closed_form():
    for a, b in [(0.3, 0.5), (0.01, 0.9), (0.5, 0.5)]:
        closed = a * math.log(a / b) + (1 - a) * math.log((1 - a) / (1 - b))
        assert kl_divergence([a, 1 - a], [b, 1 - b]) == pytest.approx(closed, abs=1e-15)
    assert kl_divergence([0.5, 0.5], [1.0, 0.0]) == math.inf
    assert kl_divergence([1.0, 0.0], [0.5, 0.5]) == pytest.approx(math.log(2))


def test_thresholds_closed_form_and_fixed_point():
    k, n, total, splits, delta = 7, 50, 12_345, 17, 0.01
    h = cusum_threshold(n, total, k, splits, delta)
    want = 6 * math.log(total + 1) + math.log(17) + 2 * math.log(50) + math.log(200)
    assert h == pytest.approx(want, rel=1e-14)
    base = 2 * 6 * math.log(total + 1) + math.log(17) + 2 * math.log(50) + math.log(200)
    exact = brentq(lambda b: b - base - math.log1p(b), base, 2 * base + 10, xtol=1e-13)
    beta = float(glr_threshold(n, total, k, splits, delta))
    assert exact <= beta <= exact * (1 + 1e-4)  # above the fixed point, and close to it
    assert beta - math.log1p(beta) >= base  # what the false-alarm bound needs
    for d in (0.5, 0.2, 1e-6):  # smallest base: one split, no counts, n = 1 or 2
        for n_, tot in [(1, 0), (2, 0), (2, 3)]:
            b0 = 2 * math.log1p(tot) * (k - 1) + 2 * math.log(n_) + math.log(2 / d)
            fixed = brentq(lambda b, b0=b0: b - b0 - math.log1p(b), b0, 4 * b0 + 10)
            assert float(glr_threshold(n_, tot, k, 1, d)) >= fixed
    assert glr_threshold(1, 10, k, 0, delta) == math.inf  # no split yet
    for bad in (0, 1, -0.1, float("nan")):
        with pytest.raises(ConfigError, match="^delta"):
            cusum_threshold(n, total, k, splits, bad)


@pytest.mark.parametrize(("n_counts", "k"), [(6, 3), (10, 2), (4, 4)])
def test_method_of_types_bound_by_enumeration(n_counts, k):
    """P(N KL(p^ || p) >= x) <= (N+1)^(K-1) e^-x, exactly enumerated over all types."""
    p = np.linspace(1, 2, k)
    p /= p.sum()
    types = [c for c in itertools.product(range(n_counts + 1), repeat=k) if sum(c) == n_counts]
    assert len(types) <= (n_counts + 1) ** (k - 1)
    stat = np.array([sum(rel_entr(np.array(c) / n_counts, p)) * n_counts for c in types])
    prob = multinomial.pmf(types, n_counts, p)
    for x in np.linspace(0, stat.max(), 25):
        assert prob[stat >= x].sum() <= (n_counts + 1) ** (k - 1) * math.exp(-x) + 1e-12


@pytest.mark.parametrize("density", [0, 1, 2, 4])
def test_candidate_splits_match_definition_and_size(density):
    store = SplitStore(1, 2, density)
    for n in range(1, 600):
        store.push(np.ones((1, 2)))
        assert store.splits.tolist() == candidates(n, density)
        assert store.splits.size <= 2**density * (math.log2(n) + 2)
        np.testing.assert_array_equal(store.prefix[0, :, 0], store.splits)


streams = st.tuples(
    st.integers(2, 5),  # K
    st.integers(1, 70),  # slots
    st.sampled_from([None, 0, 1, 2]),  # density
    st.integers(0, 2**32 - 1),  # seed
)


@given(streams)
def test_bounded_update_equals_rescan(case):
    """After every slot the statistic equals the brute-force maximum over the same C_n,
    recomputed from the raw history (1e-9), for both detectors; alarms restart the rescan."""
    k, slots, density, seed = case
    rng = np.random.default_rng(seed)
    p0 = rng.dirichlet(np.ones(k))
    sizes = rng.integers(0, 30, slots)
    data = np.array([rng.multinomial(m, rng.dirichlet(np.ones(k))) for m in sizes], float)
    for det, brute in [
        (CusumDetector(p0, 0.3, density), lambda h: brute_cusum(h, p0, density)),
        (GlrDetector(0.3, density), lambda h: brute_glr(h, density)),
    ]:
        start = 0
        for t, c in enumerate(data):
            alarm = det.update(c)
            value = det.last_alarm["statistic"] if alarm else det.statistic
            assert value == pytest.approx(brute(data[start : t + 1]), rel=1e-9, abs=1e-9)
            if alarm:
                assert det.last_alarm["n_obs"] == t + 1 - start
                assert det.n_obs == 0 and det.statistic == 0.0
                start = t + 1


def test_large_counts_precision():
    """N = 6e7 counts: the X(v) identity's cancellation stays below 1e-6 relative."""
    rng = np.random.default_rng(1)
    p0 = rng.dirichlet(np.ones(20))
    data = rng.multinomial(10**6, p0, size=60).astype(float)
    glr, cusum = GlrDetector(1e-3), CusumDetector(p0, 1e-3)
    for t, c in enumerate(data):
        glr.update(c)
        cusum.update(c)
        if t % 10 == 9:
            assert glr.statistic == pytest.approx(brute_glr(data[: t + 1], 2), rel=1e-6)
            assert cusum.statistic == pytest.approx(brute_cusum(data[: t + 1], p0, 2), rel=1e-6)


def test_full_split_set_is_the_exact_glr():
    """density=None: every split, so the statistic is the exact GLR of the spec."""
    rng = np.random.default_rng(3)
    data = rng.multinomial(40, [0.2, 0.3, 0.5], size=30).astype(float)
    det = GlrDetector(1e-6, density=None)
    for t, c in enumerate(data):
        det.update(c)
        exact = (
            max(
                sum(
                    seg.sum()
                    * kl_divergence(seg / seg.sum(), data[: t + 1].sum(0) / data[: t + 1].sum())
                    for seg in (data[:s].sum(0), data[s : t + 1].sum(0))
                )
                for s in range(1, t + 1)
            )
            if t
            else 0.0
        )
        assert det.statistic == pytest.approx(exact, rel=1e-9, abs=1e-9)


def test_api_validation_and_reset():
    det = CusumDetector([1, 1, 2], delta=0.05)
    assert det.categories == 3 and det.n_obs == 0 and det.threshold == math.inf
    for bad in ([1, 2], [1, -1, 2], [1.5, 1, 1], [np.nan, 1, 1], [[1, 2, 3]]):
        with pytest.raises(ConfigError, match="^counts"):
            det.update(bad)
    det.update([3, 4, 5])
    det.update([0, 0, 0])  # an empty slot still counts as a slot
    assert det.n_obs == 2 and np.isfinite(det.threshold)
    det.reset()
    assert det.n_obs == 0 and det.statistic == 0.0
    with pytest.raises(ConfigError, match="^p0"):
        CusumDetector([0, 0])
    with pytest.raises(ConfigError, match="^delta"):
        GlrDetector(delta=1.0)
    with pytest.raises(ConfigError, match="^density"):
        GlrDetector(density=-1)
    glr = GlrDetector(0.1)
    glr.update([1, 2])
    with pytest.raises(ConfigError, match="^counts"):
        glr.update([1, 2, 3])  # K fixed by the first slot
    # an impossible category under p0 is an immediate CUSUM alarm
    assert CusumDetector([1, 1, 0], 0.01).update([0, 0, 1])
