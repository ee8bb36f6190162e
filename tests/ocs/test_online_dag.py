"""Online rewiring on the DAG model: per-slot DAGs, analytic Γ, regret bracketed both sides."""

import numpy as np
import pytest

from trainfabric.errors import ConfigError
from trainfabric.ocs import traffic as tr
from trainfabric.ocs.online.dag import evaluate_dag, slot_dag
from trainfabric.ocs.online.drift import traffic_matrix
from trainfabric.ocs.online.threshold import OnlineResult, PolicyRun
from trainfabric.ocs.wiring.cost import PathCost
from trainfabric.ocs.wiring.families import family


@pytest.fixture(scope="module")
def job():
    dag, model = family("moe-layers", 8, 8, 0)
    return dag, model, traffic_matrix(dag)


def test_slot_dag_carries_the_slot_traffic_and_gamma_bounds_the_change(job):
    dag, model, base = job
    seq = tr.generate("random-walk", 6, 0.4 * base.sum(), pods=8, seed=2, base=base)
    d = seq.array()
    dags = [slot_dag(dag, base, m) for m in d]
    for g, m in zip(dags, d, strict=True):
        assert np.allclose(traffic_matrix(g), m, rtol=1e-12)
    rng = np.random.default_rng(0)
    gamma = 8 / model.fallback_bps
    for _ in range(6):  # random wirings, including unwired pairs: |Δf| <= Γ ||ΔD||_1
        x = rng.integers(0, 2, model.n_pairs)
        while (model.pod_degrees(x) > model.degrees).any():
            x[rng.integers(model.n_pairs)] = 0
        s, t = rng.choice(6, 2, replace=False)
        df = abs(PathCost(dags[t], model).hard(x) - PathCost(dags[s], model).hard(x))
        assert df <= gamma * np.abs(d[t] - d[s]).sum() * (1 + 1e-12)
    with pytest.raises(ConfigError) as e:
        slot_dag(dag, np.zeros_like(base), d[0])
    assert e.value.field == "traffic"


@pytest.mark.parametrize("kind", ["random-walk", "jumps"])
def test_regret_is_bracketed_and_below_the_bound_with_the_certified_gap(job, kind):
    dag, model, base = job
    seq = tr.generate(kind, 4, 0.5 * base.sum(), pods=8, seed=1, base=base, jumps=2)
    res = evaluate_dag(dag, model, seq, switch_cost_s=0.3)
    assert (res.oracle_lb <= res.oracle_cp * (1 + 1e-9)).all()
    for name, run in res.runs.items():
        assert run.regret_lower_s <= run.regret_upper_s, name
    thr = res.runs["threshold"]
    assert thr.regret_lower_s <= thr.bound_s
    assert res.runs["always"].regret_lower_s == pytest.approx(0.3 * 4, rel=1e-9)
    never = res.runs["never"]
    assert never.switches == 0 and never.switching_cost_s == 0
    # the one-hop result classes, with the bracket and the certified bound on top
    assert isinstance(thr, PolicyRun) and isinstance(res, OnlineResult)
    assert thr.moved_circuits == thr.moved.sum() and thr.switches == thr.switched.sum()
    assert res.summary("threshold")["regret_bound_s"] == thr.bound_s == res.bound_s
    assert res.summary("threshold")["regret_s"] == thr.regret_lower_s
    assert res.optimum_s == res.oracle_cp.sum()
    assert res.success and thr.success and "planner" in thr.message
