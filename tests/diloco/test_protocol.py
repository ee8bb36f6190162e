"""The protocol end to end on a small configuration, the transfer check, and the CLI."""

import numpy as np
import pytest

from trainfabric.diloco.fleet import FleetConfig
from trainfabric.diloco.protocol import ProtocolConfig, run_protocol, transfer
from trainfabric.io import loads

SMALL = ProtocolConfig(
    regimes=["bursty"],
    policies=["fixed_h", "pressure_gate", "wa_forecast", "wa_calibrated"],
    seeds=6,
    envelope_draws=4,
    calibration_seeds=2,
    fleet=FleetConfig(windows=1500),
)


@pytest.fixture(scope="module")
def small():
    return run_protocol(SMALL)


def test_matched_random_uses_exactly_the_reference_budget(small):
    runs = small["runs"]
    for policy in SMALL.policies:
        ours = runs[runs["policy"] == policy].set_index("seed")["syncs"]
        control = runs[runs["policy"] == f"matched_random[{policy}]"]
        assert len(control) == SMALL.seeds * SMALL.envelope_draws
        for seed, rows in control.groupby("seed"):
            assert (rows["syncs"] == ours[seed]).all()
            assert (rows["windows"] == SMALL.fleet.windows).all()  # the same horizon


def test_no_sync_floor_and_verdict_consistency(small):
    runs, v = small["runs"], small["verdicts"]
    floor = runs[runs["policy"] == "no_sync"]
    assert (floor["syncs"] == 0).all()
    assert (v["no_sync_slo"] <= v["slo_violation_rate"] + 1e-12).all()  # syncs only add violations
    assert set(v["vs_matched_random"]) <= {"beats", "ties", "loses"}
    beats = v[v["vs_matched_random"] == "beats"]
    assert (beats["effect_size"] < 0).all() and (beats["p_value"] < SMALL.alpha).all()
    assert (v["p_value"] >= v["p_wilcoxon"]).all()  # Holm only raises p-values
    assert not v.set_index("policy").loc["wa_calibrated", "deployable"]
    assert small["windows_per_s"] > 0


def test_transfer_check():
    rng = np.random.default_rng(0)
    sim = rng.normal(-1.0, 0.3, 10)
    assert transfer(sim, rng.normal(-0.9, 0.3, 10))["transfers"]
    assert not transfer(sim, rng.normal(0.5, 0.3, 10))["transfers"]  # the sign flips
    assert not transfer(sim, rng.normal(-0.05, 0.01, 10))["transfers"]  # far smaller


def test_cli_sim_and_errors(cli):
    code, out, _ = cli(
        "diloco",
        "sim",
        "--policy",
        "fixed_h",
        "--regime",
        "steady",
        "--seed",
        "2",
        "--windows",
        "400",
        "--json",
    )
    assert code == 0
    row = loads(out)
    assert row["policy"] == "fixed_h" and row["syncs"] == 1 and 0 <= row["slo_violation_rate"] < 1
    for argv, field in (
        (("diloco", "sim", "--policy", "oracle"), "--policy"),
        (("diloco", "sim", "--regime", "calm"), "--regime"),
        (("diloco", "sim", "--windows", "3"), "--windows"),
        (("diloco", "protocol", "--seeds", "2"), "--seeds"),
    ):
        code, out, err = cli(*argv)
        assert code == 2 and out == "" and field in err and err.count("\n") == 1, err


@pytest.mark.slow
def test_cli_protocol_quick_json(cli, tmp_path):
    code, out, _ = cli("diloco", "protocol", "--quick", "--json", "--out", str(tmp_path / "p"))
    assert code == 0
    res = loads(out)
    for rows in res["regimes"].values():
        for row in rows.values():
            assert {
                "slo_violation_rate",
                "syncs",
                "vs_matched_random",
                "p_value",
                "effect_size",
            } <= set(row)


AZURE_CSV = "src/trainfabric/diloco/data/azure_llm_code_2023.csv"


def test_cli_trace_segments_overlap_and_refusal(cli):
    """sim on the Azure regime: seed 3's default horizon is the segment length for seeds
    0..3 (8,819 s / 4); more seeds than segments exit 2 naming the option, unless
    --allow-overlap, which the output then says."""
    code, out, err = cli("diloco", "sim", "--regime", "azure", "--seed", "3", "--json")
    assert code == 0, err
    row = loads(out)
    assert (row["segment_s"], row["segments"], row["seeds_overlap"]) == (2204.0, 4, False)
    assert row["windows"] == 2204
    argv = ("diloco", "sim", "--regime", "azure", "--seed", "7", "--windows", "1200")
    code, out, err = cli(*argv)
    assert code == 2 and out == "" and "--seed" in err and "holds 7 independent" in err, err
    code, out, err = cli(*argv, "--allow-overlap", "--json")
    assert code == 0 and loads(out)["seeds_overlap"] is True, err
    # the protocol on a trace: 10 + 3 seeds need 13 segments; at the trace's own rate
    # (8,819 requests in 57 min) they are ~263 s, under the 1,154 windows it needs
    code, out, err = cli("diloco", "protocol", "--quick", "--trace", AZURE_CSV)
    assert code == 2 and out == "" and "--seeds" in err and err.count("\n") == 1, err


def test_trace_protocol_reports_segments_and_flags_overlap():
    cfg = ProtocolConfig(
        regimes=["azure"],
        policies=["fixed_h", "wa_forecast"],
        seeds=3,
        envelope_draws=2,
        calibration_seeds=1,
    )
    assert cfg.fleet_for(cfg.regime("azure")).windows == 8819 // 3
    v = run_protocol(cfg)["verdicts"]
    assert (v["segments"] == 3).all() and (v["segment_s"] == 2939.0).all()
    assert not v["seeds_overlap"].any()
    assert set(v["vs_matched_random"]) <= {"beats", "ties", "loses"}
    over = cfg.model_copy(update={"seeds": 4, "allow_overlap": True, "segment_horizon": False})
    over = over.model_copy(update={"fleet": FleetConfig(windows=1200)})
    v = run_protocol(over)["verdicts"]
    assert v["seeds_overlap"].all()
    assert all(s.endswith("(overlapping seeds)") for s in v["vs_matched_random"])
