"""The live experiment's pieces without servers or learners: segments, controllers, matched
schedules, the analysis of run records and the simulated twin, CLI bad input."""

import types

import numpy as np
import pandas as pd
import pytest

from trainfabric.cli import main
from trainfabric.diloco import live as L
from trainfabric.diloco import stats as S
from trainfabric.errors import ConfigError


def test_segments_are_disjoint_and_start_at_zero():
    cfg = L.LiveConfig(duration_s=60.0, rate_scale=1.0)
    a, b = L.segment(cfg, 3), L.segment(cfg, 4)
    assert a.n and b.n and a.arrival_s[0] == 0.0 and b.arrival_s[0] == 0.0
    assert a.arrival_s.max() < 60.0 and b.arrival_s.max() < 60.0
    # the same requests the simulator's regime replays (shifted to the first arrival)
    raw = L.Regime.requests(L.live_regime(cfg), 60.0, 3)
    assert np.allclose(a.arrival_s, raw.arrival_s - raw.arrival_s[0])
    assert np.array_equal(a.prompt_tokens, raw.prompt_tokens)


def test_too_many_seeds_name_the_field():
    with pytest.raises(ConfigError, match="seeds"):
        L.check_config(L.LiveConfig(duration_s=600.0, seeds=10, seed0=0, rate_scale=1.0))
    L.check_config(L.LiveConfig())  # the defaults run
    assert all(L.segment(L.LiveConfig(), s).n > 0 for s in range(22, 32))  # no empty segment
    with pytest.raises(ConfigError, match="policy"):
        L.check_config(L.LiveConfig(policies=["wa_calibrated"]))


def test_live_policy_scaling():
    cfg = L.LiveConfig(H=40, min_h=10, max_h=80)
    assert L.live_policy("fixed_h", cfg, 1024.0).H == 40
    wa = L.live_policy("wa_forecast", cfg, 1024.0)
    assert (wa.min_h, wa.max_h, wa.tokens_norm, wa.signal) == (10, 80, 40 * 1024.0, "forecast")


def _progress(h, loss_delta=0.0, wall_s=0.0, link=None, link_time=0.0, ckpt=0.0):
    return types.SimpleNamespace(
        h=h, tokens_since_sync=h * 1024, loss_delta=loss_delta, since_sync_s=1.0,
        wall_s=wall_s, link_bytes=link, link_time=link_time, link_rate_bps=8e6, checkpoint_s=ckpt,
    )  # fmt: skip


def test_learner_signals_by_hand():
    a = _progress(1, wall_s=10.0, link=((0, 0), (0, 0)), link_time=100.0, ckpt=1.0)
    b = _progress(2, wall_s=12.0, link=((1e6, 2e5), (5e5, 1.5e6)), link_time=102.0, ckpt=1.5)
    net, ckpt = L.learner_signals(a, b)
    assert net == pytest.approx(1.5e6 * 8 / (2 * 8e6))  # busiest: learner 1 receiving
    assert ckpt == pytest.approx(0.25)
    assert L.learner_signals(None, b) == (0.0, 0.0)
    assert L.learner_signals(a, _progress(2, wall_s=12.0, link_time=102.0))[0] == 0.0


def _reading(inference, fallback=False, health="ok"):
    return types.SimpleNamespace(inference=inference, fallback=fallback, health=health)


def test_controller_asks_the_policy_with_live_signals():
    cfg = L.LiveConfig(min_h=5, max_h=50)
    arrivals = np.array([10, 0, 0, 0] + [0] * 200)
    reading = {"r": _reading(0.9)}
    sig = L.Signals(lambda: reading["r"])
    ctl = L.LiveController(L.make_policy("pressure_gate", min_h=5, max_h=50), sig, arrivals,
                           cfg, seed=0)  # fmt: skip
    assert ctl.decide(_progress(10)) is False  # before t0: never
    ctl.t0 = L.time.time() - 2.5  # window 2
    assert ctl.decide(_progress(10)) is False  # inference 0.9 > 0.6: defer
    reading["r"] = _reading(0.1)
    assert ctl.decide(_progress(10)) is False  # window 2 is decided: the policy is not asked
    ctl.t0 -= 1.0  # window 3
    assert ctl.decide(_progress(10)) is True
    ctl.t0 -= 1.0
    assert ctl.decide(_progress(60)) is True  # forced at max_h whatever the pressure
    assert ctl.updated == 4 and [row["window"] for row in ctl.log] == [2, 3, 4]
    # serve_now = window 1's arrivals (0); the EWMA still remembers window 0's burst
    assert ctl.log[0]["serve_now"] == 0.0 and ctl.log[0]["serve_forecast"] > 0.0


