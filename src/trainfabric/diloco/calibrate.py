"""``trainfabric diloco calibrate``: fit the simulator's parameters from live run directories.

A live run directory (:mod:`~trainfabric.diloco.live`) holds ``requests.parquet`` (per served
request: ``arrival_s``, ``ttft_s``, ``tpot_s``, ``finish_s``, ``prompt_tokens``,
``output_tokens``), ``syncs.parquet`` (per outer sync: ``start_s``, ``end_s``, ``steps`` = inner
steps of the interval it closed), ``evals.parquet`` (eval loss of the global model after each
sync: ``wall_s``, ``tokens``, ``eval_loss``) and ``steps.parquet`` (``wall_s``, ``step``,
``tokens`` cumulative over learners). Times are seconds since the run's start. Each table is
checked as it is read (:func:`check_table`): a file that is not Parquet, a missing or
non-numeric column, an infinite value, a NaN (but a request's unfinished ``ttft_s``,
``tpot_s``, ``finish_s``), a negative count or duration, a sync ending before it starts is a
one-line ConfigError naming the file, the column and the row. Fitted:

**Progress** (the simulator's :class:`~.learners.ProgressModel`): ``steps_per_s`` = inner steps
per second of non-syncing time, ``tokens_per_step`` = tokens per inner step over all learners,
and, by nonlinear least squares over every eval point of every run,

    L_k = E + B · D_k^(−β),   D_k = Σ_{i ≤ k} h_i · tokens_per_step · e(h_i),
    e(h) = 1 / (1 + h / drift_steps)

(``h_i``: inner steps of the interval closed by sync ``i``), i.e. the simulator's effective-token
model with the loss curve's constants ``E, B, β`` free (the simulator's Chinchilla constants
are for large models; the fitted curve is reported beside them). ``drift_steps`` is only
identified when the runs' intervals differ: when its fit ends at a bound or has no standard
error it is reported as not identified and the simulator keeps its default.

**Interference** (:class:`~.serving.ServingModel`): a request's TPOT is its decode time per
token, ``TPOT_i = (decode_base_s + decode_per_seq_s · n_i) · (1 + interference · s_i)``, with
``n_i`` the mean number of requests decoding while it decoded and ``s_i`` the share of its
decode time inside syncs (both integrated exactly from the tables); fitted by nonlinear least
squares with ``interference`` in ``[-0.99, 100]``: a negative value (serving *faster* during
syncs, e.g. when the learners wait on the network and free the cores) is reported as
``interference_raw`` and written as 0, the simulator's floor.
``prefill_s_per_token`` = least squares through the origin of TTFT on prompt length
over the requests that arrived at an idle server outside syncs (no queueing).

**Link sharing** (``link=True``: runs whose serving traffic crossed the link the syncs used,
the live testbed): ``link_violation_p = (v_in − v_out) / (1 − v_out)``, at least 0, with
``v_in`` (``v_out``) the violation rate of the requests whose lifetime ``[arrival, finish]``
(an unfinished one: to its run's end) overlaps (does not overlap) a sync, pooled over the
runs: the chance that a request the engine serves in time misses its SLO because it shared
the link with a sync, if the two causes are independent. The engine then has its cores to
itself, so ``interference`` is written as 0 (the fitted value stays in ``fit.decode``: on the
testbed it measures chunks delayed on the link, which the link term covers).

**Failures**: ``failure_p`` = the share of requests whose stream failed (status ``error`` or
``http_error``: the client saw no complete answer, whatever the latency), pooled over the
runs; the simulator counts them as violations it cannot otherwise produce.

**Sync durations**: the measured ``end_s − start_s`` of every sync, as samples.

The result is a JSON file with a ``fleet`` section that validates as the simulator's
:class:`~.fleet.FleetConfig` (checked before writing), ``sync_duration_samples_s``, the fitted
``loss_curve`` and the fit diagnostics (standard errors, residuals, points used).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import OptimizeWarning, curve_fit

from trainfabric.errors import ConfigError

TABLES = ("requests", "syncs", "evals", "steps")

#: Per table, the columns the fits read: ``(column, may be NaN, must be >= 0)``; NaN marks an
#: unfinished request (no first token, no finish), infinities are refused everywhere.
COLUMNS = {
    "requests": (("arrival_s", False, False), ("ttft_s", True, True), ("tpot_s", True, True),
                 ("finish_s", True, False), ("prompt_tokens", False, True)),
    "syncs": (("start_s", False, False), ("end_s", False, False), ("steps", False, True)),
    "evals": (("eval_loss", False, False),),
    "steps": (("wall_s", False, False), ("step", False, True), ("tokens", False, True)),
}  # fmt: skip


def read_run(run_dir: str | Path) -> dict[str, pd.DataFrame]:
    """The four tables of a live run directory, each checked by :func:`check_table`
    (ConfigError naming the missing or unreadable file)."""
    import pyarrow as pa

    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ConfigError("RUN_DIRS", f"{run_dir} is not a directory")
    out = {}
    for name in TABLES:
        path = run_dir / f"{name}.parquet"
        if not path.is_file():
            raise ConfigError("RUN_DIRS", f"{run_dir}: no {name}.parquet (not a live run?)")
        try:
            table = pd.read_parquet(path)
        except (OSError, ValueError, pa.ArrowException) as exc:
            raise ConfigError("RUN_DIRS", f"{path}: not a readable Parquet file ({exc})") from None
        out[name] = check_table(table, name, path)
    return out


def check_table(table: pd.DataFrame, name: str, path: Path) -> pd.DataFrame:
    """``table`` (the ``name`` table read from ``path``) if it has the columns of
    :data:`COLUMNS`, numeric, with no value that no run records (ConfigError naming the file,
    the column and the first bad row)."""
    for column, may_be_nan, nonnegative in COLUMNS[name]:
        if column not in table:
            raise ConfigError("RUN_DIRS", f"{path}: no column {column}")
        values = table[column]
        if len(values) and not pd.api.types.is_numeric_dtype(values):
            raise ConfigError("RUN_DIRS", f"{path}: column {column} is not numeric")
        problem = _first_bad(values.to_numpy(float), may_be_nan, nonnegative)
        if problem:
            raise ConfigError("RUN_DIRS", f"{path}: column {column}, {problem}")
    if name == "syncs" and (before := table["end_s"] < table["start_s"]).any():
        row = int(np.argmax(before))
        raise ConfigError("RUN_DIRS", f"{path}: row {row}: end_s is before start_s")
    return table


def _first_bad(values: np.ndarray, may_be_nan: bool, nonnegative: bool) -> str | None:
    """``"row I is WHY"`` for the first value that is infinite, NaN (unless ``may_be_nan``)
    or negative (if ``nonnegative``), else None."""
    rules = [(np.isinf(values), "infinite")]
    if not may_be_nan:
        rules.append((np.isnan(values), "NaN"))
    if nonnegative:
        rules.append((values < 0, "negative"))
    bad = [(int(np.argmax(mask)), why) for mask, why in rules if mask.any()]
    return "row {} is {}".format(*min(bad)) if bad else None


# -- exact time integrals of step functions ------------------------------------------------------
def occupancy_integral(starts, ends):
    """``F(t) = ∫_0^t #{j : starts_j <= u < ends_j} du`` as a vectorised function of ``t``."""
    starts, ends = np.asarray(starts, float), np.asarray(ends, float)
    times = np.r_[starts, ends]
    delta = np.r_[np.ones(starts.size), -np.ones(ends.size)]
    order = np.argsort(times, kind="stable")
    t, level = times[order], np.cumsum(delta[order])  # count just after t[k]
    area = np.r_[0.0, np.cumsum(level[:-1] * np.diff(t))] if t.size else np.zeros(0)

    def integral(x):
        x = np.asarray(x, float)
        if t.size == 0:
            return np.zeros_like(x)
        k = np.searchsorted(t, x, side="right") - 1
        kk = np.clip(k, 0, t.size - 1)
        return np.where(k < 0, 0.0, area[kk] + level[kk] * (x - t[kk]))

    return integral


