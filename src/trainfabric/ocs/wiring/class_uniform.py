"""Class-uniform wirings: every pair of a traffic class holds the same number of circuits.

A training job's pairs fall into a few traffic roles (:func:`.search.pair_classes`: pairs
that run in the same phases, e.g. the data-parallel ring's, the expert all-to-all's, both),
and on the hard families the proven optimum is often *uniform within each class*: on
``dp-ep`` at 64 pods every ring pair holds 6 circuits, every expert-DP pair 4 and the
all-to-all pairs none; on the 256-pod MoE job of ``benchmarks/ocs_scale.py`` the ring pairs
hold 5 and the expert pairs none. A local search that moves two or three circuits at a time
does not reach such a wiring from a rounding that spreads circuits over every class, so the
rounding (:func:`.rounding.round_wiring`) also starts from the best class-uniform wiring.

With ``K`` classes, ``n_cv`` pairs of class ``c`` at pod ``v`` and a count ``k_c`` per
class, the wiring ``x_e = k_{class(e)}`` fits the ports when ``Σ_c n_cv k_c ≤ d_v`` at every
pod and ``k_c ≤ K_c`` (the smallest ``min(d_u, d_v)`` of the class). More circuits never
slow a transfer, so only the *maximal* vectors (no ``k_c`` can grow by one) are candidates.
Classes of a single pair (a pipeline hop) are left out (:func:`shared_classes`); the dark
ports the chosen vector leaves are completed by traffic. The vectors are enumerated depth
first (class 0's count from the top down; the last class always takes all it can) over the
distinct pod rows ``(n_{·v}, d_v)``, and each is scored exactly by its hard critical path on
the reduced DAG.

The number of maximal vectors grows fast with ``K``: a pipeline-plus-data-parallel job has
one class per pipeline hop and per stage's ring (15 at 8 stages); at 256 pods the depth-first
enumeration meets 81 maximal vectors in 5.7 M work units, all with class 0 at its maximum.
So the enumeration first runs within an eighth of the budget; its answer is taken when it is
complete and every vector can be scored (it is then exact). Otherwise a search in class
space runs (:func:`class_search`), then the enumeration again within what is left:

* **ascent** from ``k = 0``: one soft sweep gives every class's weight ``W_c = Σ_{m∈c} μ_m
  8 b_m`` (the Gibbs marginals ``μ`` at ``b2``, :func:`.search.unit_gains`), so one more
  circuit on each pair of ``c`` saves ``W_c (f(k_c) − f(k_c + 1))`` to first order; the
  fitting class of largest saving grows by one, again under the same marginals while the
  largest saving is at least a quarter of the sweep's first, then the next sweep; until no
  class fits or no saving is positive;
* **descent** by exchanges: ``k_i − 1, k_j + 1``, then every class grown while it fits
  (``j`` first, then by index), scored exactly by ``(hard critical path, b2·U)``
  lexicographically; the first strict improvement is taken, until no exchange improves.

Measured on the 8-stage pipeline-parallel job of ``benchmarks/ocs_scale.py`` with ±10%
drifted bytes: at 256 pods the cut enumeration left the rounding's best start at 4.43 s and
the plan at 3.96 s (70% above its certified bound), and the class search gives 2.60 s; at
1,024 pods 3.98 s becomes 2.64 s (26 sweeps and 12 M work units; growing one class per sweep
took 64 sweeps and ended at 2.65 s).

Work (the rounding's unit): the row entries the enumeration touches (each node's load update
and fit, each leaf's maximality test), and :func:`.search.setup_work` per evaluation or
sweep; nothing starts once the budget is spent.
"""

from __future__ import annotations

import itertools

import numba
import numpy as np

from trainfabric.ocs.model import OcsModel
from trainfabric.ocs.wiring.search import (
    _polish_state,
    _Reduced,
    _soft_sweeps,
    group_maxima,
    hard_cp,
    setup_work,
    unit_gains,
)


