"""Max-min fair rates (progressive filling) against an independent dense water-filling, an LP
for the max-min's minimum, and the bottleneck certificate.

The max-min fair allocation is unique and characterised by a certificate: it is feasible and
every flow crosses a saturated link on which no flow has a larger rate. Random instances mix
single-link slots (group id ``< n_links``) and spread groups (:class:`routing.Groups`, ids from
``n_links``), several slots per flow (repeats and unused ``-1`` slots included), and solve only
a subset of the flows (the rest must be ignored).
"""

import numpy as np
import pytest
from fabric_algebra import dense
from hypothesis import given
from hypothesis import strategies as st
from scipy.optimize import linprog

from trainfabric.fabric.maxmin import (
    build_incidence,
    link_load,
    max_min_rates,
    path_sum,
)
from trainfabric.fabric.routing import Groups


def water_filling(A: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """Dense progressive filling: raise all unfrozen rates together, freeze the flows of every
    link that saturates first (exact ties within 1e-12), repeat."""
    n = A.shape[0]
    x = np.zeros(n)
    frozen = np.zeros(n, bool)
    while not frozen.all():
        W = A[~frozen].sum(axis=0)
        F = A[frozen].T @ x[frozen]
        live = W > 0
        assert live.any(), "an unfrozen flow crosses no link"
        level = np.full(cap.size, np.inf)
        level[live] = (cap[live] - F[live]) / W[live]
        t = level.min()
        sat = level <= t * (1 + 1e-12)
        hit = ~frozen & (A[:, sat] > 0).any(axis=1)
        x[hit] = t
        frozen |= hit
    return x


def lp_max_min_level(A: np.ndarray, cap: np.ndarray) -> float:
    """``max t`` s.t. ``A^T x <= cap``, ``x >= t``: the largest possible minimum rate."""
    n = A.shape[0]
    c = np.zeros(n + 1)
    c[-1] = -1.0
    a_ub = np.block([[A.T, np.zeros((A.shape[1], 1))], [-np.eye(n), np.ones((n, 1))]])
    b_ub = np.r_[cap, np.zeros(n)]
    res = linprog(c, A_ub=a_ub, b_ub=b_ub, bounds=[(0, None)] * (n + 1), method="highs")
    assert res.status == 0
    return float(res.x[-1])


def assert_certificate(A: np.ndarray, cap: np.ndarray, x: np.ndarray, rtol: float = 1e-9):
    """Feasible, and every flow has a saturated link where its rate is the largest."""
    load = A.T @ x
    assert np.all(load <= cap * (1 + rtol))
    saturated = load >= cap * (1 - rtol)
    for f in range(A.shape[0]):
        on = np.flatnonzero((A[f] > 0) & saturated)
        ok = [np.all(x[A[:, lk] > 0] <= x[f] * (1 + rtol)) for lk in on]
        assert any(ok), f"flow {f} (rate {x[f]}) has no bottleneck link"


@st.composite
def instances(draw):
    """(slot_group, slot_weight, groups, capacity, active) of a random small instance."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n_links = draw(st.integers(1, 8))
    n_spread = draw(st.integers(0, 4))
    n_flows = draw(st.integers(1, 10))
    ties = draw(st.booleans())  # small integers: many exactly simultaneous saturations
    if ties:
        cap = rng.choice([1.0, 2.0, 4.0], n_links) * 1e9
    else:
        cap = rng.uniform(0.5, 10.0, n_links) * 1e9
    ptr, link, coef = [0], [], []
    for _ in range(n_spread):
        m = int(rng.integers(1, min(n_links, 4) + 1))
        link.append(rng.choice(n_links, m, replace=False))
        coef.append(np.full(m, 1.0 / m) if ties else rng.uniform(0.05, 1.0, m))
        ptr.append(ptr[-1] + m)
    groups = Groups(
        n_links,
        np.array(ptr, np.int64),
        np.concatenate(link).astype(np.int64) if link else np.zeros(0, np.int64),
        np.concatenate(coef) if coef else np.zeros(0),
    )
    K = 3
    sg = np.full((n_flows, K), -1, np.int64)
    sw = np.zeros((n_flows, K))
    for f in range(n_flows):
        k = int(rng.integers(1, K + 1))
        sg[f, :k] = rng.integers(0, n_links + n_spread, k)
        sw[f, :k] = rng.choice([0.5, 1.0], k) if ties else rng.uniform(0.05, 1.0, k)
        if k < K and rng.random() < 0.3:  # a slot with a group but no weight: ignored
            sg[f, k] = rng.integers(0, n_links + n_spread)
        order = rng.permutation(K)  # unused slots anywhere, not only at the end
        sg[f], sw[f] = sg[f, order], sw[f, order]
    active = np.flatnonzero(rng.random(n_flows) < 0.8)
    if active.size == 0:
        active = np.array([0])
    return sg, sw, groups, cap, active


@given(instances())
def test_rates_match_dense_water_filling_and_certificate(inst):
    sg, sw, groups, cap, active = inst
    n_links = cap.size
    rates, load = max_min_rates(sg, sw, groups, cap, active)
    A = dense(sg, sw, groups, n_links)[active]
    ref = water_filling(A, cap)
    np.testing.assert_allclose(rates, ref, rtol=1e-9)
    np.testing.assert_allclose(load, A.T @ rates, rtol=1e-9, atol=1e-9 * cap.max())
    assert np.all(load <= cap * (1 + 1e-9))
    assert_certificate(A, cap, rates)
    assert rates.min() == pytest.approx(lp_max_min_level(A, cap), rel=1e-7)


@given(instances(), st.integers(0, 2**32 - 1))
def test_incidence_built_for_a_superset_is_reusable(inst, seed):
    """The engine builds the incidence once (for the flows ``base``, in any order) and reuses
    it while flows only leave, passing the active flows' positions in ``base``."""
    sg, sw, groups, cap, active = inst
    base = np.random.default_rng(seed).permutation(sg.shape[0])
    inc = build_incidence(sg, sw, groups.offset + groups.n, base)
    local = np.argsort(base)[active]
    assert np.array_equal(base[local], active)
    r1, l1 = max_min_rates(sg, sw, groups, cap, active, incidence=inc, local=local)
    r2, l2 = max_min_rates(sg, sw, groups, cap, active)
    np.testing.assert_allclose(r1, r2, rtol=1e-12)  # the freezing order may differ
    np.testing.assert_allclose(l1, l2, rtol=1e-12)
    if active.size < base.size:  # positions that do not match the active flows
        wrong = np.argsort(base)[np.setdiff1d(np.arange(base.size), active)[: active.size]]
        with pytest.raises(ValueError, match="local"):
            max_min_rates(sg, sw, groups, cap, active, incidence=inc, local=wrong)


@given(instances(), st.integers(0, 2**32 - 1))
def test_link_load_and_path_sum_are_the_dense_products(inst, seed):
    sg, sw, groups, cap, _ = inst
    rng = np.random.default_rng(seed)
    A = dense(sg, sw, groups, cap.size)
    x = rng.uniform(0, 5, sg.shape[0])
    v = rng.uniform(0, 3, cap.size)
    np.testing.assert_allclose(link_load(sg, sw, groups, cap.size, x), A.T @ x, rtol=1e-12)
    np.testing.assert_allclose(path_sum(sg, sw, groups, v), A @ v, rtol=1e-12, atol=1e-300)


def test_classic_three_flows_on_two_links():
    """Links 0 (1 Gb/s) and 1 (2 Gb/s); flow A crosses both, B only 0, C only 1: A and B
    split link 0 (0.5 each), C takes the rest of link 1 (1.5)."""
    sg = np.array([[0, 1], [0, -1], [1, -1]])
    sw = np.array([[1.0, 1.0], [1.0, 0.0], [1.0, 0.0]])
    groups = Groups(2, np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0))
    rates, load = max_min_rates(sg, sw, groups, np.array([1e9, 2e9]), np.arange(3))
    np.testing.assert_allclose(rates, [0.5e9, 0.5e9, 1.5e9], rtol=1e-15)
    np.testing.assert_allclose(load, [1e9, 2e9], rtol=1e-15)


