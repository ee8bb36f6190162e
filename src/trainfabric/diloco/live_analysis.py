"""Analysis of live DiLoCo runs: serving inside vs outside syncs, loss at equal tokens and at
equal wall-clock, the sync-time regression, paired tests and the sim-vs-real effect ratio.

Pure numpy/scipy on tables the live runner writes (no torch, no server), so every figure of
``trainfabric diloco live`` can be recomputed from a run directory. Times are seconds since
the run's start, rates are fractions in [0, 1].

* **Inside vs outside syncs** (:func:`latency_split`): a request is *inside* when its lifetime
  ``[arrival, finish]`` overlaps a sync interval ``[start, end)`` (an unfinished request lives
  to the horizon). Per group: requests, SLO violation rate, mean TTFT and TPOT, each with a
  percentile bootstrap CI over requests (seeded), and the difference inside − outside with the
  CI of the two groups resampled independently. Requests close in time are correlated (a
  queue), so these CIs are narrower than a block bootstrap's: they describe this run, the
  paired tests over seeds carry the evidence.
* **Ratio of medians** (:func:`ratio_of_medians`): ``median(inside) / median(outside)`` of a
  latency, with a percentile bootstrap CI that resamples the two groups independently
  (the serving testbed's sync cost, :mod:`~trainfabric.diloco.live_testbed`).
* **Equal tokens / equal wall-clock** (:func:`loss_at`): the eval loss of a run at ``x0``
  tokens (or seconds) by linear interpolation of its eval curve; runs of one comparison are
  read at the largest ``x0`` every one of them reached (:func:`common_point`), never
  extrapolated.
* **Sync-time regression** (:func:`sync_time_regression`): ordinary least squares of the
  excess SLO violation rate (a run's rate minus the no-sync run of its seed) on the share of
  wall time spent syncing, ``excess = a + b f``. The share of a paired effect that it explains
  (:func:`explained_share`) is ``b · mean(f_policy − f_control) / mean(slo_policy −
  slo_control)``: near 1, the policy differs from its control by how long it synced, not by
  when.
* **Paired tests** (:func:`paired`): the sign-flip test (the design's test, which gives
  every verdict: :class:`~trainfabric.diloco.stats.Design`), Wilcoxon and the sign test
  (reported only) with a bootstrap CI of the mean difference; with ``n`` non-zero pairs no
  exact two-sided test goes below :func:`min_attainable_p` ``= 2 / 2^n``.
* **Effect ratio** (:func:`effect_ratio`): ``sim_vs_real_effect_ratio = mean_seeds(SLO_sim(policy)
  − SLO_sim(matched random)) / mean_seeds(SLO_real(policy) − SLO_real(matched random))``. 1 means
  the simulator predicts the live effect; a ratio far from 1, or of the wrong sign, means it
  does not. When the live effect is exactly 0 the ratio is undefined (``None`` with a reason);
  when the live effect's CI contains 0 the ratio is reported but flagged
  ``real_effect_significant = False`` (it then divides by noise).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from trainfabric.diloco import stats
from trainfabric.errors import ConfigError

BOOT_DRAWS = 2000
min_attainable_p = stats.min_attainable_p
COLUMNS = (("slo_violation_rate", "violated"), ("ttft_s", "ttft_s"), ("tpot_s", "tpot_s"))


def _intervals(intervals) -> tuple[np.ndarray, np.ndarray]:
    iv = np.asarray(intervals, float).reshape(-1, 2)
    if iv.size and (not np.all(np.isfinite(iv)) or np.any(iv[:, 1] < iv[:, 0])):
        raise ConfigError("sync_intervals", "need finite [start, end] pairs with end >= start")
    order = np.argsort(iv[:, 0], kind="stable")
    return iv[order, 0], iv[order, 1]


def overlaps(start, end, intervals) -> np.ndarray:
    """``[start_i, end_i]`` overlaps any ``[a, b)`` of ``intervals`` (a list of pairs).

    Sync intervals of one run do not overlap each other (syncs are serial), so per request
    only the first interval ending after its start can overlap it."""
    start, end = np.asarray(start, float), np.asarray(end, float)
    a, b = _intervals(intervals)
    if a.size == 0:
        return np.zeros(start.shape, bool)
    ends = np.maximum.accumulate(b)
    k = np.searchsorted(ends, start, side="right")  # first interval with end > start
    ok = k < a.size
    out = np.zeros(start.shape, bool)
    out[ok] = a[k[ok]] <= end[ok]
    return out


def _boot_means(x: np.ndarray, rng) -> np.ndarray:
    """``BOOT_DRAWS`` bootstrap means of ``x`` (NaN when ``x`` is empty)."""
    if x.size == 0:
        return np.full(BOOT_DRAWS, np.nan)
    return x[rng.integers(x.size, size=(BOOT_DRAWS, x.size))].mean(axis=1)


def _ci(means: np.ndarray, level: float) -> list[float | None]:
    if not np.all(np.isfinite(means)):
        return [None, None]
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return [float(lo), float(hi)]


def latency_split(
    requests: pd.DataFrame,
    sync_intervals,
    horizon_s: float,
    level: float = 0.95,
    seed: int = 0,
) -> dict:
    """Serving inside vs outside syncs (module doc).

    ``requests`` has ``arrival_s``, ``finish_s`` (NaN when unfinished), ``ttft_s``,
    ``tpot_s`` (NaN where undefined) and ``violated`` (bool)."""
    for col in ("arrival_s", "finish_s", "ttft_s", "tpot_s", "violated"):
        if col not in requests:
            raise ConfigError(f"requests.{col}", "missing column")
    finish = requests["finish_s"].to_numpy(float)
    end = np.where(np.isfinite(finish), finish, horizon_s)
    inside = overlaps(requests["arrival_s"].to_numpy(float), end, sync_intervals)
    rng = np.random.default_rng([seed, 4242])
    out: dict = {}
    boots: dict = {}
    for name, mask in (("inside", inside), ("outside", ~inside)):
        group = requests[mask]
        row = {"requests": int(mask.sum())}
        for key, col in COLUMNS:
            x = group[col].to_numpy(float)
            x = x[np.isfinite(x)]
            means = _boot_means(x, rng)
            row[key] = float(x.mean()) if x.size else None
            row[f"{key}_ci"] = _ci(means, level)
            boots[(name, key)] = means
        out[name] = row
    out["difference"] = {
        key: {
            "inside_minus_outside": (
                out["inside"][key] - out["outside"][key]
                if out["inside"][key] is not None and out["outside"][key] is not None
                else None
            ),
            "ci": _ci(boots[("inside", key)] - boots[("outside", key)], level),
        }
        for key, _ in COLUMNS
    }
    out["level"] = level
    return out


def ratio_of_medians(inside, outside, level: float = 0.95, draws: int = BOOT_DRAWS,
                     seed: int = 0) -> dict:  # fmt: skip
    """``median(inside) / median(outside)`` (non-finite values dropped) and its percentile
    bootstrap CI at ``level``: ``draws`` resamples of each group with replacement,
    independently, seeded; ``None`` where a group is empty or a median is 0."""
    x, y = (np.asarray(v, float) for v in (inside, outside))
    x, y = x[np.isfinite(x)], y[np.isfinite(y)]
    out = {"n_inside": int(x.size), "n_outside": int(y.size), "ratio": None, "ci": [None, None]}
    out |= {"median_inside": float(np.median(x)) if x.size else None}
    out |= {"median_outside": float(np.median(y)) if y.size else None}
    if not (x.size and y.size) or out["median_outside"] == 0:
        return out
    rng = np.random.default_rng([seed, 5151])
    bx = np.median(x[rng.integers(x.size, size=(draws, x.size))], axis=1)
    by = np.median(y[rng.integers(y.size, size=(draws, y.size))], axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = bx / by
    out["ratio"] = out["median_inside"] / out["median_outside"]
    out["ci"] = _ci(ratios, level)
    return out


def loss_at(x, y, x0: float) -> float:
    """``y`` at ``x0`` by linear interpolation of the curve ``(x, y)`` (sorted by ``x``);
    ``x0`` must lie within the curve (no extrapolation)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if x.size == 0:
        raise ConfigError("eval_curve", "no finite eval points")
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    if not x[0] - 1e-9 <= x0 <= x[-1] + 1e-9:
        raise ConfigError("eval_curve", f"{x0:g} outside the curve's range [{x[0]:g}, {x[-1]:g}]")
    return float(np.interp(x0, x, y))


