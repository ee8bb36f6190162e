"""Fractional wiring -> integer wiring with exact degrees (spec §1.8, step R).

* :func:`round_to_degrees` — ``x = floor(x_frac) + y`` where the residual ``y`` is a
  maximum-weight degree-constrained b-matching: ``Σ_u y_uv = ρ_v = d_v − Σ_u floor(x_frac)_uv``
  (exact integer program with HiGHS up to 5,000 candidate pairs, greedy + augmenting paths
  above); used by the baselines too.
* :func:`round_wiring` — cost-aware rounding (free ports by the marginal decrease of the
  smoothed critical path ``U``), then degree-preserving 2-swaps on the *hard* critical path,
  every candidate evaluated exactly by compiled incremental sweeps over a reduced DAG.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numba
import numpy as np
import scipy.sparse as sp

from trainfabric.errors import ConfigError
from trainfabric.ocs.highs import integer_program
from trainfabric.ocs.model import OcsModel

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
        if excess <= 0:
            return x0
        cand = np.flatnonzero((x0 > 0) & (iu != v) & (iv != v))
        order = cand[np.argsort(weight[cand], kind="stable")]
        take = np.minimum(x0[order], np.maximum(excess // 2, 1))
        take = take[: int(np.searchsorted(np.cumsum(take), excess // 2)) + 1]
        x0[order[: take.size]] -= take


def _havel_hakimi(rho: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One loopless multigraph with degrees ``rho`` (``max ≤ Σ/2``, ``Σ`` even): repeatedly
    join the two pods with the most free ports. Returns the pair endpoints ``(a, b)``, ``a < b``,
    with repetitions for parallel circuits."""
    a, b = _hh_kernel(rho.astype(np.int64))
    return np.minimum(a, b), np.maximum(a, b)


@numba.njit(cache=True)
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
    second (lexicographic). HiGHS (:func:`.highs.integer_program`); if the time limit passes before
    it has a point, the greedy one is used. Returns ``[z, t]`` on ``cand``.
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


@numba.njit(cache=True)
def _pair_id(n, u, v):  # pragma: no cover - compiled
    a, b = min(u, v), max(u, v)
    return a * n - a * (a + 1) // 2 + (b - a - 1)


@numba.njit(cache=True)
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
        k = int(np.flatnonzero((z > 0) & (iu[cand] != v) & (iv[cand] != v))[0])
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


# -- cost-aware rounding + hard critical-path polishing -----------------------------------------


@dataclass
class RoundResult:
    """Outcome of :func:`round_wiring` (times in seconds).

    ``x``: integer wiring [P] with exact degrees; ``hard_cp_s``: its hard critical path;
    ``initial_cp_s``: hard critical path of the cost-aware rounding before polishing;
    ``swaps``: accepted 2-swaps; ``evaluations``: candidate wirings evaluated; ``wall_s``.
    """

    x: np.ndarray
    hard_cp_s: float
    initial_cp_s: float
    swaps: int
    evaluations: int
    wall_s: float


