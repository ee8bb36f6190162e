"""Circuit schedules with reconfiguration delay: checker, lower bounds, exact optimum,
decompositions and every scheduler (docs/ocs.md §1.9 B, issue 13 item 5)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainfabric.ocs.schedule import decompositions as dec
from trainfabric.ocs.schedule.bounds import all_matchings, exact_makespan, lower_bound
from trainfabric.ocs.schedule.demand import FAMILIES, delay_for, demand_matrix
from trainfabric.ocs.schedule.model import InvalidScheduleError, Slot, check_schedule, sequential
from trainfabric.ocs.schedule.schedulers import SCHEDULERS, Instance, run_schedulers

B = 12.5e9  # 100 Gb/s in bytes/s


@st.composite
def demands(draw, n_max=7):
    """Sparse skewed non-negative matrices with zero diagonal and some demand."""
    n = draw(st.integers(2, n_max))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    density = draw(st.sampled_from([0.2, 0.5, 1.0]))
    d = rng.lognormal(0.0, draw(st.sampled_from([0.0, 1.0, 2.5])), (n, n)) * 1e8
    d *= rng.random((n, n)) < density
    np.fill_diagonal(d, 0.0)
    if not d.any():
        d[0, 1] = 1e8
    return d


# -- the checker ------------------------------------------------------------------------


def test_checker_accepts_a_hand_schedule_and_reports_its_makespan():
    d = np.array([[0.0, 2.0], [1.0, 0.0]]) * B  # 2 s and 1 s of circuit time
    swap = np.array([1, 0])
    sched = sequential(2, 0.5, B, [[(swap, 2.0)]])
    assert check_schedule(d, sched) == pytest.approx(2.5)


@pytest.mark.parametrize(
    "slots, message",
    [
        ([Slot(np.array([1, 0, -1]), 0.5, 1.0)], "short of"),  # 1 s of the 2 s needed
        ([Slot(np.array([1, 0, -1]), 0.2, 2.0)], "delay"),  # starts before δ = 0.5
        ([Slot(np.array([1, 0, 2]), 0.5, 2.0)], "itself"),
        ([Slot(np.array([1, 0, 1]), 0.5, 2.0)], "matching"),  # 0 -> 1 and 2 -> 1
        ([Slot(np.array([1, 0, 3]), 0.5, 2.0)], "range"),
        ([Slot(np.array([1, 0, -1]), 0.5, 1.0), Slot(np.array([1, 0, -1]), 1.6, 1.0)], "delay"),
    ],
)
def test_checker_rejects_each_violation(slots, message):
    from trainfabric.ocs.schedule.model import Schedule

    d = np.array([[0.0, 2.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]) * B
    with pytest.raises(InvalidScheduleError, match=message):
        check_schedule(d, Schedule(3, 0.5, B, (tuple(slots),)))


# -- lower bound vs the exact optimum ---------------------------------------------------


def test_all_matchings_counts_against_closed_form():
    # Matchings of the complete bipartite graph K_{3,3} minus the diagonal (derangement
    # edges): 6 single edges, 9 pairs (2 edges not sharing a row or column), 2 derangements.
    assert len(all_matchings(np.ones((3, 3)) - np.eye(3))) == 6 + 9 + 2


@pytest.mark.parametrize(
    ("n", "seed"), [(3, seed) for seed in range(8)] + [(4, seed) for seed in range(3)]
)
@pytest.mark.parametrize("s", [1, 2])
def test_lower_bound_below_exact_optimum_and_schedulers_above(n, seed, s):
    rng = np.random.default_rng(seed)
    d = rng.lognormal(0, 1.5, (n, n)) * (rng.random((n, n)) < 0.8) * B
    np.fill_diagonal(d, 0.0)
    d[0, 1] = max(d[0, 1], B)
    delay = float(rng.choice([0.01, 0.3, 2.0]))
    opt, sched = exact_makespan(d, s, delay, B)
    assert check_schedule(d, sched) == pytest.approx(opt, rel=1e-5)
    lb = lower_bound(d, s, delay, B)
    assert lb <= opt * (1 + 1e-6)
    for res in run_schedulers(Instance(d, s, delay, B)).values():
        assert check_schedule(d, res.schedule) >= opt * (1 - 1e-5)


def test_lower_bound_is_tight_on_a_single_permutation():
    # One derangement of weight 1 s on s switches: split evenly, each piece pays δ once.
    d = np.roll(np.eye(5), 1, axis=1) * B
    for s in (1, 2, 4):
        assert lower_bound(d, s, 0.1, B) == pytest.approx(0.1 + 1 / s)
        opt = run_schedulers(Instance(d, s, 0.1, B))["ours"].makespan_s
        assert opt == pytest.approx(0.1 + 1 / s, rel=1e-6)


# -- decompositions ---------------------------------------------------------------------


@given(demands())
@settings(max_examples=25)
def test_stuffing_is_bistochastic_and_bvn_reconstructs_it(d):
    a, _ = dec.quantise(d)
    b = dec.stuff(a)
    m = b.sum(axis=1)[0]
    assert (b >= a).all() and (b.sum(axis=1) == m).all() and (b.sum(axis=0) == m).all()
    perms, weights = dec._peel(b.copy(), False)
    rebuilt = np.zeros_like(b)
    for p, w in zip(perms, weights, strict=True):
        assert np.unique(p).size == p.size  # perfect matching
        rebuilt[np.arange(p.size), p] += w
    assert (rebuilt == b).all()


@given(demands())
@settings(max_examples=25)
def test_colouring_uses_exactly_max_degree_matchings(d):
    a, _ = dec.quantise(d)
    nz = a > 0
    delta = max(nz.sum(axis=0).max(), nz.sum(axis=1).max())
    cols = dec.min_colouring(a)
    assert len(cols) == delta
    covered = np.zeros(a.shape, int)
    for p, _ in cols:
        on = p >= 0
        covered[np.flatnonzero(on), p[on]] += 1
    assert (covered == nz).all()  # each non-zero entry in exactly one colour class


# -- every scheduler on generated matrices ----------------------------------------------


@given(demands(), st.sampled_from([1, 2, 3, 8]), st.sampled_from([0.01, 0.1, 0.5]))
@settings(max_examples=30)
def test_every_schedule_is_valid_and_above_the_bound(d, s, rho):
    delay = delay_for(d, s, B, rho)
    lb = lower_bound(d, s, delay, B)
    results = run_schedulers(Instance(d, s, delay, B))
    assert set(results) == set(SCHEDULERS)
    for name, res in results.items():
        makespan = check_schedule(d, res.schedule)
        assert makespan == pytest.approx(res.makespan_s)
        assert makespan >= lb * (1 - 1e-9), name
    assert results["ours"].makespan_s <= results["spectra-like"].makespan_s


@pytest.mark.parametrize("family", FAMILIES)
def test_families_schedule_validly(family):
    d = demand_matrix(family, 16, seed=3)
    assert d.shape == (16, 16) and (np.diag(d) == 0).all() and (d >= 0).all() and d.any()
    delay = delay_for(d, 4, B, 0.1)
    lb = lower_bound(d, 4, delay, B)
    for res in run_schedulers(Instance(d, 4, delay, B)).values():
        assert check_schedule(d, res.schedule) >= lb * (1 - 1e-9)


def test_moe_family_has_the_requested_skew():
    # Column loads follow the shard shares: their spread must exceed multinomial noise alone.
    d = demand_matrix("moe", 32, seed=0)
    cols = d.sum(axis=0) / d.sum()
    assert cols.max() / cols.min() > 1.2


@given(demands(), st.sampled_from([0.0, 0.5, 0.9, 1.0]))
@settings(max_examples=20)
def test_colouring_residual_covers_the_matrix(d, q):
    a, _ = dec.quantise(d)
    served = np.zeros_like(a)
    for p, w in dec.colouring_residual(a, q):
        on = p >= 0
        assert np.unique(p[on]).size == on.sum()
        served[np.flatnonzero(on), p[on]] += w
    assert (served >= a).all()
