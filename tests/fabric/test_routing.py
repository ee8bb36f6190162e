"""Load-balancing modes: hashing statistics, split coefficients, failure handling, the
adaptive split against the max-concurrent-flow bound, reaction times.

References are independent of the router: balls-into-bins (closed form and numpy Monte Carlo)
for ECMP, SplitMix64 in plain Python integers for the hash, a per-link expansion of the routes
with explicit loops, up-down reachability by networkx on the alive links, the even split
worked out by hand for the loss before a reaction, and the HiGHS concurrent-flow LP.
"""

import hashlib
import os
import subprocess
import sys
import textwrap

import networkx as nx
import numpy as np
import pytest
from fabric_algebra import dense
from scipy.stats import chisquare

from trainfabric.errors import ConfigError
from trainfabric.fabric import topology as T
from trainfabric.fabric.flow.engine import static_goodput
from trainfabric.fabric.flows import FlowTable, mix64
from trainfabric.fabric.mcf import max_concurrent_flow
from trainfabric.fabric.routing import MECHANISMS, MODES, Groups, Reaction, Router

UP_TIERS = (T.HOST_UP, T.UP1, T.UP2)
DOWN_TIERS = (T.HOST_DOWN, T.DOWN1, T.DOWN2)


# -- independent helpers --------------------------------------------------------------------------
def dense_routes(routes, groups: Groups, n_links: int) -> np.ndarray:
    """``A[f, l]``: share of flow ``f``'s rate on link ``l`` (slots x groups, plain loops)."""
    return dense(routes.group, routes.weight, groups, n_links)


def node_balance(topo: T.Topology, A: np.ndarray) -> np.ndarray:
    """``[f, node]``: share flowing into the node minus share flowing out of it."""
    n_nodes = topo.n_hosts + topo.n_switches
    out = np.zeros((A.shape[0], n_nodes))
    into = np.zeros((A.shape[0], n_nodes))
    for f in range(A.shape[0]):
        out[f] = np.bincount(topo.link_src, A[f], n_nodes)
        into[f] = np.bincount(topo.link_dst, A[f], n_nodes)
    return into - out


def routable_planes(topo: T.Topology, up: np.ndarray, src, dst) -> np.ndarray:
    """``[n, P]``: an up-down path ``src -> dst`` on plane ``p`` over alive links (networkx:
    switches reachable from ``src`` going up meet switches reaching ``dst`` going down)."""
    H = topo.n_hosts
    res = np.zeros((len(src), topo.planes), bool)
    for p in range(topo.planes):
        on = up & (topo.link_plane == p)
        gu, gd = nx.DiGraph(), nx.DiGraph()
        gu.add_nodes_from(range(H + topo.n_switches))
        gd.add_nodes_from(range(H + topo.n_switches))
        for lk in np.flatnonzero(on).tolist():
            s, t = int(topo.link_src[lk]), int(topo.link_dst[lk])
            (gu if topo.link_tier[lk] in UP_TIERS else gd).add_edge(s, t)
        for i, (s, t) in enumerate(zip(src, dst, strict=True)):
            ups = nx.descendants(gu, int(s))
            downs = nx.ancestors(gd, int(t))
            res[i, p] = any(v >= H for v in ups & downs)
    return res


def all_up(topo):
    return np.ones(topo.n_links, bool)


def views_equal(state):
    return {m: state.copy() for m in MECHANISMS}


def random_failures(topo, rng, fabric_fraction, host_links):
    """Fabric cables (both directions) and single host-link directions down."""
    up = T.fail_links(topo, fabric_fraction, seed=int(rng.integers(2**31)))
    host = np.flatnonzero(~topo.fabric)
    up[rng.choice(host, host_links, replace=False)] = False
    return up


