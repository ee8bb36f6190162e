"""Traffic-oblivious and traffic-matrix baselines for the OCS wiring
(docs/ocs.md §1.3, §3.2 E1/E3/E11).

* :func:`uniform_mesh` — the Fat-Tree analogue [A5]: ``round_to_degrees(M·q)`` with ``q`` the
  KL-projected gravity prior (``q_e = 1/|P|`` for equal degrees).
* :func:`demand_proportional` — circuits proportional to the bytes of each pod pair
  (TopoOpt-like, DAG structure ignored), scaled up by progressive filling until the port
  budgets bind, then rounded with exact degrees.
* :class:`TrafficMatrixCost` — the TM-only objective of ablation E11: the maximum over pairs
  of the aggregated traffic time ``8·β_e / (B·x_e + B0)`` (max pair utilisation), smoothed by
  log-sum-exp, with the :class:`~trainfabric.ocs.wiring.cost.PathCost` interface so that the same
  solver (:func:`trainfabric.ocs.wiring.solver.solve`) optimises it.
"""

from __future__ import annotations

import numba
import numpy as np

from trainfabric.errors import ConfigError
from trainfabric.ocs.model import OcsModel
from trainfabric.ocs.wiring.cost import check_b2
from trainfabric.ocs.wiring.prior import uniform_prior
from trainfabric.ocs.wiring.rounding import round_to_degrees
from trainfabric.workloads.dag import TaskDAG


def _check(dag: TaskDAG, model: OcsModel) -> None:
    if dag.n_pods != model.n:
        raise ConfigError("pods", f"the DAG has {dag.n_pods} pods, the OCS model {model.n}")


def directed_pair_bytes(dag: TaskDAG, model: OcsModel) -> tuple[np.ndarray, np.ndarray]:
    """Bytes of one iteration per pair and direction: ``(low → high, high → low)``, each [P]."""
    _check(dag, model)
    comm = dag.comm_nodes
    src, dst = dag.pod[comm], dag.dst[comm]
    pair = model.pair_index(src, dst)
    up = src < dst
    p = model.n_pairs
    return (
        np.bincount(pair[up], dag.bytes[comm][up], p),
        np.bincount(pair[~up], dag.bytes[comm][~up], p),
    )


def uniform_mesh(model: OcsModel) -> np.ndarray:
    """Integer uniform mesh: ``round_to_degrees(model, M·q)``, ``q = uniform_prior(model)``.

    For equal degrees every pair gets ``floor(M/|P|)`` or ``ceil(M/|P|)`` circuits. Int64 [P]
    (a copy; kept per pod shape, :func:`_cached`).
    """
    mesh = model.total_circuits * uniform_prior(model)
    return _cached(model, ("uniform",), lambda: (round_to_degrees(model, mesh),))[0]


def best_near_uniform(cost, model: OcsModel, samples: int = 4, seed: int = 0) -> np.ndarray:
    """The best integer near-uniform wiring found among ``samples + 2`` candidates (Int64 [P]).

    Every candidate is ``round_to_degrees(model, M·q, score)``: each pair within one circuit
    of the fractional mesh ``M·q`` (``floor`` or ``ceil``), degrees exact where realisable.
    Scores decide which pairs take the spare ports: the default of :func:`uniform_mesh`, the
    pairs' total bytes (spare ports to the busiest pairs), then ``samples`` seeded uniform
    random scores (the traffic-free candidates come from :func:`mesh_candidates`). The
    candidate with the least hard critical path ``cost.hard`` wins (ties: the first). This is
    the honest baseline of ``improvement_vs_uniform``: when ``d < n − 1`` half the pairs of
    any integer mesh have no circuit, and which half matters.
    """
    mesh = mesh_candidates(model, samples, seed)
    up, down = directed_pair_bytes(cost.dag, model)
    busiest = round_to_degrees(model, model.total_circuits * uniform_prior(model), up + down)
    cands = [mesh[0], busiest, *mesh[1:]]
    cps = [cost.hard(x) for x in cands]
    return cands[int(np.argmin(cps))]


# Traffic-free wirings of the last few pod shapes (:func:`_cached`).
_CACHE: dict[tuple, tuple[np.ndarray, ...]] = {}
_CACHE_SIZE = 8