class _Reduced:
    """The task DAG reduced for fast exact re-evaluation.

    Every set of *parallel* comm nodes (same single predecessor and successor: the branches of
    one phase) becomes one group node whose duration is the maximum (soft: the LSE) of its
    members'; comm nodes that are not plain branches are groups of one. Then the fixed nodes
    are contracted series-parallel (:func:`_contract`). Hard and soft (``b2``) longest paths
    are unchanged, the DAG shrinks to about one node per phase, and a change of a few pairs
    only moves the groups holding them.

    Arrays (numbered in a topological order): ``fixed`` [R] constant duration of every node
    (s) and ``fixed_soft`` its soft counterpart (scaled by ``b2``), both added to the group
    value of a group node; ``group`` [R] (group id or -1); predecessor CSR
    ``pindptr``/``pindices``, successor CSR ``sindptr``/``sindices``; per group its node
    ``g_rnode`` and member CSR ``g_ptr``/``g_comm``; per comm node ``c`` (in
    ``cost.comm_nodes`` order) ``comm_group``, ``pair``, ``bits``, ``latency``; per pair the
    CSR ``pair_ptr``/``pair_comm``.
    """

    def __init__(self, cost, model: OcsModel, b2: float):
        dag = cost.dag
        n = dag.n_nodes
        comm = np.asarray(cost.comm_nodes, dtype=np.int64)
        src = np.repeat(np.arange(n, dtype=np.int64), np.diff(dag.indptr))
        dst = dag.indices.astype(np.int64)
        indeg = np.bincount(dst, minlength=n)
        outdeg = np.diff(dag.indptr)
        pred = np.full(n, -1, dtype=np.int64)
        pred[dst] = src  # the predecessor where there is exactly one
        succ = np.full(n, -1, dtype=np.int64)
        succ[src] = dst
        plain = (indeg[comm] == 1) & (outdeg[comm] == 1)
        # group key: (pred, succ) for plain branches, a unique negative key otherwise
        key = np.where(plain, pred[comm] * n + succ[comm], -1 - np.arange(comm.size))
        _, comm_group = np.unique(key, return_inverse=True)
        n_groups = int(comm_group.max()) + 1 if comm.size else 0
        # representative (first member) of every group orders the merged DAG topologically
        rep = np.full(n_groups, n, dtype=np.int64)
        np.minimum.at(rep, comm_group, comm)
        is_comm = np.zeros(n, dtype=bool)
        is_comm[comm] = True
        other = np.flatnonzero(~is_comm)
        order_key = np.concatenate([other, rep])
        order = np.argsort(order_key, kind="stable")
        r_of_item = np.empty(order.size, dtype=np.int64)
        r_of_item[order] = np.arange(order.size)
        node_r = np.empty(n, dtype=np.int64)
        node_r[other] = r_of_item[: other.size]
        node_r[comm] = r_of_item[other.size + comm_group]
        n_r = order.size
        group = np.full(n_r, -1, dtype=np.int64)
        group[r_of_item[other.size :]] = np.arange(n_groups)
        fixed = np.zeros(n_r)
        fixed[node_r[other]] = dag.duration_s[other]
        r_of_group = r_of_item[other.size :]
        fixed, soft, group, es, ed, new_of = _contract(
            fixed, b2 * fixed, group, node_r[src], node_r[dst]
        )
        n_r = fixed.size
        edge = np.unique(ed * n_r + es)  # sorted by (dst, src): predecessor CSR
        self.pindices = (edge % n_r).astype(np.int64)
        self.pindptr = np.searchsorted(edge // n_r, np.arange(n_r + 1)).astype(np.int64)
        succ_edge = np.unique(self.pindices * n_r + edge // n_r)
        self.sindices = (succ_edge % n_r).astype(np.int64)
        self.sindptr = np.searchsorted(succ_edge // n_r, np.arange(n_r + 1)).astype(np.int64)
        self.fixed, self.fixed_soft, self.group = fixed, soft, group
        self.g_rnode = new_of[r_of_group].astype(np.int64)
        self.comm_group = comm_group.astype(np.int64)
        self.pair = np.asarray(cost.comm_pair, dtype=np.int64)
        self.bits = 8.0 * dag.bytes[comm].astype(float)
        self.latency = dag.latency_s[comm].astype(float)
        by_pair = np.argsort(self.pair, kind="stable")
        self.pair_comm = by_pair.astype(np.int64)
        self.pair_ptr = np.searchsorted(self.pair[by_pair], np.arange(model.n_pairs + 1))
        by_group = np.argsort(self.comm_group, kind="stable")
        self.g_comm = by_group.astype(np.int64)
        self.g_ptr = np.searchsorted(self.comm_group[by_group], np.arange(n_groups + 1))


def _contract(hard, soft, group, es, ed):
    """Series-parallel contraction of the merged DAG, exact for the hard and the soft sweeps.

    Every node carries constants ``hard`` (s) and ``soft`` (scaled by ``b2``) added to its
    group's maximum / LSE (groups: comm phases; -1: fixed nodes). Repeated to a fixpoint:
    (1) a fixed node whose only predecessor has it as only successor joins that predecessor
    (series: both constants add); (2) a fixed node whose only successor is a group node with
    it as only predecessor joins that group node; (3) fixed nodes with the same single
    predecessor and single successor merge into one (parallel: max of ``hard``, LSE of
    ``soft``). Merged nodes take the place of their first node, so edges still go from lower
    to higher numbers. Returns the contracted arrays, edges and the old -> new node map.
    """
    n0 = hard.size
    new_of = np.arange(n0)
    for _ in range(64):
        n_r = hard.size
        key = np.unique(es * n_r + ed)
        es, ed = key // n_r, key % n_r
        indeg = np.bincount(ed, minlength=n_r)
        outdeg = np.bincount(es, minlength=n_r)
        one = (outdeg[es] == 1) & (indeg[ed] == 1)
        parent = np.arange(n_r)
        series1 = one & (group[ed] < 0)
        series2 = one & (group[es] < 0) & (group[ed] >= 0)
        if series1.any():
            parent[ed[series1]] = es[series1]
        elif series2.any():
            parent[ed[series2]] = es[series2]
        else:
            alone = (indeg == 1) & (outdeg == 1) & (group < 0)
            pred = np.full(n_r, -1)
            succ = np.full(n_r, -1)
            pred[ed] = es
            succ[es] = ed
            cand = np.flatnonzero(alone)
            k = pred[cand] * n_r + succ[cand]
            _, first, inv, cnt = np.unique(
                k, return_index=True, return_inverse=True, return_counts=True
            )
            multi = cnt[inv] > 1
            if not multi.any():
                break
            parent[cand[multi]] = cand[first[inv[multi]]]
        while True:  # pointer jumping to the chain roots
            nxt = parent[parent]
            if np.array_equal(nxt, parent):
                break
            parent = nxt
        roots = np.unique(parent)
        pos = np.searchsorted(roots, parent)
        if series1.any() or series2.any():
            h = np.bincount(pos, hard, roots.size)
            sf = np.bincount(pos, soft, roots.size)
        else:
            h = np.full(roots.size, -np.inf)
            np.maximum.at(h, pos, hard)
            sf = np.full(roots.size, -np.inf)
            np.logaddexp.at(sf, pos, soft)
        g = np.full(roots.size, -1, dtype=np.int64)
        has = group >= 0
        g[pos[has]] = group[has]
        es, ed = pos[es], pos[ed]
        keep = es != ed
        es, ed = es[keep], ed[keep]
        hard, soft, group = h, sf, g
        new_of = pos[new_of]
    return hard, soft, group, es, ed, new_of


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
    worth it); the ports it leaves free are filled by :func:`_distribute` (augmenting paths,
    then extras), weighted by the next unit's gain.
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
    return _distribute(model, x1, nxt, None, False)


_UNITS_PER_PAIR = 8  # circuits per pair the unit-greedy considers beyond floor(x_frac)


@numba.njit(cache=True)
def _take_units(unit_pair, unit_k, iu, iv, x, x0, left):  # pragma: no cover - compiled
    for i in range(unit_pair.size):
        e = unit_pair[i]
        u, v = iu[e], iv[e]
        if left[u] > 0 and left[v] > 0 and x[e] - x0[e] == unit_k[i]:
            x[e] += 1
            left[u] -= 1
            left[v] -= 1


def _spent(t0: float | None, budget_s: float | None) -> bool:
    """Whether ``budget_s`` seconds have passed since ``t0`` (never without both)."""
    return budget_s is not None and t0 is not None and time.perf_counter() - t0 >= budget_s


def round_wiring(
    cost,
    model: OcsModel,
    x_frac: np.ndarray,
    b2: float | None = None,
    time_budget_s: float | None = None,
    seed: int = 0,
) -> RoundResult:
    """Cost-aware rounding of a fractional wiring, polished on the hard critical path.

    1. **Three roundings** ``x = floor(x_frac) + y``: (a) cost-aware
       (:func:`_marginal_rounding`): free ports go one circuit at a time to the largest
       linearised decrease of the smoothed critical path, ``A_e (f(x_e) − f(x_e + 1))``,
       ``f(y) = 1/(B y + B0)``, ``A_e = Σ_{m∈e} μ_m · 8 b_m`` with the Gibbs marginals ``μ`` at
       ``x_frac`` and ``b2`` (any pair may take circuits, so an integral ``x_frac`` is a valid
       start too); (b) the same with ``μ`` at ``b2 / 10`` (marginals spread over more
       near-critical paths); (c) the plain rounding by fractional parts
       (:func:`round_to_degrees`).
    2. **Polishing** of each distinct start (the best result is returned): degree-preserving 2-swaps
       ``(u,a),(v,b) → (u,v),(a,b)`` where ``(u,v)`` is the pair of a comm node on a hard
       critical path (targets by the time one more circuit saves there) and the donors
       ``(u,a)``, ``(v,b)`` are wired pairs, tried by increasing penalty (how far one circuit
       less would push their longest path over the critical path), ties in a ``seed``-ed
       order. A swap is accepted if it lowers the hard critical path, or keeps it and lowers
       the smoothed one ``U`` at ``b2`` (which sees the parallel near-critical pairs that keep
       the hard one from moving); first improvement with "don't look" bits on failed targets,
       until no swap improves (the last scan is without the bits) or ``time_budget_s`` of
       polishing runs out. The budget is counted from the end of the first polishing step, so
       compiling the kernel on a cold cache never eats it (same seed, same plan, cold or warm).

    Candidates are evaluated exactly by compiled sweeps over the DAG with the parallel comm
    nodes of every phase merged into one max (and LSE) node (:class:`_Reduced`), restarted at
    the first merged node that changed, behind an exact lower-bound test and, for ties of the
    hard critical path, the convexity bound ``Δ(b2 U) ≥ Σ_r μ_r Δ(b2 t_r)``.

    ``cost``: a :class:`~trainfabric.ocs.cost.PathCost` (``dag``, ``comm_nodes``,
    ``comm_pair``, ``marginals``, ``hard``, ``log_paths``); ``x_frac`` [P] circuits; ``b2``
    (1/s), default ``50·max(log|Π|, 1) / CP(x_frac)``.
    """
    t0 = time.perf_counter()
    x = _check_frac(model, x_frac)
    if time_budget_s is not None and not time_budget_s > 0:
        raise ConfigError("time_budget_s", "must be > 0")
    if b2 is None:
        cp = cost.hard(x)
        b2 = 50.0 * max(cost.log_paths(), 1.0) / cp if cp > 0 else 1.0
    elif not (b2 > 0 and np.isfinite(b2)):
        raise ConfigError("b2", "must be finite and > 0")
    b2 = float(b2)
    x0 = _floor(model, x)
    starts = []
    for start in (
        _marginal_rounding(cost, model, x, x0, b2),
        _marginal_rounding(cost, model, x, x0, b2 / 10.0),
        _distribute(model, x0, x - x0, x - x0 > _INT_TOL, False),
    ):
        if not any(np.array_equal(start, other) for other in starts):
            starts.append(start)
    initial_cp = min(cost.hard(s) for s in starts)
    red = _Reduced(cost, model, b2)
    iu, iv = (a.astype(np.int64) for a in model.pairs)
    perm = np.random.default_rng(seed).permutation(model.n).astype(np.int64)
    chunk = 1 if time_budget_s else 1 << 62
    best, best_cp = None, np.inf
    swaps = evaluations = 0
    polish_t0 = None  # set once the polishing kernel has run (and so is compiled)
    for start in starts:
        if best is not None and _spent(polish_t0, time_budget_s):
            break
        xi = start.copy()
        state = _polish_state(red, model, xi, b2)
        while True:
            done, acc, ev = _polish(
                xi, iu, iv, model.n, perm, model.rate_bps, model.fallback_bps, b2,
                red.fixed, red.fixed_soft, red.group, red.pindptr, red.pindices, red.sindptr,
                red.sindices,
                red.comm_group, red.pair, red.bits, red.latency, red.pair_ptr, red.pair_comm,
                red.g_ptr, red.g_rnode, *state, chunk,
            )  # fmt: skip
            swaps += acc
            evaluations += ev
            polish_t0 = time.perf_counter() if polish_t0 is None else polish_t0
            if done or _spent(polish_t0, time_budget_s):
                break
        cp = cost.hard(xi)
        if cp < best_cp:
            best, best_cp = xi, cp
    return RoundResult(
        x=best,
        hard_cp_s=float(best_cp),
        initial_cp_s=float(initial_cp),
        swaps=swaps,
        evaluations=evaluations,
        wall_s=time.perf_counter() - t0,
    )


def _polish_state(red: _Reduced, model: OcsModel, x: np.ndarray, b2: float) -> tuple:
    """Mutable arrays of the polishing kernel: comm durations (s), group members sorted by
    decreasing duration, group maxima (s) and group log-sum-exps (scaled by ``b2``)."""
    dur = red.latency + red.bits / (model.rate_bps * x[red.pair] + model.fallback_bps)
    g_sorted, gval, glse = _group_state(red.g_ptr, red.g_comm, dur, b2)
    return dur, g_sorted, gval, glse


@numba.njit(cache=True)
def _group_state(g_ptr, g_comm, dur, b2):  # pragma: no cover - compiled
    n_groups = g_ptr.size - 1
    g_sorted = g_comm.copy()
    gval = np.zeros(n_groups)
    glse = np.zeros(n_groups)
    for g in range(n_groups):
        lo, hi = g_ptr[g], g_ptr[g + 1]
        seg = g_sorted[lo:hi].copy()
        g_sorted[lo:hi] = seg[np.argsort(-dur[seg], kind="mergesort")]
        top = dur[g_sorted[lo]]
        acc = 0.0
        for idx in range(lo, hi):
            acc += np.exp(b2 * (dur[g_sorted[idx]] - top))
        gval[g] = top
        glse[g] = b2 * top + np.log(acc)
    return g_sorted, gval, glse


_NEGLIGIBLE = 1e-18  # terms below this fraction of a group's largest are dropped from its LSE


@numba.njit(cache=True)
def _group_sum(g, g_ptr, g_sorted, dur, pair, ch, top, b2):  # pragma: no cover - compiled
    """``Σ exp(b2 (t_c − top))`` over the members of group ``g`` whose pair is not in ``ch``,
    walking the members by decreasing duration and stopping once a term is negligible (every
    later one is smaller)."""
    s = 0.0
    for idx in range(g_ptr[g], g_ptr[g + 1]):
        c = g_sorted[idx]
        q = pair[c]
        if q == ch[0] or q == ch[1] or q == ch[2] or q == ch[3]:
            continue
        term = np.exp(b2 * (dur[c] - top))
        if term < _NEGLIGIBLE:
            break
        s += term
    return s


@numba.njit(cache=True)
def _lae(a, b):  # pragma: no cover - compiled
    """``log(exp(a) + exp(b))``."""
    if a < b:
        a, b = b, a
    if b == -np.inf:
        return a
    return a + np.log1p(np.exp(b - a))


@numba.njit(cache=True)
def _lse_preds(r, pindptr, pindices, beta, beta2, rmin):  # pragma: no cover - compiled
    """``LSE_{j ∈ pred(r)} β_j`` (0 for a root), ``β_j`` from ``beta2`` for ``j ≥ rmin``."""
    lo, hi = pindptr[r], pindptr[r + 1]
    if hi == lo:
        return 0.0
    if hi == lo + 1:
        j = pindices[lo]
        return beta2[j] if j >= rmin else beta[j]
    m = -np.inf
    for k in range(lo, hi):
        j = pindices[k]
        m = max(m, beta2[j] if j >= rmin else beta[j])
    acc = 0.0
    for k in range(lo, hi):
        j = pindices[k]
        acc += np.exp((beta2[j] if j >= rmin else beta[j]) - m)
    return m + np.log(acc)


@numba.njit(cache=True)
def _hard_sweeps(fixed, group, gval, pindptr, pindices, sindptr, sindices):  # pragma: no cover
    """Hard sweeps of the merged DAG: durations ``rdur`` (s), earliest finishes, prefix maxima
    of the finishes (the hard CP is the last) and longest tails."""
    n_r = fixed.size
    rdur = np.empty(n_r)
    for r in range(n_r):
        g = group[r]
        rdur[r] = fixed[r] + (gval[g] if g >= 0 else 0.0)
    finish = np.empty(n_r)
    pmax = np.empty(n_r)
    best = 0.0
    for r in range(n_r):
        f = 0.0
        for k in range(pindptr[r], pindptr[r + 1]):
            f = max(f, finish[pindices[k]])
        finish[r] = f + rdur[r]
        best = max(best, finish[r])
        pmax[r] = best
    tail = np.zeros(n_r)
    for r in range(n_r - 1, -1, -1):
        t = 0.0
        for k in range(sindptr[r], sindptr[r + 1]):
            j = sindices[k]
            t = max(t, rdur[j] + tail[j])
        tail[r] = t
    return rdur, finish, pmax, tail


@numba.njit(cache=True)
def _soft_sweeps(
    fixed_soft, group, glse, pindptr, pindices, sindptr, sindices
):  # pragma: no cover - compiled
    """Soft sweeps (scaled by ``b2``): node terms ``soft``, forward ``β_r = soft_r + LSE_{pred}
    β``, prefix LSEs of the leaves' ``β`` (``b2 U`` is the last) and the Gibbs marginals
    ``μ_r = exp(β_r + γ_r − b2 U)``, ``γ_r = LSE_{succ} (soft + γ)``."""
    n_r = fixed_soft.size
    soft = np.empty(n_r)
    for r in range(n_r):
        g = group[r]
        soft[r] = fixed_soft[r] + (glse[g] if g >= 0 else 0.0)
    beta = np.empty(n_r)
    pleaf = np.empty(n_r)
    leaf = -np.inf
    for r in range(n_r):
        beta[r] = soft[r] + _lse_preds(r, pindptr, pindices, beta, beta, n_r)
        if sindptr[r] == sindptr[r + 1]:
            leaf = _lae(leaf, beta[r])
        pleaf[r] = leaf
    head = np.empty(n_r)  # soft_r + γ_r
    mu = np.empty(n_r)
    for r in range(n_r - 1, -1, -1):
        gam = _lse_preds(r, sindptr, sindices, head, head, n_r)
        head[r] = soft[r] + gam
        mu[r] = np.exp(beta[r] + gam - leaf)
    return soft, beta, pleaf, mu


@numba.njit(cache=True)
def _donors(x, pen, perm, n, u, skip):  # pragma: no cover - compiled
    """Pods ``a ∉ {u, skip}`` with a circuit on ``(u, a)``, by increasing donor penalty
    (ties in the seeded order ``perm``)."""
    pods = np.empty(n, dtype=np.int64)
    key = np.empty(n)
    k = 0
    for i in range(n):
        a = perm[i]
        if a != u and a != skip:
            q = _pair_id(n, u, a)
            if x[q] > 0:
                pods[k] = a
                key[k] = pen[q]
                k += 1
    return pods[:k][np.argsort(key[:k], kind="mergesort")]


@numba.njit(cache=True)
def _resort(g, g_ptr, g_sorted, dur, pair, ch, buf):  # pragma: no cover - compiled
    """Restore decreasing-duration order of group ``g`` after its members on the pairs ``ch``
    changed: merge the (re-sorted) moved members into the unmoved ones, O(group size)."""
    lo, hi = g_ptr[g], g_ptr[g + 1]
    n_keep = 0
    n_move = 0
    for idx in range(lo, hi):
        c = g_sorted[idx]
        q = pair[c]
        if q == ch[0] or q == ch[1] or q == ch[2] or q == ch[3]:
            buf[n_move] = c
            n_move += 1
        else:
            g_sorted[lo + n_keep] = c
            n_keep += 1
    moved = buf[:n_move][np.argsort(-dur[buf[:n_move]], kind="mergesort")]
    i = lo + n_keep - 1
    j = n_move - 1
    for out in range(hi - 1, lo - 1, -1):  # merge from the back (smallest first)
        if j < 0:
            break
        if i >= lo and dur[g_sorted[i]] < dur[moved[j]]:
            g_sorted[out] = g_sorted[i]
            i -= 1
        else:
            g_sorted[out] = moved[j]
            j -= 1


@numba.njit(cache=True)
def _polish(
    x, iu, iv, n, perm, rate, fallback, b2,
    fixed, fixed_soft, group, pindptr, pindices, sindptr, sindices,
    comm_group, pair, bits, lat, pair_ptr, pair_comm, g_ptr, g_rnode,
    dur, g_sorted, gval, glse, max_accepts,
):  # fmt: skip  # pragma: no cover - compiled
    """Up to ``max_accepts`` first-improvement 2-swaps (see :func:`round_wiring`); returns
    ``(local_optimum_reached, accepted, evaluations)``. Mutates ``x``, ``dur``, ``g_sorted``,
    ``gval``, ``glse``.

    A candidate changes four pairs ``ch`` (+1, +1, −1, −1). Its evaluation: the new maxima of
    the groups holding them (walk each group's sorted members to the first unchanged one), an
    exact lower bound on the new hard CP, the exact hard sweep from the first changed merged
    node, and, only on a tie of the hard CP, the groups' new LSEs, the first-order lower bound
    ``Δ(b2 U) ≥ Σ_r μ_r Δsoft_r`` (U is convex in the node terms) and then the exact soft sweep.
    """
    n_groups = gval.size
    n_r = fixed.size
    n_pairs = x.size
    gstamp = np.zeros(n_groups, dtype=np.int64)
    gnew = np.zeros(n_groups)
    gsum = np.zeros(n_groups)  # new scaled LSE of an affected group
    gold = np.zeros(n_groups)
    gadd = np.zeros(n_groups)
    aff = np.empty(n_groups, dtype=np.int64)
    f2 = np.empty(n_r)
    beta2 = np.empty(n_r)
    pmark = np.zeros(n_pairs, dtype=np.int64)
    buf = np.empty(max(1, np.diff(g_ptr).max() if n_groups else 1), dtype=np.int64)
    ch = np.empty(4, dtype=np.int64)
    dx = np.array([1, 1, -1, -1])
    targets = np.empty(n_pairs, dtype=np.int64)
    gains = np.empty(n_pairs)
    pen = np.empty(n_pairs)
    # "don't look" bits: a target whose every swap failed is skipped until a swap touches one
    # of its pods; a scan that skipped targets is repeated without the bits before stopping
    idle = np.zeros(n_pairs, dtype=np.bool_)
    stamp = 0
    accepted = 0
    evals = 0
    soft = beta = pleaf = mu = np.empty(0)  # soft sweeps: computed on the first hard tie
    u_cur = tol_u = 0.0
    while accepted < max_accepts:
        rdur, finish, pmax, tail = _hard_sweeps(
            fixed, group, gval, pindptr, pindices, sindptr, sindices
        )
        soft_ready = False
        cp = pmax[n_r - 1]
        tol = 1e-12 * cp
        # targets: pairs of comm nodes on a hard critical path, by the time one circuit saves
        n_t = 0
        stamp += 1
        for g in range(n_groups):
            r = g_rnode[g]
            if finish[r] + tail[r] < cp - tol:
                continue
            for idx in range(g_ptr[g], g_ptr[g + 1]):
                c = g_sorted[idx]
                if dur[c] < gval[g] - tol:
                    break
                p = pair[c]
                if pmark[p] != stamp:
                    pmark[p] = stamp
                    targets[n_t] = p
                    gains[n_t] = dur[c] - lat[c] - bits[c] / (rate * (x[p] + 1) + fallback)
                    n_t += 1
        order = np.argsort(-gains[:n_t], kind="mergesort")
        # donor penalty of every wired pair: how far one circuit less would push its longest
        # path above the critical path (s); donors are tried in increasing penalty
        pen[:] = -np.inf
        for c in range(pair.size):
            q = pair[c]
            if x[q] > 0:
                r = g_rnode[comm_group[c]]
                d = lat[c] + bits[c] / (rate * (x[q] - 1) + fallback)
                g = comm_group[c]
                pen[q] = max(pen[q], finish[r] - gval[g] + d + tail[r] - cp)
        found = False
        skipped = False
        for t in order:
            p = targets[t]
            if idle[p]:
                skipped = True
                continue
            u, v = iu[p], iv[p]
            don_u = _donors(x, pen, perm, n, u, v)
            don_v = _donors(x, pen, perm, n, v, u)
            for a in don_u:
                pa = _pair_id(n, u, a)
                for b in don_v:
                    if b == a:
                        continue
                    pb = _pair_id(n, v, b)
                    ch[0], ch[1], ch[2], ch[3] = p, _pair_id(n, a, b), pa, pb
                    evals += 1
                    # new maxima of the groups holding the four changed pairs
                    stamp += 1
                    n_aff = 0
                    for k in range(4):
                        q = ch[k]
                        rq = rate * (x[q] + dx[k]) + fallback
                        for idx in range(pair_ptr[q], pair_ptr[q + 1]):
                            c = pair_comm[idx]
                            g = comm_group[c]
                            d = lat[c] + bits[c] / rq
                            if gstamp[g] != stamp:
                                gstamp[g] = stamp
                                gnew[g] = d
                                aff[n_aff] = g
                                n_aff += 1
                            elif d > gnew[g]:
                                gnew[g] = d
                    rmin = n_r
                    drop = 0.0
                    rise = -np.inf
                    for j in range(n_aff):
                        g = aff[j]
                        for idx in range(g_ptr[g], g_ptr[g + 1]):
                            c = g_sorted[idx]
                            q = pair[c]
                            if q != ch[0] and q != ch[1] and q != ch[2] and q != ch[3]:
                                gnew[g] = max(gnew[g], dur[c])
                                break
                        r = g_rnode[g]
                        rmin = min(rmin, r)
                        if gnew[g] < gval[g]:
                            drop += gval[g] - gnew[g]
                        elif gnew[g] > gval[g]:
                            rise = max(rise, finish[r] - gval[g] + gnew[g] + tail[r])
                    # a longest path through a group whose maximum rose keeps at least its old
                    # head + new maximum + old tail minus every decrease
                    if rise - drop > cp + tol:
                        continue
                    cp2 = pmax[rmin - 1] if rmin > 0 else 0.0
                    for r in range(rmin, n_r):
                        f = 0.0
                        for k in range(pindptr[r], pindptr[r + 1]):
                            j = pindices[k]
                            f = max(f, f2[j] if j >= rmin else finish[j])
                        g = group[r]
                        moved = g >= 0 and gstamp[g] == stamp
                        f2[r] = f + (fixed[r] + gnew[g] if moved else rdur[r])
                        cp2 = max(cp2, f2[r])
                    if cp2 > cp + tol:
                        continue
                    tie = cp2 >= cp - tol
                    if tie and not soft_ready:
                        soft, beta, pleaf, mu = _soft_sweeps(
                            fixed_soft, group, glse, pindptr, pindices, sindptr, sindices
                        )
                        u_cur = pleaf[n_r - 1]
                        tol_u = 1e-12 * abs(u_cur)
                        soft_ready = True
                    # new LSE of every affected group: old total (relative to the old maximum)
                    # − the changed members' old terms, + their new terms (relative to the new
                    # maximum); when the changed members held almost all of the old total
                    # (cancellation), the unchanged members are summed afresh, which is cheap
                    # then because the sum is steep
                    for j in range(n_aff):
                        gold[aff[j]] = 0.0
                        gadd[aff[j]] = 0.0
                    for k in range(4):
                        q = ch[k]
                        rq = rate * (x[q] + dx[k]) + fallback
                        for idx in range(pair_ptr[q], pair_ptr[q + 1]):
                            c = pair_comm[idx]
                            g = comm_group[c]
                            gold[g] += np.exp(b2 * (dur[c] - gval[g]))
                            gadd[g] += np.exp(b2 * (lat[c] + bits[c] / rq - gnew[g]))
                    lin = 0.0
                    for j in range(n_aff):
                        g = aff[j]
                        total = np.exp(glse[g] - b2 * gval[g])
                        rest = total - gold[g]
                        if rest < 1e-6 * total:
                            rest = _group_sum(g, g_ptr, g_sorted, dur, pair, ch, gnew[g], b2)
                            gsum[g] = b2 * gnew[g] + np.log(rest + gadd[g])
                        else:
                            gsum[g] = _lae(
                                b2 * gval[g] + np.log(rest), b2 * gnew[g] + np.log(gadd[g])
                            )
                        if tie:
                            lin += mu[g_rnode[g]] * (gsum[g] - glse[g])
                    if tie:  # the smoothed critical path must drop
                        if lin >= -tol_u:
                            continue
                        u2 = pleaf[rmin - 1] if rmin > 0 else -np.inf
                        for r in range(rmin, n_r):
                            g = group[r]
                            moved = g >= 0 and gstamp[g] == stamp
                            own = fixed_soft[r] + gsum[g] if moved else soft[r]
                            beta2[r] = own + _lse_preds(r, pindptr, pindices, beta, beta2, rmin)
                            if sindptr[r] == sindptr[r + 1]:
                                u2 = _lae(u2, beta2[r])
                        if u2 >= u_cur - tol_u:
                            continue
                    # accept
                    for k in range(4):
                        q = ch[k]
                        x[q] += dx[k]
                        rq = rate * x[q] + fallback
                        for idx in range(pair_ptr[q], pair_ptr[q + 1]):
                            c = pair_comm[idx]
                            dur[c] = lat[c] + bits[c] / rq
                    for j in range(n_aff):
                        g = aff[j]
                        _resort(g, g_ptr, g_sorted, dur, pair, ch, buf)
                        gval[g] = gnew[g]
                        glse[g] = gsum[g]
                    for w in (u, v, a, b):
                        for z in range(n):
                            if z != w:
                                idle[_pair_id(n, w, z)] = False
                    accepted += 1
                    found = True
                    break
                if found:
                    break
            if found:
                break
            idle[p] = True
        if not found:
            if not skipped:
                return True, accepted, evals
            idle[:] = False
    return False, accepted, evals
