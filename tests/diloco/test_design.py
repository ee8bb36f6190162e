"""The experiment design (one primary tested alone, one Holm family of every secondary,
verdict words only below alpha) and the power calculation, against closed forms, scipy and
brute force."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from trainfabric.diloco import stats as S
from trainfabric.errors import ConfigError

LEAD = "wa_forecast"
SLO, TOK, WALL, FINAL = (
    S.Comparison(LEAD, m).name
    for m in ("slo_violation_rate", "loss_equal_tokens", "loss_equal_wall", "final_loss")
)


def test_the_reviewers_case_is_not_better_after_holm():
    """The live result: loss at equal tokens p = 0.027, one of three loss comparisons, mean
    in the policy's favour. Uncorrected it would read "better"; in the family of three its
    Holm p is 3 x 0.027 = 0.081, so the verdict is "no difference detected"."""
    design = S.Design.for_policies([LEAD])
    p = {SLO: 0.695, TOK: 0.027, WALL: 0.375, FINAL: 0.084}
    got = design.decide(p, dict.fromkeys(p, -0.1))
    assert got[TOK]["p_adjusted"] == pytest.approx(0.081)
    assert got[TOK]["verdict"] == S.NO_DIFFERENCE
    assert got[FINAL]["p_adjusted"] == pytest.approx(2 * 0.084)
    assert got[WALL]["p_adjusted"] == pytest.approx(0.375)
    assert {r["family_size"] for n, r in got.items() if n != SLO} == {3}
    # with a second policy the family is 3 + 4 = 7 and the same p is further from 0.05
    two = S.Design.for_policies([LEAD, "fixed_h"])
    assert two.family_size == 7
    got = two.decide(p, dict.fromkeys(p, -0.1))
    assert got[TOK]["p_adjusted"] == pytest.approx(7 * 0.027)
    assert got[TOK]["verdict"] == S.NO_DIFFERENCE
    # and alone (a family of one) the same p would have been a claim: the family decides
    alone = S.Design(
        S.Comparison(LEAD, "slo_violation_rate"), (S.Comparison(LEAD, "loss_equal_tokens"),)
    )
    assert alone.decide(p, dict.fromkeys(p, -0.1))[TOK]["verdict"] == S.BETTER


def test_the_family_is_every_secondary_and_never_the_primary():
    design = S.Design.for_policies(["a", "b", "c"], primary_policy="b")
    names = [c.name for c in design.secondary]
    assert design.primary.name == "slo_violation_rate[b]" and design.primary.name not in names
    assert design.family_size == 3 + 2 * 4 == len(set(names))
    assert set(names) == {
        S.Comparison(pol, m).name for pol in "abc" for m in ("slo_violation_rate", *S.LOSS_METRICS)
    } - {design.primary.name}
    rng = np.random.default_rng(0)
    p = {n: float(x) for n, x in zip(names, rng.uniform(0, 0.05, len(names)), strict=True)}
    p[design.primary.name] = 0.04
    got = design.decide(p, dict.fromkeys(p, 1.0))
    assert got[design.primary.name]["p_adjusted"] == 0.04  # tested alone
    assert (
        got[design.primary.name]["verdict"] == S.WORSE
        and got[design.primary.name]["role"] == "primary"
    )
    adj = S.holm([p[n] for n in names])
    assert [got[n]["p_adjusted"] for n in names] == pytest.approx(adj)
    # the primary's p never enters the family: changing it changes no secondary
    p2 = p | {design.primary.name: 1e-9}
    got2 = design.decide(p2, dict.fromkeys(p, 1.0))
    assert all(got2[n]["p_adjusted"] == got[n]["p_adjusted"] for n in names)


def test_holm_closed_form():
    """Holm on sorted p_(1..m): max over j <= i of (m - j + 1) p_(j), capped at 1."""
    assert S.holm([0.01, 0.04, 0.03, 0.005]).tolist() == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert S.holm([]).size == 0


def test_a_design_refuses_its_primary_among_the_secondaries():
    c = S.Comparison(LEAD, "slo_violation_rate")
    with pytest.raises(ConfigError) as exc:
        S.Design(c, (c,))
    assert exc.value.field == "design"
    with pytest.raises(ConfigError) as exc:
        S.Design.for_policies(["fixed_h"], primary_policy=LEAD)
    assert exc.value.field == "primary_policy"
    with pytest.raises(ConfigError):
        S.Design(c, (), test="t")


def test_a_planned_secondary_without_data_still_counts_in_the_family():
    design = S.Design.for_policies([LEAD])
    got = design.decide({SLO: 0.5, TOK: 0.01, WALL: None}, {SLO: 1, TOK: -1, WALL: None})
    assert got[WALL]["verdict"] == S.NOT_TESTED and got[FINAL]["verdict"] == S.NOT_TESTED
    assert got[TOK]["p_adjusted"] == pytest.approx(0.03)  # m = 3, not 1
    assert got[TOK]["verdict"] == S.BETTER


def test_evaluate_on_differences_uses_the_sign_flip_test():
    """All ten differences negative: p = 2/1024 alone, better; their mirror worse; the
    Wilcoxon and sign tests are not consulted."""
    design = S.Design.for_policies([LEAD], losses=("final_loss",))
    d = -np.arange(1.0, 11.0)
    got = design.evaluate({SLO: d, FINAL: -d})
    assert got[SLO]["p"] == pytest.approx(2 / 1024) and got[SLO]["verdict"] == S.BETTER
    assert got[FINAL]["verdict"] == S.WORSE and got[FINAL]["test"] == "sign_flip"
    mixed = np.r_[-np.ones(6), np.ones(4)]
    got = design.evaluate({SLO: mixed, FINAL: [np.nan, np.nan]})
    assert got[SLO]["verdict"] == S.NO_DIFFERENCE and got[FINAL]["verdict"] == S.NOT_TESTED


def test_check_names_designs_that_cannot_find_anything():
    """10 seeds: smallest exact p 2/2^10 = 0.00195, above Holm's first step over 26
    (0.05/26 = 0.00192): no secondary of 26 can be found; 11 seeds can. 5 seeds cannot find
    the primary (0.0625 >= 0.05): a ConfigError naming the field."""
    policies = [LEAD, *(f"p{i}" for i in range(6))]
    design = S.Design.for_policies(policies, losses=("loss_equal_tokens", "final_loss"))
    assert design.family_size == 2 + 6 * 3 == 20
    design26 = S.Design(
        design.primary, tuple(S.Comparison(f"q{i}", "final_loss") for i in range(26))
    )
    (msg,) = design26.check(10)
    assert "Holm over 26" in msg and "0.00195 >= 0.05/26 = 0.00192" in msg
    assert "at least 11 seeds" in msg
    assert design26.check(11) == []
    assert S.min_pairs(0.05 / 26) == 11 and S.min_pairs(0.05) == 6 and S.min_pairs(0.0625) == 6
    primary, family = S.Design.for_policies([LEAD]).check(5)
    assert "cannot reach alpha = 0.05 with 5 paired seeds" in primary and "0.0625" in primary
    with pytest.raises(ConfigError) as exc:
        S.Design.for_policies([LEAD]).require(5, "seeds")
    assert exc.value.field == "seeds" and "at least 6 seeds" in exc.value.message


# -- power ----------------------------------------------------------------------------------------
def test_t_power_matches_simulated_t_tests():
    """The noncentral-t closed form against scipy's paired t-test on 20,000 normal draws."""
    rng = np.random.default_rng(11)
    for n, dz in ((8, 1.0), (20, 0.5)):
        x = rng.normal(dz, 1.0, size=(20_000, n))
        rate = np.mean(stats.ttest_1samp(x, 0.0, axis=1).pvalue < 0.05)
        assert S.t_power(dz, 1.0, n) == pytest.approx(rate, abs=0.012)


