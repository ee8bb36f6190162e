"""Fractional wiring -> integer wiring
(docs/ocs.md §1.8, step R; dark ports allowed: ``Σ_u x_uv ≤ d_v``).

* :func:`round_to_degrees` — exact degrees where the model allows them (else the fewest dark
  ports): ``x = floor(x_frac) + y`` where the residual ``y`` is a maximum-weight
  degree-constrained b-matching: ``Σ_u y_uv = ρ_v = d_v − Σ_u floor(x_frac)_uv`` (exact integer
  program with HiGHS up to 5,000 candidate pairs, greedy + augmenting paths above); used by
  the baselines.
* :func:`round_wiring` — the planner's rounding: several cost-aware roundings (by the marginals
  of the integer wiring being built, and of the fractional optimum), each searched on the
  *hard* critical path (:mod:`.search`: moves that may use or leave dark ports, evaluated
  exactly by compiled incremental sweeps over a reduced DAG), an iterated local search, and a
  completion to exact degrees where that costs nothing. Work budget in elementary operations
  (comm nodes, group members, merged DAG nodes and edges touched), so it scales with size.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numba
import numpy as np
import scipy.sparse as sp

from trainfabric.errors import ConfigError
from trainfabric.ocs.highs import integer_program
from trainfabric.ocs.model import OcsModel
from trainfabric.ocs.wiring.class_uniform import best_class_uniform
from trainfabric.ocs.wiring.search import (
    _at,
    _pair_id,
    _Reduced,
    group_maxima,
    hard_cp,
    kick,
    pair_classes,
    polish,
    setup_work,
    unit_gains,
)

_INT_TOL = 1e-9
# Up to this many pairs between pods with free ports the residual b-matching is solved exactly
# (HiGHS, milliseconds); above, by greedy + augmenting repair (compiled, linear-ish).
_EXACT_PAIRS_MAX = 5_000


def _check_frac(model: OcsModel, x_frac) -> np.ndarray:
    x = np.asarray(x_frac, dtype=float)
    if x.shape != (model.n_pairs,):
        raise ConfigError("x_frac", f"has shape {x.shape}, expected ({model.n_pairs},)")
    if not np.isfinite(x).all() or (x < -_INT_TOL).any():
        raise ConfigError("x_frac", "must be finite and non-negative")
    return np.maximum(x, 0.0)


def _int_degrees(model: OcsModel, x: np.ndarray) -> np.ndarray:
    """``Σ_u x_uv`` of an integer pair vector, as int64 (``pod_degrees`` returns floats)."""
    iu, iv = model.pairs
    return np.bincount(iu, x, model.n).astype(np.int64) + np.bincount(iv, x, model.n).astype(
        np.int64
    )


def _floor(model: OcsModel, x: np.ndarray) -> np.ndarray:
    """``floor(x)`` with values within 1e-9 of an integer snapped to it (float noise)."""
    near = np.round(x)
    x0 = np.where(np.abs(x - near) <= _INT_TOL * np.maximum(1.0, near), near, np.floor(x))
    x0 = x0.astype(np.int64)
    over = _int_degrees(model, x0) > model.degrees
    if over.any():
        v = int(np.flatnonzero(over)[0])
        raise ConfigError("x_frac", f"pod {v} has more than its {model.degrees[v]} ports")
    return x0


def _make_realisable(model: OcsModel, x0: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Remove floor circuits until the residual degrees ``ρ`` are realisable as a loopless
    multigraph (``max_v ρ_v ≤ Σ ρ / 2``; ``Σ ρ`` is even because ``Σ d`` is).

    Only needed when ``x_frac`` is not in the degree polytope. While one pod ``v*`` has
    ``ρ_v* > Σ_{u≠v*} ρ_u``, take one circuit off the least-weighted floor pair not touching
    ``v*`` (one exists: the other pods' floor degrees exceed ``v*``'s); each removal lowers
    the excess by 2.
    """
    iu, iv = model.pairs
    x0 = x0.copy()
    while True:
        rho = model.degrees - _int_degrees(model, x0)
        v = int(np.argmax(rho))
        excess = int(rho[v] - (rho.sum() - rho[v]))
        cand = np.flatnonzero((x0 > 0) & (iu != v) & (iv != v))
        if excess <= 0 or cand.size == 0:  # no candidate: the model is not completable
            return x0
        order = cand[np.argsort(weight[cand], kind="stable")]
        take = np.minimum(x0[order], np.maximum(excess // 2, 1))
        take = take[: int(np.searchsorted(np.cumsum(take), excess // 2)) + 1]
        x0[order[: take.size]] -= take


def _havel_hakimi(rho: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pair up the free ports ``rho``: repeatedly join the two pods with the most free ports
    until fewer than two pods have one. When ``rho`` is realisable (``max ≤ Σ/2``, ``Σ`` even)
    every port is used (Havel-Hakimi); otherwise the fewest possible stay free
    (``max(Σ mod 2, 2 max − Σ)``). Returns the pair endpoints ``(a, b)``, ``a < b``, with
    repetitions for parallel circuits."""
    a, b = _hh_kernel(rho.astype(np.int64))
    return np.minimum(a, b), np.maximum(a, b)


@numba.njit(cache=True, nogil=True)
def _hh_kernel(rho):  # pragma: no cover - compiled
    # One circuit at a time between the two largest residuals keeps "max <= sum/2" true:
    # r1 - 1 <= (S - 2)/2 and r3 <= (S - 2)/2 because r1 + r2 - r3 + rest >= 2.
    r = rho.copy()
    total = r.sum() // 2
    a = np.empty(total, dtype=np.int64)
    b = np.empty(total, dtype=np.int64)
    for k in range(total):
        i = -1
        j = -1
        for v in range(r.size):
            if r[v] > 0:
                if i < 0 or r[v] > r[i]:
                    j = i
                    i = v
                elif j < 0 or r[v] > r[j]:
                    j = v
        if j < 0:
            return a[:k], b[:k]
        a[k] = i
        b[k] = j
        r[i] -= 1
        r[j] -= 1
    return a, b


def _solve_residual_ip(
    model: OcsModel,
    rho: np.ndarray,
    cand: np.ndarray,
    w: np.ndarray,
    cap: np.ndarray,
    time_limit_s: float,
) -> np.ndarray:
    """Exact residual program on the pairs ``cand`` between pods with free ports::

        max  Σ_e w_e z_e + Σ_e (w_e − Q) t_e
        s.t. Σ_{e ∋ v} (z_e + t_e) = ρ_v     for every pod v with ρ_v > 0
             z_e ∈ {0, cap_e},  t_e ∈ Z_{≥0}

    ``w ∈ [0, 1]`` (rescaled weights) and ``Q = Σρ/2 + 1`` exceeds the weight of any
    b-matching, so the circuits beyond ``ceil`` (``Σ t``) are minimised first and the weight
    second (lexicographic). HiGHS (:func:`trainfabric.ocs.highs.integer_program`); if the time
    limit passes before it has a point, the greedy one is used. Returns ``[z, t]`` on ``cand``.
    """
    iu, iv = model.pairs
    n_c = cand.size
    live = np.flatnonzero(rho > 0)
    row_of = np.full(model.n, -1, dtype=np.int64)
    row_of[live] = np.arange(live.size)
    rows = np.stack([row_of[iu[cand]], row_of[iv[cand]]], axis=1).ravel()
    a = sp.csr_matrix(
        (np.ones(4 * n_c), (np.concatenate([rows, rows]), np.arange(2 * n_c).repeat(2))),
        shape=(live.size, 2 * n_c),
    )
    t_cap = np.minimum(rho[iu[cand]], rho[iv[cand]])
    x = integer_program(
        -np.concatenate([w, w - (rho.sum() / 2 + 1.0)]),
        a,
        rho[live],
        rho[live],
        np.concatenate([cap, t_cap]),
        time_limit_s,
        mip_rel_gap=1e-9,
    )
    if x is None:
        return _residual_greedy(model, rho, cand, w, cap)
    return np.round(x).astype(np.int64)


def _residual_greedy(
    model: OcsModel, rho: np.ndarray, cand: np.ndarray, w: np.ndarray, cap: np.ndarray
) -> np.ndarray:
    """Greedy + augmenting repair of the residual program (same ``[z, t]`` layout).

    Greedy by decreasing weight on ``z``; then, while a pod ``u`` has free ports, the best of:
    a direct pair ``(u, v)`` to another pod with free ports, or a length-3 augmenting path
    ``u – a = b – v`` (drop the chosen ``(a, b)``, add ``(u, a)`` and ``(b, v)``; ``v = u`` is
    allowed when ``u`` has two free ports). What is left is realised as extras ``t``
    (:func:`_extras`), so the result always has exact degrees.
    """
    iu, iv = model.pairs
    pos_of = np.full(model.n_pairs, -1, dtype=np.int64)
    pos_of[cand] = np.arange(cand.size)
    order = np.argsort(-w, kind="stable")
    z, left = _greedy_augment(iu[cand], iv[cand], pos_of, model.n, w, cap, order, rho.copy())
    t = np.zeros(cand.size, dtype=np.int64)
    if left.any():
        z, t = _extras(model, cand, z, left)
    return np.concatenate([z, t])


@numba.njit(cache=True, nogil=True)
def _greedy_augment(a, b, pos_of, n, w, cap, order, left):  # pragma: no cover - compiled
    z = np.zeros(a.size, dtype=np.int64)
    for k in order:
        if cap[k] > 0 and left[a[k]] > 0 and left[b[k]] > 0:
            z[k] = 1
            left[a[k]] -= 1
            left[b[k]] -= 1
    chosen = np.flatnonzero(z).astype(np.int64)
    while True:
        pods = np.flatnonzero(left)
        if pods.size == 0:
            break
        u = pods[np.argmax(left[pods])]
        best = -np.inf
        kind = -1
        k1 = k2 = k3 = -1
        for v in pods:
            if v != u:
                k = pos_of[_pair_id(n, u, v)]
                if k >= 0 and cap[k] > 0 and z[k] == 0 and w[k] > best:
                    best, kind, k1 = w[k], 0, k
        for c in range(chosen.size):
            kc = chosen[c]
            if z[kc] == 0:
                continue
            for side in range(2):
                x, y = (a[kc], b[kc]) if side == 0 else (b[kc], a[kc])
                if x == u or y == u:
                    continue
                ka = pos_of[_pair_id(n, u, x)]
                if ka < 0 or cap[ka] == 0 or z[ka] == 1:
                    continue
                for v in pods:
                    if v in (x, y) or (v == u and left[u] < 2):
                        continue
                    kb = pos_of[_pair_id(n, v, y)]
                    if kb < 0 or cap[kb] == 0 or z[kb] == 1 or kb == ka:
                        continue
                    gain = w[ka] + w[kb] - w[kc]
                    if gain > best:
                        best, kind, k1, k2, k3 = gain, 1, ka, kb, kc
        if kind < 0:
            break
        z[k1] = 1
        left[a[k1]] -= 1
        left[b[k1]] -= 1
        if kind == 1:
            z[k2] = 1
            z[k3] = 0
            left[a[k2]] -= 1
            left[b[k2]] -= 1
            left[a[k3]] += 1
            left[b[k3]] += 1
            chosen = np.append(chosen, k2)
        chosen = np.append(chosen, k1)
    return z, left


def _extras(model: OcsModel, cand: np.ndarray, z: np.ndarray, left: np.ndarray):
    """Complete a partial residual ``z`` (free ports ``left``) with extra circuits ``t``.

    If ``left`` is not realisable (one pod ``v`` needs more than all the others together),
    undo chosen circuits not touching ``v``: each raises the others' free ports by 2, and there
    are enough of them because ``ρ`` is realisable. Then realise ``left`` by Havel-Hakimi; its
    pairs join pods with free ports, so they are in ``cand``.
    """
    iu, iv = model.pairs
    z = z.copy()
    left = left.copy()
    while 2 * left.max() > left.sum():
        v = int(np.argmax(left))
        undo = np.flatnonzero((z > 0) & (iu[cand] != v) & (iv[cand] != v))
        if undo.size == 0:  # not completable: Havel-Hakimi leaves the fewest ports dark
            break
        k = int(undo[0])
        z[k] = 0
        left[iu[cand[k]]] += 1
        left[iv[cand[k]]] += 1
    t = np.zeros(cand.size, dtype=np.int64)
    np.add.at(t, np.searchsorted(cand, model.pair_index(*_havel_hakimi(left))), 1)
    return z, t


def round_to_degrees(
    model: OcsModel,
    x_frac: np.ndarray,
    score: np.ndarray | None = None,
    *,
    exact: bool | None = None,
    time_limit_s: float = 10.0,
) -> np.ndarray:
    """Integer wiring with exact degrees nearest (in the b-matching sense) to ``x_frac``.

    ``x = floor(x_frac) + y`` with ``y`` the maximum-weight solution of

        Σ_u y_uv = ρ_v := d_v − Σ_u floor(x_frac)_uv,   y_e ∈ Z_{≥0},

    that first minimises the circuits put beyond ``ceil(x_frac_e)`` (none are needed when
    ``x_frac`` is in the degree polytope and the support allows it) and then maximises
    ``Σ_e score_e · [y_e ≥ 1 within ceil]``; ``score`` defaults to the fractional parts
    ``x_frac − floor(x_frac)``. Solved exactly (integer program, HiGHS) when at most 5,000
    pairs join pods with free ports, else by greedy + augmenting paths (``exact=True`` forces
    the integer program).

    Always succeeds for a realisable degree sequence (``Σ d`` even, no pod above half),
    including ``x_frac = 0``; when ``floor(x_frac)`` leaves residual degrees that no multigraph
    realises (``x_frac`` off the polytope), floor circuits of lowest score are removed first.

    Parameters: ``x_frac`` [P] circuits per pair (``triu_indices`` order), ``score`` [P]
    (any real weights, larger = preferred), ``exact`` (None: by size), ``time_limit_s`` for the
    integer program (the greedy solution is used if it finds nothing in time). Returns int64 [P].
    """
    x = _check_frac(model, x_frac)
    x0 = _floor(model, x)
    frac = x - x0
    fractional = frac > _INT_TOL
    if score is None:
        weight = frac
    else:
        weight = np.asarray(score, dtype=float)
        if weight.shape != x.shape or not np.isfinite(weight).all():
            raise ConfigError("score", f"must be a finite vector of shape ({model.n_pairs},)")
    return _distribute(model, x0, weight, fractional, exact, time_limit_s)


def _distribute(
    model: OcsModel,
    x0: np.ndarray,
    weight: np.ndarray,
    allowed: np.ndarray | None,
    exact: bool | None,
    time_limit_s: float = 10.0,
) -> np.ndarray:
    """``x0 + y``: the residual degrees of ``x0`` by the lexicographic b-matching of
    :func:`round_to_degrees`; ``allowed`` (bool [P]) marks the pairs where one circuit is
    "within ceil" (None: every pair)."""
    x0 = _make_realisable(model, x0, weight)
    rho = model.degrees - _int_degrees(model, x0)
    if not rho.any():
        return x0
    iu, iv = model.pairs
    live = rho > 0
    cand = np.flatnonzero(live[iu] & live[iv])
    if cand.size == 0:  # free ports on one pod only: they stay dark
        return x0
    w = weight[cand]
    span = float(w.max() - w.min())
    w = (w - w.min()) / span if span > 0 else np.zeros(cand.size)
    cap = np.ones(cand.size, dtype=np.int64) if allowed is None else allowed[cand].astype(np.int64)
    if exact or (exact is None and cand.size <= _EXACT_PAIRS_MAX):
        zt = _solve_residual_ip(model, rho, cand, w, cap, time_limit_s)
    else:
        zt = _residual_greedy(model, rho, cand, w, cap)
    x = x0.copy()
    np.add.at(x, cand, zt[: cand.size] + zt[cand.size :])
    return x


# -- cost-aware rounding + hard critical-path search (dark ports allowed) ----------------------


@dataclass
class RoundResult:
    """Outcome of :func:`round_wiring` (times in seconds).

    ``x``: integer wiring [P], degrees ``≤ d`` (completed to ``= d`` where that costs
    nothing); ``hard_cp_s``: its hard critical path; ``initial_cp_s``: the best hard critical
    path among the roundings before the search; ``swaps``: accepted moves; ``evaluations``:
    candidate moves evaluated; ``work``: work units spent (the budget's unit, see
    :func:`round_wiring`) by the search and the kicks, ``class_work`` by the class-uniform
    start and the class moves (a budget of their own); ``starts``: roundings searched from;
    ``wall_s``; ``reduced``: the reduced DAG the search ran on (at ``b2``), which a warm
    re-plan of the same job reuses. ``success``: the wiring's critical path is finite (always,
    the fallback rate serving unwired pairs);
    ``message``: the critical path before and after the search.
    """

    x: np.ndarray
    hard_cp_s: float
    initial_cp_s: float
    swaps: int
    evaluations: int
    work: int
    starts: int
    wall_s: float
    class_work: int = 0
    reduced: _Reduced | None = field(default=None, repr=False)

    @property
    def success(self) -> bool:
        return bool(np.isfinite(self.hard_cp_s))

    @property
    def message(self) -> str:
        return (
            f"hard critical path {self.initial_cp_s:.6g} s -> {self.hard_cp_s:.6g} s "
            f"({self.swaps} moves, {self.evaluations} evaluations)"
        )


def _fill(
    model: OcsModel, x0: np.ndarray, weight: np.ndarray, forbid: np.ndarray | None = None
) -> np.ndarray:
    """``x0`` plus circuits on its dark ports: one circuit per pair between pods with dark ports
    by decreasing ``weight`` (greedy with length-3 augmenting paths, :func:`_greedy_augment`;
    pairs in ``forbid`` (bool [P]) excluded), then what is left paired up
    (:func:`_havel_hakimi`), so at most one pod keeps dark ports (and none when the leftover
    is realisable). Adding circuits never slows a transfer."""
    rho = model.free_ports(x0)
    iu, iv = model.pairs
    live = rho > 0
    ok = live[iu] & live[iv]
    if forbid is not None:
        ok &= ~forbid
    cand = np.flatnonzero(ok)
    x = x0.copy()
    left = rho.astype(np.int64)
    if cand.size:
        pos_of = np.full(model.n_pairs, -1, dtype=np.int64)
        pos_of[cand] = np.arange(cand.size)
        w = np.asarray(weight, dtype=float)[cand]
        order = np.argsort(-w, kind="stable")
        cap = np.ones(cand.size, dtype=np.int64)
        z, left = _greedy_augment(iu[cand], iv[cand], pos_of, model.n, w, cap, order, left)
        x[cand] += z
    if (left > 0).sum() >= 2:
        np.add.at(x, model.pair_index(*_havel_hakimi(left)), 1)
    return x


_ROUNDS_MAX = 6  # marginal re-evaluations of the iterative rounding


def _iterative_rounding(
    red: _Reduced, model: OcsModel, x0: np.ndarray, b2: float, forbid: np.ndarray | None = None
) -> np.ndarray:
    """Rounding by the marginals of the *integer* wiring being built (docs/ocs.md §1.8: "iterative
    rounding with re-solves on the remaining degrees").

    From ``x0`` (≤ d), each round computes the Gibbs marginals ``μ_c`` of every comm node at
    the current wiring (soft sweeps of the reduced DAG, ``b2``; pairs without a circuit run at
    the fallback rate, so they weigh what they would cost) and the linearised saving of one more
    circuit on pair ``e``, ``g_e = Σ_{c∈e} μ_c · 8 b_c (f(x_e) − f(x_e + 1))``,
    ``f(y) = 1/(B y + B0)``; it then adds one circuit to each of the best pairs (by ``g``,
    between pods with dark ports) until half of the circuits still possible are placed. After
    ``_ROUNDS_MAX`` rounds, or when no pair has a positive saving, :func:`_fill` places the rest
    by the last savings. Unlike rounding by the fractional optimum's marginals this cannot leave
    a pair that carries traffic at the fallback rate because the fractional optimum gave it
    0.8 circuits and the critical path elsewhere. Pairs in ``forbid`` (bool [P]) get no circuit
    (:func:`_class_moves`).
    """
    iu, iv = model.pairs
    allowed = np.ones(model.n_pairs, dtype=bool) if forbid is None else ~forbid
    x = x0.copy()
    gain = np.zeros(model.n_pairs)
    for _ in range(_ROUNDS_MAX):
        left = model.free_ports(x)
        cand = np.flatnonzero((left[iu] > 0) & (left[iv] > 0) & allowed)
        if cand.size == 0:
            break
        gain = unit_gains(red, model, x, b2)
        cand = cand[gain[cand] > 0]
        if cand.size == 0:
            break
        order = cand[np.argsort(-gain[cand], kind="stable")]
        quota = max(1, int(min(left.sum() // 2, model.max_circuits - x.sum())) // 2)
        _take_once(order, iu, iv, x, left, quota)
    return _fill(model, x, gain, forbid)


@numba.njit(cache=True, nogil=True)
def _take_once(order, iu, iv, x, left, quota):  # pragma: no cover - compiled
    """One circuit on each pair of ``order`` whose pods both have dark ports ``left``, until
    ``quota`` circuits are placed."""
    k = 0
    for e in order:
        if k >= quota:
            break
        if left[iu[e]] > 0 and left[iv[e]] > 0:
            x[e] += 1
            left[iu[e]] -= 1
            left[iv[e]] -= 1
            k += 1


def _marginal_rounding(
    cost, model: OcsModel, x_frac: np.ndarray, x0: np.ndarray, b2: float
) -> np.ndarray:
    """Cost-aware rounding: distribute the free ports of ``x0`` one circuit at a time by the
    linearised decrease of the smoothed critical path.

    The ``k``-th circuit added to pair ``e`` saves
    ``g_e(k) = A_e (f(x0_e + k − 1) − f(x0_e + k))`` with ``f(y) = 1/(B y + B0)`` and
    ``A_e = Σ_{m: e(m)=e} μ_m · 8 b_m`` (``μ``: Gibbs marginals at ``x_frac``, ``b2``). ``f``
    is convex, so the gains of a pair decrease with ``k`` and a greedy pass over all units by
    decreasing gain takes them in order (a pair may get several circuits when its traffic is
    worth it); the ports it leaves free are filled by :func:`_fill` (augmenting paths,
    then pairing up), weighted by the next unit's gain.
    """
    mu = cost.marginals(x_frac, b2)[cost.comm_nodes]
    a = np.bincount(cost.comm_pair, mu * 8.0 * cost.dag.bytes[cost.comm_nodes], model.n_pairs)
    b, b0 = model.rate_bps, model.fallback_bps
    rho = model.degrees - _int_degrees(model, x0)
    iu, iv = model.pairs
    pairs = np.flatnonzero((a > 0) & (rho[iu] > 0) & (rho[iv] > 0))
    k_max = np.minimum(np.minimum(rho[iu[pairs]], rho[iv[pairs]]), _UNITS_PER_PAIR)
    unit_pair = np.repeat(pairs, k_max)
    unit_k = np.arange(unit_pair.size) - np.repeat(np.cumsum(k_max) - k_max, k_max)
    y = x0[unit_pair] + unit_k
    gain = a[unit_pair] * (1.0 / (b * y + b0) - 1.0 / (b * (y + 1) + b0))
    order = np.lexsort((unit_k, -gain))
    x1 = x0.copy()
    _take_units(unit_pair[order], unit_k[order], iu, iv, x1, x0, rho.copy())
    nxt = a * (1.0 / (b * x1 + b0) - 1.0 / (b * (x1 + 1) + b0))
    return _fill(model, x1, nxt)


_UNITS_PER_PAIR = 8  # circuits per pair the unit-greedy considers beyond floor(x_frac)


@numba.njit(cache=True, nogil=True)
def _take_units(unit_pair, unit_k, iu, iv, x, x0, left):  # pragma: no cover - compiled
    for i in range(unit_pair.size):
        e = unit_pair[i]
        u, v = iu[e], iv[e]
        if left[u] > 0 and left[v] > 0 and x[e] - x0[e] == unit_k[i]:
            x[e] += 1
            left[u] -= 1
            left[v] -= 1


_COMPLETION_TRIES = 16  # circuits tried per completion step


def _complete(cost, model: OcsModel, x: np.ndarray, cp: float) -> tuple[np.ndarray, float]:
    """Complete a wiring to exact degrees where that costs nothing.

    First the dark ports of distinct pods are paired up (:func:`_havel_hakimi`; more circuits
    never slow a transfer), so at most one pod ``z`` keeps dark ports. While ``z`` has two or
    more, try the circuits ``(a, b)``, ``a, b ≠ z`` (most circuits on the pair first, then
    least traffic): move ``(a, b) → (z, a), (z, b)`` (two more circuits, one fewer) and keep the
    first whose hard critical path is not above ``cp`` (s); stop after ``_COMPLETION_TRIES``
    failures. Returns the wiring and its hard critical path.
    """
    free = model.free_ports(x)
    if (free > 0).sum() >= 2:
        x = x.copy()
        np.add.at(x, model.pair_index(*_havel_hakimi(free)), 1)
        cp = min(cp, cost.hard(x))
    iu, iv = model.pairs
    load = np.bincount(cost.comm_pair, cost.dag.bytes[cost.comm_nodes], model.n_pairs)
    tries = 0
    while tries < _COMPLETION_TRIES:
        free = model.free_ports(x)
        z = int(np.argmax(free))
        if free[z] < 2:
            break
        cand = np.flatnonzero((x > 0) & (iu != z) & (iv != z))
        cand = cand[np.lexsort((load[cand], -x[cand]))][: _COMPLETION_TRIES - tries]
        for e in cand:
            tries += 1
            y = x.copy()
            y[e] -= 1
            y[model.pair_index(z, np.array([iu[e], iv[e]]))] += 1
            cy = cost.hard(y)
            if cy <= cp * (1 + 1e-12):
                x, cp = y, cy
                break
        else:
            break
    return x, cp


CLASS_TRIES = 4  # pair classes emptied by the class moves, at most, per improvement
CLASS_SLACK = 0.02  # a re-spent wiring is searched if within this share of the best


def _class_moves(
    red: _Reduced, model: OcsModel, x: np.ndarray, cp: float, b2: float, perm, budget: int
) -> tuple[np.ndarray, float, int, int, int]:
    """Moves to structurally different wirings: take one pair class off the circuits entirely
    and re-spend its ports on the others.

    Classes are the traffic roles of :func:`.search.pair_classes` (pairs that run in the same
    phases). For each class holding at least two circuits in ``x`` (at most ``CLASS_TRIES``, by
    decreasing circuits held), every circuit of the class is removed and the freed ports are
    re-spent by :func:`_iterative_rounding` with the class forbidden (by the marginals of the
    wiring being built, so they go where the critical path gains most). Best first, a
    re-spent wiring with a strictly shorter hard critical path than ``x`` is taken as it is;
    one within ``CLASS_SLACK`` of ``x``'s is first searched briefly (at most ``KICK_MOVES``
    candidates, :func:`.search.polish`, which may give circuits back to the class) and
    taken if that makes it strictly shorter. The wiring taken is searched to its local
    optimum, replaces ``x``, and the classes are tried again. A local move changes two or
    three pairs at a time and cannot cross the valley between "every pair of the class holds
    a circuit" and "none does"; this move jumps it.

    Work: each re-spending is charged ``(_ROUNDS_MAX + 1)`` times :func:`.search.setup_work`,
    the searches their own work; nothing starts once ``budget`` is spent. Returns ``(x, hard
    critical path (s), accepted moves, evaluations, work)``.
    """
    classes = pair_classes(red, model.n_pairs)
    respend = (_ROUNDS_MAX + 1) * setup_work(red)
    acc = evals = work = 0
    tried: set[int] = set()
    wired = classes >= 0
    while True:
        held = np.bincount(classes[wired], x[wired], minlength=classes.max() + 1)
        order = [int(c) for c in np.argsort(-held, kind="stable") if held[c] >= 2]
        cands = []
        for c in [c for c in order if c not in tried][:CLASS_TRIES]:
            if work + respend >= budget:
                break
            tried.add(c)
            forbid = classes == c
            y = _iterative_rounding(red, model, np.where(forbid, 0, x), b2, forbid)
            work += respend
            y_cp = hard_cp(red, group_maxima(red, model, y))
            if y_cp < cp * (1 + CLASS_SLACK):
                cands.append((y_cp, c, y))
        for y_cp, _, y in sorted(cands, key=lambda t: t[:2]):
            if y_cp < cp * (1 - 1e-12):  # better as it stands: straight to the full search
                break
            y, y_cp, a, ev, wk = polish(
                red, model, y, b2, perm, budget - work, max_evals=KICK_MOVES
            )
            acc, evals, work = acc + a, evals + ev, work + wk
            if y_cp < cp * (1 - 1e-12):
                break
        else:
            return x, cp, acc, evals, work
        y, cp, a, ev, wk = polish(red, model, y, b2, perm, budget - work)
        x, acc, evals, work = y, acc + a, evals + ev, work + wk
        tried.clear()


SOFTER = 100.0  # the search first runs at b2 / SOFTER, then at b2
# Work budget of the search (steps 2-3 of round_wiring), in work units (elementary operations,
# search._polish) per reference size: the budget is max_moves * (1 + S / WORK_REF_SIZE), S the
# instance's size (search.setup_work: comm nodes + merged DAG nodes + edges). Measured
# 2026-12-04: every instance of at most 64 pods tried (61: the hard families at 8 and 16 pods,
# d in {8, 16}, seeds 0-2, and the 32-pod hybrid preset) ends on the same wiring as with no
# budget; at 256 pods (S = 2e5 on the moe job of benchmarks/ocs_scale.py) the search stops
# after about 0.1 s, at 1,024 pods (S = 2.5e6) after about 1 s.
DEFAULT_MAX_MOVES = 20_000_000
WORK_REF_SIZE = 200_000
DEFAULT_KICKS = 64  # perturbations of the iterated local search
KICK_MOVES = 2_000  # candidate moves of the short search after a kick
_WORK_MAX = 2**62  # the compiled kernels count work in int64


@dataclass
class Prepared:
    """The part of :func:`round_wiring` that reads no fractional wiring (:func:`prepare`):
    the reduced DAG at ``b2`` (soft constants also at ``b2 / SOFTER``), the work budget, the two
    iterative roundings from the empty wiring and, with the class steps, the class-uniform
    start and the class budget it spent. ``key``: the ``(b2, max_moves, classes)`` it is for."""

    key: tuple[float, int, bool]
    red: _Reduced
    max_work: int
    iterative: tuple[np.ndarray, np.ndarray]
    uniform: np.ndarray | None
    class_work: int


def prepare(
    cost, model: OcsModel, b2: float, max_moves: int = DEFAULT_MAX_MOVES, classes: bool = True
) -> Prepared:
    """The steps of :func:`round_wiring` that need no fractional wiring: the reduced DAG and
    budget, the iterative roundings at ``b2`` and ``b2 / SOFTER`` and (``classes``) the best
    class-uniform wiring, completed; a caller may run them while the solver runs
    (:func:`.planner.plan`) and pass the result on as ``prepared``."""
    _check_moves(max_moves)
    b2 = _check_b2(b2)
    soft = b2 / SOFTER
    red = _Reduced(cost, model, b2, (soft,))
    size = setup_work(red)
    max_work = min(_WORK_MAX, int(max_moves) + int(max_moves) * size // WORK_REF_SIZE)
    empty = np.zeros(model.n_pairs, dtype=np.int64)
    iterative = (
        _iterative_rounding(red, model, empty, b2),
        _iterative_rounding(_at(red, soft), model, empty, soft),
    )
    uniform, class_work = None, 0
    if classes:  # the class steps share a budget of their own (half the search's)
        uniform, _, class_work = best_class_uniform(
            red, model, pair_classes(red, model.n_pairs), max_work // 2, b2
        )
        if uniform is not None:
            uniform = _fill(model, uniform, np.bincount(red.pair, red.bits, model.n_pairs))
    return Prepared(
        (b2, int(max_moves), bool(classes)), red, max_work, iterative, uniform, class_work
    )


def _check_moves(max_moves) -> None:
    if not (isinstance(max_moves, (int, np.integer)) and max_moves >= 1):
        raise ConfigError("max_moves", "must be an integer >= 1")


def _check_b2(b2) -> float:
    if not (b2 > 0 and np.isfinite(b2)):
        raise ConfigError("b2", "must be finite and > 0")
    return float(b2)


def round_wiring(
    cost,
    model: OcsModel,
    x_frac: np.ndarray,
    b2: float | None = None,
    max_moves: int = DEFAULT_MAX_MOVES,
    seed: int = 0,
    kicks: int = DEFAULT_KICKS,
    classes: bool = True,
    prepared: Prepared | None = None,
) -> RoundResult:
    """Integer wiring (degrees ``≤ d``) from a fractional one, searched on the hard critical path.

    1. **Roundings** (distinct ones kept, searched from the best by hard critical path):
       iterative, by the marginals of the integer wiring being built, from the empty wiring at
       ``b2`` and at ``b2 / SOFTER`` (:func:`_iterative_rounding`); cost-aware from
       ``floor(x_frac)`` by the Gibbs marginals at ``x_frac`` at the same two temperatures
       (:func:`_marginal_rounding`); ``floor(x_frac)`` plus the largest fractional parts; with
       ``classes``, the best class-uniform wiring (:mod:`.class_uniform`: every pair of a
       traffic class holds the same count, the dark ports left completed by traffic). Each
       is completed by :func:`_fill` (at most one pod keeps dark ports).
    2. **Local search** from each (:func:`.search._polish`) with the smoothed cost at ``b2``,
       then at ``b2 / SOFTER`` (it sees many near-critical paths and balances them), then at
       ``b2`` again (a small budget is spent on the sharp search first).
       Moves from a pair ``(u, v)`` of a comm node on a hard critical path (targets by the
       time one more circuit saves there) add one circuit there, each end using a dark port or
       a donor circuit ``(u, a)``, ``(v, b)`` (tried by increasing penalty: how far one circuit
       less would push the donor's longest path over the critical path; ties in a ``seed``-ed
       order), the freed ends closed by ``(a, b)`` or by a dark port elsewhere (else left
       dark). Accepted if the hard critical path drops, or ties and the smoothed one ``U``
       drops; first improvement with "don't look" bits, until no move improves or the work
       budget is spent (below).
    3. **Class moves** (``classes``, :func:`_class_moves`): take a whole pair class (pairs with
       the same traffic role) off the circuits, re-spend its ports, search; keep the result
       when it is strictly better.
    4. **Iterated local search** while budget is left: up to ``kicks`` times, a 2-swap at
       the critical path of the best wiring that the search rejected (:func:`.search.kick`:
       targets by gain, donors by penalty rank, enumerated), then a short search
       (at most ``KICK_MOVES`` candidate moves) in which the kicked pairs may not donate (so it
       cannot just undo the kick); a strictly better result becomes the best, is searched to its
       local optimum, and the kicks restart from its first. A kick is charged the work of
       rebuilding the search state and ranking every pair (:func:`.search.setup_work` + pairs).
    5. **Completion** (:func:`_complete`) of a pod left with two or more dark ports where that
       does not lengthen the hard critical path. The best result is returned.

    Candidates are evaluated exactly by compiled sweeps over the DAG with the parallel comm
    nodes of every phase merged into one max (and LSE) node (:class:`.search._Reduced`),
    restarted at the first merged node that changed, behind an exact lower-bound test and, for
    ties of the hard critical path, the convexity bound ``Δ(b2 U) ≥ Σ_r μ_r Δ(b2 t_r)``.

    **Work budget** (steps 2-4): counted in work units, the elementary operations the search
    performs (:func:`.search._polish`: comm nodes, group members, merged DAG nodes and edges
    touched by each scan and candidate evaluation, plus :func:`.search.setup_work` per search
    and kick), never in seconds, so the same seed gives the same wiring on a cold and a warm
    compile cache. A candidate costs tens of units on a small instance and about 10^5 on a
    1,024-pod MoE phase, so the budget bounds the search's running time at every size. It is
    ``max_moves · (1 + S / WORK_REF_SIZE)`` with ``S`` the instance size
    (:func:`.search.setup_work`): a big instance gets a longer search in proportion; the search
    ends at most one scan of the candidate list past it. The class steps (the class-uniform
    start of step 1, then the class moves of step 3) have a budget of their own,
    ``max_work / 2`` (the search of step 2 often spends all of its own).

    ``cost``: a :class:`~trainfabric.ocs.wiring.cost.PathCost` (``dag``, ``comm_nodes``,
    ``comm_pair``, ``marginals``, ``hard``, ``log_paths``); ``x_frac`` [P] circuits (its floor
    must fit the ports); ``b2`` (1/s), default ``50·max(log|Π|, 1) / CP(x_frac)``;
    ``max_moves`` ≥ 1 (work units per reference size, above); ``kicks`` ≥ 0; ``seed`` orders
    ties; ``classes``: start from the class-uniform wiring (step 1) and run the class moves
    of step 3, both within the class budget (``max_work / 2``); ``prepared``: what
    :func:`prepare` computed for the same ``cost``, ``model``, ``b2``, ``max_moves`` and
    ``classes`` (computed here when None; the result is the same either way).
    """
    t0 = time.perf_counter()
    x = _check_frac(model, x_frac)
    _check_moves(max_moves)
    if not (isinstance(kicks, (int, np.integer)) and kicks >= 0):
        raise ConfigError("kicks", "must be an integer >= 0")
    if b2 is None:
        cp = cost.hard(x)
        b2 = 50.0 * max(cost.log_paths(), 1.0) / cp if cp > 0 else 1.0
    b2 = _check_b2(b2)
    if prepared is None:
        prepared = prepare(cost, model, b2, max_moves, classes)
    elif prepared.key != (b2, int(max_moves), bool(classes)):
        raise ConfigError("prepared", "was prepared for another b2, max_moves or classes")
    red, max_work, class_work = prepared.red, prepared.max_work, prepared.class_work
    x0 = _floor(model, x)
    soft = b2 / SOFTER
    red_soft = _at(red, soft)
    size = setup_work(red)
    starts: list[np.ndarray] = []
    for start in (
        *prepared.iterative,
        _marginal_rounding(cost, model, x, x0, b2),
        _marginal_rounding(cost, model, x, x0, soft),
        _fill(model, x0, x - x0),
        *([] if prepared.uniform is None else [prepared.uniform]),
    ):
        if not any(np.array_equal(start, other) for other in starts):
            starts.append(start)
    start_cp = [cost.hard(s) for s in starts]
    perm = np.random.default_rng(seed).permutation(model.n).astype(np.int64)
    best, best_cp = starts[int(np.argmin(start_cp))], float(min(start_cp))
    swaps = evaluations = work = 0
    for k in np.argsort(start_cp, kind="stable"):
        xi = starts[k]
        for r, temp in ((red, b2), (red_soft, soft), (red, b2)):
            if work >= max_work:
                break
            xi, cp, acc, ev, wk = polish(r, model, xi, temp, perm, max_work - work)
            swaps += acc
            evaluations += ev
            work += wk
            if cp < best_cp:
                best, best_cp = xi, cp
    if classes:  # step 2 often spends all of its own budget
        best, best_cp, acc, ev, wk = _class_moves(
            red, model, best, best_cp, b2, perm, max_work // 2 - class_work
        )
        swaps, evaluations, class_work = swaps + acc, evaluations + ev, class_work + wk
    # iterated local search: kick the best wiring off its local optimum, search again, keep
    # a strictly better result; each kick is charged the work of rebuilding the search state
    # and of ranking every pair's donor penalty
    kick_cost = size + model.n_pairs
    k = 0  # index of the next kick at the current best wiring
    for _ in range(kicks):
        if work + kick_cost >= max_work:
            break
        work += kick_cost
        kicked = kick(red, model, best, b2, k)
        k += 1
        if kicked is None:
            continue
        frozen = np.zeros(model.n_pairs, dtype=np.bool_)
        frozen[kicked[1]] = True
        y, cp, acc, ev, wk = polish(
            red, model, kicked[0], b2, perm, max_work - work, frozen, max_evals=KICK_MOVES
        )
        swaps += acc
        evaluations += ev
        work += wk
        if cp < best_cp * (1 - 1e-12):
            best, cp, acc, ev, wk = polish(red, model, y, b2, perm, max_work - work)
            best_cp = min(best_cp, cp)
            swaps += acc
            evaluations += ev
            work += wk
            k = 0
    best, best_cp = _complete(cost, model, best, best_cp)
    return RoundResult(
        x=best,
        hard_cp_s=float(best_cp),
        initial_cp_s=float(min(start_cp)),
        swaps=swaps,
        evaluations=evaluations,
        work=work,
        starts=len(starts),
        wall_s=time.perf_counter() - t0,
        class_work=class_work,
        reduced=red,
    )