def test_controller_measures_the_learners_signals_between_decisions():
    cfg = L.LiveConfig(min_h=5, max_h=50)
    seen = []
    policy = L.make_policy("pressure_gate", min_h=5, max_h=50)
    decide = policy.decide
    policy.decide = lambda obs: seen.append(float(obs.network[0])) or decide(obs)
    sig = L.Signals(lambda: _reading(0.9))
    ctl = L.LiveController(policy, sig, np.zeros(100, int), cfg, seed=0)
    ctl.t0 = L.time.time() - 0.5
    zero = ((0, 0), (0, 0))
    ctl.decide(_progress(6, wall_s=1.0, link=zero, link_time=100.0))
    for k in range(1, 5):  # window 0 again: not decided, not remembered
        ctl.decide(_progress(6, wall_s=1.0, link=((0, 0), (k * 1e6, 0)), link_time=100.0 + k))
    ctl.t0 -= 1.0
    ctl.decide(_progress(6, wall_s=2.0, link=((2e6, 0), (0, 0)), link_time=102.0))
    assert seen == [0.0, pytest.approx(2e6 * 8 / (2 * 8e6))]  # over the 2 s since window 0's


def test_controller_falls_back_to_fixed_h_without_telemetry():
    cfg = L.LiveConfig(H=30)
    sig = L.Signals(lambda: _reading(None, True, "unknown"))
    ctl = L.LiveController(L.make_policy("wa_forecast"), sig, np.zeros(100, int), cfg, seed=0)
    ctl.t0 = L.time.time() - 1.5
    assert ctl.decide(_progress(29)) is False
    ctl.t0 -= 1.0
    assert ctl.decide(_progress(30)) is True
    assert all(row["fallback"] for row in ctl.log)


def test_schedule_controller_takes_missed_windows_late():
    cfg = L.LiveConfig()
    sched = np.zeros(100, bool)
    sched[[3, 5]] = True
    sig = L.Signals(lambda: _reading(0.0))
    ctl = L.LiveController(None, sig, np.zeros(100, int), cfg, seed=0, schedule=sched)
    ctl.t0 = L.time.time() - 2.5
    assert ctl.decide(_progress(1)) is False
    ctl.t0 -= 4.0  # window 6: both scheduled windows have passed (a sync was running)
    assert ctl.decide(_progress(1)) is True
    assert ctl.decide(_progress(1)) is False  # one decision per window
    ctl.t0 -= 1.0
    assert ctl.decide(_progress(1)) is True
    ctl.t0 -= 1.0
    assert ctl.decide(_progress(1)) is False


def test_matched_schedule_has_the_reference_budget():
    cfg = L.LiveConfig(duration_s=120.0, min_h=20, max_h=100)
    ref = L._SimRef(steps_per_s=10.0, mean_sync_s=3.2)
    for budget in (0, 3, 8):
        s = L.matched_controller_schedule(budget, ref, cfg, seed=1)
        assert s.sum() == budget and s.size == 120
        gaps = np.diff(np.r_[-1, np.flatnonzero(s)])
        assert np.all(gaps >= 2 + 4)  # 20 steps at 10/s = 2 windows, plus the 4-window sync
    # a budget the guards cannot hold: the largest minimum gap that holds it, floor(120 / 25)
    for seed in range(20):
        s = L.matched_controller_schedule(25, ref, cfg, seed=seed)
        assert s.sum() == 25 and np.all(np.diff(np.r_[-1, np.flatnonzero(s)]) >= 4)
    # 8 syncs in 60 windows at 10.5 steps/s, 2.23 s syncs: one rounding, ceil(4.76 + 2.23) = 7,
    # holds them within the guards (two roundings, 5 + 3 = 8, could not: 8 x 8 > 60)
    cfg60 = L.LiveConfig(duration_s=60.0, min_h=50, max_h=250)
    for seed in range(20):
        s = L.matched_controller_schedule(8, L._SimRef(10.5, 2.23), cfg60, seed=seed)
        assert s.sum() == 8 and np.all(np.diff(np.r_[-1, np.flatnonzero(s)]) >= 7)


