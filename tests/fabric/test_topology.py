"""Topology builders against hand-derived counts, wiring invariants and max-flow references.

Closed forms (module doc of :mod:`trainfabric.fabric.topology`): a leaf of radix ``R`` at
oversubscription ``o`` has ``U = round(R / (1 + o))`` uplinks and ``d = R - U`` host ports;
a plane has ``L = ceil(H / d)`` leaves and ``S`` spines, the smallest divisor of ``U`` that is
``>= ceil(L U / R)``; every leaf-spine pair has ``C = U / S`` cables. The expected counts in
the tables below are worked out by hand from those rules, not by the builders. Bisection is
checked against the closed form ``(H/2) nic min(1, U/d)`` on leaf-aligned cuts and against an
independent networkx max-flow on every cut.
"""

import networkx as nx
import numpy as np
import pytest

from trainfabric.errors import ConfigError
from trainfabric.fabric import topology as T

# (gpus, planes, radix, oversubscription) -> (d, U, leaves, spines, switches, links)
MULTIPLANE_CASES = {
    (64, 4, 16, 1.0): (8, 8, 8, 4, 48, 1024),
    (128, 2, 16, 1.0): (8, 8, 16, 8, 48, 1024),
    (48, 1, 16, 3.0): (12, 4, 4, 1, 5, 128),
    (100, 8, 32, 1.0): (16, 16, 7, 4, 88, 3392),
    (40, 2, 12, 2.0): (8, 4, 5, 2, 14, 240),
    # ceil(L U / R) = 5 does not divide U = 8: the spine count rises to 8
    (80, 1, 16, 1.0): (8, 8, 10, 8, 18, 320),
    # round(16 / 2.5) = 6 uplinks, 10 host ports
    (40, 1, 16, 1.5): (10, 6, 4, 2, 6, 128),
}

# (gpus, radix, oversubscription) -> (d, u, pods, edges, aggs, cores, links)
# (gpus, k, oversubscription): (d, u, pods, edges, aggs, cores, links); cores per agg group
# c = ceil(ua pods / k) with ua = k - k // 2 agg uplinks, so u c cores in all
FAT_TREE_CASES = {
    (128, 8, 1.0): (4, 4, 8, 32, 32, 16, 768),  # the full k = 8 tree: 5 k^2 / 4 switches
    (40, 8, 1.0): (4, 4, 3, 10, 12, 8, 256),  # c = ceil(4 * 3 / 8) = 2
    (96, 8, 3.0): (6, 2, 4, 16, 8, 4, 320),  # c = ceil(4 * 4 / 8) = 2
}


def _build(kind: str, case, **kw) -> T.Topology:
    if kind == "fat_tree":
        gpus, radix, over = case
        return T.fat_tree(gpus, radix, 800e9, oversubscription=over, **kw)
    gpus, planes, radix, over = case
    return T.multiplane(gpus, planes, radix, 800e9, oversubscription=over, **kw)


ALL_CASES = [("multiplane", c) for c in MULTIPLANE_CASES] + [
    ("fat_tree", c) for c in FAT_TREE_CASES
]


