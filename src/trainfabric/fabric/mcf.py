"""Maximum concurrent flow / minimum congestion on a multiplane 2-tier fabric (HiGHS LP).

Commodities ``c`` (a source and a destination *endpoint*: a host, or all hosts of a leaf)
with demands ``d_c`` are split over their up-down paths: for endpoints on different leaves
the paths are ``(p, s)`` (endpoint ports on plane ``p`` -> leaf ``a`` -> spine ``s`` -> leaf
``b`` -> endpoint ports), on one leaf the planes ``p``. Leaf-spine cables of one pair form a
bundle (any split over them is free), so the variables are ``x[c, p, s] >= 0`` with

    Σ_{p,s} x[c,p,s] = λ d_c                              (every commodity)
    Σ_{c from e} Σ_s x[c,p,s] <= r · ports(e, p)          (source endpoint's ports on plane p)
    Σ_{c to e} Σ_s x[c,p,s] <= r · ports(e, p)            (destination endpoint's ports)
    Σ_{c: a(c)=a} x[c,p,s] <= r · alive(p, a, s)          (leaf -> spine bundle)
    Σ_{c: b(c)=b} x[c,p,s] <= r · alive(p, s, b)          (spine -> leaf bundle)

maximise ``λ`` (the congestion of the demands is ``1/λ``). With hosts as endpoints this is the
throughput any load balancer could reach with perfect, free splitting: the reference of the
failures figure. Solved by HiGHS's interior-point method without crossover
(``scipy.optimize.linprog``), which spreads commodities over more paths than a vertex.

The ``adaptive`` mode's split (:func:`balanced_split`) is the point of the segment from the
capacity-proportional split ``y0`` (each path in proportion to its bottleneck capacity) to
the LP's optimum ``y*`` that is closest to ``y0`` and still within ``1e-3`` of the optimal
congestion: the congestion ``θ`` is convex along the segment, so bisection finds it. Optimal
faces are large (on a healthy fabric every split with even leaf loads is optimal); this
picks the most even optimal split, as hardware spraying over equal queues would.

Size guard: :func:`solve` prices the LP before building it (:func:`lp_size`: ``c P S``
variables; a cross-leaf path variable has 5 nonzeros — two port rows, two bundle rows, its
commodity's equality — a same-leaf one 3) at ``LP_BYTES_PER_NONZERO`` per nonzero plus
``LP_BYTES_PER_VARIABLE`` per variable, and refuses over the memory limit with a ConfigError
naming ``topology.gpus`` (the hosts set the commodities). Measured peak (VmHWM, HiGHS IPM):
about 1,400 B per variable on 256-4,096-host permutations (8k-524k variables; 1 s, 6 s,
24 s and 90 s of solving at 8k, 65k, 262k, 524k variables).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.optimize import OptimizeWarning, linprog

from trainfabric.errors import ConfigError, InfeasibleError
from trainfabric.fabric.topology import Topology, bundle_capacity
from trainfabric.limits import check_memory

SOLVER = "scipy.optimize.linprog(method='highs-ipm', run_crossover='off')"
LP_BYTES_PER_NONZERO = 250  # HiGHS IPM factorisation + scipy's sparse copies, per nonzero
LP_BYTES_PER_VARIABLE = 64  # index arrays, bounds, objective, solution over all c P S


def lp_size(commodities: int, planes: int, spines: int, same_leaf: int = 0) -> tuple[int, int]:
    """``(variables, nonzeros)`` of the LP over ``commodities`` (``same_leaf`` of them between
    endpoints of one leaf, which use the ``planes`` paths only)."""
    variables = commodities * planes * spines
    nonzeros = 5 * (commodities - same_leaf) * planes * spines + 3 * same_leaf * planes
    return variables, nonzeros


def check_lp_size(
    commodities: int, planes: int, spines: int, same_leaf: int = 0, field: str = "topology.gpus"
) -> None:
    """ConfigError naming ``field`` when the LP (:func:`lp_size`) exceeds the memory limit."""
    variables, nonzeros = lp_size(commodities, planes, spines, same_leaf)
    check_memory(
        field,
        LP_BYTES_PER_NONZERO * float(nonzeros) + LP_BYTES_PER_VARIABLE * float(variables),
        f"the concurrent-flow LP of {commodities:,} commodities ({variables:,} variables, "
        f"{nonzeros:,} nonzeros)",
    )


@dataclass(frozen=True)
class ConcurrentFlow:
    """``lam``: the optimal λ; ``x[c, p, s]`` (units of the demands) a central optimal split."""

    lam: float
    x: np.ndarray
    status: str
    solver: str = SOLVER


def max_concurrent_flow(
    topo: Topology, src, dst, demand_bps, link_up: np.ndarray | None = None
) -> ConcurrentFlow:
    """Maximum concurrent flow of host flows ``src -> dst`` with demands (module doc)."""
    _check_2tier(topo)
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    d = np.broadcast_to(np.asarray(demand_bps, float), src.shape)
    if np.any(d <= 0):
        raise ConfigError("demand_bps", "must be > 0")
    up = np.ones(topo.n_links, bool) if link_up is None else np.asarray(link_up, bool)
    r = topo.port_rate_bps
    ports_src = up[topo.host_up].astype(float) * r
    ports_dst = up[topo.host_down].astype(float) * r
    cap_up, cap_down = bundle_capacity(topo, up)
    return solve(
        topo.leaf_of(src),
        topo.leaf_of(dst),
        src,
        dst,
        ports_src,
        ports_dst,
        cap_up * r,
        cap_down * r,
        d,
    )


def solve(a, b, ks, kd, ports_src, ports_dst, cap_up, cap_down, demand) -> ConcurrentFlow:
    """The LP of the module doc for commodities ``c`` between leaves ``a[c]``, ``b[c]`` with
    endpoint keys ``ks[c]``, ``kd[c]`` (columns of ``ports_src``/``ports_dst`` ``[P, K]``).
    Refuses an LP over the memory limit before building it (:func:`check_lp_size`)."""
    n = a.size
    P, L, S = cap_up.shape
    same = a == b
    check_lp_size(n, P, S, int(same.sum()))
    nv = n * P * S
    f_idx, p_idx, s_idx = np.unravel_index(np.arange(nv), (n, P, S))
    used = ~same[f_idx] | (s_idx == 0)
    rows, cols, rhs = [], [], []

    def constrain(key: np.ndarray, cap: np.ndarray, mask: np.ndarray) -> None:
        """One row per distinct ``key`` of the variables in ``mask``: Σ x <= cap[key]."""
        keys, inv = np.unique(key[mask], return_inverse=True)
        rows.append(sum(x.size for x in rhs) + inv)
        cols.append(np.flatnonzero(mask))
        rhs.append(cap[keys])

    constrain(ks[f_idx] * P + p_idx, ports_src.T.ravel(), used)
    constrain(kd[f_idx] * P + p_idx, ports_dst.T.ravel(), used)
    cross = used & ~same[f_idx]
    constrain((p_idx * L + a[f_idx]) * S + s_idx, cap_up.ravel(), cross)
    constrain((p_idx * S + s_idx) * L + b[f_idx], cap_down.ravel(), cross)
    row = np.concatenate(rows)
    a_ub = sp.csr_matrix(
        (np.ones(row.size), (row, np.concatenate(cols))), shape=(row.max() + 1, nv + 1)
    )
    scale = float(demand.max())
    eq = np.flatnonzero(used)
    a_eq = sp.csr_matrix(
        (
            np.r_[np.ones(eq.size), -demand / scale],
            (np.r_[f_idx[eq], np.arange(n)], np.r_[eq, np.full(n, nv)]),
        ),
        shape=(n, nv + 1),
    )
    c = np.zeros(nv + 1)
    c[-1] = -1.0
    bounds = np.zeros((nv + 1, 2))
    bounds[:, 1] = np.where(np.r_[used, True], np.inf, 0.0)
    # without crossover, HiGHS's IPM sometimes stops with status "unknown" on a feasible,
    # bounded LP (x = 0, λ = 0 is always feasible): then solve again with crossover
    for crossover in ("off", "on"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OptimizeWarning)  # run_crossover goes to HiGHS
            res = linprog(
                c,
                A_ub=a_ub,
                b_ub=np.concatenate(rhs) / scale,
                A_eq=a_eq,
                b_eq=np.zeros(n),
                bounds=bounds,
                method="highs-ipm",
                options={"run_crossover": crossover},
            )
        if res.status == 0:
            break
    if res.status != 0:
        raise InfeasibleError(f"concurrent-flow LP: {res.message}")
    x = np.clip(res.x[:nv], 0.0, None).reshape(n, P, S) * scale
    return ConcurrentFlow(lam=float(res.x[-1]), x=x, status=res.message)


def balanced_split(
    topo: Topology, src, dst, nbytes, link_up: np.ndarray, max_variables: int = 200_000
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The minimum-congestion split of the traffic matrix ``src -> dst`` (``nbytes``) over
    paths ``(p, s)``: ``(keys, y[c, P, S], granularity)``.

    Commodities are the distinct host pairs when they fit ``max_variables`` LP variables,
    else leaf pairs (endpoint ports = the ports of the leaf's sending/receiving hosts).
    ``keys`` are the sorted commodity keys (``src·H + dst`` or ``a·L + b``); ``y`` sums to 1
    over the paths of each commodity (0 for a commodity without a path).
    """
    _check_2tier(topo)
    H, P = topo.n_hosts, topo.planes
    L, S = topo.tables["leaf_up"].shape[1], topo.tables["spine_down"].shape[1]
    cap_up, cap_down = bundle_capacity(topo, link_up)
    host = np.unique(src * H + dst).size * P * S <= max_variables
    if host:
        key = src * H + dst
        keys, inv = np.unique(key, return_inverse=True)
        ks, kd = keys // H, keys % H
        a, b = topo.leaf_of(ks), topo.leaf_of(kd)
        ports_src = link_up[topo.host_up].astype(float)
        ports_dst = link_up[topo.host_down].astype(float)
    else:
        la, lb = topo.leaf_of(src), topo.leaf_of(dst)
        keys, inv = np.unique(la * L + lb, return_inverse=True)
        ks, kd = keys // L, keys % L
        a, b = ks, kd
        leaf = topo.host_leaf[0]
        ports_src = _leaf_ports(topo, link_up, topo.host_up, np.unique(src), leaf, L)
        ports_dst = _leaf_ports(topo, link_up, topo.host_down, np.unique(dst), leaf, L)
    demand = np.bincount(inv, weights=nbytes, minlength=keys.size)
    demand = demand / demand.max()  # the split is scale-free; capacities are in ports
    ok = _routable(a, b, ks, kd, ports_src, ports_dst, cap_up, cap_down)
    y = np.zeros((keys.size, P, S))
    if ok.any():
        args = (a[ok], b[ok], ks[ok], kd[ok], ports_src, ports_dst, cap_up, cap_down)
        y[ok] = _most_even_optimal(args, demand[ok])
    return keys, y, ("host" if host else "leaf")


