"""The live experiment's pieces without servers or learners: segments, controllers, matched
schedules, the analysis of run records and the simulated twin, CLI bad input."""

import types

import numpy as np
import pandas as pd
import pytest

from trainfabric.cli import main
from trainfabric.diloco import live as L
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
    assert ctl.decide(_progress(10)) is True
    assert ctl.decide(_progress(60)) is True  # forced at max_h whatever the pressure
    assert ctl.updated == 2 and ctl.log[0]["window"] == 2
    # serve_now = window 1's arrivals (0); the EWMA still remembers window 0's burst
    assert ctl.log[0]["serve_now"] == 0.0 and ctl.log[0]["serve_forecast"] > 0.0


def test_controller_falls_back_to_fixed_h_without_telemetry():
    cfg = L.LiveConfig(H=30)
    sig = L.Signals(lambda: _reading(None, True, "unknown"))
    ctl = L.LiveController(L.make_policy("wa_forecast"), sig, np.zeros(100, int), cfg, seed=0)
    ctl.t0 = L.time.time() - 1.5
    assert ctl.decide(_progress(29)) is False and ctl.decide(_progress(30)) is True
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
    assert ctl.decide(_progress(1)) is True and ctl.decide(_progress(1)) is True
    assert ctl.decide(_progress(1)) is False


def test_matched_schedule_has_the_reference_budget():
    cfg = L.LiveConfig(duration_s=120.0, min_h=20, max_h=100)
    ref = L._SimRef(steps_per_s=10.0, mean_sync_s=3.2)
    for budget in (0, 3, 8):
        s = L.matched_controller_schedule(budget, ref, cfg, seed=1)
        assert s.sum() == budget and s.size == 120
        gaps = np.diff(np.r_[-1, np.flatnonzero(s)])
        assert np.all(gaps >= 2 + 4)  # 20 steps at 10/s = 2 windows, plus the 4-window sync
    # a budget the guards cannot hold falls back to "only the sync apart"
    assert L.matched_controller_schedule(25, ref, cfg, seed=1).sum() == 25


def _record(policy, seed, slo, syncs, frac, losses):
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
    tokens = np.linspace(1e4, 1e5, len(losses))
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