# -- (a) ECMP hashing -----------------------------------------------------------------------------
def test_mix64_is_splitmix64():
    """SplitMix64's first output for seed 0 is the published 0xE220A8397B1DCDAF; several keys
    chain ``h ^= k`` then the SplitMix64 finaliser (plain Python ints as the reference)."""
    assert int(mix64(np.array([0], np.uint64))[0]) == 0xE220A8397B1DCDAF
    M = (1 << 64) - 1

    def ref(keys, seed):
        h = seed ^ 0x9E3779B97F4A7C15
        for k in keys:
            h ^= k
            h = ((h ^ (h >> 30)) * 0xBF58476D1CE4E5B9) & M
            h = ((h ^ (h >> 27)) * 0x94D049BB133111EB) & M
            h ^= h >> 31
        return h

    rng = np.random.default_rng(1)
    a = rng.integers(0, 2**63, 50, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    b = rng.integers(0, 1000, 50)
    got = mix64(a, b, seed=12345)
    assert got.dtype == np.uint64
    assert [int(v) for v in got] == [
        ref((int(x), int(y)), 12345) for x, y in zip(a, b, strict=True)
    ]


def _ecmp_uplinks(n_trials: int, n_flows: int, seed: int):
    """Uplink index (0..U-1) of ``n_flows`` flows leaving leaf 0, per trial, under ECMP."""
    topo = T.leaf_spine(64, 16)  # 8 leaves of 8 hosts, U = 8 uplinks, S = 4 spines, C = 2
    rng = np.random.default_rng(seed)
    n = n_trials * n_flows
    src = rng.integers(0, 8, n)
    dst = rng.integers(8, 64, n)
    ent = rng.integers(0, 2**63, n, dtype=np.uint64)
    flows = FlowTable.simple(src, dst, 1.0, entropy=ent)
    routes = Router(topo, "ecmp", seed=3).route(flows, np.arange(n))
    lu = topo.tables["leaf_up"][0, 0]
    uplink = np.searchsorted(lu, routes.group[:, 1])
    assert np.array_equal(lu[uplink], routes.group[:, 1])  # every flow left by a leaf-0 uplink
    return uplink.reshape(n_trials, n_flows)


@pytest.mark.parametrize("n_flows", [4, 8, 16])
def test_ecmp_collisions_follow_balls_into_bins(n_flows):
    U, trials = 8, 600
    uplink = _ecmp_uplinks(trials, n_flows, seed=n_flows)
    counts = np.stack([np.bincount(u, minlength=U) for u in uplink])
    empty = (counts == 0).sum(axis=1)
    mean = U * (1 - 1 / U) ** n_flows
    var = U * (U - 1) * (1 - 2 / U) ** n_flows + mean - mean**2
    assert abs(empty.mean() - mean) < 4.5 * np.sqrt(var / trials)
    # the mean of the busiest uplink's load against numpy balls-into-bins
    mc = np.random.default_rng(99).integers(0, U, (20_000, n_flows))
    mc_max = (mc[:, :, None] == np.arange(U)).sum(axis=1).max(axis=1)
    ecmp_max = counts.max(axis=1)
    sd = np.sqrt(ecmp_max.var() / trials + mc_max.var() / mc_max.size)
    assert abs(ecmp_max.mean() - mc_max.mean()) < 4.5 * sd


def test_ecmp_hashes_are_uniform_and_independent_per_hop():
    """Plane x uplink x cable of many flows: every cell equally likely (chi-square), which
    fails if one hash drove two choices or a choice ignored the entropy."""
    topo = T.multiplane(64, 4, 16)  # U = 8, S = 4, C = 2
    rng = np.random.default_rng(5)
    n = 12800
    flows = FlowTable.simple(
        rng.integers(0, 8, n),
        rng.integers(8, 64, n),
        1.0,
        entropy=rng.integers(0, 2**63, n, dtype=np.uint64),
    )
    routes = Router(topo, "ecmp", seed=11).route(flows, np.arange(n))
    plane = topo.link_plane[routes.group[:, 0]]
    j = np.argmax(topo.tables["leaf_up"][plane, 0] == routes.group[:, 1][:, None], axis=1)
    cable = np.argmax(
        topo.tables["spine_down"][plane, j % 4, topo.leaf_of(flows.dst)]
        == routes.group[:, 2][:, None],
        axis=1,
    )
    cells = np.bincount((plane * 8 + j) * 2 + cable, minlength=64)
    assert chisquare(cells).pvalue > 1e-4
    assert np.all(routes.lost == 0) and np.all(routes.hops == 4)


@pytest.mark.slow  # 1.5 s or more in the default run (make test-all runs it)
def test_ecmp_routes_are_deterministic_across_processes():
    """Routes depend only on the entropy and the seed (mix64), not on Python's salted hash()."""
    script = textwrap.dedent(
        """
        import hashlib, numpy as np
        from trainfabric.fabric import topology as T
        from trainfabric.fabric.flows import FlowTable
        from trainfabric.fabric.routing import Router
        topo = T.multiplane(64, 4, 16)
        rng = np.random.default_rng(0)
        f = FlowTable.simple(rng.integers(0, 32, 500), rng.integers(32, 64, 500), 1.0,
                             entropy=rng.integers(0, 2**63, 500, dtype=np.uint64))
        out = []
        for mode in ("ecmp", "pinning", "flowlet"):
            r = Router(topo, mode, seed=4).route(f, np.arange(500), np.ones(500, np.int64))
            out.append(r.group.tobytes())
        print(hashlib.sha256(b"".join(out)).hexdigest())
        """
    )
    digests = set()
    for salt in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=salt)
        run = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
        )
        digests.add(run.stdout.strip())
    exec_globals: dict = {}
    local = script.replace("print(", "RESULT = (")
    exec(compile(local, "<routes>", "exec"), exec_globals)
    digests.add(exec_globals["RESULT"])
    assert len(digests) == 1
    assert len(next(iter(digests))) == len(hashlib.sha256().hexdigest())


