"""Matrix decompositions into weighted matchings for the circuit schedulers.

All decompositions work on **integer** matrices (demand in quanta, see :func:`quantise`), so
they end exactly: every step removes at least one quantum, and the perfect matchings they
need exist by Birkhoff–König (an integer matrix with equal row and column sums ``M > 0`` has a
perfect matching on its support). Float doubly-stochastic inputs are what breaks popular BvN
packages (a residual of 1e-17 has no perfect matching); here there are none.

Each function returns ``[(perm, weight), ...]``: ``perm[u] = v`` or ``-1`` (a matching) and the
weight in quanta (the configuration's duration is ``weight · quantum / B``).

* :func:`stuff` — Solstice's stuffing to a bistochastic matrix (non-zero entries first).
* :func:`bvn` — textbook Birkhoff–von Neumann: any perfect matching on the support, weight its
  smallest entry (Kuhn's augmenting paths, repaired incrementally, compiled with numba).
* :func:`solstice` — Solstice (Liu et al., CoNEXT 2015): threshold ``r`` = the largest power
  of two ≤ the largest entry; while a perfect matching on entries ≥ ``r`` exists take it with
  weight its smallest entry, else halve ``r``.
* :func:`eclipse` — Eclipse (Bojja Venkatakrishnan et al., SIGMETRICS 2016): greedily the
  matching ``M`` and duration ``α`` maximising served quanta ``Σ_{(u,v)∈M} min(R_uv, α)``
  per ``(δ + α)``, on the unstuffed residual until it is zero (Hungarian method,
  ``scipy.optimize.linear_sum_assignment``).
* :func:`colouring_residual` — the colouring with each class cut at a quantile of its entries
  and the excess coloured again.
* :func:`min_colouring` — König edge colouring of the support into ``Δ`` matchings (``Δ`` = the
  largest number of non-zero entries of a row or column), heaviest entries matched together.
"""

from __future__ import annotations

import numpy as np
from numba import njit

# Largest entry of a quantised matrix: sums of n ≤ 2^16 entries stay exact in float64.
QUANTA = 2**24
# Eclipse evaluates at most this many candidate durations α per step (quantiles of the
# residual's entries); the paper searches all entry values, which costs n² assignments.
ECLIPSE_CANDIDATES = 8
# Eclipse's greedy runs at most this many steps per unit of the largest line degree Δ.
ECLIPSE_STEPS_PER_DEGREE = 8


def quantise(demand: np.ndarray) -> tuple[np.ndarray, float]:
    """``(A, q)`` with ``A = ⌈D / q⌉`` (int64) and ``q = max D / QUANTA`` bytes, so
    ``A · q ≥ D`` entry-wise (coverage of ``A`` implies coverage of ``D``)."""
    d = np.asarray(demand, dtype=float)
    top = float(d.max(initial=0.0))
    if top <= 0:
        return np.zeros(d.shape, dtype=np.int64), 1.0
    q = top / QUANTA
    return np.ceil(d / q).astype(np.int64), q


def stuff(a: np.ndarray) -> np.ndarray:
    """Add to ``a`` (non-negative ints) until every row and column sums to ``M`` = the largest
    line sum, touching non-zero entries first. Greedy ``min(row slack, column slack)`` over
    all pairs ends with zero slack everywhere: after the pass, every pair has a saturated row
    or column, so a row with slack would leave every column saturated — but total row slack
    equals total column slack."""
    a = a.copy()
    m = max(int(a.sum(axis=1).max(initial=0)), int(a.sum(axis=0).max(initial=0)))
    _stuff_pass(a, m, True)
    _stuff_pass(a, m, False)
    return a


@njit(cache=True)
def _stuff_pass(a, m, nonzero_only):
    n = a.shape[0]
    row = a.sum(axis=1)
    col = a.sum(axis=0)
    for u in range(n):
        for v in range(n):
            if nonzero_only and a[u, v] == 0:
                continue
            add = min(m - row[u], m - col[v])
            if add > 0:
                a[u, v] += add
                row[u] += add
                col[v] += add


