"""Collectives on the fabric: NCCL-tests metrics, placement, dependencies, line rate, shortcut."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainfabric.errors import ConfigError
from trainfabric.fabric.flow import collectives as fc

# NCCL-tests doc/PERFORMANCE.md: busbw = algbw x factor, written out for n = 8 and n = 2.
NCCL_FACTORS = {
    "all_reduce": {8: 14 / 8, 2: 1.0},
    "reduce_scatter": {8: 7 / 8, 2: 0.5},
    "all_gather": {8: 7 / 8, 2: 0.5},
    "all_to_all": {8: 7 / 8, 2: 0.5},
    "broadcast": {8: 1.0, 2: 1.0},
    "reduce": {8: 1.0, 2: 1.0},
    "permutation": {8: 1.0, 2: 1.0},
}


@pytest.mark.parametrize("kind", list(NCCL_FACTORS))
def test_bus_factor_matches_nccl_tests(kind):
    for n, factor in NCCL_FACTORS[kind].items():
        assert fc.bus_factor(kind, n) == pytest.approx(factor, rel=1e-15)


@pytest.mark.parametrize(
    "kind,algorithm",
    [
        ("all_reduce", "ring"),
        ("all_reduce", "halving_doubling"),
        ("reduce_scatter", "ring"),
        ("reduce_scatter", "halving_doubling"),
        ("all_gather", "ring"),
        ("all_to_all", "ring"),
        ("permutation", "ring"),
    ],
)
@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_bus_factor_is_bytes_sent_per_rank(kind, algorithm, n):
    """busbw = line rate iff every NIC sends for the whole time: factor = sent bytes / S."""
    size = 3.0e6
    steps = fc.collective_steps(kind, n, size, algorithm, seed=n)
    sent = np.zeros(n)
    for s in steps:
        np.add.at(sent, s.src, s.bytes)
    np.testing.assert_allclose(sent / size, fc.bus_factor(kind, n), rtol=1e-12)


def test_line_rate_fraction_and_ideal_time():
    rate = 800e9
    t = fc.ideal_time_s("all_reduce", 16, 1e9, rate)
    assert t == pytest.approx(8e9 * 2 * 15 / 16 / rate)
    assert fc.line_rate_fraction("all_reduce", 16, 1e9, t, rate) == pytest.approx(1.0)
    assert fc.algbw_Bps(1e9, 2.0) == 5e8
    assert fc.busbw_Bps("all_gather", 4, 1e9, 2.0) == pytest.approx(5e8 * 0.75)


def test_unknown_names_are_config_errors():
    with pytest.raises(ConfigError, match="kind"):
        fc.bus_factor("allreduce", 4)
    with pytest.raises(ConfigError, match="placement"):
        fc.place(np.zeros(4, np.int64), 2, "clustered")
    with pytest.raises(ConfigError, match="ranks"):
        fc.place(np.zeros(4, np.int64), 5, "packed")


LEAVES = np.repeat(np.arange(4), 8)  # 32 hosts, 8 per leaf


def test_placements():
    packed = fc.place(LEAVES, 8, "packed")
    assert np.array_equal(packed, np.arange(8))
    scattered = fc.place(LEAVES, 8, "scattered")
    assert np.array_equal(LEAVES[scattered], [0, 1, 2, 3, 0, 1, 2, 3])
    assert np.unique(scattered).size == 8
    rnd = fc.place(LEAVES, 12, "random", seed=3)
    assert np.array_equal(rnd, fc.place(LEAVES, 12, "random", seed=3))
    assert np.unique(rnd).size == 12
    avail = np.arange(1, 32, 2)
    assert set(fc.place(LEAVES, 16, "scattered", available=avail)) == set(avail)


@given(st.integers(2, 200), st.integers(0, 10**6))
def test_permutation_is_a_derangement(n, seed):
    (step,) = fc.collective_steps("permutation", n, 1.0, seed=seed)
    assert np.array_equal(np.sort(step.dst), np.arange(n))
    assert not (step.dst == step.src).any()


def _deps_of(cf, j):
    p = cf.flows.deps_ptr
    return set(cf.flows.deps[p[j] : p[j + 1]].tolist())


@pytest.mark.parametrize(
    "kind,algorithm", [("all_reduce", "ring"), ("all_reduce", "halving_doubling")]
)
def test_rank_sync_dependencies_brute_force(kind, algorithm):
    n, channels = 8, 2
    steps = fc.collective_steps(kind, n, 1e6, algorithm)
    hosts = np.arange(100, 100 + n)
    cf = fc.collective_flows(steps, hosts, sync="rank", channels=channels, step_latency_s=3e-6)
    f = cf.flows
    assert f.src.size == sum(s.src.size for s in steps) * channels
    for j in range(f.src.size):
        k = cf.step[j]
        expect = {i for i in np.flatnonzero(cf.step == k - 1) if f.src[j] in (f.src[i], f.dst[i])}
        assert _deps_of(cf, j) == expect
    assert np.allclose(f.delay_s, 3e-6)
    assert np.isclose(f.bytes.sum(), sum(s.total_bytes for s in steps))


def test_step_sync_is_a_global_barrier_and_entropy_is_per_connection():
    steps = fc.collective_steps("all_reduce", 6, 1e6)
    cf = fc.collective_flows(steps, np.arange(6), sync="step")
    for j in np.flatnonzero(cf.step == 3):
        assert _deps_of(cf, j) == set(np.flatnonzero(cf.step == 2).tolist())
    e0 = cf.flows.entropy[cf.step == 0]
    assert np.array_equal(e0, cf.flows.entropy[cf.step == 5])
    assert np.unique(e0).size == 6
    assert fc.identical_steps(steps)
    assert not fc.identical_steps(fc.collective_steps("all_reduce", 8, 1e6, "halving_doubling"))


# -- connection semantics ----------------------------------------------------------------------
def test_persistent_connections_hash_the_pair_and_channel_only():
    from trainfabric.fabric.flows import mix64

    steps = fc.collective_steps("all_reduce", 6, 1e6)
    cf = fc.collective_flows(steps, np.arange(10, 16), job=3, channels=2, seed=5)
    f = cf.flows
    expect = mix64(np.full(f.n, 3), f.src, f.dst, f.channel, seed=5)
    assert np.array_equal(f.entropy, expect)
    default = fc.collective_flows(steps, np.arange(10, 16), job=3, channels=2, seed=5)
    explicit = fc.collective_flows(
        steps, np.arange(10, 16), job=3, channels=2, seed=5, connections="persistent"
    )
    assert np.array_equal(default.flows.entropy, explicit.flows.entropy)


def test_per_message_connections_draw_a_new_hash_every_step():
    steps = fc.collective_steps("all_reduce", 8, 1e6)
    cf = fc.collective_flows(steps, np.arange(8), channels=2, connections="per_message")
    f = cf.flows
    # every (step, pair, channel) is its own connection
    assert np.unique(f.entropy).size == f.n
    persistent = fc.collective_flows(steps, np.arange(8), channels=2).flows
    # same flows, same dependencies, only the hash input differs
    for name in ("src", "dst", "bytes", "deps_ptr", "deps", "delay_s", "channel"):
        assert np.array_equal(getattr(f, name), getattr(persistent, name))
    assert np.unique(persistent.entropy).size == 8 * 2


def test_per_message_ecmp_paths_change_between_steps_persistent_ones_do_not():
    from trainfabric.fabric import topology as T
    from trainfabric.fabric.routing import Router

    topo = T.multiplane(64, 2, 16)
    hosts = fc.place(topo.host_leaf[0], 16, "scattered")
    steps = fc.collective_steps("all_reduce", 16, 1e6)
    for connections, differ in (("persistent", False), ("per_message", True)):
        cf = fc.collective_flows(steps, hosts, connections=connections)
        routes = Router(topo, "ecmp").route(cf.flows, np.arange(cf.flows.n)).group
        first = routes[cf.step == 0]
        changed = [not np.array_equal(first, routes[cf.step == k]) for k in range(1, 6)]
        assert all(changed) if differ else not any(changed)


def test_bad_connections_are_config_errors():
    steps = fc.collective_steps("all_reduce", 4, 1e6)
    with pytest.raises(ConfigError, match="connections"):
        fc.collective_flows(steps, np.arange(4), connections="per_step")
    with pytest.raises(ConfigError, match="connections"):
        fc.flow_count("all_reduce", 4, connections="qp")
    from trainfabric.fabric import topology as T
    from trainfabric.fabric.routing import Router

    topo = T.multiplane(16, 2, 8)
    with pytest.raises(ConfigError, match="connections"):
        fc.run_collective(topo, Router(topo, "ecmp"), steps, np.arange(4), connections="x")


@pytest.mark.parametrize("mode", ["ecmp", "spray"])
def test_ring_shortcut_and_per_message_connections(mode):
    """Per-message hashing makes single-path ring steps differ: no shortcut there, and the
    step-by-step run is what is reported; split modes ignore the hash, so the shortcut stays
    and equals the step-by-step run."""
    from trainfabric.fabric import topology as T
    from trainfabric.fabric.routing import Router

    topo = T.multiplane(64, 2, 16)
    hosts = fc.place(topo.host_leaf[0], 16, "random", seed=1)
    steps = fc.collective_steps("all_reduce", 16, 4e6)
    opts = dict(sync="step", connections="per_message")
    fast = fc.run_collective(topo, Router(topo, mode), steps, hosts, **opts)
    full = fc.run_collective(topo, Router(topo, mode), steps, hosts, shortcut=False, **opts)
    assert fast.shortcut == (mode == "spray")
    assert fc.flow_count("all_reduce", 16, sync="step", mode=mode, connections="per_message") == (
        fast.n_flows
    )
    assert fast.time_s == pytest.approx(full.time_s, rel=1e-9)


def test_grouped_all_to_all_is_every_groups_uniform_all_to_all():
    hosts = np.random.default_rng(0).permutation(40)
    flows = fc.grouped_all_to_all(hosts, 8, 8e6)
    assert flows.n == 5 * 8 * 7
    np.testing.assert_allclose(flows.bytes, 1e6)
    for g in range(5):
        mine = flows.job == g
        group = set(hosts[8 * g : 8 * g + 8].tolist())
        pairs = set(zip(flows.src[mine].tolist(), flows.dst[mine].tolist(), strict=True))
        assert pairs == {(a, b) for a in group for b in group if a != b}
    ref = fc.collective_flows(fc.collective_steps("all_to_all", 8, 8e6), hosts[:8]).flows
    assert np.array_equal(flows.entropy[flows.job == 0], ref.entropy)
    with pytest.raises(ConfigError, match="group_size"):
        fc.grouped_all_to_all(hosts, 7, 1e6)
