"""The live protocol on the testbed and with Streaming DiLoCo, without vLLM or learners: the
per-fragment matched random (exact counts per fragment, the gaps that keep a fragment due),
the fragment gate (schedule, policy, forced after ``max_h − H``, fallback, before ``t0``),
fragment counts, the held-out twin (each seed's calibration never sees it), the config and
CLI refusals; and, with root, the sidecar scraping a server inside a namespace."""

import os
import types

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainfabric.cli import main
from trainfabric.diloco import live as L
from trainfabric.diloco import live_fragments as F
from trainfabric.diloco import live_twin as T
from trainfabric.diloco.train.controller import FragmentDue
from trainfabric.errors import ConfigError


def _reading(inference, fallback=False, health="ok"):
    return types.SimpleNamespace(inference=inference, fallback=fallback, health=health)


def _ref(last_step: int, horizon_s: float = 60.0):
    """A policy run that took ``last_step`` inner steps within the replay (and more after)."""
    wall = np.linspace(0.0, horizon_s + 5.0, 200)
    step = np.round(wall / horizon_s * last_step).astype(int)
    return types.SimpleNamespace(steps=pd.DataFrame({"wall_s": wall, "step": step}))


@settings(max_examples=60, deadline=None)
@given(counts=st.lists(st.integers(0, 8), min_size=1, max_size=4), last=st.integers(200, 1500),
       seed=st.integers(0, 99))  # fmt: skip
def test_fragment_schedules_pick_each_fragments_count_of_its_periods(counts, last, seed):
    cfg = L.testbed_config(fragments=len(counts))  # H 125
    sched = F.fragment_schedules(counts, _ref(last), cfg, seed)
    assert [len(q) for q in sched] == counts  # exact, per fragment
    for p, q in enumerate(sched):
        o = p * 125 // len(counts)
        first, top = (1 if o == 0 else 0), (last - o) // 125
        periods = [j for j, _ in q]
        assert periods == sorted(periods) and all(first <= j <= max(top, first) for j in periods)
        if counts[p] <= top - first + 1:  # enough periods: each chosen once
            assert len(set(periods)) == len(periods)
        for j, d in q:  # a deferral within the period and within the steps the run had
            assert 0 <= d < 125 and (d == 0 or o + j * 125 + d < last)
        n = top - first + 1
        if counts[p] and counts[p] <= n <= 2 * (counts[p] + 1):  # max_h 250 = 2 periods
            gaps = np.diff([first - 1, *periods])
            assert np.all((gaps >= 1) & (gaps <= 2))  # never two periods skipped in a row
            assert top - periods[-1] <= 2  # nor at the end


def test_fragment_counts_skip_the_closing_sync_and_the_outside():
    sy = pd.DataFrame({"fragment": [0, 1, 1, 2, 0, 3],
                       "start_s": [1.0, 2.0, 30.0, -1.0, 59.0, 61.0],
                       "final": [False, False, False, False, True, False]})  # fmt: skip
    assert F.fragment_counts(sy, 4, 60.0) == [1, 2, 0, 0]


def _gate(cfg, policy=None, schedules=None, reading=None):
    box = {"r": reading or _reading(0.0)}
    g = F.FragmentController(policy, lambda: box["r"], np.zeros(60, int), cfg, seed=0, net=None,
                             tokens_per_step=1024.0, schedules=schedules)  # fmt: skip
    return g, box


def test_fragment_gate_follows_its_periods_and_deferrals():
    cfg = L.testbed_config(fragments=2)  # H 125: fragment 0 due at 125, 250, ...; 1 at 62, 187
    g, _ = _gate(cfg, schedules=[[(1, 10), (3, 0)], [(0, 5)]])
    assert g.open(FragmentDue(1, 62, 62, 0)) is False and g.started.is_set()  # before t0
    g.t0 = L.time.time() - 3.5
    assert g.open(FragmentDue(1, 63, 63, 1)) is False  # period 0, deferral 5 not reached
    assert g.open(FragmentDue(1, 67, 67, 5)) is True
    assert g.open(FragmentDue(1, 187, 120, 0)) is False  # fragment 1's budget is spent
    assert g.open(FragmentDue(0, 125, 125, 0)) is False  # period 1 from 125, deferral 10
    assert g.open(FragmentDue(0, 135, 135, 10)) is True
    assert g.open(FragmentDue(0, 250, 115, 0)) is False  # period 2: not chosen
    assert g.open(FragmentDue(0, 400, 265, 150)) is True  # period 3 (from 375), deferral 0
    late, _ = _gate(cfg, schedules=[[(1, 100)], []])
    late.t0 = L.time.time() - 1.0
    assert late.open(FragmentDue(0, 260, 260, 10)) is True  # period 1 missed: taken now
    g.t0 -= 100.0  # past the last window: nothing starts
    assert g.open(FragmentDue(1, 300, 250, 0)) is False


