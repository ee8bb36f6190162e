"""T9: the §1.9 A MILP against brute-force enumeration of every integer wiring."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainfabric.errors import ConfigError
from trainfabric.ocs.model import OcsModel
from trainfabric.ocs.wiring.milp import hard_critical_path, milp_model, solve_milp
from trainfabric.workloads import build_dag, get_preset
from trainfabric.workloads.dag import DagBuilder


def all_wirings(model: OcsModel, exact: bool = False) -> np.ndarray:
    """Every integer pair vector with exact degrees (``exact``), else every *maximal* one with
    ``Σ_u x_uv ≤ d_v`` (at most one pod keeps free ports: two free pods could take one more
    circuit, which never slows a transfer, so the maximal wirings hold an optimum).
    ``x_e ≤ min(d_u, d_v)`` is implied."""
    iu, iv = model.pairs
    n_pairs = model.n_pairs
    last = {}
    for e in range(n_pairs):
        last[iu[e]] = last[iv[e]] = e
    closes = [[w for w in (iu[e], iv[e]) if last[w] == e] for e in range(n_pairs)]
    out, x, res = [], np.zeros(n_pairs, dtype=np.int64), model.degrees.copy()
    free = [0]  # closed pods with free ports

    def rec(e):
        if e == n_pairs:
            out.append(x.copy())
            return
        u, v = iu[e], iv[e]
        for k in range(min(res[u], res[v]) + 1):
            left = sum(res[w] != k for w in closes[e])
            if left and (exact or free[0] + left > 1):
                continue
            x[e] = k
            res[u] -= k
            res[v] -= k
            free[0] += left
            rec(e + 1)
            free[0] -= left
            res[u] += k
            res[v] += k
        x[e] = 0

    rec(0)
    return np.array(out)


def brute_force(dag, model, exact: bool = False) -> tuple[float, np.ndarray]:
    """Minimum hard critical path over all wirings (exact degrees when ``exact``), durations
    computed here from scratch."""
    comm = dag.comm_nodes
    pair = model.pair_index(dag.pod[comm], dag.dst[comm])
    best, arg = np.inf, None
    for x in all_wirings(model, exact):
        t = dag.duration_s.copy()
        rate = model.rate_bps * x[pair] + model.fallback_bps
        t[comm] = dag.latency_s[comm] + 8.0 * dag.bytes[comm] / rate
        cp = dag.critical_path(t)
        if cp < best:
            best, arg = cp, x
    return best, arg


def random_dag(seed: int, n_pods: int, steps: int):
    """Compute nodes and phases (1-4 directed pairs, bytes from a small set so durations
    repeat) wired to 1-3 random earlier nodes: phases in series, in parallel and in chains."""
    rng = np.random.default_rng(seed)
    b = DagBuilder(n_pods)
    avail = [b.compute(v, float(rng.uniform(1e-3, 8e-3))) for v in range(n_pods)]
    for k in range(steps):
        preds = rng.choice(
            avail[-4:], size=min(len(avail[-4:]), int(rng.integers(1, 4))), replace=False
        ).tolist()
        if rng.random() < 0.6:
            n_fl = int(rng.integers(1, 5))
            src = rng.integers(0, n_pods, n_fl)
            dst = (src + rng.integers(1, n_pods, n_fl)) % n_pods
            nbytes = rng.choice([2e5, 1e6, 4e6, 1.6e7], n_fl)
            _, node = b.phase("p", f"p{k}", src, dst, nbytes, 5e-6, 0.0, preds=preds)
        else:
            node = b.compute(int(rng.integers(n_pods)), float(rng.uniform(1e-4, 4e-3)))
            b.edges(preds, node)
        avail.append(node)
    return b.build()


PORTS = [(2, 1), (2, 2), (4, 1), (4, 2)]


def check_result(res, model, best):
    assert res.status == "optimal"
    model.check_wiring(res.x)
    assert res.objective_s == pytest.approx(best, rel=1e-6)
    assert res.best_bound_s <= res.objective_s
    assert res.best_bound_s >= best * (1 - 2e-6)
    assert res.gap == pytest.approx((res.objective_s - res.best_bound_s) / res.objective_s)
    assert 0 <= res.gap <= 2e-6
    assert res.mip_objective_s == pytest.approx(res.objective_s, rel=1e-5)


@given(
    seed=st.integers(0, 10_000),
    n_pods=st.integers(3, 5),
    ports=st.sampled_from(PORTS),
    steps=st.integers(2, 9),
)
def test_random_dags_match_brute_force(seed, n_pods, ports, steps):
    dag = random_dag(seed, n_pods, steps)
    model = OcsModel.uniform(n_pods, *ports)
    best, _ = brute_force(dag, model)
    for reduce in (True, False):
        res = solve_milp(dag, model, reduce=reduce)
        check_result(res, model, best)
        assert res.objective_s == pytest.approx(hard_critical_path(dag, model, res.x))
        lp = solve_milp(dag, model, relax=True, reduce=reduce)
        assert lp.status == "optimal" and lp.relaxed
        assert lp.objective_s <= best * (1 + 1e-7)
        assert (model.pod_degrees(lp.x) <= model.degrees + 1e-6).all()


@pytest.mark.parametrize(
    "name,pods",
    [
        ("pipeline", 4),
        ("moe", 4),
        ("dp-ring", 4),
        ("dp-hd", 4),
        ("hybrid", 4),
        ("pipeline", 6),
        ("moe", 6),
        ("dp-ring", 6),  # hybrid on 6 pods has DP 3: no EP degree > 1 fits
    ],
)
@pytest.mark.parametrize("ports", PORTS)
def test_presets_match_brute_force(name, pods, ports):
    dag = build_dag(get_preset(name, pods=pods))
    model = OcsModel.uniform(pods, *ports)
    best, _ = brute_force(dag, model)
    check_result(solve_milp(dag, model), model, best)


@given(seed=st.integers(0, 10_000), n_pods=st.integers(3, 8), steps=st.integers(2, 14))
def test_reductions_keep_milp_and_lp_optima(seed, n_pods, steps):
    dag = random_dag(seed, n_pods, steps)
    model = OcsModel.uniform(n_pods, 4, 2)
    full, red = (solve_milp(dag, model, reduce=r, mip_rel_gap=1e-9) for r in (False, True))
    assert red.objective_s == pytest.approx(full.objective_s, rel=2e-6)
    lp_full, lp_red = (solve_milp(dag, model, relax=True, reduce=r) for r in (False, True))
    assert lp_red.objective_s == pytest.approx(lp_full.objective_s, rel=1e-7)
    assert lp_red.objective_s <= red.best_bound_s * (1 + 1e-7)


@pytest.mark.slow  # 1.5 s or more in the default run (make test-all runs it)
def test_reductions_on_a_preset():
    dag = build_dag(get_preset("hybrid", pods=8))
    model = OcsModel.uniform(8, 8, 4)
    full, red = milp_model(dag, model, reduce=False), milp_model(dag, model)
    assert red.n_cons < full.n_cons / 10 and red.n_vars < full.n_vars / 10
    # literal model: X, T, one S and one τ per node/comm node, K_e cuts per comm node
    assert full.n_vars == model.n_pairs + 1 + dag.n_nodes + dag.comm_nodes.size
    assert full.stats["cut_rows"] == 8 * dag.comm_nodes.size
    a, b = (solve_milp(dag, model, reduce=r) for r in (False, True))
    assert a.status == b.status == "optimal"
    assert b.objective_s == pytest.approx(a.objective_s, rel=2e-6)


def test_dark_ports_beat_exact_degrees_on_skewed_traffic():
    """4 pods with 4 ports, one phase loading only the triangle (0,1), (0,2), (1,2). Exact
    degrees force ``X01 = X23``, ``X02 = X13``, ``X03 = X12`` with ``X01 + X02 + X03 = 4``, so
    some triangle pair gets at most one circuit; with dark ports the triangle takes two
    circuits per pair and pod 3 stays dark. The MILP finds the ``≤`` optimum, strictly below
    the best exact-degree wiring (both by enumeration)."""
    b = DagBuilder(4)
    src = b.compute(0, 1e-3)
    a, c = [0, 1, 0, 2, 1, 2], [1, 0, 2, 0, 2, 1]
    b.phase("a2a", "p", a, c, np.full(6, 4e7), 0.0, 0.0, preds=[src])
    dag = b.build()
    model = OcsModel.uniform(4, 4, 2)
    best, arg = brute_force(dag, model)
    best_exact, _ = brute_force(dag, model, exact=True)
    assert best < best_exact * 0.9
    np.testing.assert_array_equal(model.free_ports(arg), [0, 0, 0, 4])
    for reduce in (True, False):
        res = solve_milp(dag, model, reduce=reduce)
        check_result(res, model, best)


def test_x_start_and_fields():
    dag = build_dag(get_preset("moe", pods=4))
    model = OcsModel.uniform(4, 4, 2)
    best, arg = brute_force(dag, model)
    res = solve_milp(dag, model, x_start=arg)
    check_result(res, model, best)
    assert res.n_int_vars == model.n_pairs and res.nnz > 0 and res.wall_s >= res.highs_s
    assert "HiGHS" in res.solver and "highspy" in res.solver
    with pytest.raises(ConfigError, match="x_start"):
        solve_milp(dag, model, x_start=np.full(model.n_pairs, 2))  # 6 ports of 4
    res = solve_milp(dag, model, x_start=np.ones(model.n_pairs))  # dark ports: a legal start
    check_result(res, model, best)
    with pytest.raises(ConfigError, match="pods"):
        solve_milp(dag, OcsModel.uniform(6, 4, 2))
    with pytest.raises(ConfigError, match="time_limit_s"):
        solve_milp(dag, model, time_limit_s=0)


def circulant(model: OcsModel, offsets) -> np.ndarray:
    """One circuit between ``v`` and ``v + k mod n`` for every ``k`` in ``offsets``."""
    v = np.arange(model.n)
    x = np.zeros(model.n_pairs, dtype=np.int64)
    for k in offsets:
        np.add.at(x, model.pair_index(v, (v + k) % model.n), 1)
    return x


def test_time_limit_and_mip_start():
    """hybrid on 32 pods needs ~800 branch-and-bound nodes (~16 s here): stop it early."""
    dag = build_dag(get_preset("hybrid", pods=32))
    model = OcsModel.uniform(32, 8, 4)
    res = solve_milp(dag, model, time_limit_s=1.0)
    assert res.highs_s <= 1.0 + 0.3
    assert res.status in ("time_limit", "optimal")
    if res.x is None:
        assert res.objective_s == res.gap == np.inf
    else:
        model.check_wiring(res.x)
        assert 0 <= res.gap < 1 and res.best_bound_s <= res.objective_s
        assert res.objective_s == pytest.approx(hard_critical_path(dag, model, res.x))
    # a MIP start is an incumbent from the first moment, even at a limit too short to find one
    x0 = circulant(model, range(1, 5))
    model.check_wiring(x0)
    start = solve_milp(dag, model, time_limit_s=0.3, x_start=x0)
    assert start.x is not None and start.highs_s <= 0.3 + 0.3
    assert start.objective_s <= hard_critical_path(dag, model, x0) * (1 + 1e-9)
    assert start.best_bound_s <= start.objective_s