def _record(policy, seed, slo, syncs, frac, losses, tokens_end=1e5):
    T = 100.0
    n = 200
    rng = np.random.default_rng(seed)
    arrival = np.sort(rng.uniform(0, T, n))
    req = pd.DataFrame({"arrival_s": arrival, "finish_s": arrival + 0.5, "ttft_s": 0.1,
                        "tpot_s": 0.01, "violated": rng.uniform(size=n) < slo,
                        "ttft_violated": False})  # fmt: skip
    starts = np.linspace(10, 90, syncs) if syncs else np.zeros(0)
    dur = frac * T / max(syncs, 1)
    sy = pd.DataFrame({"start_s": starts, "end_s": starts + dur, "steps": 20,
                       "bytes": 1.0})  # fmt: skip
    tokens = np.linspace(1e4, tokens_end, len(losses))
    ev = pd.DataFrame({"wall_s": np.linspace(10, 100, len(losses)), "tokens": tokens,
                       "syncs": np.arange(len(losses)), "eval_loss": losses})  # fmt: skip
    st = pd.DataFrame({"wall_s": [0.0, 100.0], "step": [0, 500], "tokens": [0.0, 1e5],
                       "loss": [5.0, 2.0]})  # fmt: skip
    return L.RunRecord(f"s{seed}-{policy}", policy, seed, req, sy, ev, st, pd.DataFrame(), T,
                       float(losses[-1]))  # fmt: skip


def test_analyse_pairs_policy_with_its_matched_random():
    cfg = L.LiveConfig(policies=["wa_forecast"], seeds=4)
    recs = []
    for s in range(4):
        recs.append(_record("wa_forecast", s, 0.10, 4, 0.12, [3.0, 2.5, 2.2]))
        recs.append(_record("matched_random[wa_forecast]", s, 0.20, 4, 0.12, [3.0, 2.6, 2.3]))
        recs.append(_record("no_sync", s, 0.05, 0, 0.0, [3.0, 2.9, 2.8]))
    res = L.analyse(cfg, recs)
    comp = res["comparisons"]["wa_forecast"]
    runs = res["runs"]
    pol = runs[runs.policy == "wa_forecast"].set_index("seed")["slo_violation_rate"]
    ctl = runs[runs.policy == "matched_random[wa_forecast]"].set_index("seed")["slo_violation_rate"]
    assert comp["slo"]["mean"] == pytest.approx((pol - ctl).mean())
    assert comp["loss_equal_tokens"]["mean"] == pytest.approx(-0.1)
    assert comp["loss_equal_wall"]["mean"] == pytest.approx(-0.1)
    assert comp["slo"]["min_attainable_p"] == pytest.approx(2 / 16)
    assert comp["seeds_with_equal_sync_count"] == 4
    assert runs[runs.policy == "wa_forecast"]["sync_time_fraction"].iloc[0] == pytest.approx(0.12)