def test_near_ties_are_not_merged():
    """Two levels 1e-7 apart (relative) are distinct saturations: merging them (a batching
    tolerance above 1e-9) would freeze the second flow 1e-7 too low."""
    groups = Groups(3, np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0))
    sg = np.array([[0, 2], [1, 2]])
    sw = np.array([[1.0, 1.0], [1.0, 1.0]])
    cap = np.array([1.0, 1.0 + 1e-7, 10.0])
    rates, load = max_min_rates(sg, sw, groups, cap, np.arange(2))
    assert rates.tolist() == [1.0, 1.0 + 1e-7]
    np.testing.assert_allclose(load, [1.0, 1.0 + 1e-7, 2.0 + 1e-7], rtol=1e-15)


def test_spread_group_and_weights():
    """Flow S spreads evenly over links 0 and 1 (coef 1/2), flow B crosses link 0 with weight
    1, flow W crosses link 1 with weight 2 (capacities 1). Levels: link 0 at 1 / (1/2 + 1) =
    2/3, link 1 at 1 / (1/2 + 2) = 0.4, so link 1 saturates first and S and W freeze at 0.4;
    then B fills link 0: 1 - 0.4/2 = 0.8."""
    groups = Groups(2, np.array([0, 2]), np.array([0, 1]), np.array([0.5, 0.5]))
    sg = np.array([[2], [0], [1]])
    sw = np.array([[1.0], [1.0], [2.0]])
    rates, load = max_min_rates(sg, sw, groups, np.array([1.0, 1.0]), np.arange(3))
    np.testing.assert_allclose(rates, [0.4, 0.8, 0.4], rtol=1e-14)
    np.testing.assert_allclose(load, [1.0, 1.0], rtol=1e-14)


def test_flow_crossing_no_link_is_an_error():
    groups = Groups(1, np.array([0, 0]), np.zeros(0, np.int64), np.zeros(0))  # empty group 1
    sg = np.array([[0], [1]])
    sw = np.array([[1.0], [1.0]])
    with pytest.raises(ValueError, match="cross no link"):
        max_min_rates(sg, sw, groups, np.array([1.0]), np.arange(2))
    rates, _ = max_min_rates(sg, sw, groups, np.array([1.0]), np.array([0]))
    assert rates.tolist() == [1.0]
