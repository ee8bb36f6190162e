"""Ablation of the entropic step: starts, rounding from a start, restarts at equal time."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainfabric.errors import ConfigError
from trainfabric.ocs.model import OcsModel
from trainfabric.ocs.wiring import ablation, baselines
from trainfabric.ocs.wiring.cost import PathCost, temperatures
from trainfabric.ocs.wiring.families import family
from trainfabric.ocs.wiring.planner import plan
from trainfabric.ocs.wiring.rounding import round_to_degrees
from trainfabric.workloads import build_dag, get_preset


@pytest.fixture(scope="module")
def moe8():
    dag, model = build_dag(get_preset("moe", pods=8)), OcsModel.uniform(8, 8, 4)
    cost = PathCost(dag, model)
    return dag, model, cost, temperatures(cost, model)[1]


def _full(path: np.ndarray, model: OcsModel) -> np.ndarray:
    """Pods whose ports are all used (to 1e-9 relative)."""
    return model.pod_degrees(path) >= model.degrees * (1 - 1e-9)


@pytest.mark.parametrize(
    "instance",
    [
        lambda: (build_dag(get_preset("moe", pods=8)), OcsModel.uniform(8, 8, 4), 0),
        lambda: (*family("pp-dp", 16, 8, 1), 1),
    ],
)
def test_entropic_arm_is_plans_general_path_exactly(instance):
    dag, model, seed = instance()
    budgets = dict(max_iter=40, round_max_moves=2_000_000)  # explicit on both sides
    ref = plan(dag, model, seed=seed, exact_one_hop=False, **budgets)
    cost = PathCost(dag, model)
    b1, b2, _ = temperatures(cost, model)
    x_frac = ablation.start_point("entropic", cost, model, b1=b1, b2=b2, max_iter=40)
    np.testing.assert_array_equal(x_frac, ref.x_frac)
    rounded = ablation.round_from(cost, model, x_frac, b2, seed=seed, max_moves=2_000_000)
    x, cp = ablation.best_of(cost, [rounded.x, *ablation.plan_candidates(cost, model, seed)])
    np.testing.assert_array_equal(x, ref.x)
    assert cp == ref.hard_critical_path_s
    assert rounded.hard_cp_s == cost.hard(rounded.x) >= cp


def test_uniform_start_is_the_fractional_mesh(moe8):
    _, model, cost, _ = moe8
    x = ablation.start_point("uniform", cost, model)
    # 8 pods x 8 ports: M = 32 circuits over 28 pairs
    np.testing.assert_allclose(x, np.full(28, 32 / 28), rtol=1e-12)


def test_demand_start_rounds_to_the_demand_proportional_wiring(moe8):
    dag, model, cost, _ = moe8
    x = ablation.start_point("demand", cost, model)
    up, down = baselines.directed_pair_bytes(dag, model)
    assert np.array_equal(x > 0, up + down > 0)
    iu, iv = model.pairs
    full = _full(x, model)
    assert (full[iu] | full[iv])[x > 0].all()  # no loaded pair could grow further
    np.testing.assert_array_equal(
        round_to_degrees(model, x), baselines.demand_proportional(dag, model)
    )


@settings(max_examples=20)
@given(n=st.integers(3, 12), ports=st.sampled_from([4, 8, 12]), seed=st.integers(0, 2**31 - 1))
def test_random_start_and_perturbation_stay_in_the_port_polytope(n, ports, seed):
    model = OcsModel.uniform(n, ports, 4)
    cost = PathCost(build_dag(get_preset("dp-ring", pods=n)), model)
    x = ablation.start_point("random", cost, model, seed=seed)
    assert (x > 0).all() and (model.pod_degrees(x) <= model.degrees * (1 + 1e-9)).all()
    iu, iv = model.pairs
    full = _full(x, model)
    assert (full[iu] | full[iv]).all()  # maximal: every pair touches a full pod
    np.testing.assert_array_equal(x, ablation.start_point("random", cost, model, seed=seed))
    assert not np.array_equal(x, ablation.start_point("random", cost, model, seed=seed + 1))
    sparse = np.where(np.arange(x.size) % 3 == 0, 0.0, x)
    y = ablation.perturb(model, sparse, np.random.default_rng(seed))
    assert np.array_equal(y > 0, sparse > 0)
    assert (model.pod_degrees(y) <= model.degrees * (1 + 1e-9)).all()


def test_round_from_is_a_valid_wiring_at_the_hard_critical_path(moe8):
    _, model, cost, b2 = moe8
    for kind in ("uniform", "demand", "random"):
        r = ablation.round_from(cost, model, ablation.start_point(kind, cost, model), b2)
        model.check_wiring(r.x)
        assert r.hard_cp_s == cost.hard(r.x) <= r.initial_cp_s


@pytest.mark.parametrize(
    "start, why",
    [
        (np.ones(27), "shape"),
        (np.full(28, -0.5), "non-negative"),
        (np.full(28, np.nan), "finite"),
        (np.full(28, 3.0), "pod 0 uses more than its 8 ports"),
    ],
)
def test_bad_start_names_the_field(moe8, start, why):
    _, model, cost, b2 = moe8
    with pytest.raises(ConfigError, match=why) as err:
        ablation.round_from(cost, model, start, b2)
    assert err.value.field == "start"


def test_bad_kind_and_missing_temperature_name_their_field(moe8):
    _, model, cost, b2 = moe8
    with pytest.raises(ConfigError) as err:
        ablation.start_point("entropy", cost, model)
    assert err.value.field == "kind"
    with pytest.raises(ConfigError) as err:
        ablation.start_point("entropic", cost, model, b2=b2, max_iter=10)
    assert err.value.field == "b1"
    with pytest.raises(ConfigError) as err:
        ablation.start_point("entropic", cost, model, b1=1.0, b2=b2)
    assert err.value.field == "max_iter"
    with pytest.raises(ConfigError) as err:
        ablation.restarts(cost, model, "entropic", 1.0, b2)
    assert err.value.field == "kind"
    with pytest.raises(ConfigError) as err:
        ablation.restarts(cost, model, "uniform", -1.0, b2)
    assert err.value.field == "budget_s"
    with pytest.raises(ConfigError) as err:
        ablation.best_of(cost, [])
    assert err.value.field == "wirings"


def test_best_of_keeps_the_first_of_ties(moe8):
    _, model, cost, _ = moe8
    a = baselines.uniform_mesh(model)
    b = np.roll(a, 1)  # the same circuits on other pairs
    c = np.zeros_like(a)
    x, cp = ablation.best_of(cost, [c, a, a.copy()])
    assert x is not c and np.array_equal(x, a) and cp == cost.hard(a) < cost.hard(c)
    assert ablation.best_of(cost, [a, b])[1] == min(cost.hard(a), cost.hard(b))


@pytest.mark.parametrize("kind", ["uniform", "random"])
def test_restarts_keep_the_best_of_their_runs(moe8, kind):
    _, model, cost, b2 = moe8
    one = ablation.restarts(cost, model, kind, 0.0, b2, seed=5, max_moves=20_000)
    assert one.runs == 1
    first = ablation.round_from(
        cost, model, ablation.start_point(kind, cost, model, seed=5), b2, seed=5, max_moves=20_000
    )
    np.testing.assert_array_equal(one.x, first.x)
    many = ablation.restarts(cost, model, kind, 0.3, b2, seed=5, max_moves=20_000)
    assert many.runs >= 2 and many.wall_s >= 0.3
    base = ablation.start_point(kind, cost, model, seed=5)
    cps = []
    for k in range(many.runs):
        if kind == "random":
            start = ablation.start_point("random", cost, model, seed=5 + k)
        else:
            start = base if k == 0 else ablation.perturb(model, base, np.random.default_rng((5, k)))
        cps.append(ablation.round_from(cost, model, start, b2, seed=5 + k, max_moves=20_000))
    assert many.cp_s == min(r.hard_cp_s for r in cps) <= first.hard_cp_s
    assert many.work == sum(r.work for r in cps)
