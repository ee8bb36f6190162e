"""Packet engine: closed forms on tiny fabrics, dependencies, multiplane, exactly-once delivery."""

import subprocess
import sys

import numpy as np
import pytest

from trainfabric.errors import ConfigError
from trainfabric.fabric import topology as T
from trainfabric.fabric.events import LinkEvents
from trainfabric.fabric.flows import FlowTable
from trainfabric.fabric.packet import PacketConfig, simulate_packets

HTSIM = PacketConfig(mtu_bytes=4000, header_bytes=64, queue_packets=35, initial_window_packets=50)


def test_one_packet_serialisation_plus_propagation():
    """4 hops of (serialisation + 1 us) for the data packet, 4 of a 64 B ACK back."""
    topo = T.leaf_spine(8, 4, 100e9)
    res = simulate_packets(topo, FlowTable.simple([0], [2], 4000), "spray", config=HTSIM)
    data = 4 * (1e-6 + 4064 * 8 / 100e9)
    ack = 4 * (1e-6 + 64 * 8 / 100e9)
    assert res.finish_s[0] == pytest.approx(data, rel=1e-12)
    assert res.acked_s[0] == pytest.approx(data + ack, rel=1e-12)
    assert res.latency_s[0] == pytest.approx(data, rel=1e-12)
    same_leaf = simulate_packets(topo, FlowTable.simple([0], [1], 4000), "ecmp", config=HTSIM)
    assert same_leaf.finish_s[0] == pytest.approx(2 * (1e-6 + 4064 * 8 / 100e9), rel=1e-12)
    fat = T.fat_tree(16, 4, 100e9)  # across pods: 6 hops
    across = simulate_packets(fat, FlowTable.simple([0], [15], 4000), "adaptive", config=HTSIM)
    assert across.finish_s[0] == pytest.approx(6 * (1e-6 + 4064 * 8 / 100e9), rel=1e-12)


def test_solo_flow_runs_at_line_rate():
    """A window larger than the BDP: n packets take n serialisations plus one pipeline fill."""
    topo = T.leaf_spine(8, 4, 100e9)
    n = 200
    res = simulate_packets(topo, FlowTable.simple([0], [2], n * 4000), "spray", config=HTSIM)
    ser = 4064 * 8 / 100e9
    assert res.finish_s[0] == pytest.approx(n * ser + 3 * ser + 4e-6, rel=1e-9)
    assert res.retransmitted == 0 and res.dropped == 0


@pytest.mark.parametrize("mode", ["ecmp", "spray"])
def test_dependencies_and_delays_on_multiplane(mode):
    """A chain a -> b (+ 3 us delay) -> c on a 2-plane fabric: each starts when the one it
    depends on has delivered its last byte, plus its delay; every byte delivered once."""
    topo = T.multiplane(16, planes=2, switch_radix=8, nic_rate_bps=200e9)
    flows = FlowTable(
        src=[0, 5, 9],
        dst=[12, 1, 3],
        bytes=[300_000.0, 123_457.0, 50_000.0],
        entropy=np.arange(3, dtype=np.uint64),
        job=[0, 0, 1],
        deps_ptr=[0, 0, 1, 2],
        deps=[0, 1],
        release_s=[0.0, 0.0, 0.0],
        delay_s=[0.0, 3e-6, 0.0],
    )
    res = simulate_packets(topo, flows, mode, config=HTSIM, seed=3)
    assert res.unfinished == 0
    assert res.start_s[1] == pytest.approx(res.finish_s[0] + 3e-6)
    assert res.start_s[2] == pytest.approx(res.finish_s[1])
    np.testing.assert_array_equal(res.delivered_bytes, np.ceil(flows.bytes))
    edges, per_job = res.goodput_timeline(10e-6)
    np.testing.assert_allclose(per_job.sum(axis=1), [423_457.0, 50_000.0])
    assert edges.size == per_job.shape[1] + 1


def test_bad_input_names_the_field():
    topo = T.leaf_spine(8, 4, 100e9)
    flows = FlowTable.simple([0], [2], 4000)
    with pytest.raises(ConfigError, match="mode"):
        simulate_packets(topo, flows, "magic")
    with pytest.raises(ConfigError, match="link_up"):
        simulate_packets(topo, flows, "ecmp", link_up=np.ones(3, bool))
    with pytest.raises(ConfigError, match="flows.bytes"):
        big = FlowTable.simple([0], [2], 1e6)
        simulate_packets(topo, big, "ecmp", config=PacketConfig(max_packets=10))
    with pytest.raises(ConfigError, match="until_s"):
        simulate_packets(topo, flows, "ecmp", until_s=0.0)
    with pytest.raises(ConfigError, match="events.link"):
        simulate_packets(topo, flows, "ecmp", events=LinkEvents.flap([10_000], 1e-6, 2e-6))
    with pytest.raises(ConfigError, match="flows.dst"):
        simulate_packets(topo, FlowTable.simple([0], [99], 4000), "ecmp")
    with pytest.raises(ConfigError, match="ecn_kmax_packets"):
        from trainfabric.config import validate

        validate(PacketConfig, {"ecn_kmin_packets": 10.0, "ecn_kmax_packets": 5.0})
    with pytest.raises(ConfigError, match="switch_mode"):
        validate(PacketConfig, {"switch_mode": "magic"})
    with pytest.raises(ConfigError, match="adaptive_levels"):
        validate(PacketConfig, {"adaptive_levels": [0.2, 0.1]})


def test_empty_and_tiny_flows():
    topo = T.leaf_spine(8, 4, 100e9)
    empty = simulate_packets(
        topo, FlowTable.simple(np.zeros(0, int), np.zeros(0, int), 1.0), "spray"
    )
    assert empty.makespan_s == 0.0 and empty.unfinished == 0
    one = simulate_packets(topo, FlowTable.simple([0], [5], 1.0), "ecmp", config=HTSIM)
    assert one.finish_s[0] == pytest.approx(4 * (1e-6 + 65 * 8 / 100e9))  # 1 B + 64 B header
    assert one.delivered_bytes[0] == 1.0


def test_importing_the_config_does_not_load_numba():
    """The scenario models import PacketConfig; the kernel loads only with simulate_packets."""
    code = (
        "import sys; from trainfabric.fabric.packet import PacketConfig; "
        "print('trainfabric.fabric.packet.kernel' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