def _most_even_optimal(args: tuple, demand: np.ndarray, rtol: float = 1e-3) -> np.ndarray:
    """The split on the segment from the capacity-proportional ``y0`` to the LP optimum
    closest to ``y0`` whose congestion is within ``rtol`` of the optimum (module doc)."""
    y_opt = _normalise(solve(*args, demand).x)
    y0 = _normalise(_path_capacities(*args).min(axis=0))
    theta = congestion(y_opt, *args, demand) * (1 + rtol)
    if congestion(y0, *args, demand) <= theta:
        return y0
    lo, hi = 0.0, 1.0  # weight of y0; the congestion is convex along the segment
    for _ in range(30):
        mid = 0.5 * (lo + hi)
        if congestion(mid * y0 + (1 - mid) * y_opt, *args, demand) <= theta:
            lo = mid
        else:
            hi = mid
    return lo * y0 + (1 - lo) * y_opt


def _path_capacities(a, b, ks, kd, ports_src, ports_dst, cap_up, cap_down) -> np.ndarray:
    """Capacities ``[4, c, P, S]`` of the four bundles on every path of every commodity:
    source ports, leaf -> spine, spine -> leaf, destination ports. Same-leaf commodities
    use the planes only (path ``(p, 0)``; the other ``s`` get 0)."""
    P, L, S = cap_up.shape
    same = (a == b)[:, None, None]
    shape = (a.size, P, S)
    caps = np.stack(
        [
            np.broadcast_to(ports_src[:, ks].T[:, :, None], shape),
            np.where(same, np.inf, cap_up[:, a, :].transpose(1, 0, 2)),
            np.where(same, np.inf, cap_down[:, :, b].transpose(2, 0, 1)),
            np.broadcast_to(ports_dst[:, kd].T[:, :, None], shape),
        ]
    )
    return np.where(same & (np.arange(S) > 0), 0.0, caps)


