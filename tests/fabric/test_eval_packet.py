"""The four scenarios on the packet engine (tiny fabrics), the engine field and --engine."""

from pathlib import Path

import numpy as np
import pytest

from trainfabric.errors import ConfigError
from trainfabric.fabric import scenarios as S
from trainfabric.io import loads

SMALL = {"gpus": 16, "switch_radix": 8, "planes": 2}
MiB = 2**20


def tiny(kind: str, **extra) -> dict:
    """A 16-host, 2-plane scenario on the packet engine, small enough for a unit test."""
    base = {
        "kind": kind,
        "seed": 3,
        "modes": ["ecmp", "adaptive"],
        "topology": SMALL,
        "engine": "packet",
    }
    if kind == "line_rate":
        base |= {"sizes_bytes": [MiB], "collectives": [{"kind": "all_reduce", "sync": "step"}]}
    if kind == "isolation":
        base |= {
            "oversubscription": [1.0],
            "failed_fractions": [0.0],
            "victim": {"kind": "all_reduce", "placement": "scattered", "size_bytes": MiB},
            "aggressor": {"kind": "all_to_all", "placement": "scattered", "size_bytes": 4 * MiB},
        }
    if kind == "failures":
        base |= {
            "fractions": [0.0, 0.25],
            "draws": 1,
            "collective": {"kind": "all_to_all", "size_bytes": MiB},
        }
    if kind == "flaps":
        base |= {
            "collective": {"kind": "all_reduce", "ranks": 4, "size_bytes": 4 * MiB},
            "iterations": 4,
            "compute_s": 0.01,
            "flaps": [{"link": "fabric", "duration_s": 0.05}],
        }
    return base | extra


@pytest.mark.parametrize("kind", list(S.SCENARIOS))
def test_each_kind_runs_on_the_packet_engine(kind, tmp_path):
    sc = S.parse_scenario(tiny(kind))
    res = S.run_to_dir(sc, tmp_path / kind)
    assert res["engine"] == "packet"
    assert {row["engine"] for row in res["rows"]} == {"packet"}
    assert set(res["modes"]) == {"ecmp", "adaptive"}
    assert Path(res["report"]).read_text().count("data:image/png") >= 1


def test_line_rate_reports_latency_and_jitter():
    """Measured per-packet latency: p50 <= p99 <= p99.9, jitter = p99 - p50, and at least
    one packet's serialisation + propagation (4 hops of 1 us on a 2-tier fabric);
    busbw below the header bound."""
    table = S.run_line_rate(S.parse_scenario(tiny("line_rate")))
    assert (table["p50_latency_us"] <= table["p99_latency_us"]).all()
    assert (table["p99_latency_us"] <= table["p999_latency_us"]).all()
    assert np.allclose(table["jitter_us"], table["p99_latency_us"] - table["p50_latency_us"])
    assert (table["p50_latency_us"] >= 4.0).all()
    assert (table["line_rate_fraction"] <= S.HEADER_BOUND).all()
    assert not table["ring_shortcut"].any()  # every step simulated
    summary = S.line_rate_summary(table)
    for row in summary.values():
        assert {"line_rate_fraction", "p99_latency_us", "jitter_us"} <= set(row)


def test_packet_failures_measure_goodput():
    """Measured goodput: a sender never beats its NIC (<= 1 in wire units); the max-flow
    and LP columns are the links' and do not depend on the engine."""
    table = S.run_failures(S.parse_scenario(tiny("failures")))
    flow = S.run_failures(S.parse_scenario(tiny("failures", engine="flow")))
    assert (
        (table["mean_permutation_goodput"] > 0) & (table["mean_permutation_goodput"] <= 1)
    ).all()
    assert np.allclose(table["maxflow_bisection"], flow["maxflow_bisection"])
    assert np.allclose(table["max_concurrent_flow_lp"], flow["max_concurrent_flow_lp"])
    assert {"latency_p99_us", "jitter_us", "latency_increase"} <= set(table.columns)
    assert "latency_p50_us_est" not in table.columns  # measured, not estimated


