"""E8 of the OCS spec (change detection), as a part of ``benchmarks/ocs_online.py``.

``run(quick) -> dict`` runs the ``ocs-e8`` experiment (seed 0; ``quick`` = its QUICK
overrides: fewer streams and a shorter no-change horizon, the same pod counts, statistics and
change sizes) and condenses its table. It prints nothing; the caller merges the keys into its
JSON. Keys:

- ``false_alarm_rate``, ``delta``, ``false_alarm_ci``: the worst empirical P(any false alarm
  within the horizon) over the (detector, statistic, pods) cells at ``delta = 0.1``, the largest
  delta of the sweep and the one where the number of streams makes the estimate meaningful
  (0 alarms in 60 streams still leaves a 95% upper bound of 0.06), with that cell's 95%
  Clopper-Pearson interval; cells of the K = n(n-1) statistic, run on a few streams only, are
  in ``false_alarm_by_delta`` and the table, not in the headline.
  ``false_alarm_all_below_delta``: every cell at every delta has rate <= delta.
- ``arl0_lower_bound_slots``: a 95% lower confidence bound of the mean run length to a false
  alarm, ``T (1 - upper)`` with ``upper`` the pooled Clopper-Pearson upper bound of
  P(alarm within T) (``E[tau] >= T P(tau > T)``).
- ``detection_delay_over_bound``: mean delay (slots) / ``(log(1/delta) / (n KL_stat))`` at
  ``delta = 1e-3``, the median over the cells of the reduced statistics (marginals, top-r,
  gradient) where every stream detected the change; ``KL_stat`` is the divergence the statistic
  sees. The spec's bound ignores the ``(K-1) log N`` and union-bound terms of the threshold, so
  the ratio is large; ``detection_delay_over_lorden_bound`` divides by ``h / (n KL_stat)`` with
  ``h`` the threshold at the alarm (the spec's Lorden-type form) and should be near 1.
- ``delay_slope_vs_log_inv_delta``: per statistic, the median over cells of the least-squares
  slope of the mean crossing time against ``log(1/delta)``, times ``n KL_stat`` (1 = the slope
  ``1/(n KL)`` of the spec; target within 20%), over cells where the predicted spread
  ``log(1e5) / (n KL_stat)`` is at least one slot.
- ``reduced_speedup_vs_full``: mean delay of K = n(n-1) over that of the per-pod marginals
  (K = n; fixed as the headline reduction before measuring) on the same streams at the
  smallest delta, the median over the ablation cells; per statistic, and for the union of the
  three reduced detectors (each at delta / 3, P(false alarm) <= delta), in
  ``reduced_speedup_by_statistic`` (a reduced statistic that misses the change counts 0) and
  per planted change in ``reduced_speedup_by_change``. Each reduced detector runs at
  delta / 3 (as inside the union; K = n(n-1) at delta). A reduction is faster only for changes
  it sees (the per-pod marginals carry all of a hot-pod change and little of a heavy-pairs
  one; the gradient categories are, by the definition of that change, exactly the heavy
  pairs); the union sees what any of them sees.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pandas as pd
from scipy.stats import binomtest

from trainfabric.experiments.ocs_detect_studies import QUICK, REDUCED, OcsE8Config, ocs_e8

HEADLINE_DELTA = 0.1
DELAY_DELTA = 1e-3


def run(quick: bool) -> dict:
    """Run E8 and return its headline keys (see the module docs)."""
    config = OcsE8Config(**(QUICK if quick else {}))
    start = time.perf_counter()
    table = ocs_e8(config, seed=0)
    wall = time.perf_counter() - start
    fa = table[table["part"] == "false_alarm"]
    delay = table[table["part"] == "delay"]
    return {
        **_false_alarms(fa, config),
        **_delays(delay),
        **_speedups(table[table["part"] == "ablation"], config.max_delay_slots),
        "e8_config": config.model_dump(),
        "e8_wall_s": wall,
    }


def _ci(alarms: int, streams: int) -> list[float]:
    ci = binomtest(int(alarms), int(streams)).proportion_ci(0.95, method="exact")
    return [ci.low, ci.high]


def _false_alarms(fa: pd.DataFrame, config: OcsE8Config) -> dict:
    by_delta = {}
    for delta, g in fa.groupby("delta"):
        alarms, streams = int(g["alarms"].sum()), int(g["streams"].sum())
        ci = _ci(alarms, streams)
        by_delta[f"{delta:g}"] = {
            "worst_rate": float(g["false_alarm_rate"].max()),
            "pooled_rate": alarms / streams,
            "pooled_ci": ci,
            "streams": streams,
            "arl0_lower_bound_slots": config.fa_slots * (1 - ci[1]),
        }
    main = fa[(fa["delta"] == HEADLINE_DELTA) & (fa["statistic"] != "pairs")]
    worst = main.sort_values(["false_alarm_rate", "streams"], ascending=[False, False]).iloc[0]
    return {
        "false_alarm_rate": float(worst["false_alarm_rate"]),
        "delta": HEADLINE_DELTA,
        "false_alarm_ci": _ci(worst["alarms"], worst["streams"]),
        "false_alarm_worst_cell": f"{worst['detector']}/{worst['statistic']}/n={worst['pods']}",
        "false_alarm_all_below_delta": bool((fa["false_alarm_rate"] <= fa["delta"]).all()),
        "false_alarm_by_delta": by_delta,
        "arl0_lower_bound_slots": by_delta[f"{HEADLINE_DELTA:g}"]["arl0_lower_bound_slots"],
    }


def _delays(delay: pd.DataFrame) -> dict:
    cells = ["detector", "statistic", "pods", "change", "kl"]
    full = delay[delay["detected"] == 1.0]
    at = full[np.isclose(full["delta"], DELAY_DELTA)]
    ratio = at["mean_delay"] / at["spec_bound"]
    lorden = at["mean_delay"] / at["lorden_bound"]
    reduced = at["statistic"].isin(REDUCED)
    slopes = {}
    for key, g in full.groupby(cells):
        rate = g["nats_per_slot"].iloc[0]
        if len(g) >= 3 and math.log(1e5) / rate >= 1:
            slope = np.polyfit(np.log(1 / g["delta"]), g["crossing"], 1)[0]
            slopes.setdefault(key[1], []).append(slope * rate)
    return {
        "detection_delay_over_bound": float(ratio[reduced].median()),
        "detection_delay_over_bound_by_statistic": _median_by(at, ratio),
        "detection_delay_over_lorden_bound": float(lorden[reduced].median()),
        "detection_delay_over_lorden_bound_by_statistic": _median_by(at, lorden),
        "delay_slope_vs_log_inv_delta": {k: float(np.median(v)) for k, v in slopes.items()},
        "delay_slope_cells": {k: len(v) for k, v in slopes.items()},
        "detected_share_by_statistic": {
            s: float((g.groupby(cells)["detected"].min() == 1).mean())
            for s, g in delay[np.isclose(delay["delta"], DELAY_DELTA)].groupby("statistic")
        },
    }


def _median_by(rows: pd.DataFrame, values: pd.Series) -> dict:
    return {s: float(values[rows["statistic"] == s].median()) for s in rows["statistic"].unique()}


def _speedups(ablation: pd.DataFrame, horizon: int) -> dict:
    """Mean delay of K = n(n-1) over that of each reduced statistic and of their union, on the
    same streams; where K = n(n-1) missed the change within the horizon its delay counts as
    the horizon (a lower bound on the speedup, counted in ``reduced_speedup_censored``); a
    reduced statistic that missed it counts 0."""
    full = ablation["delay_pairs"].where(ablation["detected_pairs"] == 1, float(horizon))
    by_stat, by_change = {}, {}
    for stat in (*REDUCED, "union"):
        speed = (full / ablation[f"delay_{stat}"]).where(ablation[f"detected_{stat}"] == 1, 0.0)
        by_stat[stat] = float(speed.median())
        for change, g in speed.groupby(ablation["change"]):
            by_change.setdefault(change, {})[stat] = float(g.median())
    return {
        "reduced_speedup_vs_full": by_stat["marginals"],
        "reduced_speedup_by_statistic": by_stat,
        "reduced_speedup_by_change": by_change,
        "reduced_speedup_cells": len(ablation),
        "reduced_speedup_censored": int((ablation["detected_pairs"] < 1).sum()),
    }
