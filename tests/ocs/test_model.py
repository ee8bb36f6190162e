"""OcsModel: input checks name the field; pair indexing agrees with triu_indices; dark ports
(``Σ_u x_uv ≤ d_v``) and the completability of a degree vector against enumeration."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
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
        ([3, 0, 3], 1, "ports"),
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


def test_check_wiring_allows_dark_ports_unless_exact():
    m = OcsModel.uniform(4, 2, 1)
    ring = np.zeros(m.n_pairs, int)
    ring[m.pair_index([0, 1, 2, 3], [1, 2, 3, 0])] = 1
    m.check_wiring(ring)
    m.check_wiring(ring, exact=True)
    np.testing.assert_array_equal(m.free_ports(ring), 0)
    path = ring.copy()
    path[m.pair_index(3, 0)] = 0  # pods 3 and 0 keep one dark port each
    m.check_wiring(path)
    np.testing.assert_array_equal(m.free_ports(path), [1, 0, 0, 1])
    with pytest.raises(InfeasibleError, match="pod 0 uses 1 ports, has 2"):
        m.check_wiring(path, exact=True)
    ring[0] += 1
    with pytest.raises(InfeasibleError, match="pod 0"):
        m.check_wiring(ring)
    with pytest.raises(InfeasibleError, match="integer"):
        m.check_wiring(ring * 0.5)


def _all_wirings(m: OcsModel):
    """Every wiring with at most ``d_v`` ports per pod (exhaustive), as pair vectors."""
    caps = np.minimum(m.degrees[m.pairs[0]], m.degrees[m.pairs[1]])
    for x in itertools.product(*(range(int(c) + 1) for c in caps)):
        x = np.array(x)
        if (m.pod_degrees(x) <= m.degrees).all():
            yield x


def _max_circuits_brute(d: np.ndarray) -> int:
    return max(int(x.sum()) for x in _all_wirings(OcsModel(d, 1)))


def _completable_brute(d: np.ndarray) -> bool:
    m = OcsModel(d, 1)
    return any(np.array_equal(m.pod_degrees(x), d) for x in _all_wirings(m))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=2, max_size=4))
def test_odd_totals_and_dominant_pods_are_legal(degrees):
    """Any positive degrees make a model; ``completable`` and ``max_circuits`` against
    exhaustive enumeration of the wirings."""
    d = np.array(degrees, dtype=np.int64)
    m = OcsModel(d, 1)
    assert m.completable == _completable_brute(d)
    assert m.max_circuits == _max_circuits_brute(d)
    assert m.total_circuits == d.sum() // 2
