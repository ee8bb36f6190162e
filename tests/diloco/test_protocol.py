"""The protocol end to end on a small configuration, its design (primary alone, one Holm
family, tokens beside the loss, the power statement), the transfer check, and the CLI."""

import numpy as np
import pytest

from trainfabric.diloco import stats as S
from trainfabric.diloco.fleet import FleetConfig
from trainfabric.diloco.protocol import ProtocolConfig, run_protocol, transfer
from trainfabric.errors import ConfigError
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
    # 6 seeds find the primary (2/64 < 0.05) but no secondary of 7 (Holm's first step 0.05/7)
    with pytest.warns(S.DesignWarning, match=r"no secondary .* Holm over 7: .* 6 paired seeds"):
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
    assert (beats["slo_verdict"] == "better").all()
    assert (v["p_value"] >= v["p_slo"] - 1e-15).all()  # Holm only raises p-values
    assert (v["p_slo"] == v["p_sign_flip"]).all()  # the design's test
    assert not v.set_index("policy").loc["wa_calibrated", "deployable"]
    assert small["windows_per_s"] > 0


def test_design_primary_alone_secondaries_one_family(small):
    """wa_forecast's SLO is the primary, tested alone (its p is its own); every other
    comparison — its final loss, the others' SLO and final loss — is one Holm family of 7,
    recomputed here from the raw p-values of the table."""
    v = small["verdicts"].set_index("policy")
    assert v.loc["wa_forecast", "role"] == "primary"
    assert v.loc["wa_forecast", "p_value"] == v.loc["wa_forecast", "p_slo"]
    assert (v.drop(index="wa_forecast")["role"] == "secondary").all()
    design = SMALL.design()
    assert design.primary == S.Comparison("wa_forecast", "slo_violation_rate")
    assert design.family_size == 7 and (v.drop(index="wa_forecast")["family_size"] == 7).all()
    others = v.drop(index="wa_forecast")
    raw = np.r_[v.loc["wa_forecast", "p_loss"], others["p_slo"], others["p_loss"]]
    adj = S.holm(raw)
    assert adj[0] == pytest.approx(v.loc["wa_forecast", "p_loss_adjusted"])
    assert adj[1 : 1 + len(others)] == pytest.approx(others["p_value"].to_numpy())
    assert adj[1 + len(others) :] == pytest.approx(others["p_loss_adjusted"].to_numpy())
    words = {S.BETTER, S.WORSE, S.NO_DIFFERENCE}
    assert set(v["slo_verdict"]) <= words and set(v["loss_verdict"]) <= words
    for col, p in (("slo_verdict", "p_value"), ("loss_verdict", "p_loss_adjusted")):
        claimed = v[v[col] != S.NO_DIFFERENCE]
        assert (claimed[p] < SMALL.alpha).all()
    info = small["design"]["bursty"]
    assert info["design"]["primary"] == "wa_forecast vs matched random: SLO violation rate"
    assert len(info["design"]["secondary"]) == 7 and info["seeds"] == 6


def test_tokens_beside_every_loss_comparison(small):
    """Each row's loss comparison carries the tokens both arms trained (the control's: the
    mean over its envelope draws) and their ratio, as the runs table has them."""
    runs, v = small["runs"], small["verdicts"]
    for r in v.itertuples():
        ours = runs[runs["policy"] == r.policy]["tokens_trained"]
        ctl = runs[runs["policy"] == f"matched_random[{r.policy}]"]["tokens_trained"]
        assert r.tokens_policy == pytest.approx(ours.mean())
        assert r.tokens_control == pytest.approx(ctl.mean())
        assert r.tokens_ratio == pytest.approx(ours.mean() / ctl.mean())


def test_power_statement_without_a_pilot_is_post_hoc(small):
    plan = small["design"]["bursty"]["power"]
    v = small["verdicts"].set_index("policy")
    assert plan["source"].startswith("post hoc")
    assert plan["pilot_effect"] == pytest.approx(v.loc["wa_forecast", "effect_size"])
    assert plan["seeds_used"] == 6 and plan["test"] == "sign_flip"
    if plan["n_required"] is not None:
        assert plan["sufficient"] == (plan["n_required"] <= 6)


