"""nccl-tests tables: sizes and counts as nccl-tests prints them, the closed forms (busbw at the
NIC rate, small sizes at the latency), the scale-up domain, the one-step scaling against
direct runs, every preset, and the ``fabric collective`` command."""

from pathlib import Path

import numpy as np
import pytest

from trainfabric.errors import ConfigError
from trainfabric.fabric import cluster as C
from trainfabric.fabric import nccl as N
from trainfabric.fabric.flow import collectives as fc
from trainfabric.fabric.routing import Router
from trainfabric.io import loads

ROOT = Path(__file__).resolve().parents[2]
PRESETS = sorted((ROOT / "configs" / "clusters").glob("*.toml"))
WIRE = 4160 / 4096  # payload + 64 B headers per 4096 B MTU
G = 2**30


def cluster(gpus=16, planes=4, radix=16, nic=800.0, hop=1e-6, scale_up=None, **fabric):
    data = {
        "gpus": gpus,
        "fabric": {
            "planes": planes,
            "switch_radix": radix,
            "nic_rate_gbps": nic,
            "hop_latency_s": hop,
            **fabric,
        },
    }
    if scale_up:
        data["scale_up"] = dict(zip(("gpus", "bandwidth_gbps", "latency_s"), scale_up, strict=True))
    return C.parse_cluster(data)


# -- sizes -----------------------------------------------------------------------------------------
def test_sizes_double_from_first_to_last():
    assert N.parse_sizes("8:8G") == [8 << k for k in range(31)]
    assert N.parse_sizes("1k:4K") == [1024, 2048, 4096]
    assert N.parse_sizes("3:10") == [3, 6]
    assert N.parse_sizes("32M") == [32 * 2**20]


@pytest.mark.parametrize(
    "text", ["", "8:", "abc", "0", "8:4", "2T", "2048G", "1.5M", "-8", "8:8:8"]
)
def test_bad_sizes_name_the_option(text):
    with pytest.raises(ConfigError) as exc:
        N.parse_sizes(text)
    assert exc.value.field == "sizes"


@pytest.mark.parametrize(
    "op, requested, n, expected",
    [
        ("all_reduce", 8, 8, (8, 2)),
        ("all_reduce", 10, 8, (8, 2)),
        ("broadcast", 1024, 8, (1024, 256)),
        ("all_gather", 1024, 8, (1024, 32)),  # send count per rank, size = gathered output
        ("reduce_scatter", 1000, 8, (992, 31)),  # receive count per rank, size = n x it
        ("all_to_all", 1024, 8, (1024, 32)),  # count per peer
        ("all_gather", 8, 8, (0, 0)),
    ],
)
def test_size_and_count_as_nccl_tests(op, requested, n, expected):
    assert N.nccl_size(op, requested, n) == expected


def test_bus_factors_and_columns():
    res = N.nccl_table(cluster(), "all_reduce", [2**20], gpus=16)
    row = res["rows"][0]
    assert row["busbw_gbs"] == pytest.approx(row["algbw_gbs"] * 2 * 15 / 16)
    assert row["algbw_gbs"] == pytest.approx(row["size_bytes"] / row["time_us"] / 1e3)
    assert (row["type"], row["redop"], row["root"]) == ("float", "sum", -1)
    rows = {op: N.nccl_table(cluster(), op, [2**20], gpus=16)["rows"][0] for op in N.OPS}
    for op in ("all_gather", "reduce_scatter", "all_to_all"):
        assert rows[op]["busbw_gbs"] == pytest.approx(rows[op]["algbw_gbs"] * 15 / 16)
    assert rows["broadcast"]["busbw_gbs"] == rows["broadcast"]["algbw_gbs"]
    assert (rows["broadcast"]["root"], rows["broadcast"]["redop"]) == (0, "none")
    assert rows["reduce_scatter"]["redop"] == "sum" and rows["all_gather"]["redop"] == "none"


def test_a_row_of_count_zero_takes_no_time():
    row = N.nccl_table(cluster(), "all_gather", [8], gpus=16)["rows"][0]
    assert (row["size_bytes"], row["count"], row["time_us"], row["busbw_gbs"]) == (0, 0, 0, 0)


