"""The protocol end to end on a small configuration, its design (primary alone, one Holm
family, tokens beside the loss, the power statement), the transfer check, and the CLI."""

import itertools

import numpy as np
import pandas as pd
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
    assert small["windows_simulated"] == runs["windows"].sum() == len(runs) * SMALL.fleet.windows
    assert small["windows_per_s"] == small["windows_simulated"] / small["wall_s"]


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


def _sign_flip_p(d) -> float:
    """Two-sided exact sign-flip p of the mean, by enumerating all 2^n sign vectors."""
    d = np.asarray(d, float)
    observed = abs(d.sum()) - 1e-12 * max(1.0, np.abs(d).sum())
    sums = [abs(np.dot(signs, d)) for signs in itertools.product((1.0, -1.0), repeat=d.size)]
    return float(np.mean(np.asarray(sums) >= observed))


def _holm(p) -> np.ndarray:
    """Holm's step-down adjustment: sorted p_(i) x (m - i), running maximum, capped at 1."""
    p = np.asarray(p, float)
    order = np.argsort(p, kind="stable")
    stepped = np.maximum.accumulate(p[order] * (p.size - np.arange(p.size)))
    out = np.empty_like(p)
    out[order] = np.minimum(stepped, 1.0)
    return out


def _word(p: float, effect: float, alpha: float) -> str:
    if p < alpha and effect != 0:
        return S.BETTER if effect < 0 else S.WORSE
    return S.NO_DIFFERENCE


def check_protocol(res: dict, run_dir) -> None:
    """``diloco protocol --json`` against its own run tables, recomputed here: matched random
    has exactly the policy's sync count on every seed over the same horizon; each row's
    figures are the means of the per-seed runs; the p-values are the exact sign-flip test
    of the paired differences (enumerated here), scipy's sign and Wilcoxon tests, and Holm
    over the secondary family; every verdict word follows from its p-value, alpha and the
    sign of the effect; the design's warning appears exactly when the seeds cannot reach
    the family's first Holm step."""
    from pathlib import Path

    from scipy import stats as sps

    run_dir = Path(run_dir)
    config = loads((run_dir / "manifest.json").read_text())["config"]
    alpha, margin = config["alpha"], config["loss_margin"]
    runs = pd.read_parquet(run_dir / "diloco_runs.parquet")
    verdicts = pd.read_parquet(run_dir / "diloco_verdicts.parquet")
    assert set(res["regimes"]) == set(config["regimes"])
    for regime, rows in res["regimes"].items():
        n = res["seeds_by_regime"][regime]
        r = runs[runs["regime"] == regime]
        vt = verdicts[verdicts["regime"] == regime].set_index("policy")
        assert (r["windows"] == res["windows"]).all()
        floor = r[r["policy"] == "no_sync"]
        assert sorted(floor["seed"]) == list(range(n)) and (floor["syncs"] == 0).all()
        assert set(rows) == set(config["policies"])
        for policy, row in rows.items():
            ours = r[r["policy"] == policy].set_index("seed").sort_index()
            ctl = r[r["policy"] == f"matched_random[{policy}]"]
            assert list(ours.index) == list(range(n))
            assert (ctl.groupby("seed").size() == config["envelope_draws"]).all()
            assert (ctl["syncs"].to_numpy() == ours.loc[ctl["seed"], "syncs"].to_numpy()).all()
            mean = ctl.groupby("seed")[
                ["slo_violation_rate", "final_loss", "tokens_trained"]
            ].mean()
            # the paired differences exactly as defined (numpy's mean of each seed's draws,
            # in run order): pandas' group mean rounds differently, and the sign test drops
            # the differences that are exactly zero
            draws = config["envelope_draws"]
            assert (ctl["seed"].to_numpy().reshape(n, draws) == np.arange(n)[:, None]).all()
            env = {c: ctl[c].to_numpy().reshape(n, draws).mean(axis=1) for c in mean}
            d = 100 * (ours["slo_violation_rate"].to_numpy() - env["slo_violation_rate"])
            dl = ours["final_loss"].to_numpy() - env["final_loss"]
            assert row["slo_violation_rate"] == pytest.approx(ours["slo_violation_rate"].mean())
            assert row["syncs"] == pytest.approx(ours["syncs"].mean())
            assert row["matched_random_slo"] == pytest.approx(ctl["slo_violation_rate"].mean())
            assert row["no_sync_slo"] == pytest.approx(floor["slo_violation_rate"].mean())
            assert row["effect_size"] == pytest.approx(d.mean(), rel=1e-9, abs=1e-12)
            assert row["loss_diff"] == pytest.approx(dl.mean(), rel=1e-9, abs=1e-15)
            assert row["tokens_policy"] == pytest.approx(ours["tokens_trained"].mean())
            assert row["tokens_control"] == pytest.approx(mean["tokens_trained"].mean())
            for key in ("p_slo", "p_value", "p_loss", "p_loss_adjusted"):
                assert 0 <= row[key] <= 1, (policy, key)
            assert row["p_slo"] == pytest.approx(_sign_flip_p(d), abs=1e-12)
            assert row["p_loss"] == pytest.approx(_sign_flip_p(dl), abs=1e-12)
            nz = d[d != 0]
            sign = sps.binomtest(int((nz > 0).sum()), nz.size, 0.5).pvalue if nz.size else 1.0
            assert vt.loc[policy, "p_sign"] == pytest.approx(sign, rel=1e-12)
            if nz.size:
                wil = sps.wilcoxon(d, zero_method="wilcox").pvalue
                assert vt.loc[policy, "p_wilcoxon"] == pytest.approx(wil, rel=1e-12)
            assert vt.loc[policy, "seeds_better"] == (d < 0).sum()
        lead = [p for p, row in rows.items() if row["role"] == "primary"]
        assert len(lead) == 1
        (lead,) = lead
        others = [p for p in rows if p != lead]
        family = [(lead, "p_loss")] + [(p, "p_slo") for p in others]
        family += [(p, "p_loss") for p in others]
        adjusted = _holm([rows[p][k] for p, k in family])
        for (p, k), adj in zip(family, adjusted, strict=True):
            key = "p_value" if k == "p_slo" else "p_loss_adjusted"
            assert rows[p][key] == pytest.approx(adj, abs=1e-12), (p, k)
            assert rows[p]["family_size"] == (1 if p == lead else len(family))
        assert rows[lead]["p_value"] == rows[lead]["p_slo"] and rows[lead]["family_size"] == 1
        for policy, row in rows.items():
            assert row["slo_verdict"] == _word(row["p_value"], row["effect_size"], alpha)
            assert row["loss_verdict"] == _word(row["p_loss_adjusted"], row["loss_diff"], alpha)
            lo, hi = vt.loc[policy, "loss_diff_ci_low"], vt.loc[policy, "loss_diff_ci_high"]
            loss_worse = row["loss_verdict"] == S.WORSE and lo > margin
            if row["slo_verdict"] == S.WORSE or loss_worse:
                want = "loses"
            elif row["slo_verdict"] == S.BETTER and row["loss_verdict"] != S.WORSE and hi <= margin:
                want = "beats"
            else:
                want = "ties"
            assert row["vs_matched_random"] == want, policy
        floor_p = 2 / 2**n
        said = any(w.startswith("no secondary") for w in res["warnings"][regime])
        assert said == (floor_p >= alpha / len(family))
        plan = res["power"][regime]
        assert plan["seeds_used"] == n
        assert plan["pilot_effect"] == pytest.approx(rows[lead]["effect_size"])
        if plan["n_required"] is not None:
            assert plan["sufficient"] == (plan["n_required"] <= n)


