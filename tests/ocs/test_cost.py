"""Smoothed critical path (docs/ocs.md §1.5, tests T1-T3) against brute force and closed forms.

Brute force enumerates every root-to-leaf path with networkx (``all_simple_paths`` from a super
source to a super sink) on DAGs of at most 18 nodes: the path count, the exact log-sum-exp, the
Gibbs law ``P(π) ∝ exp(b2 L(π))`` and its node marginals, the hard critical path and the nodes
on a longest path. Gradients are checked against central finite differences on random DAGs and
on real preset DAGs of 4-8 pods. A chain of parallel phases has a closed form (U is a sum of
per-phase LSEs, ``|Π| = w^k``) large enough that ``|Π|`` overflows a float.
"""

import time

import networkx as nx
import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from trainfabric.errors import ConfigError
from trainfabric.ocs.model import OcsModel
from trainfabric.ocs.wiring.cost import PathCost, temperatures
from trainfabric.workloads import BARRIER, COMM, COMPUTE, build_dag, get_preset
from trainfabric.workloads.dag import DagBuilder, from_arrays

PRESETS_SMALL = [("moe", 4), ("pipeline", 4), ("dp-ring", 6), ("dp-hd", 8), ("hybrid", 4)]
FD_STEP = 1e-5  # circuits; x >= 0.25 below, so every x ± h keeps B x + B0 > 0
FD_RTOL = 1e-6  # T1


