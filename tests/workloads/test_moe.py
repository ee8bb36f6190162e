"""Expert-load skew: exact Gini, seeded permutation, reference Gini formula."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainfabric.errors import ConfigError
from trainfabric.workloads.moe import expert_popularity, gini, shard_share


def brute_gini(x):
    x = np.asarray(x, float)
    return np.abs(x[:, None] - x[None, :]).sum() / (2 * x.size * x.sum())


@given(st.lists(st.floats(0, 100), min_size=1, max_size=30))
def test_gini_matches_pairwise_definition(xs):
    if sum(xs) == 0:
        assert gini(xs) == 0
    else:
        assert gini(xs) == pytest.approx(brute_gini(xs), abs=1e-12)


@given(st.sampled_from([8, 16, 64, 256]), st.floats(0.0, 0.5), st.integers(0, 2**31))
def test_popularity_has_exact_gini(experts, target, seed):
    p = expert_popularity(experts, target, np.random.default_rng(seed))
    assert p.sum() == pytest.approx(1.0, abs=1e-12)
    assert (p > 0).all()
    assert gini(p) == pytest.approx(target, abs=1e-9)


def test_same_seed_same_draw_and_seed_moves_hot_expert():
    a = expert_popularity(64, 0.3, np.random.default_rng(1))
    b = expert_popularity(64, 0.3, np.random.default_rng(1))
    c = expert_popularity(64, 0.3, np.random.default_rng(2))
    np.testing.assert_array_equal(a, b)
    assert np.argmax(a) != np.argmax(c) or not np.array_equal(a, c)
    np.testing.assert_allclose(np.sort(a), np.sort(c))


def test_unreachable_gini_is_a_config_error():
    with pytest.raises(ConfigError) as exc:
        expert_popularity(2, 0.6, np.random.default_rng(0))
    assert exc.value.field == "moe_skew_gini"


def test_shard_share_sums_blocks():
    p = np.arange(1, 9) / 36
    np.testing.assert_allclose(shard_share(p, 4), [3 / 36, 7 / 36, 11 / 36, 15 / 36])
    with pytest.raises(ConfigError):
        shard_share(p, 3)
