"""Expert-load skew for MoE all-to-all traffic.

Per-expert routing popularity ``p_e`` is drawn as the quantiles of a lognormal law,
``p_e ∝ exp(σ · Φ^{-1}((e + 1/2) / E))``, randomly assigned to experts by the seed; σ is
chosen by bisection so that the Gini coefficient of ``p`` equals the requested value exactly
(measured per-expert Gini is 0.10-0.38 on real text, DODOCO; default 0.2). Gini 0 is uniform.

Token counts are expectations (no multinomial noise): shard ``i`` with ``T`` tokens sends
``T · k · P_j`` token-copies to shard ``j``, where ``P_j`` sums the popularity of the experts
that shard ``j`` hosts (experts ``j·E/ep .. (j+1)·E/ep - 1``).
"""

from __future__ import annotations

from statistics import NormalDist

import numpy as np

from trainfabric.errors import ConfigError


def gini(x: np.ndarray) -> float:
    """Gini coefficient ``Σ_i Σ_j |x_i - x_j| / (2 n Σ x)`` of a non-negative vector."""
    x = np.sort(np.asarray(x, dtype=float))
    n = x.size
    if n == 0 or x.sum() == 0:
        return 0.0
    i = np.arange(1, n + 1)
    return float(np.sum((2 * i - n - 1) * x) / (n * x.sum()))


def _lognormal_quantiles(sigma: float, n: int) -> np.ndarray:
    z = _normal_quantiles(n)
    w = np.exp(sigma * (z - z.max()))
    return w / w.sum()


def _normal_quantiles(n: int) -> np.ndarray:
    """Standard normal quantiles at the midpoints ``(i + 0.5) / n``, ``i = 0 .. n-1``."""
    inv_cdf = NormalDist().inv_cdf
    return np.array([inv_cdf((i + 0.5) / n) for i in range(n)])


def _bisect(f, hi: float, tol: float = 1e-14) -> float:
    """The root of the increasing ``f`` on ``[0, hi]`` (``f(0) < 0 <= f(hi)``), to ``tol``.

    Plain bisection: Gini is monotone in sigma, and 60-odd halvings of a bracket of a few
    units reach ``tol``; it keeps ``scipy.optimize`` out of the command line's start-up.
    """
    lo = 0.0
    while hi - lo > tol * max(1.0, hi):
        mid = 0.5 * (lo + hi)
        if f(mid) < 0:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def expert_popularity(experts: int, target_gini: float, rng: np.random.Generator) -> np.ndarray:
    """Routing probabilities of ``experts`` experts with Gini exactly ``target_gini``.

    Returns a vector summing to 1. The largest reachable Gini with ``n`` experts is
    ``(n - 1) / n``; asking for more is a ConfigError.
    """
    if experts < 1:
        raise ConfigError("moe_experts", "must be >= 1")
    if not 0 <= target_gini < 1:
        raise ConfigError("moe_skew_gini", "must be in [0, 1)")
    if target_gini == 0 or experts == 1:
        p = np.full(experts, 1.0 / experts)
    else:
        g_max = (experts - 1) / experts
        if target_gini >= g_max:
            raise ConfigError("moe_skew_gini", f"must be < {g_max:.3f} with {experts} experts")
        sigma_hi = 1.0
        while gini(_lognormal_quantiles(sigma_hi, experts)) < target_gini:
            sigma_hi *= 2
        sigma = _bisect(lambda s: gini(_lognormal_quantiles(s, experts)) - target_gini, sigma_hi)
        p = _lognormal_quantiles(sigma, experts)
    return rng.permutation(p)


def shard_share(popularity: np.ndarray, ep: int) -> np.ndarray:
    """Fraction of routed tokens landing on each of the ``ep`` expert-parallel shards."""
    if popularity.size % ep:
        raise ConfigError("parallelism.ep", "must divide moe_experts")
    return popularity.reshape(ep, -1).sum(axis=1)
