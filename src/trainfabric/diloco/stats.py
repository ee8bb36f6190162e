"""Paired statistics for policy comparisons over seeds (two-sided throughout).

For paired differences ``d_i`` (policy minus control on seed ``i``, zeros dropped where a
test says so):

* :func:`sign_test` — exact binomial test of ``P(d > 0) = 1/2`` on the non-zero signs;
* :func:`sign_flip_test` — the paired permutation test the seed's artifact used: under the
  null every ``d_i`` is as likely to be ``−d_i``; the p-value is the share of the ``2^n``
  sign assignments with ``|Σ ± d_i| >= |Σ d_i|`` (exact up to ``exact_max`` pairs, else a
  seeded Monte Carlo with ``draws`` assignments, counting the observed one);
* :func:`wilcoxon` — the signed-rank test (:func:`scipy.stats.wilcoxon`);
* :func:`bootstrap_ci` — percentile bootstrap CI of the mean difference (seeded);
* :func:`holm` — Holm's step-down adjustment of a family of p-values;
* :func:`seeds_for_power` — pairs needed to detect a mean difference ``delta`` with sd
  ``sigma`` at level ``alpha`` and power ``power`` (normal approximation to the paired test,
  ``n = ((z_{1−α/2} + z_{power}) σ / δ)²``, Wilcoxon's 3/π efficiency added).

With ``n`` pairs no exact test can go below ``2 / 2^n`` (0.002 at 10 seeds), and a Holm
family of ``m`` comparisons needs about ``α / m``: so simulations use power-chosen seed
counts, 10 seeds only to mirror the seed's setting.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from trainfabric.errors import ConfigError


def _diffs(d) -> np.ndarray:
    d = np.asarray(d, float)
    if d.ndim != 1 or d.size == 0 or not np.all(np.isfinite(d)):
        raise ConfigError("differences", "need a non-empty 1-D array of finite paired differences")
    return d


def sign_test(d) -> float:
    """Two-sided exact sign test (zeros dropped): :func:`scipy.stats.binomtest` of the number
    of positive differences among the ``n`` non-zero ones at ``p = 1/2``; 1.0 when every
    difference is zero."""
    d = _diffs(d)
    nz = d[d != 0]
    if nz.size == 0:
        return 1.0
    return float(stats.binomtest(int((nz > 0).sum()), int(nz.size), 0.5).pvalue)


def sign_flip_test(d, exact_max: int = 20, draws: int = 100_000, seed: int = 0) -> float:
    """Two-sided paired sign-flip permutation test of the mean (module doc).

    The exact branch counts the ``2^n`` sign assignments in blocks: the signed sums of the
    first ``m = min(n, 14)`` differences are tabulated once (``2^m`` values) and each of the
    ``2^(n − m)`` assignments of the rest shifts that table, so memory stays at ``2^14``
    floats whatever ``n`` (the full ``2^n x n`` sign matrix would be 0.5 GB at ``n = 20``).
    """
    d = _diffs(d)
    if exact_max < 0 or draws < 1:
        raise ConfigError("sign_flip_test", "need exact_max >= 0 and draws >= 1")
    observed = abs(d.sum())
    tol = 1e-12 * max(1.0, np.abs(d).sum())
    if d.size <= exact_max:
        return _exact_sign_flip(d, observed - tol)
    rng = np.random.default_rng(seed)
    signs = rng.choice(np.array([-1.0, 1.0]), size=(draws, d.size))
    hits = int(np.sum(np.abs(signs @ d) >= observed - tol))
    return (hits + 1) / (draws + 1)


_BLOCK_BITS = 14


def _signed_sums(d: np.ndarray) -> np.ndarray:
    """``Σ_i s_i d_i`` for all ``2^len(d)`` sign vectors (row bit ``i`` set: ``s_i = −1``)."""
    signs = 1 - 2 * ((np.arange(2**d.size)[:, None] >> np.arange(d.size)) & 1)
    return signs @ d


def _exact_sign_flip(d: np.ndarray, threshold: float) -> float:
    """Share of the ``2^n`` sign assignments with ``|Σ ± d_i| >= threshold``, in blocks."""
    m = min(d.size, _BLOCK_BITS)
    low = _signed_sums(d[:m])
    rest = d[m:]
    hits = 0
    for high in _signed_sums(rest) if rest.size else np.zeros(1):
        hits += int(np.count_nonzero(np.abs(low + high) >= threshold))
    return hits / 2.0**d.size


def wilcoxon(d) -> float:
    """Two-sided Wilcoxon signed-rank p-value (scipy; zeros dropped, exact when small)."""
    d = _diffs(d)
    if np.all(d == 0):
        return 1.0
    return float(stats.wilcoxon(d, zero_method="wilcox", alternative="two-sided").pvalue)


def bootstrap_ci(d, level: float = 0.95, draws: int = 10_000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean of ``d`` (resampling pairs, seeded)."""
    d = _diffs(d)
    rng = np.random.default_rng(seed)
    means = d[rng.integers(d.size, size=(draws, d.size))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def holm(p) -> np.ndarray:
    """Holm-adjusted p-values (same order as ``p``)."""
    p = np.asarray(p, float)
    order = np.argsort(p, kind="stable")
    m = p.size
    adj = np.maximum.accumulate((m - np.arange(m)) * p[order])
    out = np.empty(m)
    out[order] = np.minimum(adj, 1.0)
    return out


def effect_size(d) -> float:
    """Standardised paired effect ``d_z = mean / sd`` (0 when all differences are equal)."""
    d = _diffs(d)
    sd = d.std(ddof=1) if d.size > 1 else 0.0
    return float(d.mean() / sd) if sd > 0 else 0.0


def seeds_for_power(delta: float, sigma: float, alpha: float = 0.05, power: float = 0.8) -> int:
    """Pairs needed for a two-sided Wilcoxon test (module doc)."""
    if not (delta > 0 and sigma > 0 and 0 < alpha < 1 and 0 < power < 1):
        raise ConfigError("power", "need delta > 0, sigma > 0, 0 < alpha < 1, 0 < power < 1")
    z = stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)
    return math.ceil((z * sigma / delta) ** 2 / (3 / math.pi))
