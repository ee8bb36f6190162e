"""The exact one-hop wiring optimum (max link utilisation) and its mapping onto the planner.

**Problem.** ``n`` pods, ``r_v`` ports per pod, ``c`` capacity units per circuit and a directed
traffic matrix ``D`` (same units as ``c``). Every pair is served concurrently and only over
its direct circuits, which are duplex [A2], so the load of the unordered pair ``e = (u, v)``
is ``D_e = max(D_uv, D_vu)``. Choose symmetric integer circuits ``X_e ≥ 0`` with
``Σ_u X_uv ≤ r_v`` (dark ports allowed) and optionally ``X_e ≤ cap`` to minimise the maximum
link utilisation

    MLU(X) = max_{e : D_e > 0}  D_e / (X_e · c)        (``inf`` if a loaded pair has no circuit).

**Exact algorithm** (:func:`one_hop_optimum`). For a target ``u > 0`` the fewest circuits that
keep pair ``e`` at or below ``u`` are ``X_e(u) = ⌈D_e / (u c)⌉``, non-increasing in ``u``; so
``u`` is achievable iff ``X(u)`` fits the ports (and the pair cap), and the set of achievable
``u`` is an interval ``[u*, ∞)``. At the optimum some pair is tight, hence
``u* ∈ {D_e / (k c) : D_e > 0, 1 ≤ k ≤ K_e}`` with ``K_e = min(r_u, r_v, cap)``: a binary search
over these sorted candidates finds it exactly with ``O(log(Σ K_e))`` feasibility checks of
``O(P)`` each. ``X_e(u)`` is computed as the least integer ``k`` with ``D_e / (k c) ≤ u`` in
the same floating-point expression as the MLU itself (a ceiling of the quotient corrected by
one step either way), so the returned wiring has exactly the returned MLU.

**Mapping to the planner** (:func:`to_dag`). One phase, zero latency, one comm node per
directed pair with ``b_uv = D_uv · B · T / (8 c)`` bytes, where ``B`` is the circuit rate and
``T`` (s) the time unit. A pair's transfer then lasts ``8 b / (B X + B0) = T · D / (X c) ·
1 / (1 + B0 / (B X))`` and the hard critical path of a wiring that gives every loaded pair a
circuit is the max over pairs:

    T · MLU(X) / (1 + B0 / B)  ≤  critical path(X)  ≤  T · MLU(X),

so the DAG's optimum is ``T · u*`` within the relative error ``B0 / B`` (default
``B0 = 1e-6 · B``). A loaded pair without a circuit lasts ``T · D / c · B / B0``, a million
times its one-circuit time, so no optimiser leaves one dark while some wiring covers them all.

**Data.** :func:`load_instances` reads the Meta pod-level matrices shipped in
``tests/data/meta-pod-traffic/`` (Facebook_pod_a via FIGRET and ATRO; see its README):
``{"instances": [{"id", "n", "r", "c", "D": [[i, j, D_ij], ...], "absm_mlu"}, ...]}``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trainfabric.errors import ConfigError
from trainfabric.ocs.model import OcsModel
from trainfabric.workloads.dag import Phase, TaskDAG
from trainfabric.workloads.traffic import PhaseTraffic, dag_from_traffic

DEFAULT_FALLBACK_REL = 1e-6  # B0 / B of the converted model: the relative error of the mapping


@dataclass(frozen=True, eq=False)
class OneHopInstance:
    """A one-hop instance: ``traffic`` [n, n] directed demand (row = source, zero diagonal),
    ``ports`` [n] per pod, ``capacity`` per circuit (units of ``traffic``), optional ``cap``
    on circuits per pair, ``name`` and the ``reference`` optimum shipped with the data."""

    traffic: np.ndarray
    ports: np.ndarray
    capacity: float
    name: str = ""
    cap: int | None = None
    reference: float | None = None

    def __post_init__(self) -> None:
        t = np.asarray(self.traffic, dtype=float)
        n = t.shape[0] if t.ndim == 2 else 0
        if t.ndim != 2 or t.shape != (n, n) or n < 2:
            raise ConfigError("traffic", f"must be a square matrix of >= 2 pods, got {t.shape}")
        if not np.isfinite(t).all() or (t < 0).any():
            raise ConfigError("traffic", "must be finite and >= 0")
        ports = np.broadcast_to(np.asarray(self.ports), (n,))
        if not np.issubdtype(ports.dtype, np.integer) or (ports < 0).any():
            raise ConfigError("ports", "must be non-negative integers")
        if not self.capacity > 0:
            raise ConfigError("c", "the capacity per circuit must be > 0")
        if self.cap is not None and self.cap < 0:
            raise ConfigError("cap", "must be >= 0")
        t = t.copy()
        np.fill_diagonal(t, 0.0)
        object.__setattr__(self, "traffic", t)
        object.__setattr__(self, "ports", ports.astype(np.int64))

    @property
    def n(self) -> int:
        return int(self.traffic.shape[0])

    def pair_load(self) -> np.ndarray:
        """``D_e = max(D_uv, D_vu)`` [P] over the pairs in ``triu_indices`` order."""
        iu, iv = np.triu_indices(self.n, 1)
        return np.maximum(self.traffic[iu, iv], self.traffic[iv, iu])

    def pair_cap(self) -> np.ndarray:
        """``K_e = min(r_u, r_v, cap)`` [P]: most circuits pair ``e`` can hold."""
        iu, iv = np.triu_indices(self.n, 1)
        k = np.minimum(self.ports[iu], self.ports[iv])
        return k if self.cap is None else np.minimum(k, self.cap)


@dataclass(frozen=True)
class OneHopResult:
    """``mlu`` (dimensionless; ``inf`` if no wiring serves every loaded pair), an optimal
    wiring ``x`` [P] (None when ``mlu`` is ``inf``) and ``checks``, the feasibility tests the
    binary search made. ``success``: a wiring exists (``x`` is not None); ``message`` says
    so."""

    mlu: float
    x: np.ndarray | None
    checks: int

    @property
    def success(self) -> bool:
        return self.x is not None

    @property
    def message(self) -> str:
        if self.success:
            return f"optimal: MLU {self.mlu:.6g} after {self.checks} checks"
        return "infeasible: no wiring gives every loaded pair a circuit"


def mlu(inst: OneHopInstance, x) -> float:
    """``max_{D_e > 0} D_e / (x_e c)`` of the wiring ``x`` [P] (``inf`` if a loaded pair has
    no circuit, 0 without traffic)."""
    load = inst.pair_load()
    x = np.asarray(x, dtype=float)
    if x.shape != load.shape:
        raise ConfigError("x", f"has shape {x.shape}, expected {load.shape}")
    on = load > 0
    if not on.any():
        return 0.0
    if (x[on] <= 0).any():
        return float("inf")
    return float(np.max(load[on] / (x[on] * inst.capacity)))


def _circuits_for(load: np.ndarray, c: float, u: float) -> np.ndarray:
    """Least integer ``k ≥ 1`` with ``load / (k c) ≤ u`` per loaded pair (``load > 0``),
    using the same floating-point expression as :func:`mlu`."""
    k = np.maximum(np.ceil(load / (u * c)), 1.0)
    k = np.where(load / (k * c) > u, k + 1.0, k)
    lower = np.maximum(k - 1.0, 1.0)
    return np.where((k > 1.0) & (load / (lower * c) <= u), lower, k)


def one_hop_optimum(inst: OneHopInstance) -> OneHopResult:
    """Exact minimum MLU over integer wirings with at most ``r_v`` ports per pod (and at most
    ``cap`` circuits per pair): binary search over the candidates ``D_e / (k c)`` (module
    doc). The returned wiring is the least one for ``u*`` (``X_e(u*)``, dark ports left dark)."""
    load = inst.pair_load()
    on = np.flatnonzero(load > 0)
    x = np.zeros(load.size, dtype=np.int64)
    if on.size == 0:
        return OneHopResult(0.0, x, 0)
    iu, iv = np.triu_indices(inst.n, 1)
    kmax = inst.pair_cap()[on]
    if (kmax < 1).any():
        return OneHopResult(float("inf"), None, 0)
    c, loaded = inst.capacity, load[on]
    cand = np.unique(np.repeat(loaded, kmax) / (_ranks(kmax) * c))  # ascending
    # cand[-1] needs one circuit per loaded pair: the least demanding wiring
    best, checks = _least_feasible(
        cand, lambda u: _circuits_for(loaded, c, u), kmax, (iu[on], iv[on]), inst.ports
    )
    if best is None:
        return OneHopResult(float("inf"), None, checks)
    x[on] = best.astype(np.int64)
    return OneHopResult(mlu(inst, x), x, checks)


def _least_feasible(
    cand: np.ndarray,
    circuits: Callable[[float], np.ndarray],
    kmax: np.ndarray,
    ends: tuple[np.ndarray, np.ndarray],
    ports: np.ndarray,
) -> tuple[np.ndarray | None, int]:
    """Binary search for the least feasible target among the ascending ``cand``.

    ``circuits(t)`` [L] is the fewest circuits per pair that meet the target ``t`` (non-
    increasing in ``t``); ``t`` is feasible when ``k = circuits(t)`` has ``k_e ≤ kmax[e]`` and
    ``Σ_{e ∋ v} k_e ≤ ports[v]`` with ``ends = (u, v)`` [L] the pairs' pods, so the feasible
    targets are an upper set and one check of ``cand[-1]`` decides whether any is. Returns
    ``(circuits(t*), checks)``, or ``(None, 1)`` when ``cand[-1]`` is infeasible."""
    u, v = ends
    n = ports.size

    def fits(t: float) -> np.ndarray | None:
        k = circuits(t)
        if (k > kmax).any():
            return None
        deg = np.bincount(u, k, n) + np.bincount(v, k, n)
        return k if (deg <= ports).all() else None

    best, checks = fits(cand[-1]), 1
    if best is None:
        return None, checks
    lo, hi = 0, cand.size - 1  # cand[hi] feasible; find the first feasible index
    while lo < hi:
        mid = (lo + hi) // 2
        k = fits(cand[mid])
        checks += 1
        if k is None:
            lo = mid + 1
        else:
            hi, best = mid, k
    return best, checks


def _ranks(counts: np.ndarray) -> np.ndarray:
    """``1..counts[i]`` for every ``i``, concatenated."""
    starts = np.cumsum(counts) - counts
    return np.arange(1, counts.sum() + 1) - np.repeat(starts, counts)


# -- data and the mapping onto the planner --------------------------------------------------


def load_instances(path: str | Path) -> list[OneHopInstance]:
    """The instances of a one-hop JSON file (module doc; ``absm_mlu`` becomes ``reference``)."""
    try:
        doc = json.loads(Path(path).read_text())
        out = []
        for item in doc["instances"]:
            n = int(item["n"])
            t = np.zeros((n, n))
            for i, j, dij in item["D"]:
                t[int(i), int(j)] += float(dij)
            out.append(
                OneHopInstance(
                    t,
                    np.full(n, int(item["r"]), dtype=np.int64),
                    float(item["c"]),
                    str(item.get("id", "")),
                    reference=item.get("absm_mlu"),
                )
            )
    except (OSError, ValueError, KeyError, TypeError, IndexError) as err:
        raise ConfigError("path", f"{path}: not a one-hop instance file ({err})") from None
    return out


def to_model(
    inst: OneHopInstance,
    ocs: int = 1,
    rate_bps: float = 100e9,
    fallback_rel: float = DEFAULT_FALLBACK_REL,
) -> OcsModel:
    """The OCS model of an instance: ``r_v`` ports per pod on ``ocs`` switches, circuit rate
    ``B = rate_bps``, fallback ``B0 = fallback_rel · B`` (the mapping's relative error).
    The pair cap has no counterpart in the model (its own cap is ``min(d_u, d_v)``)."""
    if not 0 < fallback_rel < 1:
        raise ConfigError("fallback_rel", "must be in (0, 1)")
    return OcsModel(inst.ports, ocs, rate_bps=rate_bps, fallback_bps=fallback_rel * rate_bps)


def to_dag(inst: OneHopInstance, rate_bps: float = 100e9, time_unit_s: float = 1.0) -> TaskDAG:
    """One phase with every loaded directed pair, ``b_uv = D_uv · B · T / (8 c)`` bytes and
    zero latency, so that its critical path on a wiring is ``T · MLU`` within ``B0 / B``
    (module doc)."""
    src, dst = np.nonzero(inst.traffic)
    scale = rate_bps * time_unit_s / (8.0 * inst.capacity)
    one = PhaseTraffic(
        inst.n,
        (Phase("one-hop", "one-hop"),),
        np.array([0, src.size]),
        src.astype(np.int32),
        dst.astype(np.int32),
        inst.traffic[src, dst] * scale,
    )
    return dag_from_traffic(one, latency_s=0.0)


PlanFn = Callable[[TaskDAG, OcsModel], np.ndarray]


def evaluate_planner(
    instances: Sequence[OneHopInstance], plan_fn: PlanFn, ocs: int = 1
) -> np.ndarray:
    """Relative gap ``MLU(x) / u* − 1`` [len(instances)] of ``plan_fn(dag, model) -> x`` on
    every instance, with ``(dag, model)`` from :func:`to_dag` / :func:`to_model` and ``u*``
    from :func:`one_hop_optimum` (``inf`` where the plan leaves a loaded pair without a
    circuit; instances without traffic or without a finite optimum are refused)."""
    gaps = np.empty(len(instances))
    for i, inst in enumerate(instances):
        best = one_hop_optimum(inst).mlu
        if not 0 < best < np.inf:
            raise ConfigError("instances", f"{inst.name or i}: optimum is {best}, no gap")
        model = to_model(inst, ocs)
        x = np.asarray(plan_fn(to_dag(inst), model))
        model.check_wiring(x)
        gaps[i] = mlu(inst, x) / best - 1.0
    return gaps


def least_bottleneck(
    table: np.ndarray, kmax: np.ndarray, ends: tuple[np.ndarray, np.ndarray], ports: np.ndarray
) -> tuple[np.ndarray, int]:
    """Exact min-max wiring for per-pair non-increasing time tables: the generalisation of
    :func:`one_hop_optimum` to latencies and a fallback rate (the planner's one-hop path).

    ``table`` [L, K+1]: ``table[e, k]`` = time (s) of loaded pair ``e`` with ``k`` circuits,
    non-increasing in ``k`` (entries ``k > kmax[e]`` ignored); ``ends`` = its pods ``(u, v)``
    [L] each; ``ports`` [n] = ``r_v``. Minimises ``max_e table[e, x_e]`` over integers
    ``0 ≤ x_e ≤ kmax[e]`` with ``Σ_{e ∋ v} x_e ≤ r_v``. For a target ``t`` the fewest circuits
    are ``k_e(t) = #{k ≤ kmax_e : table[e, k] > t}`` (no float re-evaluation, so the wiring
    meets ``t`` exactly); achievable targets form ``[t*, ∞)`` and ``t*`` is a table entry, so a
    binary search over the sorted entries is exact. ``x = 0`` is always feasible (column 0).
    Returns the least wiring ``k(t*)`` [L] and the number of feasibility checks."""
    table = np.asarray(table, dtype=float)
    valid = np.arange(table.shape[1])[None, :] <= np.asarray(kmax)[:, None]
    cand = np.unique(table[valid])  # cand[-1] = max_e table[e, 0]: x = 0 meets it
    best, checks = _least_feasible(
        cand, lambda t: ((table > t) & valid).sum(axis=1), kmax, ends, ports
    )
    return best.astype(np.int64), checks
