"""Rounding for several jobs: first-improvement local search on the hard power mean.

The maths: :mod:`trainfabric.ocs.fairness`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainfabric.ocs.fairness.cost import FairnessCost
from trainfabric.ocs.fairness.jobs import side_by_side
from trainfabric.ocs.fairness.means import power_mean
from trainfabric.ocs.wiring import baselines, rounding
from trainfabric.ocs.wiring.cost import PathCost

DEFAULT_EVALS = 3000  # move evaluations per start (work units: each = the jobs a move touches)
_TARGETS = 24  # pairs tried as targets per sweep (by smoothed gradient)
_DONORS = 3  # donor circuits tried at each end of a target


def hard_key(cost: FairnessCost, v: np.ndarray) -> tuple[float, float]:
    """Hard objective of per-job values ``v`` for comparing wirings: ``(Φ_p, weighted mean)``
    (the mean breaks ties of the max at ``p = ∞``)."""
    w = cost.weights
    return power_mean(v, w, cost.p), float(w @ v / w.sum())


def _moves(cost: FairnessCost, x: np.ndarray, grad: np.ndarray, free: np.ndarray):
    """Candidate moves ``(remove pairs, add pairs)`` (module doc): targets by the smoothed
    gradient (most negative first), donors at each end by the least gradient loss."""
    model = cost.model
    iu, iv = model.pairs
    useful = np.flatnonzero(cost.used.any(axis=0) & (grad < 0))
    targets = useful[np.argsort(grad[useful], kind="stable")][:_TARGETS]
    for e in targets:
        u, v = int(iu[e]), int(iv[e])
        ends = []
        for a, other in ((u, v), (v, u)):
            if free[a] > 0:
                ends.append([None])
                continue
            inc = np.flatnonzero(((iu == a) | (iv == a)) & (x > 0))
            inc = inc[(iu[inc] != other) & (iv[inc] != other)]
            ends.append(inc[np.argsort(-grad[inc], kind="stable")][:_DONORS].tolist())
        for da in ends[0]:
            for db in ends[1]:
                remove = [d for d in (da, db) if d is not None]
                add = [int(e)]
                if da is not None and db is not None:
                    a = int(iu[da] + iv[da] - u)
                    b = int(iu[db] + iv[db] - v)
                    if a != b:
                        add.append(int(model.pair_index(a, b)))
                yield remove, add


def better(k: tuple[float, float], best: tuple[float, float]) -> bool:
    """``k`` beats ``best``: a lower ``Φ_p`` (beyond 1e-12 relative: float noise of the
    sweeps), or an equal one and a lower weighted mean."""
    if k[0] < best[0] * (1.0 - 1e-12):
        return True
    return k[0] <= best[0] and k[1] < best[1] * (1.0 - 1e-12)


def local_search(
    cost: FairnessCost, x, b2: float, max_evals: int = DEFAULT_EVALS
) -> tuple[np.ndarray, tuple[float, float], int]:
    """First-improvement search on the hard ``Φ_p`` from integer wiring ``x`` (module doc).

    Returns ``(x, key, evaluations)``; stops at a local optimum of the move set or after
    ``max_evals`` evaluations (each: the hard critical paths of the jobs whose pairs a move
    changes, so at most ``J`` PathCost sweeps)."""
    model = cost.model
    x = np.asarray(x, dtype=np.int64).copy()
    vals = cost.scale * cost.hard_jobs(x)
    best = hard_key(cost, vals)
    evals = 0
    improved = True
    while improved and evals < max_evals:
        improved = False
        grad = cost.value_and_grad(x, b2)[1]
        free = model.free_ports(x)
        for remove, add in _moves(cost, x, grad, free):
            if evals >= max_evals:
                break
            y = x.copy()
            np.subtract.at(y, remove, 1)
            np.add.at(y, add, 1)
            touched = cost.used[:, remove + add].any(axis=1)
            new = vals.copy()
            new[touched] = cost.scale[touched] * [
                c.hard(y) for c, t in zip(cost.costs, touched, strict=True) if t
            ]
            evals += 1
            k = hard_key(cost, new)
            if better(k, best):
                x, vals, best, improved = y, new, k, True
                break
    return x, best, evals


@dataclass
class FairRound:
    """Outcome of :func:`round_fair`: the wiring ``x``, its ``key`` (hard ``Φ_p``, weighted
    mean), the start it came from (``source``) and the evaluations spent. ``success``: the
    key is finite; ``message``: ``Φ_p`` and the start."""

    x: np.ndarray
    key: tuple[float, float]
    source: str
    evaluations: int

    @property
    def success(self) -> bool:
        return bool(np.isfinite(self.key).all())

    @property
    def message(self) -> str:
        return f"hard Φ_p {self.key[0]:.6g} from the {self.source} start"


def round_fair(
    cost: FairnessCost,
    x_frac,
    b2: float,
    seed: int = 0,
    max_evals: int = DEFAULT_EVALS,
) -> FairRound:
    """Integer wiring (degrees ≤ d) minimising the hard ``Φ_p`` near ``x_frac`` (module doc):
    every start searched by :func:`local_search` (``max_evals`` each), the baselines kept as
    candidates; ties keep the earlier (searched) one."""
    model = cost.model
    x_frac = np.asarray(x_frac, dtype=float)
    grad = cost.value_and_grad(x_frac, b2)[1]
    joint = PathCost(side_by_side([c.dag for c in cost.costs]), model)
    starts = {
        "fractional-parts": rounding.round_to_degrees(model, x_frac),
        "gradient": rounding.round_to_degrees(model, x_frac, -grad),
        "slowest-job": rounding.round_wiring(joint, model, x_frac, b2=None, seed=seed).x,
    }
    results = []
    evals = 0
    for name, x0 in starts.items():
        x, key, ev = local_search(cost, x0, b2, max_evals)
        evals += ev
        results.append(FairRound(x, key, name, 0))
    for name, x in (
        ("near-uniform", baselines.best_near_uniform(cost, model, seed=seed)),
        ("demand-proportional", baselines.demand_proportional(cost.dag, model)),
    ):
        results.append(FairRound(x, hard_key(cost, cost.scale * cost.hard_jobs(x)), name, 0))
    best = min(results, key=lambda r: r.key)
    best.evaluations = evals
    return best
