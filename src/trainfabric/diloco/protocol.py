"""The calibration protocol: every policy against its matched-random control, with honest stats.

Per regime:

1. **Offline calibration** of ``wa_calibrated`` (the non-deployable bound) on held-out seeds
   (``calibration_seeds`` seeds from 10,000 on, never evaluated; in a trace regime the
   trace segments after the evaluation seeds', so they share no request): a small grid over
   its threshold and serving weight; the setting with the lowest SLO violation rate among those
   within ±15% of ``wa_diloco``'s sync count wins.
2. Every policy runs on the evaluation seeds (the same requests per seed for all policies).
3. **Matched random**: for every policy and seed, ``envelope_draws`` schedules with exactly the
   policy's sync count on that seed, drawn uniformly among schedules that respect the guards
   ``min_h``/``max_h`` (gaps in windows include the sync's own duration, see
   :func:`~.policies.matched_schedule`; the sync's duration is the window the policies obey:
   the artifact's 8 s in seed_compat, the longest one with a duration distribution; a budget
   the guards cannot hold keeps only the sync duration between syncs). Their mean per seed
   is the paired control; the draws form the **envelope** (the policy's percentile among
   them is reported).
4. **No-sync load match**: the same offered load with every sync removed — the SLO floor that
   no sync policy can go below.
5. Per policy: paired differences ``policy − matched random`` of the SLO violation rate
   (percentage points) and of the final loss, with the tokens each side trained beside it
   (``tokens_policy``, ``tokens_control``, ``tokens_ratio``; matched random has the same sync
   count, so they differ only by the sync durations and where the horizon cuts the last one);
   the sign-flip test (the design's test), Wilcoxon and the sign test (reported only),
   bootstrap CIs, ``d_z``.

**Trace regimes** (``azure``, ``--trace``): every seed replays its own disjoint segment of
the trace (:func:`~.fleet.check_segments`), so the paired tests see independent samples; the
horizon is the segment length, the trace's duration at the regime's rate over the seeds
needed (evaluation plus calibration), unless ``segment_horizon`` is off; more seeds than the
trace holds are refused unless ``allow_overlap`` (random, overlapping offsets), and the
verdicts then say ``(overlapping seeds)``. Each verdict row reports ``segment_s``,
``segments`` and ``seeds_overlap``. Segments too short for the protocol are refused once,
before any simulation, naming the ``--seeds`` and ``--rate-scale`` values that fit
(:func:`check_trace_horizon`); :func:`windows_note` says what the windows were chosen from.
On a trace the synthetic regimes differ only by their sync model (the trace replaces their
arrivals), so regimes that are one model run once (:meth:`ProtocolConfig.distinct_regimes`),
labelled by what differs (:meth:`ProtocolConfig.regime_label`).

**The design** (:class:`~.stats.Design`, per regime: each regime is its own experiment, the
clarification's "correct within a regime"), named before anything runs: the **primary**
comparison is ``primary_policy`` (``wa_forecast`` when it runs, else the first policy) vs its
matched random on the SLO violation rate, tested alone at ``alpha``; the **secondary**
comparisons — its final loss, and every other policy's SLO and final loss against its
matched random — form one Holm family. In the simulator every run of a regime has the same
horizon, so the final loss *is* the loss at equal wall-clock; the simulator keeps no loss
curve, so there is no equal-tokens comparison here (the live protocol has both). Per row:
``role``, ``p_slo`` (the sign-flip p), ``p_value`` (the primary's own p, a secondary's
Holm-adjusted one), ``slo_verdict``; ``p_loss``, ``p_loss_adjusted``, ``loss_verdict``
(``better`` / ``worse`` only below ``alpha`` after adjustment, else ``no difference
detected``). A seed count that cannot find the primary (``2 / 2^n >= alpha``), or any
secondary (``2 / 2^n >= alpha / m``), is named in ``warnings`` (and warned, a
:class:`~.stats.DesignWarning`); ``diloco protocol`` prints them and refuses the first (exit 2).

**Power**: with ``pilot_seeds > 0`` each synthetic regime first runs the primary policy and
its matched random on held-out pilot seeds (from 20,000 on) and
:func:`~.stats.power_plan` turns the pilot's effect and sd into the seeds needed for power
``power`` at ``alpha``; with ``seeds_from_pilot`` the evaluation then runs that many seeds
(at most ``max_seeds``, 50 by default), otherwise the configured ``seeds``, and the output
says whether they suffice. Without a pilot (the default, to keep ``diloco protocol`` fast)
the output states the same calculation on the run's own primary differences, labelled post
hoc: a design for the next run, not evidence for this one. Trace regimes hold a fixed number
of disjoint segments and take no pilot.

Verdict ``vs_matched_random``: **beats** when ``slo_verdict`` is ``better`` *and* the loss
is neither ``worse`` nor worse by more than ``loss_margin`` (upper bootstrap bound);
**loses** when ``slo_verdict`` is ``worse``, or ``loss_verdict`` is ``worse`` and beyond the
margin (lower bound above it); **ties** otherwise (no difference detected). The loss
difference is the cost of *when* the syncs happen. ``verdict_reason`` says which decided
(the SLO test with its p, or the loss guard with the loss difference).

**When the syncs ran** (:func:`sync_timing`): the mean request rate during the primary
policy's syncs and its matched random's, against the mean; the run directory's
``sync_times.parquet`` (:func:`timeline`) has seed 0's request rate per window with both
policies' sync windows (``regime``, ``policy``, ``seed``, ``t_s``, ``request_rate_per_s``,
``in_sync``), and ``summary.json`` opens with ``findings``, the answer in sentences
(:func:`findings`).

The effect-size transfer check (:func:`transfer`) compares per-seed effects measured in
simulation with those of a replay against a real server (the real-training issue supplies
the replay side).
"""

from __future__ import annotations

import itertools
import math
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from pydantic import Field

