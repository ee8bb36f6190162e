"""The simulator's fragment model (``fleet.py``, *Fragments*) and matched random per fragment.

(a) P = 1 through the fragment loop equals the whole-model simulator (the compiled loop) to
the bit; (b) P > 1 with ``fixed_h`` equals an independent scalar reference written from the
module doc's rules (the staggered guard clocks, back-to-back fragment syncs, ``gain_p =
tokens_p · e(h_p) / P``); (c) matched random per fragment has exactly the controller's sync
count of every fragment, on a regime where fragment syncs queue for the link; (d) bad input
names the field."""

import math

import numpy as np
import pandas as pd
import pytest
from pydantic import ValidationError

from trainfabric.diloco.fleet import (
    Block,
    FleetConfig,
    FragmentModel,
    Regime,
    get_regime,
    simulate,
)
from trainfabric.diloco.learners import SyncModel
from trainfabric.diloco.policies import make_policy
from trainfabric.diloco.protocol import matched_fragment_blocks
from trainfabric.errors import ConfigError

GUARDS = {"min_h": 20.0, "max_h": 90.0}


def _same(a, b):
    pd.testing.assert_frame_equal(a.table, b.table, check_exact=True)
    for name in ("sync_started", "violated", "finished", "fragment_syncs"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    for x, y in zip(a.sync_ends_s, b.sync_ends_s, strict=True):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("regime", ["bursty", "sync_heavy"])
def test_one_fragment_is_the_whole_model_simulator_to_the_bit(regime):
    fleet = FleetConfig(windows=600)
    seeds = np.array([0, 3, 7])
    names = ("fixed_h", "wa_diloco", "wa_forecast", "pressure_gate")

    def blocks():
        return [Block(make_policy(n, **({} if n == "fixed_h" else GUARDS)), seeds) for n in names]

    whole = simulate(fleet, get_regime(regime), blocks())  # the compiled loop
    one = simulate(
        fleet, get_regime(regime), blocks(), fragments=FragmentModel(fragments=1, stagger_steps=77)
    )
    assert whole.table["syncs"].min() > 0
    _same(whole, one)


def _reference_fixed_h(P, H, stagger, D_p, W, dt, steps_per_s, tps, drift):
    """``fixed_h`` on P fragments from the module doc, one run in scalars: fragment ``p``'s
    guard clock starts at ``(stagger − ⌊p·stagger/P⌋) mod stagger``; at a window start with
    the link free every fragment with guard >= H syncs (gain ``tokens·e(h)/P``), back to back
    for ``D_p`` each; training pauses while any runs."""
    guard = [float((stagger - p * stagger // P) % stagger) for p in range(P)]
    h, tok = [0.0] * P, [0.0] * P
    eff, until, syncs, starts, syncing = 0.0, -math.inf, [0] * P, [], 0.0
    for w in range(W):
        t0 = w * dt
        if until <= t0:
            due = [p for p in range(P) if guard[p] >= H]
            for p in due:
                eff += tok[p] * (1.0 / (1.0 + h[p] / drift)) / P
                h[p] = tok[p] = guard[p] = 0.0
                syncs[p] += 1
            if due:
                until = t0 + len(due) * D_p
                starts.append(w)
        busy = min(max(min(until, t0 + dt) - t0, 0.0), dt)
        syncing += busy
        steps = (dt - busy) * steps_per_s
        for p in range(P):
            h[p] += steps
            tok[p] += steps * tps
            guard[p] += steps
    final = eff + sum(tok[p] * (1.0 / (1.0 + h[p] / drift)) / P for p in range(P))
    return final, syncs, starts, syncing


@pytest.mark.parametrize(("P", "H", "stagger"), [(4, 40, 40), (3, 50, 64), (2, 25, 10)])
def test_fragments_follow_the_reference(P, H, stagger):
    regime = Regime(name="slow", sync=SyncModel(params=4e10, link_gbps=100.0))  # 5.6 s whole
    fleet = FleetConfig(windows=400, window_s=2.0)
    frag = FragmentModel(fragments=P, stagger_steps=stagger)
    res = simulate(
        fleet, regime, [Block(make_policy("fixed_h", H=H), np.array([1]))], fragments=frag
    )
    prog = fleet.progress
    eff, syncs, starts, syncing = _reference_fixed_h(
        P, H, stagger, frag.sync_s(regime), 400, 2.0, prog.steps_per_s, prog.tokens_per_step,
        prog.drift_steps,
    )  # fmt: skip
    row = res.table.iloc[0]
    assert res.fragment_syncs[0].tolist() == syncs
    assert np.flatnonzero(res.sync_started[0]).tolist() == starts
    assert row["effective_tokens"] == pytest.approx(eff, rel=1e-12)
    assert row["sync_time_fraction"] == pytest.approx(syncing / fleet.horizon_s, rel=1e-12)
    assert row["syncs"] == sum(syncs)
    # a fragment sync moves 1/P of the bytes: shorter than the whole model's
    assert frag.sync_s(regime) < regime.sync_s


def test_one_fragment_sync_moves_a_pth_of_the_ring():
    """``D_p`` = the ring on ``params / P`` (hand-computed: 2(M−1) steps of S/(P·M) bytes at
    the link rate plus the per-step latency) plus the outer step."""
    sync = SyncModel(params=8e9, bytes_per_param=4.0, islands=8, link_gbps=5.0)
    regime = Regime(name="r", sync=sync)
    P, M = 4, 8
    step_bytes = 8e9 * 4.0 / P / M
    expect = 2 * (M - 1) * (8 * step_bytes / 5e9 + 50e-6) + 0.005
    assert FragmentModel(fragments=P).sync_s(regime) == pytest.approx(expect, rel=1e-12)
    assert FragmentModel(fragments=1).sync_s(regime) == regime.sync_s


def test_matched_random_per_fragment_keeps_every_fragment_count():
    """The controller's count of each fragment, per seed, equals every matched draw's, on
    ``sync_heavy`` (a fragment sync is tens of seconds: schedules queue for the link)."""
    regime = get_regime("sync_heavy")
    fleet = FleetConfig(windows=1500)
    frag = FragmentModel(fragments=4, stagger_steps=256)
    seeds, draws = np.array([0, 1, 2]), 3
    wa = make_policy("wa_forecast")
    main = simulate(fleet, regime, [Block(wa, seeds)], fragments=frag)
    budgets = main.fragment_syncs.reshape(1, len(seeds), 4)
    assert budgets.min() > 0 and np.ptp(budgets) > 0
    blocks = matched_fragment_blocks([wa], budgets, seeds, draws, regime, fleet, frag)
    rows = blocks[0].policy.sync_at.reshape(len(seeds), draws, 4, -1)
    np.testing.assert_array_equal(rows.sum(axis=3), np.repeat(budgets[0][:, None], draws, 1))
    control = simulate(fleet, regime, blocks, fragments=frag)
    got = control.fragment_syncs.reshape(len(seeds), draws, 4)
    np.testing.assert_array_equal(got, np.repeat(budgets[0][:, None], draws, axis=1))
    # the draws differ (random windows), and some schedule syncs waited for the link
    assert not np.array_equal(rows[:, 0], rows[:, 1])
    assert not np.array_equal(control.sync_started, rows.any(axis=2).reshape(-1, 1500))


def test_deferring_a_fragment_keeps_it_due():
    """A WA fragment deferred past ``min_h`` is not dropped: every fragment still syncs at
    least once per ``max_h`` steps (the forced guard), so no count falls below that floor."""
    regime = get_regime("bursty")
    fleet = FleetConfig(windows=2000)
    frag = FragmentModel(fragments=4, stagger_steps=256)
    wa = make_policy("wa_diloco", min_h=64.0, max_h=300.0, threshold=0.9)  # defers often
    res = simulate(fleet, regime, [Block(wa, np.array([0, 1]))], fragments=frag)
    steps = fleet.horizon_s * (1 - res.table["sync_time_fraction"].max())  # 1 step/s
    assert res.fragment_syncs.min() >= math.floor(steps / (300.0 + 1.0))  # a gap <= max_h + 1
    assert res.fragment_syncs.max() < 2000 / 64  # and deferrals did happen (not every min_h)


@pytest.mark.parametrize(
    ("kwargs", "field"), [({"fragments": 0}, "fragments"), ({"stagger_steps": 0}, "stagger_steps")]
)
def test_bad_fragment_model_names_the_field(kwargs, field):
    with pytest.raises(ValidationError) as e:
        FragmentModel(**kwargs)
    assert e.value.errors()[0]["loc"] == (field,)


def test_fragments_refused_where_the_model_does_not_apply():
    frag = FragmentModel(fragments=2)
    fleet = FleetConfig(windows=50)
    block = [Block(make_policy("fixed_h"), np.array([0]))]
    with pytest.raises(ConfigError) as e:
        simulate(fleet, get_regime("seed_bursty"), block, fragments=frag)
    assert e.value.field == "fragments"


def test_matched_random_per_fragment_refuses_a_horizon_with_no_room():
    """Too few windows for the guards' gap and the queueing slack: refused naming
    ``windows``, before any draw."""
    regime, frag = get_regime("sync_heavy"), FragmentModel(fragments=4)
    budgets = np.ones((1, 1, 4), np.int64)
    wa = make_policy("wa_forecast")
    with pytest.raises(ConfigError) as e:
        matched_fragment_blocks(
            [wa], budgets, np.array([0]), 2, regime, FleetConfig(windows=300), frag
        )
    assert e.value.field == "windows"
