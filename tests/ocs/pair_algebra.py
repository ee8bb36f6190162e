"""Test helpers: the pair-pod incidence of the degree slice and the additive-potential misfit."""

import numpy as np

from trainfabric.ocs.model import OcsModel


def incidence(model: OcsModel) -> np.ndarray:
    """Pair-pod incidence ``A`` [P, n]: ``(A λ)_uv = λ_u + λ_v``."""
    iu, iv = model.pairs
    a = np.zeros((model.n_pairs, model.n))
    a[np.arange(model.n_pairs), iu] = 1.0
    a[np.arange(model.n_pairs), iv] = 1.0
    return a


def additive_misfit(model: OcsModel, z: np.ndarray) -> float:
    """``min_c ||z − (c_u + c_v)||_∞`` by least squares (0 iff ``z`` is in the degree span)."""
    a = incidence(model)
    c, *_ = np.linalg.lstsq(a, z, rcond=None)
    return float(np.abs(a @ c - z).max())
