"""Online rewiring of a job's task DAG under drifting traffic: regret bounded from both sides.

**Cost.** A task DAG (:mod:`trainfabric.workloads`) with base pod traffic ``T0``
(:func:`.drift.traffic_matrix`, bytes per iteration). Slot ``t``'s traffic ``D_t`` must live on
the support of ``T0`` (generate it with ``base=T0``, :func:`trainfabric.ocs.traffic.generate`); the
slot's DAG
has every comm node ``u → v`` scaled by ``D_t,uv / T0_uv`` (as :func:`.drift.drift_traffic`
scales bytes), so its pod traffic is exactly ``D_t``. ``f_t(x)`` is the hard critical path
(:meth:`trainfabric.ocs.wiring.cost.PathCost.hard`) of the integer wiring ``x`` on slot ``t``'s DAG.

*Lipschitz constant.* A comm node lasts ``latency + 8 b / (B x_e + B0)``; a path visits each
node at most once, and the comm nodes of ``u → v`` carry ``D_t,uv`` bytes together, so a
path's length moves by at most ``(8/B0) Σ_uv |D_t,uv − D_s,uv|`` and so does the maximum over
paths: ``Γ = 8 / B0`` seconds per byte, as in the one-hop model.

**The per-slot optimum is not proven.** The switching-free oracle is the planner
(:func:`trainfabric.ocs.wiring.planner.plan`, warm-started from the previous slot's plan); every
plan carries a
certified lower bound ``LB_t ≤ OPT_t ≤ CP_t`` (its wiring's critical path). So the regret
``R = Σ f_t(w_t) + switching − Σ OPT_t`` is bracketed by

    regret_lower = Σ f_t(w_t) + switching − Σ CP_t    ≤  R  ≤    regret_upper = ... − Σ LB_t.

The threshold policy re-plans at a reconfiguration ``s_k`` (warm-started from its own last
plan) and its wiring ``w_k`` is optimal only within its certified gap
``g_k = CP_{s_k}(w_k) − LB_{s_k}``; step (b) of docs/ocs.md §1.10 becomes
``f_t(w_k) ≤ f_t(w_t*) + 2Γθ + g_k``, and the bound gains ``Σ_t g_{k(t)}``:

    R ≤ C_eff (V1/θ + 1) + 2ΓθT + Σ_t g_{k(t)}.

Only ``regret_lower`` is guaranteed to lie below this bound; ``regret_upper`` may exceed it
by the oracle's own slack ``Σ_t (CP_t − LB_t)``. Reports say which side each number is on.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from trainfabric.errors import ConfigError
from trainfabric.ocs.model import OcsModel
from trainfabric.ocs.online.drift import traffic_matrix
from trainfabric.ocs.online.threshold import (
    OneHopCost,
    OnlineResult,
    PolicyRun,
    effective_switch_cost,
    regret_bound,
    resolve_theta,
    theta_star,
)
from trainfabric.ocs.traffic import TrafficSequence
from trainfabric.ocs.wiring.cost import PathCost
from trainfabric.ocs.wiring.planner import Plan, plan
from trainfabric.workloads.dag import COMM, TaskDAG


def slot_dag(dag: TaskDAG, base: np.ndarray, matrix: np.ndarray) -> TaskDAG:
    """``dag`` with every comm node ``u → v`` scaled by ``matrix_uv / base_uv`` (module doc);
    ConfigError (field ``traffic``) if ``matrix`` has bytes where ``base`` has none."""
    outside = (np.asarray(matrix) > 0) & (base <= 0)
    if outside.any():
        u, v = map(int, np.argwhere(outside)[0])
        raise ConfigError("traffic", f"bytes on {u} -> {v}, a pair the job does not use")
    comm = dag.kind == COMM
    ratio = np.divide(matrix, base, out=np.zeros_like(base, dtype=float), where=base > 0)
    scale = np.ones(dag.n_nodes)
    scale[comm] = ratio[dag.pod[comm], dag.dst[comm]]
    return dataclasses.replace(dag, bytes=dag.bytes * scale)


@dataclass
class DagPolicyRun(PolicyRun):
    """A :class:`.threshold.PolicyRun` on the DAG model, whose oracle is the planner: its
    ``regret_s`` (= ``regret_lower_s``) is measured against the plans' critical paths
    ``Σ_t CP_t``, ``regret_upper_s`` against their certified lower bounds ``certified_s =
    Σ_t LB_t`` (s); ``bound_s`` is the regret bound with the certified gaps (module doc; nan
    for always- and never-switch). ``success`` also needs a finite ``regret_upper_s``."""

    oracle: ClassVar[str] = "the planner's plans, bracketed by their certified lower bounds"

    certified_s: float
    bound_s: float

    @property
    def regret_lower_s(self) -> float:
        """``Σ f_t(w_t) + switching − Σ CP_t`` (s): at most the regret."""
        return self.regret_s

    @property
    def regret_upper_s(self) -> float:
        """``Σ f_t(w_t) + switching − Σ LB_t`` (s): at least the regret."""
        return self.slot_cost_s + self.switching_cost_s - self.certified_s

    @property
    def success(self) -> bool:
        return super().success and math.isfinite(self.regret_upper_s)


@dataclass
class DagOnlineResult(OnlineResult):
    """An :class:`.threshold.OnlineResult` on the DAG model: the oracle per slot
    (``oracle_cp`` [T] the planner's critical paths, ``oracle_lb`` [T] their certified lower
    bounds, s; ``optimum_s = Σ oracle_cp``), ``runs`` of :class:`DagPolicyRun` and ``bound_s``
    the threshold run's bound with the certified gaps."""

    oracle_cp: np.ndarray
    oracle_lb: np.ndarray

    def run_bound(self, run: DagPolicyRun) -> float:
        """The run's own bound, certified gaps included (s; nan without a finite ``θ``)."""
        return run.bound_s