from trainfabric.config import Config
from trainfabric.diloco import stats
from trainfabric.diloco.fleet import (
    PROTOCOL_REGIMES,
    Block,
    FleetConfig,
    FragmentModel,
    Regime,
    SyncDurations,
    check_fleet_size,
    check_segments,
    get_regime,
    segment_windows,
    simulate,
    trace_regime,
    trace_segments,
)
from trainfabric.diloco.policies import (
    POLICY_NAMES,
    GapTable,
    Policy,
    Schedule,
    make_policy,
    matched_schedule,
)
from trainfabric.errors import ConfigError
from trainfabric.progress import track

CALIBRATION_SEED0 = 10_000
PILOT_SEED0 = 20_000
CALIBRATION_GRID = {"threshold": (-0.2, 0.0, 0.2), "w_serve": (0.5, 1.0, 2.0)}


class ProtocolConfig(Config):
    """What the protocol runs; seeds by power (about 50), 10 only to mirror the seed."""

    regimes: list[str] = Field(default_factory=lambda: list(PROTOCOL_REGIMES), min_length=1)
    policies: list[str] = Field(default_factory=lambda: list(POLICY_NAMES), min_length=1)
    seeds: int = Field(50, ge=3, le=10_000)
    envelope_draws: int = Field(20, ge=1, le=1000)
    calibration_seeds: int = Field(5, ge=1, le=100)
    alpha: float = Field(0.05, gt=0, lt=1)
    loss_margin: float = Field(
        0.002, ge=0, le=100, description="tolerated loss increase (nats, <= 100)"
    )
    fleet: FleetConfig = FleetConfig()
    trace: str | None = Field(None, description="trace CSV replacing every regime's arrivals")
    rate_scale: float = Field(1.0, gt=0, le=1e6, description="x the trace's own mean rate")
    allow_overlap: bool = Field(
        False, description="trace regimes: more seeds than disjoint segments (flagged)"
    )
    segment_horizon: bool = Field(
        True, description="trace regimes: horizon = trace duration / seeds, not fleet.windows"
    )
    primary_policy: str | None = Field(
        None, description="the primary comparison's policy [wa_forecast if run, else the first]"
    )
    pilot_seeds: int = Field(
        0, ge=0, le=1000, description="pilot seeds per synthetic regime (0: no pilot, or >= 2)"
    )
    seeds_from_pilot: bool = Field(
        True, description="with a pilot: evaluate on the seeds its power calculation asks for"
    )
    max_seeds: int = Field(50, ge=3, le=10_000, description="the most seeds a pilot may choose")
    power: float = Field(0.8, gt=0, lt=1, description="target power of the primary test")

    def lead(self) -> str:
        """The primary comparison's policy (module doc)."""
        if self.primary_policy is not None:
            return self.primary_policy
        return "wa_forecast" if "wa_forecast" in self.policies else self.policies[0]

    def design(self) -> stats.Design:
        """The design of every regime's experiment (module doc)."""
        return stats.Design.for_policies(self.policies, self.lead(), ("final_loss",), self.alpha)

    def regime(self, name: str) -> Regime:
        """The regime called ``name``; with ``trace``, its sync model replaying the trace;
        with ``allow_overlap``, a trace regime's seeds draw overlapping offsets."""
        base = get_regime(name)
        reg = base if self.trace is None else trace_regime(self.trace, self.rate_scale, base)
        return reg.model_copy(update={"overlap": True}) if self.allow_overlap else reg

    def distinct_regimes(self) -> dict[str, list[str]]:
        """The regimes that run, each with the configured regimes it stands for: regimes that
        are one model once a trace replaces their arrivals (on a trace ``steady``,
        ``diurnal`` and ``bursty`` differ only by arrivals) run once, under the first's name."""
        groups: dict[str, list[str]] = {}
        first: dict[str, str] = {}
        for name in self.regimes:
            key = self.regime(name).model_dump_json(exclude={"name"})
            groups.setdefault(first.setdefault(key, name), []).append(name)
        return groups

    def regime_label(self, name: str) -> str:
        """What regime ``name``'s experiment is, in words: its name, or on a trace what still
        differs between regimes there (the sync model; the artifact's mode and background)."""
        reg = self.regime(name)
        if self.trace is None:
            return name
        s = reg.sync
        extra = ", seed_compat" if reg.seed_compat else ""
        extra += f", background {reg.background}" if reg.background != "none" else ""
        return (
            f"{Path(self.trace).name}, {s.params / 1e9:.3g}B-parameter sync over "
            f"{s.link_gbps:.3g} Gb/s ({reg.sync_s:.3g} s{extra})"
        )

    def segment_seeds(self) -> int:
        """Trace segments one regime needs: evaluation plus held-out calibration seeds."""
        return self.seeds + (self.calibration_seeds if "wa_calibrated" in self.policies else 0)

    def fleet_for(self, regime: Regime) -> FleetConfig:
        """``fleet``, with a trace regime's horizon the segment length for
        :meth:`segment_seeds` seeds when ``segment_horizon`` (module doc)."""
        if not (regime.is_trace and self.segment_horizon):
            return self.fleet
        windows = segment_windows(regime, self.segment_seeds(), self.fleet.window_s)
        return self.fleet.model_copy(update={"windows": max(windows, 10)})


def calibration_seeds(cfg: ProtocolConfig, regime: Regime) -> np.ndarray:
    """Held-out seeds: from 10,000 on; in a trace regime the segments after the evaluation
    seeds' (``seeds .. seeds + calibration_seeds − 1``), so none shares requests with them."""
    first = cfg.seeds if regime.is_trace else CALIBRATION_SEED0
    return first + np.arange(cfg.calibration_seeds)


def quick_config() -> ProtocolConfig:
    """A short protocol for the demo and CI: 10 seeds, 2,000 windows, 5 envelope draws."""
    return ProtocolConfig(
        seeds=10, envelope_draws=5, calibration_seeds=3, fleet=FleetConfig(windows=2000)
    )


def sync_bound_s(regime, durations: SyncDurations | None = None) -> float:
    """The longest sync: the regime's (seed_compat: its fixed 8 s window) or the
    distribution's ``max_s``."""
    return regime.sync_s if durations is None else durations.max_s