# -- closed forms ----------------------------------------------------------------------------------
@pytest.mark.parametrize("op", N.OPS)
def test_busbw_at_8g_within_2_percent_of_the_nic(op):
    """Non-blocking 4-plane fabric, no scale-up, adaptive: busbw -> NIC rate x 4096/4160."""
    res = N.nccl_table(cluster(), op, [8 * G], gpus=16)
    busbw_bps = 8e9 * res["rows"][0]["busbw_gbs"]
    assert 0.98 * 800e9 <= busbw_bps <= 800e9 / WIRE * (1 + 1e-9)


def test_ring_all_reduce_is_the_closed_form():
    """16 ranks on 2 leaves of 8: every step's slowest transfer crosses leaves (4 links);
    t = 2(n-1) (σ + 4 hop + 8 (S/n) 4160/4096 / B)."""
    sigma, hop, n = 2e-6, 1e-6, 16
    res = N.nccl_table(
        cluster(hop=hop), "all_reduce", N.parse_sizes("8:1G"), gpus=n, step_latency_s=sigma
    )
    for row in res["rows"]:
        step = sigma + 4 * hop + 8 * row["size_bytes"] / n * WIRE / 800e9
        assert row["time_us"] * 1e-6 == pytest.approx(2 * (n - 1) * step, rel=1e-9)
    assert res["rows"][0]["time_us"] == pytest.approx(2 * (n - 1) * 6, rel=1e-4)  # latency-bound


def test_small_sizes_are_latency_bound():
    hop = 5e-6
    for op, latency in [
        ("all_reduce", 30 * 4 * hop),  # 2(n-1) steps of 4 links
        ("reduce_scatter", 15 * 4 * hop),
        ("all_to_all", 4 * hop),
        ("broadcast", (14 * 2 + 4) * hop),  # chain 0..15: 14 edges on a leaf, one across
    ]:
        t = N.nccl_table(cluster(hop=hop), op, [8 * 16], gpus=16)["rows"][0]["time_us"] * 1e-6
        assert t == pytest.approx(latency, rel=1e-3), op


def test_single_leaf_rings_pay_two_links_per_step():
    res = N.nccl_table(cluster(gpus=8, radix=16), "all_gather", [8 * 64], gpus=8)
    t = res["rows"][0]["time_us"] * 1e-6
    assert t == pytest.approx(7 * (2e-6 + 8 * 512 / 8 * WIRE / 800e9), rel=1e-9)


def test_oversubscription_is_the_max_min_closed_form():
    """all_to_all over 2 leaves of 12 hosts with 4 uplinks each (3:1): the 144 cross-leaf
    flows of a leaf share its 4 uplinks (and finish last), t = 4 hop + 8 (S/24) 4160/4096 /
    (4 B / 144); a non-blocking leaf-spine is faster."""
    over = cluster(gpus=24, planes=1, radix=16, oversubscription=[3.0])
    row = N.nccl_table(over, "all_to_all", [G], gpus=24)["rows"][0]
    t, size = row["time_us"] * 1e-6, row["size_bytes"]  # 24 x 4 x (G/4 div 24) bytes
    assert t == pytest.approx(4e-6 + 8 * size / 24 * WIRE / (4 * 800e9 / 144), rel=1e-9)
    flat = N.nccl_table(cluster(gpus=24, planes=1, radix=24), "all_to_all", [G], gpus=24)
    assert flat["rows"][0]["time_us"] * 1e-6 < 0.7 * t


# -- the scale-up domain ---------------------------------------------------------------------------
def test_one_domain_runs_at_its_bandwidth():
    """8 ranks in one domain: every ring step is L + 8 (S/n) / B_su; busbw -> B_su."""
    c = cluster(gpus=16, scale_up=(8, 3600.0, 5e-7))
    res = N.nccl_table(c, "all_reduce", [8, 8 * G], gpus=8)
    for row in res["rows"]:
        step = 5e-7 + 8 * row["size_bytes"] / 8 / 3600e9
        assert row["time_us"] * 1e-6 == pytest.approx(14 * step, rel=1e-9)
    assert 8e9 * res["rows"][-1]["busbw_gbs"] == pytest.approx(3600e9, rel=1e-3)