def mean_over(integral, a, b) -> np.ndarray:
    """Mean of the step function over ``[a_i, b_i]`` (``b_i > a_i``)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    return (integral(b) - integral(a)) / (b - a)


def in_flight_before(starts, ends, t) -> np.ndarray:
    """``#{j : starts_j < t_i < ends_j}`` (intervals open at ``t_i``, started before it)."""
    s, e = np.sort(np.asarray(starts, float)), np.sort(np.asarray(ends, float))
    t = np.asarray(t, float)
    return np.searchsorted(s, t, side="left") - np.searchsorted(e, t, side="right")


# -- the fits ---------------------------------------------------------------------------------
def effective_tokens(h, tokens_per_step: float, drift_steps: float) -> np.ndarray:
    """Cumulative ``Σ h_i · tokens_per_step · e(h_i)`` (module doc)."""
    h = np.asarray(h, float)
    return np.cumsum(h * tokens_per_step / (1.0 + h / drift_steps))


def fit_progress(runs: list[dict], tokens_per_step: float) -> dict:
    """Fit ``E, B, β, drift_steps`` over the eval points after each sync of every run (but
    those before any inner step: the curve is infinite at ``D = 0``)."""
    hs, losses = [], []
    for run in runs:
        syncs, evals = run["syncs"], run["evals"]
        k = min(len(syncs), len(evals))
        h = syncs["steps"].to_numpy(float)[:k]
        trained = np.cumsum(h) > 0  # leading zeros only: the sums after them are unchanged
        if not trained.any():
            continue
        hs.append(h[trained])
        losses.append(evals["eval_loss"].to_numpy(float)[:k][trained])
    if not hs or sum(map(len, hs)) < 4:
        raise ConfigError("RUN_DIRS", "need at least 4 evals after syncs to fit the loss curve")
    y = np.concatenate(losses)

    def model(_, E, logB, beta, log_drift):
        d = np.concatenate([effective_tokens(h, tokens_per_step, np.exp(log_drift)) for h in hs])
        return E + np.exp(logB) * d ** (-beta)

    d0 = np.concatenate([effective_tokens(h, tokens_per_step, 1e12) for h in hs])
    span = max(float(np.ptp(y)), 0.1)
    p0 = [
        max(float(y.min()) - 0.5, 0.0),
        np.log(span) + 0.3 * np.log(d0.min()),
        0.3,
        np.log(10.0 * float(np.concatenate(hs).mean())),
    ]
    lower = [0.0, -50.0, 1e-3, np.log(1.0)]
    upper = [float(y.min()), 50.0, 3.0, np.log(1e9)]
    p0 = np.clip(p0, np.add(lower, 1e-6), np.subtract(upper, 1e-6))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OptimizeWarning)
        popt, pcov = curve_fit(model, None, y, p0=p0, bounds=(lower, upper), maxfev=20_000)
    se = np.sqrt(np.clip(np.diag(pcov), 0.0, None)) if np.all(np.isfinite(pcov)) else None
    resid = y - model(None, *popt)
    at_bound = not lower[3] + 1e-3 < popt[3] < upper[3] - 1e-3
    return {
        "E": float(popt[0]),
        "B": float(np.exp(popt[1])),
        "beta": float(popt[2]),
        "drift_steps": float(np.exp(popt[3])),
        "drift_identified": bool(se is not None and np.isfinite(se[3]) and not at_bound),
        "log_drift_steps_se": float(se[3]) if se is not None else None,
        "rmse": float(np.sqrt(np.mean(resid**2))),
        "points": int(y.size),
    }