@njit(cache=True)
def _augment(a, thr, root, match_row, match_col, seen, parent, queue):
    """BFS for an augmenting path from free row ``root`` over entries ``≥ thr``; flips it."""
    n = a.shape[0]
    seen[:] = False
    head, tail = 0, 1
    queue[0] = root
    while head < tail:
        u = queue[head]
        head += 1
        for v in range(n):
            if a[u, v] >= thr and not seen[v]:
                seen[v] = True
                parent[v] = u
                if match_col[v] < 0:
                    while True:
                        pu = parent[v]
                        nxt = match_row[pu]
                        match_row[pu] = v
                        match_col[v] = pu
                        if pu == root:
                            return True
                        v = nxt
                queue[tail] = match_col[v]
                tail += 1
    return False


@njit(cache=True)
def _peel(a, halving):
    """Peel perfect matchings off the bistochastic int matrix ``a`` (modified in place).

    ``halving=False``: BvN, threshold 1 throughout. ``True``: Solstice thresholds. Returns
    the matchings (rows of an array) and weights."""
    n = a.shape[0]
    match_row = -np.ones(n, np.int64)
    match_col = -np.ones(n, np.int64)
    seen = np.zeros(n, np.bool_)
    parent = np.zeros(n, np.int64)
    queue = np.zeros(n, np.int64)
    thr = 1
    if halving:
        while thr * 2 <= a.max():
            thr *= 2
    perms = []
    weights = []
    total = a.sum()
    while total > 0:
        ok = True
        for u in range(n):
            if match_row[u] < 0 and not _augment(
                a, thr, u, match_row, match_col, seen, parent, queue
            ):
                ok = False
                break
        if not ok:
            thr //= 2  # thr == 1 cannot fail on a bistochastic integer matrix
            continue
        w = a[0, match_row[0]]
        for u in range(n):
            w = min(w, a[u, match_row[u]])
        perms.append(match_row.copy())
        weights.append(w)
        for u in range(n):
            v = match_row[u]
            a[u, v] -= w
            if a[u, v] < thr:
                match_row[u] = -1
                match_col[v] = -1
        total -= w * n
    return perms, weights


def _restrict(perms, weights, support: np.ndarray) -> list[tuple[np.ndarray, int]]:
    """Drop edges outside ``support`` (stuffing only) and matchings left empty."""
    out = []
    rows = np.arange(support.shape[0])
    for perm, w in zip(perms, weights, strict=True):
        p = np.where(support[rows, perm], perm, -1)
        if (p >= 0).any():
            out.append((p.astype(np.int64), int(w)))
    return out


def bvn(a: np.ndarray) -> list[tuple[np.ndarray, int]]:
    """Textbook BvN decomposition of ``stuff(a)`` (see the module docstring)."""
    if a.sum() == 0:
        return []
    perms, weights = _peel(stuff(a), False)
    return _restrict(perms, weights, a > 0)


def solstice(a: np.ndarray) -> list[tuple[np.ndarray, int]]:
    """Solstice's threshold-halving decomposition of ``stuff(a)``."""
    if a.sum() == 0:
        return []
    perms, weights = _peel(stuff(a), True)
    return _restrict(perms, weights, a > 0)