def common_point(curves: list[tuple]) -> float:
    """The largest ``x0`` every curve ``(x, y)`` reaches (the minimum of their maxima)."""
    return float(min(np.nanmax(np.asarray(x, float)) for x, _ in curves))


def ols(x, y) -> dict:
    """Least squares ``y = a + b x``: intercept, slope, ``R^2`` (0 when ``y`` is constant)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if x.size < 3 or np.ptp(x) == 0:
        return {"intercept": None, "slope": None, "r2": None, "n": int(x.size)}
    b, a = np.polyfit(x, y, 1)
    resid = y - (a + b * x)
    ss = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float((resid**2).sum()) / ss if ss > 0 else 0.0
    return {"intercept": float(a), "slope": float(b), "r2": r2, "n": int(x.size)}


def sync_time_regression(runs: pd.DataFrame) -> dict:
    """OLS of excess SLO (a run minus its seed's no-sync run) on ``sync_time_fraction`` over
    the syncing runs of ``runs`` (columns ``policy``, ``seed``, ``slo_violation_rate``,
    ``sync_time_fraction``; the no-sync rows have ``policy == "no_sync"``)."""
    floor = runs[runs["policy"] == "no_sync"].set_index("seed")["slo_violation_rate"]
    sync = runs[(runs["policy"] != "no_sync") & runs["seed"].isin(floor.index)]
    excess = sync["slo_violation_rate"].to_numpy() - floor.loc[sync["seed"]].to_numpy()
    return ols(sync["sync_time_fraction"].to_numpy(), excess)


def explained_share(slope, d_fraction, d_slo) -> float | None:
    """Share of a paired SLO effect the sync-time fraction explains (module doc)."""
    d_slo = float(np.mean(d_slo))
    if slope is None or d_slo == 0:
        return None
    return float(slope * np.mean(d_fraction) / d_slo)


def paired(d, seed: int = 0) -> dict:
    """Paired tests of the differences ``d`` (policy − control, one per seed)."""
    d = np.asarray(d, float)
    lo, hi = stats.bootstrap_ci(d, seed=seed) if d.size > 1 else (None, None)
    return {
        "mean": float(d.mean()),
        "ci": [lo, hi],
        "seeds": int(d.size),
        "seeds_lower": int((d < 0).sum()),
        "p_wilcoxon": stats.wilcoxon(d),
        "p_sign": stats.sign_test(d),
        "p_sign_flip": stats.sign_flip_test(d, seed=seed),
        "min_attainable_p": min_attainable_p(d.size),
    }


def effect_ratio(sim_d, real_d, seed: int = 0) -> dict:
    """``sim_vs_real_effect_ratio`` and its guards (module doc)."""
    sim_d, real_d = np.asarray(sim_d, float), np.asarray(real_d, float)
    sim, real = float(sim_d.mean()), float(real_d.mean())
    ci = list(stats.bootstrap_ci(real_d, seed=seed)) if real_d.size > 1 else [None, None]
    significant = ci[0] is not None and (ci[0] > 0 or ci[1] < 0)
    return {
        "sim_effect": sim,
        "real_effect": real,
        "real_effect_ci": ci,
        "real_effect_significant": bool(significant),
        "sim_vs_real_effect_ratio": sim / real + 0.0 if real != 0 else None,  # no -0.0
        "ratio_note": (
            "live effect exactly 0: ratio undefined"
            if real == 0
            else "live effect's CI contains 0: the ratio divides by noise"
            if not significant
            else "live effect significant at the CI level"
        ),
    }
