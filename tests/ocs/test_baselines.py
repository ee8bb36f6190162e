"""Baselines: uniform mesh, demand-proportional wiring, TM-only objective (E11)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from trainfabric.errors import ConfigError
from trainfabric.ocs.model import OcsModel
from trainfabric.ocs.wiring.baselines import (
    TrafficMatrixCost,
    demand_proportional,
    directed_pair_bytes,
    mesh_candidates,
    proportional_fill,
    uniform_mesh,
)
from trainfabric.ocs.wiring.cost import PathCost, temperatures
from trainfabric.ocs.wiring.prior import uniform_prior
from trainfabric.ocs.wiring.rounding import round_to_degrees
from trainfabric.ocs.wiring.solver import solve
from trainfabric.workloads import build_dag, get_preset
from trainfabric.workloads.dag import DagBuilder


def traffic_dag(seed: int, n_pods: int, phases: int = 3, density: float = 0.6):
    """Phases in series with random directed pairs and log-uniform bytes."""
    rng = np.random.default_rng(seed)
    b = DagBuilder(n_pods)
    prev = [b.compute(v, 1e-3) for v in range(n_pods)]
    for k in range(phases):
        u, v = np.nonzero(~np.eye(n_pods, dtype=bool))
        keep = rng.random(u.size) < density
        keep[rng.integers(u.size)] = True
        nbytes = 10 ** rng.uniform(5, 8, keep.sum())
        _, exit_ = b.phase("a2a", f"a{k}", u[keep], v[keep], nbytes, 5e-6, 0.0, preds=prev)
        prev = [exit_]
    return b.build()


# -- TrafficMatrixCost -------------------------------------------------------------------


@given(seed=st.integers(0, 10_000), n_pods=st.integers(2, 7), b2_rel=st.sampled_from([1, 30]))
def test_tm_gradient_matches_finite_differences(seed, n_pods, b2_rel):
    rng = np.random.default_rng(seed)
    model = OcsModel.uniform(max(n_pods, 3), 4, 2)
    dag = traffic_dag(seed, model.n)
    cost = TrafficMatrixCost(dag, model)
    x = rng.uniform(0.0, 4.0, model.n_pairs)
    b2 = b2_rel / cost.hard(x)
    u, g = cost.value_and_grad(x, b2)
    assert u == pytest.approx(cost.smoothed(x, b2), rel=1e-12)
    h = 1e-4  # five-point central differences (error O(h^4))
    f = cost.smoothed
    fd = np.array(
        [
            (
                8 * (f(x + h * e, b2) - f(x - h * e, b2))
                - f(x + 2 * h * e, b2)
                + f(x - 2 * h * e, b2)
            )
            / (12 * h)
            for e in np.eye(model.n_pairs)
        ]
    )
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-9 * np.abs(fd).max())
    assert (g <= 0).all()
    assert cost.hard(x) <= u <= cost.hard(x) + cost.log_paths() / b2 + 1e-15


@given(seed=st.integers(0, 10_000), n_pods=st.integers(3, 7))
def test_tm_hard_is_brute_force_max(seed, n_pods):
    rng = np.random.default_rng(seed)
    model = OcsModel.uniform(n_pods, 4, 2)
    dag = traffic_dag(seed, n_pods)
    x = rng.integers(0, 4, model.n_pairs)
    cost = TrafficMatrixCost(dag, model)
    # brute force: per ordered pod pair, add up the bytes of every comm node
    tm = np.zeros((n_pods, n_pods))
    for m in dag.comm_nodes:
        tm[dag.pod[m], dag.dst[m]] += dag.bytes[m]
    xm = model.to_matrix(x)
    times = 8 * tm / (model.rate_bps * xm + model.fallback_bps)
    assert cost.hard(x) == pytest.approx(times.max(), rel=1e-13)
    big = 1e4 / cost.hard(x)
    assert cost.smoothed(x, big) == pytest.approx(times.max(), rel=1e-3)
    assert cost.log_paths() == pytest.approx(np.log(np.count_nonzero(tm + tm.T) / 2))


def test_tm_inputs():
    model = OcsModel.uniform(4, 4, 2)
    cost = TrafficMatrixCost(traffic_dag(0, 4), model)
    with pytest.raises(ConfigError, match="b2"):
        cost.smoothed(np.ones(model.n_pairs), 0.0)
    with pytest.raises(ConfigError, match="x"):
        cost.hard(np.ones(3))
    with pytest.raises(ConfigError, match="pods"):
        TrafficMatrixCost(traffic_dag(0, 5), model)
    empty = DagBuilder(4)
    empty.compute(0, 1.0)
    with pytest.raises(ConfigError, match="workload"):
        TrafficMatrixCost(empty.build(), model)


def test_tm_solved_by_the_same_machinery():
    model = OcsModel.uniform(8, 8, 4)
    dag = traffic_dag(3, 8, density=0.4)
    cost = TrafficMatrixCost(dag, model)
    b1, b2, cp0 = temperatures(cost, model)
    res = solve(cost, model, b1, b2)
    np.testing.assert_allclose(model.pod_degrees(res.x), model.degrees, rtol=1e-8)
    assert cost.smoothed(res.x, b2) <= cost.smoothed(
        model.total_circuits / model.n_pairs * np.ones(model.n_pairs), b2
    )


# -- uniform mesh and demand-proportional ------------------------------------------------


@pytest.mark.parametrize("n,d,s", [(4, 2, 1), (6, 4, 2), (8, 8, 4), (16, 8, 4), (13, 6, 2)])
def test_uniform_mesh_equal_degrees(n, d, s):
    model = OcsModel.uniform(n, d, s)
    x = uniform_mesh(model)
    model.check_wiring(x)
    share = model.total_circuits / model.n_pairs
    assert (np.abs(x - share) < 1).all()


def test_uniform_mesh_unequal_degrees():
    model = OcsModel(np.array([8, 4, 4, 4, 4]), ocs=2)
    model.check_wiring(uniform_mesh(model))


@given(seed=st.integers(0, 10_000), n_pods=st.integers(3, 10), ports=st.sampled_from([4, 16]))
def test_proportional_fill(seed, n_pods, ports):
    model = OcsModel.uniform(n_pods, ports, 2)
    up, down = directed_pair_bytes(traffic_dag(seed, n_pods, density=0.5), model)
    total = up + down
    frac = proportional_fill(model, total)
    deg = model.pod_degrees(frac)
    assert (deg <= model.degrees * (1 + 1e-12)).all()
    # exactly proportional up to the first pod that runs out of ports ...
    load = model.pod_degrees(total)
    t1 = np.min(model.degrees / load)
    first = np.argmin(model.degrees / load)
    iu, iv = model.pairs
    at_first = (iu == first) | (iv == first)
    np.testing.assert_allclose(frac[at_first], t1 * total[at_first], rtol=1e-12)
    assert (frac >= t1 * total * (1 - 1e-12)).all()
    # ... and maximal: every pair with traffic touches a pod with no free port
    full = deg >= model.degrees * (1 - 1e-9)
    assert (full[iu] | full[iv])[total > 0].all()
    model.check_wiring(demand_proportional(traffic_dag(seed, n_pods, density=0.5), model))


def _fill_by_rounds(model, demand):
    """Progressive filling written directly from its definition: every round recomputes the
    loads of all growing pairs (O(n·|P|)), the reference of the compiled event version."""
    iu, iv = model.pairs
    free = model.degrees.astype(float)
    x = np.zeros(model.n_pairs)
    grow = demand > 0
    while grow.any():
        load = np.bincount(iu[grow], demand[grow], model.n) + np.bincount(
            iv[grow], demand[grow], model.n
        )
        busy = load > 0
        step = np.min(free[busy] / load[busy])
        x[grow] += step * demand[grow]
        free = np.where(busy, free - step * load, free)
        full = busy & (free <= 1e-12 * model.degrees)
        free[full] = 0.0
        grow &= ~(full[iu] | full[iv])
    return x


@given(
    seed=st.integers(0, 10_000),
    degrees=st.lists(st.integers(1, 12), min_size=2, max_size=24),
    density=st.floats(0.05, 1.0),
)
def test_proportional_fill_equals_round_by_round_filling(seed, degrees, density):
    rng = np.random.default_rng(seed)
    model = OcsModel(np.array(degrees), ocs=1)
    demand = rng.random(model.n_pairs) * (rng.random(model.n_pairs) < density)
    np.testing.assert_allclose(
        proportional_fill(model, demand), _fill_by_rounds(model, demand), rtol=1e-11, atol=1e-12
    )


def test_proportional_fill_names_a_bad_demand():
    with pytest.raises(ConfigError, match="demand"):
        proportional_fill(OcsModel.uniform(4, 2, 1), np.ones(5))


@given(seed=st.integers(0, 10_000), n_pods=st.integers(4, 12))
@example(seed=79, n_pods=8)  # randomized run: a rank correlation of 0.87 (see the end)
def test_demand_proportional_ranks_pairs_by_bytes(seed, n_pods):
    """Balanced (circulant) traffic: every pod runs out of ports at once, so the fractional
    wiring is exactly ∝ bytes and the rounded one keeps the order of the pairs, each within
    one circuit of its share, with exact degrees. (No rank correlation is implied: at seed 79,
    8 pods, eight equal pairs of 0.52 circuits must split between 0 and 1, so Spearman's rho
    is 0.87 with the order kept.)"""
    rng = np.random.default_rng(seed)
    model = OcsModel.uniform(n_pods, 32, 4)
    base = 10 ** rng.uniform(6, 8, n_pods)
    b = DagBuilder(n_pods)
    u = np.repeat(np.arange(n_pods), n_pods - 1)
    k = np.tile(np.arange(1, n_pods), n_pods)
    b.phase("a2a", "a", u, (u + k) % n_pods, base[k], 5e-6, 0.0)
    dag = b.build()
    x = demand_proportional(dag, model)
    model.check_wiring(x)
    up, down = directed_pair_bytes(dag, model)
    total = up + down
    frac = proportional_fill(model, total)
    np.testing.assert_allclose(frac, total * model.total_circuits / total.sum(), rtol=1e-9)
    assert (np.abs(x - frac) < 1 + 1e-9).all()
    heavier = total[:, None] > total[None, :] * (1 + 1e-9)
    more = x[:, None] >= x[None, :]
    assert more[heavier].all()
    np.testing.assert_array_equal(model.pod_degrees(x), model.degrees)


def test_demand_proportional_pipeline_uses_spare_ports():
    """A 16-stage pipeline: neighbour pairs get 4 circuits each; the two end pods' spare ports
    can only join each other (forced), closing a ring; nothing else gets a circuit."""
    model = OcsModel.uniform(16, 8, 4)
    dag = build_dag(get_preset("pipeline", pods=16))
    x = demand_proportional(dag, model)
    model.check_wiring(x)
    v = np.arange(15)
    assert (x[model.pair_index(v, v + 1)] == 4).all()
    assert x[model.pair_index(0, 15)] == 4
    assert x.sum() == 4 * 16


def test_demand_proportional_heavier_pairs_more_circuits():
    model = OcsModel.uniform(6, 8, 4)
    b = DagBuilder(6)
    src, dst = np.nonzero(~np.eye(6, dtype=bool))
    heavy = np.zeros(model.n_pairs, dtype=bool)
    heavy[model.pair_index([0, 2, 4], [1, 3, 5])] = True  # a perfect matching 10x heavier
    weight = np.where(heavy[model.pair_index(src, dst)], 10.0, 1.0)
    b.phase("a2a", "a", src, dst, 1e7 * weight, 5e-6, 0.0)
    x = demand_proportional(b.build(), model)
    model.check_wiring(x)
    assert x[heavy].min() > x[~heavy].max()


def test_demand_proportional_without_traffic_is_uniform():
    model = OcsModel.uniform(5, 4, 2)
    b = DagBuilder(5)
    b.compute(0, 1.0)
    np.testing.assert_array_equal(demand_proportional(b.build(), model), uniform_mesh(model))


@pytest.mark.parametrize(
    "name,pods,ports", [("hybrid", 16, 8), ("moe", 12, 4), ("pipeline", 32, 8)]
)
def test_best_near_uniform_stays_within_one_circuit_of_the_mesh_and_beats_the_plain_mesh(
    name, pods, ports
):
    from trainfabric.ocs.wiring.baselines import best_near_uniform

    dag = build_dag(get_preset(name, pods=pods), 0)
    model = OcsModel.uniform(pods, ports, 4)
    cost = PathCost(dag, model)
    x = best_near_uniform(cost, model, samples=4, seed=1)
    mesh = model.total_circuits * uniform_prior(model)
    assert (np.abs(x - mesh) < 1).all()
    model.check_wiring(x, exact=True)
    assert cost.hard(x) <= cost.hard(uniform_mesh(model))
    assert np.array_equal(x, best_near_uniform(cost, model, samples=4, seed=1))


def test_traffic_free_candidates_are_kept_per_pod_shape_and_handed_out_as_copies():
    """The kept uniform mesh and near-uniform candidates equal freshly rounded ones, and a
    caller that changes what it got does not change what the next caller gets."""
    from trainfabric.ocs.wiring import baselines

    model = OcsModel.uniform(12, 4, 2)
    baselines.clear_cache()
    first = mesh_candidates(model, samples=3, seed=7)
    mesh = model.total_circuits * uniform_prior(model)
    rng = np.random.default_rng(7)
    fresh = [round_to_degrees(model, mesh)]
    fresh += [round_to_degrees(model, mesh, rng.random(model.n_pairs)) for _ in range(3)]
    for got, want in zip(first, fresh, strict=True):
        np.testing.assert_array_equal(got, want)
    first[0][:] = 99
    np.testing.assert_array_equal(uniform_mesh(model), fresh[0])
    np.testing.assert_array_equal(mesh_candidates(model, samples=3, seed=7)[2], fresh[2])
    other = mesh_candidates(OcsModel.uniform(12, 6, 2), samples=3, seed=7)  # new shape
    assert other[0].sum() > fresh[0].sum()
