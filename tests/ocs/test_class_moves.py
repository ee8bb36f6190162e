"""Class moves of the rounding (issue 34 item 1): pair classes read from the DAG's phases, and
the move that takes a whole class off the circuits, checked against HiGHS-proven optima."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainfabric.ocs.model import OcsModel
from trainfabric.ocs.wiring import solver
from trainfabric.ocs.wiring.cost import PathCost, temperatures
from trainfabric.ocs.wiring.milp import solve_milp
from trainfabric.ocs.wiring.prior import uniform_prior
from trainfabric.ocs.wiring.rounding import _class_moves, round_wiring
from trainfabric.ocs.wiring.search import _Reduced, pair_classes
from trainfabric.workloads import Job, build_dag, get_preset
from trainfabric.workloads.dag import COMM
from trainfabric.workloads.presets import DEEPSEEK_V3


def _moe_dp(pods: int):
    """DeepSeek-V3-width MoE (2 layers, TP8 per pod, EP groups of 16 pods, DP over all pods):
    the MoE job of benchmarks/ocs_scale.py, on 16 ports and 4 OCSes."""
    model = {**DEEPSEEK_V3, "layers": 2, "first_dense_layers": 0, "name": "deepseek-v3-2l"}
    par = dict(tp=8, dp=pods, ep=16, micro_batches=2)
    job = Job.model_validate(
        dict(name="moe", model=model, parallelism=par, placement=dict(gpus_per_pod=8, pods=pods))
    )
    return build_dag(job), OcsModel.uniform(pods, 16, 4)


def _phase_sets(dag, model) -> dict[int, frozenset]:
    """Reference: per pair, the multiset of phases its transfers run in, a phase being the
    comm nodes with the same single predecessor and successor (any other comm node its own)."""
    preds: dict[int, list[int]] = {}
    for i in range(dag.n_nodes):
        for j in dag.indices[dag.indptr[i] : dag.indptr[i + 1]]:
            preds.setdefault(int(j), []).append(i)
    out: dict[int, Counter] = {}
    for c in np.flatnonzero(dag.kind == COMM):
        p, s = preds.get(int(c), []), dag.indices[dag.indptr[c] : dag.indptr[c + 1]]
        key = (p[0], int(s[0])) if len(p) == 1 and len(s) == 1 else ("node", int(c))
        e = int(model.pair_index(dag.pod[c], dag.dst[c]))
        out.setdefault(e, Counter())[key] += 1
    return {e: frozenset(v.items()) for e, v in out.items()}


@pytest.mark.parametrize("preset", ["moe", "hybrid", "pipeline", "dp-ring", "dp-hd"])
def test_pair_classes_are_the_phase_sets(preset):
    dag = build_dag(get_preset(preset, pods=8), seed=0)
    model = OcsModel.uniform(8, 8, 4)
    cost = PathCost(dag, model)
    classes = pair_classes(_Reduced(cost, model, 1.0), model.n_pairs)
    ref = _phase_sets(dag, model)
    assert set(np.flatnonzero(classes >= 0)) == set(ref)
    for a in ref:
        for b in ref:
            assert (classes[a] == classes[b]) == (ref[a] == ref[b])


def test_pair_classes_of_the_moe_job_separate_the_roles():
    dag, model = _moe_dp(32)
    classes = pair_classes(_Reduced(PathCost(dag, model), model, 1.0), model.n_pairs)
    iu, iv = model.pairs
    ep_only = (iu // 16 == iv // 16) & (iv - iu >= 2)  # the expert all-to-all, no ring
    assert np.unique(classes[ep_only]).size == 1
    assert not np.isin(classes[~ep_only], classes[ep_only]).any()


def _fractional(dag, model):
    cost = PathCost(dag, model)
    b1, b2, _ = temperatures(cost, model, 1.0, 50.0)
    res = solver.solve(
        cost, model, b1, b2, prior=uniform_prior(model), max_iter=50, inequality=True
    )
    return cost, res.x, b2


def test_class_move_leaves_the_local_optimum_of_the_moe_job():
    """At 64 pods the local search alone stops 6.4% above the optimum (measured 2026-12-07;
    17.8% before its donor pruning let the same budget reach further); emptying the expert
    pairs' class and re-spending its ports on the rings reaches it (1.2698 s)."""
    dag, model = _moe_dp(64)
    cost, x_frac, b2 = _fractional(dag, model)
    local = round_wiring(cost, model, x_frac, b2=b2, classes=False)
    moved = round_wiring(cost, model, x_frac, b2=b2)
    model.check_wiring(moved.x)
    assert moved.hard_cp_s == pytest.approx(cost.hard(moved.x), rel=1e-12)
    assert moved.hard_cp_s < 0.95 * local.hard_cp_s
    assert moved.class_work > 0


@pytest.mark.slow
def test_class_move_reaches_the_milp_optimum_of_the_moe_job():
    dag, model = _moe_dp(64)
    cost, x_frac, b2 = _fractional(dag, model)
    moved = round_wiring(cost, model, x_frac, b2=b2)
    opt = solve_milp(dag, model, time_limit_s=120.0)
    assert opt.status == "optimal"
    assert moved.hard_cp_s >= opt.objective_s * (1 - 1e-9)
    assert moved.hard_cp_s == pytest.approx(opt.objective_s, rel=1e-6)


@settings(max_examples=12)
@given(st.integers(0, 2**31), st.sampled_from(["moe", "hybrid", "dp-ring", "pipeline"]))
def test_class_moves_never_worsen_and_keep_the_ports(seed, preset):
    dag = build_dag(get_preset(preset, pods=8), seed=seed % 7)
    model = OcsModel.uniform(8, 8, 4)
    cost = PathCost(dag, model)
    rng = np.random.default_rng(seed)
    x = np.zeros(model.n_pairs, dtype=np.int64)
    for _ in range(40):  # a random wiring with degrees <= d
        e = int(rng.integers(model.n_pairs))
        y = x.copy()
        y[e] += 1
        if (model.pod_degrees(y) <= model.degrees).all():
            x = y
    b2 = 50.0 / cost.hard(x)
    perm = rng.permutation(model.n).astype(np.int64)
    red = _Reduced(cost, model, b2)
    out, cp, _, _, work = _class_moves(red, model, x, cost.hard(x), b2, perm, 10**9)
    model.check_wiring(out)
    assert cp <= cost.hard(x) * (1 + 1e-12)
    assert cp == pytest.approx(cost.hard(out), rel=1e-12)
    assert work > 0 or not (pair_classes(red, model.n_pairs) >= 0).any()
