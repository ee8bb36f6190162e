"""What the cross-pillar studies share: feeding a sync-duration distribution into the DiLoCo
fleet simulator and reading SLO and loss per policy.

A study computes how long one DiLoCo outer sync takes on some network (an OCS wiring, a
degraded fabric), in **seconds per sync**, possibly as a distribution; :func:`fleet_runs`
hands it to :func:`trainfabric.diloco.fleet.simulate` as a
:class:`~trainfabric.diloco.fleet.SyncDurations` (samples drawn with replacement, the same
draws for every policy of a fleet seed: common random numbers) and returns the simulator's
own per-run table, plus two derived columns:

* ``loss_equal_wallclock`` = the simulator's ``final_loss`` at the horizon ``W·window_s``
  (the same wall-clock for every policy and every network);
* ``loss_equal_tokens`` = ``L(T_ref · effective_tokens / tokens_trained)`` with ``L`` the
  fleet's loss curve (Chinchilla at ``params``) and ``T_ref = W·window_s·steps_per_s·
  tokens_per_step`` the tokens a fleet that never syncs trains in the horizon: the loss the
  run would reach after the same number of trained tokens at its own sync efficiency (so a
  policy that syncs less, or a network whose syncs are slow, is not rewarded for training
  more tokens in the same time, nor charged for it).

The fleet seeds of a study cell are ``seed·fleet_seeds + i``, ``i < fleet_seeds``, so cells
with different seeds never share a request set, and every wiring/failure setting of one cell
sees the same requests (paired comparisons). The regime's sync model is replaced by the
study's (``params``, ``islands``): the loss curve uses ``params``; the durations come from the
study, never from the simulator's own bandwidth model.

Everything here is a **model**: the serving engines, the progress and loss curves and the
arrival process are the simulator's (:mod:`trainfabric.diloco.fleet`); nothing is measured on
hardware. :func:`summarise` gives the per-policy means with standard errors over fleet seeds.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from pydantic import Field, field_validator

from trainfabric.config import Config
from trainfabric.diloco.fleet import Block, FleetConfig, SyncDurations, get_regime, simulate
from trainfabric.diloco.learners import ProgressModel, SyncModel
from trainfabric.diloco.policies import POLICY_NAMES, make_policy

RUN_COLUMNS = (
    "slo_violation_rate",
    "ttft_violation_rate",
    "tpot_violation_rate",
    "syncs",
    "sync_s",
    "sync_time_fraction",
    "tokens_trained",
    "effective_tokens",
    "loss_equal_wallclock",
    "loss_equal_tokens",
)
NO_SYNC = "no_sync"


class FleetSettings(Config):
    """The DiLoCo fleet a study's sync durations are fed into (defaults: CLARIFICATIONS,
    1B parameters, M = 8 islands; the ``bursty`` regime, 2,000 windows of 1 s)."""

    regime: str = Field("bursty", description="fleet regime (trainfabric.diloco.fleet.REGIMES)")
    windows: int = Field(2000, ge=10, le=1_000_000, description="control windows of 1 s")
    policies: list[str] = Field(
        default_factory=lambda: ["fixed_h", "adaptive_load", "wa_forecast", NO_SYNC],
        min_length=1,
        description="sync policies (no_sync = the SLO floor, every sync removed)",
    )
    fleet_seeds: int = Field(5, ge=1, le=1000, description="fleet seeds per study cell")
    params: float = Field(1e9, gt=0, description="model parameters P (loss curve)")
    islands: int = Field(8, ge=2, le=4096, description="learner islands M")

    @field_validator("regime")
    @classmethod
    def _known_regime(cls, name: str) -> str:
        get_regime(name)
        return name

    @field_validator("policies")
    @classmethod
    def _known_policies(cls, names: list[str]) -> list[str]:
        for name in names:
            if name != NO_SYNC and name not in POLICY_NAMES:
                raise ValueError(f"unknown policy {name!r}; known: {', '.join(POLICY_NAMES)}")
        return names


def fleet_seeds(settings: FleetSettings, seed: int) -> np.ndarray:
    """Fleet seeds of study cell ``seed``: ``seed·fleet_seeds + i`` (module doc)."""
    return seed * settings.fleet_seeds + np.arange(settings.fleet_seeds, dtype=np.int64)


def fleet_context(settings: FleetSettings, progress: ProgressModel | None = None):
    """``(fleet, regime)`` of ``settings``: the fleet config (``progress`` replacing its
    inner-step model when given) and the regime with the study's sync model (module doc)."""
    fleet = FleetConfig(windows=settings.windows)
    if progress is not None:
        fleet = fleet.model_copy(update={"progress": progress})
    regime = get_regime(settings.regime).model_copy(
        update={"sync": SyncModel(params=settings.params, islands=settings.islands)}
    )
    return fleet, regime