def test_fragment_gate_waits_for_min_h_under_matched_random():
    cfg = L.testbed_config(fragments=1)  # min_h 50
    g, _ = _gate(cfg, schedules=[[(1, 10), (2, 0)]])
    g.t0 = L.time.time() - 3.5
    assert g.open(FragmentDue(0, 135, 135, 10)) is True
    assert g.open(FragmentDue(0, 250, 115, 0)) is True
    g2, _ = _gate(cfg, schedules=[[(2, 0)]])
    g2.t0 = L.time.time() - 3.5
    assert g2.open(FragmentDue(0, 250, 20, 0)) is False  # h 20 < min_h: waits
    assert g2.open(FragmentDue(0, 280, 50, 30)) is True


def _paced(cfg, schedule, elapsed_s, step_then, now_s):
    """A matched gate on fragment 0 (offset 0) ``now_s`` into the replay, whose first offer
    came ``elapsed_s`` ago at inner step ``step_then``."""
    g, _ = _gate(cfg, schedules=[schedule])
    now = L.time.time()
    g.t0, g.pace = now - now_s, (now - elapsed_s, step_then)
    return g


def test_fragment_gate_takes_a_period_early_when_the_run_would_end_before_its_choice():
    cfg = L.testbed_config(fragments=1)  # H 125, a 60 s replay, margin H/8 = 15.6 steps
    # 10.4 steps/s since step 84, 12 s left at step 500: the run ends near step 625 (609 with
    # the margin), so period 5 (from 625) is out of reach: period 4 is taken now
    assert _paced(cfg, [(5, 8)], 40.0, 84, 48.0).open(FragmentDue(0, 500, 125, 0)) is True
    # 30 s left: periods 4-6 remain for one sync; the choice stands
    assert _paced(cfg, [(5, 8)], 40.0, 84, 30.0).open(FragmentDue(0, 500, 125, 0)) is False
    # two syncs left, periods 4 and 5 reachable (ends near 729): this one is needed
    two = _paced(cfg, [(4, 60), (6, 0)], 40.0, 84, 38.0)
    assert two.open(FragmentDue(0, 500, 125, 0)) is False  # its deferral (step 560) in time
    assert two.open(FragmentDue(0, 560, 60, 60)) is True
    # the chosen deferral lies past the end: taken at once
    late = _paced(cfg, [(4, 110)], 40.0, 84, 48.0)
    assert late.open(FragmentDue(0, 500, 125, 0)) is True
    # too little pace known (under 5 windows since the first offer): no estimate, no change
    assert _paced(cfg, [(5, 8)], 4.0, 458, 48.0).open(FragmentDue(0, 500, 125, 0)) is False


def test_fragment_gate_asks_the_policy_and_forces_after_max_h_minus_h():
    cfg = L.testbed_config(fragments=4)
    policy = L.make_policy("pressure_gate", min_h=50, max_h=250)
    g, box = _gate(cfg, policy=policy, reading=_reading(0.9))
    g.t0 = L.time.time() - 2.5
    assert g.open(FragmentDue(2, 200, 125, 0)) is False  # inference 0.9 > 0.6: deferred
    assert g.open(FragmentDue(2, 324, 249, 124)) is False
    assert g.open(FragmentDue(2, 325, 250, 125)) is True  # overdue max_h - H: forced
    box["r"] = _reading(0.1)
    assert g.open(FragmentDue(3, 230, 125, 0)) is True
    box["r"] = _reading(None, True, "unknown")
    assert g.open(FragmentDue(1, 240, 125, 0)) is True  # no telemetry: the fixed schedule
    assert [r["fragment"] for r in g.log] == [2, 2, 2, 3, 1]
    assert g.log[-1]["fallback"] and not g.log[0]["fallback"]


