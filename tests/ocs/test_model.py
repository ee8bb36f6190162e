"""OcsModel: input checks name the field; pair indexing agrees with triu_indices."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainfabric.errors import ConfigError, InfeasibleError
from trainfabric.ocs.model import OcsModel


@given(st.integers(2, 40))
def test_pair_index_inverts_triu(n):
    m = OcsModel.uniform(n, 2, 1)
    iu, iv = m.pairs
    np.testing.assert_array_equal(m.pair_index(iu, iv), np.arange(m.n_pairs))
    np.testing.assert_array_equal(m.pair_index(iv, iu), np.arange(m.n_pairs))


@given(st.integers(2, 12), st.integers(0, 10**6))
def test_matrix_round_trip_and_degrees(n, seed):
    m = OcsModel.uniform(n, 2, 1)
    x = np.random.default_rng(seed).integers(0, 5, m.n_pairs)
    mat = m.to_matrix(x)
    assert (mat == mat.T).all() and not np.diag(mat).any()
    np.testing.assert_array_equal(m.from_matrix(mat), x)
    np.testing.assert_array_equal(m.pod_degrees(x), mat.sum(axis=1))


@pytest.mark.parametrize(
    ("degrees", "ocs", "field"),
    [
        ([3, 3, 3], 1, "ports"),  # odd total
        ([10, 2, 2, 2], 1, "ports"),  # one pod owns more than half
        ([4, 4, 6], 4, "ocs"),  # 4 does not divide 6
        ([4, 4], 0, "ocs"),
        ([4], 1, "pods"),
    ],
)
def test_bad_instances_name_the_field(degrees, ocs, field):
    with pytest.raises(ConfigError) as exc:
        OcsModel(np.array(degrees), ocs)
    assert exc.value.field == field


def test_fallback_must_be_positive():
    with pytest.raises(ConfigError) as exc:
        OcsModel.uniform(4, 4, 2, fallback_bps=0.0)
    assert exc.value.field == "fallback_bps"


def test_check_wiring():
    m = OcsModel.uniform(4, 2, 1)
    ring = np.zeros(m.n_pairs, int)
    ring[m.pair_index([0, 1, 2, 3], [1, 2, 3, 0])] = 1
    m.check_wiring(ring)
    ring[0] += 1
    with pytest.raises(InfeasibleError, match="pod 0"):
        m.check_wiring(ring)