@st.composite
def instances(draw, max_nodes=12):
    """A random TaskDAG on 2-5 pods (labels shuffled, so from_arrays must renumber it),
    its PathCost and a fractional wiring x in [0.25, 4] per pair."""
    n_pods = draw(st.integers(2, 5))
    n = draw(st.integers(1, max_nodes))
    density = draw(st.sampled_from([0.15, 0.35, 0.6]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    kind = rng.choice([COMPUTE, COMM, BARRIER], size=n, p=[0.4, 0.45, 0.15]).astype(np.int8)
    kind[rng.integers(n)] = COMM
    src = rng.integers(n_pods, size=n)
    dst = (src + rng.integers(1, n_pods, size=n)) % n_pods
    is_comm = kind == COMM
    hidden_order = rng.permutation(n)
    i, j = np.triu_indices(n, 1)
    keep = rng.random(i.size) < density
    dag = from_arrays(
        n_pods,
        kind=kind,
        pod=np.where(kind == BARRIER, -1, src).astype(np.int32),
        dst=np.where(is_comm, dst, -1).astype(np.int32),
        duration_s=np.where(kind == COMPUTE, 10 ** rng.uniform(-4, -2, n), 0.0),
        nbytes=np.where(is_comm, 10 ** rng.uniform(6, 8, n), 0.0),
        latency_s=np.where(is_comm, 5e-6, 0.0),
        phase=np.full(n, -1, dtype=np.int32),
        edge_src=hidden_order[i[keep]].astype(np.int64),
        edge_dst=hidden_order[j[keep]].astype(np.int64),
    )
    model = OcsModel.uniform(n_pods, 4, 1)
    x = rng.uniform(0.25, 4.0, model.n_pairs)
    return PathCost(dag, model), x


def brute_force(cost: PathCost, x: np.ndarray, b2: float) -> dict:
    """Every root-to-leaf path by networkx; exact U, Gibbs marginals, CP, critical nodes."""
    dag = cost.dag
    g = dag.to_networkx()
    roots = [v for v in g if g.in_degree(v) == 0]
    leaves = [v for v in g if g.out_degree(v) == 0]
    g.add_edges_from(("S", v) for v in roots)
    g.add_edges_from((v, "T") for v in leaves)
    paths = [p[1:-1] for p in nx.all_simple_paths(g, "S", "T")]
    t = cost.durations(x)
    lengths = np.array([sum(t[v] for v in p) for p in paths])
    cp = lengths.max()
    weights = np.exp(b2 * (lengths - cp))
    mu = np.zeros(dag.n_nodes)
    critical = np.zeros(dag.n_nodes, dtype=bool)
    for p, w, length in zip(paths, weights, lengths, strict=True):
        mu[p] += w
        if length >= cp * (1 - 1e-12):
            critical[p] = True
    return dict(
        n_paths=len(paths),
        smoothed=cp + np.log(weights.sum()) / b2,
        mu=mu / weights.sum(),
        cp=cp,
        critical=critical,
    )


def central_differences(cost: PathCost, x: np.ndarray, b2: float, h: float = FD_STEP):
    grad = np.empty_like(x)
    for e in range(x.size):
        step = np.zeros_like(x)
        step[e] = h
        grad[e] = (cost.smoothed(x + step, b2) - cost.smoothed(x - step, b2)) / (2 * h)
    return grad


def fd_relative_error(cost: PathCost, x: np.ndarray, b2: float) -> float:
    _, grad = cost.value_and_grad(x, b2)
    return np.abs(central_differences(cost, x, b2) - grad).max() / np.abs(grad).max()


def preset_instance(name: str, pods: int, seed: int = 0):
    dag = build_dag(get_preset(name, pods=pods))
    model = OcsModel.uniform(pods, 8, 2)
    rng = np.random.default_rng(seed)
    x = model.total_circuits / model.n_pairs * rng.uniform(0.5, 1.5, model.n_pairs)
    return PathCost(dag, model), x


# -- T2/T3 and the hard quantities against brute-force path enumeration ----------------------


@given(instances(max_nodes=18), st.sampled_from([0.3, 3.0, 30.0, 300.0]))
def test_smoothed_marginals_and_hard_path_match_enumeration(inst, sharpness):
    cost, x = inst
    cp = cost.hard(x)
    b2 = sharpness / cp
    bf = brute_force(cost, x, b2)

    assert cp == pytest.approx(bf["cp"], rel=1e-12)
    np.testing.assert_array_equal(cost.critical_nodes(x), bf["critical"])
    assert cost.log_paths() == pytest.approx(np.log(bf["n_paths"]), rel=1e-12, abs=1e-12)

    u = cost.smoothed(x, b2)
    assert u == pytest.approx(bf["smoothed"], rel=1e-12)
    # T2 with |Π| counted by enumeration (1e-12·CP: the two sums round differently)
    assert -1e-12 * cp <= u - cp <= np.log(bf["n_paths"]) / b2 + 1e-12 * cp

    mu = cost.marginals(x, b2)
    np.testing.assert_allclose(mu, bf["mu"], rtol=0, atol=1e-12)
    assert ((mu >= 0) & (mu <= 1 + 1e-12)).all()
    assert mu[cost.leaves].sum() == pytest.approx(1.0, abs=1e-12)
    roots = np.flatnonzero(np.bincount(cost.dag.indices, minlength=cost.dag.n_nodes) == 0)
    assert mu[roots].sum() == pytest.approx(1.0, abs=1e-12)


def test_tiny_diamond_by_hand():
    """a -> {m1, m2} -> z, m1 and m2 comm nodes on pairs (0,1) and (0,2): two paths."""
    b = DagBuilder(3)
    a, z = b.compute(0, 1e-3), b.compute(0, 2e-3)
    m1, m2 = b.comm(0, 1, 1e7, 0.0, -1), b.comm(2, 0, 3e7, 0.0, -1)
    for m in (m1, m2):
        b.edge(a, m)
        b.edge(m, z)
    dag = b.build()
    model = OcsModel.uniform(3, 2, 1)
    cost = PathCost(dag, model)
    x = np.array([1.0, 0.5, 2.0])  # pairs (0,1), (0,2), (1,2)
    t1, t2 = 8e7 / (100e9 + 5e9), 2.4e8 / (50e9 + 5e9)
    b2 = 1e3
    u_expected = 3e-3 + np.logaddexp(b2 * t1, b2 * t2) / b2
    u, grad = cost.value_and_grad(x, b2)
    assert u == pytest.approx(u_expected, rel=1e-14)
    p1 = 1 / (1 + np.exp(b2 * (t2 - t1)))
    dt1 = -8e7 * 100e9 / (100e9 + 5e9) ** 2
    dt2 = -2.4e8 * 100e9 / (50e9 + 5e9) ** 2
    np.testing.assert_allclose(grad, [p1 * dt1, (1 - p1) * dt2, 0.0], rtol=1e-12)
    assert cost.log_paths() == pytest.approx(np.log(2), rel=1e-15)
    assert cost.hard(x) == pytest.approx(3e-3 + max(t1, t2), rel=1e-15)


def test_critical_nodes_resolve_ties_and_near_ties():
    """Exact ties are all critical; a branch shorter by 1e-9 (relative) is not."""
    t_comm = 5e-6 + 8 * 5e7 / (100e9 + 5e9)  # one circuit on pair (0, 1)
    b = DagBuilder(3)
    a, z = b.compute(0, 1e-3, "a"), b.compute(1, 1e-3, "z")
    tied = [b.comm(0, 1, 5e7, 5e-6, -1, "m01"), b.comm(1, 0, 5e7, 5e-6, -1, "m10")]
    near = b.compute(2, t_comm * (1 - 1e-9), "near")
    for m in (*tied, near):
        b.edge(a, m)
        b.edge(m, z)
    b.compute(2, 1e-3, "side")  # a separate one-node path, far from critical
    dag = b.build()
    cost = PathCost(dag, OcsModel.uniform(3, 2, 1))
    x = np.ones(3)
    assert cost.hard(x) == pytest.approx(2e-3 + t_comm, rel=1e-15)
    critical = {name for name, c in zip(dag.names, cost.critical_nodes(x), strict=True) if c}
    assert critical == {"a", "m01", "m10", "z"}


def test_phase_chain_closed_form_beyond_float_range():
    """k phases of w parallel transfers in series: U = Σ_phases (1/b2) LSE_m (b2 t_m),
    |Π| = w^k (here e^1180, not representable), μ = per-phase softmax."""
    rng = np.random.default_rng(3)
    n_pods, k, w = 6, 320, 40
    model = OcsModel.uniform(n_pods, 4, 2)
    b = DagBuilder(n_pods)
    prev = b.compute(0, 1e-3)
    specs = []
    for phase in range(k):
        src = rng.integers(n_pods, size=w)
        dst = (src + rng.integers(1, n_pods, size=w)) % n_pods
        nbytes = 10 ** rng.uniform(5, 7, w)
        _, prev = b.phase("a2a", f"p{phase}", src, dst, nbytes, 5e-6, 0.0, preds=[prev])
        specs.append((src, dst, nbytes))
    dag = b.build()
    cost = PathCost(dag, model)
    x = rng.uniform(0.25, 3.0, model.n_pairs)
    b2 = 2e4
    rates = [model.pair_rate_bps(x)[model.pair_index(s, d)] for s, d, _ in specs]
    times = [5e-6 + 8 * nb / r for (_, _, nb), r in zip(specs, rates, strict=True)]
    u_expected = 1e-3 + sum(np.logaddexp.reduce(b2 * t) / b2 for t in times)
    assert cost.log_paths() == pytest.approx(k * np.log(w), rel=1e-13)
    u = cost.smoothed(x, b2)
    assert u == pytest.approx(u_expected, rel=1e-13)
    assert cost.hard(x) == pytest.approx(1e-3 + sum(t.max() for t in times), rel=1e-13)
    mu = cost.marginals(x, b2)
    mu_comm = np.sort(mu[cost.comm_nodes])
    softmax = np.concatenate([np.exp(b2 * t - np.logaddexp.reduce(b2 * t)) for t in times])
    np.testing.assert_allclose(mu_comm, np.sort(softmax), rtol=0, atol=1e-12)


# -- T1: gradient against central finite differences -----------------------------------------


@given(instances(max_nodes=14), st.sampled_from([1.0, 10.0, 30.0]))
def test_gradient_matches_central_differences_on_random_dags(inst, sharpness):
    cost, x = inst
    b2 = sharpness / cost.hard(x)
    u, grad = cost.value_and_grad(x, b2)
    # the FD check is only meaningful above its float64 noise floor ~ eps·U/h
    assume(np.abs(grad).max() * x.max() >= 1e-3 * u)
    assert u == pytest.approx(cost.smoothed(x, b2), rel=1e-15)
    assert fd_relative_error(cost, x, b2) <= FD_RTOL


@pytest.mark.parametrize(("name", "pods"), PRESETS_SMALL)
@pytest.mark.parametrize("b2_rel", [1.0, 50.0, 500.0])
def test_gradient_matches_central_differences_on_presets(name, pods, b2_rel):
    cost, x = preset_instance(name, pods)
    b2 = b2_rel * max(cost.log_paths(), 1.0) / cost.hard(x)
    assert fd_relative_error(cost, x, b2) <= FD_RTOL


def test_gradient_is_the_marginal_weighted_chain_rule():
    cost, x = preset_instance("moe", 4)
    b2 = 50 * cost.log_paths() / cost.hard(x)
    mu = cost.marginals(x, b2)
    model = cost.model
    grad = np.zeros(model.n_pairs)
    for m, e in zip(cost.comm_nodes, cost.comm_pair, strict=True):
        rate = model.rate_bps * x[e] + model.fallback_bps
        grad[e] -= mu[m] * 8 * cost.dag.bytes[m] * model.rate_bps / rate**2
    np.testing.assert_allclose(cost.value_and_grad(x, b2)[1], grad, rtol=1e-12)


# -- preset DAGs: flow conservation of the marginals, hard path against networkx -----------


@pytest.mark.parametrize(("name", "pods"), PRESETS_SMALL)
def test_preset_marginals_and_hard_path(name, pods):
    cost, x = preset_instance(name, pods)
    dag = cost.dag
    cp = cost.hard(x)
    b2 = 50 * cost.log_paths() / cp
    mu = cost.marginals(x, b2)
    assert ((mu >= 0) & (mu <= 1 + 1e-12)).all()
    assert mu[cost.leaves].sum() == pytest.approx(1.0, abs=1e-12)
    # every path through a phase crosses exactly one of its transfers
    for nodes in dag.phase_nodes():
        if nodes.size > 1:
            entry = dag.edges[np.isin(dag.edges[:, 1], nodes), 0]
            assert np.unique(entry).size == 1
            assert mu[nodes].sum() == pytest.approx(mu[entry[0]], abs=1e-12)

    t = cost.durations(x)
    g = dag.to_networkx()
    for u, v in g.edges:
        g.edges[u, v]["w"] = t[v]
    roots = [v for v in g if g.in_degree(v) == 0]
    g.add_weighted_edges_from((("S", v, t[v]) for v in roots), weight="w")
    assert cp == pytest.approx(nx.dag_longest_path_length(g, weight="w"), rel=1e-12)
    longest = [v for v in nx.dag_longest_path(g, weight="w") if v != "S"]
    critical = cost.critical_nodes(x)
    assert critical[longest].all()
    # the critical subgraph carries a path of length CP and nothing longer is hidden in it
    sub = g.subgraph(["S", *np.flatnonzero(critical).tolist()])
    assert nx.dag_longest_path_length(sub, weight="w") == pytest.approx(cp, rel=1e-12)


def test_marginals_conserve_flow_on_a_full_size_model():
    """DeepSeek-V3 (35k nodes, 2152 phases, log|Π| ≈ 2.6e3): at b2 = 50 log|Π| / CP the
    exponents reach b2·U ≈ 1.3e5, yet every phase's transfers carry its barrier's mass."""
    dag = build_dag(get_preset("deepseek-v3"))
    model = OcsModel.uniform(dag.n_pods, 16, 4)
    cost = PathCost(dag, model)
    x = np.random.default_rng(1).uniform(0.5, 4.0, model.n_pairs)
    cp = cost.hard(x)
    b2 = 50 * cost.log_paths() / cp
    u, grad = cost.value_and_grad(x, b2)
    assert 0 <= u - cp <= cp / 50
    mu = cost.marginals(x, b2)
    assert ((mu >= 0) & (mu <= 1 + 1e-12)).all()
    assert mu[cost.leaves].sum() == pytest.approx(1.0, abs=1e-12)
    entry_of = dict(zip(dag.edges[:, 1].tolist(), dag.edges[:, 0].tolist(), strict=True))
    for nodes in dag.phase_nodes():
        if nodes.size > 1:
            assert mu[nodes].sum() == pytest.approx(mu[entry_of[int(nodes[0])]], abs=1e-12)
    assert (grad <= 0).all() and grad.min() < 0


# -- T2 limit, monotonicity in b2, convexity ---------------------------------------------------


@pytest.mark.parametrize(("name", "pods"), [("moe", 4), ("hybrid", 4), ("dp-hd", 8)])
def test_smoothed_tends_to_hard_critical_path(name, pods):
    cost, x = preset_instance(name, pods)
    cp = cost.hard(x)
    log_pi = cost.log_paths()
    excess = []
    for b2 in np.geomspace(1.0, 1e4, 9) * log_pi / cp:
        gap = cost.smoothed(x, b2) - cp
        assert -1e-12 * cp <= gap <= log_pi / b2 + 1e-12 * cp
        excess.append(gap)
    assert np.all(np.diff(excess) <= 1e-12 * cp)  # U is non-increasing in b2
    assert excess[-1] <= 1e-4 * cp


@given(instances(), st.sampled_from([1.0, 30.0]), st.integers(0, 2**32 - 1))
def test_convex_along_random_segments(inst, sharpness, seed):
    cost, x = inst
    b2 = sharpness / cost.hard(x)
    y = np.random.default_rng(seed).uniform(0.0, 4.0, x.size)
    ux, gx = cost.value_and_grad(x, b2)
    uy = cost.smoothed(y, b2)
    tol = 1e-12 * max(ux, uy)
    for lam in (0.25, 0.5, 0.75):
        assert cost.smoothed(lam * x + (1 - lam) * y, b2) <= lam * ux + (1 - lam) * uy + tol
    assert uy >= ux + gx @ (y - x) - tol  # first-order convexity


# -- temperatures and input checks -------------------------------------------------------------


def test_temperatures_scale_with_uniform_mesh_critical_path():
    cost, _ = preset_instance("moe", 4)
    model = cost.model
    b1, b2, cp0 = temperatures(cost, model, b1_rel=2.0, b2_rel=10.0)
    uniform = np.full(model.n_pairs, model.total_circuits / model.n_pairs)
    assert cp0 == pytest.approx(cost.hard(uniform), rel=1e-9)
    assert b1 == pytest.approx(2.0 / cp0, rel=1e-12)
    assert b2 == pytest.approx(10.0 * cost.log_paths() / cp0, rel=1e-12)
    assert cost.smoothed(uniform, b2) - cp0 <= cp0 / 10.0 * (1 + 1e-9)
    with pytest.raises(ConfigError, match="b2_rel"):
        temperatures(cost, model, b2_rel=0.0)


def test_input_errors_name_the_field():
    cost, x = preset_instance("dp-ring", 6)
    with pytest.raises(ConfigError) as err:
        PathCost(cost.dag, OcsModel.uniform(5, 4, 2))
    assert err.value.field == "pods"
    with pytest.raises(ConfigError) as err:
        cost.value_and_grad(x[:-1], 1.0)
    assert err.value.field == "x"
    for bad in (0.0, -1.0, np.inf, np.nan):
        with pytest.raises(ConfigError) as err:
            cost.smoothed(x, bad)
        assert err.value.field == "b2"


@pytest.mark.slow
def test_value_and_grad_is_fast_on_large_dags():
    dag = build_dag(get_preset("moe", pods=32))
    model = OcsModel.uniform(32, 16, 4)
    cost = PathCost(dag, model)
    x = np.full(model.n_pairs, model.total_circuits / model.n_pairs)
    b2 = 50 * cost.log_paths() / cost.hard(x)
    cost.value_and_grad(x, b2)
    start = time.perf_counter()
    for _ in range(10):
        cost.value_and_grad(x, b2)
    assert (time.perf_counter() - start) / 10 < 0.1
