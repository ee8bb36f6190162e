"""Every OCS result of a solve answers ``success`` (bool) and ``message`` (str), as scipy's
``OptimizeResult`` does, and both agree with what the result holds."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from trainfabric.ocs import fairness as F
from trainfabric.ocs import traffic as tr
from trainfabric.ocs.model import OcsModel
from trainfabric.ocs.online.threshold import OneHopCost, evaluate
from trainfabric.ocs.schedule.schedulers import Instance, run_schedulers
from trainfabric.ocs.wiring import rounding
from trainfabric.ocs.wiring.bound import certify
from trainfabric.ocs.wiring.cost import PathCost, temperatures
from trainfabric.ocs.wiring.decompose import Decomposition
from trainfabric.ocs.wiring.milp import MilpResult, solve_milp
from trainfabric.ocs.wiring.onehop import OneHopInstance, one_hop_optimum
from trainfabric.ocs.wiring.planner import plan
from trainfabric.ocs.wiring.projection import project
from trainfabric.ocs.wiring.solver import solve
from trainfabric.workloads import build_dag, get_preset


def check(res, success: bool) -> str:
    assert res.success is success
    assert isinstance(res.message, str) and res.message
    return res.message


@pytest.fixture(scope="module")
def moe4():
    dag, model = build_dag(get_preset("moe", pods=4)), OcsModel.uniform(4, 4, 2)
    return dag, model, PathCost(dag, model)


def test_projection_and_solver_succeed_when_they_converge(moe4):
    _, model, cost = moe4
    y = np.random.default_rng(0).lognormal(size=model.n_pairs)
    check(project(y, model), True)
    assert "iteration limit" in check(project(y, model, method="sinkhorn", max_iter=1), False)
    b1, b2, _ = temperatures(cost, model)
    full = solve(cost, model, b1, b2)
    check(full, full.converged)
    assert full.success
    check(solve(cost, model, b1, b2, max_iter=1), False)


def test_milp_succeeds_only_when_optimal(moe4):
    dag, model, _ = moe4
    assert "optimal" in check(solve_milp(dag, model), True)
    stopped = MilpResult("time_limit", None, np.inf, 0.0, np.inf, 1.0, "highs", 1, 1)
    assert "no solution" in check(stopped, False)


def test_plan_rounding_certificate_and_split(moe4):
    dag, model, cost = moe4
    p = plan(dag, model, seed=0)
    assert "certified" in check(p, True)
    check(p.decomposition, True)
    check(rounding.round_wiring(cost, model, p.x_frac, b2=p.b2), True)
    check(certify(cost, model, [p.x_frac, p.x], p.b2, rounds=2), True)
    split = Decomposition([], [(0, 1, 2), (1, 2, 1)], False)
    assert "3 circuits" in check(split, False)
    assert "3 circuits" in check(dataclasses.replace(p, decomposition=split), False)


def test_one_hop_fails_without_a_wiring():
    traffic = np.ones((3, 3))
    check(one_hop_optimum(OneHopInstance(traffic, np.full(3, 2), 1.0)), True)
    check(one_hop_optimum(OneHopInstance(traffic, np.array([2, 2, 0]), 1.0)), False)


def test_schedules_fair_plans_and_online_runs_succeed():
    d = np.random.default_rng(1).random((4, 4)) * 1e9
    np.fill_diagonal(d, 0.0)
    for res in run_schedulers(Instance(d, 2, 1e-3, 12.5e9)).values():
        check(res, True)
    model = OcsModel.uniform(6, 4, 2)
    cost = F.FairnessCost(F.place_jobs(["moe", "pipeline"], 6, [4, 6], seed=3), model, 1.0)
    fair = F.fair_plan(cost, *F.temperatures_for(cost), max_iter=50, max_evals=20)
    check(fair, fair.converged)
    check(F.round_fair(cost, fair.x_frac, F.temperatures_for(cost)[1], max_evals=20), True)
    seq = tr.generate("random-walk", 20, 1e10, pods=6, seed=0)
    res = evaluate(OneHopCost(model), seq, 0.01)
    assert "every regret" in check(res, True)
    assert "exact per-slot optima" in check(res.runs["threshold"], True)
