"""Exact MILP baseline for the static wiring of a task DAG (docs/ocs.md §1.9 A), solved with HiGHS.

Model (times in seconds, ``X`` in circuits)::

    min  T
    s.t. Σ_{u≠v} X_uv ≤ d_v                                  (degrees; dark ports allowed)
         X_e ∈ Z,  0 ≤ X_e ≤ K_e = s·min(p_u, p_v) = min(d_u, d_v)   (pair cap, uniform striping)
         τ_m ≥ a_m + f_m(k) + (f_m(k+1) − f_m(k))·(X_e − k),   k = 0..K_e−1,  e = e(m)
         S_j ≥ S_i + dur_i   for every arc i → j,   dur_i = duration_s[i] or τ_i (comm)
         T ≥ S_i + dur_i     for every leaf i,       S ≥ 0

with ``f_m(k) = 8·b_m / (B·k + B0)``. ``f_m`` is convex, so the upper envelope of its secants
through consecutive integers is the piecewise-linear interpolant ``PL_m`` of ``f_m`` on
``[0, K_e]``: equal to ``f_m`` at every integer, hence the MILP optimum is the exact minimum
over integer wirings of the hard critical path, without "X_e = k" indicator binaries. A port
may stay dark (``≤``): every ``f_m`` is non-increasing, so a wiring with free ports at two
different pods is never worse after adding a circuit between them, and where an exact-degree
wiring is optimal the ``≤`` model finds an optimum of the same value; where skew calls for it
(4 pods, one skewed phase) the ``≤`` optimum is strictly better. The LP
relaxation (``relax=True``: ``X`` continuous) minimises the critical path under ``PL_m``; since
``PL_m = f_m`` at integers it is a valid lower bound on the integer optimum (it is *not* a bound
on the continuous optimum under the true ``f_m``, which lies below ``PL_m`` between integers).

Reductions (``reduce=True``, default; each is exact for the MILP *and* for its LP relaxation,
and ``tests/ocs/test_milp.py`` checks that the optimum is unchanged against ``reduce=False``,
the literal model above):

1. **Shared comm durations.** Comm nodes with equal ``(pair, bytes, latency)`` have identical
   cut sets, so they share one ``τ`` (a key) and its ``K_e`` cuts. ``τ`` only bounds start
   times from below, so at any solution it can be lowered to ``a + PL(X)``: sharing changes
   nothing but the row count.
2. **Phases as one max node.** Comm nodes whose only predecessor is ``p`` and only successor is
   ``q`` (the parallel branches of a communication phase) are replaced by one node of duration
   ``τ_φ ≥ τ_κ`` for the keys ``κ`` of the branch set (Fourier–Motzkin on their start times:
   ``S_q ≥ S_p + dur_p + max_κ τ_κ``). Keys dominated on the same pair (``bytes`` and
   ``latency`` both ≤ another key's) are dropped from ``τ_φ``, since ``PL`` scales linearly with
   the bytes. Phases with identical key sets share one ``τ_φ``.
3. **Eliminating start times.** A node ``k`` with ``I`` incoming and ``O`` outgoing arcs is
   removed when ``I·O ≤ I + O`` (the arc count does not grow): every pair of arcs
   ``p → k → q`` becomes one arc ``p → q`` whose weight is the sum of the durations and
   weights in between (Fourier–Motzkin on ``S_k``, exact because ``S_k`` has no cost and no
   upper bound). Arc weights are a constant plus a multiset of ``τ`` variables; a parallel arc
   dominated by another (constant ≤ and variable multiset ⊆, all ``τ ≥ 0``) is dropped.
   This merges chains of fixed-duration nodes and removes phase barriers wherever that does
   not multiply arcs (a barrier joining many predecessors to many branches is kept).

Times are scaled internally by ``t_ref`` (the critical path with every pair at the
fractional uniform-mesh rate) so that HiGHS sees an objective of order 1; HiGHS runs with
``threads``, ``random_seed``, ``time_limit``, ``mip_rel_gap`` (and ``mip_abs_gap = 0``, so the
requested relative gap is the only gap criterion) and no output.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from importlib.metadata import version

import highspy
import numpy as np
import scipy.sparse as sp

from trainfabric.errors import ConfigError, InfeasibleError
from trainfabric.ocs.highs import quiet_highs
from trainfabric.ocs.model import OcsModel
from trainfabric.workloads.dag import TaskDAG

_STATUS = {
    highspy.HighsModelStatus.kOptimal: "optimal",
    highspy.HighsModelStatus.kTimeLimit: "time_limit",
    highspy.HighsModelStatus.kInfeasible: "infeasible",
    highspy.HighsModelStatus.kUnbounded: "unbounded",
    highspy.HighsModelStatus.kUnboundedOrInfeasible: "infeasible_or_unbounded",
    highspy.HighsModelStatus.kIterationLimit: "iteration_limit",
    highspy.HighsModelStatus.kSolutionLimit: "solution_limit",
    highspy.HighsModelStatus.kInterrupt: "interrupted",
    highspy.HighsModelStatus.kMemoryLimit: "memory_limit",
}


@dataclass
class MilpResult:
    """Outcome of :func:`solve_milp` (times in seconds).

    ``x``: incumbent integer wiring (``None`` without an incumbent), or the fractional LP
    optimum when ``relaxed``. ``objective_s``: hard critical path of the integer incumbent
    evaluated exactly by :meth:`TaskDAG.critical_path` (LP value when ``relaxed``).
    ``best_bound_s``: HiGHS's dual bound (capped at ``objective_s``: a bound above a feasible
    value is float noise). ``gap = (objective_s − best_bound_s) / objective_s``.
    ``mip_objective_s``: HiGHS's own objective value (it may undershoot ``objective_s`` by
    ~1e-6 relative: HiGHS accepts ``X_e`` within its integrality tolerance of an integer, where
    the steep first secant is slightly lower than ``f``). ``wall_s``: build + solve;
    ``highs_s``: HiGHS run time alone. ``reductions``: sizes before and after the reductions
    of the module doc. ``success``: HiGHS proved optimality (``status == "optimal"``, within
    ``mip_rel_gap``); ``message``: the status with the gap, or that no solution was found.
    """

    status: str
    x: np.ndarray | None
    objective_s: float
    best_bound_s: float
    gap: float
    wall_s: float
    solver: str
    n_vars: int
    n_cons: int
    n_int_vars: int = 0
    nnz: int = 0
    nodes: int = 0
    mip_objective_s: float = float("nan")
    highs_s: float = 0.0
    relaxed: bool = False
    reductions: dict = field(default_factory=dict)

    @property
    def success(self) -> bool:
        return self.status == "optimal"

    @property
    def message(self) -> str:
        return f"{self.status}: " + ("no solution" if self.x is None else f"gap {self.gap:.3g}")


@dataclass
class MilpModel:
    """HiGHS arrays of the §1.9 A model (row-wise CSR); columns ``0..P-1`` are ``X``, the last
    column is ``T``; all times divided by ``t_ref_s``."""

    col_cost: np.ndarray
    col_lower: np.ndarray
    col_upper: np.ndarray
    integrality: np.ndarray
    row_lower: np.ndarray
    row_upper: np.ndarray
    a_start: np.ndarray
    a_index: np.ndarray
    a_value: np.ndarray
    n_pairs: int
    t_ref_s: float
    stats: dict

    @property
    def n_vars(self) -> int:
        return int(self.col_cost.size)

    @property
    def n_cons(self) -> int:
        return int(self.row_lower.size)


def hard_critical_path(dag: TaskDAG, model: OcsModel, x: np.ndarray) -> float:
    """Hard critical path (s) of ``dag`` on the wiring ``x`` (pair rate ``B·x_e + B0``)."""
    comm = dag.comm_nodes
    rate = np.ones(dag.n_nodes)
    rate[comm] = model.pair_rate_bps(x)[model.pair_index(dag.pod[comm], dag.dst[comm])]
    return dag.critical_path(dag.durations(rate))


def _t_ref(dag: TaskDAG, model: OcsModel) -> float:
    share = model.total_circuits / model.n_pairs
    cp = dag.critical_path_at(model.rate_bps * share + model.fallback_bps)
    return cp if cp > 0 else 1.0


class _ArcGraph:
    """Difference constraints ``S_j ≥ S_i + dur_i + c + Σ τ_V`` on arcs ``i → j``.

    Node ``i`` has duration ``const[i] + τ_{var[i]}`` (``var = -1``: fixed); arc weights are
    ``(c, V)`` with ``V`` a sorted tuple (multiset) of variable ids.
    """

    def __init__(self, const: list[float], var: list[int]):
        self.const = const
        self.var = var
        n = len(const)
        self.succ: list[dict[int, list[tuple[float, tuple]]]] = [{} for _ in range(n)]
        self.pred: list[set[int]] = [set() for _ in range(n)]
        self.n_in = [0] * n
        self.n_out = [0] * n
        self.alive = [True] * n

    def add(self, i: int, j: int, w: tuple[float, tuple]) -> None:
        arcs = self.succ[i].setdefault(j, [])
        if any(_dominates(old, w) for old in arcs):
            return
        keep = [old for old in arcs if not _dominates(w, old)]
        removed = len(arcs) - len(keep)
        keep.append(w)
        self.succ[i][j] = keep
        self.pred[j].add(i)
        self.n_out[i] += 1 - removed
        self.n_in[j] += 1 - removed

    def eliminate(self, k: int) -> None:
        """Fourier–Motzkin on ``S_k``: join every arc into ``k`` with every arc out of it."""
        ck, vk = self.const[k], ((self.var[k],) if self.var[k] >= 0 else ())
        outs = self.succ[k]
        for p in self.pred[k]:
            ins = self.succ[p].pop(k)
            self.n_out[p] -= len(ins)
            for c1, v1 in ins:
                for q, arcs in outs.items():
                    for c2, v2 in arcs:
                        self.add(p, q, (c1 + ck + c2, tuple(sorted(v1 + vk + v2))))
        for q, arcs in outs.items():
            self.pred[q].discard(k)
            self.n_in[q] -= len(arcs)
        self.succ[k] = {}
        self.pred[k] = set()
        self.alive[k] = False


def _dominates(a: tuple[float, tuple], b: tuple[float, tuple]) -> bool:
    """Arc weight ``a ≥ b`` for every ``τ ≥ 0``: ``c_a ≥ c_b`` and ``V_b ⊆ V_a`` (multisets)."""
    if a[0] < b[0] or len(a[1]) < len(b[1]):
        return False
    return a[1] == b[1] or not (Counter(b[1]) - Counter(a[1]))


def _keys(dag: TaskDAG, model: OcsModel, reduce: bool):
    """Duration variable of every comm node: ids into arrays (pair, bytes, latency)."""
    comm = dag.comm_nodes
    pair = model.pair_index(dag.pod[comm], dag.dst[comm])
    if not reduce:
        return np.arange(comm.size), pair, dag.bytes[comm], dag.latency_s[comm]
    ub, bi = np.unique(dag.bytes[comm], return_inverse=True)
    ul, li = np.unique(dag.latency_s[comm], return_inverse=True)
    code, first, inverse = np.unique(
        (pair * ub.size + bi) * ul.size + li, return_index=True, return_inverse=True
    )
    m = comm[first]
    return inverse.ravel(), pair[first], dag.bytes[m], dag.latency_s[m]


def _prune_keys(keys: np.ndarray, k_pair, k_bytes, k_lat) -> tuple:
    """Keys (unique ids) not dominated by another key of the same pair (bytes and latency
    both ≥): a skyline per pair after sorting by (pair, bytes descending, latency descending)."""
    order = np.lexsort((-k_lat[keys], -k_bytes[keys], k_pair[keys]))
    ks = keys[order]
    pair = k_pair[ks]
    start = np.r_[True, pair[1:] != pair[:-1]]
    seg = np.cumsum(start) - 1
    lat = k_lat[ks] + seg * (k_lat[ks].max() + 1.0)  # offsets keep segments apart
    prev = np.r_[-np.inf, np.maximum.accumulate(lat)[:-1]]
    return tuple(np.sort(ks[start | (lat > prev)]).tolist())


def milp_model(dag: TaskDAG, model: OcsModel, reduce: bool = True) -> MilpModel:
    """Assemble the §1.9 A model of ``dag`` on ``model`` (see the module doc for the maths
    and the reductions applied when ``reduce``)."""
    if dag.n_pods != model.n:
        raise ConfigError("pods", f"DAG has {dag.n_pods} pods, OCS model has {model.n}")
    t_ref = _t_ref(dag, model)
    n_nodes = dag.n_nodes
    comm = dag.comm_nodes
    key_of_comm, k_pair, k_bytes, k_lat = _keys(dag, model, reduce)
    n_keys = int(k_pair.size)

    key_of_node = np.full(n_nodes, -1, dtype=np.int64)
    key_of_node[comm] = key_of_comm
    src_of = np.repeat(np.arange(n_nodes), np.diff(dag.indptr))
    dst_of = dag.indices.astype(np.int64)
    indeg = np.bincount(dst_of, minlength=n_nodes)
    outdeg = np.diff(dag.indptr)

    # Reduction 2: parallel comm branches between the same (p, q) -> one max node.
    in_group = np.zeros(n_nodes, dtype=bool)
    group_pq = np.zeros((0, 2), dtype=np.int64)
    group_var: list[int] = []
    sig_keys: list[tuple] = []
    branch = comm[(indeg[comm] == 1) & (outdeg[comm] == 1)] if reduce else comm[:0]
    if branch.size:
        pred_one = np.full(n_nodes, -1)
        pred_one[dst_of] = src_of  # meaningful only where indeg == 1
        in_group[branch] = True
        pq, ginv = np.unique(
            pred_one[branch] * n_nodes + dst_of[dag.indptr[branch]], return_inverse=True
        )
        group_pq = np.stack(np.divmod(pq, n_nodes), axis=1)
        gk = np.sort(ginv.ravel() * n_keys + key_of_node[branch])
        gk = gk[np.r_[True, gk[1:] != gk[:-1]]]  # sort + dedupe (np.unique hashes, slower)
        split = np.searchsorted(gk // n_keys, np.arange(1, pq.size))
        sig_id: dict[tuple, int] = {}
        pruned: dict[tuple, tuple] = {}
        for raw_keys in np.split(gk % n_keys, split):
            raw = tuple(raw_keys.tolist())
            if raw not in pruned:
                pruned[raw] = _prune_keys(raw_keys, k_pair, k_bytes, k_lat)
            keys = pruned[raw]
            if len(keys) == 1:
                group_var.append(keys[0])
                continue
            if keys not in sig_id:
                sig_id[keys] = n_keys + len(sig_keys)
                sig_keys.append(keys)
            group_var.append(sig_id[keys])

    # Graph on the kept DAG nodes (new ids 0..L-1, topological), then the groups, src, sink.
    kept = np.flatnonzero(~in_group)
    new_id = np.full(n_nodes, -1, dtype=np.int64)
    new_id[kept] = np.arange(kept.size)
    n_group = len(group_var)
    src, sink = kept.size + n_group, kept.size + n_group + 1
    const = np.where(key_of_node[kept] < 0, dag.duration_s[kept] / t_ref, 0.0).tolist()
    g = _ArcGraph(const + [0.0] * (n_group + 2), key_of_node[kept].tolist() + group_var + [-1, -1])
    keep_edge = ~(in_group[src_of] | in_group[dst_of])
    for i, j in zip(
        new_id[src_of[keep_edge]].tolist(), new_id[dst_of[keep_edge]].tolist(), strict=True
    ):
        g.add(i, j, (0.0, ()))
    for gi, (p, q) in enumerate(new_id[group_pq].tolist()):
        g.add(p, kept.size + gi, (0.0, ()))
        g.add(kept.size + gi, q, (0.0, ()))
    for i in new_id[np.flatnonzero(indeg == 0)].tolist():
        g.add(src, i, (0.0, ()))
    for i in new_id[np.flatnonzero(outdeg == 0)].tolist():
        g.add(i, sink, (0.0, ()))

    # Reduction 3: Fourier–Motzkin on start times while the arc count does not grow.
    order = list(range(kept.size + n_group))
    if reduce:
        changed = True
        while changed:
            changed = False
            for k in order:
                if g.alive[k] and g.n_in[k] * g.n_out[k] <= g.n_in[k] + g.n_out[k]:
                    g.eliminate(k)
                    changed = True
            order = [k for k in order if g.alive[k]]
    stats = dict(
        dag_nodes=n_nodes,
        dag_edges=dag.n_edges,
        comm_nodes=int(comm.size),
        duration_keys=n_keys,
        phase_groups=n_group,
        phase_vars=len(sig_keys),
        start_vars=len(order),
    )
    return _assemble(model, g, order, (src, sink), (k_pair, k_bytes, k_lat), sig_keys, t_ref, stats)


def _assemble(model, g, order, ends, keys_table, sig_keys, t_ref, stats) -> MilpModel:
    """Columns ``[X (P) | τ keys | τ phases | S (order) | T]``; rows ``[cuts | phase maxima |
    arcs | degrees]``."""
    src, sink = ends
    k_pair, k_bytes, k_lat = keys_table
    n_pairs = model.n_pairs
    used = set()
    arcs = []
    for i in [src, *order]:
        for j, ws in g.succ[i].items():
            for c, v in ws:
                vi = (g.var[i],) if g.var[i] >= 0 else ()
                arcs.append((i, j, c + g.const[i], vi + v))
                used.update(vi + v)
    n_keys = int(k_pair.size)
    used_sigs = sorted(u for u in used if u >= n_keys)
    used_keys = sorted(
        {u for u in used if u < n_keys}.union(*(sig_keys[u - n_keys] for u in used_sigs))
    )
    col_of_var = {}
    col = n_pairs
    for u in used_keys + used_sigs:
        col_of_var[u] = col
        col += 1
    col_of_node = {i: col + r for r, i in enumerate(order)}
    n_cols = col + len(order) + 1
    col_of_node[sink] = n_cols - 1

    rows, cols, vals, lo = [], [], [], []
    # Degrees.
    iu, iv = model.pairs
    e = np.arange(n_pairs)
    deg_r = np.concatenate([iu, iv])
    deg_c = np.concatenate([e, e])
    # Secant cuts of every used key: τ + g_k X_e ≥ a + f(k) + g_k k, g_k = f(k) − f(k+1).
    keys = np.asarray(used_keys, dtype=np.int64)
    cap = np.minimum(model.degrees[iu], model.degrees[iv])
    kc = cap[k_pair[keys]]
    key_rep = np.repeat(keys, kc)
    kk = np.arange(kc.sum()) - np.repeat(np.cumsum(kc) - kc, kc)
    b8 = 8.0 * k_bytes[key_rep] / t_ref
    f0 = b8 / (model.rate_bps * kk + model.fallback_bps)
    f1 = b8 / (model.rate_bps * (kk + 1) + model.fallback_bps)
    slope = f0 - f1
    n_cut = key_rep.size
    cut_r = np.arange(n_cut)
    tau_col = np.array([col_of_var[u] for u in key_rep.tolist()], dtype=np.int64)
    rows += [cut_r, cut_r]
    cols += [tau_col, k_pair[key_rep]]
    vals += [np.ones(n_cut), slope]
    lo.append(k_lat[key_rep] / t_ref + f0 + slope * kk)
    r0 = n_cut
    # Phase maxima: τ_φ − τ_κ ≥ 0.
    for u in used_sigs:
        for kappa in sig_keys[u - n_keys]:
            rows.append(np.array([r0, r0]))
            cols.append(np.array([col_of_var[u], col_of_var[kappa]]))
            vals.append(np.array([1.0, -1.0]))
            r0 += 1
    lo.append(np.zeros(r0 - n_cut))
    # Precedence arcs: S_j − S_i − Σ τ ≥ c (S_src = 0; an arc from src without τ is a bound).
    col_lower = np.zeros(n_cols)
    arc_lo = []
    for i, j, c, v in arcs:
        if i == src and not v:
            cj = col_of_node[j]
            col_lower[cj] = max(col_lower[cj], c)
            continue
        cnt = Counter(v)
        rc = [col_of_node[j]] + [col_of_var[u] for u in cnt]
        rv = [1.0] + [-float(k) for k in cnt.values()]
        if i != src:
            rc.append(col_of_node[i])
            rv.append(-1.0)
        rows.append(np.full(len(rc), r0))
        cols.append(np.asarray(rc))
        vals.append(np.asarray(rv))
        arc_lo.append(c)
        r0 += 1
    lo.append(np.asarray(arc_lo, dtype=float))
    rows.append(deg_r + r0)
    cols.append(deg_c)
    vals.append(np.ones(deg_r.size))
    n_rows = r0 + model.n
    row_lower = np.concatenate(lo + [np.zeros(model.n)])
    row_upper = np.full(n_rows, np.inf)
    row_upper[r0:] = model.degrees
    a = sp.csr_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
        shape=(n_rows, n_cols),
    )
    a.sum_duplicates()
    col_upper = np.full(n_cols, np.inf)
    col_upper[:n_pairs] = cap
    integrality = np.zeros(n_cols, dtype=np.int32)
    integrality[:n_pairs] = 1
    cost = np.zeros(n_cols)
    cost[-1] = 1.0
    stats.update(
        cut_rows=n_cut,
        phase_rows=r0 - n_cut - len(arc_lo),
        arc_rows=len(arc_lo),
        tau_vars=len(used_keys) + len(used_sigs),
    )
    return MilpModel(
        cost,
        col_lower,
        col_upper,
        integrality,
        row_lower,
        row_upper,
        a.indptr.astype(np.int32),
        a.indices.astype(np.int32),
        a.data.astype(float),
        n_pairs,
        t_ref,
        stats,
    )


def _highs_lp(mm: MilpModel, integrality: np.ndarray) -> highspy.HighsLp:
    """The model as a ``highspy.HighsLp`` (row-wise constraint matrix, minimisation)."""
    lp = highspy.HighsLp()
    lp.num_col_ = mm.n_vars
    lp.num_row_ = mm.n_cons
    lp.sense_ = highspy.ObjSense.kMinimize
    lp.offset_ = 0.0
    lp.col_cost_ = mm.col_cost
    lp.col_lower_ = mm.col_lower
    lp.col_upper_ = mm.col_upper
    lp.row_lower_ = mm.row_lower
    lp.row_upper_ = mm.row_upper
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.num_col_ = mm.n_vars
    lp.a_matrix_.num_row_ = mm.n_cons
    lp.a_matrix_.start_ = mm.a_start
    lp.a_matrix_.index_ = mm.a_index
    lp.a_matrix_.value_ = mm.a_value
    kinds = (highspy.HighsVarType.kContinuous, highspy.HighsVarType.kInteger)
    lp.integrality_ = [kinds[v] for v in integrality.tolist()]
    return lp


def solve_milp(
    dag: TaskDAG,
    model: OcsModel,
    time_limit_s: float = 60.0,
    mip_rel_gap: float = 1e-6,
    threads: int = 1,
    seed: int = 0,
    x_start: np.ndarray | None = None,
    relax: bool = False,
    reduce: bool = True,
) -> MilpResult:
    """Minimum hard critical path over integer wirings (docs/ocs.md §1.9 A) with HiGHS (highspy).

    Parameters: ``time_limit_s`` (HiGHS wall-clock limit, s), ``mip_rel_gap`` (relative gap at
    which HiGHS stops), ``threads``, ``seed`` (HiGHS ``random_seed``), ``x_start`` (integer
    wiring [P] with at most ``d_v`` ports per pod, passed as a MIP start), ``relax`` (solve
    the LP relaxation instead: a lower bound on the integer optimum), ``reduce`` (apply the
    exact reductions of the module doc).
    """
    t0 = time.perf_counter()
    if not time_limit_s > 0:
        raise ConfigError("time_limit_s", "must be > 0")
    if not 0 <= mip_rel_gap < 1:
        raise ConfigError("mip_rel_gap", "must be in [0, 1)")
    if threads < 1:
        raise ConfigError("threads", "must be >= 1")
    if x_start is not None:
        try:
            model.check_wiring(np.asarray(x_start))
        except InfeasibleError as err:
            raise ConfigError("x_start", str(err)) from None
    mm = milp_model(dag, model, reduce=reduce)
    integrality = np.zeros_like(mm.integrality) if relax else mm.integrality
    h = quiet_highs()
    for name, value in (
        ("output_flag", False),
        ("threads", int(threads)),
        ("random_seed", int(seed)),
        ("time_limit", float(time_limit_s)),
        ("mip_rel_gap", float(mip_rel_gap)),
        ("mip_abs_gap", 0.0),
    ):
        h.setOptionValue(name, value)
    h.passModel(_highs_lp(mm, integrality))
    if x_start is not None and not relax:
        idx = np.arange(mm.n_pairs, dtype=np.int32)
        h.setSolution(mm.n_pairs, idx, np.asarray(x_start, dtype=float))
    h.run()
    status = _STATUS.get(h.getModelStatus(), h.modelStatusToString(h.getModelStatus()))
    info = h.getInfo()
    solver = f"highspy {version('highspy')} (HiGHS {h.version()}, git {h.githash()})"
    t_ref = mm.t_ref_s
    sol = np.asarray(h.getSolution().col_value)
    has_sol = info.primal_solution_status == highspy.kSolutionStatusFeasible and sol.size
    common = dict(
        solver=solver,
        n_vars=mm.n_vars,
        n_cons=mm.n_cons,
        nnz=int(mm.a_value.size),
        highs_s=h.getRunTime(),
        relaxed=relax,
        reductions=mm.stats,
        n_int_vars=0 if relax else mm.n_pairs,
    )
    if relax:
        obj = info.objective_function_value * t_ref if has_sol else float("inf")
        return MilpResult(
            status,
            sol[: mm.n_pairs].copy() if has_sol else None,
            obj,
            obj,
            0.0,
            time.perf_counter() - t0,
            mip_objective_s=obj,
            **common,
        )
    bound = info.mip_dual_bound * t_ref
    if has_sol:
        x = np.rint(sol[: mm.n_pairs]).astype(np.int64)
        obj = hard_critical_path(dag, model, x)
        bound = min(bound, obj)
        gap = (obj - bound) / obj if obj > 0 else 0.0
    else:
        x, obj, gap = None, float("inf"), float("inf")
    return MilpResult(
        status,
        x,
        obj,
        bound,
        gap,
        time.perf_counter() - t0,
        nodes=int(info.mip_node_count),
        mip_objective_s=info.objective_function_value * t_ref,
        **common,
    )
