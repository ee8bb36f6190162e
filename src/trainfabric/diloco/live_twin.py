"""The simulated twin judged on seeds it was not calibrated on.

:func:`~trainfabric.diloco.live.run_to_dir` calibrates the simulator on every run of an
experiment and replays the same seeds: in-sample. :func:`heldout_twin` leaves each seed out:
the simulator is calibrated (:func:`~trainfabric.diloco.calibrate.calibrate`: serving rates,
interference, inner-step rate, sync durations, loss curve) on the other seeds' runs only, then
replays the held-out seed's requests under each policy and ``sim_draws`` matched-random
schedules (:func:`~trainfabric.diloco.live.simulate_seeds`). Per seed and arm the error is
``simulated − live`` SLO violation rate in percentage points; the effect is the policy's SLO
minus its matched random's (the simulated one the mean over the draws). Beside each error,
the sampling error the live rate has if the twin is right: the binomial standard error
``sqrt(p (1 − p) / n)`` of a rate ``p`` (the twin's) over the run's ``n`` requests, the part
of the error that a twin of expected rates cannot remove.

**What the twin needs** (:func:`twin_ablation`): the same held-out evaluation with one part
of the model removed at a time (:data:`PARTS`): the link-sharing term (``link_violation_p``
0, the engine's interference fitted instead, as on shared cores), chunked prefill (blocking
instead), the failure rate (``failure_p`` 0).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from trainfabric.errors import ConfigError

PARTS = {
    "full": {},
    "without the link term": {"link": False},
    "with blocking prefill": {"serving": {"prefill": "blocking"}},
    "without failures": {"serving": {"failure_p": 0.0}},
}


def twin_ablation(cfg, run_dir: Path) -> dict:
    """The held-out twin's summary with each of :data:`PARTS` removed (module doc)."""
    out = {}
    for name, drop in PARTS.items():
        tw = heldout_twin(cfg, run_dir, **drop)
        out[name] = {k: tw.get(k) for k in ("max_seed_error_pp", "median_seed_error_pp",
                                            "errors_over_2se", "errors", "sim_effect",
                                            "effect_sign_agrees")}  # fmt: skip
    return out


def heldout_twin(cfg, run_dir: Path, link: bool = True, serving: dict | None = None) -> dict:
    """Leave-one-seed-out twin over the experiment in ``run_dir`` (its ``runs.parquet`` and
    run directories) for ``cfg``'s headline policy (module doc). ``link``: fit the
    link-sharing term (on the testbed); ``serving``: overrides of the calibrated serving
    model (an ablation, :func:`twin_ablation`)."""
    from trainfabric.diloco.calibrate import calibrate
    from trainfabric.diloco.live import simulate_seeds

    runs = pd.read_parquet(Path(run_dir) / "runs.parquet")
    policy, control = cfg.policies[0], f"matched_random[{cfg.policies[0]}]"
    seeds = sorted(int(s) for s in runs["seed"].unique())
    if len(seeds) < 2:
        return {"note": "a held-out twin needs at least 2 seeds", "per_seed": []}
    rows = []
    for s in seeds:
        train = [Path(run_dir) / lbl for lbl in runs.loc[runs["seed"] != s, "label"]]
        try:
            calib = calibrate(train, link=link and cfg.placement == "testbed")
        except ConfigError as exc:
            rows.append({"seed": s, "error": str(exc)})
            continue
        calib["fleet"]["serving"] |= serving or {}
        sim = simulate_seeds(cfg.model_copy(update={"policies": [policy]}), calib, [s])[policy]
        live = {arm: _slo(runs, s, arm) for arm in (policy, control)}
        row = {
            "seed": s,
            "live_policy": live[policy],
            "sim_policy": sim["slo_violation_rate"][0],
            "live_matched_random": live[control],
            "sim_matched_random": sim["matched_random_slo"][0],
            "link_violation_p": calib["fleet"]["serving"].get("link_violation_p"),
        }
        row["error_policy_pp"] = 100 * (row["sim_policy"] - row["live_policy"])
        row["error_matched_random_pp"] = 100 * (
            row["sim_matched_random"] - row["live_matched_random"]
        )
        n = {arm: _requests(runs, s, arm) for arm in (policy, control)}
        row["se_policy_pp"] = 100 * _binomial_se(row["sim_policy"], n[policy])
        row["se_matched_random_pp"] = 100 * _binomial_se(row["sim_matched_random"], n[control])
        rows.append(row)
    ok = [r for r in rows if "error" not in r]
    if not ok:
        return {"note": "no seed could be calibrated", "per_seed": rows}
    errs = np.abs([[r["error_policy_pp"], r["error_matched_random_pp"]] for r in ok])
    ses = np.array([[r["se_policy_pp"], r["se_matched_random_pp"]] for r in ok])
    live_eff = float(np.mean([r["live_policy"] - r["live_matched_random"] for r in ok]))
    sim_eff = float(np.mean([r["sim_policy"] - r["sim_matched_random"] for r in ok]))
    return {
        "per_seed": rows,
        "seeds": len(ok),
        "max_seed_error_pp": float(errs.max()),
        "median_seed_error_pp": float(np.median(errs)),
        "errors_over_2se": int((errs > 2 * ses).sum()),
        "errors": int(errs.size),
        "live_effect": live_eff,
        "sim_effect": sim_eff,
        "effect_sign_agrees": bool(np.sign(live_eff) == np.sign(sim_eff)),
        "definition": (
            "per seed, the simulator calibrated on the other seeds' runs only; error = "
            "simulated - live SLO violation rate (pp), policy and matched random; effect = "
            "mean over seeds of policy - matched random"
        ),
    }


def _binomial_se(p: float, n: int) -> float:
    return float(np.sqrt(p * (1 - p) / n)) if n > 0 else float("nan")


def _requests(runs: pd.DataFrame, seed: int, policy: str) -> int:
    row = runs[(runs["seed"] == seed) & (runs["policy"] == policy)]
    return int(row["requests"].iloc[0]) if len(row) else 0


def _slo(runs: pd.DataFrame, seed: int, policy: str) -> float:
    row = runs[(runs["seed"] == seed) & (runs["policy"] == policy)]
    return float(row["slo_violation_rate"].iloc[0]) if len(row) else float("nan")
