"""Improvement search on the hard critical path (docs/ocs.md §1.8 step R.3): the reduced DAG and the
compiled kernels that evaluate wiring moves exactly.

* :class:`_Reduced` — the task DAG with the parallel comm nodes of every phase merged into one
  max (soft: LSE) node and the fixed nodes contracted series-parallel (exact).
* :func:`_polish` — first-improvement local search with a work budget counted in candidate
  evaluations. Moves from a target pair ``(u, v)`` on a hard critical path: each end either
  uses one of its dark ports or takes a circuit off a donor pair ``(u, a)`` / ``(v, b)``; the
  freed ends are closed by a circuit ``(a, b)`` (the degree-preserving 2-swap), or, when only one
  end ``a`` was freed (an endpoint shift) or both donors end at ``a`` (two circuits for one),
  one freed port of ``a`` is closed by a circuit to the pod with the most dark ports (the rest
  stay dark). Degrees stay ``≤ d`` throughout.
* :func:`kick` — the perturbation of the iterated local search (an enumerated 2-swap at the
  critical path that the local search rejected).
"""

from __future__ import annotations

import copy

import numba
import numpy as np

from trainfabric.ocs.model import OcsModel
from trainfabric.ocs.wiring.compress import edge_list


@numba.njit(cache=True, nogil=True)
def _pair_id(n, u, v):  # pragma: no cover - compiled
    a, b = min(u, v), max(u, v)
    return a * n - a * (a + 1) // 2 + (b - a - 1)


class _Reduced:
    """The task DAG reduced for fast exact re-evaluation.

    Every set of *parallel* comm nodes (same single predecessor and successor: the branches of
    one phase) becomes one group node whose duration is the maximum (soft: the LSE) of its
    members'; comm nodes that are not plain branches are groups of one. Then the fixed nodes
    are contracted series-parallel (:func:`_contract`). Hard and soft (``b2``) longest paths
    are unchanged, the DAG shrinks to about one node per phase, and a change of a few pairs
    only moves the groups holding them.

    Arrays (numbered in a topological order): ``fixed`` [R] constant duration of every node
    (s) and ``fixed_soft`` its soft counterpart (scaled by ``b2``; ``other_soft[b2']`` at each
    of the ``other_b2`` temperatures, used through :func:`_at`), both added to the group
    value of a group node; ``group`` [R] (group id or -1); predecessor CSR
    ``pindptr``/``pindices``, successor CSR ``sindptr``/``sindices``; per group its node
    ``g_rnode`` and member CSR ``g_ptr``/``g_comm``; per comm node ``c`` (in
    ``cost.comm_nodes`` order) ``comm_group``, ``pair``, ``bits``, ``latency``; per pair the
    CSR ``pair_ptr``/``pair_comm``.
    """

    def __init__(self, cost, model: OcsModel, b2: float, other_b2: tuple[float, ...] = ()):
        dag = cost.dag
        n = dag.n_nodes
        comm = np.asarray(cost.comm_nodes, dtype=np.int64)
        src, dst = edge_list(dag)
        comm_group = cost.compressed.comm_bundle
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
        temps = np.array((b2, *other_b2))
        fixed, soft, group, es, ed, new_of = _contract(
            fixed, fixed[:, None] * temps, group, node_r[src], node_r[dst]
        )
        # soft constants at the other temperatures (:meth:`at`)
        self.other_soft = {float(t): soft[:, k + 1].copy() for k, t in enumerate(other_b2)}
        soft = soft[:, 0].copy()
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


def with_bits(red: _Reduced, bits: np.ndarray) -> _Reduced:
    """``red`` for new comm-node bits [n_comm] (the same DAG, only its bytes changed): the
    structure and the fixed nodes' constants do not depend on them, only ``bits`` does."""
    other = copy.copy(red)
    other.bits = np.asarray(bits, dtype=float)
    return other