def test_analyse_judges_by_the_design_with_tokens_beside_every_loss():
    """The policy's eval curve reaches 8e4 tokens by the time the control's reaches 1e5 (same
    wall times). Equal tokens: both read at 8e4 (ratio 1); equal wall-clock (100 s): 8e4 vs
    1e5 (0.8); final: 8e4 vs 1e5. The SLO is the primary (sign-flip p alone); the three
    losses are one Holm family; 4 seeds can find nothing (2/16), and the verdicts say so."""
    cfg = L.LiveConfig(policies=["wa_forecast"], seeds=4)
    recs = []
    for s in range(4):
        recs.append(_record("wa_forecast", s, 0.10, 4, 0.12, [3.0, 2.5, 2.2], tokens_end=8e4))
        recs.append(_record("matched_random[wa_forecast]", s, 0.20, 4, 0.12, [3.0, 2.6, 2.3]))
    comp = L.analyse(cfg, recs)["comparisons"]["wa_forecast"]
    tok, wall, final = comp["loss_equal_tokens"], comp["loss_equal_wall"], comp["final_loss"]
    assert (tok["tokens_policy"], tok["tokens_control"], tok["tokens_ratio"]) == (8e4, 8e4, 1.0)
    assert tok["at"] == 8e4 and tok["at_unit"] == "tokens"
    assert wall["tokens_policy"] == pytest.approx(8e4) and wall["tokens_control"] == 1e5
    assert wall["tokens_ratio"] == pytest.approx(0.8) and wall["at"] == 100.0
    assert final["tokens_ratio"] == pytest.approx(0.8)
    assert comp["tokens_trained"]["tokens_ratio"] == pytest.approx(1.0)  # steps tables equal
    assert comp["slo"]["role"] == "primary" and comp["slo"]["family_size"] == 1
    assert comp["slo"]["p"] == comp["slo"]["p_adjusted"] == comp["slo"]["p_sign_flip"]
    raw = [tok["p"], wall["p"], final["p"]]
    assert [tok["p_adjusted"], wall["p_adjusted"], final["p_adjusted"]] == pytest.approx(
        S.holm(raw)
    )
    assert {tok["family_size"], wall["family_size"], final["family_size"]} == {3}
    for block in (comp["slo"], tok, wall, final):
        assert block["verdict"] == "no difference detected"  # p >= 2/16 > 0.05
    # at 8e4 tokens: the policy's last eval (2.2) vs the control's curve between 5.5e4 (2.6)
    # and 1e5 (2.3)
    at_8e4 = 2.2 - (2.6 - 0.3 * 2.5e4 / 4.5e4)
    assert comp["per_seed"]["loss_equal_tokens"] == pytest.approx([at_8e4] * 4)
    assert tok["mean"] == pytest.approx(at_8e4)
    summary = L.power_statement(cfg, comp["slo_effect_per_seed"])
    assert summary["source"].startswith("post hoc") and summary["seeds_used"] == 4
    (primary, family) = cfg.design().check(cfg.seeds)
    assert "2/2^4 = 0.125" in primary and "Holm over 3" in family


def test_headline_and_table_state_the_design_power_and_tokens(tmp_path, capsys):
    """The summary names the design (and what 4 seeds cannot find) and the power calculation
    (from a pilot when given); the CLI's comparison table shows every verdict with the
    tokens beside each loss; a pilot file without SLO differences exits 2 naming --pilot."""
    from rich.console import Console

    from trainfabric.diloco.live_cli import comparison_table

    pilot = [0.05, 0.02, 0.04]
    cfg = L.LiveConfig(policies=["wa_forecast"], seeds=4, pilot_effects=pilot,
                       pilot_source="a pilot", no_sync=False)  # fmt: skip
    recs = []
    for s in range(4):
        recs.append(_record("wa_forecast", s, 0.10, 4, 0.12, [3.0, 2.5, 2.2], tokens_end=8e4))
        recs.append(_record("matched_random[wa_forecast]", s, 0.20, 4, 0.12, [3.0, 2.6, 2.3]))
    res = L.analyse(cfg, recs) | {"server": "emulator", "wall_s": 1.0}
    head = L.headline(cfg, res, recs, {}, {})
    assert head["design"]["primary"] == "wa_forecast vs matched random: SLO violation rate"
    assert len(head["design"]["secondary"]) == 3 and len(head["design"]["warnings"]) == 2
    plan = head["power"]
    assert plan["source"] == "a pilot" and plan["pilot_effect"] == pytest.approx(np.mean(pilot))
    assert plan["n_required"] == S.seeds_for_power(np.mean(pilot), np.std(pilot, ddof=1))
    assert plan["seeds_used"] == 4
    console = Console(width=200, record=True)
    console.print(comparison_table(res["comparisons"]))
    text = console.export_text()
    assert text.count("no difference detected") == 4
    assert "80,000 / 100,000 (0.800)" in text and "80,000 / 80,000 (1.000)" in text
    bad = tmp_path / "pilot.json"
    bad.write_text('{"policy": "wa_forecast", "comparisons": {}}')
    for path in (bad, tmp_path / "missing.json"):
        with pytest.raises(SystemExit) as exc:
            main(["diloco", "live", "--pilot", str(path)])
        err = capsys.readouterr().err
        assert exc.value.code == 2 and "--pilot" in err, err


