"""The compiled event loop (fabric.flow.loop) against the Python loop (the reference): same start
and finish times (1e-9 relative), same segments, goodput timelines and link bits, on random
dependent workloads, every static-route mode, static failures, batching and ``until_s``."""

import numpy as np
import pytest

from trainfabric.errors import ConfigError
from trainfabric.fabric import topology as T
from trainfabric.fabric.events import LinkEvents
from trainfabric.fabric.flow import collectives as fc
from trainfabric.fabric.flow.engine import simulate
from trainfabric.fabric.flows import FlowTable
from trainfabric.fabric.routing import Router

STATIC_MODES = ("ecmp", "pinning", "spray", "adaptive")


def _dag(seed: int, n: int = 120, hosts: int = 64) -> FlowTable:
    """Random flows, each depending on up to 3 earlier ones, with delays and releases."""
    rng = np.random.default_rng(seed)
    src = rng.integers(0, hosts, n)
    dst = (src + rng.integers(1, hosts, n)) % hosts
    counts = np.where(np.arange(n) < 10, 0, rng.integers(0, 4, n))
    deps = [np.unique(rng.integers(0, max(i, 1), c)) for i, c in enumerate(counts)]
    deps = [d[d < i] for i, d in enumerate(deps)]
    ptr = np.r_[0, np.cumsum([d.size for d in deps])]
    return FlowTable(
        src=src,
        dst=dst,
        bytes=rng.uniform(0.1, 3.0, n) * 1e6,
        entropy=rng.integers(0, 2**63, n, dtype=np.uint64),
        job=rng.integers(0, 3, n),
        deps_ptr=ptr,
        deps=np.concatenate(deps),
        release_s=rng.uniform(0, 30e-6, n) * (rng.random(n) < 0.5),
        delay_s=rng.uniform(0, 5e-6, n),
        channel=rng.integers(0, 4, n),
    )


def _same(a, b, rtol=1e-9):
    """``a`` (compiled) equals ``b`` (the Python loop): the same events, at most as many rate
    solves (single-link routes skip the ones whose rates are certain)."""
    assert a.n_events == b.n_events
    assert a.n_rate_solves <= b.n_rate_solves
    np.testing.assert_array_equal(np.isnan(a.finish_s), np.isnan(b.finish_s))
    np.testing.assert_allclose(a.start_s, b.start_s, rtol=rtol)
    np.testing.assert_allclose(a.finish_s, b.finish_s, rtol=rtol)
    np.testing.assert_allclose(a.seg_t, b.seg_t, rtol=rtol)
    scale = max(b.job_goodput_bps.max(initial=0), 1.0)
    np.testing.assert_allclose(a.job_goodput_bps, b.job_goodput_bps, rtol=rtol, atol=rtol * scale)
    np.testing.assert_array_equal(a.job_active, b.job_active)
    np.testing.assert_array_equal(a.job_impaired, b.job_impaired)
    bits = max(b.link_bits.max(initial=0), 1.0)
    np.testing.assert_allclose(a.link_bits, b.link_bits, rtol=rtol, atol=rtol * bits)
    assert a.end_s == pytest.approx(b.end_s, rel=rtol)


def _both(topo, flows, mode, **kw):
    fast = simulate(topo, flows, Router(topo, mode, seed=3), compiled=True, **kw)
    slow = simulate(topo, flows, Router(topo, mode, seed=3), compiled=False, **kw)
    return fast, slow


@pytest.mark.parametrize("mode", STATIC_MODES)
@pytest.mark.parametrize("seed", [0, 1])
def test_random_dag_same_as_python_loop(mode, seed):
    topo = T.multiplane(64, 4, 16, 800e9)
    fast, slow = _both(topo, _dag(seed), mode)
    assert slow.unfinished == 0
    _same(fast, slow)


