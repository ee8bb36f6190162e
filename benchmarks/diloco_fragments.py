"""Fragment-level scheduling on the simulator: per-fragment WA vs per-fragment matched random
vs whole-model WA (bursty regime, 10,000 windows of 1 s).

Arms, on the same seeds (the same requests: paired):

* ``wa_fragments``: ``wa_forecast`` (the protocol's primary policy: the WA-DiLoCo score with
  the EWMA serving forecast) deciding per fragment on the fragment model
  (:class:`trainfabric.diloco.fleet.FragmentModel`: P = 4 fragments staggered over H = 256
  steps, each sync moving 1/4 of the 1B-parameter model);
* ``matched_random_fragments``: per fragment, ``draws`` schedules with exactly that fragment's
  sync count of ``wa_fragments`` on that seed, drawn uniformly under the guards
  (:func:`trainfabric.diloco.protocol.matched_fragment_blocks`); its mean per seed is the
  paired control; ``budget_exact`` checks every draw's count per fragment against the
  controller's;
* ``wa_whole``: ``wa_forecast`` on the whole model (P = 1, today's simulator);
* ``no_sync``: the same load with no sync (the SLO floor), for reference.

Statistics (:class:`trainfabric.diloco.stats.Design`), named before the run: the **primary**
comparison is ``wa_fragments`` vs ``matched_random_fragments`` on the SLO violation rate
(paired sign-flip test, alone at alpha 0.05); the **secondary** comparisons, one Holm family of
3: its final loss vs matched random, and ``wa_fragments`` vs ``wa_whole`` on SLO violation rate
and final loss. Wilcoxon, the sign test and bootstrap CIs are reported beside. The seeds: a
pilot of 10 seeds (from 20,000 on, not evaluated) gives the primary's effect and sd;
:func:`~trainfabric.diloco.stats.power_plan` turns them into the seeds a power of 0.8 needs
(at least 10, the family's floor for Holm over 3 being 7; at most 50); ``--quick`` uses 10
seeds and 5 draws whatever the pilot says (and says whether that suffices).
"""

from __future__ import annotations

import time

import numpy as np
from _common import emit, parser

REGIME = "bursty"
POLICY = "wa_forecast"
P, STAGGER, WINDOWS = 4, 256, 10_000
PILOT_SEED0, PILOT_SEEDS, MIN_SEEDS, MAX_SEEDS = 20_000, 10, 10, 50
ALPHA, POWER = 0.05, 0.8


def main() -> None:
    args = parser(__doc__.splitlines()[0]).parse_args()
    from trainfabric.diloco import stats
    from trainfabric.diloco.fleet import FleetConfig, FragmentModel, get_regime

    t0 = time.perf_counter()
    regime, fleet = get_regime(REGIME), FleetConfig(windows=WINDOWS)
    frag = FragmentModel(fragments=P, stagger_steps=STAGGER)
    draws = 5 if args.quick else 10
    design = _design(stats)
    pilot = _arms(regime, fleet, frag, PILOT_SEED0 + np.arange(PILOT_SEEDS), draws, whole=False)
    plan = stats.power_plan(pilot["primary"], ALPHA, POWER, max_seeds=MAX_SEEDS)
    n = MIN_SEEDS if args.quick else max(MIN_SEEDS, int(plan["n_chosen"]))
    plan |= {"pilot_first_seed": PILOT_SEED0, "seeds_used": n}
    plan["sufficient"] = None if plan["n_required"] is None else n >= plan["n_required"]
    res = _arms(regime, fleet, frag, np.arange(n), draws, whole=True)
    decided = design.evaluate(res["diffs"])
    emit(
        "diloco_fragments",
        {
            "regime": REGIME,
            "policy": POLICY,
            "fragments": P,
            "stagger_steps": STAGGER,
            "windows": WINDOWS,
            "fragment_sync_s": frag.sync_s(regime),
            "whole_sync_s": regime.sync_s,
            "seeds": n,
            "envelope_draws": draws,
            "budget_exact": res["budget_exact"] and pilot["budget_exact"],
            "arms": res["arms"],
            "comparisons": _comparisons(stats, design, decided, res["diffs"]),
            "primary_verdict": decided[design.primary.name]["verdict"],
            "design": _design_words(design, n),
            "power": plan,
            "warnings": design.check(n),
            "wall_s": time.perf_counter() - t0,
        },
        args.out,
    )


LABELS = {
    "slo_violation_rate[wa_fragments]": "wa_fragments vs matched_random_fragments: SLO "
    "violation rate (pp)",
    "final_loss[wa_fragments]": "wa_fragments vs matched_random_fragments: final loss (nats)",
    "slo_violation_rate[wa_fragments_vs_whole]": "wa_fragments vs wa_whole: SLO violation "
    "rate (pp)",
    "final_loss[wa_fragments_vs_whole]": "wa_fragments vs wa_whole: final loss (nats)",
}


