"""Ablation of the entropic step (issue 34, item 4): the planner's rounding and search run from
other starting points than the entropic solve's fractional wiring.

:func:`~trainfabric.ocs.wiring.planner.plan` (general path) is three steps: the entropic solve
(``solver.solve``: mirror descent on ``U + KL(w || q) / b1``, annealed, dark ports allowed)
gives a fractional wiring ``x_frac``; :func:`.rounding.round_wiring` rounds and searches it on
the hard critical path; the plan is the best (shortest hard critical path, ties to the
rounding) of that result and two baseline candidates, the best near-uniform wiring and the
demand-proportional wiring. The ablation replaces ``x_frac`` by another start and keeps the
rest identical (the same ``b2``, search ``seed`` and work budget ``max_moves``):

* ``entropic`` — ``x_frac`` exactly as :func:`plan` computes it (:func:`entropic_point`);
* ``uniform`` — the fractional uniform mesh ``M · q`` (``q`` the KL-projected prior, the
  point whose critical path ``CP0`` scales the temperatures, and the limit of the entropic
  solve as ``b1 → 0``);
* ``demand`` — the fractional demand-proportional wiring
  (:func:`.baselines.proportional_fill` of the pairs' bytes, before
  :func:`.baselines.demand_proportional` rounds it);
* ``random`` — :func:`.baselines.proportional_fill` of i.i.d. ``Exp(1)`` pair weights (seeded):
  a random point of ``W≤`` with every port budget that can bind bound.

Every start is a fractional point of ``W≤ = {x ≥ 0 : Σ_u x_uv ≤ d_v}`` in circuits, the kind
of input the rounding gets from the solver (its cost-aware roundings read the Gibbs marginals
at the start). Three of :func:`round_wiring`'s starts (the iterative roundings from the empty
wiring and the class-uniform wiring) do not read ``x_frac`` at all, so they are part of every
arm; the start decides the other three and, through the hard critical path of all six, where
the search begins.

:func:`round_from` is the rounding from a start; :func:`plan_candidates` and :func:`best_of`
add :func:`plan`'s two baseline candidates, so that an arm can be compared with or without
them on both sides; :func:`restarts` spends a wall-clock budget on restarts from perturbed
(``uniform``, ``demand``) or fresh (``random``) starts, for comparisons at equal time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from trainfabric.errors import ConfigError
from trainfabric.ocs.model import OcsModel
from trainfabric.ocs.wiring import baselines, rounding, solver
from trainfabric.ocs.wiring.prior import uniform_prior

START_KINDS = ("entropic", "uniform", "demand", "random")
PERTURB_SIGMA = 0.5  # log-normal spread of a perturbed restart's pair weights
_DEGREE_TOL = 1e-6  # relative slack of a start's degrees over the port budgets (float noise)


def check_start(model: OcsModel, start) -> np.ndarray:
    """``start`` as float [P] circuits; ConfigError naming ``start`` unless it has one finite,
    non-negative entry per pod pair and ``Σ_u x_uv ≤ d_v`` (within 1e-6 relative)."""
    x = np.asarray(start, dtype=float)
    if x.shape != (model.n_pairs,):
        raise ConfigError("start", f"has shape {x.shape}, expected ({model.n_pairs},)")
    if not np.isfinite(x).all() or (x < 0).any():
        raise ConfigError("start", "must be finite and non-negative circuit counts")
    over = model.pod_degrees(x) > model.degrees * (1 + _DEGREE_TOL)
    if over.any():
        v = int(np.flatnonzero(over)[0])
        raise ConfigError("start", f"pod {v} uses more than its {model.degrees[v]} ports")
    return x


def entropic_point(
    cost, model: OcsModel, b1: float, b2: float, max_iter: int, anneal: bool = True
) -> np.ndarray:
    """The fractional wiring [P] of :func:`plan`'s entropic solve (cold start): the same call
    of :func:`.solver.solve` (prior ``q``, annealing, ``max_iter`` per stage, dark ports).
    ``max_iter`` has no default here: pass the one :func:`plan` uses (its effort level's)."""
    res = solver.solve(
        cost,
        model,
        b1,
        b2,
        prior=uniform_prior(model),
        anneal=anneal,
        max_iter=max_iter,
        inequality=True,
    )
    return res.x


def start_point(
    kind: str,
    cost,
    model: OcsModel,
    *,
    b1: float | None = None,
    b2: float | None = None,
    seed: int = 0,
    max_iter: int | None = None,
) -> np.ndarray:
    """The start ``kind`` (one of :data:`START_KINDS`, module doc) as fractional circuits [P].

    ``entropic`` needs the planner's absolute temperatures ``b1``, ``b2`` (1/s,
    :func:`.cost.temperatures`) and its solver iterations per stage ``max_iter``; ``random``
    draws from ``seed``. ConfigError naming ``kind`` for an unknown kind, ``b1``, ``b2`` or
    ``max_iter`` when ``entropic`` lacks it."""
    if kind == "entropic":
        for name, value in (("b1", b1), ("b2", b2), ("max_iter", max_iter)):
            if value is None:
                raise ConfigError(name, "the entropic start needs it")
        return entropic_point(cost, model, b1, b2, max_iter)
    if kind == "uniform":
        return model.total_circuits * uniform_prior(model)
    if kind == "demand":
        up, down = baselines.directed_pair_bytes(cost.dag, model)
        total = up + down
        if not total.any():
            return model.total_circuits * uniform_prior(model)
        return baselines.proportional_fill(model, total / total.max())
    if kind == "random":
        weights = np.random.default_rng(seed).exponential(size=model.n_pairs)
        return baselines.proportional_fill(model, weights)
    raise ConfigError("kind", f"unknown start '{kind}'; known: {', '.join(START_KINDS)}")


def perturb(model: OcsModel, start: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A random start near ``start``: every pair's circuits times ``exp(σ Z)``,
    ``Z ~ N(0, 1)``, ``σ = PERTURB_SIGMA``, then :func:`.baselines.proportional_fill` back onto
    the port budgets (pairs without circuits stay without)."""
    x = check_start(model, start)
    return baselines.proportional_fill(
        model, x * np.exp(PERTURB_SIGMA * rng.standard_normal(x.size))
    )


def round_from(
    cost,
    model: OcsModel,
    start,
    b2: float,
    seed: int = 0,
    max_moves: int = rounding.DEFAULT_MAX_MOVES,
) -> rounding.RoundResult:
    """:func:`.rounding.round_wiring` with ``start`` [P] in the place of the entropic solve's
    fractional wiring, at temperature ``b2`` (1/s), search ``seed`` and work budget
    ``max_moves`` (validated by :func:`check_start`, field ``start``)."""
    x = check_start(model, start)
    return rounding.round_wiring(cost, model, x, b2=b2, seed=seed, max_moves=max_moves)


def plan_candidates(cost, model: OcsModel, seed: int = 0) -> list[np.ndarray]:
    """:func:`plan`'s two baseline candidates, in its order: the best near-uniform wiring
    (``seed`` as in :func:`plan`) and the demand-proportional wiring (int64 [P] each)."""
    return [
        baselines.best_near_uniform(cost, model, seed=seed),
        baselines.demand_proportional(cost.dag, model),
    ]


def best_of(cost, wirings: list[np.ndarray]) -> tuple[np.ndarray, float]:
    """The wiring with the shortest hard critical path (s) and that path; ties keep the
    earlier one (as :func:`plan` does, so a rounding listed first wins them)."""
    if not wirings:
        raise ConfigError("wirings", "needs at least one wiring")
    cps = [cost.hard(x) for x in wirings]
    k = int(np.argmin(cps))
    return np.asarray(wirings[k], dtype=np.int64), float(cps[k])


@dataclass
class Restarts:
    """Best of a series of roundings: wiring ``x``, its hard critical path ``cp_s`` (s), the
    number of rounding runs ``runs``, their summed work units ``work`` and the wall time
    ``wall_s`` spent (s, start construction included)."""

    x: np.ndarray
    cp_s: float
    runs: int
    work: int
    wall_s: float


def restarts(
    cost,
    model: OcsModel,
    kind: str,
    budget_s: float,
    b2: float,
    seed: int = 0,
    max_moves: int = rounding.DEFAULT_MAX_MOVES,
) -> Restarts:
    """Roundings from start ``kind`` (``uniform``, ``demand`` or ``random``) until ``budget_s``
    seconds of wall time are spent (at least one run; the last run may end past the budget).

    Run ``k = 0, 1, ...`` uses search seed ``seed + k``; its start is ``random``'s draw with
    seed ``seed + k``, or, for ``uniform`` and ``demand``, the start itself at ``k = 0`` and
    :func:`perturb` of it (rng seeded ``(seed, k)``) after. The best result is kept (ties: the
    earliest)."""
    if kind not in ("uniform", "demand", "random"):
        raise ConfigError("kind", f"restarts need uniform, demand or random, got '{kind}'")
    if not budget_s >= 0:
        raise ConfigError("budget_s", "must be >= 0")
    t0 = time.perf_counter()
    base = None if kind == "random" else start_point(kind, cost, model)
    best_x, best_cp, runs, work = None, np.inf, 0, 0
    while runs == 0 or time.perf_counter() - t0 < budget_s:
        if base is None:
            start = start_point("random", cost, model, seed=seed + runs)
        elif runs == 0:
            start = base
        else:
            start = perturb(model, base, np.random.default_rng((seed, runs)))
        r = round_from(cost, model, start, b2, seed=seed + runs, max_moves=max_moves)
        if r.hard_cp_s < best_cp:
            best_x, best_cp = r.x, r.hard_cp_s
        runs += 1
        work += r.work
    return Restarts(best_x, float(best_cp), runs, work, time.perf_counter() - t0)
