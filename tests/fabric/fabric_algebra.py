"""Independent reference algebra shared by the fabric tests (plain loops, no simulator code)."""

import numpy as np

from trainfabric.fabric.routing import Groups


def dense(sg: np.ndarray, sw: np.ndarray, groups: Groups, n_links: int) -> np.ndarray:
    """``A[f, l]``: the share of flow ``f``'s rate that crosses link ``l`` (plain loops)."""
    A = np.zeros((sg.shape[0], n_links))
    for f in range(sg.shape[0]):
        for g, w in zip(sg[f].tolist(), sw[f].tolist(), strict=True):
            if g < 0 or w <= 0:
                continue
            if g < groups.offset:
                A[f, g] += w
                continue
            i = g - groups.offset
            for e in range(groups.ptr[i], groups.ptr[i + 1]):
                A[f, groups.link[e]] += w * groups.coef[e]
    return A