def test_flowlet_rehash_moves_flows_and_connections_share_a_path():
    topo = T.leaf_spine(64, 16)
    n = 400
    rng = np.random.default_rng(2)
    ent = rng.integers(0, 2**63, n, dtype=np.uint64)
    flows = FlowTable.simple(rng.integers(0, 8, n), rng.integers(8, 64, n), 1.0, entropy=ent)
    router = Router(topo, "flowlet", seed=1)
    r0 = router.route(flows, np.arange(n), np.zeros(n, np.int64))
    r0b = router.route(flows, np.arange(n), np.zeros(n, np.int64))
    r1 = router.route(flows, np.arange(n), np.ones(n, np.int64))
    assert np.array_equal(r0.group, r0b.group)
    moved = (r0.group[:, 1] != r1.group[:, 1]).mean()
    assert 0.75 < moved < 0.99  # a fresh hash keeps the uplink with probability 1/8


# -- (b) spray coefficients -----------------------------------------------------------------------
def test_spray_splits_evenly_on_a_healthy_multiplane():
    P = 4
    topo = T.multiplane(64, P, 16)  # d = U = 8, S = 4, C = 2
    U = 8
    router = Router(topo, "spray")
    flows = FlowTable.simple([0, 0, 9], [20, 3, 63], 1.0)
    routes = router.route(flows, np.arange(3))
    A = dense_routes(routes, router.groups, topo.n_links)
    t = topo.tables
    for f, (s, d) in enumerate([(0, 20), (0, 3), (9, 63)]):
        a, b = s // 8, d // 8
        expect = np.zeros(topo.n_links)
        expect[topo.host_up[:, s]] = 1 / P
        expect[topo.host_down[:, d]] = 1 / P
        if a != b:
            expect[t["leaf_up"][:, a, :].ravel()] = 1 / (P * U)
            expect[t["spine_down"][:, :, b, :].ravel()] = 1 / (P * U)
        np.testing.assert_allclose(A[f], expect, rtol=1e-12, atol=1e-15)
        assert A[f].sum() == pytest.approx(4 if a != b else 2, rel=1e-12)
        assert routes.hops[f] == (4 if a != b else 2)
    assert np.all(routes.lost == 0)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", ["multiplane", "fat_tree"])