def test_domains_keep_their_traffic_off_the_nics():
    """all_to_all over 2 domains of 8 on one leaf: each GPU sends 7 S/16 inside (B_su) and
    8 S/16 through its NIC: t = max(L_su + 7 S/16 / B_su, 2 hop + 8 S/16 · 4160/4096 / B)."""
    c = cluster(gpus=16, radix=32, scale_up=(8, 900.0, 1e-6))
    for size in (2**10, 2**30):
        t = N.nccl_table(c, "all_to_all", [size], gpus=16)["rows"][0]["time_us"] * 1e-6
        inside = 1e-6 + 8 * 7 * size / 16 / 900e9
        nic = 2e-6 + 8 * 8 * size / 16 * WIRE / 800e9
        assert t == pytest.approx(max(inside, nic), rel=1e-6)


def test_ring_over_domains_waits_for_the_slower_side():
    """A ring over 2 domains of 8 (one leaf): per step the NIC edges (2 links) and the
    scale-up edges (L_su + 8 c / B_su) run side by side; the slower sets the step."""
    c = cluster(gpus=16, radix=32, scale_up=(8, 400.0, 3e-6))
    for size in (2**10, 2**30):
        t = N.nccl_table(c, "reduce_scatter", [size], gpus=16)["rows"][0]["time_us"] * 1e-6
        chunk = size / 16
        step = max(3e-6 + 8 * chunk / 400e9, 2e-6 + 8 * chunk * WIRE / 800e9)
        assert t == pytest.approx(15 * step, rel=1e-9)


def test_broadcast_chain_crosses_every_latency_at_the_slowest_rate():
    c = cluster(gpus=16, radix=32, scale_up=(8, 400.0, 3e-6))
    t = N.nccl_table(c, "broadcast", [2**30], gpus=16)["rows"][0]["time_us"] * 1e-6
    latency = 14 * 3e-6 + 2e-6  # 14 edges inside the domains, one across (2 links)
    assert t == pytest.approx(latency + 8 * 2**30 / 400e9, rel=1e-9)


# -- one simulated step, every size ----------------------------------------------------------------
@pytest.mark.parametrize("mode", ["ecmp", "adaptive"])
@pytest.mark.parametrize("op", N.OPS)
def test_scaled_rows_equal_a_run_at_each_size(op, mode):
    c = cluster(gpus=32, planes=2, radix=8, scale_up=(4, 1600.0, 1e-6))
    topo = C.build_cluster(c)
    sizes = [2**12, 2**20, 2**28]
    table = N.nccl_table(c, op, sizes, gpus=24, mode=mode, seed=3)
    su = N.ScaleUp(1600e9, 1e-6)
    for size, row in zip(sizes, table["rows"], strict=True):
        router = Router(topo, mode, seed=3)
        prof = N.step_profile(topo, router, op, 24, 4, row["size_bytes"], seed=3)
        direct = N.collective_time_s(op, 24, row["size_bytes"], prof, su, 0.0)
        assert row["time_us"] * 1e-6 == pytest.approx(direct, rel=1e-9), size


@pytest.mark.parametrize("mode", ["ecmp", "spray"])
def test_one_step_equals_every_step_on_the_engine(mode):
    """Without a scale-up domain, the ring's time is the engine's step-by-step run with a
    barrier between steps (run_collective without its shortcut)."""
    c = cluster(gpus=32, planes=2, radix=8)
    topo = C.build_cluster(c)
    size, sigma = 2**24, 3e-6
    t = (
        N.nccl_table(c, "all_reduce", [size], gpus=24, mode=mode, step_latency_s=sigma, seed=5)[
            "rows"
        ][0]["time_us"]
        * 1e-6
    )
    steps = fc.collective_steps("all_reduce", 24, size)
    run = fc.run_collective(
        topo,
        Router(topo, mode, seed=5),
        steps,
        np.arange(24),
        shortcut=False,
        sync="step",
        channels=4,
        step_latency_s=sigma,
        seed=5,
    )
    assert t == pytest.approx(run.time_s, rel=1e-9)


