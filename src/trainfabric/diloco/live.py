"""``trainfabric diloco live``: real DiLoCo learners and a real server on one machine, a policy
deciding the syncs, and the simulator's protocol applied to these runs.

**One run** (:func:`run_once`, a policy on a seed): ``learners`` DiLoCo learner processes
(:mod:`trainfabric.diloco.train`: inner AdamW, a real gloo all-reduce of the pseudo-gradients
over tc-shaped veth links between network namespaces, outer Nesterov) share the machine's
cores with a serving engine (a real vLLM server, or the emulator) while an open-loop replay
sends it the requests of the seed's segment of the Azure trace, and a sidecar scrapes its
``/metrics``. Every ``window_s`` the controller builds the policies' observation
(:class:`~.telemetry.Telemetry`: ``inference`` from the sidecar's last scrape window, ``network``
= the busiest shaped link's utilisation from the veths' byte counters, ``checkpoint`` = the
share of the interval spent writing checkpoints, ``serve_now``/``serve_forecast`` from the
segment's arrivals per window, progress from the learners) and asks the *same policy object
the simulator uses*; rank 0 broadcasts the answer. A run lasts ``duration_s`` of replay; the
training runs throughout.

**Trace segments** (:func:`segment`): seed ``s`` replays segment ``s`` of the trace scaled to
``rate_scale`` x its own mean rate, cut into disjoint pieces of ``T = duration_s`` (the
simulator's :meth:`~.fleet.Regime.requests`), shifted to its first request: seeds are
independent samples of the trace; more seeds than it holds are refused. Defaults, chosen for
the load, not for any outcome: ``rate_scale`` 0.4 (the trace's bursts reach 5-12k prompt
tokens/s there; the tiny vLLM server on 2 shared cores finished about 11.6k prompt tokens/s
when measured, and 15k/s at full rate left 30% of a burst unfinished), seeds from segment 22
(10 segments of 120 s with 70-405 requests each: the trace has quiet minutes that would give
empty segments, e.g. segment 32).

**Placement** (``placement``): ``shared`` (above: every process on the machine's cores, the
replay over loopback) or ``testbed`` (:func:`open_session`, :mod:`~.placement`: vLLM and
the load client on ``serve_core``, the learners and this process on ``train_core``, serving's
requests and responses across the learners' shaped link at the INTELLECT-1-derived rate with
``queue_ms`` of queue, the sidecar scraping from the server's namespace), so that a sync
competes with serving for the link and frees no core of serving's; :func:`testbed_config`
scales H and the guards to the testbed's inner phase.

**Streaming DiLoCo** (``fragments`` >= 1): the learners run Streaming DiLoCo and the policy
decides per fragment, its matched random drawn per fragment (:mod:`~.live_fragments`); the
simulated twin is not run (its syncs are whole-model).

**The protocol on real runs** (:func:`run_experiment`), per seed: each reference policy; its
**matched random** control (:func:`~.policies.matched_schedule`: exactly the reference's sync
count on that seed, schedule uniform among those whose gaps respect ``min_h``/``max_h``
converted to windows with the inner steps per window and the sync duration the reference run
measured (:func:`matched_controller_schedule`; where they cannot hold the count, the largest
minimum gap that can); one draw per seed, an envelope being unaffordable live; a scheduled
window that falls inside a running sync is taken at the next consultation); the **no-sync** run
(the same learners and offered load, never syncing: the SLO floor). Per policy: paired
differences vs matched random over seeds of the SLO violation rate, of the eval loss at equal
tokens, at equal wall-clock and at the end (:mod:`~.live_analysis`), each loss with the tokens
both arms had trained at the point compared (mean per arm and their ratio), sign-flip / Wilcoxon
/ sign p-values, the minimum attainable p for the seed count, and the share of the SLO effect
explained by the sync-time fraction.

**The design** (:meth:`LiveConfig.design`, :class:`~.stats.Design`), fixed before the runs:
the primary comparison is the headline policy (the first) vs its matched random on the SLO
violation rate, sign-flip test, alone at ``alpha``; its three loss comparisons and every other
policy's four comparisons form one Holm family. ``better`` / ``worse`` only below ``alpha``
(adjusted for a secondary), else ``no difference detected``. A seed count that cannot find
the primary or any secondary is said before the runs and in the summary's
``design.warnings`` (``--quick``'s 2 seeds: 2/2^2 = 0.5; it measures, it does not decide).
**Power** (:func:`power_statement`): from ``pilot_effects`` (a pilot's per-seed SLO
differences on other segments, ``--pilot FILE``), the seeds a power of ``power`` needs and
whether this run had them; without a pilot the same calculation on this run's own
differences, labelled post hoc. :func:`reanalyse` judges a stored result by these rules
from the data it holds.

**Effect-size transfer** (:func:`simulate_seeds`): the simulator runs the same configuration —
the same policies and seeds, each seed's own request segment, one replica with the serving
rates and interference fitted from these runs (:mod:`~.calibrate`), the measured inner-step
rate and the measured mean sync duration — and ``sim_vs_real_effect_ratio`` = mean over seeds
of ``SLO_sim(policy) − SLO_sim(matched random)`` over the same in the live runs (see
:func:`~.live_analysis.effect_ratio` for the guards).
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
from pydantic import Field

from trainfabric.config import Config
from trainfabric.diloco import live_analysis as LA
from trainfabric.diloco import requests as R
from trainfabric.diloco import stats
from trainfabric.diloco.fleet import Regime
from trainfabric.diloco.live_fragments import WindowClock
from trainfabric.diloco.policies import POLICY_NAMES, Policy, make_policy, matched_schedule
from trainfabric.diloco.telemetry import (
    MAX_SLO_S,
    PressureModel,
    link_utilisation,
)
from trainfabric.diloco.train.config import MAX_STEPS
from trainfabric.errors import ConfigError, InfeasibleError


class LiveConfig(Config):
    """What ``diloco live`` runs (defaults: the full experiment; :func:`quick_config`).

    Every size has an upper bound, refused naming the field: ``seeds`` <= 1,000, ``seed0``
    <= 10,000, ``duration_s`` <= 86,400, ``learners`` <= 16, ``H``, ``min_h`` and ``max_h``
    <= 10,000,000 inner steps (a training run's own cap), the SLOs <= 3,600 s,
    ``sim_draws`` <= 1,000."""

    policies: list[str] = Field(default_factory=lambda: ["wa_forecast"], min_length=1)
    seeds: int = Field(10, ge=1, le=1000, description="paired seeds (>= 10 for a verdict)")
    seed0: int = Field(22, ge=0, le=10_000, description="first seed (segment index)")
    duration_s: float = Field(120.0, ge=10, le=86_400, description="replay seconds per run")
    window_s: float = Field(1.0, gt=0, le=60, description="control window")
    rate_scale: float = Field(0.4, gt=0, le=100, description="x the trace's own request rate")
    learners: int = Field(2, ge=2, le=16)
    shaping_mbit: float = Field(10.0, gt=0, le=100_000, description="learner link rate")
    H: int = Field(50, ge=1, le=MAX_STEPS, description="fixed_h interval (inner steps)")
    min_h: int = Field(
        20, ge=1, le=MAX_STEPS, description="guards of the other policies (inner steps)"
    )
    max_h: int = Field(100, ge=1, le=MAX_STEPS)
    server: Literal["vllm", "emulator"] = "vllm"
    ttft_slo_s: float = Field(0.5, gt=0, le=MAX_SLO_S)
    tpot_slo_s: float = Field(0.05, gt=0, le=MAX_SLO_S)
    forecast_alpha: float = Field(0.3, gt=0, le=1)
    no_sync: bool = Field(True, description="run the no-sync load match")
    sim_draws: int = Field(20, ge=1, le=1000, description="matched-random draws per seed in sim")
    warmup_s: float = Field(30.0, ge=0, le=3600, description="server warm-up replay (s)")
    alpha: float = Field(0.05, gt=0, lt=1, description="level of every verdict")
    power: float = Field(0.8, gt=0, lt=1, description="target power of the primary test")
    pilot_effects: list[float] | None = Field(
        None,
        description="a pilot's per-seed SLO differences (headline policy − matched random, "
        "fractions) on other segments: the power calculation's input",
    )
    pilot_source: str | None = Field(None, description="where pilot_effects come from")
    placement: Literal["shared", "testbed"] = Field(
        "shared", description="shared cores and loopback serving, or the testbed's placement"
    )
    queue_ms: float = Field(100.0, gt=0, le=60_000, description="testbed: the link's queue (ms)")
    serve_core: int = Field(0, ge=0, le=4095, description="testbed: vLLM's and the client's core")
    train_core: int = Field(1, ge=0, le=4095, description="testbed: the learners' core")
    fragments: int = Field(0, ge=0, le=48, description="Streaming DiLoCo fragments (0: DiLoCo)")
    overlap: int = Field(1, ge=0, le=MAX_STEPS, description="streaming: steps a sync overlaps")

    def design(self) -> stats.Design:
        """The experiment's design (module doc): the headline policy vs its matched random on
        SLO violations, alone; its losses and every other policy's comparisons, one family."""
        return stats.Design.for_policies(self.policies, self.policies[0], alpha=self.alpha)


def quick_config(**update) -> LiveConfig:
    """A few minutes: 2 seeds of 45 s (segments 10 and 11: 110 and 125 requests), the
    headline policy, its matched random, no-sync."""
    return LiveConfig(**({"seeds": 2, "duration_s": 45.0, "seed0": 10} | update))


def testbed_config(**update) -> LiveConfig:
    """The protocol on the testbed (:mod:`~.live_testbed`): H = 125 inner steps (about the
    testbed's 10 s inner phase at the learners' 12-13 steps/s on one core), the guards at
    the live defaults' 0.4 H and 2 H (``min_h`` 50, ``max_h`` 250), 60 s replays."""
    base = {"placement": "testbed", "H": 125, "min_h": 50, "max_h": 250, "duration_s": 60.0}
    return LiveConfig(**(base | update))


def check_config(cfg: LiveConfig) -> None:
    """Refuse what cannot run, naming the field."""
    if cfg.placement == "testbed":
        import os

        for name in ("serve_core", "train_core"):
            if getattr(cfg, name) >= (os.cpu_count() or 1):
                raise ConfigError(name, f"core {getattr(cfg, name)} does not exist")
        if cfg.serve_core == cfg.train_core:
            raise ConfigError("train_core", "must differ from serve_core")
    if cfg.fragments and cfg.overlap >= cfg.H:
        raise ConfigError("overlap", f"must be less than H ({cfg.H})")
    from trainfabric.diloco.train.config import ModelConfig

    most = min(cfg.H, ModelConfig().layers)  # a fragment holds at least one block
    if cfg.fragments > most:
        raise ConfigError("fragments", f"must be at most {most} (H and the model's blocks)")
    for name in cfg.policies:
        if name not in POLICY_NAMES:
            raise ConfigError(
                "policy", f"unknown policy {name!r}; known: {', '.join(POLICY_NAMES)}"
            )
        if name == "wa_calibrated":
            raise ConfigError("policy", "wa_calibrated sees the future; not run live")
    if not cfg.min_h <= cfg.max_h:
        raise ConfigError("min_h", f"must be <= max_h ({cfg.min_h} > {cfg.max_h})")
    from trainfabric.diloco.fleet import check_segments

    check_segments(live_regime(cfg), cfg.seed0 + cfg.seeds, cfg.duration_s, flag="seeds")


# -- trace segments ------------------------------------------------------------------------------
def live_regime(cfg: LiveConfig, sync_s: float | None = None):
    """The shipped Azure trace at ``rate_scale`` x its own mean rate, cut into disjoint
    segments of ``duration_s`` (:meth:`~.fleet.Regime.requests`), each shifted so its first
    request arrives at 0 (as the replay sends it): the live replay and the simulated twin
    draw seed ``s``'s requests from the same call. ``sync_s`` sets the twin's scalar sync
    duration (the ring term is zeroed; measured samples replace it in :func:`simulate_seeds`)."""
    from trainfabric.diloco.learners import SyncModel

    tr = R.azure_trace()
    rate = cfg.rate_scale * tr.n / (tr.span_s + tr.span_s / max(tr.n - 1, 1))
    sync = SyncModel(islands=cfg.learners, params=1.0, step_latency_s=0.0,
                     outer_step_s=sync_s or 0.0)  # fmt: skip
    return LiveRegime(name="azure-live", arrivals="azure", rate=rate, sync=sync)


class LiveRegime(Regime):
    """A trace regime whose segments start at their first request."""

    def requests(self, horizon_s: float, seed: int) -> R.Requests:
        r = super().requests(horizon_s, seed)
        t0 = r.arrival_s[0] if r.n else 0.0
        return R.Requests(r.arrival_s - t0, r.prompt_tokens, r.output_tokens)


def segment(cfg: LiveConfig, seed: int) -> R.Requests:
    """Seed ``seed``'s requests: segment number ``seed`` of the trace (module doc)."""
    return live_regime(cfg).requests(cfg.duration_s, seed)


def arrivals_per_window(req: R.Requests, windows: int, window_s: float) -> np.ndarray:
    return np.histogram(req.arrival_s, bins=windows, range=(0.0, windows * window_s))[0]


# -- policies at the live scale ------------------------------------------------------------------
def live_policy(name: str, cfg: LiveConfig, tokens_per_step: float) -> Policy:
    """``name`` with the guards and normalisations scaled to the live run's inner steps:
    ``min_h``/``max_h`` from the config, ``fixed_h``'s ``H``, the token thresholds = ``H``
    steps' tokens (the simulator's convention: 256 steps' tokens at its default H)."""
    params: dict = {"min_h": float(cfg.min_h), "max_h": float(cfg.max_h)}
    if name == "fixed_h":
        params = {"H": float(cfg.H)}
    elif name == "adaptive_tokens":
        params["min_tokens"] = cfg.H * tokens_per_step
    elif name.startswith("wa_"):
        params["tokens_norm"] = cfg.H * tokens_per_step
    return make_policy(name, **params)


# -- controllers ---------------------------------------------------------------------------------
@dataclass
class Signals:
    """Where a controller reads the serving pressure: ``inference`` returns the sidecar's
    :class:`~.serve.sidecar.Reading`. ``network`` and ``checkpoint`` come with the learners'
    progress (:func:`learner_signals`)."""

    inference: Callable


def learner_signals(prev, now) -> tuple[float, float]:
    """``network`` and ``checkpoint`` between two consultations (``prev``, ``now``: the
    learners' progress reports, :class:`~.train.controller.Progress`): the busiest learner
    link's utilisation from the veths' byte counters (:func:`~.telemetry.link_utilisation`,
    0 when unshaped) and the share of the interval spent writing checkpoints (the increase of
    the cumulative ``checkpoint_s`` over the interval, capped to [0, 1])."""
    if prev is None:
        return 0.0, 0.0
    dt = getattr(now, "link_time", 0.0) - getattr(prev, "link_time", 0.0)
    net = 0.0
    rate = getattr(now, "link_rate_bps", None)
    if now.link_bytes and prev.link_bytes and rate and dt > 0:
        sent = [max(a[0] - b[0], a[1] - b[1]) for a, b in zip(now.link_bytes, prev.link_bytes,
                                                              strict=True)]  # fmt: skip
        net = link_utilisation((0.0, prev.link_time), (float(max(sent)), now.link_time), rate)
    wall = now.wall_s - prev.wall_s
    ckpt = (now.checkpoint_s - prev.checkpoint_s) / wall if wall > 0 else 0.0
    return net, float(min(max(ckpt, 0.0), 1.0))


class LiveController(WindowClock):
    """Asks a policy (or a fixed schedule) once per replay window; logs every decision.

    The learners consult after every inner step (``control_window_s`` 0); the first
    consultation in a window decides and the others in that window answer no, so every
    window the learners reach outside a sync gets exactly one decision, on the replay's
    clock (a consultation period on the learners' own clock drifts against the windows and
    skips one now and then: the last one, where a matched-random sync was due, on one seed of
    eight). The window index is ``floor((now − t0) / window_s)``; before ``t0`` (the replay's
    start) and after the last window nothing syncs (:class:`~.live_fragments.WindowClock`).
    While the sidecar's health is ``unknown`` (or before its first scrape) the policy is not
    asked: the sidecar's documented safe fallback, fixed H (``H`` inner steps), decides.
    ``network`` and ``checkpoint`` are measured between decisions."""

    def __init__(
        self,
        policy: Policy | None,
        signals: Signals,
        arrivals: np.ndarray,
        cfg: LiveConfig,
        seed: int,
        schedule: np.ndarray | None = None,
    ):
        super().__init__(policy, arrivals, cfg, seed)
        self.signals = signals
        self.schedule = None if schedule is None else list(np.flatnonzero(schedule))
        self.prev = None  # the progress report of the last decision (the learners' signals)
        self.decided: int | None = None  # the window decided last

    def decide(self, progress) -> bool:
        self.started.set()
        now = time.time()
        w = self.window(now)
        if w is None or w == self.decided:
            return False
        self.decided = w
        reading = self.signals.inference()
        fallback = reading.fallback or reading.inference is None
        net, ckpt = learner_signals(self.prev, progress)
        self.prev = progress
        sig = {
            "inference": 0.0 if fallback else float(reading.inference),
            "network": net,
            "checkpoint": ckpt,
        }
        if self.schedule is not None:  # matched random: the next scheduled window has come
            go = bool(self.schedule) and bool(w >= self.schedule[0])
            if go:
                self.schedule.pop(0)
        elif fallback:
            go = progress.h >= self.cfg.H
        else:
            obs = self.telemetry.observe(
                w,
                h=progress.h,
                tokens=progress.tokens_since_sync,
                loss_delta=progress.loss_delta,
                staleness_s=progress.since_sync_s,
                **sig,
            )
            go = bool(self.policy.decide(obs)[0])
        self.report(go)
        self.log.append(
            {"time_s": now - self.t0, "window": w, "h": progress.h, "sync": go}
            | sig
            | {"fallback": fallback, "health": reading.health}
            | {"serve_now": float(self.telemetry.serve_now[0])}
            | {"serve_forecast": float(self.telemetry.serve_forecast[0])}
        )
        return go


class Never:
    """The no-sync load match: the learners train and never sync."""

    def __init__(self):
        self.started = threading.Event()
        self.log: list[dict] = []
        self.t0: float | None = None

    def decide(self, progress) -> bool:
        self.started.set()
        return False


def matched_controller_schedule(
    budget: int, ref: RunRecord, cfg: LiveConfig, seed: int
) -> np.ndarray:
    """The matched-random schedule for a reference run (module doc): gaps of ``min_h`` to
    ``max_h`` inner steps at the reference's inner-step rate plus its mean sync, in windows
    (``⌈min_h / steps per window + sync / window_s⌉``, one rounding). Where the guards cannot
    hold the budget, the largest minimum gap that can (``⌊W / budget⌋``, at least the sync's
    windows) keeps the syncs as far apart as the windows allow."""
    W = int(cfg.duration_s // cfg.window_s)
    per_window = max(ref.steps_per_s * cfg.window_s, 1e-9)
    sync_w = ref.mean_sync_s / cfg.window_s
    busy = max(1, math.ceil(sync_w))
    lo = max(1, math.ceil(cfg.min_h / per_window + sync_w))
    hi = max(lo, math.floor(cfg.max_h / per_window + sync_w))
    rng = np.random.default_rng([seed, 7919])
    try:
        return matched_schedule(budget, W, lo, hi, rng)
    except InfeasibleError:  # the guards cannot hold this budget: as far apart as it allows
        return matched_schedule(budget, W, max(busy, min(lo, W // max(budget, 1))), W, rng)


# -- one run --------------------------------------------------------------------------------------
@dataclass
class RunRecord:
    """A finished live run: its tables (times in seconds since the replay's start). The
    ``syncs`` table flags the closing sync the learners run after being stopped (``final``):
    it counts as a sync (serving during it is "inside"), not as one the policy chose."""

    label: str
    policy: str
    seed: int
    requests: pd.DataFrame
    syncs: pd.DataFrame
    evals: pd.DataFrame
    steps: pd.DataFrame
    decisions: pd.DataFrame
    duration_s: float
    final_loss: float | None
    extra: dict = field(default_factory=dict)

    @property
    def mean_sync_s(self) -> float:
        d = (self.syncs["end_s"] - self.syncs["start_s"]).to_numpy()
        return float(d.mean()) if d.size else 0.0

    @property
    def steps_per_s(self) -> float:
        st = self.steps
        inside = (self.syncs["end_s"] - self.syncs["start_s"]).sum() if len(self.syncs) else 0.0
        span = float(st["wall_s"].iloc[-1] - st["wall_s"].iloc[0]) - float(inside)
        return float(st["step"].iloc[-1] - st["step"].iloc[0]) / max(span, 1e-9)

    def summary(self, cfg: LiveConfig) -> dict:
        req, T = self.requests, self.duration_s
        sy = self.syncs
        final = sy["final"] if "final" in sy else np.zeros(len(sy), bool)
        syncs = sy[(sy["start_s"] >= 0) & (sy["start_s"] < T) & ~np.asarray(final, bool)]
        sync_time = float((np.minimum(syncs["end_s"], T) - syncs["start_s"]).clip(lower=0).sum())
        inside = self.steps[(self.steps["wall_s"] >= 0) & (self.steps["wall_s"] <= T)]
        tokens = float(inside["tokens"].iloc[-1] - inside["tokens"].iloc[0]) if len(inside) else 0
        return {
            "label": self.label,
            "policy": self.policy,
            "seed": self.seed,
            "requests": int(len(req)),
            "slo_violation_rate": float(req["violated"].mean()) if len(req) else 0.0,
            "ttft_violation_rate": float(req["ttft_violated"].mean()) if len(req) else 0.0,
            "unfinished": int(req["finish_s"].isna().sum()),
            "syncs": int(len(syncs)),
            "sync_time_fraction": sync_time / T,
            "mean_sync_s": self.mean_sync_s,
            "tokens": tokens,
            "steps_per_s": self.steps_per_s,
            "final_loss": self.final_loss,
        }

    def write(self, run_dir: Path) -> None:
        from trainfabric.io import write_parquet

        run_dir.mkdir(parents=True, exist_ok=True)
        for name in ("requests", "syncs", "evals", "steps", "decisions"):
            write_parquet(run_dir / f"{name}.parquet", getattr(self, name))


# -- the machinery of one run --------------------------------------------------------------------
@dataclass
class Session:
    """What stays up across the runs of an experiment: the serving endpoint (started once:
    a vLLM start takes minutes) and where the runs are written."""

    url: str
    model: str
    kind: str
    out_dir: Path
    set_sync: Callable | None = None  # the emulator's interference switch (None for vLLM)
    runs: int = 0  # replays so far: each draws its prompts with its own seed
    net: object = None  # the testbed's network (None: each run makes its own)
    train_cpus: tuple[int, ...] | None = None  # the testbed's learner cores
    send: Callable | None = None  # the replay as the testbed's client runs it
    scrape_from: Callable | None = None  # the sidecar's thread enters the server's namespace

    def replay(self, req: R.Requests, **kw):
        """Replay ``req`` against the server (in the testbed, from the client's namespace)."""
        from trainfabric.diloco.serve.replay import replay

        return (self.send or replay)(req, url=self.url, model=self.model, **kw)

    def prompt_seed(self) -> int:
        """A fresh prompt seed per replay: identical prompts would let vLLM's prefix cache
        skip the prefill of every run after a seed's first (measured: the second run of a
        seed had a 5x lower median TTFT)."""
        self.runs += 1
        return self.runs


def train_config(cfg: LiveConfig, seed: int, max_seconds: float, final_sync: bool = True,
                 shaping=None):  # fmt: skip
    """The learners' config for a live run (the module docstring's recipe); ``shaping``: the
    testbed network's (default: ``shaping_mbit``); Streaming DiLoCo with ``fragments``."""
    from trainfabric.diloco.train.config import ShapingConfig, StreamingConfig, TrainConfig

    streaming = None
    if cfg.fragments:
        streaming = StreamingConfig(fragments=cfg.fragments, overlap=cfg.overlap, alpha=0.5)
    return TrainConfig(
        learners=cfg.learners,
        steps=10_000_000,
        max_seconds=max_seconds,
        H=cfg.H,
        control_window_s=0.0,  # LiveController decides at the first consultation per window
        seed=seed,
        shaping=shaping or ShapingConfig(rate_mbit=cfg.shaping_mbit),
        final_sync=final_sync,
        streaming=streaming,
    )


def run_once(
    session: Session,
    cfg: LiveConfig,
    seed: int,
    label: str,
    policy: Policy | None,
    schedule: np.ndarray | None = None,
    never: bool = False,
    fragment_schedules: np.ndarray | None = None,
) -> RunRecord:
    """One live run (module doc): training starts first; when rank 0 first reaches a control
    point the replay of the seed's segment starts (``t0``); when the replay is over (at least
    ``duration_s``) the learners are stopped (their final sync and eval come after it)."""
    from trainfabric.diloco.serve.sidecar import Sidecar, SidecarConfig
    from trainfabric.diloco.train.launch import start

    req = segment(cfg, seed)
    windows = int(cfg.duration_s // cfg.window_s)
    arrivals = arrivals_per_window(req, windows, cfg.window_s)
    run_dir = session.out_dir / label
    pressure = PressureModel(ttft_slo_s=cfg.ttft_slo_s, tpot_slo_s=cfg.tpot_slo_s)
    sidecar = Sidecar(SidecarConfig(url=session.url, period_s=cfg.window_s, pressure=pressure),
                      enter=session.scrape_from)  # fmt: skip
    signals = Signals(inference=sidecar.latest)
    gate = None
    if never:
        ctl = Never()
    elif cfg.fragments:
        from trainfabric.diloco.live_fragments import FragmentController

        tps = cfg.learners * 512.0  # tokens per inner step: batch 8 x context 64 per learner
        ctl = gate = FragmentController(policy, sidecar.latest, arrivals, cfg, seed,
                                        session.net, tps, fragment_schedules)  # fmt: skip
    else:
        ctl = LiveController(policy, signals, arrivals, cfg, seed, schedule)
    ctl.report = sidecar.record_decision
    tcfg = train_config(
        cfg,
        seed,
        max_seconds=cfg.duration_s + 900.0,
        final_sync=True,
        shaping=session.net.shaping if session.net is not None else None,
    )
    with sidecar:
        run = start(tcfg, run_dir / "train", ctl, net=session.net, cpus=session.train_cpus,
                    gate=gate)  # fmt: skip
        stop_emu = _mirror_syncs(run, session)
        try:
            _wait_started(run, ctl, timeout_s=300.0)
            ctl.t0 = time.time()
            rep = session.replay(
                req, max_seconds=cfg.duration_s, max_requests=1_000_000, drain_s=DRAIN_S,
                ttft_slo_s=cfg.ttft_slo_s, tpot_slo_s=cfg.tpot_slo_s, window_s=cfg.window_s,
                seed=session.prompt_seed(),
            )  # fmt: skip
            left = rep.summary["start_unix_s"] + cfg.duration_s - time.time()
            if left > 0:
                time.sleep(left)
        finally:
            stop_at = time.time()
            run.stop()
            stop_emu.set()
        result = run.wait()
    t0 = rep.summary["start_unix_s"]
    rec = _record(label, policy, seed, cfg, t0, rep.requests, run_dir / "train", ctl, result, never)
    rec.syncs["final"] = rec.syncs["start_s"] >= stop_at - t0  # the closing sync after stop
    return rec


def _wait_started(run, ctl, timeout_s: float) -> None:
    """Until rank 0 first asks the controller; fails at once if the learners' supervisor
    ended (a learner that cannot start) instead of waiting out the timeout."""
    deadline = time.time() + timeout_s
    while not ctl.started.wait(1.0):
        if not run.thread.is_alive() or time.time() > deadline:
            why = repr(run.error) if run.error is not None else f"nothing in {timeout_s:g} s"
            raise RuntimeError(f"the learners did not reach a control point: {why}")


DRAIN_S = 30.0  # in-flight requests after the last is sent, then cancelled (unfinished)


def _mirror_syncs(run, session: Session) -> threading.Event:
    """With the emulator, switch its interference on while the learners sync (vLLM needs no
    switch: the sync's processes and the server share the machine's cores)."""
    stop = threading.Event()
    if session.set_sync is None:
        return stop

    def loop():
        state = False
        while not stop.wait(0.05):
            now = run.syncing()
            if now != state:
                session.set_sync(now)
                state = now
        session.set_sync(False)

    threading.Thread(target=loop, daemon=True).start()
    return stop


def _record(label, policy, seed, cfg, t0, table, train_dir, ctl, result, never) -> RunRecord:
    """The run's tables on the replay's clock (seconds since ``t0``)."""
    steps = pd.read_parquet(train_dir / "steps.parquet")
    r0 = steps[steps["rank"] == 0].sort_values("step")
    syncs = pd.read_parquet(train_dir / "syncs.parquet")
    evals = pd.read_parquet(train_dir / "evals.parquet")
    tps = float(r0["tokens"].iloc[-1] / max(r0["step"].iloc[-1], 1)) * cfg.learners
    steps_t = pd.DataFrame(
        {
            "wall_s": r0["t"].to_numpy() - t0,
            "step": r0["step"].to_numpy(),
            "tokens": r0["tokens"].to_numpy() * cfg.learners,
            "loss": r0["loss"].to_numpy(),
        }
    )
    prev = np.r_[0, syncs["step"].to_numpy()[:-1]] if len(syncs) else np.zeros(0)
    syncs_t = pd.DataFrame(
        {
            "start_s": syncs["t_start"].to_numpy(float) - t0 if len(syncs) else [],
            "end_s": syncs["t_end"].to_numpy(float) - t0 if len(syncs) else [],
            "steps": syncs["step"].to_numpy() - prev if len(syncs) else [],
            "bytes": syncs["bytes"].to_numpy(float) if len(syncs) else [],
        }
    )
    if "fragment" in syncs:
        syncs_t["fragment"] = syncs["fragment"].to_numpy(int)
    evals_t = pd.DataFrame(
        {
            "wall_s": evals["t"].to_numpy(float) - t0,
            "tokens": evals["step"].to_numpy(float) * tps,
            "syncs": evals["sync"].to_numpy(),
            "eval_loss": evals["eval_loss"].to_numpy(float),
            "at": evals["at"].astype(str).to_numpy(),
        }
    )
    return RunRecord(
        label=label,
        policy="no_sync" if never else (policy.name if policy is not None else "matched_random"),
        seed=seed,
        requests=table,
        syncs=syncs_t,
        evals=evals_t,
        steps=steps_t,
        decisions=pd.DataFrame(ctl.log),
        duration_s=cfg.duration_s,
        final_loss=float(result.eval_loss),
        extra={"shaping": result.shaping, "params": result.params, "tokens_per_step": tps},
    )


# -- the experiment ------------------------------------------------------------------------------
def run_experiment(cfg: LiveConfig, out_dir: Path, console=None) -> dict:
    """Every seed: the reference policies, their matched-random controls and the no-sync run,
    against one server started for the whole experiment; then the analysis and the simulated
    twin. Writes each run's tables under ``out_dir/<label>/`` and returns the summary."""
    check_config(cfg)
    for text in cfg.design().check(cfg.seeds):  # before an hour of runs, not after
        _say(console, f"[bold red]{text}[/]")
    records: list[RunRecord] = []
    started = time.time()
    with open_session(cfg, out_dir) as session:
        warm_up(session, cfg, console)
        for seed in range(cfg.seed0, cfg.seed0 + cfg.seeds):
            records += _seed_runs(session, cfg, seed, console)
    analysis = analyse(cfg, records)
    analysis["server"] = session.kind
    analysis["wall_s"] = time.time() - started
    return analysis | {"records": records}


@contextlib.contextmanager
def open_session(cfg: LiveConfig, out_dir: Path):
    """The server for the whole experiment, placed as ``cfg.placement`` says: on the shared
    cores at loopback, or on the testbed (:func:`~.placement.placed`: the link shaped at
    the INTELLECT-1-derived rate with ``queue_ms`` of queue, the learners on ``train_core``,
    vLLM and the client on ``serve_core``, serving's traffic across the learners' link)."""
    from trainfabric.diloco.serve.server import serve

    log = out_dir / "server.log"
    if cfg.placement == "shared":
        with serve(kind=cfg.server, log_path=log) as srv:
            yield Session(srv.url, srv.model, srv.kind, out_dir, _sync_switch(srv))
        return
    from functools import partial

    from trainfabric.diloco import placement as TB
    from trainfabric.diloco.train import netns
    from trainfabric.diloco.train.config import ModelConfig
    from trainfabric.diloco.train.model import GPT, n_params

    params = n_params(GPT(ModelConfig()))
    shaping = TB.testbed_shaping(params, cfg.learners, TB.INNER_PHASE_S, cfg.queue_ms,
                                 TB.BURST_KB)  # fmt: skip
    with TB.placed(shaping, cfg.server, cfg.serve_core, cfg.train_core, log,
                   learners=cfg.learners) as (srv, net):  # fmt: skip
        yield Session(
            srv.url,
            srv.model,
            srv.kind,
            out_dir,
            None,  # no interference switch: the testbed separates the cores
            net=net,
            train_cpus=(cfg.train_core,),
            send=TB.client_replay(net, cfg.serve_core),
            scrape_from=partial(netns.enter, net.namespace(0)),
        )


def warm_up(session: Session, cfg: LiveConfig, console=None) -> None:
    """Replay ``warmup_s`` seconds of the first seed's segment (fresh prompts, nothing
    measured) before the first run: a fresh vLLM server's first requests of each batch shape
    are slow (measured: the first run after start-up had 2-5x the TTFT of later ones)."""
    if cfg.warmup_s <= 0:
        return
    _say(console, f"warm-up replay ({cfg.warmup_s:g} s)")
    session.replay(segment(cfg, cfg.seed0), max_seconds=cfg.warmup_s, max_requests=1_000_000,
                   drain_s=DRAIN_S, seed=session.prompt_seed())  # fmt: skip


def _sync_switch(srv):
    """The emulator's ``POST /sync`` as a callable (None for a real server)."""
    if srv.kind != "emulator":
        return None
    import httpx

    def switch(active: bool) -> None:
        with contextlib.suppress(httpx.HTTPError):  # a missed switch: less interference
            httpx.post(srv.url + "/sync", json={"active": bool(active)}, timeout=2.0)

    return switch


def _seed_runs(session: Session, cfg: LiveConfig, seed: int, console) -> list[RunRecord]:
    """A seed's runs: each policy then its matched random; the no-sync run last on even
    seeds and first on odd ones (the server and the machine drift during an experiment)."""
    first = cfg.no_sync and (seed - cfg.seed0) % 2 == 1
    out = [_no_sync(session, cfg, seed, console)] if first else []
    for name in cfg.policies:
        _say(console, f"seed {seed}: {name}")
        tps = cfg.learners * 512.0  # refined from the run itself in _record
        ref = run_once(session, cfg, seed, f"seed{seed}-{name}", live_policy(name, cfg, tps))
        ref.write(session.out_dir / ref.label)
        out.append(ref)
        label = f"seed{seed}-matched_random[{name}]"
        if cfg.fragments:
            from trainfabric.diloco.live_fragments import fragment_counts, fragment_schedules

            counts = fragment_counts(ref.syncs, cfg.fragments, cfg.duration_s)
            _say(console, f"seed {seed}: matched random for {name} ({counts} fragment syncs)")
            sched = fragment_schedules(counts, ref, cfg, seed)
            mr = run_once(session, cfg, seed, label, None, fragment_schedules=sched)
        else:
            budget = ref.summary(cfg)["syncs"]
            sched = matched_controller_schedule(budget, ref, cfg, seed)
            _say(console, f"seed {seed}: matched random for {name} ({budget} syncs)")
            mr = run_once(session, cfg, seed, label, None, schedule=sched)
        mr.policy = f"matched_random[{name}]"
        mr.write(session.out_dir / label)
        out.append(mr)
    if cfg.no_sync and not first:
        out.append(_no_sync(session, cfg, seed, console))
    return out


def _no_sync(session: Session, cfg: LiveConfig, seed: int, console) -> RunRecord:
    _say(console, f"seed {seed}: no-sync")
    ns = run_once(session, cfg, seed, f"seed{seed}-no_sync", None, never=True)
    ns.write(session.out_dir / ns.label)
    return ns


def _say(console, text: str) -> None:
    if console is not None:
        console.print(f"diloco live: {text}")


# -- analysis -------------------------------------------------------------------------------------
def analyse(cfg: LiveConfig, records: list[RunRecord]) -> dict:
    """Per run summaries, per policy paired comparisons (SLO, loss at equal tokens and equal
    wall-clock, final loss, each loss with the tokens trained beside it, explained share)
    judged by the design (:meth:`LiveConfig.design`), the sync-time regression."""
    runs = pd.DataFrame([r.summary(cfg) for r in records])
    splits = {
        r.label: LA.latency_split(
            r.requests, r.syncs[["start_s", "end_s"]].to_numpy(), r.duration_s, seed=r.seed
        )  # fmt: skip
        for r in records
    }
    regression = LA.sync_time_regression(runs) if cfg.no_sync else LA.ols([], [])
    comparisons = {}
    for name in cfg.policies:
        comparisons[name] = _compare(cfg, records, name, regression["slope"])
    return {
        "runs": runs,
        "latency_split": splits,
        "comparisons": judge(cfg.design(), comparisons),
        "sync_time_regression": regression,
    }


def judge(design: stats.Design, comparisons: dict) -> dict:
    """``comparisons`` (by policy, :func:`_compare`) with each metric's block extended by the
    design's verdict (:meth:`~.stats.Design.evaluate` on the per-seed differences): ``role``,
    ``test``, ``p``, ``p_adjusted``, ``family_size``, ``alpha``, ``verdict``."""
    diffs = {
        stats.Comparison(policy, metric).name: comp.get("per_seed", {}).get(metric)
        for policy, comp in comparisons.items()
        for metric in METRICS
    }
    decided = design.evaluate({k: _finite(v) for k, v in diffs.items()})
    for policy, comp in comparisons.items():
        for metric in METRICS:
            row = decided.get(stats.Comparison(policy, metric).name)
            if row is not None and comp.get(KEY[metric]) is not None:
                comp[KEY[metric]] |= row
    return comparisons


METRICS = ("slo_violation_rate", *stats.LOSS_METRICS)
KEY = {"slo_violation_rate": "slo"} | {m: m for m in stats.LOSS_METRICS}


def _finite(v):
    return None if v is None else [x for x in v if x is not None and np.isfinite(x)]


def _by_seed(records, policy):
    return {r.seed: r for r in records if r.policy == policy}


def _eval_curve(r: RunRecord, x: str):
    """The eval-loss curve of a run on ``x`` (tokens or wall_s), from the start (the initial
    model's loss is not logged: the curve starts at the first eval)."""
    return r.evals[x].to_numpy(float), r.evals["eval_loss"].to_numpy(float)


def _tokens_at(r: RunRecord, wall_s: float) -> float:
    """Tokens a run had trained at ``wall_s`` (its eval curve, interpolated)."""
    return LA.loss_at(r.evals["wall_s"], r.evals["tokens"], wall_s)


def _final_tokens(r: RunRecord) -> float:
    """Tokens a run had trained at its final eval (the final loss's point)."""
    t = r.evals["tokens"].to_numpy(float)
    t = t[np.isfinite(t)]
    return float(t.max()) if t.size else np.nan


def _compare(cfg, records, name: str, slope) -> dict:
    """``name`` vs its matched random over the seeds both ran (paired). Every loss
    comparison carries the tokens each side had trained at the point compared (``at``: the
    common tokens, or seconds, read; the mean over seeds): ``tokens_policy``,
    ``tokens_control``, ``tokens_ratio``; ``per_seed`` keeps every metric's differences."""
    pol, ctl = _by_seed(records, name), _by_seed(records, f"matched_random[{name}]")
    seeds = sorted(set(pol) & set(ctl))
    d = {m: [] for m in METRICS}
    tokens = {m: ([], []) for m in stats.LOSS_METRICS}
    at = {m: [] for m in stats.LOSS_METRICS}
    d_frac, run_tokens = [], ([], [])
    same_count = 0
    for s in seeds:
        a, b = pol[s].summary(cfg), ctl[s].summary(cfg)
        same_count += a["syncs"] == b["syncs"]
        run_tokens[0].append(a["tokens"])
        run_tokens[1].append(b["tokens"])
        d["slo_violation_rate"].append(a["slo_violation_rate"] - b["slo_violation_rate"])
        d_frac.append(a["sync_time_fraction"] - b["sync_time_fraction"])
        d["final_loss"].append((a["final_loss"] or np.nan) - (b["final_loss"] or np.nan))
        tokens["final_loss"][0].append(_final_tokens(pol[s]))
        tokens["final_loss"][1].append(_final_tokens(ctl[s]))
        for key, metric in (("tokens", "loss_equal_tokens"), ("wall_s", "loss_equal_wall")):
            curves = [_eval_curve(pol[s], key), _eval_curve(ctl[s], key)]
            try:
                x0 = LA.common_point(curves)
                diff = LA.loss_at(*curves[0], x0) - LA.loss_at(*curves[1], x0)
                tk = (x0, x0) if key == "tokens" else (_tokens_at(pol[s], x0),
                                                       _tokens_at(ctl[s], x0))  # fmt: skip
            except ConfigError:  # a curve starting after the other's end
                x0, diff, tk = np.nan, np.nan, (np.nan, np.nan)
            d[metric].append(diff)
            at[metric].append(x0)
            tokens[metric][0].append(tk[0])
            tokens[metric][1].append(tk[1])
    if not seeds:
        return {"seeds": 0}
    finite = lambda v: [x for x in v if np.isfinite(x)]  # noqa: E731
    out = {
        "seeds": len(seeds),
        "seeds_with_equal_sync_count": int(same_count),
        "tokens_trained": _token_block(*run_tokens),
        "slo": LA.paired(d["slo_violation_rate"]),
    }
    for metric in stats.LOSS_METRICS:
        ok = finite(d[metric])
        out[metric] = None
        if ok:
            keep = np.isfinite(d[metric])
            pt, ct = (np.asarray(t, float)[keep] for t in tokens[metric])
            out[metric] = LA.paired(ok) | _token_block(pt, ct)
            if metric == "final_loss":
                out[metric] |= {"at": None, "at_unit": "each run's last eval"}
            else:
                out[metric]["at"] = float(np.mean(np.asarray(at[metric], float)[keep]))
                out[metric]["at_unit"] = "s" if metric == "loss_equal_wall" else "tokens"
    out |= {
        "sync_time_fraction_diff": float(np.mean(d_frac)),
        "explained_by_sync_time": LA.explained_share(slope, d_frac, d["slo_violation_rate"]),
        "slo_effect_per_seed": d["slo_violation_rate"],
        "per_seed": {
            m: [None if not np.isfinite(x) else float(x) for x in v] for m, v in d.items()
        },  # fmt: skip
    }
    return out


def _token_block(policy_tokens, control_tokens) -> dict:
    """Mean tokens per arm over the seeds and their ratio (policy / control)."""
    p = float(np.nanmean(policy_tokens)) if len(policy_tokens) else np.nan
    c = float(np.nanmean(control_tokens)) if len(control_tokens) else np.nan
    return {
        "tokens_policy": p,
        "tokens_control": c,
        "tokens_ratio": p / c if np.isfinite(p) and np.isfinite(c) and c > 0 else None,
    }


# -- the simulated twin ---------------------------------------------------------------------------
def twin_fleet(cfg: LiveConfig, calibration: dict):
    """The simulator's fleet for the live configuration: one replica with the fitted serving
    rates, interference and link term (vLLM's batch limit 256 and chunked prefill; KV
    capacity not binding for the tiny model's 1 GiB cache), the measured inner-step rate, the
    live SLOs and window."""
    from trainfabric.config import validate
    from trainfabric.diloco.fleet import FleetConfig

    fit = calibration["fleet"]
    serving = {"max_batch": 256, "kv_tokens": 1_000_000}
    if cfg.server == "vllm":  # its V1 scheduler mixes prefill chunks into the decode batches
        serving["prefill"] = "chunked"
    serving |= fit["serving"] | {"ttft_slo_s": cfg.ttft_slo_s, "tpot_slo_s": cfg.tpot_slo_s}
    return validate(
        FleetConfig,
        {
            "windows": int(cfg.duration_s // cfg.window_s),
            "window_s": cfg.window_s,
            "serving": serving,
            "progress": fit["progress"],
            "forecast_alpha": cfg.forecast_alpha,
        },
    )


def simulate_seeds(cfg: LiveConfig, calibration: dict, seeds: list[int]) -> dict:
    """Every policy, its matched random (``sim_draws`` schedules per seed, the same gap rule
    as live) and the no-sync floor in the simulator, on the live runs' seeds and requests;
    per policy the per-seed effects ``SLO(policy) − mean SLO(matched random)``."""
    from trainfabric.diloco.fleet import Block, SyncDurations, simulate
    from trainfabric.diloco.policies import Schedule

    samples = np.asarray(calibration["sync_duration_samples_s"], float)
    mean_sync = float(samples.mean()) if samples.size else 0.0
    fleet = twin_fleet(cfg, calibration)
    regime = live_regime(cfg, sync_s=mean_sync)
    durations = SyncDurations(samples=samples) if samples.size else None
    s = np.asarray(seeds, np.int64)
    tps = fleet.progress.tokens_per_step
    out: dict = {}
    floor = simulate(fleet, regime, [Block(live_policy("fixed_h", cfg, tps), s)], sync=False)
    out["no_sync_slo"] = floor.table["slo_violation_rate"].tolist()
    ref = _SimRef(fleet.progress.steps_per_s, mean_sync)
    for name in cfg.policies:
        main = simulate(fleet, regime, [Block(live_policy(name, cfg, tps), s)],
                        durations=durations).table  # fmt: skip
        rows = [
            np.stack(
                [
                    matched_controller_schedule(int(b), ref, cfg, int(seed) * 1000 + k)
                    for k in range(cfg.sim_draws)
                ]
            )  # fmt: skip
            for seed, b in zip(s, main["syncs"], strict=True)
        ]
        sched = Schedule(name=f"matched_random[{name}]", sync_at=np.concatenate(rows))
        ctl = simulate(fleet, regime, [Block(sched, np.repeat(s, cfg.sim_draws))],
                       durations=durations).table  # fmt: skip
        ctl_slo = ctl["slo_violation_rate"].to_numpy().reshape(len(s), cfg.sim_draws)
        pol_slo = main["slo_violation_rate"].to_numpy()
        out[name] = {
            "slo_violation_rate": pol_slo.tolist(),
            "syncs": main["syncs"].tolist(),
            "sync_time_fraction": main["sync_time_fraction"].tolist(),
            "matched_random_slo": ctl_slo.mean(axis=1).tolist(),
            "effect_per_seed": (pol_slo - ctl_slo.mean(axis=1)).tolist(),
        }
    return out


@dataclass
class _SimRef:
    """The two measured rates :func:`matched_controller_schedule` needs, for the twin."""

    steps_per_s: float
    mean_sync_s: float


# -- the run directory and the headline ----------------------------------------------------------
def run_to_dir(cfg: LiveConfig, out_dir: Path, console=None) -> dict:
    """Run the experiment, calibrate the simulator on its runs, run the twin; write
    ``runs.parquet``, ``calibration.json``, ``manifest.json`` and ``summary.json``; return the
    summary (the ``--json`` output)."""
    from trainfabric.diloco.calibrate import calibrate
    from trainfabric.io import write_json, write_parquet
    from trainfabric.runs.store import now, write_run_manifest

    started = now()
    out_dir = Path(out_dir).resolve()  # the learners' rendezvous file needs an absolute path
    res = run_experiment(cfg, out_dir, console)
    records = res.pop("records")
    write_parquet(out_dir / "runs.parquet", res["runs"])
    seeds = sorted({r.seed for r in records})
    twin: dict = {}
    try:
        calibration = calibrate(
            [out_dir / r.label for r in records], link=cfg.placement == "testbed"
        )
        write_json(out_dir / "calibration.json", calibration)
        if not cfg.fragments:  # the twin's syncs are whole-model syncs
            twin = simulate_seeds(cfg, calibration, seeds)
    except ConfigError as exc:  # too little data to fit: the twin is not run
        calibration = {"error": str(exc)}
    summary = headline(cfg, res, records, twin, calibration)
    summary["run_dir"] = str(out_dir)
    shaping = next((r.extra["shaping"] for r in records if r.extra.get("shaping")), None)
    config = cfg.model_dump(mode="json") | {"shaping": shaping, "server": res["server"]}
    write_run_manifest(out_dir, "diloco-live", "DiLoCo live: learners + server + replay",
                       config, seeds, started)  # fmt: skip
    write_json(out_dir / "summary.json", summary)
    return summary


def power_statement(cfg: LiveConfig, effects) -> dict:
    """The power calculation the summary states (:func:`~.stats.power_plan`): from
    ``cfg.pilot_effects`` when given (a pilot on other segments), else from this run's own
    primary differences ``effects``, labelled post hoc (a design for the next run)."""
    if cfg.pilot_effects:
        pilot, source = cfg.pilot_effects, cfg.pilot_source or "pilot"
    else:
        pilot, source = effects, POST_HOC
    if len(pilot) == 0:
        return {"source": source, "n_required": None, "note": "no paired seeds"}
    return stats.power_plan(pilot, cfg.alpha, cfg.power, seeds_used=cfg.seeds, source=source)


POST_HOC = (
    "post hoc: this run's own primary differences (no pilot given); the seeds a next run "
    "needs, not evidence for this one"
)


def pilot_effects_from(doc: dict, policy: str | None = None) -> list[float]:
    """A pilot's per-seed SLO differences from a previous live summary (``summary.json``:
    ``comparisons[policy]``) or a ``diloco_live`` benchmark result (``comparison``);
    ``policy`` defaults to the document's headline. A ConfigError naming ``pilot`` when the
    document holds none."""
    policy = policy or doc.get("policy")
    comp = (doc.get("comparisons") or {}).get(policy) or (
        doc.get("comparison") if doc.get("policy") == policy else None
    )
    effects = (comp or {}).get("slo_effect_per_seed")
    if not effects:
        raise ConfigError("pilot", f"no per-seed SLO differences of {policy!r} in the pilot file")
    return [float(x) for x in effects]


def pooled_split(records: list[RunRecord]) -> dict:
    """Inside/outside-sync serving over several runs: each run's clock is shifted past the
    previous run's end so its requests only meet its own syncs; an unfinished request lives
    to its own run's end (as :func:`~.live_analysis.latency_split` has it for one run)."""
    reqs, ivs, shift = [], [], 0.0
    for r in records:
        last = r.requests["finish_s"].max() if len(r.requests) else 0.0
        end = max(r.duration_s, float(np.nan_to_num(last)), 0.0)
        finish = r.requests["finish_s"].fillna(end)
        reqs.append(r.requests.assign(arrival_s=r.requests["arrival_s"] + shift,
                                      finish_s=finish + shift))  # fmt: skip
        ivs.append(r.syncs[["start_s", "end_s"]].to_numpy(float) + shift)
        shift += end + 1e4
    table = pd.concat(reqs, ignore_index=True)
    return LA.latency_split(table, np.concatenate(ivs) if ivs else [], shift)


def headline(cfg: LiveConfig, res: dict, records: list[RunRecord], twin: dict, calib) -> dict:
    """The summary: the headline policy's figures first, then every policy's, the paired
    comparisons, the regression, the twin and the effect ratio."""
    runs: pd.DataFrame = res["runs"]
    per_policy = {}
    for policy, rows in runs.groupby("policy", sort=False):
        group = [r for r in records if r.policy == policy]
        per_policy[policy] = {
            "seeds": int(len(rows)),
            "slo_violation_rate": float(rows["slo_violation_rate"].mean()),
            "syncs": float(rows["syncs"].mean()),
            "sync_time_fraction": float(rows["sync_time_fraction"].mean()),
            "mean_sync_s": float(rows["mean_sync_s"].mean()),
            "final_loss": float(rows["final_loss"].mean()),
            "tokens": float(rows["tokens"].mean()),
            "requests": float(rows["requests"].mean()),
            "latency_inside_vs_outside_syncs": pooled_split(group),
        }
    lead = cfg.policies[0]
    comp = res["comparisons"].get(lead, {})
    real = comp.get("slo_effect_per_seed", [])
    if twin and lead in twin and len(real) == len(twin[lead]["effect_per_seed"]) and real:
        ratio = LA.effect_ratio(twin[lead]["effect_per_seed"], real)
        sim_slo = np.r_[twin[lead]["slo_violation_rate"], twin[lead]["matched_random_slo"]]
        ratio["twin_saturated"] = bool(np.all(sim_slo >= 0.999))  # no effect can show there
    else:
        ratio = {"sim_vs_real_effect_ratio": None, "ratio_note": "no simulated twin"}
    return {
        "policy": lead,
        "server": res["server"],
        "seeds": cfg.seeds,
        "duration_s": cfg.duration_s,
        "design": cfg.design().to_dict() | {"warnings": cfg.design().check(cfg.seeds)},
        "power": power_statement(cfg, real),
        **{k: per_policy[lead][k] for k in ("slo_violation_rate", "syncs", "final_loss", "tokens")},
        "sim_vs_real_effect_ratio": ratio["sim_vs_real_effect_ratio"],
        "effect_transfer": ratio,
        "policies": per_policy,
        "comparisons": res["comparisons"],
        "min_attainable_p": LA.min_attainable_p(cfg.seeds),
        "sync_time_regression": res["sync_time_regression"],
        "simulated_twin": twin,
        "calibration": {k: v for k, v in calib.items() if k != "sync_duration_samples_s"},
        "shaping": next((r.extra["shaping"] for r in records if r.extra.get("shaping")), None),
        "wall_s": res["wall_s"],
    }


# -- re-analysis of a stored result ---------------------------------------------------------------
def reanalyse(result: dict, pilot: dict | None = None, alpha: float = 0.05, power=0.8) -> dict:
    """Judge a stored live result by the design, from the data it holds, running nothing.

    ``result``: a ``diloco_live`` benchmark result (its headline policy's ``comparison``) or a
    run's ``summary.json`` (every policy's ``comparisons``). A comparison's p-value of the
    design's test is recomputed from its per-seed differences where the file holds them (the
    SLO's ``slo_effect_per_seed`` always; every metric's ``per_seed`` in files written since
    the design), else the stored one is used (``p_source`` says which). Beside each loss
    comparison: the tokens each arm trained, at the point compared where the file holds it,
    else over the replay (the per-policy means, ``tokens_at`` says which). ``before`` is the
    verdict the old reading gave (uncorrected Wilcoxon below ``alpha``; the SLO's Holm over
    policies), ``changed`` the comparisons whose verdict differs. With ``pilot`` (a document
    :func:`pilot_effects_from` reads), the power calculation from its effects."""
    lead = result["policy"]
    comps = result.get("comparisons") or {lead: result.get("comparison") or {}}
    policies = [lead, *[p for p in comps if p != lead]]
    design = stats.Design.for_policies(policies, lead, alpha=alpha)
    per_policy = result.get("policies") or {}
    p, mean, rows = {}, {}, {}
    for policy in policies:
        comp = comps.get(policy) or {}
        per_seed = comp.get("per_seed") or {"slo_violation_rate": comp.get("slo_effect_per_seed")}
        arms = per_policy.get(policy, {}), per_policy.get(f"matched_random[{policy}]", {})
        for metric in METRICS:
            name = stats.Comparison(policy, metric).name
            block = comp.get(KEY[metric]) or {}
            d = _finite(per_seed.get(metric))
            extra: dict = {"mean": block.get("mean"), "ci": block.get("ci")}
            if d:
                p[name], mean[name] = stats.paired_p(design.test, d), float(np.mean(d))
                extra |= {"p_source": "recomputed from the per-seed differences"}
                extra |= {"p_stored": block.get(f"p_{design.test}"), "mean": mean[name]}
            elif block.get(f"p_{design.test}") is not None:
                p[name], mean[name] = block[f"p_{design.test}"], block["mean"]
                extra |= {"p_source": f"stored p_{design.test}"}
            old_p = block.get("p_holm", block.get("p_wilcoxon"))
            extra["before"] = (
                None if old_p is None
                else NO_CLAIM if old_p >= alpha
                else stats.BETTER if block["mean"] < 0 else stats.WORSE
            )  # fmt: skip
            if metric in stats.LOSS_METRICS:
                extra |= _stored_tokens(block, *arms)
            rows[name] = extra
    decided = design.decide(p, mean)
    out_rows = {name: decided[name] | rows[name] for name in decided}
    changed = [
        name
        for name, r in out_rows.items()
        if r["before"] is not None and _claim(r["before"]) != _claim(r["verdict"])
    ]
    out = {
        "policy": lead,
        "seeds": result.get("seeds"),
        "design": design.to_dict() | {"warnings": design.check(int(result.get("seeds") or 0))},
        "comparisons": out_rows,
        "changed": changed,
    }
    if pilot is not None:
        effects = pilot_effects_from(pilot, lead)
        source = f"pilot: {pilot.get('benchmark', 'live')} on seeds from {pilot.get('first_seed')}"
        out["power"] = stats.power_plan(
            effects, alpha, power, seeds_used=result.get("seeds"), source=source
        )
    return out


NO_CLAIM = "no claim"


def _claim(verdict: str) -> str:
    return verdict if verdict in (stats.BETTER, stats.WORSE) else NO_CLAIM


def _stored_tokens(block: dict, policy_arm: dict, control_arm: dict) -> dict:
    """Tokens beside a stored loss comparison: at the point compared when the block has them,
    else the arms' mean tokens over the replay."""
    if block.get("tokens_policy") is not None:
        keys = ("tokens_policy", "tokens_control", "tokens_ratio")
        return {k: block[k] for k in keys} | {"tokens_at": "the point compared"}
    pt, ct = policy_arm.get("tokens"), control_arm.get("tokens")
    return {
        "tokens_policy": pt,
        "tokens_control": ct,
        "tokens_ratio": pt / ct if pt is not None and ct else None,
        "tokens_at": "mean over the replay (the file holds no per-point tokens)",
    }
