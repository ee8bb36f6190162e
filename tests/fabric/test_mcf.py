"""Maximum concurrent flow (HiGHS IPM, path/bundle formulation) against closed forms and an
independent edge-based LP (per-cable capacities, explicit flow conservation at every switch,
up-down paths) solved with scipy's HiGHS simplex; the adaptive mode's balanced split reaches
the optimal congestion.
"""

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from scipy.optimize import linprog

from trainfabric.errors import ConfigError
from trainfabric.fabric import topology as T
from trainfabric.fabric.mcf import balanced_split, max_concurrent_flow


def derangement(n, rng):
    while True:
        p = rng.permutation(n)
        if not np.any(p == np.arange(n)):
            return p


@pytest.mark.parametrize("planes,radix,hosts", [(4, 16, 64), (2, 16, 128), (1, 8, 32)])
def test_full_bisection_permutation_runs_at_line_rate(planes, radix, hosts):
    topo = T.multiplane(hosts, planes, radix, 800e9)
    rng = np.random.default_rng(planes)
    dst = derangement(hosts, rng)
    sol = max_concurrent_flow(topo, np.arange(hosts), dst, 800e9)
    assert sol.lam == pytest.approx(1.0, rel=1e-7)
    np.testing.assert_allclose(sol.x.sum(axis=(1, 2)), sol.lam * 800e9, rtol=1e-6)
    # twice the demand: half of it fits
    assert max_concurrent_flow(topo, np.arange(hosts), dst, 1600e9).lam == pytest.approx(
        0.5, rel=1e-7
    )


@pytest.mark.parametrize("k", [1, 3, 5])
def test_leaf_losing_k_uplinks_per_plane(k):
    """Leaf 0 lost k of its U = 8 uplinks on every plane (both directions): its 8 hosts send
    at full NIC demand to other leaves (and the rest of a permutation runs too), so
    lambda = (U - k) / U."""
    P, U = 4, 8
    topo = T.multiplane(64, P, 16, 800e9)
    rng = np.random.default_rng(k)
    up = np.ones(topo.n_links, bool)
    for p in range(P):
        dead = topo.tables["leaf_up"][p, 0, rng.choice(U, k, replace=False)]
        up[dead] = up[topo.reverse[dead]] = False
    # hosts 0..7 (leaf 0) -> hosts of leaves 1..7; the others form a cross-leaf permutation
    dst = np.r_[8 + rng.permutation(56)[:8], np.zeros(56, np.int64)]
    rest = np.setdiff1d(np.arange(64), dst[:8])
    while True:
        dst[8:] = rng.permutation(rest)
        if np.all(topo.leaf_of(np.arange(8, 64)) != topo.leaf_of(dst[8:])):
            break
    sol = max_concurrent_flow(topo, np.arange(64), dst, 800e9, up)
    assert sol.lam == pytest.approx((U - k) / U, rel=1e-7)
    only_leaf0 = max_concurrent_flow(topo, np.arange(8), dst[:8], 800e9, up)
    assert only_leaf0.lam == pytest.approx((U - k) / U, rel=1e-7)


def test_host_link_down_limits_to_the_other_planes():
    topo = T.multiplane(64, 4, 16, 800e9)
    up = np.ones(topo.n_links, bool)
    up[topo.host_up[2, 5]] = False
    sol = max_concurrent_flow(topo, [5, 6], [40, 41], 800e9, up)
    assert sol.lam == pytest.approx(3 / 4, rel=1e-7)
    assert sol.x[0, 2].sum() == pytest.approx(0.0, abs=1e-3 * 800e9)


