"""The planner's exact one-hop fast path (planner module doc): on one-phase DAGs its hard
critical path equals HiGHS's MILP optimum (small instances) and never exceeds the general
path's; multi-phase DAGs never take it; its split onto the OCSes is valid."""

from __future__ import annotations

import numpy as np
import pytest

from trainfabric.ocs.model import OcsModel
from trainfabric.ocs.wiring.milp import solve_milp
from trainfabric.ocs.wiring.onehop import least_bottleneck
from trainfabric.ocs.wiring.planner import plan, single_bundle
from trainfabric.workloads.dag import Phase
from trainfabric.workloads.traffic import PhaseTraffic, dag_from_traffic


def random_dag(rng, n: int, phases: int = 1, latency_s: float = 5e-6):
    """``phases`` phases of random directed transfers (repeated and reverse pairs included)."""
    flows = [rng.integers(0, n, size=(int(rng.integers(1, 2 * n)), 2)) for _ in range(phases)]
    flows = [f[f[:, 0] != f[:, 1]] for f in flows]
    flows = [f if f.size else np.array([[0, 1]]) for f in flows]
    src = np.concatenate([f[:, 0] for f in flows]).astype(np.int32)
    dst = np.concatenate([f[:, 1] for f in flows]).astype(np.int32)
    ptr = np.concatenate([[0], np.cumsum([len(f) for f in flows])])
    nbytes = rng.lognormal(18, 1.5, size=src.size)
    ph = tuple(Phase(f"p{k}", "a2a") for k in range(phases))
    return dag_from_traffic(PhaseTraffic(n, ph, ptr, src, dst, nbytes), latency_s=latency_s)


def random_model(rng, n: int, ocs: int) -> OcsModel:
    ports = ocs * rng.integers(1, 4, size=n)
    return OcsModel(ports, ocs, rate_bps=100e9, fallback_bps=float(rng.choice([1e5, 5e9])))


def check_split(model: OcsModel, x: np.ndarray, dec) -> None:
    assert dec.feasible and not dec.unrealised
    assert np.array_equal(sum(dec.configs), model.to_matrix(x))
    for cfg in dec.configs:
        assert np.array_equal(cfg, cfg.T)
        assert (cfg.sum(axis=1) <= model.ports_per_ocs).all()


@pytest.mark.parametrize("seed", range(8))
def test_fast_path_equals_milp_and_beats_general(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(3, 6))
    dag = random_dag(rng, n, latency_s=float(rng.choice([0.0, 2e-5])))
    model = random_model(rng, n, ocs=int(rng.choice([1, 2])))
    assert single_bundle(dag)
    fast = plan(dag, model)
    general = plan(dag, model, exact_one_hop=False)
    assert fast.method == "exact-one-hop" and general.method == "general"
    model.check_wiring(fast.x)
    milp = solve_milp(dag, model, time_limit_s=20.0)
    assert milp.status == "optimal"
    assert fast.hard_critical_path_s == pytest.approx(milp.objective_s, rel=1e-6)
    assert fast.hard_critical_path_s <= general.hard_critical_path_s
    assert fast.lower_bound_s == fast.hard_critical_path_s and fast.certified_gap == 0.0
    # the general path's certified bound is a bound on the exact optimum too
    assert general.lower_bound_s <= fast.hard_critical_path_s * (1 + 1e-9)
    check_split(model, fast.x, fast.decomposition)
    assert fast.summary(model)["method"] == "exact-one-hop"


@pytest.mark.parametrize("seed", range(4))
def test_fast_path_never_worse_on_larger_instances(seed):
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(8, 16))
    dag, model = random_dag(rng, n), random_model(rng, n, ocs=2)
    fast, general = plan(dag, model), plan(dag, model, exact_one_hop=False)
    assert fast.method == "exact-one-hop"
    assert fast.hard_critical_path_s <= general.hard_critical_path_s
    assert general.lower_bound_s <= fast.hard_critical_path_s * (1 + 1e-9)
    check_split(model, fast.x, fast.decomposition)


@pytest.mark.parametrize("seed", range(3))
def test_multi_phase_dags_take_the_general_path(seed):
    rng = np.random.default_rng(200 + seed)
    dag, model = random_dag(rng, 5, phases=2 + seed), random_model(rng, 5, ocs=1)
    assert not single_bundle(dag)
    res = plan(dag, model)
    assert res.method == "general" and res.iterations > 0


def test_least_bottleneck_matches_brute_force():
    rng = np.random.default_rng(7)
    for _ in range(30):
        n = 4
        ports = rng.integers(1, 4, size=n)
        u, v = np.triu_indices(n, 1)
        kmax = np.minimum(ports[u], ports[v])
        k = np.arange(kmax.max() + 1)
        table = rng.random((u.size, 1)) + rng.random((u.size, 1)) / (k + rng.random())
        x, _ = least_bottleneck(table, kmax, (u, v), ports)
        best = np.inf
        for w in np.ndindex(*(kmax + 1)):
            w = np.array(w)
            if (np.bincount(u, w, n) + np.bincount(v, w, n) <= ports).all():
                best = min(best, table[np.arange(u.size), w].max())
        assert table[np.arange(u.size), x].max() == best


def test_tables_over_the_memory_limit_take_the_general_path(monkeypatch):
    import trainfabric.ocs.wiring.planner as planner

    rng = np.random.default_rng(5)
    dag, model = random_dag(rng, 4), random_model(rng, 4, ocs=1)
    assert plan(dag, model).method == "exact-one-hop"
    monkeypatch.setattr(planner, "memory_limit_bytes", lambda: 0.0)
    assert plan(dag, model).method == "general"