def test_split_is_conserved_hop_by_hop(mode, kind):
    """Every switch passes on exactly what it receives; the source sends 1, the destination
    receives 1; the coefficients sum to the path length (all paths have the same length)."""
    topo = T.multiplane(64, 4, 16) if kind == "multiplane" else T.fat_tree(128, 8)
    H = topo.n_hosts
    rng = np.random.default_rng(0)
    src = rng.integers(0, H, 60)
    dst = (src + rng.integers(1, H, 60)) % H
    flows = FlowTable.simple(src, dst, rng.uniform(1, 2, 60) * 1e6)
    router = Router(topo, mode, seed=2)
    up = all_up(topo)
    router.begin_epoch(up, views_equal(up), flows, flows.bytes)
    routes = router.route(flows, np.arange(60))
    A = dense_routes(routes, router.groups, topo.n_links)
    bal = node_balance(topo, A)
    i = np.arange(60)
    np.testing.assert_allclose(bal[i, src], -1.0, rtol=1e-12)
    np.testing.assert_allclose(bal[i, dst], 1.0, rtol=1e-12)
    bal[i, src] = bal[i, dst] = 0.0
    np.testing.assert_allclose(bal, 0.0, atol=1e-12)
    np.testing.assert_allclose(A.sum(axis=1), routes.hops, rtol=1e-12)
    leaf = topo.leaf_of
    same_leaf = leaf(src) == leaf(dst)
    if kind == "fat_tree":
        same_pod = leaf(src) // 4 == leaf(dst) // 4
        expect_hops = np.where(same_leaf, 2, np.where(same_pod, 4, 6))
    else:
        expect_hops = np.where(same_leaf, 2, 4)
    assert np.array_equal(routes.hops, expect_hops)
    assert np.all(routes.lost == 0)


# -- (c) failures ---------------------------------------------------------------------------------
FAILURE_CASES = [
    ("multiplane", 0.15, 6, 0),
    ("multiplane", 0.3, 12, 1),
    ("leaf_spine", 0.2, 4, 2),
    ("fat_tree", 0.15, 6, 3),
]


def _failure_topo(kind):
    if kind == "multiplane":
        return T.multiplane(64, 4, 16)
    if kind == "leaf_spine":
        return T.leaf_spine(64, 16)
    return T.fat_tree(128, 8)


def _failure_case(kind, fraction, host_links, seed, rng_offset, core_offset, n=80):
    """A failure topology, its link state (fat-tree: core cables too), the generator and
    ``n`` random flows between distinct hosts."""
    topo = _failure_topo(kind)
    rng = np.random.default_rng(seed + rng_offset)
    up = random_failures(topo, rng, fraction, host_links)
    if kind == "fat_tree":
        up &= T.fail_links(topo, fraction, seed=seed + core_offset, tiers=(T.UP2,))
    src = rng.integers(0, topo.n_hosts, n)
    dst = (src + rng.integers(1, topo.n_hosts, n)) % topo.n_hosts
    return topo, up, rng, src, dst


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind,fraction,host_links,seed", FAILURE_CASES)
def test_known_failures_are_avoided(mode, kind, fraction, host_links, seed):
    """Static failures known to every mechanism: no positive share on a dead link, nothing
    lost for a routable flow, everything lost for an unroutable one, conservation."""
    topo, up, rng, src, dst = _failure_case(kind, fraction, host_links, seed, 0, 10)
    H, n = topo.n_hosts, src.size
    # make some flows start or end at a host with a dead link
    hurt = np.flatnonzero(~up[topo.host_up].all(axis=0) | ~up[topo.host_down].all(axis=0))
    src[:4] = hurt[:4] if hurt.size >= 4 else src[:4]
    dst[:4] = np.where(dst[:4] == src[:4], (src[:4] + 1) % H, dst[:4])
    flows = FlowTable.simple(src, dst, rng.uniform(1, 2, n) * 1e6)
    router = Router(topo, mode, seed=seed)
    router.begin_epoch(up, views_equal(up), flows, flows.bytes)
    routes = router.route(flows, np.arange(n))
    A = dense_routes(routes, router.groups, topo.n_links)
    assert not np.any(A[:, ~up] > 0), "a route uses a link known to be down"
    plane_ok = routable_planes(topo, up, src, dst)
    host_ok = up[topo.host_up[:, src]].T & up[topo.host_down[:, dst]].T
    if mode in ("spray", "adaptive"):
        routable = plane_ok.any(axis=1)
    else:  # one plane, hashed among the planes with both host links up
        routable = (plane_ok == host_ok).all(axis=1) & host_ok.any(axis=1)
        assert np.all(plane_ok <= host_ok)
    assert routable.sum() >= n // 2
    np.testing.assert_array_equal(routes.lost[routable], 0.0)
    np.testing.assert_array_equal(routes.lost[~plane_ok.any(axis=1)], 1.0)
    ok = np.flatnonzero(routes.lost == 0)
    bal = node_balance(topo, A[ok])
    np.testing.assert_allclose(bal[np.arange(ok.size), src[ok]], -1.0, rtol=1e-9)
    np.testing.assert_allclose(bal[np.arange(ok.size), dst[ok]], 1.0, rtol=1e-9)
    bal[np.arange(ok.size), src[ok]] = bal[np.arange(ok.size), dst[ok]] = 0.0
    np.testing.assert_allclose(bal, 0.0, atol=1e-9)