def edge_lp(topo: T.Topology, up, src, dst, demand) -> float:
    """Max concurrent flow over up-down paths as an edge formulation: ``f[c, l] >= 0`` per
    commodity and allowed link, conservation at every switch, ``Σ_c f[c, l] <= cap_l``,
    source outflow ``= λ d_c``; maximise λ (rates in units of the slowest link)."""
    unit = float(topo.capacity_bps.min())
    H = topo.n_hosts
    n_nodes = H + topo.n_switches
    leaf_node = topo.link_dst[topo.host_up]  # [P, H] node of each host's leaf per plane
    cols = []  # (commodity, link)
    for c, (s, t) in enumerate(zip(src, dst, strict=True)):
        allowed = np.zeros(topo.n_links, bool)
        allowed[topo.host_up[:, s]] = True
        allowed[topo.host_down[:, t]] = True
        if topo.leaf_of(s) != topo.leaf_of(t):
            allowed |= (topo.link_tier == T.UP1) & np.isin(topo.link_src, leaf_node[:, s])
            allowed |= (topo.link_tier == T.DOWN1) & np.isin(topo.link_dst, leaf_node[:, t])
        allowed &= up
        cols += [(c, lk) for lk in np.flatnonzero(allowed)]
    nv = len(cols) + 1
    a_eq, b_eq, a_ub, b_ub = [], [], [], []
    for c, (s, _) in enumerate(zip(src, dst, strict=True)):
        rows = np.zeros((n_nodes, nv))
        for v, (cc, lk) in enumerate(cols):
            if cc == c:
                rows[topo.link_dst[lk], v] += 1.0
                rows[topo.link_src[lk], v] -= 1.0
        switches = rows[H:]
        a_eq.append(switches[np.any(switches != 0, axis=1)])
        b_eq.append(np.zeros(a_eq[-1].shape[0]))
        src_row = -rows[s].copy()  # outflow of the source
        src_row[-1] = -demand[c] / unit
        a_eq.append(src_row[None, :])
        b_eq.append([0.0])
    for lk in np.unique([lk for _, lk in cols]):
        row = np.zeros(nv)
        for v, (_, l2) in enumerate(cols):
            if l2 == lk:
                row[v] = 1.0
        a_ub.append(row)
        b_ub.append(topo.capacity_bps[lk] / unit)
    cost = np.zeros(nv)
    cost[-1] = -1.0
    res = linprog(
        cost,
        A_ub=np.array(a_ub),
        b_ub=np.array(b_ub),
        A_eq=np.vstack(a_eq),
        b_eq=np.concatenate(b_eq),
        bounds=[(0, None)] * nv,
        method="highs-ds",
    )
    assert res.status == 0
    return float(res.x[-1])


@given(st.integers(0, 2**32 - 1))
@example(2750980)  # HiGHS IPM without crossover ends with status "unknown" here
@example(7377171)  # randomized run: IPM "optimal" 1e-5 below lambda at default tolerances
def test_matches_an_edge_based_lp_on_a_tiny_fabric(seed):
    topo = T.multiplane(16, 2, 8, 400e9)  # d = U = 4, S = 2, C = 2
    rng = np.random.default_rng(seed)
    up = T.fail_links(topo, float(rng.choice([0.0, 0.2, 0.35])), seed=seed % 1000)
    if rng.random() < 0.5:
        up[rng.choice(topo.host_up.ravel())] = False
    n = int(rng.integers(2, 9))
    src = rng.integers(0, 16, n)
    dst = (src + rng.integers(1, 16, n)) % 16
    demand = rng.uniform(0.2, 1.0, n) * 400e9
    ref = edge_lp(topo, up, src, dst, demand)
    sol = max_concurrent_flow(topo, src, dst, demand, up)
    assert sol.lam == pytest.approx(ref, rel=1e-6, abs=1e-9)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_balanced_split_reaches_the_optimal_congestion(seed):
    """The adaptive mode's split over host pairs, applied to the demands, is feasible at the
    optimal λ (within the documented 1e-3); the leaf-pair split (a relaxation of the host
    ports, for large traffic matrices) never beats it and avoids dead bundles."""
    topo = T.multiplane(64, 4, 16, 800e9)
    rng = np.random.default_rng(seed)
    up = T.fail_links(topo, float(rng.choice([0.1, 0.2])), seed=seed)
    n = 48
    src = rng.integers(0, 64, n)
    dst = (src + rng.integers(1, 64, n)) % 64
    nbytes = rng.uniform(0.5, 2.0, n) * 1e6
    lam = max_concurrent_flow(topo, src, dst, nbytes, up).lam
    for max_variables in (200_000, 10):  # host pairs, then leaf pairs
        keys, y, gran = balanced_split(topo, src, dst, nbytes, up, max_variables=max_variables)
        assert gran == ("host" if max_variables > 10 else "leaf")
        np.testing.assert_allclose(y.sum(axis=(1, 2)), 1.0, rtol=1e-9)
        if gran == "host":
            cls = np.searchsorted(keys, src * 64 + dst)
        else:
            L = topo.tables["leaf_up"].shape[1]
            cls = np.searchsorted(keys, topo.leaf_of(src) * L + topo.leaf_of(dst))
        split = y[cls] * nbytes[:, None, None]  # [flow, P, S]: demands nbytes (as bits/s)
        reach = 1.0 / _congestion(topo, up, src, dst, split)
        assert reach <= lam * (1 + 1e-6)
        if gran == "host":
            assert reach >= lam * (1 - 1e-3)


