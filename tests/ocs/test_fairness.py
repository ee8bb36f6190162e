"""Multi-job power-mean fairness (docs/ocs.md §1.12): closed forms, gradients, byte-share splitting,
the α-fair equivalence, the J = 1 reduction and the fractional trade-off along p."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainfabric.errors import ConfigError
from trainfabric.ocs import fairness as F
from trainfabric.ocs.model import OcsModel
from trainfabric.ocs.wiring.cost import PathCost, temperatures
from trainfabric.workloads.dag import DagBuilder

PS = (1.0, 2.5, 8.0, math.inf)


@pytest.fixture(scope="module")
def three_jobs():
    """moe (4 pods), pipeline (8 pods), dp-ring (4 pods) on 8 pods, slowdown-normalised."""
    model = OcsModel.uniform(8, 4, 2)
    jobs = F.place_jobs(["moe", "pipeline", "dp-ring"], 8, [4, 8, 4], [1.0, 2.0, 1.0], seed=0)
    cost = F.FairnessCost(jobs, model, 1.0, normalise=True)
    return cost, F.temperatures_for(cost)


@pytest.fixture(scope="module")
def two_jobs():
    """moe and pipeline sharing 6 pods, raw seconds."""
    model = OcsModel.uniform(6, 4, 2)
    jobs = F.place_jobs(["moe", "pipeline"], 6, [4, 6], seed=3)
    cost = F.FairnessCost(jobs, model, 1.0)
    return cost, F.temperatures_for(cost)


# -- closed forms ---------------------------------------------------------------------------

vectors = st.lists(st.floats(0.1, 10.0), min_size=1, max_size=6)


@given(vectors, st.data())
def test_power_mean_closed_forms(v, data):
    v = np.array(v)
    w = np.array(data.draw(st.lists(st.floats(0.1, 5.0), min_size=v.size, max_size=v.size)))
    wbar = w / w.sum()
    # p = 1: the weighted mean
    assert F.power_mean(v, w, 1.0) == pytest.approx(wbar @ v, rel=1e-12)
    # non-decreasing in p, below the max, and at least wbar_argmax^(1/p) · max (-> max)
    prev = 0.0
    for p in (1.0, 2.0, 4.0, 8.0, 64.0, 512.0):
        phi = F.power_mean(v, w, p)
        assert prev * (1 - 1e-12) <= phi <= v.max() * (1 + 1e-12)
        assert phi >= wbar[np.argmax(v)] ** (1 / p) * v.max() * (1 - 1e-12)
        prev = phi
    assert F.power_mean(v, w, math.inf) == v.max()
    # smoothed max within log J / tau above the max
    tau = 3.0
    sm = F.smooth_max(v, tau)[0]
    assert v.max() - 1e-12 <= sm <= v.max() + math.log(v.size) / tau + 1e-12


@given(vectors, st.sampled_from([1.0, 1.5, 3.0, 8.0]))
def test_power_mean_gradient_closed_form(v, p):
    v = np.array(v)
    w = np.arange(1.0, v.size + 1.0)
    phi, g = F.power_mean_grad(v, w, p)
    h = 1e-6
    for j in range(v.size):
        e = np.zeros(v.size)
        e[j] = h
        fd = (F.power_mean(v + e, w, p) - F.power_mean(v - e, w, p)) / (2 * h)
        assert g[j] == pytest.approx(fd, rel=1e-6, abs=1e-9)
    # the coefficients of the marginals, weighted by v/Φ, sum to 1 (Euler: Φ is 1-homogeneous)
    assert g @ v / phi == pytest.approx(1.0, rel=1e-12)


def test_jain_closed_forms():
    assert F.jain([2.0, 2.0, 2.0]) == pytest.approx(1.0)
    # throughputs 1 and 1/3: (4/3)^2 / (2 (1 + 1/9)) = 0.8
    assert F.jain([1.0, 3.0]) == pytest.approx(0.8)


# -- the multi-job cost ---------------------------------------------------------------------


@pytest.mark.parametrize("p", PS)
def test_gradient_matches_central_differences(three_jobs, p):
    cost, (_, b2) = three_jobs
    cost = cost.with_p(p)
    rng = np.random.default_rng(1)
    x = rng.uniform(0.3, 2.0, cost.model.n_pairs)
    _, g = cost.value_and_grad(x, b2)
    used = np.flatnonzero(cost.used.any(axis=0))
    h = 1e-5
    for e in rng.choice(used, 8, replace=False):
        d = np.zeros_like(x)
        d[e] = h
        fd = (cost.value_and_grad(x + d, b2)[0] - cost.value_and_grad(x - d, b2)[0]) / (2 * h)
        assert g[e] == pytest.approx(fd, rel=1e-6, abs=1e-10 * abs(cost.smoothed(x, b2)))
    unused = np.flatnonzero(~cost.used.any(axis=0))
    assert (g[unused] == 0).all()


def test_single_job_reduces_to_the_planner_cost():
    model = OcsModel.uniform(6, 4, 2)
    jobs = F.place_jobs(["pipeline"], 6, seed=0)
    single = PathCost(jobs[0].dag, model)
    x = np.random.default_rng(2).uniform(0.2, 1.5, model.n_pairs)
    b1, b2, _ = temperatures(single, model)
    assert F.temperatures_for(F.FairnessCost(jobs, model, 1.0)) == pytest.approx((b1, b2))
    u, g = single.value_and_grad(x, b2)
    for p in PS:
        cost = F.FairnessCost(jobs, model, p)
        v, gv = cost.value_and_grad(x, b2)
        assert v == pytest.approx(u, rel=1e-12)
        np.testing.assert_allclose(gv, g, rtol=1e-12, atol=1e-15)
        assert cost.hard(np.rint(x)) == single.hard(np.rint(x))


def test_byte_share_split_by_hand():
    """Job A sends 3 GB 0->1; job B sends 1 GB 0->1 and 2 GB 1->0 (two parallel transfers).
    On 0->1 A gets 3/4 and B 1/4 of B·x + B0; on 1->0 B is alone (share 1)."""
    model = OcsModel.uniform(3, 2, 1)
    a = DagBuilder(3)
    a.phase("p", "a", [0], [1], [3e9], 1e-6, 0.0)
    b = DagBuilder(3)
    b.phase("p", "b", [0, 1], [1, 0], [1e9, 2e9], 1e-6, 0.0)
    jobs = [F.FairJob("a", a.build(), np.arange(3)), F.FairJob("b", b.build(), np.arange(3))]
    cost = F.FairnessCost(jobs, model, 1.0)
    x = np.zeros(model.n_pairs)
    x[model.pair_index(0, 1)] = 2
    rate = 2 * 100e9 + 5e9
    cp_a = 1e-6 + 8 * 3e9 / (0.75 * rate)
    cp_b = 1e-6 + max(8 * 1e9 / (0.25 * rate), 8 * 2e9 / rate)
    np.testing.assert_allclose(cost.hard_jobs(x), [cp_a, cp_b], rtol=1e-14)
    # alone on the wiring, each job would get the whole pair
    alone = F.FairnessCost(jobs[:1], model, 1.0)
    assert alone.hard_jobs(x)[0] == pytest.approx(1e-6 + 8 * 3e9 / rate, rel=1e-14)


def test_infinite_p_is_the_side_by_side_smoothed_critical_path(two_jobs):
    cost, (_, b2) = two_jobs
    cost = cost.with_p(math.inf)
    joint = PathCost(F.side_by_side([c.dag for c in cost.costs]), cost.model)
    x = np.random.default_rng(4).uniform(0.2, 1.5, cost.model.n_pairs)
    assert cost.smoothed(x, b2) == pytest.approx(joint.smoothed(x, b2), rel=1e-12)
    assert cost.hard(x) == pytest.approx(joint.hard(x), rel=1e-14)
    assert cost.log_paths() == pytest.approx(joint.log_paths(), rel=1e-12)


# -- α-fairness -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("specs", "pods", "job_pods", "seed", "p"),
    [
        (["moe", "pipeline"], 6, [4, 6], 3, 1.0),
        (["moe", "pipeline", "dp-ring"], 8, [4, 8, 4], 0, 2.0),
        (["dp-ring", "pipeline", "moe"], 8, [8, 4, 4], 5, 4.0),
        (["dp-ring", "pipeline", "moe", "dp-hd"], 8, [8, 4, 4, 8], 1, 8.0),
    ],
)
def test_power_mean_and_alpha_fair_optima_agree(specs, pods, job_pods, seed, p):
    model = OcsModel.uniform(pods, 4, 2)
    jobs = F.place_jobs(specs, pods, job_pods, [1.0 + i for i in range(len(specs))], seed)
    cost = F.FairnessCost(jobs, model, p, normalise=True)
    b2 = F.temperatures_for(cost)[1]
    check = F.alpha_fair_check(cost, b2)
    assert check["alpha"] == p + 1
    assert check["rel_objective"] <= 1e-6
    assert check["rel_wiring"] <= 1e-6
    assert check["kkt_power"]["kkt"] and check["kkt_alpha"]["kkt"] and check["agree"]
    # the check can fail: the alpha-fair optimum of alpha != p + 1 is another wiring
    wrong = F.alpha_fair_check(cost, b2, alpha=p + 2)
    assert wrong["rel_wiring"] > 1e-3 and not wrong["agree"]


@pytest.mark.parametrize("p", [1000.0, 1e8])
def test_alpha_fair_check_holds_at_large_p(p):
    """y^(1−α) underflows from α of a few hundred on (p = 1000 raised LinAlgError from a NaN
    objective); the log form keeps the check finite up to the largest p, where it agrees."""
    model = OcsModel.uniform(4, 2, 1)
    cost = F.FairnessCost(F.place_jobs(["moe", "pipeline"], 4, None, seed=0), model, p)
    b2 = F.temperatures_for(cost)[1]
    loss, grad = F.alpha_fair_log_loss(cost, np.full(model.n_pairs, 0.5), b2, p + 1)
    assert math.isfinite(loss) and np.isfinite(grad).all()
    check = F.alpha_fair_check(cost, b2)
    assert check["agree"] and check["rel_objective"] <= 1e-6


def test_p_beyond_the_largest_finite_is_refused():
    with pytest.raises(ConfigError, match="^p: must be at most 1e"):
        F.check_p(1e9)
    assert F.check_p(1e8) == 1e8 and F.check_p("inf") == math.inf


def test_fractional_max_non_increasing_in_p(two_jobs):
    """J = 2: the unregularised optimum's largest job value is non-increasing in p (a theorem
    for two jobs, proved in the module doc of :mod:`trainfabric.ocs.fairness`), including the
    exact minimax at p = ∞."""
    cost, (_, b2) = two_jobs
    tops, means = [], []
    for p in (1.0, 2.0, 4.0, 8.0, math.inf):
        x = F.power_mean_optimum(cost.with_p(p), b2)[0]
        v = cost.job_values(x, b2)[0]
        tops.append(v.max())
        means.append(v.mean())
    assert all(b <= a * (1 + 1e-7) for a, b in zip(tops, tops[1:], strict=False))
    assert means[0] <= min(means) * (1 + 1e-9)  # p = 1 minimises the mean
    assert tops[0] > tops[-1] * (1 + 1e-3)  # and there is a trade-off to see


# -- the plan -------------------------------------------------------------------------------


def test_fair_plan_is_a_valid_wiring_never_worse_than_the_baselines(two_jobs):
    from trainfabric.ocs.wiring import baselines

    cost, (b1, b2) = two_jobs
    for p in (2.0, math.inf):
        c = cost.with_p(p)
        plan = F.fair_plan(c, b1, b2, seed=0, max_iter=200, max_evals=300)
        c.model.check_wiring(plan.x)
        assert plan.phi == pytest.approx(F.power_mean(plan.values, c.weights, p), rel=1e-12)
        assert plan.max == plan.values.max() and 0 < plan.jain <= 1
        for x in (baselines.uniform_mesh(c.model), baselines.demand_proportional(c.dag, c.model)):
            assert plan.phi <= c.hard(x) * (1 + 1e-12)


@pytest.mark.parametrize("p", [1.0, math.inf])
def test_rounding_reaches_the_brute_force_optimum(p):
    """5 pods with 2 ports: every integer wiring (x_e in {0, 1, 2}, degrees <= 2) scored by
    the hard Φ_p; the planner's wiring must be optimal (measured: 9 of 9 instance/p
    combinations at gap 0 when this test was written)."""
    import itertools

    model = OcsModel.uniform(5, 2, 1)
    jobs = F.place_jobs(["dp-ring", "pipeline", "moe"], 5, [4, 5, 4], seed=1)
    cost = F.FairnessCost(jobs, model, p, normalise=True)
    b1, b2 = F.temperatures_for(cost)
    grid = np.array(list(itertools.product(range(3), repeat=model.n_pairs)))
    iu, iv = model.pairs
    deg = np.stack([grid[:, (iu == v) | (iv == v)].sum(axis=1) for v in range(5)], axis=1)
    best = min(cost.hard(x) for x in grid[(deg <= 2).all(axis=1)])
    plan = F.fair_plan(cost, b1, b2, max_iter=300, max_evals=500)
    assert plan.phi <= best * (1 + 1e-12)


def test_same_seed_same_wiring(two_jobs):
    """Budgets are work (iterations, evaluations), so a second run repeats the first."""
    cost, (b1, b2) = two_jobs
    c = cost.with_p(4.0)
    first = F.fair_plan(c, b1, b2, seed=1, max_iter=100, max_evals=200)
    again = F.fair_plan(c, b1, b2, seed=1, max_iter=100, max_evals=200)
    np.testing.assert_array_equal(first.x, again.x)


def test_e9_table_and_figure():
    from trainfabric.experiments.ocs_fairness_studies import OcsE9Config, e9_figures, ocs_e9

    config = OcsE9Config(jobs=[2], pods=6, ps=[1.0, 8.0], max_iter=60, max_evals=100)
    table = ocs_e9(config, seed=0)
    ours = table[table["method"] == "ours"]
    assert sorted(ours["p"]) == [1.0, 8.0, math.inf]
    assert set(table["method"]) == {"ours", "near-uniform", "demand-proportional"}
    assert ours["alpha_agree"].dropna().astype(bool).all()
    assert (ours["jain"] <= 1).all() and (ours["max"] >= ours["min"]).all()
    assert bool(ours["unreg_max_non_increasing"].iloc[0])  # J = 2: the theorem
    assert len(e9_figures(table)) == 1


def test_bad_inputs_name_the_field():
    model = OcsModel.uniform(4, 2, 1)
    with pytest.raises(ConfigError) as e:
        F.check_p(0.5)
    assert e.value.field == "p"
    with pytest.raises(ConfigError) as e:
        F.check_p("x")
    assert e.value.field == "p"
    with pytest.raises(ConfigError) as e:
        F.place_jobs(["pipeline", "pipeline"], 4, weights=[1.0, -1.0])
    assert e.value.field == "weights"
    with pytest.raises(ConfigError) as e:
        F.place_jobs(["pipeline"], 4, job_pods=[5])
    assert e.value.field == "job_pods"
    with pytest.raises(ConfigError) as e:
        F.place_jobs([], 4)
    assert e.value.field == "jobs"
    jobs = F.place_jobs(["pipeline"], 4)
    with pytest.raises(ConfigError) as e:
        F.alpha_fair_check(F.FairnessCost(jobs, model, math.inf), 1.0)
    assert e.value.field == "p"


@pytest.mark.parametrize(("field", "value"), [("ps", [0.5]), ("jobs", [0]), ("mix", [])])
def test_e9_config_refuses_bad_values(field, value):
    from pydantic import ValidationError

    from trainfabric.experiments.ocs_fairness_studies import OcsE9Config

    with pytest.raises(ValidationError, match=field):
        OcsE9Config(**{field: value})