def test_packet_flap_effect_comes_from_the_mechanism():
    """A 50 ms fabric flap: ECMP (routing reaction 1 s) keeps hashing onto the dead cable, so
    its job stalls for about the whole flap; adaptive (hardware, 5 us) loses only what was
    in flight and recovers it (by NACK or timeout) well within the flap. Both lose packets
    on the dead link: the engine drops them, nothing is configured."""
    sc = S.parse_scenario(tiny("flaps"))
    table = S.run_flaps(sc).set_index("mode")
    ecmp, adaptive = table.loc["ecmp"], table.loc["adaptive"]
    assert ecmp["stall_s"] >= 0.9 * 0.05
    assert adaptive["stall_s"] < 0.05 / 10
    # the payload the engine dropped on the dead cable: some for both (what was in flight
    # when it failed, for adaptive), carried by at most that many dropped MTU-sized packets
    # (dropped counts every discarded packet), and far less for adaptive
    for row in (ecmp, adaptive):
        assert 0 < row["lost_bytes"] <= row["lost_packets"] * sc.packet.mtu_bytes
    assert adaptive["lost_bytes"] < ecmp["lost_bytes"] / 10
    assert (table["unfinished"] == 0).all()
    assert (table["baseline_stall_s"] < 1e-3).all()


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (tiny("line_rate", engine="fluid"), "engine"),
        (tiny("line_rate", packet={"queue_packets": 0}), "packet.queue_packets"),
        (tiny("line_rate", packet={"switch_mode": "magic"}), "packet.switch_mode"),
        (tiny("line_rate", packet={"typo": 1}), "packet.typo"),
    ],
)
def test_bad_engine_fields_are_named(data, field):
    with pytest.raises(ConfigError) as exc:
        S.parse_scenario(data)
    assert exc.value.field == field


def test_packet_size_refusal_names_the_scenario_field():
    """The packet engine's bound on packets (config.max_packets) is reported against the
    scenario input that sets the bytes."""
    data = tiny("line_rate", packet={"max_packets": 100})
    with pytest.raises(ConfigError) as exc:
        S.run_line_rate(S.parse_scenario(data))
    assert exc.value.field == "collectives.0.ranks"


def _toml(tmp_path, engine_line: str = "", name: str = "lr") -> Path:
    f = tmp_path / f"{name}.toml"
    f.write_text(
        f'kind = "line_rate"\nmodes = ["spray", "ecmp"]\nsizes_bytes = [262144.0]\n{engine_line}'
        "[topology]\ngpus = 16\nswitch_radix = 8\nplanes = 2\n"
    )
    return f


def test_cli_engine_flag(cli, tmp_path):
    f = _toml(tmp_path)
    code, out, _ = cli(
        "fabric", "run", str(f), "--engine", "packet", "--json", "--out", str(tmp_path / "p")
    )
    assert code == 0
    res = loads(out)
    assert res["engine"] == "packet"
    for row in res["modes"].values():
        assert {"line_rate_fraction", "p99_latency_us", "jitter_us"} <= set(row)
    code, out, _ = cli("fabric", "run", str(f), "--json", "--out", str(tmp_path / "f"))
    assert code == 0 and loads(out)["engine"] == "flow"  # the file's default


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (("fabric", "run", "{toml}", "--engine", "magic"), "--engine"),
        (("fabric", "eval", "--quick", "--engine", "Packet"), "--engine"),
        (("fabric", "run", "{bad_toml}"), "engine"),
    ],
)
def test_cli_bad_engine_exits_2_naming_the_field(cli, tmp_path, argv, field):
    paths = {"toml": _toml(tmp_path), "bad_toml": _toml(tmp_path, 'engine = "gpu"\n', "bad")}
    argv = [a.format(**{k: str(v) for k, v in paths.items()}) for a in argv]
    code, out, err = cli(*argv)
    assert code == 2 and out == ""
    assert err.startswith(f"error: {field}") and err.count("\n") == 1


@pytest.mark.slow
def test_eval_packet_quick_json(cli, tmp_path):
    code, out, _ = cli(
        "fabric", "eval", "--engine", "packet", "--quick", "--json", "--out", str(tmp_path / "e")
    )
    assert code == 0
    res = loads(out)
    assert res["engine"] == "packet"
    for row in res["modes"].values():
        assert {"p99_latency_us", "jitter_us", "line_rate_fraction"} <= set(row)
        assert set(S.HEADLINE) <= set(row)