def test_heldout_twin_never_calibrates_on_the_seed_it_predicts(tmp_path, monkeypatch):
    cfg = L.testbed_config(seeds=3, seed0=55)
    rows = [(55, 0.10, 0.20), (56, 0.0, 0.05), (57, 0.30, 0.30)]
    runs = pd.DataFrame(
        [(f"seed{s}-{p}", p, s, slo, 100) for s, a, b in rows
         for p, slo in (("wa_forecast", a), ("matched_random[wa_forecast]", b))],
        columns=["label", "policy", "seed", "slo_violation_rate", "requests"],
    )  # fmt: skip
    runs.to_parquet(tmp_path / "runs.parquet")
    seen = []

    def calibrate(dirs, link=False):
        assert link  # the testbed's requests shared the syncs' link
        seen.append(sorted(d.name for d in dirs))
        return {"fleet": {"serving": {"link_violation_p": 0.1}}}

    def simulate(cfg_, calib, seeds):
        (s,) = seeds
        return {"wa_forecast": {"slo_violation_rate": [0.12 if s == 55 else 0.0],
                                "matched_random_slo": [0.2 if s != 57 else 0.25]}}  # fmt: skip

    monkeypatch.setattr("trainfabric.diloco.calibrate.calibrate", calibrate)
    monkeypatch.setattr(L, "simulate_seeds", simulate)
    tw = T.heldout_twin(cfg, tmp_path)
    for s, dirs in zip((55, 56, 57), seen, strict=True):
        assert len(dirs) == 4 and not any(d.startswith(f"seed{s}-") for d in dirs)
    errs = [e for r in tw["per_seed"] for e in (r["error_policy_pp"], r["error_matched_random_pp"])]
    assert errs == pytest.approx([2.0, 0.0, 0.0, 15.0, -30.0, -5.0])
    assert tw["max_seed_error_pp"] == pytest.approx(30.0)
    # the SE of a live rate over 100 requests if the twin's rate is right: sqrt(.12 .88 / 100)
    # = 3.25 pp, ...; over 2 SE: 15 pp (twin 0.2: SE 4) and 30 pp (twin 0: SE 0)
    assert tw["per_seed"][0]["se_policy_pp"] == pytest.approx(100 * np.sqrt(0.12 * 0.88 / 100))
    assert (tw["errors_over_2se"], tw["errors"]) == (2, 6)
    # live effect mean(-0.1, -0.05, 0) < 0; simulated mean(-0.08, -0.2, -0.25) < 0
    assert tw["effect_sign_agrees"] is True


def test_testbed_config_and_refusals():
    cfg = L.testbed_config()
    assert (cfg.placement, cfg.H, cfg.min_h, cfg.max_h, cfg.duration_s) == (
        "testbed", 125, 50, 250, 60.0)  # fmt: skip
    with pytest.raises(ConfigError, match="train_core"):
        L.check_config(L.testbed_config(train_core=0))
    with pytest.raises(ConfigError, match="overlap"):
        L.check_config(L.testbed_config(fragments=2, overlap=125))
    with pytest.raises(ConfigError, match="fragments"):
        L.check_config(L.LiveConfig(fragments=3, H=2, min_h=1, max_h=80))
    with pytest.raises(ConfigError, match="fragments"):
        L.check_config(L.LiveConfig(fragments=5))  # the model has 4 blocks


@pytest.mark.parametrize(
    "args, field",
    [
        (["--testbed", "--shaping-mbit", "5"], "--shaping-mbit"),
        (["--fragments", "49"], "--fragments"),
        (["--fragments", "5"], "--fragments"),  # more than the model's 4 blocks
    ],
)
def test_live_testbed_bad_input_exits_2_naming_the_field(args, field, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["diloco", "live", *args])
    err = capsys.readouterr().err
    assert exc.value.code == 2, err
    assert field in err and "Traceback" not in err and len(err.strip().splitlines()) <= 3