@pytest.mark.parametrize("mode", ["spray", "adaptive"])
def test_split_avoids_a_plane_where_the_destination_leaf_is_cut_off(mode):
    """Leaf 0 lost every uplink on plane 0 (known everywhere): the remote end is unreachable
    on that plane, so the split sends everything over the other planes."""
    topo = T.multiplane(64, 4, 16)
    up = all_up(topo)
    lu = topo.tables["leaf_up"][0, 0]
    up[lu] = up[topo.reverse[lu]] = False
    flows = FlowTable.simple([0, 20, 1], [20, 0, 2], 1e6)
    router = Router(topo, mode)
    router.begin_epoch(up, views_equal(up), flows, flows.bytes)
    routes = router.route(flows, np.arange(3))
    A = dense_routes(routes, router.groups, topo.n_links)
    np.testing.assert_array_equal(routes.lost, 0.0)
    for f, s in enumerate([0, 20]):
        assert A[f, topo.host_up[0, s]] == 0.0
        assert A[f, topo.host_up[1:, s]].sum() == pytest.approx(1.0, rel=1e-9)
        if mode == "spray":
            np.testing.assert_allclose(A[f, topo.host_up[1:, s]], 1 / 3, rtol=1e-12)
    assert A[2, topo.host_up[:, 1]].sum() == pytest.approx(1.0, rel=1e-9)  # same leaf
    if mode == "spray":
        np.testing.assert_allclose(A[2, topo.host_up[:, 1]], 1 / 4, rtol=1e-12)