def _congestion(topo, up, src, dst, x) -> float:
    """Max utilisation of host ports and leaf-spine bundles by the path loads ``x[f, p, s]``
    (bits/s) over their alive capacity."""
    r = topo.port_rate_bps
    P, L = topo.planes, topo.tables["leaf_up"].shape[1]
    S = topo.tables["spine_down"].shape[1]
    a, b = topo.leaf_of(src), topo.leaf_of(dst)
    cap_up, cap_down = T.bundle_capacity(topo, up)
    per_plane = x.sum(axis=2)
    out = np.zeros((P, topo.n_hosts))
    into = np.zeros((P, topo.n_hosts))
    bu = np.zeros((P, L, S))
    bd = np.zeros((P, S, L))
    for f in range(src.size):
        out[:, src[f]] += per_plane[f]
        into[:, dst[f]] += per_plane[f]
        if a[f] != b[f]:
            bu[:, a[f], :] += x[f]
            bd[:, :, b[f]] += x[f]
    ratios = [
        _ratio(out, up[topo.host_up] * r),
        _ratio(into, up[topo.host_down] * r),
        _ratio(bu, cap_up * r),
        _ratio(bd, cap_down * r),
    ]
    return max(ratios)


def _ratio(load, cap) -> float:
    assert np.all(load[cap == 0] <= 1e-6 * load.max()), "load on a dead port or bundle"
    live = cap > 0
    return float((load[live] / cap[live]).max())


def test_bad_inputs():
    with pytest.raises(ConfigError) as exc:
        max_concurrent_flow(T.fat_tree(32, 8), [0], [1], 1.0)
    assert exc.value.field == "topology.kind"
    with pytest.raises(ConfigError) as exc:
        max_concurrent_flow(T.multiplane(16, 2, 8), [0, 1], [2, 3], [1.0, 0.0])
    assert exc.value.field == "demand_bps"


# -- the priced decomposition (the LP at scale) ------------------------------------------
def _commodities(topo, up, src, dst, nbytes):
    H = topo.n_hosts
    keys, inv = np.unique(src * H + dst, return_inverse=True)
    ks, kd = keys // H, keys % H
    args = (
        topo.leaf_of(ks),
        topo.leaf_of(kd),
        ks,
        kd,
        up[topo.host_up].astype(float),
        up[topo.host_down].astype(float),
        *T.bundle_capacity(topo, up),
    )
    demand = np.bincount(inv, nbytes, keys.size)
    return args, demand / demand.max()


@pytest.mark.parametrize("seed", range(6))
def test_priced_split_brackets_and_reaches_the_lp_optimum(seed):
    """Its lower bound never exceeds the LP optimum, its congestion is that of its split
    and never below the optimum; on these instances it is within 1% of the LP (the
    capacity-proportional start is not: up to 8% above) and certifies a gap under 1%."""
    from trainfabric.fabric.mcf import congestion, priced_split, solve

    topo = T.multiplane(256, 4, 32, 800e9)
    rng = np.random.default_rng(seed)
    up = T.fail_links(topo, (0.05, 0.1, 0.2)[seed % 3], seed=seed)
    up[topo.host_up[seed % 4, rng.integers(0, 256, 3)]] = False  # and a few host ports
    src = rng.permutation(256)
    dst = (src + rng.integers(1, 256, 256)) % 256
    args, demand = _commodities(topo, up, src, dst, rng.uniform(0.5, 2.0, 256))
    opt = 1.0 / solve(*args, demand).lam
    pr = priced_split(*args, demand)
    np.testing.assert_allclose(pr.y.sum(axis=(1, 2)), 1.0, rtol=1e-9)
    assert pr.theta == pytest.approx(congestion(pr.y, *args, demand), rel=1e-12)
    assert pr.bound <= opt * (1 + 1e-6)
    assert opt <= pr.theta * (1 + 1e-6)
    assert pr.theta <= opt * 1.01
    assert pr.gap <= 0.01


def test_balanced_split_uses_the_priced_decomposition_beyond_the_lp_limit():
    topo = T.multiplane(64, 4, 16, 800e9)
    rng = np.random.default_rng(4)
    up = T.fail_links(topo, 0.15, seed=4)
    src = rng.permutation(64)
    dst = (src + rng.integers(1, 64, 64)) % 64
    nbytes = rng.uniform(0.5, 2.0, 64)
    lam = max_concurrent_flow(topo, src, dst, nbytes, up).lam
    keys, y, gran = balanced_split(topo, src, dst, nbytes, up, max_lp_variables=0)
    assert gran == "host"
    cls = np.searchsorted(keys, src * 64 + dst)
    reach = 1.0 / _congestion(topo, up, src, dst, y[cls] * nbytes[:, None, None])
    assert lam * 0.99 <= reach <= lam * (1 + 1e-6)
