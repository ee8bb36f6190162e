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

At scale (:func:`priced_split`): beyond ``MAX_LP_VARIABLES`` the LP is not built; a
decomposition per commodity and path, driven by the bundle loads, rebalances the
capacity-proportional split, and a Lagrangian bound from prices on the ports and bundles
certifies its gap to the LP optimum on the instance (tests: within 1% of the LP, and the
bound below it, on small instances where both run; on the 131,072-GPU failures benchmark
the certified gap is reported).

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

import numba
import numpy as np
import scipy.sparse as sp
from scipy.optimize import OptimizeWarning, linprog

from trainfabric.errors import ConfigError, InfeasibleError
from trainfabric.fabric.topology import Topology, bundle_capacity
from trainfabric.limits import check_memory

SOLVER = (
    "scipy.optimize.linprog(method='highs-ipm', run_crossover='off', "
    "primal/dual_feasibility_tolerance=1e-9)"
)
# HiGHS IPM's default feasibility tolerances (1e-7) let it stop "optimal" 1e-5 below the
# optimal lambda on rare instances (seed 7377171 of the edge-LP test in tests/fabric/
# test_mcf.py; none in 1,500 other draws there); at 1e-9 it reaches the optimum, and 512- and
# 2,048-host permutations with 10% failures give the same lambda to the bit at the same cost.
IPM_TOLERANCES = {"primal_feasibility_tolerance": 1e-9, "dual_feasibility_tolerance": 1e-9}
LP_BYTES_PER_NONZERO = 250  # HiGHS IPM factorisation + scipy's sparse copies, per nonzero
LP_BYTES_PER_VARIABLE = 64  # index arrays, bounds, objective, solution over all c P S
MAX_LP_VARIABLES = 500_000  # beyond: the priced decomposition (HiGHS IPM: ~90 s at 524k)


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
                options={"run_crossover": crossover, **IPM_TOLERANCES},
            )
        if res.status == 0:
            break
    if res.status != 0:
        raise InfeasibleError(f"concurrent-flow LP: {res.message}")
    x = np.clip(res.x[:nv], 0.0, None).reshape(n, P, S) * scale
    return ConcurrentFlow(lam=float(res.x[-1]), x=x, status=res.message)