@pytest.mark.slow  # 2 s or more in the default run (make test-all runs it)
def test_cli_protocol_statistics_are_recomputed(cli, tmp_path, monkeypatch):
    """``diloco protocol --quick --seeds 6 --windows 1400 --json`` on the sync-heavy regime
    alone (every policy; about 4 s): 6 seeds are the fewest the design accepts, 1,400
    windows about the fewest that regime allows. Here wa_forecast's SLO is significantly
    worse (p = 2/64), so a claimed verdict is checked as well as a tie."""
    from trainfabric.diloco import protocol

    quick = protocol.quick_config
    monkeypatch.setattr(
        protocol, "quick_config", lambda: quick().model_copy(update={"regimes": ["sync_heavy"]})
    )
    argv = ["--quick", "--seeds", "6", "--windows", "1400", "--json", "--out", str(tmp_path)]
    code, out, err = cli("diloco", "protocol", *argv)
    assert code == 0, err
    res = loads(out)
    assert res["seeds_by_regime"] == {"sync_heavy": 6} and res["windows"] == 1400
    check_protocol(res, tmp_path)
    verdicts = {row["slo_verdict"] for row in res["regimes"]["sync_heavy"].values()}
    assert verdicts == {S.WORSE, S.NO_DIFFERENCE}


@pytest.mark.slow
def test_cli_protocol_quick_json(cli, tmp_path):
    code, out, _ = cli("diloco", "protocol", "--quick", "--json", "--out", str(tmp_path / "p"))
    assert code == 0
    res = loads(out)
    check_protocol(res, tmp_path / "p")
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