@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
def test_sidecar_scrapes_a_server_inside_a_namespace(tmp_path):
    from functools import partial

    from trainfabric.diloco.serve.server import serve
    from trainfabric.diloco.serve.sidecar import Sidecar, SidecarConfig
    from trainfabric.diloco.train import netns
    from trainfabric.diloco.train.config import ShapingConfig

    with netns.create(2, ShapingConfig(rate_mbit=50.0)) as net:
        space = net.namespace(0)
        with serve(kind="emulator", host=net.address(0), log_path=tmp_path / "s.log",
                   prefix=netns.exec_prefix(space),
                   inside=partial(netns.call_in, space)) as srv:  # fmt: skip
            outside = Sidecar(SidecarConfig(url=srv.url, period_s=0.05, timeout_s=0.5))
            inside = Sidecar(SidecarConfig(url=srv.url, period_s=0.05),
                             enter=partial(netns.enter, space))  # fmt: skip
            with outside, inside:
                deadline = L.time.time() + 10
                while inside.latest().scrapes_ok < 2 and L.time.time() < deadline:
                    L.time.sleep(0.05)
            assert inside.latest().scrapes_ok >= 2
            assert outside.latest().scrapes_ok == 0  # not reachable from the root namespace


def test_link_term_fit_by_hand():
    from trainfabric.diloco.calibrate import fit_link

    def run(arrival, finish, violated, syncs):
        req = pd.DataFrame({"arrival_s": arrival, "finish_s": finish, "violated": violated})
        return {"requests": req, "syncs": pd.DataFrame(syncs, columns=["start_s", "end_s"])}

    runs = [
        # inside: 0.5-0.9 (overlaps 0.8-1.0), 3.0-nan (unfinished: to the end; 4-5); outside: 2
        run([0.5, 2.0, 3.0], [0.9, 2.4, np.nan], [True, False, True], [(0.8, 1.0), (4.0, 5.0)]),
        # inside: 1.0-1.2; outside: 3.0 and 0.0 (ends as the sync starts: overlaps, [a, b))
        run([1.0, 3.0, 0.0], [1.2, 3.5, 0.95], [False, True, False], [(0.95, 1.1)]),
    ]
    f = fit_link(runs)
    # inside: 0.5 (v), 3.0 (v), 1.0, 0.0 -> 2 of 4; outside: 2.0, 3.0 (v) -> 1 of 2
    assert (f["requests_inside"], f["requests_outside"]) == (4, 2)
    assert f["violation_inside"] == 0.5 and f["violation_outside"] == 0.5
    assert f["link_violation_p"] == 0.0
    runs[1]["requests"].loc[1, "violated"] = False  # outside: 0 of 2
    f = fit_link(runs)
    assert f["violation_outside"] == 0.0 and f["link_violation_p"] == 0.5
    runs[0]["requests"].loc[1, "violated"] = True  # outside 1 of 2: p = (0.5 - 0.5) / 0.5
    assert fit_link(runs)["link_violation_p"] == 0.0
    runs[1]["requests"].loc[[0, 2], "violated"] = True  # inside 4 of 4: p = (1 - 0.5) / 0.5
    assert fit_link(runs)["link_violation_p"] == 1.0


def test_pooled_split_keeps_an_unfinished_request_in_its_own_run():
    """Run A: a request unfinished from 50 s, A's only sync at 10-12 s; run B: a sync at
    5-7 s. Pooled, the unfinished request lives to A's end, never into B's syncs: outside."""

    def rec(arrival, finish, violated, syncs):
        req = pd.DataFrame({"arrival_s": arrival, "finish_s": finish, "ttft_s": 0.1,
                            "tpot_s": 0.01, "violated": violated})  # fmt: skip
        sy = pd.DataFrame(syncs, columns=["start_s", "end_s"])
        return L.RunRecord("x", "p", 0, req, sy, pd.DataFrame(), pd.DataFrame(), pd.DataFrame(),
                           60.0, None)  # fmt: skip

    a = rec([1.0, 11.0, 50.0], [1.5, 11.5, np.nan], [False, False, True], [(10.0, 12.0)])
    b = rec([6.0, 30.0], [6.5, 30.5], [True, False], [(5.0, 7.0)])
    split = L.pooled_split([a, b])
    assert (split["inside"]["requests"], split["outside"]["requests"]) == (2, 3)
    assert split["inside"]["slo_violation_rate"] == 0.5  # B's request at 6 s
    assert split["outside"]["slo_violation_rate"] == pytest.approx(1 / 3)  # A's unfinished one
