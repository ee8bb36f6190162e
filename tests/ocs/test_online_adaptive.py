"""Online policies that set their own threshold: rent-or-buy (online-balance) and the
calibrated, cost-gated GLR trigger (glr-calibrated)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainfabric.errors import ConfigError
from trainfabric.ocs import traffic as tr
from trainfabric.ocs.model import OcsModel
from trainfabric.ocs.online.adaptive import (
    balance_mask,
    fit_null,
    glr_calibrated_mask,
    learned_mask,
    utilisation,
)
from trainfabric.ocs.online.threshold import OneHopCost, Policy, run_policies


def _cost(pods: int = 6) -> OneHopCost:
    return OneHopCost(OcsModel(np.full(pods, 4), 2, rate_bps=100e9, fallback_bps=5e9))


def _step_sequence(pods: int, change: int, slots: int, seed: int = 0):
    """``D_0`` before ``change``, then a different ``D_1`` for good."""
    rng = np.random.default_rng(seed)
    d0, d1 = tr.base_matrix(pods, rng), tr.base_matrix(pods, rng)
    return tr.from_array(np.stack([d0] * change + [d1] * (slots - change))), d0, d1


def test_balance_switches_when_the_rent_reaches_the_price_closed_form():
    cost = _cost()
    seq, d0, d1 = _step_sequence(6, change=20, slots=80)
    w0 = cost.complete(d0, cost.slot_optimum(d0)[1])
    e = cost.cost(d1[None], w0)[0] - cost.slot_optimum(d1)[0]  # excess per slot after the step
    assert e > 0
    run = balance_mask(cost, seq, 3.5 * e)  # ceil(3.5) = 4 slots of rent, the 4th included
    assert np.flatnonzero(run.mask).tolist() == [20 + 3]
    assert run.excess[20:24] == pytest.approx([e] * 4, rel=1e-12)
    assert run.excess[:20].max() == 0.0
    # a price above the rent of the whole remaining horizon (60 e): never buy
    assert not balance_mask(cost, seq, 60.5 * e).mask.any()
    assert balance_mask(cost, seq, 59.5 * e).mask.sum() == 1


def test_balance_regret_is_at_most_twice_the_best_single_decision_on_one_regime():
    cost = _cost()
    seq, d0, d1 = _step_sequence(6, change=10, slots=200, seed=4)
    w0 = cost.complete(d0, cost.slot_optimum(d0)[1])
    e = cost.cost(d1[None], w0)[0] - cost.slot_optimum(d1)[0]
    for price in (0.3 * e, 7.2 * e, 150 * e, 400 * e):
        run = run_policies(cost, seq, [Policy("b", mask=balance_mask(cost, seq, price).mask)],
                           price)["b"]  # fmt: skip
        best = min(190 * e, price)  # switch at the step, or never
        assert run.regret_s <= 2 * best * (1 + 1e-12)


@settings(max_examples=25, deadline=None)
@given(
    kind=st.sampled_from(tr.GENERATORS),
    slots=st.integers(10, 150),
    seed=st.integers(0, 500),
    c_rel=st.sampled_from([0.01, 0.1, 1.0]),
    charge=st.sampled_from(["reconfiguration", "circuit"]),
)
def test_balance_rule_and_its_replay_agree_slot_by_slot(kind, slots, seed, c_rel, charge):
    cost = _cost(5)
    seq = tr.generate(kind, slots, 0.3 * 20 * 1e8, pods=5, seed=seed, jumps=3)
    c = c_rel * cost.slot_optimum(seq.block(0, 1)[0])[0]
    opt = cost.optima(seq)
    run = balance_mask(cost, seq, c, charge, optima=opt)
    rep = run_policies(cost, seq, [Policy("b", mask=run.mask)], c, charge, opt)["b"]
    kept = ~run.mask
    assert rep.cost[kept] - opt[kept] == pytest.approx(run.excess[kept], abs=1e-12)
    # the rule: between switches the account stays below the price, at a switch it reaches it
    starts = [0, *(np.flatnonzero(run.mask) + 1)]
    for a, t in zip(starts, np.flatnonzero(run.mask), strict=False):
        price = c * (rep.moved[t] if charge == "circuit" else 1)
        assert run.excess[a : t + 1].sum() >= price * (1 - 1e-12)
        assert run.excess[t] > 0
    tail = run.excess[starts[-1] :]
    if charge == "reconfiguration":
        below = np.cumsum(tail)[tail > 0]
        assert (below < c).all()


def test_balance_refuses_bad_input():
    cost = _cost()
    seq, _, _ = _step_sequence(6, 2, 5)
    with pytest.raises(ConfigError, match="switch_cost_s"):
        balance_mask(cost, seq, -1.0)
    with pytest.raises(ConfigError, match="optima"):
        balance_mask(cost, seq, 1.0, optima=np.zeros(3))


def test_utilisation_is_traffic_over_the_pair_rate():
    cost = _cost(4)
    d = tr.base_matrix(4, np.random.default_rng(0))
    x = np.arange(cost.model.n_pairs) % 3
    u = utilisation(cost, d, x)
    iu, iv = cost.model.pairs
    for e in range(cost.model.n_pairs):
        rate = 100e9 * x[e] + 5e9
        assert (
            u[iu[e], iv[e]] == d[iu[e], iv[e]] / rate and u[iv[e], iu[e]] == d[iv[e], iu[e]] / rate
        )
    assert (np.diag(u) == 0).all()
    assert 8 * u.max() == pytest.approx(cost.cost(d[None], x)[0], rel=1e-12)


def _glr_run(c_rel: float, seed: int = 2):
    cost = _cost()
    seq, d0, d1 = _step_sequence(6, change=150, slots=500, seed=seed)
    null = fit_null(cost, seq, delta=0.1, horizon=500, calibration_streams=60, seed=1)
    w0 = cost.complete(d0, cost.slot_optimum(d0)[1])
    e = cost.cost(d1[None], w0)[0] - cost.slot_optimum(d1)[0]
    return cost, seq, null, e, glr_calibrated_mask(cost, seq, c_rel * e, null, seed=1)


def test_glr_calibrated_finds_the_step_and_gates_by_the_expected_saving():
    cost, seq, null, e, run = _glr_run(10.0)
    alarms = run.info["alarms"]
    assert alarms and 150 <= alarms[0][0] <= 175 and abs(alarms[0][1] - 150) <= 5
    changes = []
    for t, change, gain, price, switched in alarms:
        changes.append(change)
        # the gate recomputed from the recorded excess and change points
        expect = run.excess[change : t + 1].mean() * np.diff([0, *changes]).mean()
        assert gain == pytest.approx(expect, rel=1e-12)
        assert switched == (run.excess[t] > 0 and gain >= price)
    assert np.flatnonzero(run.mask).tolist() == [t for t, *_, s in alarms if s]
    # first alarm: excess e since the change, one completed regime of ~150 slots: 150 e >= 10 e
    assert alarms[0][4] and run.mask.sum() == 1
    rep = run_policies(cost, seq, [Policy("g", mask=run.mask)], 10.0 * e)["g"]
    kept = ~run.mask
    assert rep.cost[kept] - cost.optima(seq)[kept] == pytest.approx(run.excess[kept], abs=1e-12)


def test_glr_calibrated_does_not_pay_more_than_the_regime_is_worth():
    *_, run = _glr_run(400.0)  # the first regime (~150 slots) cannot repay 400 e
    assert run.info["alarms"] and not run.mask.any()


def test_glr_calibrated_stays_quiet_on_a_stationary_stream():
    cost = _cost()
    seq, d0, _ = _step_sequence(6, change=2, slots=400, seed=2)
    flat = tr.from_array(np.stack([d0] * 400))
    null = fit_null(cost, flat, delta=0.1, horizon=400, calibration_streams=60, seed=1)
    run = glr_calibrated_mask(cost, flat, 1e-9, null, seed=1)
    assert run.info["alarms"] == [] and math.isfinite(null.calibration.threshold)
    with pytest.raises(ConfigError, match="top"):
        fit_null(cost, flat, top=30)


def test_learned_threshold_closed_form_on_one_step():
    """One step of size Δ at slot s with excess e after it: Γ̂ = e / (2Δ), v̂_t = Δ / (t + 1),
    so θ_t = Δ sqrt(C / ((t + 1) e)) and the policy switches at the first t >= s with
    (t + 1) e > C."""
    cost = _cost()
    seq, d0, d1 = _step_sequence(6, change=20, slots=80)
    w0 = cost.complete(d0, cost.slot_optimum(d0)[1])
    e = cost.cost(d1[None], w0)[0] - cost.slot_optimum(d1)[0]
    delta = np.abs(d1 - d0).sum()
    for price, at in ((3.5 * e, 20), (50.5 * e, 50)):
        run = learned_mask(cost, seq, price)
        assert np.flatnonzero(run.mask).tolist() == [at]
        t = np.arange(20, at + 1)
        assert run.info["theta"][t] == pytest.approx(delta * np.sqrt(price / ((t + 1) * e)))
        assert np.isinf(run.info["theta"][:20]).all()
    assert not learned_mask(cost, seq, 80.5 * e).mask.any()
