"""The wiring for one ``p``: temperatures, the fractional solve, rounding, shared wirings.

The maths: :mod:`trainfabric.ocs.fairness`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from trainfabric.errors import ConfigError
from trainfabric.ocs.fairness.cost import FairnessCost
from trainfabric.ocs.fairness.means import jain, p_label, power_mean
from trainfabric.ocs.fairness.rounding import (
    DEFAULT_EVALS,
    better,
    hard_key,
    local_search,
    round_fair,
)
from trainfabric.ocs.wiring import solver
from trainfabric.ocs.wiring.prior import uniform_prior


@dataclass
class FairPlan:
    """The wiring for one ``p`` and what it gives every job (times in s; ``values`` in
    objective units: s, or slowdown vs the uniform mesh when normalised).

    ``job_cp_s`` hard critical paths of the integer wiring, ``job_cp_frac_s`` of the
    fractional optimum ``x_frac``; ``phi`` hard ``Φ_p`` of the integer wiring; ``mean``
    (weighted), ``max`` and ``jain`` of its values; ``b1``, ``b2`` (1/s), solver
    ``iterations`` and ``converged``; ``source`` the start the rounding kept;
    ``evaluations`` of the search. ``success`` is ``converged`` (the fractional solve met its
    stopping test); ``message`` says so, with the start kept.
    """

    p: float
    x: np.ndarray
    x_frac: np.ndarray
    job_cp_s: np.ndarray
    job_cp_frac_s: np.ndarray
    values: np.ndarray
    phi: float
    mean: float
    max: float
    jain: float
    b1: float
    b2: float
    iterations: int
    converged: bool
    source: str
    evaluations: int

    @property
    def success(self) -> bool:
        return self.converged

    @property
    def message(self) -> str:
        return (
            f"solver {'converged' if self.converged else 'stopped before its stopping test'} "
            f"after {self.iterations} iterations; rounding from {self.source}"
        )


def temperatures_for(
    cost: FairnessCost, b1_rel: float = 1.0, b2_rel: float = 50.0
) -> tuple[float, float]:
    """``(b1, b2)`` from the dimensionless knobs, the same for every ``p`` (so the plans of a
    study differ only by ``p``), as :func:`trainfabric.ocs.wiring.cost.temperatures` does for one
    job:
    ``b2 = b2_rel·max(log Σ_j |Π_j|, 1) / CP0`` (1/s) with ``CP0`` the weighted mean of the
    jobs' hard critical paths (s) on the fractional uniform mesh ``M q`` (so every job's
    smoothing excess ``U_j − CP_j ≤ CP0 / b2_rel``), and ``b1 = b1_rel / Φ0`` (per objective
    unit) with ``Φ0`` the weighted mean of the jobs' values there (= ``CP0`` in seconds, = 1
    when normalised). ConfigError naming ``b1_rel``/``b2_rel`` unless > 0."""
    for name, v in (("b1_rel", b1_rel), ("b2_rel", b2_rel)):
        if not (v > 0 and math.isfinite(v)):
            raise ConfigError(name, f"must be finite and > 0, got {v}")
    model, w = cost.model, cost.weights
    cp = cost.hard_jobs(model.total_circuits * uniform_prior(model))
    if not (cp > 0).all():
        raise ConfigError("jobs", "a job's critical path on the uniform mesh is zero")
    cp0 = float(w @ cp / w.sum())
    phi0 = float(w @ (cost.scale * cp) / w.sum())
    return b1_rel / phi0, b2_rel * max(cost.log_paths(), 1.0) / cp0


def fair_plan(
    cost: FairnessCost,
    b1: float,
    b2: float,
    seed: int = 0,
    max_iter: int = 1000,
    max_evals: int = DEFAULT_EVALS,
) -> FairPlan:
    """Solve (mirror descent on ``Φ_p + KL(w||q)/b1`` over ``W≤``, annealed in ``b2``), round
    (:func:`round_fair`) and score one ``p`` (``cost.p``)."""
    model = cost.model
    res = solver.solve(cost, model, b1, b2, anneal=True, max_iter=max_iter, inequality=True)
    r = round_fair(cost, res.x, b2, seed=seed, max_evals=max_evals)
    plan = FairPlan(
        p=cost.p,
        x=r.x,
        x_frac=res.x,
        job_cp_s=np.empty(0),
        job_cp_frac_s=cost.hard_jobs(res.x),
        values=np.empty(0),
        phi=math.nan,
        mean=math.nan,
        max=math.nan,
        jain=math.nan,
        b1=b1,
        b2=b2,
        iterations=res.iterations,
        converged=res.converged,
        source=r.source,
        evaluations=r.evaluations,
    )
    _score(plan, cost, r.x)
    return plan


def _score(plan: FairPlan, cost: FairnessCost, x: np.ndarray) -> None:
    """Set ``plan``'s integer wiring to ``x`` and its per-job figures accordingly."""
    cp = cost.hard_jobs(x)
    values = cost.scale * cp
    w = cost.weights
    plan.x, plan.job_cp_s, plan.values = x, cp, values
    plan.phi = power_mean(values, w, cost.p)
    plan.mean = float(w @ values / w.sum())
    plan.max = float(values.max())
    plan.jain = jain(values)


def share_wirings(cost: FairnessCost, plans: list[FairPlan], b2: float, max_evals: int) -> None:
    """Each plan of a study also tries the other plans' integer wirings: the best of them
    under its own hard ``Φ_p`` (ties: the mean), when strictly better than its own, is
    searched further (:func:`local_search`, ``max_evals``) and replaces it (``source``
    ``"plan p=q"``). So no plan is beaten on its own objective by a wiring the study found
    for another ``p`` (measured before this step: the ``p = ∞`` search once returned a max
    1.9x that of the ``p = 8`` wiring)."""
    wirings = [(pl.p, pl.x) for pl in plans]
    for pl in plans:
        c = cost.with_p(pl.p)
        keys = [hard_key(c, c.scale * c.hard_jobs(x)) for _, x in wirings]
        i = min(range(len(keys)), key=keys.__getitem__)
        if better(keys[i], hard_key(c, pl.values)):
            x, _, ev = local_search(c, wirings[i][1], b2, max_evals)
            _score(pl, c, x)
            pl.source = f"plan p={p_label(wirings[i][0])}"
            pl.evaluations += ev


def trade_off(plans: list[FairPlan]) -> dict:
    """Along increasing ``p``: counts of steps where the weighted mean *decreases* or the max
    *increases* (the expected trade-off is mean ↑, max ↓; rounded wirings need not follow it
    exactly), and the relative size of the largest such violation."""
    ordered = sorted(plans, key=lambda pl: pl.p)
    mean = np.array([pl.mean for pl in ordered])
    top = np.array([pl.max for pl in ordered])
    d_mean = np.diff(mean) / mean[:-1]
    d_max = np.diff(top) / top[:-1]
    return {
        "mean_decreases": int((d_mean < -1e-9).sum()),
        "max_increases": int((d_max > 1e-9).sum()),
        "worst_mean_decrease": float(max(0.0, -d_mean.min(initial=0.0))),
        "worst_max_increase": float(max(0.0, d_max.max(initial=0.0))),
    }
