"""Count streams for the change detectors, and the reduced statistics for many pods (§1.11).

Traffic of ``n`` pods is an ``n x n`` count matrix per slot (flows, or bytes in chunks, from
pod ``i`` to pod ``j``); the diagonal (intra-pod traffic, which never crosses an OCS) is
ignored. Categories at full resolution are the ``n(n-1)`` ordered pairs, whose
``(K-1) log N`` false-alarm penalty blinds a detector at many pods, hence the reductions of
:func:`reduce_counts` (all linear, so they map probability matrices the same way):

- ``"pairs"``: the ``n(n-1)`` off-diagonal entries, row-major (``K = n(n-1)``);
- ``"marginals"``: per-pod totals, by source (``axis="src"``, row sums) or destination
  (``"dst"``) (``K = n``);
- ``"topr"``: the ``r`` pairs given as ``pairs`` plus one "other" category (``K = r + 1``). The
  pairs must come from a *reference* window (:func:`top_pairs`) and stay frozen: choosing them
  from the data under test makes the categories data-dependent and voids the false-alarm bound;
- ``"gradient"``: two categories, the pairs where the circuit gradient ``dF/dx`` (given, an
  ``n x n`` array) is below ``level`` (default 0: more circuits lower the cost there; or, with
  ``quantile=q``, below the q-quantile of the gradient over the pairs) and the rest. It sees
  exactly the traffic shifts that move mass between where circuits help and where they do not
  (the direction that moves the objective), and nothing else.

Summing categories of a multinomial gives a multinomial, so drawing the reduced counts directly
from the reduced probabilities has the same law as drawing pairs and reducing them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq
from scipy.special import rel_entr

from trainfabric.errors import ConfigError

MODES = ("pairs", "marginals", "topr", "gradient")
CHANGES = ("hot-pod", "heavy-pairs", "random-pairs")


def offdiag_mask(n: int) -> np.ndarray:
    """``[n, n]`` boolean mask of the ordered pairs ``i != j``."""
    return ~np.eye(n, dtype=bool)


def reduce_counts(matrix, mode: str, **kw) -> np.ndarray:
    """Map ``[..., n, n]`` counts (or probabilities) to ``[..., K]`` category totals.

    ``mode`` and its keywords: ``"pairs"``; ``"marginals"`` (``axis="src"|"dst"``); ``"topr"``
    (``pairs``: ``[r, 2]`` integer (i, j) with ``i != j``, distinct); ``"gradient"``
    (``gradient``: ``[n, n]`` finite; ``level``: float, default 0, or ``quantile`` in (0, 1)).
    Validated: a square trailing shape, finite non-negative entries, the keywords above.
    """
    m = np.asarray(matrix, dtype=float)
    if m.ndim < 2 or m.shape[-1] != m.shape[-2] or m.shape[-1] < 2:
        raise ConfigError("matrix", f"expected [..., n, n] with n >= 2, got shape {m.shape}")
    if not (np.isfinite(m).all() and (m >= 0).all()):
        raise ConfigError("matrix", "entries must be finite and non-negative")
    n = m.shape[-1]
    off = m * offdiag_mask(n)
    if mode == "pairs":
        return m[..., offdiag_mask(n)]
    if mode == "marginals":
        axis = kw.get("axis", "src")
        if axis not in ("src", "dst"):
            raise ConfigError("axis", f"must be 'src' or 'dst', got {axis!r}")
        return off.sum(-1) if axis == "src" else off.sum(-2)
    if mode == "topr":
        i, j = _pairs(kw.get("pairs"), n)
        top = m[..., i, j]
        return np.concatenate([top, off.sum((-2, -1))[..., None] - top.sum(-1, keepdims=True)], -1)
    if mode == "gradient":
        low = _gradient_mask(kw.get("gradient"), kw.get("level", 0.0), kw.get("quantile"), n)
        below = (off * low).sum((-2, -1))
        return np.stack([below, off.sum((-2, -1)) - below], -1)
    raise ConfigError("mode", f"unknown statistic {mode!r}; known: {', '.join(MODES)}")


def _pairs(pairs, n: int) -> tuple[np.ndarray, np.ndarray]:
    p = np.asarray(pairs if pairs is not None else [], dtype=np.int64)
    if p.ndim != 2 or p.shape[1] != 2 or p.shape[0] < 1:
        raise ConfigError("pairs", "topr needs pairs: an [r, 2] array of (src, dst), r >= 1")
    if (p < 0).any() or (p >= n).any() or (p[:, 0] == p[:, 1]).any():
        raise ConfigError("pairs", f"pairs must be (i, j) with i != j in [0, {n})")
    if len({(a, b) for a, b in p.tolist()}) != len(p):
        raise ConfigError("pairs", "pairs must be distinct")
    if len(p) >= n * (n - 1):
        raise ConfigError("pairs", "r must leave at least one pair for 'other'")
    return p[:, 0], p[:, 1]


def _gradient_mask(gradient, level, quantile, n: int) -> np.ndarray:
    if gradient is None:
        raise ConfigError("gradient", "the gradient statistic needs the [n, n] circuit gradient")
    g = np.asarray(gradient, dtype=float)
    if g.shape != (n, n) or not np.isfinite(g).all():
        raise ConfigError("gradient", f"expected a finite [{n}, {n}] array, got shape {g.shape}")
    if quantile is not None:
        if not 0 < quantile < 1:
            raise ConfigError("quantile", f"must be in (0, 1), got {quantile!r}")
        level = np.quantile(g[offdiag_mask(n)], quantile)
    low = (g < float(level)) & offdiag_mask(n)
    if not low.any() or low.sum() == n * (n - 1):
        raise ConfigError("gradient", "the gradient puts every pair on one side of the level")
    return low


def top_pairs(reference, r: int) -> np.ndarray:
    """The ``r`` heaviest off-diagonal pairs of a *reference* matrix ``[n, n]`` (ties by index),
    as ``[r, 2]`` (src, dst): freeze them before the data under test arrives."""
    m = np.asarray(reference, dtype=float)
    n = m.shape[-1]
    if not (isinstance(r, int) and 1 <= r < n * (n - 1)):
        raise ConfigError("r", f"must be an integer in [1, {n * (n - 1) - 1}], got {r!r}")
    w = np.where(offdiag_mask(n), m, -np.inf).ravel()
    order = np.argsort(-w, kind="stable")[:r]
    return np.stack(np.divmod(order, n), axis=1)


def slot_batches(
    p0, p1, change_at: int, n_per_slot: float, streams: int, rng, poisson: bool = True
) -> Iterator[np.ndarray]:
    """Endless ``[streams, K]`` counts per slot: slots ``1..change_at`` from ``p0``, later ones
    from ``p1``; each stream's slot total is ``Poisson(n_per_slot)`` (``poisson=True``) or
    exactly ``round(n_per_slot)``."""
    p0, p1 = _probability(p0, "p0"), _probability(p1, "p1")
    if p0.shape != p1.shape:
        raise ConfigError("p1", f"p0 has {p0.size} categories, p1 {p1.size}")
    if not n_per_slot > 0:
        raise ConfigError("n_per_slot", f"must be > 0, got {n_per_slot!r}")
    t = 0
    while True:
        size = rng.poisson(n_per_slot, streams) if poisson else np.full(streams, round(n_per_slot))
        yield rng.multinomial(size, p0 if t < change_at else p1).astype(float)
        t += 1


def multinomial_stream(
    p0, p1, change_at: int, n_per_slot: float, slots: int, rng, poisson: bool = True
) -> np.ndarray:
    """``[slots, K]`` counts of one stream: ``change_at`` slots from ``p0``, then ``p1``; slot
    totals ``Poisson(n_per_slot)`` by default, or fixed (``poisson=False``)."""
    batches = slot_batches(p0, p1, change_at, n_per_slot, 1, rng, poisson)
    return np.concatenate([next(batches) for _ in range(slots)])


def _probability(p, field: str) -> np.ndarray:
    p = np.asarray(p, dtype=float).ravel()
    if p.size < 2 or not (np.isfinite(p).all() and (p >= 0).all()) or p.sum() <= 0:
        raise ConfigError(field, "must be >= 2 finite non-negative weights, not all zero")
    return p / p.sum()


def planted_change(p0, mask, kl: float) -> np.ndarray:
    """``p1 ∝ p0 (1 + e mask)`` with ``e > 0`` solved (Brent) so that ``KL(p1 || p0) = kl``.

    ``mask``: boolean array of p0's shape (the categories whose share grows). ``kl`` must be
    below ``-log p0(mask)``, the limit as ``e -> inf``.
    """
    p0 = np.asarray(p0, dtype=float)
    p0 = p0 / p0.sum()
    mask = np.asarray(mask, dtype=bool)
    limit = -np.log(p0[mask].sum())
    if not 0 < kl < limit:
        raise ConfigError("kl", f"must be in (0, {limit:.4g}) for this change, got {kl!r}")

    def tilt(e: float) -> np.ndarray:
        p = p0 * (1 + e * mask)
        return p / p.sum()

    hi = 1.0
    while rel_entr(tilt(hi), p0).sum() < kl:
        hi *= 2
    e = brentq(lambda e: rel_entr(tilt(e), p0).sum() - kl, 0.0, hi, xtol=1e-14, rtol=1e-14)
    return tilt(e)


@dataclass(frozen=True)
class SyntheticChange:
    """Pod-level traffic distributions before (``p0``) and after (``p1``) a planted change,
    ``[n, n]`` with a zero diagonal, plus what the reduced statistics need, taken from a
    *reference* window drawn from ``p0`` before the data under test: its counts
    (``reference``), the frozen top-``r`` pairs, and the gradient proxy
    ``gradient = mean - reference`` over pairs (negative where the reference demand is above
    the mean: where the demand-proportional heuristic says more circuits help; pass the
    planner's own ``dF/dx`` instead where one is at hand)."""

    p0: np.ndarray
    p1: np.ndarray
    reference: np.ndarray
    gradient: np.ndarray
    top: np.ndarray

    def reduction(self, mode: str) -> dict:
        """The keywords of :func:`reduce_counts` for ``mode``."""
        return {"topr": {"pairs": self.top}, "gradient": {"gradient": self.gradient}}.get(mode, {})

    def reduced(self, mode: str) -> tuple[np.ndarray, np.ndarray]:
        """``(p0, p1)`` over the categories of ``mode``."""
        kw = self.reduction(mode)
        return reduce_counts(self.p0, mode, **kw), reduce_counts(self.p1, mode, **kw)


def synthetic_change(
    pods: int,
    kl: float,
    rng,
    change: str = "hot-pod",
    top_r: int = 8,
    reference_slots: int = 50,
    n_per_slot: float = 1000.0,
) -> SyntheticChange:
    """A skewed pair distribution (``Gamma(0.5)`` pair weights) and a planted change of
    ``KL(p1 || p0) = kl`` over the pairs (:func:`planted_change`):

    - ``"hot-pod"``: the outgoing traffic of the pod of median outgoing share grows (its pairs
      keep their proportions, so the per-source marginals carry the whole KL);
    - ``"heavy-pairs"``: the pairs whose reference demand is above the mean (where the
      gradient proxy is negative) grow: the skew increases, as when an MoE phase concentrates;
    - ``"random-pairs"``: a random 5% of the pairs (at least one) grow.
    """
    if change not in CHANGES:
        raise ConfigError("change", f"unknown change {change!r}; known: {', '.join(CHANGES)}")
    if not (isinstance(pods, int) and pods >= 3):
        raise ConfigError("pods", f"need at least 3 pods, got {pods!r}")
    off = offdiag_mask(pods)
    p0 = rng.gamma(0.5, size=(pods, pods)) * off
    p0 /= p0.sum()
    pairs = p0[off]
    counts = multinomial_stream(pairs, pairs, 0, n_per_slot, reference_slots, rng).sum(0)
    reference = pair_matrix(counts, pods)
    gradient = (counts.mean() - reference) * off
    if change == "hot-pod":
        hot = np.argsort(p0.sum(1))[pods // 2]
        mask = np.zeros_like(off)
        mask[hot] = off[hot]
    elif change == "heavy-pairs":
        mask = (gradient < 0) & off
    else:
        k = max(1, round(0.05 * pods * (pods - 1)))
        flat = np.zeros(pods * (pods - 1), bool)
        flat[rng.choice(flat.size, k, replace=False)] = True
        mask = pair_matrix(flat, pods)
    p1 = planted_change(p0, mask, kl)
    return SyntheticChange(p0, p1, reference, gradient, top_pairs(reference, top_r))


def pair_matrix(values: np.ndarray, n: int) -> np.ndarray:
    """Inverse of ``reduce_counts(., "pairs")``: ``[n(n-1)]`` row-major -> ``[n, n]``."""
    m = np.zeros((n, n), dtype=np.asarray(values).dtype)
    m[offdiag_mask(n)] = values
    return m
