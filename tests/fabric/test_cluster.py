"""Cluster files: presets and their switch counts by hand, the closed forms against the built
fabric, the agg tier's oversubscription, astra-sim's network YAML, bad files, and
``--cluster`` on ``fabric run`` and ``fabric job``."""

import math
from pathlib import Path

import numpy as np
import pytest

from trainfabric.errors import ConfigError
from trainfabric.fabric import cluster as C
from trainfabric.fabric import topology as T
from trainfabric.fabric.config import TopologyConfig, build_topology
from trainfabric.io import loads

ROOT = Path(__file__).resolve().parents[2]
PRESETS = sorted((ROOT / "configs" / "clusters").glob("*.toml"))
ASTRA = ROOT / "tests" / "data" / "astra" / "network"


# -- presets ---------------------------------------------------------------------------------------
def two_tier_by_hand(gpus: int, radix: int, planes: int) -> dict:
    """Non-blocking 2-tier: d = u = R/2 per leaf, L = H/d leaves, S = L u / R spines, per plane."""
    d = radix // 2
    leaves = gpus // d
    return {"leaf": planes * leaves, "spine": planes * leaves * d // radix}


def fat_tree_by_hand(gpus: int, k: int, edge_over: float) -> dict:
    """Edge: u = round(k / (1 + o)) uplinks, d = k - u hosts; agg 1:1: k/2 edges per pod and
    k/2 uplinks; pods = ceil(H / (k/2 d)); cores = u ceil((k/2) pods / k)."""
    u = round(k / (1 + edge_over))
    d = k - u
    pods = math.ceil(gpus / (k // 2 * d))
    return {"edge": math.ceil(gpus / d), "agg": pods * u, "core": u * math.ceil(k // 2 * pods / k)}


BY_HAND = {
    "spectrum-x-8k": (two_tier_by_hand(8192, 256, 4), {"leaf": 256, "spine": 128}),
    "spectrum-x-32k": (two_tier_by_hand(32768, 256, 4), {"leaf": 1024, "spine": 512}),
    "spectrum-x-128k": (two_tier_by_hand(131072, 512, 4), {"leaf": 2048, "spine": 1024}),
    "rail-optimised-2tier": (two_tier_by_hand(4096, 128, 1), {"leaf": 64, "spine": 32}),
    "fat-tree-3tier-2to1": (
        fat_tree_by_hand(16384, 64, 2.0),
        {"edge": 382, "agg": 252, "core": 126},
    ),
}


def test_every_preset_is_counted_by_hand():
    assert sorted(p.stem for p in PRESETS) == sorted(BY_HAND)


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.stem)
def test_preset_switch_counts_by_hand(path):
    cluster = C.load_cluster(path)
    formula, numbers = BY_HAND[path.stem]
    assert cluster.name == path.stem
    assert C.switch_counts(cluster) == formula == numbers


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.stem)
def test_preset_comment_gives_the_computed_counts(path):
    cluster = C.load_cluster(path)
    lines = [ln for ln in path.read_text().splitlines() if ln.startswith("# switches:")]
    assert lines == ["# " + C.switch_line(cluster)]


def test_switch_line_reads_as_the_counts():
    c32 = C.load_cluster(ROOT / "configs" / "clusters" / "spectrum-x-32k.toml")
    assert C.switch_line(c32) == "switches: 4 planes x (256 leaves + 128 spines) = 1,536"
    ft = C.load_cluster(ROOT / "configs" / "clusters" / "fat-tree-3tier-2to1.toml")
    assert C.switch_line(ft) == "switches: 382 edges + 252 aggs + 126 cores = 760"


# -- closed forms against the built fabric ---------------------------------------------------------
# Sizes that fill an even number of leaves (pods): the closed-form bisection is a leaf- or
# pod-aligned cut.
SMALL = [
    {"gpus": 64, "fabric": {"planes": 4, "switch_radix": 16}},
    {"gpus": 48, "fabric": {"planes": 2, "switch_radix": 16, "oversubscription": [3.0]}},
    {"gpus": 48, "fabric": {"planes": 1, "switch_radix": 12}},
    {"gpus": 128, "fabric": {"tiers": 3, "planes": 1, "switch_radix": 8}},
    {
        "gpus": 96,
        "fabric": {"tiers": 3, "planes": 1, "switch_radix": 8, "oversubscription": [3.0, 1.0]},
    },
    {
        "gpus": 48,
        "fabric": {"tiers": 3, "planes": 1, "switch_radix": 8, "oversubscription": [1.0, 3.0]},
    },
    {
        "gpus": 80,
        "fabric": {"tiers": 3, "planes": 1, "switch_radix": 7, "oversubscription": [2.0, 2.0]},
    },
]


@pytest.mark.parametrize("data", SMALL)
def test_closed_forms_equal_the_built_fabric(data):
    cluster = C.parse_cluster(data)
    topo = C.build_cluster(cluster)
    per_tier = np.bincount(topo.switch_tier, minlength=topo.tiers).tolist()
    assert list(C.switch_counts(cluster).values()) == per_tier
    assert C.bisection_gbps(cluster) * 1e9 == pytest.approx(T.bisection_closed_form_bps(topo))
    assert T.bisection_bps(topo) == pytest.approx(T.bisection_closed_form_bps(topo))


def test_agg_oversubscription_one_keeps_half_the_ports_down():
    for k in (7, 8):
        topo = T.fat_tree(2 * k, k)
        assert int(topo.tables["edges_per_pod"]) == k // 2
        assert topo.tables["agg_up"].shape[1] == k - k // 2


def test_agg_oversubscription_cuts_the_core_by_its_ratio():
    # k = 8, 1:1 edges (4 hosts, 4 uplinks), aggs 3:1: 2 uplinks, 6 edges per pod; 2 pods
    topo = T.fat_tree(48, 8, 100e9, agg_oversubscription=3.0)
    assert int(topo.tables["edges_per_pod"]) == 6 and topo.tables["agg_up"].shape[1] == 2
    assert T.bisection_bps(topo) == pytest.approx(24 * 100e9 * 2 / 6)
    assert T.bisection_closed_form_bps(topo) == pytest.approx(T.bisection_bps(topo))


def test_topology_config_maps_tiers_planes_and_the_domain():
    two = C.parse_cluster({"gpus": 64, "fabric": {"planes": 4, "switch_radix": 16}})
    assert C.topology_config(two).kind == "multiplane"
    one = C.parse_cluster({"gpus": 64, "fabric": {"planes": 1, "switch_radix": 16}})
    assert C.topology_config(one).kind == "leaf_spine"
    three = C.parse_cluster(
        {
            "gpus": 64,
            "fabric": {"tiers": 3, "planes": 1, "switch_radix": 8, "oversubscription": [1.0, 3.0]},
            "scale_up": {"gpus": 4, "bandwidth_gbps": 3600.0},
        }
    )
    cfg = C.topology_config(three)
    assert (cfg.kind, cfg.oversubscription, cfg.agg_oversubscription) == ("fat_tree", 1.0, 3.0)
    assert cfg.gpus_per_server == 4


@pytest.mark.parametrize("tiers", [2, 3])
def test_rails_follow_the_scale_up_domain(tiers):
    data = {
        "gpus": 64,
        "fabric": {"tiers": tiers, "planes": 1, "switch_radix": 16, "rail": True},
        "scale_up": {"gpus": 4, "bandwidth_gbps": 3600.0},
    }
    topo = C.build_cluster(C.parse_cluster(data))
    builder = T.fat_tree if tiers == 3 else T.leaf_spine
    expected = builder(64, 16, 800e9, rail=True, gpus_per_server=4)
    assert np.array_equal(topo.host_leaf, expected.host_leaf)
    assert not np.array_equal(topo.host_leaf, builder(64, 16, 800e9).host_leaf)


def test_build_topology_places_rails_on_every_kind():
    cfg = TopologyConfig(kind="fat_tree", gpus=64, switch_radix=16, rail=True, gpus_per_server=4)
    rails = T.fat_tree(64, 16, 800e9, rail=True, gpus_per_server=4)
    assert np.array_equal(build_topology(cfg).host_leaf, rails.host_leaf)


# -- astra-sim's network YAML ----------------------------------------------------------------------
ASTRA_GBPS = 2**30 * 8 / 1e9


def test_astra_switch_is_one_leaf():
    c = C.load_cluster(ASTRA / "switch.yml")
    assert (c.gpus, c.domain_gpus, c.fabric.planes, c.fabric.switch_radix) == (16, 1, 1, 32)
    assert c.fabric.nic_rate_gbps == pytest.approx(50 * ASTRA_GBPS)
    assert c.fabric.hop_latency_s == pytest.approx(500e-9)
    topo = C.build_cluster(c)
    assert np.all(topo.leaf_of(np.arange(16)) == 0)
    assert np.all(T.path_links(topo, np.arange(15), np.arange(1, 16)) == 2)  # NPU-switch-NPU


def test_astra_switch_switch_is_a_domain_and_rails():
    c = C.load_cluster(ASTRA / "switch_switch.yml")
    assert (c.gpus, c.domain_gpus, c.fabric.rail) == (32, 8, True)
    assert c.scale_up.bandwidth_gbps == pytest.approx(400 * ASTRA_GBPS)
    assert c.scale_up.latency_s == pytest.approx(200e-9)  # two links of 100 ns
    assert c.fabric.nic_rate_gbps == pytest.approx(50 * ASTRA_GBPS)
    topo = C.build_cluster(c)
    leaf = topo.leaf_of(np.arange(32))
    # NPU i + 8 j (member i of domain j) sits on rail switch i, as astra-sim's dimension 2
    assert np.array_equal(leaf, np.tile(np.arange(8), 4))


@pytest.mark.parametrize(
    "text, key",
    [
        ((ASTRA / "ring.yml").read_text(), "topology"),
        (
            "topology: [ FullyConnected, Switch ]\nnpus_count: [4, 4]\nbandwidth: [1, 1]\n"
            "latency: [1, 1]\n",
            "topology",
        ),
        (
            "topology: [ Switch ]\nnpus_count: [ 8, 4 ]\nbandwidth: [ 50 ]\nlatency: [ 5 ]\n",
            "npus_count",
        ),
        (
            "topology: [ Switch ]\nnpus_count: [ 8.5 ]\nbandwidth: [ 50 ]\nlatency: [ 5 ]\n",
            "npus_count",
        ),
        (
            "topology: [ Switch ]\nnpus_count: [ 8 ]\nbandwidth: [ 0 ]\nlatency: [ 5 ]\n",
            "bandwidth",
        ),
        ("topology: [ Switch ]\nnpus_count: [ 8 ]\nbandwidth: [ 50 ]\n", "latency"),
        (
            "topology: [ Switch ]\nnpus_count: [ 8 ]\nbandwidth: [ 5 ]\nlatency: [ 5 ]\nx: [1]\n",
            "x",
        ),
        (
            "topology: [Switch, Switch]\nnpus_count: [16, 4]\nbandwidth: [1, 1]\nlatency: [1, 1]\n",
            "npus_count",
        ),
        ("topology: { a: 1 }\n  nested: 2\n", "--cluster"),
        ("topology: [ Switch\nnpus_count: [ 8 ]\nbandwidth: [ 50 ]\nlatency: [ 5 ]\n", "--cluster"),
        (
            "topology: [ Switch ]\nnpus_count: [ 8 ]\nbandwidth: [ 50 ]\n"
            "latency: [ 5 ]\nlatency: [ 9 ]\n",
            "--cluster",
        ),
    ],
)
def test_astra_files_we_do_not_model_are_refused(cli, tmp_path, text, key):
    f = tmp_path / "net.yml"
    f.write_text(text)
    code, out, err = cli("fabric", "cluster", "show", str(f))
    assert code == 2 and out == ""
    assert err.startswith(f"error: {key}:") and err.count("\n") == 1, err


def test_astra_sim_s_own_inputs_read_as_astra_sim_means_them():
    inputs = Path("/tmp/astra/extern/network_backend/analytical/input")
    if not inputs.is_dir():
        pytest.skip("astra-sim is not checked out at /tmp/astra")
    switch = C.load_cluster(inputs / "Switch.yml")
    assert switch.gpus == 16 and switch.fabric.nic_rate_gbps == pytest.approx(50 * ASTRA_GBPS)
    for name in ("Ring.yml", "FullyConnected.yml", "Ring_FullyConnected_Switch.yml"):
        with pytest.raises(ConfigError) as exc:
            C.load_cluster(inputs / name)
        assert exc.value.field == "topology"


# -- bad cluster files -----------------------------------------------------------------------------
GOOD_SCALE_UP = "[scale_up]\ngpus = 8\nbandwidth_gbps = 3600.0\n"
BAD_FILES = [
    ("gpus = 0\n", "gpus"),
    ('name = "x"\n', "gpus"),
    ('gpus = "many"\n', "gpus"),
    ("gpus = 64\n[fabric]\nplanes = 0\n", "fabric.planes"),
    ("gpus = 64\n[fabric]\ntiers = 4\n", "fabric.tiers"),
    ("gpus = 64\n[fabric]\ntiers = 3\nplanes = 4\n", "fabric.planes"),
    ("gpus = 64\n[fabric]\noversubscription = [1.0, 1.0]\n", "fabric.oversubscription"),
    ("gpus = 64\n[fabric]\noversubscription = [0.5]\n", "fabric.oversubscription.0"),
    ("gpus = 1000\n[fabric]\nswitch_radix = 8\n", "gpus"),
    ("gpus = 64\n[fabric]\nswitch_radix = 100000\n", "fabric.switch_radix"),
    ("gpus = 64\n[fabric]\nnic_rate_gbps = -1.0\n", "fabric.nic_rate_gbps"),
    ("gpus = 64\n[fabric]\nhop_latency_s = nan\n", "fabric.hop_latency_s"),
    ("gpus = 64\n[fabric]\nradix = 8\n", "fabric.radix"),
    ("gpus = 64\n[fabric]\nrail = true\n", "fabric.rail"),
    ("gpus = 64\n[scaleup]\ngpus = 8\n", "scaleup"),
    ("gpus = 60\n" + GOOD_SCALE_UP, "scale_up.gpus"),
    ("gpus = 64\n[scale_up]\ngpus = 8\n", "scale_up.bandwidth_gbps"),
    (
        "gpus = 64\n[scale_up]\ngpus = 8\nbandwidth_gbps = 1.0\nlatency_s = -1.0\n",
        "scale_up.latency_s",
    ),
    ("gpus = 64\n[fabric\n", "--cluster"),
]


@pytest.mark.parametrize("text, key", BAD_FILES)
def test_bad_cluster_file_names_its_key(cli, tmp_path, text, key):
    f = tmp_path / "bad.toml"
    f.write_text(text)
    code, out, err = cli("fabric", "cluster", "show", str(f))
    assert code == 2 and out == ""
    assert err.startswith(f"error: {key}:") and err.count("\n") == 1, err


@pytest.mark.parametrize(
    "command",
    [
        ("fabric", "collective", "--sizes", "8"),
        ("fabric", "job", "--workload", "dp-ring"),
        ("fabric", "run", str(ROOT / "configs" / "fabric-line-rate.toml")),
    ],
)
def test_every_cluster_option_names_the_key(cli, tmp_path, command):
    f = tmp_path / "bad.toml"
    f.write_text("gpus = 64\n[fabric]\ntiers = 3\nplanes = 4\n")
    code, _, err = cli(*command, "--cluster", str(f))
    assert code == 2 and err.startswith("error: fabric.planes:") and err.count("\n") == 1
    code, _, err = cli(*command, "--cluster", str(tmp_path / "missing.toml"))
    assert code == 2 and err.startswith("error: --cluster:") and "not found" in err


# -- --cluster on fabric run and fabric job ------------------------------------------------------
SMALL_CLUSTER = (
    'name = "small"\ngpus = 64\n[fabric]\nplanes = 2\nswitch_radix = 16\n'
    "nic_rate_gbps = 400.0\n" + GOOD_SCALE_UP
)


def test_fabric_run_takes_the_cluster_s_fabric(cli, tmp_path):
    cl = tmp_path / "small.toml"
    cl.write_text(SMALL_CLUSTER)
    scenario = 'kind = "line_rate"\nmodes = ["spray"]\nsizes_bytes = [1048576.0]\n'
    sc = tmp_path / "lr.toml"
    sc.write_text(scenario + "[topology]\ngpus = 16\nswitch_radix = 8\nplanes = 2\n")
    code, out, _ = cli(
        "fabric", "run", str(sc), "--cluster", str(cl), "--out", str(tmp_path / "a"), "--json"
    )
    assert code == 0
    res = loads(out)
    assert res["cluster"] == "small" and "[scale_up] is not used" in res["notes"][0]
    same = tmp_path / "same.toml"
    same.write_text(
        scenario + "[topology]\ngpus = 64\nswitch_radix = 16\nplanes = 2\nnic_rate_gbps = 400.0\n"
        "gpus_per_server = 8\n"
    )
    code, out, _ = cli("fabric", "run", str(same), "--out", str(tmp_path / "b"), "--json")
    assert code == 0 and loads(out)["modes"] == res["modes"]


def test_fabric_job_places_one_pod_per_domain(cli, tmp_path):
    cl = tmp_path / "small.toml"
    cl.write_text(SMALL_CLUSTER)
    args = ("fabric", "job", "--workload", "llama3-70b", "--layers", "2", "--pods", "4")
    code, out, _ = cli(*args, "--cluster", str(cl), "--json")
    assert code == 0
    res = loads(out)
    assert res["fabric"]["cluster"] == "small" and res["fabric"]["gpus"] == 64
    assert res["fabric"]["nic_rate_gbps"] == 400.0
    assert any("scale_up.bandwidth_gbps" in n for n in res["notes"])
    code, _, err = cli(*args[:-1], "16", "--cluster", str(cl))
    assert code == 2 and err.startswith("error: --pods:")
    cl.write_text(SMALL_CLUSTER.replace("gpus = 8", "gpus = 4"))
    code, _, err = cli(*args, "--cluster", str(cl))
    assert code == 2 and err.startswith("error: scale_up.gpus:") and err.count("\n") == 1