def _even_split_loss(topo: T.Topology, truth, src, dst) -> np.ndarray:
    """Share lost by an even split that knows nothing about ``truth``'s failures: every hop
    splits evenly over all of its next hops, traffic entering a dead link is lost."""
    lost = np.zeros(len(src))
    t = topo.tables
    for i, (s, d) in enumerate(zip(src, dst, strict=True)):
        a, b = int(topo.leaf_of(s)), int(topo.leaf_of(d))
        delivered = 0.0
        for p in range(topo.planes):
            share = 1.0 / topo.planes
            if not (truth[topo.host_up[p, s]] and truth[topo.host_down[p, d]]):
                continue
            if a == b:
                delivered += share
                continue
            if topo.kind == "fat_tree":
                e_pod = int(t["edges_per_pod"])
                u = t["edge_up"].shape[1]
                qa, qb = a // e_pod, b // e_pod
                for j in range(u):
                    if not truth[t["edge_up"][a, j]]:
                        continue
                    down = t["agg_down"][qb * u + j, b % e_pod]
                    if qa == qb:
                        delivered += share / u * truth[down]
                        continue
                    ua = t["agg_up"].shape[1]
                    arrived = sum(
                        truth[t["agg_up"][qa * u + j, m]] and truth[t["core_down"][j * ua + m, qb]]
                        for m in range(ua)
                    )
                    delivered += share / u * arrived / ua * truth[down]
                continue
            U = t["leaf_up"].shape[2]
            S, C = t["spine_down"].shape[1], t["spine_down"].shape[3]
            for j in range(U):
                if truth[t["leaf_up"][p, a, j]]:
                    alive = truth[t["spine_down"][p, j % S, b]].sum()
                    delivered += share / U * alive / C
        lost[i] = 1.0 - delivered
    return lost


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind,fraction,host_links,seed", FAILURE_CASES)
def test_loss_before_the_reaction(mode, kind, fraction, host_links, seed):
    """Failures only in the truth (every view still all-up): single-path modes keep their
    healthy path and lose everything iff it crosses a dead link; split modes keep the even
    split and lose the share it sends into dead links."""
    topo, truth, rng, src, dst = _failure_case(kind, fraction, host_links, seed, 100, 20)
    n = src.size
    flows = FlowTable.simple(src, dst, rng.uniform(1, 2, n) * 1e6)
    router = Router(topo, mode, seed=seed)
    healthy = router.route(flows, np.arange(n))  # the first call uses an all-up epoch
    router.begin_epoch(truth, views_equal(all_up(topo)), flows, flows.bytes)
    routes = router.route(flows, np.arange(n))
    if mode in ("spray", "adaptive"):
        expect = _even_split_loss(topo, truth, src, dst)
        np.testing.assert_allclose(routes.lost, expect, atol=1e-12)
        assert expect.max() > 0
    else:
        assert np.array_equal(routes.group, healthy.group)
        used = healthy.group >= 0
        dead = (used & ~truth[np.where(used, healthy.group, 0)]).any(axis=1)
        np.testing.assert_array_equal(routes.lost, dead.astype(float))
        assert dead.any() and not dead.all()
    # what is lost is dropped where the dead link starts: no switch emits more than it gets
    A = dense_routes(routes, router.groups, topo.n_links)
    bal = node_balance(topo, A)
    live = routes.lost < 1
    i = np.flatnonzero(live)
    np.testing.assert_allclose(bal[i, dst[i]], 1 - routes.lost[i], atol=1e-12)
    bal[i, src[i]] = 0.0
    bal[i, dst[i]] = 0.0
    assert bal[i].min() > -1e-12


# -- (d) adaptive against the concurrent-flow bound -----------------------------------------------
@pytest.mark.parametrize("seed,fraction", [(0, 0.1), (1, 0.15), (2, 0.2)])
def test_adaptive_worst_rate_reaches_max_concurrent_flow(seed, fraction):
    """A split within ``1e-3`` of the minimum congestion makes ``lambda x demand / (1 + 1e-3)``
    feasible, so the max-min allocation on it (which maximises the minimum rate) gives every
    flow at least that (mcf: the most even split within 1e-3 of the optimum)."""
    topo = T.multiplane(64, 4, 16)
    up = T.fail_links(topo, fraction, seed=seed)
    rng = np.random.default_rng(seed)
    half = np.arange(32)
    dst = np.r_[32 + rng.permutation(32), rng.permutation(32)]
    src = np.r_[half, 32 + half]
    flows = FlowTable.simple(src, dst, 1e8)
    lam = max_concurrent_flow(topo, src, dst, topo.nic_rate_bps, up).lam
    assert 0.5 < lam < 1.0  # the failures bite
    good = static_goodput(topo, flows, Router(topo, "adaptive"), up)
    assert good.min() >= lam * topo.nic_rate_bps / (1 + 1e-3) * (1 - 1e-9)
    spray = static_goodput(topo, flows, Router(topo, "spray"), up)
    assert spray.min() < good.min()  # the oblivious split is worse here


# -- (e) reaction times ---------------------------------------------------------------------------
# _VIEWS: (plane, remote host link, fabric) mechanisms per mode; host links take the slower of
# the first two.
REACTION = {
    "ecmp": (1.0, 1.0),
    "flowlet": (1.0, 1.0),
    "pinning": (5e-3, 1.0),
    "spray": (1.0, 1.0),
    "adaptive": (5e-6, 5e-6),
}