def pod_rows(model: OcsModel, classes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct constraint rows ``(a [R, K], b [R])`` with ``a[r, c]`` the pairs of class
    ``c`` at a pod of row ``r`` and ``b[r]`` its ports, and the cap ``[K]`` per class."""
    n_classes = int(classes.max()) + 1
    iu, iv = model.pairs
    wired = classes >= 0
    counts = np.zeros((model.n, n_classes), dtype=np.int64)
    np.add.at(counts, (iu[wired], classes[wired]), 1)
    np.add.at(counts, (iv[wired], classes[wired]), 1)
    rows = np.unique(np.column_stack([counts, model.degrees.astype(np.int64)]), axis=0)
    pair_cap = np.minimum(model.degrees[iu], model.degrees[iv]).astype(np.int64)
    cap = np.full(n_classes, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(cap, classes[wired], pair_cap[wired])
    return rows[:, :-1], rows[:, -1], cap


@numba.njit(cache=True, nogil=True)
def _fit(a, b, cap, load, c):  # pragma: no cover - compiled
    """Largest ``k`` with ``load + k a[:, c] ≤ b`` on every row, at most ``cap[c]``."""
    top = cap[c]
    for r in range(a.shape[0]):
        if a[r, c] > 0:
            top = min(top, (b[r] - load[r]) // a[r, c])
    return max(top, 0)


@numba.njit(cache=True, nogil=True)
def maximal_vectors(a, b, cap, limit, max_work):  # pragma: no cover - compiled
    """Maximal ``k`` (module doc) with ``a k ≤ b``, ``0 ≤ k ≤ cap``, depth first, at most
    ``limit`` of them, stopping once ``max_work`` row entries were touched; returns
    ``(vectors [m, K], work, complete)``, ``complete`` when the depth-first search ran to its
    end (the vectors are then all the maximal ones)."""
    n_rows, n_classes = a.shape
    out = np.empty((limit, n_classes), dtype=np.int64)
    k = np.zeros(n_classes, dtype=np.int64)
    load = np.zeros((n_classes + 1, n_rows), dtype=np.int64)  # load[c]: classes < c
    m = 0
    work = n_rows
    c = 0
    k[0] = _fit(a, b, cap, load[0], 0)
    complete = False
    while m < limit and work < max_work:
        work += 2 * n_rows  # this node's load update and the next fit
        load[c + 1] = load[c] + k[c] * a[:, c]
        if c < n_classes - 1:  # descend: the next class takes all it can first
            c += 1
            k[c] = _fit(a, b, cap, load[c], c)
            continue
        maximal = True
        for j in range(n_classes):
            work += n_rows
            if k[j] < cap[j] and np.all(load[n_classes] + a[:, j] <= b):
                maximal = False
                break
        if maximal:
            out[m] = k
            m += 1
        c = n_classes - 2  # backtrack to the deepest class that can still give one up
        while c >= 0 and k[c] == 0:
            c -= 1
        if c < 0:
            complete = True
            break
        k[c] -= 1
    return out[:m], work, complete


def shared_classes(classes: np.ndarray) -> np.ndarray:
    """``classes`` [P] renumbered ``0..K'-1`` over the classes of two pairs or more; a class
    of one pair (a pipeline hop) gets -1: uniformity says nothing about it, and its circuits
    are placed by the completion of the dark ports."""
    wired = classes >= 0
    size = np.bincount(classes[wired]) if wired.any() else np.zeros(0, dtype=np.int64)
    keep = wired & (size[np.maximum(classes, 0)] >= 2) if size.size else wired
    out = np.full(classes.size, -1, dtype=np.int64)
    out[keep] = np.unique(classes[keep], return_inverse=True)[1]
    return out


MAX_VECTORS = 4096  # candidates kept from the enumeration, at most
PROBE_SHARE = 8  # the first enumeration stops at 1/8 of the budget
ASCENT_SHARE = 0.25  # an ascent sweep's steps go on down to 1/4 of its first saving


def wiring_cp(red: _Reduced, model: OcsModel, x: np.ndarray) -> float:
    """Hard critical path (s) of the integer wiring ``x`` [P] on the reduced DAG: every
    group's duration is its longest member's."""
    return hard_cp(red, group_maxima(red, model, x))


def best_class_uniform(
    red: _Reduced, model: OcsModel, classes: np.ndarray, budget: int, b2: float
) -> tuple[np.ndarray | None, float, int]:
    """The best class-uniform wiring found within ``budget`` work units (module doc). The
    enumeration runs first within ``1/PROBE_SHARE`` of the budget; when it is complete and
    every vector's evaluation fits, its answer is exact: the best maximal vector by hard
    critical path, ties keeping the first in enumeration order. Otherwise
    :func:`class_search` runs (it ends at its local optimum), a cut enumeration runs again
    within what is left, and the search's vector is replaced by the enumeration's exact
    answer where that became possible, else by an enumerated vector (scored in order while
    the budget lasts) only when strictly shorter. ``b2`` (1/s) is the temperature of
    ``red``'s soft constants. Returns ``(x [P] or None when there is no class or no budget,
    its hard critical path (s), work spent)``."""
    classes = shared_classes(classes)
    if classes.size == 0 or classes.max() < 0:
        return None, np.inf, 0
    rows = a, b, cap = pod_rows(model, classes)
    per_eval = setup_work(red)
    vectors, work, complete = maximal_vectors(a, b, cap, MAX_VECTORS, budget // PROBE_SHARE)
    best, best_cp = None, np.inf
    if not (complete and work + len(vectors) * per_eval <= budget):
        k, best_cp, spent = class_search(red, model, classes, rows, budget - work, b2)
        best, work = (None if k is None else _uniform(classes, k)), work + spent
        if not complete:
            vectors, spent, complete = maximal_vectors(a, b, cap, MAX_VECTORS, budget - work)
            work += spent
        if complete and work + len(vectors) * per_eval <= budget:  # exact after all
            best, best_cp = None, np.inf
    for k in vectors:
        if work + per_eval > budget:
            break
        x = _uniform(classes, k)
        cp = wiring_cp(red, model, x)
        work += per_eval
        if cp < best_cp:
            best, best_cp = x, cp
    return best, best_cp, work


def _uniform(classes: np.ndarray, k: np.ndarray) -> np.ndarray:
    """The wiring [P] giving every pair of class ``c`` ``k[c]`` circuits (0 outside them)."""
    return np.where(classes >= 0, k[np.maximum(classes, 0)], 0).astype(np.int64)


def _score(red: _Reduced, model: OcsModel, x: np.ndarray, b2: float) -> tuple[float, float]:
    """``(hard critical path (s), b2·U)`` of the integer wiring ``x`` on the reduced DAG, ``U``
    the smoothed critical path at ``b2`` (s)."""
    _, _, gval, glse = _polish_state(red, model, x, b2)
    args = (red.group, glse, red.pindptr, red.pindices, red.sindptr, red.sindices)
    return hard_cp(red, gval), float(_soft_sweeps(red.fixed_soft, *args)[2][-1])


def _grow(a, b, cap, k: np.ndarray, order) -> np.ndarray:
    """``k`` with every class of ``order`` in turn grown by all that still fits."""
    k = k.copy()
    for c in order:
        k[c] += _fit(a, b, cap, a @ k, c)
    return k


def _saving(model: OcsModel, k: np.ndarray) -> np.ndarray:
    """``f(k) − f(k + 1)`` (s/bit), ``f(y) = 1/(B y + B0)``: one more circuit's saving per bit."""
    rate, b0 = model.rate_bps, model.fallback_bps
    return 1.0 / (rate * k + b0) - 1.0 / (rate * (k + 1) + b0)