def test_pilot_chooses_the_seeds_and_states_them():
    """A 4-seed pilot on held-out seeds (20,000 on): its effect and sd give n by power; the
    evaluation then runs n seeds (here capped by max_seeds = 7) and says whether that is
    enough. The pilot's numbers are those of the primary's own paired differences."""
    from trainfabric.diloco.fleet import get_regime
    from trainfabric.diloco.policies import make_policy
    from trainfabric.diloco.protocol import primary_differences

    cfg = ProtocolConfig(
        regimes=["bursty"],
        policies=["fixed_h", "wa_forecast"],
        seeds=6,
        envelope_draws=2,
        fleet=FleetConfig(windows=1500),
        pilot_seeds=4,
        max_seeds=7,
    )
    res = run_protocol(cfg)
    plan = res["design"]["bursty"]["power"]
    d = primary_differences(
        cfg, make_policy("wa_forecast"), 20_000 + np.arange(4), get_regime("bursty"), cfg.fleet
    )
    assert plan["source"] == "pilot" and plan["pilot_seeds"] == 4
    assert plan["pilot_effect"] == pytest.approx(d.mean())
    assert plan["pilot_sd"] == pytest.approx(d.std(ddof=1))
    want = S.seeds_for_power(abs(d.mean()), d.std(ddof=1))
    assert plan["n_required"] == want
    assert res["design"]["bursty"]["seeds"] == min(want, 7) == plan["seeds_used"]
    assert plan["sufficient"] == (min(want, 7) >= want)
    assert (res["verdicts"]["seeds"] == min(want, 7)).all()


def test_design_errors_before_any_simulation():
    base = dict(regimes=["bursty"], policies=["fixed_h", "wa_forecast"])
    for update, field in (
        ({"primary_policy": "wa_diloco"}, "primary_policy"),
        ({"pilot_seeds": 1}, "pilot_seeds"),
        ({"pilot_seeds": 4, "regimes": ["azure"]}, "pilot_seeds"),
        ({"pilot_seeds": 4, "max_seeds": 5}, "max_seeds"),  # 5 seeds cannot find the primary
    ):
        with pytest.raises(ConfigError) as exc:
            run_protocol(ProtocolConfig(**(base | update)))
        assert exc.value.field == field, exc.value


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
        (("diloco", "protocol", "--seeds", "5"), "--seeds"),  # a primary that cannot be found
        (("diloco", "protocol", "--pilot-seeds", "1"), "--pilot-seeds"),
    ):
        code, out, err = cli(*argv)
        assert code == 2 and out == "" and field in err and err.count("\n") == 1, err
    code, _, err = cli("diloco", "protocol", "--seeds", "5")
    assert "smallest exact p is 2/2^5 = 0.0625; it needs at least 6 seeds" in err


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
                "role",
                "slo_verdict",
                "loss_verdict",
                "tokens_policy",
                "tokens_control",
                "tokens_ratio",
            } <= set(row)
    for regime, plan in res["power"].items():
        assert plan["seeds_used"] == res["seeds_by_regime"][regime] == 10
        assert {"pilot_effect", "pilot_sd", "n_required", "sufficient", "formula"} <= set(plan)


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
    with pytest.warns(S.DesignWarning) as caught:
        v = run_protocol(cfg)["verdicts"]
    said = [str(w.message) for w in caught]
    assert any(
        "primary" in m and "3 paired seeds: the smallest exact p is 2/2^3" in m for m in said
    )
    assert (v["segments"] == 3).all() and (v["segment_s"] == 2939.0).all()
    assert not v["seeds_overlap"].any()
    assert set(v["vs_matched_random"]) <= {"beats", "ties", "loses"}
    over = cfg.model_copy(update={"seeds": 4, "allow_overlap": True, "segment_horizon": False})
    over = over.model_copy(update={"fleet": FleetConfig(windows=1200)})
    with pytest.warns(S.DesignWarning):
        v = run_protocol(over)["verdicts"]
    assert v["seeds_overlap"].all()
    assert all(s.endswith("(overlapping seeds)") for s in v["vs_matched_random"])