@settings(max_examples=15)
@given(n=st.integers(1, 10), dz=st.floats(0.0, 2.0), seed=st.integers(0, 100))
def test_sign_flip_power_equals_brute_force(n, dz, seed):
    """The vectorised simulation rejects exactly where the reference test (checked against
    scipy's permutation_test in test_stats) gives p < 0.05, draw by draw."""
    got = S.sign_flip_power(dz, 1.0, n, datasets=60, seed=seed)
    x = np.random.default_rng(seed).normal(dz, 1.0, size=(60, n))
    assert got == np.mean([S.sign_flip_test(row) < 0.05 for row in x])


def test_sign_flip_power_closed_form_at_six_pairs():
    """With 6 pairs p < 0.05 needs the observed assignment (and its mirror) alone in the
    extreme: all six signs equal. Power = Φ(δ/σ)^6 + Φ(−δ/σ)^6 exactly."""
    for dz in (0.5, 1.0, 2.0):
        q = stats.norm.cdf(dz)
        exact = q**6 + (1 - q) ** 6
        se = math.sqrt(exact * (1 - exact) / 20_000)
        assert S.sign_flip_power(dz, 1.0, 6, datasets=20_000) == pytest.approx(exact, abs=4 * se)
    assert S.sign_flip_power(50.0, 1.0, 5) == 0.0  # 2/32 >= 0.05: never


