"""The symmetric (Fat-Tree) prior ``q`` and the KL divergence on the degree slice
(docs/ocs.md §1.3).

A Fat-Tree gives every pod pair the same share independently of traffic; its direct-connect
analogue is the uniform mesh [A5]: ``q_uv ∝ d_u d_v`` (gravity form), KL-projected onto
``W = {w ≥ 0 : Σ_u w_uv = r_v}`` so that ``q ∈ W`` exactly (the projection only rescales by
pod factors, ``q_uv = d_u d_v a_u a_v``). With equal degrees ``q_e = 1/|P|`` for every pair.
Departure from symmetry is ``KL(w||q)``; it is 0 iff ``w = q``.
"""

from __future__ import annotations

import numpy as np

from trainfabric.errors import ConfigError
from trainfabric.ocs.model import OcsModel
from trainfabric.ocs.wiring.projection import project


def uniform_prior(model: OcsModel) -> np.ndarray:
    """The uniform mesh ``q`` [P] in ``W`` (sums to 1): gravity ``d_u d_v`` projected onto
    ``W``; exactly ``1/|P|`` per pair when all degrees are equal. A pod with more than half
    of all ports leaves the slice ``Σ_u w_uv = r_v`` empty (its surplus must stay dark): then
    the projection is onto ``{Σ_u w_uv ≤ r_v}`` and ``q`` sums to less than 1."""
    d = model.degrees
    if (d == d[0]).all():
        return np.full(model.n_pairs, 1.0 / model.n_pairs)
    iu, iv = model.pairs
    return project(d[iu] * d[iv].astype(float), model, inequality=2 * d.max() > d.sum()).w


def kl(w, q) -> float:
    """``KL(w||q) = Σ_e w_e log(w_e / q_e) − w_e + q_e`` (dimensionless, ``0 log 0 = 0``).

    The generalised form equals the plain KL divergence when both vectors sum to 1 (points of
    ``W``) and stays ``≥ 0`` under rounding; ``inf`` if ``w_e > 0 = q_e`` somewhere.
    """
    w = np.asarray(w, dtype=float)
    q = np.asarray(q, dtype=float)
    if w.shape != q.shape:
        raise ConfigError("w", f"has shape {w.shape}, the reference {q.shape}")
    if (w < 0).any() or (q < 0).any():
        raise ConfigError("w", "KL needs non-negative vectors")
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(w > 0, w * np.log(w / q) - w + q, q)
    return float(np.where((w > 0) & (q == 0), np.inf, terms).sum())
