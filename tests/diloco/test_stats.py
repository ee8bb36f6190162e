"""Paired statistics against scipy.stats on the same data, and closed forms."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from trainfabric.diloco import stats as S

pairs = st.lists(
    st.floats(-5, 5, allow_nan=False).map(lambda x: round(x, 3)), min_size=3, max_size=12
).map(np.array)


@given(pairs)
def test_sign_test_matches_scipy_binomtest(d):
    nz = d[d != 0]
    expect = 1.0 if nz.size == 0 else stats.binomtest(int((nz > 0).sum()), nz.size).pvalue
    assert S.sign_test(d) == pytest.approx(expect, rel=1e-12)


@given(pairs)
def test_sign_flip_matches_scipy_permutation_test(d):
    res = stats.permutation_test(
        (d,), np.mean, permutation_type="samples", alternative="two-sided", n_resamples=np.inf
    )
    assert S.sign_flip_test(d) == pytest.approx(min(1.0, res.pvalue), rel=1e-9)


def test_sign_flip_monte_carlo_is_close_to_exact():
    d = np.random.default_rng(3).normal(0.4, 1.0, 16)
    assert S.sign_flip_test(d, exact_max=0, draws=200_000) == pytest.approx(
        S.sign_flip_test(d), abs=0.005
    )


def test_seed_artifact_floor():
    """With 5 seeds the exact sign-flip test cannot go below 2/32; 8 of 10 positive signs
    give a two-sided sign-test p of 0.109 (one-sided 0.055, not the abstract's 0.021)."""
    assert S.sign_flip_test(np.array([1.0, 2, 3, 4, 5])) == pytest.approx(2 / 32)
    assert S.sign_test(np.r_[np.ones(8), -np.ones(2)]) == pytest.approx(2 * 56 / 1024)


def test_wilcoxon_exact_closed_forms():
    """Exact null of the signed-rank sum over n = 5 untied ranks (2^5 equally likely signs):
    all positive is the most extreme of 32, two-sided p = 2/32; W+ = 13 of 15 leaves
    P(W+ >= 13) = 3/32 (W+ in {13, 14, 15}), two-sided 6/32. Zeros are dropped first."""
    assert S.wilcoxon([1.0, 2, 3, 4, 5]) == pytest.approx(2 / 32)
    assert S.wilcoxon([-2.0, 1, 3, 4, 5]) == pytest.approx(6 / 32)
    assert S.wilcoxon([0.0, 0, -2, 1, 3, 4, 5]) == pytest.approx(6 / 32)
    assert S.wilcoxon([0.0, 0.0, 0.0]) == 1.0


def test_bootstrap_ci_agrees_with_scipy():
    d = np.random.default_rng(0).normal(1.0, 2.0, 40)
    ours = S.bootstrap_ci(d, draws=20_000, seed=1)
    ref = stats.bootstrap((d,), np.mean, method="percentile", n_resamples=20_000, random_state=2)
    assert ours == pytest.approx(tuple(ref.confidence_interval), abs=0.05)
    assert ours[0] < d.mean() < ours[1]


def test_holm_hand_example():
    p = np.array([0.01, 0.04, 0.03, 0.005])
    assert S.holm(p).tolist() == pytest.approx([0.03, 0.06, 0.06, 0.02])


def test_effect_size_and_power():
    d = np.array([1.0, 2.0, 3.0])
    assert S.effect_size(d) == pytest.approx(2.0 / 1.0)
    z = stats.norm.ppf(0.975) + stats.norm.ppf(0.8)
    assert S.seeds_for_power(0.5, 1.0, test="wilcoxon") == math.ceil((z * 2) ** 2 * math.pi / 3)


def _old_exact_sign_flip(d):
    """The former exact branch: the full 2^n x n sign matrix (reference for small n)."""
    signs = 1 - 2 * ((np.arange(2**d.size)[:, None] >> np.arange(d.size)) & 1)
    tol = 1e-12 * max(1.0, np.abs(d).sum())
    return float(np.mean(np.abs(signs @ d) >= abs(d.sum()) - tol))


@pytest.mark.parametrize("n", [1, 5, 13, 14, 15, 17])
def test_blocked_sign_flip_equals_the_full_matrix(n):
    """Below, at and above the block size (2^14) the blocked count is the old count."""
    d = np.round(np.random.default_rng(n).normal(0.3, 1.0, n), 2)
    assert S.sign_flip_test(d) == _old_exact_sign_flip(d)


def test_exact_sign_flip_memory_is_bounded():
    """n = 20 exactly: the old matrix was 2^20 x 20 int64 (168 MB); now a few MB at most."""
    import tracemalloc

    d = np.r_[np.ones(15), -np.ones(5)]  # |sum| = 10: 2 * P(Bin(20, 1/2) >= 15) exactly
    tracemalloc.start()
    p = S.sign_flip_test(d)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert p == 2 * sum(math.comb(20, k) for k in range(15, 21)) / 2**20
    assert peak < 5e6


def test_sign_test_hand_values():
    """0 of 6 positive: 2 / 64; 3 of 6: 1 (binomial, two-sided)."""
    assert S.sign_test(-np.ones(6)) == pytest.approx(2 / 64, rel=1e-12)
    assert S.sign_test(np.r_[np.ones(3), -np.ones(3)]) == 1.0
