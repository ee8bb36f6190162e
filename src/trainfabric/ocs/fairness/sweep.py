"""A study over several ``p``: every job's iteration time, the mean, the max and Jain's index.

The maths: :mod:`trainfabric.ocs.fairness`.
"""

from __future__ import annotations

import math

import numpy as np

from trainfabric.errors import ConfigError
from trainfabric.ocs.fairness.alpha import alpha_fair_check, power_mean_optimum
from trainfabric.ocs.fairness.cost import FairnessCost
from trainfabric.ocs.fairness.jobs import FairJob
from trainfabric.ocs.fairness.means import check_p, jain, p_label
from trainfabric.ocs.fairness.plan import fair_plan, share_wirings, temperatures_for, trade_off
from trainfabric.ocs.fairness.rounding import DEFAULT_EVALS
from trainfabric.ocs.model import OcsModel
from trainfabric.ocs.wiring import baselines


def _scored(cost: FairnessCost, x: np.ndarray) -> dict:
    """Per-job hard iteration times (s) and values of wiring ``x``, with mean, max, Jain."""
    cp = cost.hard_jobs(x)
    v = cost.scale * cp
    w = cost.weights
    return {
        "job_iteration_s": cp.tolist(),
        "job_values": v.tolist(),
        "mean": float(w @ v / w.sum()),
        "max": float(v.max()),
        "jain": jain(v),
    }


def study(
    jobs: list[FairJob],
    model: OcsModel,
    ps=(1.0, 2.0, 4.0, 8.0, math.inf),
    b1_rel: float = 1.0,
    b2_rel: float = 50.0,
    normalise: bool = False,
    seed: int = 0,
    alpha_check: bool = True,
    max_evals: int = DEFAULT_EVALS,
    max_iter: int = 1000,
) -> dict:
    """One wiring per ``p`` (:func:`fair_plan`, temperatures shared by all ``p``, then
    :func:`share_wirings`), scored by
    the per-job hard iteration times of the integer wiring, with the baselines and checks
    a user asks for. JSON-able.

    Per ``p``: ``job_iteration_s``, ``job_values``, ``mean`` (weighted), ``max``, ``jain``,
    ``phi`` (hard ``Φ_p``), the regularised fractional optimum's ``fractional_max`` and
    ``fractional_mean``, solver/rounding counters; ``unregularised``: the exact optimum's
    ``max``/``mean`` of smoothed values (finite ``p``: from the α-fair check's ``Φ_p`` side;
    ``p = ∞``: the minimax of :func:`power_mean_optimum`), and ``alpha_fair`` (the check's
    figures) when ``alpha_check``. ``trade_off`` (:func:`trade_off`) of the integer
    wirings and ``unregularised_max_non_increasing`` along ``p``; ``baselines``: the best
    near-uniform and the demand-proportional wirings scored alike. ``max_iter``: solver
    iterations per annealing stage; ``max_evals``: rounding search evaluations per start.
    """
    ps = sorted(check_p(p) for p in ps)
    if not ps:
        raise ConfigError("p", "give at least one p")
    cost = FairnessCost(jobs, model, ps[0], normalise)
    b1, b2 = temperatures_for(cost, b1_rel, b2_rel)
    rows = []
    plans = [
        fair_plan(cost.with_p(p), b1, b2, seed=seed, max_iter=max_iter, max_evals=max_evals)
        for p in ps
    ]
    share_wirings(cost, plans, b2, max_evals)
    for p, plan in zip(ps, plans, strict=True):
        c = cost.with_p(p)
        frac = cost.scale * plan.job_cp_frac_s
        row = {
            "p": p_label(p),
            **_scored(c, plan.x),
            "phi": plan.phi,
            "fractional_max": float(frac.max()),
            "fractional_mean": float(cost.weights @ frac / cost.weights.sum()),
            "solver_iterations": plan.iterations,
            "solver_converged": plan.converged,
            "rounding_source": plan.source,
            "rounding_evaluations": plan.evaluations,
        }
        if alpha_check:
            if math.isinf(p):
                v = cost.job_values(power_mean_optimum(c, b2)[0], b2)[0]
            else:
                chk = alpha_fair_check(c, b2)
                v = cost.job_values(chk["x_power"], b2)[0]
                row["alpha_fair"] = {
                    k: chk[k]
                    for k in (
                        "alpha",
                        "rel_objective",
                        "rel_values",
                        "rel_wiring",
                        "rel_wiring_all",
                        "undetermined",
                        "agree",
                    )
                } | {"kkt": bool(chk["kkt_power"]["kkt"] and chk["kkt_alpha"]["kkt"])}
            row["unregularised"] = {
                "max": float(v.max()),
                "mean": float(cost.weights @ v / cost.weights.sum()),
            }
        rows.append(row)
    out = {
        "pods": model.n,
        "ports": int(model.degrees[0]) if (model.degrees == model.degrees[0]).all() else None,
        "ocs": model.ocs,
        "normalise": normalise,
        "value_unit": "slowdown vs uniform mesh" if normalise else "s",
        "b1": b1,
        "b2": b2,
        "jobs": [
            {"name": j.name, "pods": j.pods.tolist(), "weight": j.weight, "scale": float(s)}
            for j, s in zip(jobs, cost.scale, strict=True)
        ],
        "plans": rows,
        "trade_off": trade_off(plans),
        "baselines": {
            "near_uniform": _scored(cost, baselines.best_near_uniform(cost, model, seed=seed)),
            "demand_proportional": _scored(cost, baselines.demand_proportional(cost.dag, model)),
        },
    }
    if alpha_check:
        tops = [r["unregularised"]["max"] for r in rows]
        out["unregularised_max_non_increasing"] = bool(
            all(b <= a * (1 + 1e-7) for a, b in zip(tops, tops[1:], strict=False))
        )
        out["alpha_fair_all_agree"] = all(
            r["alpha_fair"]["agree"] for r in rows if "alpha_fair" in r
        )
    return out
