"""Weighted power means, their gradients, the smoothed max and Jain's index.

The maths: :mod:`trainfabric.ocs.fairness`.
"""

from __future__ import annotations

import math

import numpy as np

from trainfabric.errors import ConfigError

# Largest finite p. Φ_p lies within a factor J^(-1/p) of the max (J jobs): 1e-7 relative here
# for a thousand jobs, so a larger p is p = inf to within solver tolerance; and the α-fair check
# (alpha = p + 1) grows ill-conditioned: its two optima agree to 1e-15 up to p = 1e10 but part
# by 4e-8 at 1e12 and 2e-5 at 1e15 (objective, measured on 4 pods), a "disagreement" that is
# rounding.
MAX_P = 1e8


def check_p(p) -> float:
    """The power ``p`` as a float in ``[1, MAX_P]`` or ``inf``; ConfigError naming ``p``
    otherwise."""
    try:
        p = float(p)
    except (TypeError, ValueError):
        raise ConfigError("p", f"must be a number >= 1 or inf, got {p!r}") from None
    if not p >= 1:  # also rejects nan
        raise ConfigError("p", f"must be >= 1 or inf (alpha = p + 1 >= 2), got {p}")
    if MAX_P < p < math.inf:
        raise ConfigError("p", f"must be at most {MAX_P:.0e} or inf (the max), got {p:g}")
    return p


def power_mean(v, weights, p: float) -> float:
    """``Φ_p(v) = (Σ ω̄_j v_j^p)^(1/p)`` for ``v > 0``; ``p = ∞``: ``max_j v_j`` (hard)."""
    return power_mean_grad(v, weights, p)[0]


def power_mean_grad(v, weights, p: float) -> tuple[float, np.ndarray]:
    """``(Φ_p(v), ∂Φ_p/∂v = ω̄ (v/Φ)^(p−1))``, computed as ``m (Σ ω̄ (v/m)^p)^(1/p)``,
    ``m = max v``, so large ``p`` neither overflows nor underflows. ``p = ∞``: the hard max
    and the indicator of the (first) largest entry."""
    v = np.asarray(v, dtype=float)
    wbar = np.asarray(weights, dtype=float) / float(np.sum(weights))
    m = float(v.max())
    if math.isinf(p):
        g = np.zeros(v.size)
        g[int(np.argmax(v))] = 1.0
        return m, g
    r = v / m
    phi = m * float(wbar @ r**p) ** (1.0 / p)
    return phi, wbar * (v / phi) ** (p - 1.0)


def smooth_max(v, tau: float) -> tuple[float, np.ndarray]:
    """``((1/τ) log Σ exp(τ v), softmax(τ v))``: within ``log J / τ`` above ``max v``."""
    z = tau * np.asarray(v, dtype=float)
    top = float(z.max())
    e = np.exp(z - top)
    total = float(e.sum())
    return (top + math.log(total)) / tau, e / total


def jain(values) -> float:
    """Jain's index ``(Σ y)² / (J Σ y²)`` of the throughputs ``y_j = 1 / v_j`` (1 = equal)."""
    y = 1.0 / np.asarray(values, dtype=float)
    return float(y.sum() ** 2 / (y.size * (y * y).sum()))


def p_label(p: float) -> float | str:
    """``p`` for JSON: a number, or ``"inf"``."""
    return "inf" if math.isinf(p) else p