def test_seeds_for_power_closed_forms():
    # a huge effect: the exact test's floor decides (2/2^n < alpha)
    assert S.seeds_for_power(50.0, 1.0) == 6
    assert S.seeds_for_power(50.0, 1.0, alpha=0.01) == 8
    assert S.seeds_for_power(1.0, 0.0) == 6  # no spread at all
    # moderate: the smallest n of the noncentral-t power (the simulation agrees)
    n = S.seeds_for_power(0.5, 1.0)
    assert S.t_power(0.5, 1.0, n - 1) < 0.8 <= S.t_power(0.5, 1.0, n)
    z = stats.norm.ppf(0.975) + stats.norm.ppf(0.8)
    assert math.ceil((z / 0.5) ** 2) <= n <= math.ceil((z / 0.5) ** 2 + z**2 / 2) + 1
    # small n: the t-test would take 6 pairs, but the exact test at 6 has power
    # Φ(1.5)^6 + Φ(-1.5)^6 = 0.66; the simulation step adds the seventh
    assert S.t_power(1.5, 1.0, 6) >= 0.8
    assert stats.norm.cdf(1.5) ** 6 + stats.norm.cdf(-1.5) ** 6 < 0.7
    assert S.seeds_for_power(1.5, 1.0) == 7
    with pytest.raises(ConfigError):
        S.seeds_for_power(0.0, 1.0)
    with pytest.raises(ConfigError):
        S.seeds_for_power(1e-6, 1.0)  # more than MAX_SEEDS


def test_chosen_n_has_the_power_in_an_independent_simulation():
    """n for δ/σ = 0.8, checked by a brute-force loop of the reference test on fresh draws."""
    n = S.seeds_for_power(0.8, 1.0)
    x = np.random.default_rng(12345).normal(0.8, 1.0, size=(400, n))
    rate = np.mean([S.sign_flip_test(row) < 0.05 for row in x])
    assert rate >= 0.8 - 3 * math.sqrt(0.16 / 400)


def test_power_plan_states_the_pilot_and_the_choice():
    pilot = [0.11818181818181822, -0.064]  # the live --quick run's two SLO differences
    plan = S.power_plan(pilot, seeds_used=10)
    mean, sd = np.mean(pilot), np.std(pilot, ddof=1)
    assert plan["pilot_effect"] == pytest.approx(mean) and plan["pilot_sd"] == pytest.approx(sd)
    assert plan["pilot_seeds"] == 2 and plan["test"] == "sign_flip" and plan["alpha"] == 0.05
    assert plan["n_required"] == S.seeds_for_power(abs(mean), sd) == 180
    assert plan["sufficient"] is False and plan["seeds_used"] == 10
    capped = S.power_plan(pilot, max_seeds=50)
    assert capped["n_chosen"] == 50 and "capped" in capped["note"]
    zero = S.power_plan([0.1, -0.1])
    assert zero["n_required"] is None and "exactly 0" in zero["note"]
    assert S.power_plan([0.1])["n_required"] is None