def _at(red: _Reduced, b2: float) -> _Reduced:
    """``red`` with the soft constants of the temperature ``b2`` (one of its ``other_b2``):
    the structure is shared, only ``fixed_soft`` differs."""
    other = copy.copy(red)
    other.fixed_soft = red.other_soft[float(b2)]
    return other


def _contract(hard, soft, group, es, ed):
    """Series-parallel contraction of the merged DAG, exact for the hard and the soft sweeps.

    Every node carries constants ``hard`` (s) and ``soft`` ([nodes, temperatures], each column
    scaled by its ``b2``) added to its
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
            sf = np.stack([np.bincount(pos, col, roots.size) for col in soft.T], axis=1)
        else:
            h = np.full(roots.size, -np.inf)
            np.maximum.at(h, pos, hard)
            sf = np.full((roots.size, soft.shape[1]), -np.inf)
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


def _polish_state(red: _Reduced, model: OcsModel, x: np.ndarray, b2: float) -> tuple:
    """Mutable arrays of the polishing kernel: comm durations (s), group members sorted by
    decreasing duration, group maxima (s) and group log-sum-exps (scaled by ``b2``)."""
    dur = comm_durations(red, model, x)
    g_sorted, gval, glse = _group_state(red.g_ptr, red.g_comm, dur, b2)
    return dur, g_sorted, gval, glse


@numba.njit(cache=True, nogil=True)
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


@numba.njit(cache=True, nogil=True)
def _group_sum(g, g_ptr, g_sorted, dur, pair, ch, top, b2):  # pragma: no cover - compiled
    """``Σ exp(b2 (t_c − top))`` over the members of group ``g`` whose pair is not in ``ch``,
    walking the members by decreasing duration and stopping once a term is negligible (every
    later one is smaller); also returns the members walked (work)."""
    s = 0.0
    walked = 0
    for idx in range(g_ptr[g], g_ptr[g + 1]):
        walked += 1
        c = g_sorted[idx]
        q = pair[c]
        if q == ch[0] or q == ch[1] or q == ch[2] or q == ch[3]:
            continue
        term = np.exp(b2 * (dur[c] - top))
        if term < _NEGLIGIBLE:
            break
        s += term
    return s, walked


@numba.njit(cache=True, nogil=True)
def _lae(a, b):  # pragma: no cover - compiled
    """``log(exp(a) + exp(b))``."""
    if a < b:
        a, b = b, a
    if b == -np.inf:
        return a
    return a + np.log1p(np.exp(b - a))


@numba.njit(cache=True, nogil=True)
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


@numba.njit(cache=True, nogil=True)
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


@numba.njit(cache=True, nogil=True)
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


@numba.njit(cache=True, nogil=True)
def _penalty(q, xq, pen_args):  # pragma: no cover - compiled
    """Donor penalty of pair ``q`` holding ``xq ≥ 1`` circuits: the most any path through one
    of its comm nodes would exceed the critical path (s) with one circuit less (old head + the
    node's new duration + old tail − CP)."""
    finish, tail, cp, gval, pair_ptr, pair_comm, comm_group, g_rnode, lat, bits, rate, b0 = pen_args
    worst = -np.inf
    for idx in range(pair_ptr[q], pair_ptr[q + 1]):
        c = pair_comm[idx]
        g = comm_group[c]
        r = g_rnode[g]
        d = lat[c] + bits[c] / (rate * (xq - 1) + b0)
        worst = max(worst, finish[r] - gval[g] + d + tail[r] - cp)
    return worst


@numba.njit(cache=True, nogil=True)
def _donors(x, perm, n, u, skip, dark, frozen, pen, pen_scan, scan, pen_args):  # pragma: no cover
    """Pods ``a ∉ {u, skip}`` with a circuit on ``(u, a)`` not ``frozen``, by increasing
    donor penalty (:func:`_penalty`, cached in ``pen`` for the scan ``scan``; ties in the
    seeded order ``perm``); only −1 (use a dark port of ``u``) when ``dark``. Also returns
    the work done (pods scanned + comm nodes whose penalty was computed)."""
    if dark:
        return np.full(1, -1, dtype=np.int64), 1
    pair_ptr = pen_args[4]
    work = n
    pods = np.empty(n, dtype=np.int64)
    key = np.empty(n)
    k = 0
    for i in range(n):
        a = perm[i]
        if a != u and a != skip:
            q = _pair_id(n, u, a)
            if x[q] > 0 and not frozen[q]:
                if pen_scan[q] != scan:
                    pen_scan[q] = scan
                    pen[q] = _penalty(q, x[q], pen_args)
                    work += pair_ptr[q + 1] - pair_ptr[q]
                pods[k] = a
                key[k] = pen[q]
                k += 1
    return pods[:k][np.argsort(key[:k], kind="mergesort")], work


@numba.njit(cache=True, nogil=True)
def _closer(free, perm, n, lone, spent):  # pragma: no cover - compiled
    """The pod ``w ≠ lone`` with the most dark ports (``spent`` has one fewer: the move uses
    it), ties in the seeded order ``perm``; −1 when no other pod has a dark port."""
    best = -1
    most = 0
    for i in range(n):
        w = perm[i]
        f = free[w] - (1 if w == spent else 0)
        if w != lone and f > most:
            best, most = w, f
    return best


@numba.njit(cache=True, nogil=True)
def _changed_comms(
    ch, dx, x, rate, fallback, pair_ptr, pair_comm, lat, bits, cbuf, dbuf
):  # pragma: no cover - compiled
    """The comm nodes ``c`` on the pairs ``ch`` that a move changes (−1: an absent slot;
    pair ``ch[k]`` goes to ``x + dx[k]`` circuits) into ``cbuf``, pair by pair, and their
    durations after the move, ``t_c = a_c + β_c / (B (x_q + dx_k) + B0)`` (s; ``β_c`` bits,
    ``B``, ``B0`` bit/s), into ``dbuf``. Returns how many (the work of walking them)."""
    m = 0
    for k in range(4):
        q = ch[k]
        if q < 0:
            continue
        rq = rate * (x[q] + dx[k]) + fallback
        for idx in range(pair_ptr[q], pair_ptr[q + 1]):
            c = pair_comm[idx]
            cbuf[m] = c
            dbuf[m] = lat[c] + bits[c] / rq
            m += 1
    return m


@numba.njit(cache=True, nogil=True)
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


@numba.njit(cache=True, nogil=True)
def _drop_bounds(gval, g_ptr, g_sorted, dur, pair, most, stamp, scan):  # pragma: no cover
    """Per pair ``q``, ``most[q] = Σ_g (gval_g − t3_g)`` over the groups whose first two
    distinct pairs (in decreasing duration) include ``q``, with ``t3_g`` the longest member on
    any other pair (0 if none): a move that shortens the members of two pairs ``p``, ``z``
    and lengthens others lowers the group maxima by at most ``most[p] + most[z]`` in total
    (a group's maximum drops only when every member at its top is on ``p`` or ``z``, and then
    not below ``t3_g``). Entries are valid where ``stamp == scan``; returns the work."""
    work = 0
    for g in range(gval.size):
        p1 = -1
        p2 = -1
        t3 = 0.0
        for idx in range(g_ptr[g], g_ptr[g + 1]):
            c = g_sorted[idx]
            q = pair[c]
            work += 1
            if q in (p1, p2):
                continue
            if p1 < 0:
                p1 = q
            elif p2 < 0:
                p2 = q
            else:
                t3 = dur[c]
                break
        for q in (p1, p2):
            if q < 0:
                continue
            if stamp[q] != scan:
                stamp[q] = scan
                most[q] = 0.0
            most[q] += gval[g] - t3
    return work


@numba.njit(cache=True, nogil=True)
def _polish(
    x, iu, iv, n, perm, rate, fallback, b2,
    fixed, fixed_soft, group, pindptr, pindices, sindptr, sindices,
    comm_group, pair, bits, lat, pair_ptr, pair_comm, g_ptr, g_rnode,
    dur, g_sorted, gval, glse, free, frozen, max_evals, max_work,
):  # fmt: skip  # pragma: no cover - compiled
    """First-improvement moves (module doc) until a local optimum, ``max_evals`` candidate
    evaluations or ``max_work`` work units (:data:`WORK_UNITS`); returns
    ``(local_optimum_reached, accepted, evaluations, work)``. Mutates ``x``,
    ``dur``, ``g_sorted``, ``gval``, ``glse`` and ``free`` (dark ports per pod); pairs marked
    ``frozen`` never donate a circuit.

    A candidate changes up to four pairs ``ch`` (+1 target, +1 closing circuit, −1, −1 donors;
    −1 marks an absent slot). Its evaluation: the new maxima of
    the groups holding them (walk each group's sorted members to the first unchanged one), an
    exact lower bound on the new hard CP, the exact hard sweep from the first changed merged
    node, and, only on a tie of the hard CP, the groups' new LSEs, the first-order lower bound
    ``Δ(b2 U) ≥ Σ_r μ_r Δsoft_r`` (U is convex in the node terms) and then the exact soft sweep.

    Work (deterministic, in elementary operations): every scan is charged its sweeps (merged
    nodes + edges, twice) and the comm nodes it visits; every donor list the pods it scans
    and the comm nodes of the penalties it computes; every candidate 1 plus the comm nodes,
    group members, merged nodes and edges its evaluation touches. A candidate is evaluated
    only while ``work < max_work``.
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
    max_comms = np.diff(pair_ptr).max() if n_pairs else 0
    cbuf = np.empty(max(1, 4 * max_comms), dtype=np.int64)  # comm nodes of a candidate's pairs
    dbuf = np.empty(cbuf.size)  # and their durations after the move
    targets = np.empty(n_pairs, dtype=np.int64)
    gains = np.empty(n_pairs)
    pen = np.empty(n_pairs)
    pen_scan = np.zeros(n_pairs, dtype=np.int64)
    drop_most = np.zeros(n_pairs)  # per pair, a bound on the drop its +1 can cause (s)
    drop_scan = np.zeros(n_pairs, dtype=np.int64)
    scan = 0
    # "don't look" bits: a target whose every swap failed is skipped until a swap touches one
    # of its pods; a scan that skipped targets is repeated without the bits before stopping
    idle = np.zeros(n_pairs, dtype=np.bool_)
    stamp = 0
    accepted = 0
    evals = 0
    work = 0
    n_edges = pindices.size
    soft = beta = pleaf = mu = np.empty(0)  # soft sweeps: computed on the first hard tie
    u_cur = tol_u = 0.0
    while True:
        rdur, finish, pmax, tail = _hard_sweeps(
            fixed, group, gval, pindptr, pindices, sindptr, sindices
        )
        soft_ready = False
        work += 2 * (n_r + n_edges) + n_groups
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
                work += 1
                if dur[c] < gval[g] - tol:
                    break
                p = pair[c]
                if pmark[p] != stamp:
                    pmark[p] = stamp
                    targets[n_t] = p
                    gains[n_t] = dur[c] - lat[c] - bits[c] / (rate * (x[p] + 1) + fallback)
                    n_t += 1
        order = np.argsort(-gains[:n_t], kind="mergesort")
        pen_args = (
            finish,
            tail,
            cp,
            gval,
            pair_ptr,
            pair_comm,
            comm_group,
            g_rnode,
            lat,
            bits,
            rate,
            fallback,
        )
        # donor penalties (how far one circuit less would push a pair's longest path above the
        # critical path, s) are computed on demand, once per scan: pen_scan marks the fresh ones
        scan += 1
        work += _drop_bounds(
            gval, g_ptr, g_sorted, dur, pair, drop_most, drop_scan, scan
        )  # fmt: skip
        found = False
        skipped = False
        for t in order:
            p = targets[t]
            if idle[p]:
                skipped = True
                continue
            u, v = iu[p], iv[p]
            don_u, w_u = _donors(
                x, perm, n, u, v, free[u] > 0, frozen, pen, pen_scan, scan, pen_args
            )
            don_v, w_v = _donors(
                x, perm, n, v, u, free[v] > 0, frozen, pen, pen_scan, scan, pen_args
            )
            work += w_u + w_v
            for a in don_u:
                pa = _pair_id(n, u, a) if a >= 0 else -1
                for b in don_v:
                    pb = _pair_id(n, v, b) if b >= 0 else -1
                    # lone: a freed end not closed by (a, b), with `freed` dark ports (2 when
                    # both donors end at it); z: the pod whose dark port closes one of them
                    lone = z = -1
                    close = -1
                    freed = 0
                    if a >= 0 and b >= 0 and a != b:
                        close = _pair_id(n, a, b)
                    elif a >= 0 or b >= 0:
                        lone = a if a >= 0 else b
                        freed = 2 if a == b else 1
                        spent = -1 if a == b else (u if a < 0 else v)
                        z = _closer(free, perm, n, lone, spent)
                        close = _pair_id(n, lone, z) if z >= 0 else -1
                    ch[0], ch[1], ch[2], ch[3] = p, close, pa, pb
                    if evals >= max_evals or work >= max_work:
                        return False, accepted, evals, work
                    evals += 1
                    work += 1
                    # a donor whose longest path rises by more than the move can remove from
                    # the groups it shortens fails the lower-bound test below: skip the walk
                    most = drop_most[p] if drop_scan[p] == scan else 0.0
                    if close >= 0 and drop_scan[close] == scan:
                        most += drop_most[close]
                    most += 2.0 * tol
                    if (a >= 0 and pen[pa] > most) or (b >= 0 and pen[pb] > most):
                        continue
                    # new maxima of the groups holding the four changed pairs
                    n_ch = _changed_comms(
                        ch, dx, x, rate, fallback, pair_ptr, pair_comm, lat, bits, cbuf, dbuf
                    )
                    work += n_ch
                    stamp += 1
                    n_aff = 0
                    for i in range(n_ch):
                        g = comm_group[cbuf[i]]
                        d = dbuf[i]
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
                            work += 1
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
                    work += (n_r - rmin) + (n_edges - pindptr[rmin])
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
                        work += 2 * (n_r + n_edges)
                    # new LSE of every affected group: old total (relative to the old maximum)
                    # − the changed members' old terms, + their new terms (relative to the new
                    # maximum); when the changed members held almost all of the old total
                    # (cancellation), the unchanged members are summed afresh, which is cheap
                    # then because the sum is steep
                    for j in range(n_aff):
                        gold[aff[j]] = 0.0
                        gadd[aff[j]] = 0.0
                    work += n_ch
                    for i in range(n_ch):
                        c = cbuf[i]
                        g = comm_group[c]
                        gold[g] += np.exp(b2 * (dur[c] - gval[g]))
                        gadd[g] += np.exp(b2 * (dbuf[i] - gnew[g]))
                    lin = 0.0
                    for j in range(n_aff):
                        g = aff[j]
                        total = np.exp(glse[g] - b2 * gval[g])
                        rest = total - gold[g]
                        if rest < 1e-6 * total:
                            rest, walked = _group_sum(
                                g, g_ptr, g_sorted, dur, pair, ch, gnew[g], b2
                            )
                            work += walked
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
                        work += (n_r - rmin) + (n_edges - pindptr[rmin])
                        for r in range(rmin, n_r):
                            g = group[r]
                            moved = g >= 0 and gstamp[g] == stamp
                            own = fixed_soft[r] + gsum[g] if moved else soft[r]
                            beta2[r] = own + _lse_preds(r, pindptr, pindices, beta, beta2, rmin)
                            if sindptr[r] == sindptr[r + 1]:
                                u2 = _lae(u2, beta2[r])
                        if u2 >= u_cur - tol_u:
                            continue
                    # accept (work: the changed comm nodes and the affected groups' re-sorts)
                    for j in range(n_aff):
                        g = aff[j]
                        work += g_ptr[g + 1] - g_ptr[g]
                    for k in range(4):
                        q = ch[k]
                        if q < 0:
                            continue
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
                    if a < 0:
                        free[u] -= 1
                    if b < 0:
                        free[v] -= 1
                    if z >= 0:
                        free[z] -= 1
                    if lone >= 0:
                        free[lone] += freed - (1 if z >= 0 else 0)
                    for w in (u, v, a, b, z):
                        if w < 0:
                            continue
                        work += n
                        for y in range(n):
                            if y != w:
                                idle[_pair_id(n, w, y)] = False
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
                return True, accepted, evals, work
            idle[:] = False
    return False, accepted, evals, work


def comm_durations(red: _Reduced, model: OcsModel, x: np.ndarray) -> np.ndarray:
    """Duration (s) of every comm node under the integer wiring ``x`` [P]:
    ``latency + bits / (B x_e + B0)``."""
    return red.latency + red.bits / (model.rate_bps * x[red.pair] + model.fallback_bps)


def group_maxima(red: _Reduced, model: OcsModel, x: np.ndarray) -> np.ndarray:
    """Every group's longest member (s) under the integer wiring ``x`` [P], in one compiled
    pass (the durations of :func:`comm_durations`, bit for bit, with no array of them)."""
    return _group_maxima(
        x, red.pair, red.bits, red.latency, red.g_ptr, red.g_comm, model.rate_bps,
        model.fallback_bps,
    )  # fmt: skip


@numba.njit(cache=True, nogil=True)
def _group_maxima(x, pair, bits, lat, g_ptr, g_comm, rate, b0):  # pragma: no cover - compiled
    gval = np.empty(g_ptr.size - 1)
    for g in range(gval.size):
        top = -np.inf
        for idx in range(g_ptr[g], g_ptr[g + 1]):
            c = g_comm[idx]
            top = max(top, lat[c] + bits[c] / (rate * x[pair[c]] + b0))
        gval[g] = top
    return gval


def hard_cp(red: _Reduced, gval: np.ndarray) -> float:
    """Hard critical path (s) of the reduced DAG with group maxima ``gval``."""
    args = (red.pindptr, red.pindices, red.sindptr, red.sindices)
    return float(_hard_sweeps(red.fixed, red.group, gval, *args)[2][-1])


def unit_gains(red: _Reduced, model: OcsModel, x: np.ndarray, b2: float) -> np.ndarray:
    """Linearised saving (s) of one more circuit on every pair [P] at the integer wiring ``x``:
    ``g_e = Σ_{c∈e} μ_c · 8 b_c (f(x_e) − f(x_e + 1))`` with ``μ_c`` the Gibbs marginals at
    ``b2`` (1/s) and ``f(y) = 1/(B y + B0)``."""
    return _unit_gains(
        x, red.pair, red.bits, red.latency, red.g_ptr, red.g_comm, red.g_rnode, b2,
        model.rate_bps, model.fallback_bps, red.fixed_soft, red.group, red.pindptr,
        red.pindices, red.sindptr, red.sindices,
    )  # fmt: skip


@numba.njit(cache=True, nogil=True)
def _unit_gains(
    x, pair, bits, lat, g_ptr, g_comm, g_rnode, b2, rate, b0,
    fixed_soft, group, pindptr, pindices, sindptr, sindices,
):  # fmt: skip  # pragma: no cover - compiled
    """``g_e = Σ_{c∈e} μ_c · 8 b_c (f(x_e) − f(x_e + 1))`` for every pair (s): comm durations,
    every group's LSE (scaled by ``b2``), the soft sweeps' marginals ``μ_r`` of the reduced
    DAG and the members' shares ``μ_c = μ_r exp(b2 t_c − LSE_g)``, in one O(|comm|) pass."""
    n_groups = g_ptr.size - 1
    dur = lat + bits / (rate * x[pair] + b0)
    glse = np.empty(n_groups)
    for g in range(n_groups):
        top = -np.inf
        for idx in range(g_ptr[g], g_ptr[g + 1]):
            top = max(top, dur[g_comm[idx]])
        acc = 0.0
        for idx in range(g_ptr[g], g_ptr[g + 1]):
            acc += np.exp(b2 * (dur[g_comm[idx]] - top))
        glse[g] = b2 * top + np.log(acc)
    mu = _soft_sweeps(fixed_soft, group, glse, pindptr, pindices, sindptr, sindices)[3]
    gain = np.zeros(x.size)
    for g in range(n_groups):
        mg = mu[g_rnode[g]]
        for idx in range(g_ptr[g], g_ptr[g + 1]):
            c = g_comm[idx]
            y = x[pair[c]]
            save = bits[c] * (1.0 / (rate * y + b0) - 1.0 / (rate * (y + 1) + b0))
            gain[pair[c]] += mg * np.exp(b2 * dur[c] - glse[g]) * save
    return gain


def setup_work(red: _Reduced) -> int:
    """Work units (:func:`_polish`'s) charged for building the search state of a wiring
    (comm durations, sorted groups, sweeps): comm nodes + merged nodes + edges."""
    return int(red.pair.size + red.fixed.size + red.pindices.size)


def polish(
    red: _Reduced,
    model: OcsModel,
    x: np.ndarray,
    b2: float,
    perm: np.ndarray,
    max_work: int,
    frozen: np.ndarray | None = None,
    max_evals: int = 2**62,
) -> tuple[np.ndarray, float, int, int, int]:
    """Local search (:func:`_polish`) from a copy of ``x`` (degrees ``≤ d``) while its work
    is below ``max_work`` units and at most ``max_evals`` candidates were evaluated, the pairs
    ``frozen`` (bool [P]) never losing a circuit; returns ``(x, hard critical path (s),
    accepted moves, evaluations, work)``, the work including :func:`setup_work`."""
    if frozen is None:
        frozen = np.zeros(model.n_pairs, dtype=np.bool_)
    x = x.astype(np.int64, copy=True)
    iu, iv = (a.astype(np.int64) for a in model.pairs)
    dur, g_sorted, gval, glse = _polish_state(red, model, x, b2)
    setup = setup_work(red)
    _, acc, ev, work = _polish(
        x, iu, iv, model.n, perm, model.rate_bps, model.fallback_bps, b2,
        red.fixed, red.fixed_soft, red.group, red.pindptr, red.pindices, red.sindptr,
        red.sindices,
        red.comm_group, red.pair, red.bits, red.latency, red.pair_ptr, red.pair_comm,
        red.g_ptr, red.g_rnode, dur, g_sorted, gval, glse, model.free_ports(x), frozen, max_evals,
        max_work - setup,
    )  # fmt: skip
    return x, hard_cp(red, gval), acc, ev, work + setup


# donor ranks (by penalty, on u's side and v's) of the kicks, in the order they are tried
KICK_RANKS = ((0, 0), (0, 1), (1, 0), (1, 1), (0, 2), (2, 0))


def _by_penalty(pods: np.ndarray, pairs: np.ndarray, x: np.ndarray, pen: np.ndarray):
    """The ``pods`` whose pair in ``pairs`` carries a circuit, by increasing ``pen``."""
    wired = x[pairs] > 0
    return pods[wired][np.argsort(pen[pairs[wired]], kind="stable")]


def kick(
    red: _Reduced, model: OcsModel, x: np.ndarray, b2: float, k: int
) -> tuple[np.ndarray, np.ndarray] | None:
    """The ``k``-th kick of the iterated local search: a degree-preserving 2-swap at the hard
    critical path that the local search rejected (it does not improve on its own).

    Targets: the pairs of the comm nodes that set a critical phase's duration, by decreasing
    time one more circuit saves there (ties by pair index); donors ``(u, a)``, ``(v, b)``
    (``a ≠ b``, both outside ``{u, v}``) by increasing penalty (how far one circuit less would
    push their longest path over the critical path). Kick ``k`` takes target ``k mod T`` with
    the donor ranks ``KICK_RANKS[k div T]``. Returns ``x`` with ``(u, v)``, ``(a, b)`` +1 and
    the donors −1 (the critical path may rise: the search that follows judges it) and the two
    pairs that gained (that search must not simply undo the kick), or None when kick ``k``
    does not exist.
    """
    dur, _, gval, _ = _polish_state(red, model, x, b2)
    args = (red.pindptr, red.pindices, red.sindptr, red.sindices)
    _, finish, pmax, tail = _hard_sweeps(red.fixed, red.group, gval, *args)
    cp = pmax[-1]
    tol = 1e-12 * cp
    g = red.comm_group
    r = red.g_rnode[g]
    q = red.pair
    crit = (finish[r] + tail[r] >= cp - tol) & (dur >= gval[g] - tol)
    more = red.latency + red.bits / (model.rate_bps * (x[q] + 1) + model.fallback_bps)
    gain = np.full(model.n_pairs, -np.inf)
    np.maximum.at(gain, q[crit], dur[crit] - more[crit])
    targets = np.flatnonzero(gain > -np.inf)
    if targets.size == 0 or k // targets.size >= len(KICK_RANKS):
        return None
    targets = targets[np.argsort(-gain[targets], kind="stable")]
    rank_a, rank_b = KICK_RANKS[k // targets.size]
    p = int(targets[k % targets.size])
    less = red.latency + red.bits / (model.rate_bps * np.maximum(x[q] - 1, 0) + model.fallback_bps)
    pen = np.full(model.n_pairs, -np.inf)
    np.maximum.at(pen, q, finish[r] - gval[g] + less + tail[r] - cp)
    iu, iv = model.pairs
    u, v = int(iu[p]), int(iv[p])
    pods = np.arange(model.n)
    others = pods[(pods != u) & (pods != v)]
    nu, nv = (_by_penalty(others, model.pair_index(w, others), x, pen) for w in (u, v))
    if rank_a >= nu.size or rank_b >= nv.size or nu[rank_a] == nv[rank_b]:
        return None
    a, b = int(nu[rank_a]), int(nv[rank_b])
    y = x.copy()
    gained = np.array([p, model.pair_index(a, b)])
    y[gained] += 1
    y[[model.pair_index(u, a), model.pair_index(v, b)]] -= 1
    return y, gained


def pair_classes(red: _Reduced, n_pairs: int) -> np.ndarray:
    """Traffic role of every pair [P] (:func:`classes_of` over the merged comm groups of
    ``red``, the phases)."""
    return classes_of(red.pair, red.comm_group, n_pairs)


def classes_of(pair: np.ndarray, group: np.ndarray, n_pairs: int) -> np.ndarray:
    """Traffic role of every pair [P]: pairs whose transfers (comm node ``c`` on pair
    ``pair[c]`` in phase ``group[c]``) run in exactly the same phases, the same number of
    times in each, share a class id ``0..K-1``; pairs without traffic get -1. Read from the
    DAG's structure alone (no phase names): in an MoE job with a data parallel ring, the pairs
    of the expert all-to-all only, of the ring only and of both are three classes.

    The multiset of a pair's phases is identified by the sum (mod 2^64) of one seeded random
    64-bit key per transfer's phase (linear time, order-free); two different multisets
    collide with probability about K² / 2^64."""
    n_groups = int(group.max()) + 1 if group.size else 0
    keys = (
        np.random.default_rng(0x5EED)
        .integers(0, np.iinfo(np.int64).max, n_groups, dtype=np.int64)
        .astype(np.uint64)
    )
    sig = np.zeros(n_pairs, dtype=np.uint64)
    np.add.at(sig, pair, keys[group])
    has = np.bincount(pair, minlength=n_pairs) > 0
    out = np.full(n_pairs, -1, dtype=np.int64)
    out[has] = np.unique(sig[has], return_inverse=True)[1]
    return out
