"""The seed's scale: the 131,072-GPU build's arithmetic, the expert-parallel all-to-all in
closed form, and the priced decomposition of the adaptive split inside the engine against
the LP's split (the decomposition the 131k failures benchmark relies on)."""

import numpy as np
import pytest

from trainfabric.fabric import mcf
from trainfabric.fabric import topology as T
from trainfabric.fabric.flow import collectives as fc
from trainfabric.fabric.flow.engine import simulate, static_goodput
from trainfabric.fabric.flows import FlowTable, mix64
from trainfabric.fabric.routing import Router

WIRE = 4160 / 4096


def test_131k_build_is_the_mrc_arithmetic():
    """512-port switches at full bisection: R^2/2 = 131,072 hosts per plane, 512 leaves of
    256 hosts, 256 spines with one cable to every leaf, 8 planes of 100G."""
    topo = T.multiplane(131_072, 8, 512, 800e9)
    P, L, U = topo.tables["leaf_up"].shape
    _, S, L2, C = topo.tables["spine_down"].shape
    assert (P, L, U, S, L2, C) == (8, 512, 256, 256, 512, 1)
    assert topo.hosts_per_leaf == 256 and topo.port_rate_bps == 100e9
    assert topo.n_switches == 8 * (512 + 256)
    assert topo.n_links == 8 * 2 * (131_072 + 512 * 256)
    assert T.bisection_closed_form_bps(topo) == 131_072 / 2 * 800e9


@pytest.mark.parametrize("group", [4, 8])
def test_expert_parallel_all_to_all_closed_form(group):
    """Full bisection, spraying: every rank sends (G-1)/G of S through its NIC at once and
    every flow gets NIC/(G-1), so all finish at 8 S (G-1)/G x 4160/4096 / NIC + hops."""
    topo = T.multiplane(64, 4, 16, 800e9)
    hosts = fc.place(topo.host_leaf[0], 64, "random", seed=2)
    size = 8e6
    flows = fc.grouped_all_to_all(hosts, group, size)
    res = simulate(topo, flows, Router(topo, "spray"))
    hops = np.where(topo.leaf_of(flows.src) == topo.leaf_of(flows.dst), 2, 4)
    expect = 8 * size * (group - 1) / group * WIRE / 800e9 + hops * 1e-6
    np.testing.assert_allclose(res.finish_s, expect, rtol=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_adaptive_with_the_priced_split_reaches_the_lp_minimum_rate(seed, monkeypatch):
    """10-20% of the cables down, a permutation at NIC demand. With either split (the LP's,
    or the priced decomposition's, forced here), the uniform allocation at the split's λ is
    feasible, so max-min's smallest rate is at least λ_split x NIC, and no allocation beats
    the concurrent-flow optimum λ* x NIC: both smallest rates are within 1% below λ* x NIC.
    (Their goodput sums may differ: many min-congestion splits exist.)"""
    topo = T.multiplane(128, 4, 16, 800e9)
    rng = np.random.default_rng(seed)
    up = T.fail_links(topo, (0.1, 0.2)[seed % 2], seed=seed)
    src = rng.permutation(128)
    dst = (src + rng.integers(1, 128, 128)) % 128
    flows = FlowTable.simple(src, dst, 1e6, entropy=mix64(src, dst, seed=11))
    lam = mcf.max_concurrent_flow(topo, src, dst, 800e9, up).lam
    with_lp = static_goodput(topo, flows, Router(topo, "adaptive"), up)
    calls = []
    orig_split, orig_priced = mcf.balanced_split, mcf.priced_split

    def forced(*a, **k):
        return orig_split(*a, **(k | {"max_lp_variables": 0}))

    def spy(*a, **k):
        calls.append(1)
        return orig_priced(*a, **k)

    monkeypatch.setattr(mcf, "balanced_split", forced)
    monkeypatch.setattr(mcf, "priced_split", spy)
    priced = static_goodput(topo, flows, Router(topo, "adaptive"), up)
    assert calls
    for good in (with_lp, priced):
        assert lam * 0.99 <= good.min() / 800e9 <= lam * (1 + 1e-6)
