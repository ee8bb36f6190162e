"""Online threshold rewiring (one-hop model): exact per-slot optimum, regret bound, comparators."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainfabric.errors import ConfigError
from trainfabric.ocs import traffic as tr
from trainfabric.ocs.model import OcsModel
from trainfabric.ocs.online.threshold import (
    OneHopCost,
    Policy,
    evaluate,
    regret_bound,
    run_policies,
    theta_star,
)
from trainfabric.ocs.wiring import onehop


def _all_wirings(model: OcsModel, top: int) -> np.ndarray:
    xs = np.array(list(itertools.product(range(top + 1), repeat=model.n_pairs)))
    iu, iv = model.pairs
    deg = np.zeros((xs.shape[0], model.n))
    for e in range(model.n_pairs):
        deg[:, iu[e]] += xs[:, e]
        deg[:, iv[e]] += xs[:, e]
    return xs[(deg <= model.degrees).all(axis=1)]


def test_slot_optimum_is_the_brute_force_minimum():
    rng = np.random.default_rng(0)
    model = OcsModel(np.array([2, 2, 1, 3]), 1, rate_bps=100e9, fallback_bps=5e9)
    cost = OneHopCost(model)
    xs = _all_wirings(model, 3)
    iu, iv = model.pairs
    for trial in range(40):
        d = rng.lognormal(size=(4, 4)) * 1e9
        np.fill_diagonal(d, 0)
        if trial % 3 == 0:
            d[0, 2] = d[2, 0] = 0.0
        load = 8 * np.maximum(d[iu, iv], d[iv, iu])
        brute = (load / (100e9 * xs + 5e9)).max(axis=1).min()
        u, x = cost.slot_optimum(d)
        assert u == pytest.approx(brute, rel=1e-12)
        assert cost.cost(d[None], x)[0] == u
        model.check_wiring(x)
        full = cost.complete(d, x)
        model.check_wiring(full)
        assert cost.cost(d[None], full)[0] <= u and (full >= x).all()


def test_slot_optimum_agrees_with_the_exact_one_hop_routine_as_the_fallback_vanishes():
    rng = np.random.default_rng(1)
    model = OcsModel(np.full(6, 5), 1, rate_bps=100e9, fallback_bps=1e-3)  # all pairs fit
    cost = OneHopCost(model)
    for _ in range(10):
        d = tr.base_matrix(6, rng)
        u, _ = cost.slot_optimum(d)
        exact = onehop.one_hop_optimum(onehop.OneHopInstance(8 * d, np.full(6, 5), 100e9))
        assert u == pytest.approx(exact.mlu, rel=1e-9)


def test_completion_keeps_previous_circuits_where_ports_allow():
    model = OcsModel(np.full(5, 4), 1, rate_bps=100e9, fallback_bps=5e9)
    cost = OneHopCost(model)
    d = tr.base_matrix(5, np.random.default_rng(2))
    _, x = cost.slot_optimum(d)
    prev = cost.complete(d * np.random.default_rng(3).uniform(0.5, 1.5, d.shape), x * 0)
    full = cost.complete(d, x, prev)
    free = model.free_ports(full)
    kept = np.minimum(full, prev)
    # a previous circuit is dropped only where one of its pods has no free port left
    iu, iv = model.pairs
    lost = prev > kept
    assert ((free[iu[lost]] == 0) | (free[iv[lost]] == 0)).all()


def _small(kind: str, slots: int, pods: int, seed: int, share: float):
    v1 = share * pods * (pods - 1) * 1e8
    return tr.generate(kind, slots, v1, pods=pods, seed=seed, jumps=min(4, slots - 1))


@settings(max_examples=60)
@given(
    kind=st.sampled_from(tr.GENERATORS),
    slots=st.integers(5, 120),
    pods=st.integers(4, 7),
    seed=st.integers(0, 1000),
    share=st.floats(0.01, 0.5),
    c_rel=st.sampled_from([0.1, 1.0, 10.0]),
    theta_rel=st.sampled_from([0.0, 0.25, 1.0, 4.0]),
    charge=st.sampled_from(["reconfiguration", "circuit"]),
)
def test_regret_bound_holds_on_every_generated_sequence(
    kind, slots, pods, seed, share, c_rel, theta_rel, charge
):
    seq = _small(kind, slots, pods, seed, share)
    model = OcsModel(np.full(pods, 4), 2, rate_bps=100e9, fallback_bps=5e9)
    cost = OneHopCost(model)
    c = c_rel * cost.slot_optimum(seq.block(0, 1)[0])[0]
    res = evaluate(cost, seq, c, charge)
    theta = theta_rel * res.theta_star
    res = evaluate(cost, seq, c, charge, theta=theta)
    run = res.runs["threshold"]
    v1 = float(np.abs(np.diff(seq.array(), axis=0)).sum())  # measured from the matrices
    assert res.v1 == pytest.approx(v1, rel=1e-12)
    assert cost.gamma == 8 / 5e9  # analytic, not fitted
    assert run.regret_s <= regret_bound(res.c_eff, v1, theta, cost.gamma, slots) * (1 + 1e-12)
    if theta > 0:
        assert run.switches <= v1 / theta + 1
    # step (b) slot by slot: between reconfigurations the excess is at most 2Γθ
    excess = run.cost - cost.optima(seq)
    assert (excess[~run.switched] <= 2 * cost.gamma * theta * (1 + 1e-12) + 1e-15).all()
    assert (excess >= -1e-15).all()


def test_always_switch_pays_c_per_slot_and_never_switch_pays_nothing():
    seq = _small("moe-phases", 60, 6, 4, 0.3)
    cost = OneHopCost(OcsModel(np.full(6, 4), 2, rate_bps=100e9, fallback_bps=5e9))
    res = evaluate(cost, seq, 0.05, extra=("always", "never"))
    always, never = res.runs["always"], res.runs["never"]
    assert always.switches == 60
    assert always.regret_s == pytest.approx(0.05 * 60, rel=1e-9)
    assert never.switches == 0 and never.switching_cost_s == 0 and never.moved_circuits == 0
    assert never.regret_s == pytest.approx(never.slot_cost_s - res.optimum_s, rel=1e-12)
    per_circuit = evaluate(cost, seq, 0.05, "circuit", extra=("always",))
    a = per_circuit.runs["always"]
    assert a.switching_cost_s == pytest.approx(0.05 * a.moved_circuits)
    assert per_circuit.c_eff == 0.05 * cost.model.max_circuits


def test_oracle_theta_is_the_best_of_its_grid_and_thresholds_interpolate():
    seq = _small("random-walk", 400, 6, 5, 0.4)
    cost = OneHopCost(OcsModel(np.full(6, 4), 2, rate_bps=100e9, fallback_bps=5e9))
    grid = [0.5, 1.0, 4.0, 16.0]
    res = evaluate(cost, seq, 0.05, grid=grid, extra=())
    oracle = res.oracle_theta()
    assert oracle.regret_s == min(
        res.runs[f"theta={g * res.theta_star:.6g}"].regret_s for g in grid
    )
    assert oracle.regret_s <= res.runs["threshold"].regret_s
    switches = [res.runs[f"theta={g * res.theta_star:.6g}"].switches for g in grid]
    assert switches == sorted(switches, reverse=True)  # a larger θ never switches more


def test_mask_policy_switches_exactly_at_the_mask():
    seq = _small("jumps", 50, 5, 6, 0.3)
    cost = OneHopCost(OcsModel(np.full(5, 4), 2, rate_bps=100e9, fallback_bps=5e9))
    mask = np.zeros(50, dtype=bool)
    mask[[10, 30]] = True
    runs = run_policies(cost, seq, [Policy("m", mask=mask)], 0.1)
    assert np.array_equal(runs["m"].switched, mask)
    assert runs["m"].switching_cost_s == pytest.approx(0.2)


def test_theta_star_minimises_the_bound():
    c, v1, g, t = 0.3, 7e9, 1.6e-9, 1000
    star = theta_star(c, v1, g, t)
    b = regret_bound(c, v1, star, g, t)
    assert b == pytest.approx(2 * math.sqrt(2 * g * c * v1 * t) + c, rel=1e-12)
    assert b <= min(regret_bound(c, v1, star * f, g, t) for f in (0.5, 0.9, 1.1, 2.0))


def test_bad_options_name_the_field():
    seq = _small("jumps", 20, 4, 0, 0.1)
    cost = OneHopCost(OcsModel(np.full(4, 2), 1))
    for kw, field in (({"charge": "per-bit"}, "charge"), ({"theta": -1.0}, "theta")):
        with pytest.raises(ConfigError) as e:
            evaluate(cost, seq, 0.1, **kw)
        assert e.value.field == field
    with pytest.raises(ConfigError) as e:
        evaluate(cost, seq, -1.0)
    assert e.value.field == "switch_cost_s"


def test_glr_triggered_policy_alarms_after_a_job_arrives_and_not_without_change():
    from trainfabric.ocs.online.glr import glr_mask

    seq = tr.generate("job-arrival", 300, 2e10, pods=8, seed=3, leave=False)
    mask = glr_mask(seq, delta=0.01, seed=1)
    alarms = np.flatnonzero(mask)
    assert alarms.size >= 1 and 100 <= alarms[0] <= 110  # the job arrives at slot 100
    quiet = tr.generate("jumps", 300, 0.0, pods=8, seed=3, jumps=1)  # V1 = 0: no change
    assert not glr_mask(quiet, delta=0.01, seed=1).any()
    with pytest.raises(ConfigError) as e:
        glr_mask(seq, top=0)
    assert e.value.field == "top"