def balanced_split(
    topo: Topology,
    src,
    dst,
    nbytes,
    link_up: np.ndarray,
    max_variables: int = 200_000,
    max_lp_variables: int = MAX_LP_VARIABLES,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The minimum-congestion split of the traffic matrix ``src -> dst`` (``nbytes``) over
    paths ``(p, s)``: ``(keys, y[c, P, S], granularity)``.

    Commodities are the distinct host pairs when they fit ``max_variables`` LP variables,
    else leaf pairs (endpoint ports = the ports of the leaf's sending/receiving hosts).
    Up to ``max_lp_variables`` the split comes from the LP (:func:`_most_even_optimal`);
    beyond, from the priced decomposition (:func:`priced_split`, its gap certified per
    instance): the LP of a 131,072-GPU fabric's leaf pairs has ~10^8 variables.
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
    if keys.size * P * S > max_lp_variables:  # the priced split leaves unroutable ones at 0
        args = (a, b, ks, kd, ports_src, ports_dst, cap_up, cap_down)
        return keys, priced_split(*args, demand).y, ("host" if host else "leaf")
    ok = _routable(a, b, ks, kd, ports_src, ports_dst, cap_up, cap_down)
    y = np.zeros((keys.size, P, S))
    if ok.any():
        args = (a[ok], b[ok], ks[ok], kd[ok], ports_src, ports_dst, cap_up, cap_down)
        if int(ok.sum()) * P * S <= max_lp_variables:
            y[ok] = _most_even_optimal(args, demand[ok])
        else:
            y[ok] = priced_split(*args, demand[ok]).y
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


# -- at scale: the priced decomposition -------------------------------------------------------
@dataclass(frozen=True)
class PricedSplit:
    """A split ``y[c, p, s]`` found by :func:`priced_split`, its congestion ``theta`` (max
    utilisation; ``1/theta`` = the concurrent-flow λ it reaches), a certified lower bound
    ``bound`` on the optimal congestion (so ``theta / bound - 1`` bounds its gap) and the
    rounds of rebalancing run."""

    y: np.ndarray
    theta: float
    bound: float
    iterations: int

    @property
    def gap(self) -> float:
        return self.theta / self.bound - 1.0 if self.bound > 0 else np.inf


def priced_split(
    a, b, ks, kd, ports_src, ports_dst, cap_up, cap_down, demand, iterations: int = 20
) -> PricedSplit:
    """Minimum-congestion split of the LP of the module doc without building the LP, for
    traffic matrices whose LP is too large: a decomposition per commodity and path given
    the bundle loads, with a Lagrangian certificate.

    Start from the capacity-proportional split ``y0`` (each path in proportion to its
    bottleneck capacity). Each iteration computes the loads of every port and bundle, then
    every commodity rescales each of its paths by ``θ / u_path`` (``θ`` the largest
    utilisation, ``u_path`` the utilisation of the path's hottest port or bundle) and
    renormalises: load leaves the paths through hot bundles for the paths through cool
    ones, every commodity independently (the decomposition). It stops after
    ``iterations`` or when the congestion stops falling; the split of least congestion is
    returned. Lower bound (weak duality of the concurrent-flow LP): for any prices
    ``λ_e >= 0``, ``θ* >= Σ_c d_c · min_path Σ_{e ∈ path} λ_e / Σ_e c_e λ_e``; prices
    ``λ_e = (u_e / θ)^q / c_e`` for ``q`` in 16, 64, 256 at the loads of the best and of
    the last split, best kept. So ``theta / bound - 1`` certifies the gap on the instance
    itself.

    What it gives up against the LP: optimality beyond the certified gap, and the LP's
    choice of the most even split among optimal ones (:func:`balanced_split` moves from
    ``y0`` towards the LP optimum only as far as needed; here the rescaling does). Cost per
    iteration ``O(c P S)``, memory two splits of ``c P S`` float64; the tests compare it
    with the LP on small instances.
    """
    ports_src = np.ascontiguousarray(ports_src, np.float64)
    ports_dst = np.ascontiguousarray(ports_dst, np.float64)
    cap_up = np.ascontiguousarray(cap_up, np.float64)
    cap_down = np.ascontiguousarray(cap_down, np.float64)
    a, b, ks, kd = (np.ascontiguousarray(v, np.int64) for v in (a, b, ks, kd))
    cap_in = np.ascontiguousarray(cap_down.transpose(0, 2, 1))  # [P, L, S]: s contiguous
    y = _proportional_split(a, b, ks, kd, ports_src, ports_dst, cap_up, cap_in)
    d = np.asarray(demand, np.float64)
    args = (a, b, ks, kd, d, ports_src, ports_dst, cap_up, cap_in)
    best_y, theta, done = _priced_iterations(y, *args, int(iterations))
    bound = _priced_bound(best_y, *args)
    if theta > bound * (1 + 1e-3):  # try the prices at the last split's loads too
        bound = max(bound, _priced_bound(y, *args))
    return PricedSplit(best_y, float(theta), float(bound), int(done))


@numba.njit(cache=True)
def _proportional_split(a, b, ks, kd, ps, pd, cu, ci):
    """The capacity-proportional split ``y0`` (:func:`_path_capacities` ``.min(0)``,
    normalised) without the ``[4, c, P, S]`` stack; ``ci[p, b, s]`` = spine ``s`` -> leaf
    ``b`` capacity."""
    P, L, S = cu.shape
    C = a.size
    y = np.zeros((C, P, S))
    for c in range(C):
        tot = 0.0
        for p in range(P):
            port = min(ps[p, ks[c]], pd[p, kd[c]])
            if a[c] == b[c]:
                y[c, p, 0] = port
                tot += port
                continue
            for s in range(S):
                v = min(port, cu[p, a[c], s], ci[p, b[c], s])
                y[c, p, s] = v
                tot += v
        if tot > 0.0:
            for p in range(P):
                for s in range(S):
                    y[c, p, s] /= tot
    return y


@numba.njit(cache=True)
def _split_loads(y, a, b, ks, kd, d, ls, ld, lu, li):
    """Loads of the split ``y`` (demands ``d``) on ports and bundles (``li[p, b, s]``)."""
    ls[:] = 0.0
    ld[:] = 0.0
    lu[:] = 0.0
    li[:] = 0.0
    C, P, S = y.shape
    for c in range(C):
        cross = a[c] != b[c]
        for p in range(P):
            tot = 0.0
            for s in range(S):
                f = d[c] * y[c, p, s]
                if f == 0.0:
                    continue
                tot += f
                if cross:
                    lu[p, a[c], s] += f
                    li[p, b[c], s] += f
            ls[p, ks[c]] += tot
            ld[p, kd[c]] += tot


@numba.njit(cache=True)
def _util_max(load, cap):
    worst = 0.0
    flat_l, flat_c = load.ravel(), cap.ravel()
    for i in range(flat_l.size):
        if flat_l[i] > 1e-12 * max(1.0, flat_c[i]):
            if flat_c[i] <= 0.0:
                return np.inf
            worst = max(worst, flat_l[i] / flat_c[i])
    return worst


@numba.njit(cache=True)
def _congestion(y, a, b, ks, kd, d, ps, pd, cu, ci, ls, ld, lu, li):
    _split_loads(y, a, b, ks, kd, d, ls, ld, lu, li)
    return max(_util_max(ls, ps), _util_max(ld, pd), _util_max(lu, cu), _util_max(li, ci))


@numba.njit(cache=True)
def _priced_iterations(y, a, b, ks, kd, d, ps, pd, cu, ci, iterations):
    """Proportional rebalancing (:func:`priced_split`) of ``y`` in place (at least 3
    rounds, then until the congestion falls by less than 1e-4); returns the split of least
    congestion, its congestion and the rounds run."""
    C, P, S = y.shape
    ls, ld = np.zeros_like(ps), np.zeros_like(pd)
    lu, li = np.zeros_like(cu), np.zeros_like(ci)
    best = y.copy()
    best_theta = np.inf
    done = 0
    for it in range(iterations + 1):
        done = it
        theta = _congestion(y, a, b, ks, kd, d, ps, pd, cu, ci, ls, ld, lu, li)
        improved = theta < best_theta * (1.0 - 1e-4)
        if theta < best_theta:
            best_theta = theta
            best[:] = y
        if it == iterations or not np.isfinite(theta) or theta <= 0.0:
            break
        if it >= 3 and not improved:
            break
        for c in range(C):  # every path scaled by θ / (its hottest port or bundle)
            cross = a[c] != b[c]
            tot = 0.0
            for p in range(P):
                us = ls[p, ks[c]] / ps[p, ks[c]] if ps[p, ks[c]] > 0 else np.inf
                ud = ld[p, kd[c]] / pd[p, kd[c]] if pd[p, kd[c]] > 0 else np.inf
                port = max(us, ud, 1e-12 * theta)
                for s in range(S):
                    if y[c, p, s] <= 0.0:
                        continue
                    u = port
                    if cross:
                        u = max(u, lu[p, a[c], s] / cu[p, a[c], s], li[p, b[c], s] / ci[p, b[c], s])
                    y[c, p, s] *= theta / u
                    tot += y[c, p, s]
            if tot > 0.0:
                for p in range(P):
                    for s in range(S):
                        y[c, p, s] /= tot
    return best, best_theta, done


@numba.njit(cache=True)
def _prices(load, cap, theta, q, out):
    """``out = (u / θ)^q / c`` where ``c > 0`` (0 elsewhere); returns ``Σ c · out``."""
    flat_l, flat_c, flat_o = load.ravel(), cap.ravel(), out.ravel()
    total = 0.0
    for i in range(flat_l.size):
        if flat_c[i] > 0.0:
            e = (flat_l[i] / flat_c[i] / theta) ** q
            flat_o[i] = e / flat_c[i]
            total += e
        else:
            flat_o[i] = 0.0
    return total


@numba.njit(cache=True)
def _priced_bound(y, a, b, ks, kd, d, ps, pd, cu, ci):
    """The best Lagrangian lower bound on the optimal congestion over prices
    ``(u / θ)^q / c`` (``q`` in 16, 64, 256) at the loads of ``y`` (:func:`priced_split`)."""
    C, P, S = y.shape
    ls, ld = np.zeros_like(ps), np.zeros_like(pd)
    lu, li = np.zeros_like(cu), np.zeros_like(ci)
    theta = _congestion(y, a, b, ks, kd, d, ps, pd, cu, ci, ls, ld, lu, li)
    if not np.isfinite(theta) or theta <= 0.0:
        return 0.0
    bound = 0.0
    for q in (16.0, 64.0, 256.0):
        gs, gd = np.zeros_like(ps), np.zeros_like(pd)
        gu, gi = np.zeros_like(cu), np.zeros_like(ci)
        denom = _prices(ls, ps, theta, q, gs) + _prices(ld, pd, theta, q, gd)
        denom += _prices(lu, cu, theta, q, gu) + _prices(li, ci, theta, q, gi)
        num = 0.0
        for c in range(C):
            gmin = np.inf
            for p in range(P):
                if ps[p, ks[c]] <= 0 or pd[p, kd[c]] <= 0:
                    continue
                base = gs[p, ks[c]] + gd[p, kd[c]]
                if a[c] == b[c]:
                    gmin = min(gmin, base)
                    continue
                for s in range(S):
                    if cu[p, a[c], s] > 0 and ci[p, b[c], s] > 0:
                        gmin = min(gmin, base + gu[p, a[c], s] + gi[p, b[c], s])
            if gmin < np.inf:
                num += d[c] * gmin
        if denom > 0.0:
            bound = max(bound, num / denom)
    return bound