@pytest.mark.parametrize("case", list(MULTIPLANE_CASES))
def test_multiplane_counts(case):
    d, U, L, S, switches, links = MULTIPLANE_CASES[case]
    gpus, planes, radix, _ = case
    topo = _build("multiplane", case)
    assert topo.kind == ("multiplane" if planes > 1 else "leaf_spine")
    assert topo.hosts_per_leaf == d
    assert topo.tables["leaf_up"].shape == (planes, L, U)
    assert topo.tables["spine_down"].shape == (planes, S, L, U // S)
    assert topo.n_switches == switches
    assert topo.n_links == links
    assert np.bincount(topo.switch_tier).tolist() == [planes * L, planes * S]
    assert np.bincount(topo.switch_plane).tolist() == [L + S] * planes
    assert topo.port_rate_bps == pytest.approx(800e9 / planes, rel=1e-15)
    summary = topo.summary()
    assert summary["cables"] == links // 2
    assert summary["fabric_cables"] == planes * L * U
    assert summary["max_switch_hops"] == 3


@pytest.mark.parametrize("case", list(FAT_TREE_CASES))
def test_fat_tree_counts(case):
    d, u, pods, edges, aggs, cores, links = FAT_TREE_CASES[case]
    topo = _build("fat_tree", case)
    k = case[1]
    assert topo.hosts_per_leaf == d
    assert topo.tables["edge_up"].shape == (edges, u)
    assert topo.tables["agg_up"].shape == (aggs, k - k // 2)
    assert topo.tables["core_down"].shape == (u * (k - k // 2), pods)  # one row per uplink
    assert topo.n_switches == edges + aggs + cores
    assert np.bincount(topo.switch_tier).tolist() == [edges, aggs, cores]
    assert topo.n_links == links
    assert topo.summary()["max_switch_hops"] == 5


def test_leaf_spine_is_one_plane():
    a = T.leaf_spine(64, 16, 400e9)
    b = T.multiplane(64, 1, 16, 400e9)
    assert a.kind == "leaf_spine" and a.planes == 1
    for name in ("link_src", "link_dst", "capacity_bps", "link_tier", "reverse"):
        assert np.array_equal(getattr(a, name), getattr(b, name))


@pytest.mark.parametrize("kind,case", ALL_CASES)
def test_reverse_is_an_involution_between_matching_directions(kind, case):
    topo = _build(kind, case)
    rev = topo.reverse
    n = topo.n_links
    assert np.array_equal(np.sort(rev), np.arange(n))  # a permutation
    assert np.array_equal(rev[rev], np.arange(n))
    assert not np.any(rev == np.arange(n))
    assert np.array_equal(topo.link_src[rev], topo.link_dst)
    assert np.array_equal(topo.link_dst[rev], topo.link_src)
    assert np.array_equal(topo.capacity_bps[rev], topo.capacity_bps)
    assert np.array_equal(topo.link_plane[rev], topo.link_plane)
    pair = {T.HOST_UP: T.HOST_DOWN, T.UP1: T.DOWN1, T.UP2: T.DOWN2}
    pair.update({v: k for k, v in pair.items()})
    expect = np.array([pair[int(t)] for t in topo.link_tier])
    assert np.array_equal(topo.link_tier[rev], expect)


@pytest.mark.parametrize("kind,case", ALL_CASES)
def test_every_host_has_one_port_per_plane_at_the_port_rate(kind, case):
    topo = _build(kind, case)
    H, P = topo.n_hosts, topo.planes
    rate = 800e9 / P
    for p in range(P):
        on = topo.link_plane == p
        out = np.bincount(topo.link_src[on], minlength=H + topo.n_switches)[:H]
        into = np.bincount(topo.link_dst[on], minlength=H + topo.n_switches)[:H]
        assert np.all(out == 1) and np.all(into == 1)
        up, down = topo.host_up[p], topo.host_down[p]
        assert np.array_equal(topo.link_src[up], np.arange(H))
        assert np.array_equal(topo.link_dst[down], np.arange(H))
        assert np.all(topo.link_tier[up] == T.HOST_UP)
        assert np.all(topo.link_tier[down] == T.HOST_DOWN)
        assert np.all(topo.capacity_bps[up] == rate) and np.all(topo.capacity_bps[down] == rate)
        leaf_node = topo.link_dst[up]
        assert np.array_equal(topo.link_src[down], leaf_node)
        sw = leaf_node - H
        assert np.all(topo.switch_tier[sw] == 0) and np.all(topo.switch_plane[sw] == p)
        # the leaf index is the same on every plane
        first_leaf = np.flatnonzero((topo.switch_tier == 0) & (topo.switch_plane == p))[0]
        assert np.array_equal(sw - first_leaf, topo.host_leaf[p])
        assert np.array_equal(topo.host_leaf[p], topo.host_leaf[0])
    # only host links touch hosts
    host_link = (topo.link_tier == T.HOST_UP) | (topo.link_tier == T.HOST_DOWN)
    touches = (topo.link_src < H) | (topo.link_dst < H)
    assert np.array_equal(host_link, touches)
    assert np.array_equal(topo.fabric, ~host_link)


@pytest.mark.parametrize("case", list(MULTIPLANE_CASES))
def test_leaf_ports_uplinks_and_parallel_cables(case):
    d, U, L, S, _, _ = MULTIPLANE_CASES[case]
    gpus, planes, radix, _ = case
    topo = _build("multiplane", case)
    H = topo.n_hosts
    n_nodes = H + topo.n_switches
    C = U // S
    for p in range(planes):
        leaves = np.flatnonzero((topo.switch_tier == 0) & (topo.switch_plane == p)) + H
        spines = np.flatnonzero((topo.switch_tier == 1) & (topo.switch_plane == p)) + H
        assert leaves.size == L and spines.size == S
        host_ports = np.bincount(topo.link_src[topo.link_tier == T.HOST_DOWN], minlength=n_nodes)[
            leaves
        ]
        expect_hosts = np.full(L, d)
        expect_hosts[-1] = gpus - (L - 1) * d  # the last leaf may be partly filled
        assert np.array_equal(host_ports, expect_hosts)
        up = (topo.link_tier == T.UP1) & (topo.link_plane == p)
        assert np.array_equal(np.bincount(topo.link_src[up], minlength=n_nodes)[leaves], [U] * L)
        assert np.all(np.isin(topo.link_dst[up], spines))
        assert np.all(topo.capacity_bps[up] == 800e9 / planes)
        pairs = np.zeros((n_nodes, n_nodes), np.int64)
        np.add.at(pairs, (topo.link_src[up], topo.link_dst[up]), 1)
        assert np.all(pairs[np.ix_(leaves, spines)] == C)
        # every spine port used at most once: L C <= R
        assert np.all(pairs[np.ix_(leaves, spines)].sum(axis=0) <= radix)
        assert np.all(host_ports + U <= radix)
        # tables agree with the wiring: leaf_up[p, a, j] goes to spine j mod S
        lu = topo.tables["leaf_up"][p]
        assert np.array_equal(topo.link_src[lu], np.repeat(leaves, U).reshape(L, U))
        assert np.array_equal(topo.link_dst[lu], spines[np.tile(np.arange(U) % S, (L, 1))])
        sd = topo.tables["spine_down"][p]  # [S, L, C]
        assert np.array_equal(topo.reverse[lu], sd[np.arange(U) % S, :, np.arange(U) // S].T)


@pytest.mark.parametrize("case", list(FAT_TREE_CASES))
def test_fat_tree_wiring(case):
    d, u, pods, edges, aggs, cores, _ = FAT_TREE_CASES[case]
    k = case[1]
    topo = _build("fat_tree", case)
    t = topo.tables
    H = topo.n_hosts
    e_pod = k // 2
    edge0, agg0, core0 = H, H + edges, H + edges + aggs
    eu = t["edge_up"]
    # edge e's uplinks go to the u distinct aggs of its pod
    assert np.array_equal(topo.link_src[eu], np.repeat(np.arange(edges), u).reshape(edges, u) + H)
    agg_of = topo.link_dst[eu] - agg0
    assert np.all(agg_of // u == (np.arange(edges) // e_pod)[:, None])
    assert np.all(np.sort(agg_of % u, axis=1) == np.arange(u))
    # agg j of each pod reaches the c cores of group j, ua / c cables to each, every pod alike
    au = t["agg_up"]
    ua = k - e_pod
    c = cores // u
    core_of = topo.link_dst[au] - core0
    assert np.array_equal(core_of // c, np.repeat(np.arange(aggs) % u, ua).reshape(aggs, -1))
    per_core_pod = np.zeros((cores, pods), np.int64)
    np.add.at(per_core_pod, (core_of.ravel(), np.repeat(np.arange(aggs) // u, ua)), 1)
    assert np.all(per_core_pod * c == ua)
    assert np.all(per_core_pod * pods <= k)  # no core uses more than its k ports
    assert np.all(topo.link_tier[au] == T.UP2)
    assert np.all(topo.capacity_bps == 800e9)
    assert (topo.link_src[topo.link_tier == T.HOST_DOWN] < agg0).all()
    assert edge0 == H


@pytest.mark.parametrize("kind,case", ALL_CASES)
def test_bisection_matches_networkx_and_closed_form(kind, case):
    topo = _build(kind, case)
    bis = T.bisection_bps(topo)
    assert bis == pytest.approx(_networkx_bisection(topo), rel=1e-12)
    half = topo.n_hosts // 2
    d = topo.hosts_per_leaf
    aligned = half % d == 0
    if kind == "fat_tree":
        aligned = half % (d * (case[1] // 2)) == 0  # pod-aligned: the cut crosses the cores
    if aligned:
        assert bis == pytest.approx(T.bisection_closed_form_bps(topo), rel=1e-12)
    else:  # the split leaf or pod talks across the cut locally
        assert bis >= T.bisection_closed_form_bps(topo) * (1 - 1e-12)


def test_bisection_closed_form_values():
    # 64 hosts at 800G, full bisection: 32 x 800G
    assert T.bisection_closed_form_bps(T.multiplane(64, 4, 16, 800e9)) == 32 * 800e9
    # 48 hosts, 12 down / 4 up: 24 x 800G / 3
    over = T.multiplane(48, 1, 16, 800e9, oversubscription=3.0)
    assert T.bisection_closed_form_bps(over) == pytest.approx(24 * 800e9 / 3, rel=1e-15)
    # 3:1 fat-tree of radix 8: 48 x 800G x 2/6
    ft = T.fat_tree(96, 8, 800e9, oversubscription=3.0)
    assert T.bisection_closed_form_bps(ft) == pytest.approx(48 * 800e9 / 3, rel=1e-15)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bisection_under_failures_matches_networkx(seed):
    topo = T.multiplane(64, 2, 16, 800e9)
    up = T.fail_links(topo, 0.2, seed=seed)
    up[topo.host_up[0, :5]] = False
    bis = T.bisection_bps(topo, up)
    assert bis == pytest.approx(_networkx_bisection(topo, up), rel=1e-12)
    assert bis < T.bisection_bps(topo)


def _networkx_bisection(topo: T.Topology, up=None) -> float:
    """Max-flow from the first half of the hosts (sorted by leaf) to the rest, by networkx."""
    up = np.ones(topo.n_links, bool) if up is None else up
    order = np.argsort(topo.host_leaf[0], kind="stable")
    half = topo.n_hosts // 2
    g = nx.DiGraph()
    for s, t, c, ok in zip(
        topo.link_src.tolist(),
        topo.link_dst.tolist(),
        topo.capacity_bps.tolist(),
        up.tolist(),
        strict=True,
    ):
        if not ok:
            continue
        if g.has_edge(s, t):
            g[s][t]["capacity"] += c
        else:
            g.add_edge(s, t, capacity=c)
    for h in order[:half].tolist():
        g.add_edge("S", h)  # no capacity attribute: infinite
    for h in order[half : 2 * half].tolist():
        g.add_edge(h, "T")
    return float(nx.maximum_flow_value(g, "S", "T"))


@pytest.mark.parametrize("builder", ["multiplane", "fat_tree"])
def test_rail_placement_puts_same_local_rank_on_one_leaf(builder):
    gpus, g = 64, 8
    if builder == "multiplane":
        topo = T.multiplane(gpus, 2, 16, rail=True, gpus_per_server=g)  # 8 hosts per leaf
    else:
        topo = T.fat_tree(gpus, 16, rail=True, gpus_per_server=g)  # 8 hosts per edge
    leaf = topo.host_leaf[0]
    server, rank = np.arange(gpus) // g, np.arange(gpus) % g
    # 8 servers, 8 hosts per leaf: leaf i holds exactly the rank-i GPUs of every server
    assert np.array_equal(leaf, rank)
    assert np.unique(server[leaf == 3]).size == 8
    plain = T.multiplane(gpus, 2, 16) if builder == "multiplane" else T.fat_tree(gpus, 16)
    assert np.array_equal(plain.host_leaf[0], server)


def test_rail_placement_fills_leaves_rail_by_rail():
    # 96 GPUs, 4 per server (24 servers), 10 hosts per leaf: rank-major fill
    topo = T.multiplane(96, 1, 16, rail=True, gpus_per_server=4, oversubscription=1.5)
    d = topo.hosts_per_leaf
    assert d == 10
    h = np.arange(96)
    position = (h % 4) * 24 + h // 4  # rank first, then server
    assert np.array_equal(topo.host_leaf[0], position // d)
    assert np.all(np.bincount(topo.host_leaf[0])[:-1] == d)
    with pytest.raises(ConfigError) as exc:
        T.multiplane(90, 1, 16, rail=True, gpus_per_server=4)
    assert exc.value.field == "gpus_per_server"


@pytest.mark.parametrize(
    "build",
    [
        lambda: T.multiplane(129, 4, 16),  # 16 x 8 = 128 hosts per plane at most
        lambda: T.leaf_spine(193, 16, oversubscription=3.0),  # 16 leaves x 12 = 192
        lambda: T.fat_tree(129, 8),  # k^3 / 4 = 128
    ],
)
def test_too_many_gpus_is_a_config_error_naming_gpus(build):
    with pytest.raises(ConfigError) as exc:
        build()
    assert exc.value.field == "gpus"
    assert "gpus" in str(exc.value)


def test_largest_fitting_fabrics_build():
    assert T.multiplane(128, 4, 16).n_hosts == 128
    big = T.leaf_spine(192, 16, oversubscription=3.0)  # 16 leaves, 4 spines of 16 ports
    assert big.n_hosts == 192 and big.tables["spine_down"].shape == (1, 4, 16, 1)
    assert T.fat_tree(128, 8).n_hosts == 128
    assert T.fat_tree(192, 8, oversubscription=3.0).n_hosts == 192
    with pytest.raises(ConfigError) as exc:
        T.fat_tree(193, 8, oversubscription=3.0)
    assert exc.value.field == "gpus"


def test_other_bad_parameters_name_their_field():
    cases = [
        (lambda: T.multiplane(1, 2, 16), "gpus"),
        (lambda: T.multiplane(16, 0, 16), "planes"),
        (lambda: T.multiplane(16, 2, 1), "switch_radix"),
        (lambda: T.multiplane(16, 2, 16, oversubscription=0.5), "oversubscription"),
        (lambda: T.multiplane(16, 2, 16, -1.0), "nic_rate_bps"),
        (lambda: T.fat_tree(16, 8, hop_latency_s=-1.0), "hop_latency_s"),
    ]
    for build, name in cases:
        with pytest.raises(ConfigError) as exc:
            build()
        assert exc.value.field == name


@pytest.mark.parametrize(
    "build,fraction,tiers",
    [
        (lambda: T.multiplane(64, 4, 16), 0.1, (T.UP1,)),
        (lambda: T.multiplane(100, 8, 32), 0.37, (T.UP1,)),
        (lambda: T.leaf_spine(48, 16, oversubscription=3.0), 0.25, (T.UP1,)),
        (lambda: T.fat_tree(128, 8), 0.15, (T.UP1,)),
        (lambda: T.fat_tree(128, 8), 0.15, (T.UP2,)),
        (lambda: T.fat_tree(128, 8), 0.05, (T.UP1, T.UP2)),
    ],
)
def test_fail_links_fails_whole_cables_deterministically(build, fraction, tiers):
    topo = build()
    cables = int(np.isin(topo.link_tier, tiers).sum())  # one up direction per cable
    up = T.fail_links(topo, fraction, seed=7, tiers=tiers)
    down = np.flatnonzero(~up)
    assert down.size == 2 * round(fraction * cables)
    assert np.array_equal(np.sort(topo.reverse[down]), down)  # both directions
    down_tiers = set(topo.link_tier[down].tolist())
    allowed = set(tiers) | {{T.UP1: T.DOWN1, T.UP2: T.DOWN2}[t] for t in tiers}
    assert down_tiers <= allowed
    assert np.array_equal(up, T.fail_links(topo, fraction, seed=7, tiers=tiers))
    assert not np.array_equal(up, T.fail_links(topo, fraction, seed=8, tiers=tiers))
    assert T.fail_links(topo, 0.0, seed=7, tiers=tiers).all()


def test_fail_links_rejects_bad_fraction():
    topo = T.multiplane(16, 2, 8)
    for f in (-0.1, 1.0, 1.5):
        with pytest.raises(ConfigError) as exc:
            T.fail_links(topo, f)
        assert exc.value.field == "fraction"


def test_bundle_capacity_counts_alive_cables():
    topo = T.multiplane(64, 2, 16)  # U = 8, S = 4, C = 2
    up = np.ones(topo.n_links, bool)
    lu = topo.tables["leaf_up"]
    up[lu[1, 3, 5]] = False  # leaf 3 -> spine 1 on plane 1 (cable 1)
    up[topo.reverse[lu[0, 2, [0, 4]]]] = False  # both cables spine 0 -> leaf 2, plane 0
    cap_up, cap_down = T.bundle_capacity(topo, up)
    expect_up = np.full((2, 8, 4), 2.0)
    expect_up[1, 3, 1] = 1.0
    expect_down = np.full((2, 4, 8), 2.0)
    expect_down[0, 0, 2] = 0.0
    assert np.array_equal(cap_up, expect_up)
    assert np.array_equal(cap_down, expect_down)