def _cached(model: OcsModel, what: tuple, compute) -> list[np.ndarray]:
    """Copies of ``compute()`` (a tuple of wirings that depend on the pods' port counts and
    ``what`` only), computed once per port counts and ``what`` among the last ``_CACHE_SIZE``:
    re-planning the same cluster for new traffic (a warm start, a stream of traffic matrices)
    rounds only the traffic-dependent candidates."""
    key = (model.degrees.tobytes(), *what)
    hit = _CACHE.get(key)
    if hit is None:
        hit = compute()
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))  # the oldest
        _CACHE[key] = hit
    return [x.copy() for x in hit]


def clear_cache() -> None:
    """Forget the kept traffic-free wirings (a benchmark that times a first plan calls it)."""
    _CACHE.clear()


def mesh_candidates(model: OcsModel, samples: int = 4, seed: int = 0) -> list[np.ndarray]:
    """The traffic-free candidates of :func:`best_near_uniform` (Int64 [P] each): the uniform
    mesh, then ``samples`` roundings of ``M·q`` by seeded uniform random scores (kept per pod
    shape, ``samples`` and ``seed``: :func:`_cached`)."""

    def draw():
        mesh = model.total_circuits * uniform_prior(model)
        rng = np.random.default_rng(seed)
        scores = [rng.random(model.n_pairs) for _ in range(samples)]
        return tuple(round_to_degrees(model, mesh, score) for score in scores)

    return [uniform_mesh(model), *_cached(model, ("random", int(samples), int(seed)), draw)]


def proportional_fill(model: OcsModel, demand: np.ndarray) -> np.ndarray:
    """Fractional circuits ``x_e = t_e·demand_e`` by progressive filling (all in circuits).

    Every pair with demand grows at rate ``demand_e`` (a common level ``t``); when a pod's ports
    are used up its pairs stop (``t_e`` freezes). Ends when every growing pair touches a full
    pod. So ``x ∝ demand`` wherever no port budget binds, ``Σ_u x_uv ≤ d_v``, and ports stay
    free only at pods that have no demand towards a pod with free ports. At most ``n`` rounds,
    each ``O(n)`` plus the pairs it freezes (:func:`_fill_rounds`): ``O(n² + |P|)`` in all.
    """
    demand = np.asarray(demand, dtype=float)
    if demand.shape != (model.n_pairs,):
        raise ConfigError("demand", f"has shape {demand.shape}, expected ({model.n_pairs},)")
    return _fill_rounds(model.n, demand, model.degrees.astype(float))


@numba.njit(cache=True, nogil=True)
def _fill_rounds(n, demand, degrees):  # pragma: no cover - compiled
    """Progressive filling on the complete graph of ``n`` pods (pairs in ``triu`` order).

    Round: ``step = min_v free_v / load_v`` over pods with growing pairs (``load_v`` = their
    summed demand), the level ``t`` rises by ``step``, every such pod's ``free_v`` drops by
    ``step·load_v``, pods left with ``free_v ≤ 1e-12·d_v`` are full and freeze their growing
    pairs at ``x_e = t·demand_e``. Loads are updated per frozen pair; a pod's load is reset to
    exactly 0 when its last growing pair freezes (no rounding residue keeps it busy).
    """
    p = demand.size
    x = np.zeros(p)
    free = degrees.copy()
    load = np.zeros(n)
    count = np.zeros(n, dtype=np.int64)
    grow = demand > 0
    e = 0
    for u in range(n - 1):
        for v in range(u + 1, n):
            if grow[e]:
                load[u] += demand[e]
                load[v] += demand[e]
                count[u] += 1
                count[v] += 1
            e += 1
    full = np.zeros(n, dtype=np.bool_)
    level = 0.0
    while True:
        step = np.inf
        for v in range(n):
            if count[v] > 0:
                step = min(step, free[v] / load[v])
        if step == np.inf:
            break
        level += step
        for v in range(n):
            if count[v] > 0:
                free[v] -= step * load[v]
                if free[v] <= 1e-12 * degrees[v]:
                    free[v] = 0.0
                    full[v] = True
        for v in range(n):
            if full[v] and count[v] > 0:
                for u in range(n):
                    if u == v:
                        continue
                    a, b = min(u, v), max(u, v)
                    e = a * n - a * (a + 1) // 2 + (b - a - 1)
                    if grow[e]:
                        grow[e] = False
                        x[e] = level * demand[e]
                        for w in (u, v):
                            count[w] -= 1
                            load[w] = load[w] - demand[e] if count[w] > 0 else 0.0
    return x