def fit_decode(req: pd.DataFrame, syncs: pd.DataFrame) -> dict:
    """Fit ``decode_base_s, decode_per_seq_s, interference`` from TPOTs (module doc)."""
    first = req["arrival_s"].to_numpy(float) + req["ttft_s"].to_numpy(float)
    finish = req["finish_s"].to_numpy(float)
    tpot = req["tpot_s"].to_numpy(float)
    ok = np.isfinite(first) & np.isfinite(finish) & np.isfinite(tpot) & (finish > first)
    ok &= tpot > 0  # one-token requests have no decode time
    decoding = occupancy_integral(first[ok], finish[ok])
    in_sync = occupancy_integral(syncs["start_s"].to_numpy(float), syncs["end_s"].to_numpy(float))
    n = mean_over(decoding, first[ok], finish[ok])
    s = np.clip(mean_over(in_sync, first[ok], finish[ok]), 0.0, 1.0)
    y = tpot[ok]
    if y.size < 5:
        raise ConfigError("RUN_DIRS", "need at least 5 finished multi-token requests")

    def model(x, base, per_seq, interference):
        return (base + per_seq * x[0]) * (1.0 + interference * x[1])

    p0 = [float(np.median(y)), 0.0, 0.0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", OptimizeWarning)
        popt, _ = curve_fit(
            model, np.vstack([n, s]), y, p0=p0, bounds=([1e-9, 0.0, -0.99], [10.0, 10.0, 100.0])
        )
    identified = bool(np.ptp(s) > 0)
    raw = float(popt[2]) if identified else 0.0
    return {
        "decode_base_s": float(popt[0]),
        "decode_per_seq_s": float(popt[1]),
        "interference": max(raw, 0.0),
        "interference_raw": raw,
        "interference_identified": identified,
        "requests": int(y.size),
        "requests_in_sync": int((s > 0).sum()),
    }


def fit_prefill(req: pd.DataFrame, syncs: pd.DataFrame) -> dict:
    """``prefill_s_per_token`` from requests arriving at an idle server outside syncs."""
    arrival = req["arrival_s"].to_numpy(float)
    finish = req["finish_s"].to_numpy(float)
    ttft = req["ttft_s"].to_numpy(float)
    prompt = req["prompt_tokens"].to_numpy(float)
    busy = in_flight_before(arrival, np.where(np.isfinite(finish), finish, np.inf), arrival)
    sync = in_flight_before(syncs["start_s"], syncs["end_s"], arrival)
    quiet = (busy == 0) & (sync == 0) & np.isfinite(ttft) & (prompt > 0)
    if quiet.sum() < 3:
        raise ConfigError("RUN_DIRS", "need at least 3 requests arriving at an idle server")
    p, t = prompt[quiet], ttft[quiet]
    return {
        "prefill_s_per_token": float((p * t).sum() / (p * p).sum()),
        "requests": int(quiet.sum()),
    }


def fit_link(runs: list[dict]) -> dict:
    """The link-sharing term (module doc), pooled over ``runs``."""
    from trainfabric.diloco.live_analysis import overlaps

    inside, violated = [], []
    for r in runs:
        req, sy = r["requests"], r["syncs"]
        arrival = req["arrival_s"].to_numpy(float)
        finish = req["finish_s"].to_numpy(float)
        end = np.where(np.isfinite(finish), finish, np.inf)
        inside.append(overlaps(arrival, end, sy[["start_s", "end_s"]].to_numpy(float)))
        violated.append(req["violated"].to_numpy(bool))
    ins, bad = np.concatenate(inside), np.concatenate(violated)
    if ins.sum() == 0 or (~ins).sum() == 0:
        raise ConfigError("RUN_DIRS", "the link term needs requests inside and outside syncs")
    v_in, v_out = float(bad[ins].mean()), float(bad[~ins].mean())
    p = max(0.0, (v_in - v_out) / (1.0 - v_out)) if v_out < 1 else 0.0
    return {"link_violation_p": p, "violation_inside": v_in, "violation_outside": v_out,
            "requests_inside": int(ins.sum()), "requests_outside": int((~ins).sum())}  # fmt: skip


def fit_failures(runs: list[dict]) -> dict:
    """``failure_p`` (module doc), pooled over ``runs``."""
    if any("status" not in r["requests"] for r in runs):
        raise ConfigError("RUN_DIRS", "requests.parquet has no status column (not a replay's)")
    status = pd.concat([r["requests"]["status"].astype(str) for r in runs], ignore_index=True)
    failed = int(status.isin(["error", "http_error"]).sum())
    return {"failure_p": failed / len(status) if len(status) else 0.0, "failed": failed,
            "requests": int(len(status))}  # fmt: skip


def calibrate(run_dirs: list[str | Path], link: bool = False) -> dict:
    """Fit every parameter (module doc) and return the calibration document, whose ``fleet``
    section is checked to validate as a :class:`~.fleet.FleetConfig`; ``link``: the runs'
    serving traffic shared the syncs' link (the link-sharing term)."""
    from trainfabric.config import validate
    from trainfabric.diloco.fleet import FleetConfig

    if not run_dirs:
        raise ConfigError("RUN_DIRS", "give at least one live run directory")
    runs = [read_run(d) for d in run_dirs]
    syncs_all = pd.concat([r["syncs"] for r in runs], ignore_index=True)
    sync_s = (syncs_all["end_s"] - syncs_all["start_s"]).to_numpy(float)
    tokens_per_step, steps_per_s = _throughput(runs)
    progress = fit_progress(runs, tokens_per_step)
    reqs = pd.concat([r["requests"].assign(run=i) for i, r in enumerate(runs)], ignore_index=True)
    decode = _per_run_fit(runs, fit_decode)
    prefill = _per_run_fit(runs, fit_prefill)
    serving = {
        "replicas": 1,
        "prefill_s_per_token": prefill["prefill_s_per_token"],
        "decode_base_s": decode["decode_base_s"],
        "decode_per_seq_s": decode["decode_per_seq_s"],
        "interference": decode["interference"],
    }
    fits = {"progress": progress, "decode": decode, "prefill": prefill,
            "failures": fit_failures(runs)}  # fmt: skip
    serving["failure_p"] = fits["failures"]["failure_p"]
    if link:
        fits["link"] = fit_link(runs)
        serving |= {"interference": 0.0, "link_violation_p": fits["link"]["link_violation_p"]}
    fleet = {
        "serving": serving,
        "progress": {"steps_per_s": steps_per_s, "tokens_per_step": tokens_per_step},
    }
    if progress["drift_identified"]:  # else the simulator's default stays (module doc)
        fleet["progress"]["drift_steps"] = progress["drift_steps"]
    validate(FleetConfig, fleet, prefix="fleet.")
    return {
        "fleet": fleet,
        "sync_duration_samples_s": sync_s.tolist(),
        "loss_curve": {k: progress[k] for k in ("E", "B", "beta")},
        "fit": fits,
        "runs": [str(d) for d in run_dirs],
        "requests": int(len(reqs)),
        "inner_steps": sum(len(r["steps"]) for r in runs),
    }


def _throughput(runs: list[dict]) -> tuple[float, float]:
    """Tokens per inner step (all learners) and inner steps per non-syncing second."""
    steps = tokens = train_s = 0.0
    for r in runs:
        st, sy = r["steps"], r["syncs"]
        if len(st) < 2:
            continue
        steps += float(st["step"].iloc[-1] - st["step"].iloc[0])
        tokens += float(st["tokens"].iloc[-1] - st["tokens"].iloc[0])
        t0, t1 = float(st["wall_s"].iloc[0]), float(st["wall_s"].iloc[-1])
        inside = occupancy_integral(sy["start_s"].to_numpy(float), sy["end_s"].to_numpy(float))
        train_s += (t1 - t0) - float(inside(t1) - inside(t0))
    if steps <= 0 or train_s <= 0:
        raise ConfigError("RUN_DIRS", "no inner steps recorded in any steps.parquet")
    return tokens / steps, steps / train_s


def _per_run_fit(runs: list[dict], fit) -> dict:
    """``fit`` per run (each on its own clock), pooled by weighting each run's estimates by
    the requests it used; runs with too little data are skipped (at least one must fit)."""
    parts, problems = [], []
    for r in runs:
        try:
            parts.append(fit(r["requests"], r["syncs"]))
        except ConfigError as exc:
            problems.append(exc.message)
    if not parts:
        raise ConfigError("RUN_DIRS", problems[0])
    weights = np.array([p["requests"] for p in parts], float)
    out = {}
    for key, value in parts[0].items():
        if isinstance(value, bool):
            out[key] = any(p[key] for p in parts)
        elif key.startswith("requests"):
            out[key] = int(sum(p[key] for p in parts))
        else:
            out[key] = float(np.average([p[key] for p in parts], weights=weights))
    out["runs_fitted"] = len(parts)
    return out