def test_flowlet_and_unknown_ops_are_refused():
    with pytest.raises(ConfigError) as exc:
        N.nccl_table(cluster(), "all_reduce", [8], mode="flowlet")
    assert exc.value.field == "mode" and "flowlet" in exc.value.message
    with pytest.raises(ConfigError) as exc:
        N.nccl_table(cluster(), "reduce", [8])
    assert exc.value.field == "op"
    with pytest.raises(ConfigError) as exc:
        N.nccl_table(cluster(), "all_reduce", [8], gpus=17)
    assert exc.value.field == "ranks"


# -- every preset, the command ---------------------------------------------------------------------
@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.stem)
def test_every_preset_runs_a_collective(cli, path):
    code, out, _ = cli(
        "fabric", "collective", "--cluster", str(path), "--gpus", "64", "--sizes", "8:1M", "--json"
    )
    assert code == 0
    res = loads(out)
    assert res["cluster"] == path.stem and len(res["rows"]) == 18
    times = [r["time_us"] for r in res["rows"]]
    assert all(t > 0 for t in times) and times == sorted(times)


@pytest.mark.slow
@pytest.mark.parametrize("op", N.OPS)
@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.stem)
def test_every_preset_every_op_on_1024_gpus(path, op):
    res = N.nccl_table(C.load_cluster(path), op, N.parse_sizes("8:8G"), gpus=1024)
    busbw = [r["busbw_gbs"] for r in res["rows"]]
    assert max(busbw) > 0 and busbw[-1] == max(busbw)


def test_fabric_collective_table_and_json(cli):
    code, out, _ = cli("fabric", "collective", "--gpus", "16", "--sizes", "1K:4K")
    assert code == 0
    lines = out.splitlines()
    assert lines[2].split() == [
        "#",
        "size",
        "count",
        "type",
        "redop",
        "root",
        "time",
        "algbw",
        "busbw",
    ]
    assert [ln.split()[:5] for ln in lines[4:7]] == [
        ["1024", "256", "float", "sum", "-1"],
        ["2048", "512", "float", "sum", "-1"],
        ["4096", "1024", "float", "sum", "-1"],
    ]
    assert lines[-1].startswith("# Avg bus bandwidth")
    code, out, _ = cli(
        "fabric", "collective", "--gpus", "16", "--sizes", "1K:4K", "--op", "all_gather", "--json"
    )
    res = loads(out)
    assert res["nic_gbps"] == 800.0 and res["gpus"] == 16 and res["op"] == "all_gather"
    keys = ["size_bytes", "count", "type", "redop", "root", "time_us", "algbw_gbs", "busbw_gbs"]
    assert [list(r) for r in res["rows"]] == [keys] * 3
    assert [r["count"] for r in res["rows"]] == [16, 32, 64]


@pytest.mark.parametrize(
    "args, option",
    [
        (("--sizes", "8:4"), "--sizes"),
        (("--sizes", "1X"), "--sizes"),
        (("--op", "reduce"), "--op"),
        (("--mode", "flowlet"), "--mode"),
        (("--gpus", "100000"), "--gpus"),
        (("--step-latency-us", "-1"), "--step-latency-us"),
    ],
)
def test_fabric_collective_bad_options(cli, args, option):
    code, out, err = cli("fabric", "collective", *args)
    assert code == 2 and out == ""
    assert option in err.splitlines()[0], err


def test_gpus_beyond_the_cluster_name_the_option(cli):
    preset = ROOT / "configs" / "clusters" / "rail-optimised-2tier.toml"
    code, _, err = cli("fabric", "collective", "--cluster", str(preset), "--gpus", "5000")
    assert code == 2 and err.startswith("error: --gpus:") and err.count("\n") == 1