def fleet_simulation(
    settings: FleetSettings,
    sync_seconds,
    seed: int,
    progress: ProgressModel | None = None,
) -> tuple[pd.DataFrame, np.ndarray]:
    """:func:`fleet_runs` and the windows where each run started a sync (bool
    ``[rows, windows]``, the table's row order; all False for ``no_sync``)."""
    fleet, regime = fleet_context(settings, progress)
    seeds = fleet_seeds(settings, seed)
    durations = SyncDurations(samples=np.atleast_1d(np.asarray(sync_seconds, float)))
    syncing = [p for p in settings.policies if p != NO_SYNC]
    tables, starts = [], []
    if syncing:
        blocks = [Block(make_policy(p), seeds) for p in syncing]
        res = simulate(fleet, regime, blocks, durations=durations)
        tables.append(res.table)
        starts.append(res.sync_started)
    if NO_SYNC in settings.policies:
        floor = simulate(fleet, regime, [Block(make_policy("fixed_h"), seeds)], sync=False)
        tables.append(floor.table.assign(policy=NO_SYNC))
        starts.append(np.zeros_like(floor.sync_started))
    runs = tidy(pd.concat(tables, ignore_index=True), fleet, settings.params)
    return runs, np.concatenate(starts)


def fleet_runs(
    settings: FleetSettings,
    sync_seconds,
    seed: int,
    progress: ProgressModel | None = None,
) -> pd.DataFrame:
    """One row per (policy, fleet seed): the simulator's table with the syncs drawn from
    ``sync_seconds`` (seconds, a scalar or samples) and the two loss columns of the module
    doc. ``progress`` replaces the fleet's inner-step model (e.g. ``steps_per_s`` from a
    measured iteration time). Columns: ``policy``, ``fleet_seed`` and :data:`RUN_COLUMNS`;
    rows in the order of ``settings.policies`` without ``no_sync``, then ``no_sync``."""
    return fleet_simulation(settings, sync_seconds, seed, progress)[0]


def tidy(table: pd.DataFrame, fleet: FleetConfig, params: float) -> pd.DataFrame:
    """The simulator's run table as ``policy``, ``fleet_seed`` and :data:`RUN_COLUMNS`
    (``final_loss`` renamed ``loss_equal_wallclock``, ``loss_equal_tokens`` added)."""
    runs = table.rename(columns={"seed": "fleet_seed", "final_loss": "loss_equal_wallclock"})
    prog = fleet.progress
    t_ref = fleet.horizon_s * prog.steps_per_s * prog.tokens_per_step
    share = runs["effective_tokens"] / runs["tokens_trained"]
    runs["loss_equal_tokens"] = prog.loss(t_ref * share.to_numpy(), params)
    return runs[["policy", "fleet_seed", *RUN_COLUMNS]].reset_index(drop=True)


def summarise(runs: pd.DataFrame, by: tuple[str, ...] = ("policy",)) -> pd.DataFrame:
    """Means over fleet seeds of :data:`RUN_COLUMNS` per ``by`` group, with the standard
    error ``sd / sqrt(n)`` (``ddof = 1``; 0 for one seed) of ``slo_violation_rate`` and
    both losses as ``*_se`` columns and ``fleet_seeds`` = n."""
    groups = runs.groupby(list(by), sort=False)
    out = groups[list(RUN_COLUMNS)].mean()
    n = groups.size()
    for col in ("slo_violation_rate", "loss_equal_wallclock", "loss_equal_tokens"):
        sd = groups[col].std(ddof=1).fillna(0.0)
        out[f"{col}_se"] = sd / np.sqrt(n)
    out["fleet_seeds"] = n
    return out.reset_index()
