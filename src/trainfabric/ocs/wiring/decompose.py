"""Integer wiring -> per-OCS configurations -> cross-connect tables (docs/ocs.md §1.8 step S, §6.2).

A wiring ``X`` (circuits per pod pair, at most ``d_v`` ports of pod ``v`` used) is split into
``s`` symmetric configurations ``X^(k)``, one per OCS, with ``Σ_k X^(k) = X`` and row sums at
most ``p_v = d_v / s`` (uniform striping [A1]); a dark port carries no cross-connect.

* **Every ``p_v`` even** (:func:`decompose`, always succeeds): first pad ``X`` to exact
  degrees with placeholders for its ``f_v = d_v − Σ_u X_uv`` dark ports: ``⌊f_v / 2⌋``
  self-loops at ``v`` and one dummy circuit between consecutive pods with odd ``f_v`` (their
  number is even, as ``Σ f ≡ Σ d`` is even). Then orient the padded multigraph along closed
  trails so that every pod has ``in = out = d_v / 2``; split every pod into ``p_v / 2``
  transmit and ``p_v / 2`` receive copies, each taking ``s`` of its out- (in-) circuits, which
  gives an ``s``-regular bipartite multigraph; peel ``s`` perfect matchings off it (König: a
  ``k``-regular bipartite multigraph has one; Hopcroft-Karp via
  ``scipy.sparse.csgraph.maximum_bipartite_matching``). Matching ``k`` gives every pod
  ``p_v / 2`` outgoing and ``p_v / 2`` incoming circuits: read undirected, a ``p_v``-regular
  multigraph = OCS ``k``. Dropping the placeholders leaves every circuit of ``X`` on one OCS
  and at most ``p_v`` ports of pod ``v`` busy on every OCS.
* **Some ``p_v`` odd**: the split may not exist (the Petersen graph has no 3-edge-colouring).
  An exact integer program (HiGHS) maximises the circuits placed, ``y_{k,e} ∈ Z_{≥0}``,
  ``Σ_k y_{k,e} ≤ X_e``, ``Σ_u y_{k,uv} ≤ p_v``; a full placement is a valid split, otherwise
  the circuits left out are reported in ``unrealised`` and ``feasible`` is False. No circuit
  is ever dropped silently.

Cross-connects (:func:`cross_connects`): on every OCS pod ``v`` owns ports
``offset_v .. offset_v + p_v − 1`` (``offset`` = exclusive cumulative sum of ``p``); a duplex
circuit is one cross-connect ``(a, b)``, ``a < b``, from the lower to the higher port.
:func:`decompose_churn_aware` keeps the circuits (and their exact ports) that survive on the
OCS where they already are and places only the rest; :func:`diff` turns two sets of tables
into the idempotent per-OCS reconciliation (deletes, then adds) an OCS control plane accepts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numba
import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import maximum_bipartite_matching

from trainfabric.errors import ConfigError, InfeasibleError
from trainfabric.ocs.highs import integer_program
from trainfabric.ocs.model import OcsModel

Table = list[tuple[int, int]]


@dataclass
class Decomposition:
    """Per-OCS configurations of a wiring.

    ``configs``: ``s`` symmetric int64 ``[n, n]`` matrices (circuits between pods on that OCS);
    ``unrealised``: ``(u, v, circuits)`` of the wiring that no OCS holds (empty when
    ``feasible``); ``feasible``: every circuit is placed and every OCS uses at most ``p_v``
    ports of pod ``v`` (exactly ``p_v`` where the wiring uses all of the pod's ports);
    ``method``: ``"euler"``, ``"ip"`` or ``"churn"``; ``tables``: the port assignment when it
    is fixed by an earlier one (churn-aware), else None (canonical, see
    :func:`cross_connects`); ``kept``: circuits kept on their OCS and ports (churn-aware).
    ``success`` is ``feasible``; ``message`` counts the circuits left unrealised.
    """

    configs: list[np.ndarray]
    unrealised: list[tuple[int, int, int]]
    feasible: bool
    method: str = "euler"
    tables: list[Table] | None = field(default=None, repr=False)
    kept: int = 0

    @property
    def success(self) -> bool:
        return bool(self.feasible)

    @property
    def message(self) -> str:
        left = sum(k for _, _, k in self.unrealised)
        return f"{'split' if self.feasible else 'infeasible'}: {left} circuits unrealised"


def _check(model: OcsModel, x) -> np.ndarray:
    x = np.asarray(x)
    try:
        model.check_wiring(x)
    except InfeasibleError as err:
        raise ConfigError("x", str(err)) from None
    return x.astype(np.int64)


# -- even p_v: Euler orientation + s perfect matchings --------------------------------------


@numba.njit(cache=True, nogil=True)
def _orient(n, eu, ev):  # pragma: no cover - compiled
    """Orient a multigraph with all degrees even so that in = out at every vertex: follow
    unused edges from a vertex until stuck (only possible back at the start, as every degree
    is even), repeat. Returns (tail, head) per edge."""
    m = eu.size
    deg = np.zeros(n + 1, dtype=np.int64)
    for e in range(m):
        deg[eu[e] + 1] += 1
        deg[ev[e] + 1] += 1
    ptr = np.cumsum(deg)
    fill = ptr[:-1].copy()
    adj = np.empty(2 * m, dtype=np.int64)
    for e in range(m):
        adj[fill[eu[e]]] = e
        fill[eu[e]] += 1
        adj[fill[ev[e]]] = e
        fill[ev[e]] += 1
    pos = ptr[:-1].copy()
    used = np.zeros(m, dtype=np.bool_)
    tail = np.empty(m, dtype=np.int64)
    head = np.empty(m, dtype=np.int64)
    for start in range(n):
        while True:
            v = start
            walked = False
            while True:
                while pos[v] < ptr[v + 1] and used[adj[pos[v]]]:
                    pos[v] += 1
                if pos[v] == ptr[v + 1]:
                    break
                e = adj[pos[v]]
                used[e] = True
                w = ev[e] if eu[e] == v else eu[e]
                tail[e] = v
                head[e] = w
                v = w
                walked = True
            if not walked:
                break
    return tail, head


def _copies(pods: np.ndarray, half: np.ndarray, s: int) -> np.ndarray:
    """Copy index of every circuit end: pod ``v``'s ``half_v·s`` ends go ``s`` to a copy."""
    offset = np.concatenate([[0], np.cumsum(half)])
    order = np.argsort(pods, kind="stable")
    rank = np.empty(pods.size, dtype=np.int64)
    start = np.searchsorted(pods[order], np.arange(half.size))
    rank[order] = np.arange(pods.size) - start[pods[order]]
    return offset[pods] + rank // s


def _padded_ends(model: OcsModel, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Circuit ends ``(eu, ev)`` of ``x`` followed by the placeholders of its dark ports
    (module doc), and the mask of real circuits; every pod then has degree exactly ``d_v``
    (a self-loop counts twice)."""
    iu, iv = model.pairs
    free = model.free_ports(x)
    loops = np.repeat(np.arange(model.n), free // 2)
    odd = np.flatnonzero(free % 2)  # even count: Σ f ≡ Σ d ≡ 0 (mod 2) when every p_v is even
    eu = np.concatenate([np.repeat(iu, x), loops, odd[0::2]]).astype(np.int64)
    ev = np.concatenate([np.repeat(iv, x), loops, odd[1::2]]).astype(np.int64)
    real = np.arange(eu.size) < int(x.sum())
    return eu, ev, real


def _split_even(model: OcsModel, x: np.ndarray) -> list[np.ndarray]:
    eu, ev, real = _padded_ends(model, x)
    tail, head = _orient(model.n, eu, ev)
    s = model.ocs
    half = model.ports_per_ocs // 2
    tx = _copies(tail, half, s)
    rx = _copies(head, half, s)
    n_copy = int(half.sum())
    key = tx * n_copy + rx
    order = np.argsort(key, kind="stable")
    key_sorted = key[order]
    alive = np.ones(key.size, dtype=bool)
    configs = []
    for _ in range(s):
        rows, cols = tx[alive], rx[alive]
        graph = sp.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(n_copy, n_copy))
        match = maximum_bipartite_matching(graph, perm_type="column")
        # a k-regular bipartite multigraph has a perfect matching (König), so none is -1
        want = np.arange(n_copy) * n_copy + match
        # first alive circuit of every matched (tx, rx) copy pair
        lo = np.searchsorted(key_sorted, want)
        pick = _first_alive(order, lo, key_sorted, want, alive)
        alive[pick] = False
        pick = pick[real[pick]]  # placeholders of dark ports get no cross-connect
        xk = np.zeros((model.n, model.n), dtype=np.int64)
        np.add.at(xk, (tail[pick], head[pick]), 1)
        configs.append(xk + xk.T)
    return configs


@numba.njit(cache=True, nogil=True)
def _first_alive(order, lo, key_sorted, want, alive):  # pragma: no cover - compiled
    out = np.empty(want.size, dtype=np.int64)
    for i in range(want.size):
        j = lo[i]
        while not alive[order[j]]:
            j += 1
        out[i] = order[j]
    return out


# -- exact integer program (odd p_v, churn) -------------------------------------------------


def _split_ip(
    model: OcsModel,
    x: np.ndarray,
    caps: np.ndarray,
    prev: np.ndarray | None,
    time_limit_s: float,
) -> np.ndarray | None:
    """Per-OCS circuits ``y [s, P]`` maximising the placed circuits (and, second, the circuits
    kept where ``prev [s, P]`` had them)::

        max  W Σ y_{k,e} + Σ z_{k,e}
        s.t. Σ_k y_{k,e} ≤ x_e,   Σ_{e ∋ v} y_{k,e} ≤ caps_{k,v},   z_{k,e} ≤ y_{k,e},
             z_{k,e} ≤ prev_{k,e},  y, z ∈ Z_{≥0},   W = Σ prev + 1,

    over the pairs with ``x_e > 0``. None if HiGHS finds no point within the time limit.
    """
    iu, iv = model.pairs
    s = caps.shape[0]
    sup = np.flatnonzero(x > 0)
    n_e = sup.size
    if n_e == 0:
        return np.zeros((s, model.n_pairs), dtype=np.int64)
    n_y = s * n_e
    ks = np.repeat(np.arange(s), n_e)
    es = np.tile(np.arange(n_e), s)
    a_pair = sp.csr_matrix((np.ones(n_y), (es, np.arange(n_y))), shape=(n_e, n_y))
    u_row = ks * model.n + iu[sup][es]
    v_row = ks * model.n + iv[sup][es]
    a_deg = sp.csr_matrix(
        (np.ones(2 * n_y), (np.concatenate([u_row, v_row]), np.tile(np.arange(n_y), 2))),
        shape=(s * model.n, n_y),
    )
    y_ub = np.minimum(x[sup][es], np.minimum(caps[ks, iu[sup][es]], caps[ks, iv[sup][es]]))
    blocks = [a_pair, a_deg]
    lo = [np.zeros(n_e), np.zeros(s * model.n)]
    hi = [x[sup].astype(float), caps.ravel().astype(float)]
    weight = 1.0
    cost = np.ones(n_y)
    ub = y_ub.astype(float)
    if prev is not None:
        pz = prev[:, sup].ravel()
        zi = np.flatnonzero(pz > 0)
        weight = float(pz.sum()) + 1.0
        n_z = zi.size
        link = sp.hstack(
            [-sp.csr_matrix((np.ones(n_z), (np.arange(n_z), zi)), shape=(n_z, n_y)), sp.eye(n_z)]
        )
        blocks = [sp.hstack([b, sp.csr_matrix((b.shape[0], n_z))]) for b in blocks] + [link]
        lo.append(np.full(n_z, -np.inf))
        hi.append(np.zeros(n_z))
        cost = np.concatenate([np.full(n_y, weight), np.ones(n_z)])
        ub = np.concatenate([ub, np.minimum(pz[zi], y_ub[zi]).astype(float)])
    a = sp.vstack(blocks).tocsr()
    x = integer_program(
        -cost, a, np.concatenate(lo), np.concatenate(hi), ub, time_limit_s, mip_rel_gap=0.0
    )
    if x is None:
        return None
    y = np.zeros((s, model.n_pairs), dtype=np.int64)
    y[:, sup] = np.round(x[:n_y]).astype(np.int64).reshape(s, n_e)
    return y


def _result(model: OcsModel, x: np.ndarray, y: np.ndarray, method: str, **kw) -> Decomposition:
    """Decomposition from per-OCS pair vectors ``y [s, P]`` (placed ≤ x)."""
    left = x - y.sum(axis=0)
    iu, iv = model.pairs
    miss = np.flatnonzero(left)
    unrealised = [(int(iu[e]), int(iv[e]), int(left[e])) for e in miss]
    configs = [model.to_matrix(yk) for yk in y]
    ok = not unrealised and all((c.sum(axis=1) <= model.ports_per_ocs).all() for c in configs)
    return Decomposition(configs, unrealised, ok, method, **kw)


def decompose(model: OcsModel, x: np.ndarray, time_limit_s: float = 10.0) -> Decomposition:
    """Split the integer wiring ``x`` [P] (at most ``d_v`` ports per pod) into ``s`` per-OCS
    configurations (module doc).

    Every ``p_v`` even: padding of the dark ports, Euler orientation + ``s`` perfect
    matchings, always feasible. Otherwise
    the exact integer program, within ``time_limit_s``; if it cannot place every circuit the
    result has ``feasible=False`` and lists the rest in ``unrealised``.
    """
    x = _check(model, x)
    p = model.ports_per_ocs
    if not (p % 2).any():
        configs = _split_even(model, x)
        return Decomposition(configs, [], True, "euler")
    caps = np.tile(p, (model.ocs, 1))
    y = _split_ip(model, x, caps, None, time_limit_s)
    if y is None:
        y = np.zeros((model.ocs, model.n_pairs), dtype=np.int64)
    return _result(model, x, y, "ip")


# -- cross-connect tables --------------------------------------------------------------------


def port_offsets(model: OcsModel) -> np.ndarray:
    """First per-OCS port of every pod: ``offset_v = Σ_{u<v} p_u`` (pod ``v`` owns
    ``offset_v .. offset_v + p_v − 1`` on every OCS)."""
    return np.concatenate([[0], np.cumsum(model.ports_per_ocs)[:-1]]).astype(np.int64)


def _assign_ports(model: OcsModel, config: np.ndarray, fixed: Table = ()) -> Table:
    """Cross-connects of one OCS: the ``fixed`` ones, then every further circuit of
    ``config`` (pairs in ``triu`` order) on the lowest free ports of its two pods."""
    p = model.ports_per_ocs
    owner = np.repeat(np.arange(model.n), p)
    fixed = np.asarray(fixed, dtype=np.int64).reshape(-1, 2)
    counts = model.from_matrix(np.asarray(config, dtype=np.int64))
    np.subtract.at(counts, model.pair_index(owner[fixed[:, 0]], owner[fixed[:, 1]]), 1)
    free = np.ones(owner.size, dtype=bool)
    free[fixed.ravel()] = False
    free_ports = np.flatnonzero(free)  # sorted, hence grouped by pod
    first_free = np.searchsorted(owner[free_ports], np.arange(model.n))
    iu, iv = model.pairs
    ends = np.concatenate([np.repeat(iu, counts), np.repeat(iv, counts)])
    order = np.argsort(ends, kind="stable")
    rank = np.empty(ends.size, dtype=np.int64)
    rank[order] = np.arange(ends.size) - np.searchsorted(ends[order], ends[order])
    ports = free_ports[first_free[ends] + rank].reshape(2, -1)
    new = np.stack([ports.min(axis=0), ports.max(axis=0)], axis=1)
    table = np.concatenate([fixed, new]).tolist()
    return sorted((int(a), int(b)) for a, b in table)


def cross_connects(model: OcsModel, decomposition: Decomposition) -> list[Table]:
    """Per OCS the sorted list of duplex cross-connects ``(port_a, port_b)``, ``a < b``; every
    port at most once, ports of pod ``v`` in ``offset_v .. offset_v + p_v − 1``."""
    if decomposition.tables is not None:
        return [list(t) for t in decomposition.tables]
    return [_assign_ports(model, c) for c in decomposition.configs]


# -- churn ------------------------------------------------------------------------------------


def decompose_churn_aware(
    model: OcsModel, x: np.ndarray, previous: Decomposition, time_limit_s: float = 10.0
) -> Decomposition:
    """Split ``x`` keeping circuits on the OCS (and ports) where ``previous`` has them; only
    the rest is placed anew.

    Keep, per pair ``e``, ``min(x_e, Σ_k X^(k)_prev,e)`` of its previous circuits (dropping
    from the highest-numbered OCSes first) — the most any split can keep — and place the
    remainder with the ports left on every OCS by the exact integer program (small: only the
    changed circuits). A remainder that does not fit (e.g. a 2-swap whose two removed circuits
    sat on different OCSes) releases the kept circuits at the pods where it got stuck and is
    placed again (wider each time nothing new can be freed), up to 32 rounds or 4,000
    variables; then a fresh :func:`decompose`. When the repair released kept circuits, a
    fresh :func:`decompose` with its OCSes relabelled to match the previous ones best (an
    assignment problem) is taken instead if it keeps more: the result never keeps fewer
    cross-connects than a fresh split would (the releases could end far below it: 17 of 46
    surviving circuits kept where a fresh split keeps 44). Every circuit that ends up on its
    old OCS keeps its exact cross-connect (``tables``), new ones take the lowest free ports.
    """
    x = _check(model, x)
    s = model.ocs
    if len(previous.configs) != s:
        raise ConfigError("previous", f"has {len(previous.configs)} OCSes, the model {s}")
    old_tables = cross_connects(model, previous)
    prev = np.stack([model.from_matrix(c) for c in previous.configs]).astype(np.int64)
    # keep min(x_e, old_e) per pair: drop the excess from the last OCSes first
    keep = prev.copy()
    excess = np.maximum(prev.sum(axis=0) - x, 0)
    for k in range(s - 1, -1, -1):
        cut = np.minimum(keep[k], excess)
        keep[k] -= cut
        excess -= cut
    p = model.ports_per_ocs
    iu, iv = model.pairs
    y = None
    for _ in range(_RELEASE_ROUNDS):
        caps = p[None, :] - np.stack([_degrees(model, kk) for kk in keep])
        rest = x - keep.sum(axis=0)
        if s * np.count_nonzero(rest) > _MAX_REST_VARS:
            break
        y = _split_ip(model, rest, caps, None, min(time_limit_s, _ROUND_LIMIT_S))
        if y is None:
            break
        left = rest - y.sum(axis=0)
        if not left.any():
            y = y + keep
            break
        # an unplaced circuit (u, v): free up v on the OCSes where u has a free port (and
        # vice versa) by releasing the kept circuits there
        free = caps - np.stack([_degrees(model, yk) for yk in y])
        stuck = np.flatnonzero(left)
        release = np.zeros_like(keep, dtype=bool)
        for a_end, b_end in ((iu[stuck], iv[stuck]), (iv[stuck], iu[stuck])):
            for k in range(s):
                pods = np.zeros(model.n, dtype=bool)
                pods[b_end[free[k, a_end] > 0]] = True
                release[k] |= pods[iu] | pods[iv]
        if not (release & (keep > 0)).any():
            # nothing new to free next to the stuck circuits: release every kept circuit at
            # their pods and at the pods they are wired to (a wider neighbourhood each time)
            pods = np.zeros(model.n, dtype=bool)
            pods[iu[stuck]] = pods[iv[stuck]] = True
            near = (x > 0) & (pods[iu] | pods[iv])
            pods[iu[near]] = pods[iv[near]] = True
            release[:] = pods[iu] | pods[iv]
        keep[release] = 0
        y = None
    method = "churn"
    if y is None:  # local repair failed: a fresh split, still keeping the ports it can
        fresh = decompose(model, x, time_limit_s)
        if not fresh.feasible:
            return fresh
        y = _matched_to(model, fresh, prev)
        method = fresh.method
    # every circuit that ended up on its old OCS (kept or placed back) keeps its old ports
    stay = np.minimum(y, prev)
    if method == "churn" and stay.sum() < np.minimum(x, prev.sum(axis=0)).sum():
        fresh = decompose(model, x, time_limit_s)  # the repair released circuits: compare
        if fresh.feasible:
            y_fresh = _matched_to(model, fresh, prev)
            if np.minimum(y_fresh, prev).sum() > stay.sum():
                y, method = y_fresh, fresh.method
                stay = np.minimum(y, prev)
    tables = [
        _assign_ports(model, model.to_matrix(y[k]), _kept_ports(model, old_tables[k], stay[k]))
        for k in range(s)
    ]
    return _result(model, x, y, method, tables=tables, kept=int(stay.sum()))


def _matched_to(model: OcsModel, dec: Decomposition, prev: np.ndarray) -> np.ndarray:
    """``dec``'s per-OCS circuits [s, P] with its OCSes relabelled (they are interchangeable)
    so that the most circuits sit on the OCS where ``prev`` [s, P] has them."""
    from scipy.optimize import linear_sum_assignment

    y = np.stack([model.from_matrix(c) for c in dec.configs]).astype(np.int64)
    common = np.minimum(y[:, None, :], prev[None, :, :]).sum(axis=2)  # [new OCS, old OCS]
    rows, cols = linear_sum_assignment(common, maximize=True)
    out = np.empty_like(y)
    out[cols] = y[rows]
    return out


_RELEASE_ROUNDS = 32  # rounds of releasing kept circuits around pods where the rest did not fit
_ROUND_LIMIT_S = 1.0  # per round: an incumbent is enough to see where the rest got stuck
_MAX_REST_VARS = 4_000  # beyond this the local repair has failed: split afresh


def _degrees(model: OcsModel, x: np.ndarray) -> np.ndarray:
    iu, iv = model.pairs
    return (np.bincount(iu, x, model.n) + np.bincount(iv, x, model.n)).astype(np.int64)


def _kept_ports(model: OcsModel, table: Table, keep: np.ndarray) -> Table:
    """The first ``keep_e`` cross-connects of every pair ``e`` in an old table."""
    owner = np.repeat(np.arange(model.n), model.ports_per_ocs)
    left = keep.copy()
    out = []
    for a, b in sorted(table):
        e = int(model.pair_index(owner[a], owner[b]))
        if left[e] > 0:
            left[e] -= 1
            out.append((a, b))
    return out


def diff(old_tables: list[Table], new_tables: list[Table]) -> list[dict]:
    """Per OCS the idempotent reconciliation from ``old_tables`` to ``new_tables``:
    ``{"deletes": [...], "adds": [...]}`` of directed cross-connects ``(A-side, B-side)``
    (lower port -> higher port), deletes to be applied first. Applying it to the old tables
    (:func:`apply_diff`) yields the new ones; applying it again changes nothing."""
    if len(old_tables) != len(new_tables):
        raise ConfigError("tables", "old and new tables must cover the same OCSes")
    out = []
    for old, new in zip(old_tables, new_tables, strict=True):
        o = {(min(a, b), max(a, b)) for a, b in old}
        n = {(min(a, b), max(a, b)) for a, b in new}
        out.append({"deletes": sorted(o - n), "adds": sorted(n - o)})
    return out


def apply_diff(tables: list[Table], changes: list[dict]) -> list[Table]:
    """Apply :func:`diff` output: per OCS remove the deletes (absent ones are ignored), then
    add the adds (present ones are ignored). Raises ConfigError if an add would reuse a port
    that another cross-connect still holds."""
    out = []
    for k, (table, ch) in enumerate(zip(tables, changes, strict=True)):
        cur = {(min(a, b), max(a, b)) for a, b in table} - set(map(tuple, ch["deletes"]))
        ports = {q for c in cur for q in c}
        for a, b in ch["adds"]:
            c = (min(a, b), max(a, b))
            if c in cur:
                continue
            if a in ports or b in ports:
                raise ConfigError("adds", f"OCS {k}: cross-connect {c} reuses a busy port")
            cur.add(c)
            ports.update(c)
        out.append(sorted(cur))
    return out