def _ascend(a, b, cap, k: np.ndarray, weight: np.ndarray, model: OcsModel) -> bool:
    """The ascent's steps under one sweep's marginals (in place): grow the fitting class of
    largest saving ``weight_c (f(k_c) − f(k_c + 1))`` by one while that saving is at least
    ``ASCENT_SHARE`` of the first step's; False when no class fits with a positive saving."""
    first = None
    while True:
        fits = (k < cap) & ((a @ k)[:, None] + a <= b[:, None]).all(axis=0)
        gain = np.where(fits, weight * _saving(model, k), 0.0)
        top = gain.max(initial=0.0)
        if not top > 0 or (first is not None and top < ASCENT_SHARE * first):
            return first is not None
        first = top if first is None else first
        k[int(np.argmax(gain))] += 1


def class_search(
    red: _Reduced, model: OcsModel, classes: np.ndarray, rows: tuple, budget: int, b2: float
) -> tuple[np.ndarray | None, float, int]:
    """Ascent then exchange descent in class space (module doc) within ``budget`` work units
    (:func:`.search.setup_work` per soft sweep or exact score). ``classes`` [P] numbered
    ``0..K-1`` (-1: none); ``rows``: :func:`pod_rows`'s ``(a, b, cap)``; ``b2`` (1/s) the
    temperature of ``red``'s soft constants. Returns ``(k [K] or None when the budget does not
    cover one score, its hard critical path (s), work spent)``."""
    a, b, cap = rows
    n_classes = a.shape[1]
    per_eval = setup_work(red)
    work = 0
    k = np.zeros(n_classes, dtype=np.int64)
    wired = classes >= 0
    while work + 2 * per_eval <= budget:  # ascent, leaving room for one exact score
        work += per_eval
        unit = unit_gains(red, model, _uniform(classes, k), b2)
        weight = np.bincount(classes[wired], unit[wired], minlength=n_classes) / _saving(model, k)
        if not _ascend(a, b, cap, k, weight, model):
            break
    if work + per_eval > budget:
        return None, np.inf, work
    work += per_eval
    best = _score(red, model, _uniform(classes, k), b2)
    improved = True
    while improved:  # descent: first strictly better exchange, until none is
        improved = False
        for i, j in itertools.permutations(range(n_classes), 2):
            if k[i] == 0:
                continue
            trial = k.copy()
            trial[i] -= 1
            if _fit(a, b, cap, a @ trial, j) == 0:
                continue
            trial = _grow(a, b, cap, trial, [j, *range(n_classes)])
            if work + per_eval > budget:
                return k, best[0], work
            work += per_eval
            score = _score(red, model, _uniform(classes, trial), b2)
            if score < best:
                k, best, improved = trial, score, True
                break
    return k, best[0], work
