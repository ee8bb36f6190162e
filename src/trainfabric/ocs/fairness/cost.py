"""The multi-job cost ``Φ_p`` of the jobs' smoothed critical paths on one wiring.

The maths: :mod:`trainfabric.ocs.fairness`.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import logsumexp

from trainfabric.errors import ConfigError
from trainfabric.ocs.fairness.jobs import FairJob, shared_dags, side_by_side
from trainfabric.ocs.fairness.means import check_p, power_mean, power_mean_grad, smooth_max
from trainfabric.ocs.model import OcsModel
from trainfabric.ocs.wiring.cost import PathCost
from trainfabric.ocs.wiring.prior import uniform_prior


class FairnessCost:
    """``Φ_p`` of the jobs' smoothed critical paths on one wiring (module doc).

    Implements what :func:`~trainfabric.ocs.wiring.solver.solve`,
    :func:`trainfabric.ocs.wiring.cost.temperatures` and the
    baselines need: ``value_and_grad(x, b2)``, ``hard(x)`` (``Φ_p`` of the per-job hard
    critical paths; ``p = ∞``: their max), ``log_paths()`` (``log Σ_j |Π_j|``, the paths of all
    jobs side by side), ``dag`` (all jobs side by side, unshared bytes: the demand the
    baselines see). ``costs`` are the per-job PathCosts on the shared DAGs, ``scale`` the
    ``c_j``. Validated: ``p`` (:func:`check_p`), ``tau_rel > 0``, at least one job, every job on
    the model's pods.
    """

    def __init__(
        self,
        jobs: list[FairJob],
        model: OcsModel,
        p: float,
        normalise: bool = False,
        tau_rel: float = 1.0,
    ):
        if not jobs:
            raise ConfigError("jobs", "give at least one job")
        if not (tau_rel > 0 and math.isfinite(tau_rel)):
            raise ConfigError("tau_rel", f"must be finite and > 0, got {tau_rel}")
        self.jobs, self.model, self.p = jobs, model, check_p(p)
        self.weights = np.array([j.weight for j in jobs], dtype=float)
        self.dag = side_by_side([j.dag for j in jobs])
        self.costs = [PathCost(d, model) for d in shared_dags([j.dag for j in jobs], model)]
        mesh = model.total_circuits * uniform_prior(model)
        self.scale = (
            np.array([1.0 / c.hard(mesh) for c in self.costs]) if normalise else np.ones(len(jobs))
        )
        self.tau_rel = float(tau_rel)
        self.used = np.zeros((len(jobs), model.n_pairs), dtype=bool)
        for i, c in enumerate(self.costs):
            self.used[i, c.comm_pair] = True

    def with_p(self, p: float) -> FairnessCost:
        """The same jobs and costs under another power ``p`` (nothing rebuilt)."""
        other = object.__new__(FairnessCost)
        other.__dict__.update(self.__dict__)
        other.p = check_p(p)
        return other

    def job_values(self, x, b2: float) -> tuple[np.ndarray, np.ndarray]:
        """``(v [J], ∂v/∂x [J, P])``: per-job ``c_j U_j`` (smoothed at ``b2``) and gradients."""
        vals, grads = zip(*(c.value_and_grad(x, b2) for c in self.costs), strict=True)
        return self.scale * np.array(vals), self.scale[:, None] * np.array(grads)

    def combine(self, v: np.ndarray, b2: float) -> tuple[float, np.ndarray]:
        """``(Φ, ∂Φ/∂v)`` of smoothed per-job values ``v``: the power mean, or at ``p = ∞``
        the smoothed max at ``τ = tau_rel·b2 / mean(c)``."""
        if math.isinf(self.p):
            return smooth_max(v, self.tau_rel * b2 / float(self.scale.mean()))
        return power_mean_grad(v, self.weights, self.p)

    def value_and_grad(self, x, b2: float) -> tuple[float, np.ndarray]:
        """``Φ(x)`` (objective units: s, or slowdown when normalised) and ``∇_x Φ`` [P]."""
        v, g = self.job_values(x, b2)
        phi, dphi = self.combine(v, b2)
        return phi, dphi @ g

    def smoothed(self, x, b2: float) -> float:
        return self.value_and_grad(x, b2)[0]

    def hard_jobs(self, x) -> np.ndarray:
        """Per-job hard critical paths (s) [J]."""
        return np.array([c.hard(x) for c in self.costs])

    def hard(self, x) -> float:
        """``Φ_p`` of the per-job hard values ``c_j·CP_j(x)`` (``p = ∞``: the max)."""
        return power_mean(self.scale * self.hard_jobs(x), self.weights, self.p)

    def log_paths(self) -> float:
        return float(logsumexp([c.log_paths() for c in self.costs]))