def congestion(y, a, b, ks, kd, ports_src, ports_dst, cap_up, cap_down, demand) -> float:
    """Largest utilisation (load / capacity) over the ports and bundles under split ``y``
    (``inf`` when a split sends traffic over a dead bundle)."""
    P = cap_up.shape[0]
    flow = demand[:, None, None] * y
    plane = flow.sum(axis=2)
    cross = a != b
    loads = [np.zeros_like(c) for c in (ports_src, cap_up, cap_down, ports_dst)]
    for p in range(P):
        np.add.at(loads[0][p], ks, plane[:, p])
        np.add.at(loads[1][p], a[cross], flow[cross, p, :])
        np.add.at(loads[2][p].T, b[cross], flow[cross, p, :])
        np.add.at(loads[3][p], kd, plane[:, p])
    worst = 0.0
    for load, cap in zip(loads, (ports_src, cap_up, cap_down, ports_dst), strict=True):
        if np.any((load > 1e-12) & (cap <= 0)):
            return np.inf
        util = np.divide(load, cap, out=np.zeros_like(load), where=cap > 0)
        worst = max(worst, float(util.max(initial=0.0)))
    return worst


def _normalise(y: np.ndarray) -> np.ndarray:
    total = y.sum(axis=(1, 2), keepdims=True)
    return np.divide(y, total, out=np.zeros_like(y), where=total > 0)


def _leaf_ports(topo, up, links, hosts, leaf, n_leaves) -> np.ndarray:
    return np.stack(
        [np.bincount(leaf[hosts], up[links[p, hosts]], n_leaves) for p in range(topo.planes)]
    )


def _routable(a, b, ks, kd, ports_src, ports_dst, cap_up, cap_down) -> np.ndarray:
    """Commodities with at least one path of positive capacity."""
    plane_ok = (ports_src[:, ks] > 0) & (ports_dst[:, kd] > 0)  # [P, c]
    fabric_ok = ((cap_up[:, a, :] > 0) & (cap_down[:, :, b].transpose(0, 2, 1) > 0)).any(axis=2)
    return (plane_ok & ((a == b)[None, :] | fabric_ok)).any(axis=0)


def _check_2tier(topo: Topology) -> None:
    if topo.kind == "fat_tree":
        raise ConfigError("topology.kind", "the concurrent-flow LP is built for 2-tier planes")