FULL = {  # the stored full live result's statistics (benchmarks/results/diloco_live_full.json)
    "benchmark": "diloco_live",
    "policy": "wa_forecast",
    "seeds": 10,
    "first_seed": 22,
    "comparison": {
        "slo": {"mean": 0.00608, "p_holm": 0.6953125, "p_wilcoxon": 0.6953125,
                "p_sign_flip": 0.66796875},
        "loss_equal_tokens": {"mean": -0.2339, "p_wilcoxon": 0.02734375,
                              "p_sign_flip": 0.03515625},
        "loss_equal_wall": {"mean": -0.1131, "p_wilcoxon": 0.375, "p_sign_flip": 0.193359375},
        "final_loss": {"mean": -0.1569, "p_wilcoxon": 0.083984375, "p_sign_flip": 0.06640625},
        "slo_effect_per_seed": [0.00909, 0.03070, -0.01767, 0.03448, 0.03846, -0.0375,
                                0.03731, -0.03210, 0.06944, -0.07143],
    },
    "policies": {
        "wa_forecast": {"tokens": 591564.8},
        "matched_random[wa_forecast]": {"tokens": 725913.6},
    },
}  # fmt: skip


def test_reanalyse_the_stored_live_result():
    """ "Loss: wa_forecast is better" rested on Wilcoxon p = 0.027 at equal tokens, one of
    three loss comparisons, uncorrected. By the design: sign-flip p 0.035, Holm x 3 = 0.105,
    no difference detected; the tokens beside it: 591,565 vs 725,914 (0.815, 19% fewer)."""
    out = L.reanalyse(FULL)
    tok = out["comparisons"]["loss_equal_tokens[wa_forecast]"]
    assert tok["before"] == "better" and tok["verdict"] == "no difference detected"
    assert tok["p_adjusted"] == pytest.approx(3 * 0.03515625)
    assert tok["tokens_ratio"] == pytest.approx(591564.8 / 725913.6)
    assert out["changed"] == ["loss_equal_tokens[wa_forecast]"]
    slo = out["comparisons"]["slo_violation_rate[wa_forecast]"]
    assert slo["p_source"].startswith("recomputed") and slo["role"] == "primary"
    assert slo["p"] == pytest.approx(S.sign_flip_test(FULL["comparison"]["slo_effect_per_seed"]))
    pilot = {"benchmark": "diloco_live", "policy": "wa_forecast", "first_seed": 10,
             "comparison": {"slo_effect_per_seed": [0.11818181818181822, -0.064]}}  # fmt: skip
    plan = L.reanalyse(FULL, pilot)["power"]
    assert plan["n_required"] == 180 and plan["seeds_used"] == 10 and not plan["sufficient"]


def test_twin_runs_the_simulator_on_the_live_segments():
    cfg = L.LiveConfig(policies=["fixed_h"], duration_s=60.0, seeds=2, seed0=3, sim_draws=3,
                       rate_scale=1.0)  # fmt: skip
    cal = {
        "fleet": {
            "serving": {
                "replicas": 1,
                "prefill_s_per_token": 5e-5,
                "decode_base_s": 0.01,
                "decode_per_seq_s": 0.001,
                "interference": 0.5,
            },  # fmt: skip
            "progress": {"steps_per_s": 5.0, "tokens_per_step": 1024.0, "drift_steps": 200.0},
        },
        "sync_duration_samples_s": [3.0, 3.0],
    }
    tw = L.simulate_seeds(cfg, cal, [3, 4])
    # fixed_h H = 50 at 5 steps/s: 10 s of training then a 3 s sync: 60 s hold 4 syncs
    assert tw["fixed_h"]["syncs"] == [4, 4]
    assert tw["fixed_h"]["sync_time_fraction"] == pytest.approx([12 / 60] * 2)
    eff = np.array(tw["fixed_h"]["effect_per_seed"])
    slo = np.array(tw["fixed_h"]["slo_violation_rate"])
    assert np.allclose(eff, slo - np.array(tw["fixed_h"]["matched_random_slo"]))


@pytest.mark.parametrize(
    "args, field",
    [
        (["--policy", "nope"], "policy"),
        (["--policy", "wa_calibrated"], "policy"),
        (["--server", "sglang"], "--server"),
        (["--seeds", "500"], "--seeds"),
        (["--rate-scale", "nan"], "--rate-scale"),
        (["--duration-s", "5"], "--duration-s"),
    ],
)
def test_live_bad_input_exits_2_naming_the_field(args, field, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["diloco", "live", *args])
    err = capsys.readouterr().err
    assert exc.value.code == 2, err
    assert field in err and "Traceback" not in err and len(err.strip().splitlines()) <= 3


def test_calibrate_bad_input_exits_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["diloco", "calibrate", str(tmp_path)])
    assert exc.value.code == 2 and "RUN_DIRS" in capsys.readouterr().err