def gaps(
    policy: Policy, regime, fleet: FleetConfig, durations=None, sync_s: float | None = None
) -> tuple[int, int]:
    """Window gaps a guarded schedule allows: ``min_h``/``max_h`` steps plus the sync itself
    (the window the policies obey: 8 s in seed_compat, the longest drawn duration; or
    ``sync_s``, a fragment's sync)."""
    per_window = fleet.progress.steps_per_s * fleet.window_s
    bound = sync_bound_s(regime, durations) if sync_s is None else sync_s
    sync_windows = math.ceil(bound / fleet.window_s)
    return (
        max(1, math.ceil(policy.min_h / per_window) + sync_windows),
        math.floor(policy.max_h / per_window) + sync_windows,
    )


def matched_blocks(
    policies: list[Policy],
    budgets: np.ndarray,
    seeds: np.ndarray,
    draws: int,
    regime,
    fleet,
    durations: SyncDurations | None = None,
) -> list[Block]:
    """One schedule block per policy: ``draws`` schedules per seed with that seed's budget
    (the counting table is built once per gap range, for the largest budget it serves)."""
    W = fleet.windows
    busy = math.ceil(sync_bound_s(regime, durations) / fleet.window_s)
    lo, hi = gaps(make_policy("wa_diloco"), regime, fleet, durations)  # the seed's guards
    # a budget the guards cannot hold keeps only the sync's own duration between syncs
    held = (budgets * lo <= W) & ((budgets + 1) * hi >= W)
    tables = {  # one counting table per gap range, for the largest feasible budget in it
        (a, b): GapTable.build(min(int(budgets[ok].max(initial=0)), W // a), W, a, b)
        for (a, b), ok in (((lo, hi), held), ((busy, W), ~held))
        if ok.any()
    }
    blocks = []
    for p, policy in enumerate(policies):
        rows = []
        for i, seed in enumerate(seeds):
            rng = np.random.default_rng([int(seed), p, 7919])
            budget = int(budgets[p, i])
            a, b = (lo, hi) if held[p, i] else (busy, W)
            rows.append(matched_schedule(budget, W, a, b, rng, draws, tables[a, b]))
        sched = Schedule(name=f"matched_random[{policy.name}]", sync_at=np.concatenate(rows))
        blocks.append(Block(sched, np.repeat(seeds, draws)))
    return blocks


def matched_fragment_blocks(
    policies: list[Policy],
    budgets: np.ndarray,
    seeds: np.ndarray,
    draws: int,
    regime,
    fleet: FleetConfig,
    fragments: FragmentModel,
) -> list[Block]:
    """Matched random per fragment: for every policy, seed and fragment ``f``, ``draws``
    schedules with exactly ``budgets[policy, seed, f]`` syncs of fragment ``f`` (the
    policy's own count of that fragment on that seed), each drawn uniformly as
    :func:`~.policies.matched_schedule` draws them, independently per fragment, with the gaps
    of the seed's guards plus one fragment sync (``D_p``, :meth:`~.fleet.FragmentModel.sync_s`;
    a budget the guards cannot hold keeps only that sync between syncs). Rows are run-major,
    fragment-minor (the fragment model's policy rows). A sync that finds the link busy
    waits for it (:mod:`~.fleet`, *Fragments*); the schedules are drawn over the first
    ``W − slack`` windows so that every wait ends before the horizon: with every fragment's
    syncs ``lo`` windows apart, a stretch of ``L`` busy windows holds at most ``P·(L/lo + 1)``
    fragment syncs of ``d = D_p / window_s`` windows, so ``L <= P·d / (1 − P·d/lo)``, the
    ``slack`` (``P·d`` when ``P·d >= lo``, where no bound holds: the counts are then
    checked, not assured); ConfigError naming ``windows`` when no room is left.
    ``budgets``: ``[policies, seeds, P]``."""
    P = fragments.fragments
    d_p = fragments.sync_s(regime)
    d = d_p / fleet.window_s
    busy = max(1, math.ceil(d))
    lo, hi = gaps(make_policy("wa_diloco"), regime, fleet, sync_s=d_p)
    slack = P * d / (1 - P * d / lo) if P * d < lo else P * d
    room = fleet.windows - math.ceil(slack)
    if room < lo:
        raise ConfigError(
            "windows",
            f"per-fragment matched random needs more than {math.ceil(slack) + lo:,} windows "
            f"(the guards' gap and {math.ceil(slack):,} for fragment syncs waiting for the "
            f"link), got {fleet.windows:,}",
        )
    held = (budgets * lo <= room) & ((budgets + 1) * hi >= room)
    tables = {
        (a, b): GapTable.build(min(int(budgets[ok].max(initial=0)), room // a), room, a, b)
        for (a, b), ok in (((lo, hi), held), ((busy, room), ~held))
        if ok.any()
    }
    blocks = []
    for p, policy in enumerate(policies):
        rows = []
        for i, seed in enumerate(seeds):
            per_fragment = []
            for f in range(P):
                rng = np.random.default_rng([int(seed), p, 7919, f])
                a, b = (lo, hi) if held[p, i, f] else (busy, room)
                budget = int(budgets[p, i, f])
                per_fragment.append(matched_schedule(budget, room, a, b, rng, draws, tables[a, b]))
            drawn = np.stack(per_fragment, axis=1).reshape(draws * P, room)
            rows.append(np.pad(drawn, ((0, 0), (0, fleet.windows - room))))
        sched = Schedule(name=f"matched_random[{policy.name}]", sync_at=np.concatenate(rows))
        blocks.append(Block(sched, np.repeat(seeds, draws)))
    return blocks


def min_windows(regime, fleet: FleetConfig, durations=None) -> int:
    """Fewest windows the protocol accepts on ``regime``: ``lo + hi`` of the seed's guards
    (:func:`gaps`). In fewer, the ``max_h`` guard forces at most one sync per run, so a policy
    and its matched-random control differ by one sync's position at most and the paired
    tests have (almost) nothing to compare."""
    lo, hi = gaps(make_policy("wa_diloco"), regime, fleet, durations)
    return lo + hi


def check_protocol_size(cfg: ProtocolConfig, regime, durations=None) -> None:
    """Refuse, before any simulation, what the protocol cannot do on ``regime``.

    Raises a ConfigError naming ``seeds`` when a trace regime holds fewer disjoint segments
    of the horizon than the evaluation and calibration seeds need (without
    ``allow_overlap``); naming ``windows`` when the regime's horizon
    (:meth:`ProtocolConfig.fleet_for`) is below :func:`min_windows`, or when the largest
    fleet simulation of the regime (the matched controls: policies x seeds x envelope draws
    runs; or the calibration grid) exceeds the memory limit
    (:func:`~trainfabric.diloco.fleet.check_fleet_size`).
    """
    fleet = cfg.fleet_for(regime)
    need = min_windows(regime, fleet, durations)
    check_segments(regime, cfg.segment_seeds(), fleet.horizon_s, "seeds")
    if fleet.windows < need:
        lo, hi = gaps(make_policy("wa_diloco"), regime, fleet, durations)
        trace = regime.is_trace and cfg.segment_horizon
        got = (
            f"the segment length of {cfg.segment_seeds()} seeds in its trace is "
            f"{fleet.windows:,} (fewer seeds or a lower --rate-scale lengthen it)"
            if trace
            else f"got {fleet.windows:,}"
        )
        raise ConfigError(
            "seeds" if trace else "windows",
            f"the protocol needs at least {need:,} windows on regime {regime.name} (syncs are "
            f"{lo:,}..{hi:,} windows apart under the guards, so fewer leave at most one sync "
            f"per run to compare), {got}",
        )
    calibration = (1 + math.prod(map(len, CALIBRATION_GRID.values()))) * cfg.calibration_seeds
    runs = max(len(cfg.policies) * cfg.seeds * cfg.envelope_draws, calibration)
    runs = max(runs, cfg.pilot_seeds * cfg.envelope_draws)
    check_fleet_size(fleet, regime, runs, max(cfg.seeds, cfg.calibration_seeds, cfg.pilot_seeds))


def check_trace_horizon(cfg: ProtocolConfig, durations=None) -> None:
    """Refuse once, before any simulation, trace segments too short for any regime.

    A trace regime's horizon is its segment length ``W = floor(n / rate / S / window_s)``
    (``S`` = :meth:`ProtocolConfig.segment_seeds`); the protocol needs ``W >= need``, the
    largest :func:`min_windows` over the regimes. The ConfigError (field ``seeds``) names the
    values that fit, computed from the same functions that then run: the most seeds
    ``s`` with ``W(s + calibration) >= need``, and with ``--trace`` the largest
    ``--rate-scale`` (3 significant digits, rounded down) that fits the seeds asked for and
    the fewest seeds the design accepts (:func:`~.stats.min_pairs`)."""
    if not cfg.segment_horizon:
        return
    names = [n for n in cfg.distinct_regimes() if cfg.regime(n).is_trace]
    if not names:
        return
    need, name = max((min_windows(cfg.regime(n), cfg.fleet, durations), n) for n in names)
    regime = cfg.regime(name)
    windows = cfg.fleet_for(regime).windows
    if windows >= need:
        return
    raise ConfigError(
        "seeds",
        f"{trace_words(cfg, regime)} cut into {cfg.segment_seeds()} segments "
        f"({_seed_words(cfg)}) of {windows:,} s, but the protocol needs {need:,} windows of "
        f"{cfg.fleet.window_s:g} s per seed on regime {name} (fewer leave at most one sync "
        f"per run to compare); {_fitting(cfg, regime, need)}",
    )


def trace_words(cfg: ProtocolConfig, regime: Regime) -> str:
    """``the trace F (N requests) at R requests/s lasts T s``: a trace regime in words."""
    trace = Path(cfg.trace).name if cfg.trace else "the Azure code trace"
    scale = f" (--rate-scale {cfg.rate_scale:g})" if cfg.trace else ""
    return (
        f"the trace {trace} ({regime.trace_requests().n:,} requests) at {regime.rate:.4g} "
        f"requests/s{scale} lasts {regime.trace_duration_s():,.0f} s,"
    )


def _seed_words(cfg: ProtocolConfig) -> str:
    held_out = cfg.segment_seeds() - cfg.seeds
    return f"{cfg.seeds} seeds" + (f" + {held_out} calibration" if held_out else "")


def _fitting(cfg: ProtocolConfig, regime: Regime, need: int) -> str:
    """The options that give every seed ``need`` windows (:func:`check_trace_horizon`)."""
    fewest = max(3, stats.min_pairs(cfg.alpha))
    held_out = cfg.segment_seeds() - cfg.seeds
    most = int(regime.trace_duration_s() // (need * cfg.fleet.window_s)) - held_out
    while most >= fewest and segment_windows(regime, most + held_out, cfg.fleet.window_s) < need:
        most -= 1
    said = [f"--seeds {most} fits at this rate"] if most >= fewest else []
    if cfg.trace is None:
        return "; ".join(said) or (
            f"the trace holds {max(most, 0)} such seeds, the design needs {fewest}: "
            f"--windows {need} --allow-overlap (seeds then share requests)"
        )
    said.append(f"--rate-scale {_rate_fit(cfg, cfg.seeds, need)} fits {cfg.seeds} seeds")
    if most < fewest < cfg.seeds:
        said.append(f"--seeds {fewest} --rate-scale {_rate_fit(cfg, fewest, need)} fits")
    return "; ".join(said)


def _rate_fit(cfg: ProtocolConfig, seeds: int, need: int) -> str:
    """The largest ``rate_scale`` at 3 significant digits giving ``seeds`` segments of at
    least ``need`` windows: ``W`` falls as the rate rises, ``W ∝ 1 / rate_scale``."""
    trial = cfg.model_copy(update={"seeds": seeds})
    exact = cfg.rate_scale * trial.regime(trial.regimes[0]).trace_duration_s()
    exact /= trial.segment_seeds() * need * cfg.fleet.window_s
    step = 10.0 ** (math.floor(math.log10(exact)) - 2)
    k = math.floor(exact / step * (1 + 1e-12))  # 100 <= k < 1000: fits once k·step < exact

    def fits(rate: float) -> bool:
        fitted = trial.model_copy(update={"rate_scale": rate})
        return fitted.fleet_for(fitted.regime(fitted.regimes[0])).windows >= need

    while not fits(float(f"{k * step:.3g}")):
        k -= 1
    return f"{float(f'{k * step:.3g}'):g}"


def check_protocol(cfg: ProtocolConfig, durations=None) -> None:
    """Every refusal before any simulation: the policies, the design
    (:func:`check_design`), the trace's segments (:func:`check_trace_horizon`) and every
    regime's size (:func:`check_protocol_size`)."""
    for n in cfg.policies:
        make_policy(n)
    check_design(cfg)
    check_trace_horizon(cfg, durations)
    for n in cfg.distinct_regimes():
        check_protocol_size(cfg, cfg.regime(n), durations)


def windows_note(cfg: ProtocolConfig) -> str | None:
    """What a trace regime's windows per seed were chosen from, in one sentence (None
    without a trace regime or with ``--windows``)."""
    names = [n for n in cfg.distinct_regimes() if cfg.regime(n).is_trace]
    if not names or not cfg.segment_horizon:
        return None
    regime = cfg.regime(names[0])
    windows = cfg.fleet_for(regime).windows
    return (
        f"windows per seed: {windows:,} of {cfg.fleet.window_s:g} s, the segment length: "
        f"{trace_words(cfg, regime)} cut into {cfg.segment_seeds()} disjoint segments "
        f"({_seed_words(cfg)})"
    )


def calibrate(regime, fleet: FleetConfig, seeds: np.ndarray, durations=None) -> dict:
    """Offline calibration of ``wa_calibrated`` on held-out ``seeds`` (module doc)."""
    n_seeds = len(seeds)
    values = itertools.product(*CALIBRATION_GRID.values())
    grid = [dict(zip(CALIBRATION_GRID, v, strict=True)) for v in values]
    blocks = [Block(make_policy("wa_diloco"), seeds)]
    blocks += [Block(make_policy("wa_calibrated", **g), seeds) for g in grid]
    table = simulate(fleet, regime, blocks, durations=durations).table
    ref = table[table["policy"] == "wa_diloco"]["syncs"].mean()
    scores = []
    for k in range(len(grid)):
        rows = table.iloc[(k + 1) * n_seeds : (k + 2) * n_seeds]
        within = abs(rows["syncs"].mean() - ref) <= 0.15 * max(ref, 1.0)
        scores.append((not within, rows["slo_violation_rate"].mean(), k))
    return grid[min(scores)[2]]


def run_regime(
    cfg: ProtocolConfig, name: str, durations: SyncDurations | None = None
) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """Runs, verdicts and the design statement of one regime (``durations``: sync durations
    drawn from a distribution instead of the regime's scalar). The statement has ``seeds``
    (evaluated), ``design`` (:meth:`~.stats.Design.to_dict`), ``power``
    (:func:`~.stats.power_plan`, from the pilot or post hoc) and ``warnings``."""
    regime = cfg.regime(name)
    fleet = cfg.fleet_for(regime)
    calibrated = (
        calibrate(regime, fleet, calibration_seeds(cfg, regime), durations)
        if "wa_calibrated" in cfg.policies
        else {}
    )
    policies = [
        make_policy(n, **(calibrated if n == "wa_calibrated" else {})) for n in cfg.policies
    ]
    design = cfg.design()
    lead = policies[cfg.policies.index(cfg.lead())]
    plan = None
    if cfg.pilot_seeds:
        seeds = PILOT_SEED0 + np.arange(cfg.pilot_seeds)
        d = primary_differences(cfg, lead, seeds, regime, fleet, durations)
        plan = stats.power_plan(d, cfg.alpha, cfg.power, source="pilot", max_seeds=cfg.max_seeds)
        plan["pilot_first_seed"] = PILOT_SEED0
        if cfg.seeds_from_pilot:
            cfg = cfg.model_copy(update={"seeds": max(3, int(plan["n_chosen"]))})
            check_protocol_size(cfg, regime, durations)
    seeds = np.arange(cfg.seeds)
    main_res = simulate(fleet, regime, [Block(p, seeds) for p in policies], durations=durations)
    main = main_res.table
    budgets = main["syncs"].to_numpy().reshape(len(policies), cfg.seeds)
    blocks = matched_blocks(policies, budgets, seeds, cfg.envelope_draws, regime, fleet, durations)
    control_res = simulate(fleet, regime, blocks, durations=durations)
    control = control_res.table
    floor = simulate(fleet, regime, [Block(make_policy("fixed_h"), seeds)], sync=False).table
    floor = floor.assign(policy="no_sync")
    runs = pd.concat([main, control, floor], ignore_index=True).assign(regime=name)
    verdicts, diffs = _verdicts(cfg, name, policies, main, control, floor, calibrated, design)
    if plan is None:
        plan = stats.power_plan(diffs[design.primary.name], cfg.alpha, cfg.power, source=POST_HOC)
    plan |= {
        "seeds_used": cfg.seeds,
        "sufficient": None if plan["n_required"] is None else cfg.seeds >= plan["n_required"],
    }
    lead_at = cfg.policies.index(cfg.lead())
    info = {
        "regime": name,
        "seeds": cfg.seeds,
        "design": design.to_dict(),
        "power": plan,
        "warnings": design.check(cfg.seeds),
        "sync_timing": sync_timing(main_res, control_res, lead_at, cfg),
        "timeline": timeline(main_res, control_res, lead_at, cfg).assign(regime=name),
    }
    return runs, verdicts.assign(**segment_info(cfg, regime)), info


def sync_timing(main, control, p: int, cfg: ProtocolConfig) -> dict:
    """When policy number ``p`` synced, over every evaluation seed: the mean request rate
    during its syncs, during its matched random's syncs and over the horizon (requests/s,
    :meth:`~.fleet.FleetResult.sync_rate`), and its syncs in all."""
    S, D = cfg.seeds, cfg.envelope_draws
    during, mean = main.sync_rate(range(p * S, (p + 1) * S))
    random_during, _ = control.sync_rate(range(p * S * D, (p + 1) * S * D))
    return {
        "policy": main.table["policy"].iloc[p * S],
        "syncs": int(main.sync_started[p * S : (p + 1) * S].sum()),
        "request_rate_mean_per_s": mean,
        "request_rate_during_syncs_per_s": during,
        "matched_random_request_rate_during_syncs_per_s": random_during,
    }


def timeline(main, control, p: int, cfg: ProtocolConfig) -> pd.DataFrame:
    """Seed 0's request rate per window with the sync windows of policy number ``p`` and of
    its matched random's first draw (``policy``, ``seed``, ``t_s``, ``request_rate_per_s``,
    ``in_sync``): the sync times drawn over the request rate."""
    ours = main.timeline(p * cfg.seeds).assign(policy=main.table["policy"].iloc[p * cfg.seeds])
    row = p * cfg.seeds * cfg.envelope_draws
    theirs = control.timeline(row).assign(policy=control.table["policy"].iloc[row])
    return pd.concat([ours, theirs], ignore_index=True).assign(seed=0)


POST_HOC = (
    "post hoc: this run's own primary differences (no pilot); the seeds a next run needs, "
    "not evidence for this one"
)


def primary_differences(cfg, policy: Policy, seeds, regime, fleet, durations=None) -> np.ndarray:
    """Paired SLO differences (pp) of ``policy`` vs its matched random (the mean over
    ``envelope_draws`` schedules per seed) on ``seeds``: the pilot's primary metric."""
    main = simulate(fleet, regime, [Block(policy, seeds)], durations=durations).table
    budgets = main["syncs"].to_numpy().reshape(1, len(seeds))
    blocks = matched_blocks([policy], budgets, seeds, cfg.envelope_draws, regime, fleet, durations)
    control = simulate(fleet, regime, blocks, durations=durations).table
    env = control["slo_violation_rate"].to_numpy().reshape(len(seeds), cfg.envelope_draws)
    return 100.0 * (main["slo_violation_rate"].to_numpy() - env.mean(axis=1))


def segment_info(cfg: ProtocolConfig, regime: Regime) -> dict:
    """How a regime's seeds sample its requests: for a trace regime the segment length (s),
    the disjoint segments of that length the trace holds and whether seeds overlap."""
    fleet = cfg.fleet_for(regime)
    if not regime.is_trace:
        return {"segment_s": None, "segments": None, "seeds_overlap": False}
    return {
        "segment_s": fleet.horizon_s,
        "segments": trace_segments(regime, fleet.horizon_s),
        "seeds_overlap": bool(regime.overlap),
    }


def _verdicts(cfg, regime, policies, main, control, floor, calibrated, design):
    """The verdict table and the paired differences by comparison name."""
    S, D = cfg.seeds, cfg.envelope_draws
    rows, diffs = [], {}
    for p, policy in enumerate(policies):
        ours = main.iloc[p * S : (p + 1) * S]
        env = control.iloc[p * S * D : (p + 1) * S * D]
        env_slo = env["slo_violation_rate"].to_numpy().reshape(S, D)
        env_loss = env["final_loss"].to_numpy().reshape(S, D)
        env_tokens = env["tokens_trained"].to_numpy().reshape(S, D).mean(axis=1)
        slo = ours["slo_violation_rate"].to_numpy()
        assert np.array_equal(env["syncs"].to_numpy().reshape(S, D)[:, 0], ours["syncs"].to_numpy())
        d = 100.0 * (slo - env_slo.mean(axis=1))  # percentage points
        dl = ours["final_loss"].to_numpy() - env_loss.mean(axis=1)
        diffs[stats.Comparison(policy.name, "slo_violation_rate").name] = d
        diffs[stats.Comparison(policy.name, "final_loss").name] = dl
        lo, hi = stats.bootstrap_ci(d, seed=p)
        llo, lhi = stats.bootstrap_ci(dl, seed=p + 1000)
        tokens = float(ours["tokens_trained"].mean())
        rows.append(
            {
                "regime": regime,
                "policy": policy.name,
                "deployable": policy.deployable,
                "seeds": S,
                "slo_violation_rate": float(slo.mean()),
                "syncs": float(ours["syncs"].mean()),
                "sync_time_fraction": float(ours["sync_time_fraction"].mean()),
                "final_loss": float(ours["final_loss"].mean()),
                "matched_random_slo": float(env_slo.mean()),
                "no_sync_slo": float(floor["slo_violation_rate"].mean()),
                "effect_size": float(d.mean()),
                "effect_ci_low": lo,
                "effect_ci_high": hi,
                "effect_dz": stats.effect_size(d),
                "p_wilcoxon": stats.wilcoxon(d),
                "p_sign": stats.sign_test(d),
                "p_sign_flip": stats.sign_flip_test(d, seed=p),
                "seeds_better": int((d < 0).sum()),
                "loss_diff": float(dl.mean()),
                "loss_diff_ci_low": llo,
                "loss_diff_ci_high": lhi,
                "tokens_policy": tokens,
                "tokens_control": float(env_tokens.mean()),
                "tokens_ratio": tokens / float(env_tokens.mean()) if env_tokens.mean() else None,
                "envelope_percentile": float(np.mean((env_slo < slo[:, None]).mean(axis=1))),
                "calibration": str(calibrated) if policy.name == "wa_calibrated" else "",
            }
        )
    table = pd.DataFrame(rows)
    decided = design.evaluate(diffs)
    for col, metric in (("slo", "slo_violation_rate"), ("loss", "final_loss")):
        res = [decided[stats.Comparison(n, metric).name] for n in table["policy"]]
        if col == "slo":
            table["role"] = [r["role"] for r in res]
            table["family_size"] = [r["family_size"] for r in res]
            table["p_slo"] = [r["p"] for r in res]
            table["p_value"] = [r["p_adjusted"] for r in res]
        else:
            table["p_loss"] = [r["p"] for r in res]
            table["p_loss_adjusted"] = [r["p_adjusted"] for r in res]
        table[f"{col}_verdict"] = [r["verdict"] for r in res]
    decisions = [_decide(r, cfg) for r in table.itertuples()]
    overlap = " (overlapping seeds)" if cfg.allow_overlap else ""
    table["vs_matched_random"] = [verdict + overlap for verdict, _ in decisions]
    table["verdict_reason"] = [reason for _, reason in decisions]
    return table, diffs


def _decide(r, cfg: ProtocolConfig) -> tuple[str, str]:
    """beats / ties / loses (module doc) and why, short: which of the SLO test (its p: the
    primary's own, a secondary's after Holm) and the loss guard (the 95% bootstrap CI of
    the mean final-loss difference against ``loss_margin``) decided. ``(overlapping
    seeds)`` is appended by the caller when a trace regime's seeds share requests
    (``allow_overlap``): the tests then overstate the evidence."""
    p = ("Holm p" if r.role == "secondary" else "p") + f" {r.p_value:.2g}"
    guard = f"{cfg.loss_margin:g} nats"
    if r.slo_verdict == stats.WORSE:
        return "loses", f"more SLO violations, {p}"
    if r.loss_verdict == stats.WORSE and r.loss_diff_ci_low > cfg.loss_margin:
        return "loses", f"loss guard: final loss {r.loss_diff:+.3g} nats, CI above {guard}"
    if r.slo_verdict != stats.BETTER:
        return "ties", f"no SLO difference, {p}"
    if r.loss_verdict != stats.WORSE and r.loss_diff_ci_high <= cfg.loss_margin:
        return "beats", f"fewer SLO violations, {p}; loss within {guard}"
    return "ties", f"fewer SLO violations, {p}, but loss CI up to {r.loss_diff_ci_high:+.3g} nats"


def check_design(cfg: ProtocolConfig) -> None:
    """Refuse, before any simulation, a design that cannot run: an unknown primary policy,
    a pilot of one seed, a pilot on a trace regime, or a pilot whose seed cap cannot find
    the primary (ConfigErrors naming the field)."""
    cfg.design()
    if cfg.pilot_seeds == 1:
        raise ConfigError("pilot_seeds", "a pilot needs at least 2 seeds (an sd), or 0")
    if cfg.pilot_seeds:
        for name in cfg.regimes:
            if cfg.regime(name).is_trace:
                raise ConfigError(
                    "pilot_seeds",
                    f"regime {name} replays a trace, which holds a fixed number of disjoint "
                    "segments: no pilot there (run the pilot on a synthetic regime)",
                )
        if cfg.seeds_from_pilot:
            cfg.design().require(cfg.max_seeds, "max_seeds")


def run_protocol(
    cfg: ProtocolConfig, console=None, progress=None, durations: SyncDurations | None = None
) -> dict:
    """Every distinct regime (:meth:`ProtocolConfig.distinct_regimes`); returns
    ``runs``/``verdicts`` tables, the per-regime ``design`` statements (:func:`run_regime`),
    ``sync_timing`` (:func:`sync_timing` of the primary policy, by regime), ``sync_times``
    (:func:`timeline`, all regimes), ``regime_labels``, ``merged_regimes``, wall time and
    windows per second.

    ``progress``: a rich Progress advanced once per regime (:func:`trainfabric.progress.track`).
    Everything is checked before the first simulation (:func:`check_protocol`); what the
    seed count cannot find is warned (:class:`~.stats.DesignWarning`) and listed in the
    statement's ``warnings``. ``durations``: sync durations from a distribution
    (:class:`~.fleet.SyncDurations`).
    """
    check_protocol(cfg, durations)
    t0 = time.perf_counter()
    runs, verdicts, design, timing, times = [], [], {}, {}, []
    merged = cfg.distinct_regimes()
    for name in track(list(merged), "regimes", progress):
        if console is not None:
            console.print(f"diloco protocol: regime {name} ...")
        r, v, info = run_regime(cfg, name, durations)
        for text in info["warnings"]:
            warnings.warn(f"{name}: {text}", stats.DesignWarning, stacklevel=2)
        runs.append(r)
        verdicts.append(v.assign(regime_label=cfg.regime_label(name)))
        timing[name] = info.pop("sync_timing")
        times.append(info.pop("timeline"))
        design[name] = info
    wall = time.perf_counter() - t0
    runs_t = pd.concat(runs, ignore_index=True)
    windows = float(runs_t["windows"].sum())
    return {
        "runs": runs_t,
        "verdicts": pd.concat(verdicts, ignore_index=True),
        "design": design,
        "sync_timing": timing,
        "sync_times": pd.concat(times, ignore_index=True),
        "regime_labels": {name: cfg.regime_label(name) for name in merged},
        "merged_regimes": merged,
        "wall_s": wall,
        "windows_simulated": windows,
        "windows_per_s": windows / wall,
    }


def transfer(sim_effects, replay_effects, level: float = 0.95, seed: int = 0) -> dict:
    """Does a simulated effect (per-seed differences) transfer to a replay?

    Reports both means with bootstrap CIs, their ratio and ``transfers``: same sign and the
    replay's CI overlapping the simulation's. Only then may a serving-SLO gain be claimed.
    """
    a, b = np.asarray(sim_effects, float), np.asarray(replay_effects, float)
    if a.size < 2 or b.size < 2:
        raise ConfigError("effects", "need at least two per-seed effects on each side")
    ci_a = stats.bootstrap_ci(a, level, seed=seed)
    ci_b = stats.bootstrap_ci(b, level, seed=seed + 1)
    same_sign = np.sign(a.mean()) == np.sign(b.mean()) and a.mean() != 0
    overlap = ci_a[0] <= ci_b[1] and ci_b[0] <= ci_a[1]
    return {
        "sim_mean": float(a.mean()),
        "sim_ci": ci_a,
        "replay_mean": float(b.mean()),
        "replay_ci": ci_b,
        "ratio": float(b.mean() / a.mean()) if a.mean() else float("nan"),
        "transfers": bool(same_sign and overlap),
    }


def findings(res: dict, cfg: ProtocolConfig) -> list[str]:
    """The answer in sentences computed from ``res`` (:func:`run_protocol`), per regime:
    the primary policy against its matched random with the verdict's reason, when its syncs
    ran (the request rate during them against the mean), and the verdicts of all policies."""
    out = []
    for name, rows in res["verdicts"].groupby("regime", sort=False):
        label = res["regime_labels"][name]
        lead = rows[rows["role"] == "primary"].iloc[0]
        out.append(
            f"On {label}, {lead.policy} {_VERBS[lead.vs_matched_random.split(' ')[0]]} matched "
            f"random ({lead.verdict_reason}): {100 * lead.slo_violation_rate:.3f}% vs "
            f"{100 * lead.matched_random_slo:.3f}% SLO violations, {lead.effect_size:+.3g} "
            f"percentage points over {lead.seeds} seeds (no-sync floor "
            f"{100 * lead.no_sync_slo:.3f}%)."
        )
        timing = _timing_sentence(res["sync_timing"][name])
        if timing and not cfg.regime(name).seed_compat:  # seed_compat: no requests drive it
            out.append(timing)
        if len(rows) > 1:
            out.append(f"On {label}, {_counts_sentence(rows)}.")
    return out


_VERBS = {"beats": "beats", "ties": "ties with", "loses": "loses to"}


def _timing_sentence(t: dict) -> str:
    """``P's syncs ran when the request rate was X% below its mean (...)``; empty when
    the policy never synced."""
    during, mean = t["request_rate_during_syncs_per_s"], t["request_rate_mean_per_s"]
    if not (math.isfinite(during) and mean > 0):
        return ""
    rel = during / mean - 1
    random = t["matched_random_request_rate_during_syncs_per_s"]
    return (
        f"There, {t['policy']}'s {t['syncs']:,} syncs ran when the request rate was "
        f"{abs(rel):.0%} {'below' if rel < 0 else 'above'} its mean ({during:#.3g} vs "
        f"{mean:#.3g} requests/s; during matched random's syncs: {random:#.3g})."
    )


def _counts_sentence(rows: pd.DataFrame) -> str:
    """``of N policies b beat matched random, t tie and l lose (k by the loss guard)``."""
    verdict = rows["vs_matched_random"].str.split(" ").str[0]
    n = {v: int((verdict == v).sum()) for v in ("beats", "ties", "loses")}
    guard = int(rows["verdict_reason"].str.startswith("loss guard").sum())
    said = f" ({guard} by the loss guard)" if guard else ""
    return (
        f"of {len(rows)} policies {n['beats']} beat matched random, {n['ties']} tie and "
        f"{n['loses']} lose{said}"
    )


SUMMARY_KEYS = (
    "verdict_reason",
    "slo_violation_rate",
    "syncs",
    "vs_matched_random",
    "role",
    "effect_size",
    "p_slo",
    "p_value",
    "slo_verdict",
    "no_sync_slo",
    "matched_random_slo",
    "loss_diff",
    "p_loss",
    "p_loss_adjusted",
    "loss_verdict",
    "tokens_policy",
    "tokens_control",
    "tokens_ratio",
    "family_size",
    "deployable",
)


def run_to_dir(cfg: ProtocolConfig, run_dir, console=None, progress=None) -> dict:
    """Run the protocol, write ``runs``/``verdicts`` tables, a manifest and ``report.html``;
    return the per-regime, per-policy summary (the ``--json`` output)."""
    from trainfabric.io import write_json, write_parquet
    from trainfabric.runs import render_report
    from trainfabric.runs.store import now, write_run_manifest

    run_dir = Path(run_dir)
    started = now()
    res = run_protocol(cfg, console, progress)
    write_parquet(run_dir / "diloco_runs.parquet", res["runs"])
    write_parquet(run_dir / "diloco_verdicts.parquet", res["verdicts"])
    write_parquet(run_dir / "sync_times.parquet", res["sync_times"])
    description = "trainfabric DiLoCo protocol: policies vs matched random"
    config = cfg.model_dump(mode="json")
    seeds = max(info["seeds"] for info in res["design"].values())
    write_run_manifest(run_dir, "diloco-protocol", description, config, list(range(seeds)), started)
    regimes: dict = {}
    for r in res["verdicts"].itertuples():
        regimes.setdefault(r.regime, {})[r.policy] = {k: getattr(r, k) for k in SUMMARY_KEYS} | {
            "segment_s": None if pd.isna(r.segment_s) else float(r.segment_s),
            "segments": None if pd.isna(r.segments) else int(r.segments),
            "seeds_overlap": bool(r.seeds_overlap),
        }
    per_seed = {name: cfg.fleet_for(cfg.regime(name)).windows for name in res["design"]}
    result = {
        "findings": findings(res, cfg),
        "run_dir": str(run_dir),
        "seeds": seeds,
        "seeds_by_regime": {name: info["seeds"] for name, info in res["design"].items()},
        "windows": _one(per_seed.values(), cfg.fleet.windows),
        "windows_per_seed": per_seed,
        "windows_note": windows_note(cfg),
        "regime_labels": res["regime_labels"],
        "merged_regimes": res["merged_regimes"],
        "sync_timing": res["sync_timing"],
        "wall_s": res["wall_s"],
        "windows_per_s": res["windows_per_s"],
        "regimes": regimes,
        "design": {name: info["design"] for name, info in res["design"].items()},
        "power": {name: info["power"] for name, info in res["design"].items()},
        "warnings": {name: info["warnings"] for name, info in res["design"].items()},
    }
    write_json(run_dir / "summary.json", result)  # the report's headline
    return result | {"report": str(render_report(run_dir))}


def _one(values, otherwise):
    """The value every item of ``values`` has, else ``otherwise``."""
    distinct = set(values)
    return distinct.pop() if len(distinct) == 1 else otherwise