def _design(stats):
    """The primary comparison and the Holm family (module doc), fixed before any run."""
    C = stats.Comparison
    return stats.Design(
        C("wa_fragments", "slo_violation_rate"),
        (
            C("wa_fragments", "final_loss"),
            C("wa_fragments_vs_whole", "slo_violation_rate"),
            C("wa_fragments_vs_whole", "final_loss"),
        ),
        ALPHA,
    )


def _design_words(design, n: int) -> dict:
    return {
        "primary": LABELS[design.primary.name],
        "primary_test": f"{design.test}, alone at alpha {design.alpha:g}",
        "secondary": [LABELS[c.name] for c in design.secondary],
        "secondary_correction": f"Holm over the {design.family_size} secondaries together",
        "paired_seeds": n,
        "differences": "first arm minus second, per seed (lower is better)",
        "reported_only": ["wilcoxon", "sign", "bootstrap 95% CI"],
    }


def _arms(regime, fleet, frag, seeds, draws: int, whole: bool) -> dict:
    """Every arm on ``seeds``: per-arm means, the paired differences by comparison name, and
    whether the matched draws kept every fragment's count."""
    from trainfabric.diloco.fleet import Block, simulate
    from trainfabric.diloco.policies import make_policy
    from trainfabric.diloco.protocol import matched_fragment_blocks

    S = len(seeds)
    ours = simulate(fleet, regime, [Block(make_policy(POLICY), seeds)], fragments=frag)
    budgets = ours.fragment_syncs.reshape(1, S, frag.fragments)
    wa = make_policy(POLICY)
    blocks = matched_fragment_blocks([wa], budgets, seeds, draws, regime, fleet, frag)
    ctl = simulate(fleet, regime, blocks, fragments=frag)
    kept = ctl.fragment_syncs.reshape(S, draws, frag.fragments)
    exact = bool(np.array_equal(kept, np.repeat(budgets[0][:, None], draws, axis=1)))
    a, m = ours.table, ctl.table
    slo = a["slo_violation_rate"].to_numpy()
    m_slo = m["slo_violation_rate"].to_numpy().reshape(S, draws).mean(axis=1)
    loss = a["final_loss"].to_numpy()
    m_loss = m["final_loss"].to_numpy().reshape(S, draws).mean(axis=1)
    diffs = {
        "slo_violation_rate[wa_fragments]": 100.0 * (slo - m_slo),
        "final_loss[wa_fragments]": loss - m_loss,
    }
    out = {"primary": diffs["slo_violation_rate[wa_fragments]"], "budget_exact": exact}
    if not whole:
        return out
    w = simulate(fleet, regime, [Block(make_policy(POLICY), seeds)]).table
    floor = simulate(fleet, regime, [Block(make_policy("fixed_h"), seeds)], sync=False).table
    diffs["slo_violation_rate[wa_fragments_vs_whole]"] = 100.0 * (
        slo - w["slo_violation_rate"].to_numpy()
    )
    diffs["final_loss[wa_fragments_vs_whole]"] = loss - w["final_loss"].to_numpy()
    arms = {
        "wa_fragments": _summary(a),
        "matched_random_fragments": _summary(m),
        "wa_whole": _summary(w),
        "no_sync": {"slo_violation_rate": float(floor["slo_violation_rate"].mean())},
    }
    arms["wa_fragments"]["syncs_per_fragment"] = budgets[0].mean(axis=0).tolist()
    return out | {"diffs": diffs, "arms": arms}


def _summary(t) -> dict:
    """Means over the arm's runs (SLO as a rate, syncs, time syncing, tokens, loss)."""
    cols = ("slo_violation_rate", "syncs", "sync_time_fraction", "tokens_trained", "final_loss")
    return {c: float(t[c].mean()) for c in cols}


def _comparisons(stats, design, decided: dict, diffs: dict) -> dict:
    """Per comparison: its role, mean difference, CI, p-values, seeds better and verdict."""
    out = {}
    for name, row in decided.items():
        d = np.asarray(diffs[name], float)
        lo, hi = stats.bootstrap_ci(d, seed=len(out))
        out[LABELS[name]] = {
            "role": row["role"],
            "mean_diff": float(d.mean()),
            "ci95": [lo, hi],
            "p_sign_flip": row["p"],
            "p_adjusted": row["p_adjusted"],
            "p_wilcoxon": stats.wilcoxon(d),
            "p_sign": stats.sign_test(d),
            "seeds_better": int((d < 0).sum()),
            "seeds_worse": int((d > 0).sum()),
            "verdict": row["verdict"],
        }
    return out


if __name__ == "__main__":
    main()