@pytest.mark.parametrize("mode", MODES)
def test_reaction_times_per_mode(mode):
    topo = T.multiplane(16, 2, 8)
    host = np.r_[topo.host_up[:, 3], topo.host_down[:, 5]]
    fabric = np.flatnonzero(topo.fabric)[:7]
    router = Router(topo, mode)
    host_s, fabric_s = REACTION[mode]
    assert np.all(router.reaction_s(host) == host_s)
    assert np.all(router.reaction_s(fabric) == fabric_s)
    slow = Router(topo, mode, reaction=Reaction(hardware_s=1e-3, software_s=0.1, routing_s=30.0))
    scale = {5e-6: 1e-3, 5e-3: 0.1, 1.0: 30.0}
    assert np.all(slow.reaction_s(host) == scale[host_s])
    assert np.all(slow.reaction_s(fabric) == scale[fabric_s])


def test_unknown_mode_is_a_config_error():
    with pytest.raises(ConfigError) as exc:
        Router(T.multiplane(16, 2, 8), "random")
    assert exc.value.field == "mode"


# -- the plane-symmetric split ---------------------------------------------------------------
@pytest.mark.parametrize("mode", ["spray", "adaptive"])
@pytest.mark.parametrize("planes,radix", [(2, 8), (4, 16), (8, 8)])
def test_plane_symmetric_routes_equal_the_per_plane_even_split(mode, planes, radix):
    """On a healthy multiplane fabric the four plane-wide groups put exactly the per-plane
    even split's share on every link (dense expansion, plain loops), and the engine's
    completion times agree with the per-plane routes."""
    from trainfabric.fabric.flow.engine import simulate

    topo = T.multiplane(radix * radix // 2, planes, radix, 800e9)
    rng = np.random.default_rng(planes)
    n = 60
    src = rng.integers(0, topo.n_hosts, n)
    dst = (src + rng.integers(1, topo.n_hosts, n)) % topo.n_hosts
    flows = FlowTable.simple(src, dst, rng.uniform(1, 3, n) * 1e6)
    router = Router(topo, mode)
    sym = router.route(flows, np.arange(n))
    assert router._epoch.symmetric and sym.group.shape[1] == 4
    A_sym = dense_routes(sym, router.groups, topo.n_links)
    router._epoch.symmetric = False  # force the per-plane slots
    per_plane = router.route(flows, np.arange(n))
    assert per_plane.group.shape[1] == 4 * planes
    np.testing.assert_allclose(A_sym, dense_routes(per_plane, router.groups, topo.n_links), 1e-15)
    np.testing.assert_array_equal(sym.hops, per_plane.hops)
    np.testing.assert_array_equal(sym.lost, per_plane.lost)
    a = simulate(topo, flows, Router(topo, mode))

    class PerPlane(Router):
        def _plane_symmetric(self):
            return False

    b = simulate(topo, flows, PerPlane(topo, mode))
    np.testing.assert_allclose(a.finish_s, b.finish_s, rtol=1e-12)


def test_plane_symmetric_split_only_when_every_plane_is_whole():
    topo = T.multiplane(32, 4, 8)
    flows = FlowTable.simple([0, 1], [20, 30], 1e6)
    up = np.ones(topo.n_links, bool)
    up[topo.host_up[2, 5]] = False  # a host link of another host: no longer symmetric
    for mode, link_up, planes, expect in (
        ("spray", None, 4, True),
        ("spray", up, 4, False),
        ("adaptive", T.fail_links(topo, 0.1, seed=0), 4, False),
        ("spray", None, 1, False),
        ("ecmp", None, 4, False),
    ):
        t = topo if planes == 4 else T.multiplane(32, 1, 16)
        router = Router(t, mode)
        state = np.ones(t.n_links, bool) if link_up is None else link_up
        router.begin_epoch(state, {m: state for m in MECHANISMS}, flows, flows.bytes)
        r = router.route(flows, np.arange(2))
        assert bool(router._epoch.symmetric) == expect
        assert r.group.shape[1] == (4 if expect or mode == "ecmp" else 4 * t.planes)