def demand_proportional(dag: TaskDAG, model: OcsModel) -> np.ndarray:
    """Circuits proportional to the total bytes of each pair (both directions summed).

    ``x_frac = proportional_fill(model, bytes)`` (scaled up until the port budgets bind), then
    ``round_to_degrees(model, x_frac)`` (floor + largest-fraction b-matching of the residual).
    Pairs without traffic get circuits only where the degrees force it: the residual program
    of :func:`round_to_degrees` first minimises the circuits placed beyond ``ceil(x_frac)``
    (``ceil(0) = 0`` for those pairs). A DAG without inter-pod bytes gets the uniform mesh.
    Int64 [P] with exact degrees.
    """
    up, down = directed_pair_bytes(dag, model)
    total = up + down
    if not total.any():
        return uniform_mesh(model)
    return round_to_degrees(model, proportional_fill(model, total / total.max()))


class TrafficMatrixCost:
    """TM-only objective of E11 as a function of pair circuits ``x`` [P].

    ``β_e = max(bytes u→v, bytes v→u)`` summed over the iteration (duplex circuits: each
    direction gets the full pair rate, so the busier direction sets the pair's time);
    ``τ_e(x) = 8·β_e / (B·x_e + B0)`` seconds for the pairs with traffic (``A``, latency and
    DAG order ignored). ``hard(x) = max_{e∈A} τ_e`` (the max pair utilisation, in seconds of
    transfer); ``smoothed(x, b2) = (1/b2)·log Σ_{e∈A} exp(b2·τ_e)``, so
    ``hard ≤ smoothed ≤ hard + log|A|/b2``; gradient
    ``∂U/∂x_e = −softmax(b2·τ)_e · 8·β_e·B / (B·x_e + B0)²`` (zero off ``A``). ``log_paths``
    returns ``log|A|`` (the number of LSE terms), so
    :func:`~trainfabric.ocs.wiring.cost.temperatures`
    applies unchanged. Convex in ``x``, like the DAG cost.
    """

    def __init__(self, dag: TaskDAG, model: OcsModel):
        up, down = directed_pair_bytes(dag, model)
        self.model = model
        self.pair_bytes = np.maximum(up, down)
        self.active = np.flatnonzero(self.pair_bytes > 0)
        if self.active.size == 0:
            raise ConfigError("workload", "the DAG has no inter-pod traffic")
        self._bits = 8.0 * self.pair_bytes[self.active]

    def _check_x(self, x) -> np.ndarray:
        x = np.asarray(x, dtype=float)
        if x.shape != (self.model.n_pairs,):
            raise ConfigError("x", f"has shape {x.shape}, expected ({self.model.n_pairs},)")
        return x

    def pair_times(self, x) -> np.ndarray:
        """``τ_e(x)`` (s) on the active pairs ``self.active``."""
        rate = self.model.pair_rate_bps(self._check_x(x)[self.active])
        return self._bits / rate

    def hard(self, x) -> float:
        """``max_e τ_e(x)`` (s)."""
        return float(self.pair_times(x).max())

    def smoothed(self, x, b2: float) -> float:
        """``(1/b2)·LSE(b2·τ(x))`` (s); ``b2`` in 1/s."""
        b2 = check_b2(b2)
        return _logsumexp(b2 * self.pair_times(x)) / b2

    def value_and_grad(self, x, b2: float) -> tuple[float, np.ndarray]:
        """Smoothed value (s) and its exact gradient ``∂U/∂x`` [P] (s per circuit)."""
        b2 = check_b2(b2)
        x = self._check_x(x)
        rate = self.model.pair_rate_bps(x[self.active])
        tau = self._bits / rate
        grad = np.zeros(self.model.n_pairs)
        z = b2 * tau
        weights = np.exp(z - z.max())
        grad[self.active] = -(weights / weights.sum()) * self._bits * self.model.rate_bps / rate**2
        return _logsumexp(z) / b2, grad

    def log_paths(self) -> float:
        """``log|A|``: log of the number of pairs with traffic (terms of the LSE)."""
        return float(np.log(self.active.size))


def _logsumexp(z: np.ndarray) -> float:
    """``log Σ exp z``, shifted by the maximum so that it never overflows."""
    top = float(z.max())
    return top + float(np.log(np.exp(z - top).sum()))