def _moved(x_new, x_old) -> int:
    return int(np.maximum(np.asarray(x_new) - np.asarray(x_old), 0).sum())


def evaluate_dag(
    dag: TaskDAG,
    model: OcsModel,
    seq: TrafficSequence,
    switch_cost_s: float,
    charge: str = "reconfiguration",
    theta: float | None = None,
    seed: int = 0,
) -> DagOnlineResult:
    """Threshold (``theta``, default ``θ*``), always- and never-switch on the DAG model,
    with the planner as the oracle and the regret bracketed (module doc)."""
    from trainfabric.ocs.traffic import variation

    one_hop = OneHopCost(model)  # for Γ = 8 / B0 and C_eff, the same as the one-hop model's
    c_eff = effective_switch_cost(one_hop, switch_cost_s, charge)
    base = traffic_matrix(dag)
    d = seq.array()
    dags = [slot_dag(dag, base, d[t]) for t in range(seq.slots)]
    costs = [PathCost(g, model) for g in dags]
    gamma = one_hop.gamma
    v1 = variation(d)
    star = theta_star(c_eff, v1, gamma, seq.slots)
    theta = resolve_theta(theta, star)
    oracle: list[Plan] = []
    for t, g in enumerate(dags):
        oracle.append(plan(g, model, seed=seed, warm_start=oracle[-1] if t else None))
    cp = np.array([p.hard_critical_path_s for p in oracle])
    lb = np.array([p.lower_bound_s for p in oracle])

    def run(name: str, th: float) -> DagPolicyRun:
        cur, ref = oracle[0], d[0]
        gap = cur.hard_critical_path_s - lb[0]
        per = np.empty(seq.slots)
        switched = np.zeros(seq.slots, dtype=bool)
        moved = np.zeros(seq.slots, dtype=np.int64)
        gaps = 0.0
        for t in range(seq.slots):
            if np.abs(d[t] - ref).sum() > th:
                new = oracle[t] if th < 0 else plan(dags[t], model, seed=seed, warm_start=cur)
                moved[t] = _moved(new.x, cur.x)
                cur, ref, switched[t] = new, d[t], True
                gap = new.hard_critical_path_s - max(lb[t], new.lower_bound_s)
            per[t] = costs[t].hard(cur.x)
            gaps += gap
        bound = (
            regret_bound(c_eff, v1, th, gamma, seq.slots) + gaps if 0 <= th < math.inf else math.nan
        )
        return DagPolicyRun.measure(
            name, th, (per, switched, moved), switch_cost_s, charge, float(cp.sum()),
            certified_s=float(lb.sum()), bound_s=bound,
        )  # fmt: skip

    runs = {r.name: r for r in (run("threshold", theta), run("always", -1.0))}
    runs["never"] = run("never", math.inf)
    return DagOnlineResult(
        seq.slots, v1, gamma, switch_cost_s, charge, c_eff, star, runs["threshold"].bound_s,
        float(cp.sum()), runs, cp, lb,
    )  # fmt: skip