def eclipse(a: np.ndarray, delay_q: float) -> list[tuple[np.ndarray, int]]:
    """Eclipse's greedy on the residual ``R`` (starts at ``a``), ``delay_q`` = δ in quanta of
    time (δ · B / q). Per step and candidate ``α`` (≤ ``ECLIPSE_CANDIDATES`` quantiles of the
    residual's non-zero entries, always including its largest), the maximum-weight matching
    on ``min(R, α)`` (Hungarian method); keep the ``(M, α)`` with the largest
    ``weight / (δ + α)``; serve ``min(R, α)`` on ``M``. Work budget: after
    ``ECLIPSE_STEPS_PER_DEGREE · Δ`` steps (``Δ`` = the most non-zero entries of a row or
    column, the fewest configurations any cover needs) the residual is finished by
    :func:`min_colouring`, so the loop ends whatever δ is (with δ → 0 the greedy prefers ever
    shorter configurations). On the E5 instances the greedy ends by itself within 4 Δ."""
    from scipy.optimize import linear_sum_assignment

    r = a.astype(float)
    rows = np.arange(a.shape[0])
    out = []
    nz = a > 0
    for _ in range(ECLIPSE_STEPS_PER_DEGREE * int(max(nz.sum(axis=0).max(), nz.sum(axis=1).max()))):
        if not r.any():
            return out
        values = np.unique(r[r > 0])
        pick = np.unique(np.linspace(0, values.size - 1, ECLIPSE_CANDIDATES).round().astype(int))
        best = (-1.0, None, 0.0)
        for alpha in values[pick]:
            gain = np.minimum(r, alpha)
            _, perm = linear_sum_assignment(gain, maximize=True)
            score = float(gain[rows, perm].sum()) / (delay_q + alpha)
            if score > best[0]:
                best = (score, perm, alpha)
        _, perm, alpha = best
        p = np.where(r[rows, perm] > 0, perm, -1).astype(np.int64)
        on = p >= 0
        r[rows[on], p[on]] = np.maximum(r[rows[on], p[on]] - alpha, 0.0)
        out.append((p, int(alpha)))
    return out + min_colouring(r.astype(np.int64))


def min_colouring(a: np.ndarray) -> list[tuple[np.ndarray, int]]:
    """König edge colouring of the support of ``a`` into exactly ``Δ`` matchings, weight of
    each = its largest entry (so the colouring alone covers ``a``).

    Each round takes the maximum-weight matching for ``entry / max + (n+1) · [u or v has
    the current maximum degree]`` (bonus counted per endpoint). A matching covering every
    maximum-degree vertex exists in a bipartite graph, and the bonus outweighs any sum of
    entry terms (< n + 1), so the chosen matching covers them all: the maximum degree drops
    by one per round, ``Δ`` rounds in all. Among those matchings the heaviest entries go
    together, which keeps ``Σ_j max_j`` (the waste of a colour class) small."""
    from scipy.optimize import linear_sum_assignment

    left = a > 0
    n = a.shape[0]
    rows = np.arange(n)
    top = float(a.max(initial=0))
    out = []
    while left.any():
        deg_r, deg_c = left.sum(axis=1), left.sum(axis=0)
        delta = max(deg_r.max(), deg_c.max())
        hot_r, hot_c = (deg_r == delta).astype(float), (deg_c == delta).astype(float)
        bonus = (n + 1.0) * (hot_r[:, None] + hot_c[None, :])
        weight = np.where(left, a / top + bonus, 0.0)
        _, perm = linear_sum_assignment(weight, maximize=True)
        p = np.where(left[rows, perm], perm, -1).astype(np.int64)
        on = p >= 0
        left[rows[on], p[on]] = False
        out.append((p, int(a[rows[on], p[on]].max())))
    return out


def colouring_residual(a: np.ndarray, q: float) -> list[tuple[np.ndarray, int]]:
    """:func:`min_colouring` with each class cut at the ``q``-quantile ``t_j`` of its entries
    (instead of its largest), plus the colouring of the residual ``R_uv = a_uv − t_{j(uv)}``
    (entries above their cut). Covers ``a`` with ``Δ + Δ(R)`` matchings and cuts the waste
    ``Σ_j (max_j − t_j)`` of classes that hold a few outsized entries; ``q = 1`` is
    :func:`min_colouring` itself."""
    rows = np.arange(a.shape[0])
    out, residual = [], np.zeros_like(a)
    for perm, _ in min_colouring(a):
        on = perm >= 0
        entries = a[rows[on], perm[on]]
        cut = max(1, int(np.ceil(np.quantile(entries, q))))
        residual[rows[on], perm[on]] = np.maximum(entries - cut, 0)
        out.append((perm, cut))
    return out + min_colouring(residual)