@pytest.mark.parametrize("mode", STATIC_MODES)
def test_static_failures_same_as_python_loop(mode):
    """10% of the fabric down (adaptive balances the LP split), some host links down too:
    stalled single-path flows never finish in either loop."""
    topo = T.multiplane(64, 4, 16, 800e9)
    up = T.fail_links(topo, 0.1, seed=2)
    up[topo.host_up[0, :3]] = False
    fast, slow = _both(topo, _dag(5), mode, link_up=up)
    _same(fast, slow)


@pytest.mark.parametrize("mode", ["ecmp", "spray"])
def test_batched_completions_same_as_python_loop(mode):
    topo = T.multiplane(32, 2, 16, 400e9)
    steps = fc.collective_steps("all_to_all", 32, 4e6)
    flows = fc.collective_flows(steps, fc.place(topo.host_leaf[0], 32, "random", 1)).flows
    fast, slow = _both(topo, flows, mode, batch_rtol=1e-2)
    _same(fast, slow)


@pytest.mark.parametrize("until", [0.0, 20e-6, 1e-4])
def test_until_same_as_python_loop(until):
    topo = T.multiplane(64, 4, 16, 800e9)
    fast, slow = _both(topo, _dag(7), "ecmp", until_s=until)
    assert fast.end_s == until
    _same(fast, slow)


@pytest.mark.parametrize("connections", ["persistent", "per_message"])
@pytest.mark.parametrize("mode", ["ecmp", "adaptive"])
def test_rank_sync_rings_same_as_python_loop(mode, connections):
    """The dependent-step case the compiled loop is for: several rings, per-rank sync."""
    topo = T.multiplane(128, 1, 32, 100e9)
    perm = np.random.default_rng(0).permutation(128)
    tables = []
    for r in range(4):
        steps = fc.collective_steps("all_reduce", 16, 16 * 250e3)
        cf = fc.collective_flows(steps, perm[16 * r : 16 * r + 16], job=r, connections=connections)
        tables.append(cf.flows)
    fast, slow = _both(topo, FlowTable.concat(tables), mode)
    assert slow.unfinished == 0
    _same(fast, slow)
    if mode == "ecmp":  # completions and releases whose rates are certain skip the solve
        assert fast.n_rate_solves < slow.n_rate_solves


def test_empty_and_auto_selection():
    topo = T.multiplane(16, 2, 8)
    empty = FlowTable.simple(np.zeros(0, np.int64), np.zeros(0, np.int64), 1.0)
    fast, slow = _both(topo, empty, "ecmp")
    _same(fast, slow)
    flows = FlowTable.simple([0, 1], [5, 6], [1e6, 2e6])
    auto = simulate(topo, flows, Router(topo, "ecmp", seed=3))
    np.testing.assert_array_equal(auto.finish_s, _both(topo, flows, "ecmp")[0].finish_s)


def test_compiled_refuses_dynamic_routes():
    topo = T.multiplane(16, 2, 8)
    flows = FlowTable.simple([0, 1], [5, 6], [1e6, 2e6])
    ev = LinkEvents.flap([topo.host_up[0, 0]], 1e-6, 2e-6)
    for kw, router in (
        ({"events": ev}, Router(topo, "ecmp")),
        ({}, Router(topo, "flowlet")),
        ({"record_links": True}, Router(topo, "spray")),
    ):
        with pytest.raises(ConfigError, match="compiled"):
            simulate(topo, flows, router, compiled=True, **kw)


def test_entropy_shared_by_different_endpoints_same_as_python_loop():
    """Routes are deduplicated per connection; flows that share an entropy but not their
    endpoints or channel (allowed by FlowTable) get their own routes."""
    topo = T.multiplane(64, 4, 16, 800e9)
    base = _dag(11)
    ent = (np.arange(base.n) % 7).astype(np.uint64)
    flows = FlowTable(
        src=base.src,
        dst=base.dst,
        bytes=base.bytes,
        entropy=ent,
        job=base.job,
        deps_ptr=base.deps_ptr,
        deps=base.deps,
        release_s=base.release_s,
        delay_s=base.delay_s,
        channel=base.channel,
    )
    for mode in ("ecmp", "pinning"):
        fast, slow = _both(topo, flows, mode)
        _same(fast, slow)
