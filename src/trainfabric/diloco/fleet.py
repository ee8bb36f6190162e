"""The fleet simulator: learner islands and serving replicas on shared hardware, window by window.

A *window* (``window_s``, 1 s by default) is one control decision. For every run (a policy on
a seed) and window ``[t0, t0 + window_s)``:

1. the policy sees the telemetry of the windows so far (:class:`~.policies.Observation`) and
   says sync or defer (ignored while a sync is in flight);
2. a sync starting at ``t0`` realises the interval's progress (``h`` steps, ``e(h)``
   efficiency, :mod:`~.learners`), then occupies ``[t0, t0 + D)`` with ``D`` the sync duration:
   training pauses and serving runs ``1 + interference`` times slower (:mod:`~.serving`);
3. the serving engines run to the window's end on the request set of the seed;
4. the learners take ``steps_per_s`` inner steps per second they were not syncing.

Telemetry (all in [0, 1]): ``inference`` = the engines' busy fraction in the last window,
``serve_now`` = last window's arrivals over twice the regime's mean (a 4x burst saturates it),
``serve_forecast`` = its one-step EWMA (``alpha``), ``serve_next`` = the same for the next
window (the future: only for the non-deployable offline policy), ``network`` and
``checkpoint`` = the regime's background series (zero unless the regime defines them).

**Regimes** (:data:`REGIMES`): ``steady`` (Poisson), ``diurnal`` (sinusoidal rate, 1 h
period), ``bursty`` (MMPP: 4x bursts of 30 s every 120 s), ``sync_heavy`` (steady load, an 8B
model over 5 Gb/s links: syncs occupy about a quarter of the time at H = 256), ``azure`` (the
real trace from a random start offset per seed, wrapped, scaled to 1 request/s: its bursts of
long prompts already give a 4.5% no-sync violation rate there, 28% at 2 requests/s), and the
artifact's own regimes ``seed_clean``, ``seed_mixed`` and ``seed_bursty`` in **seed_compat**
mode: its pressure formulas, its simulated sidecar (32 requests/s, the latency formula of
:func:`sidecar_latency_ms`, SLO 120 ms), a fixed 8 s sync window after each merge, plain
delta averaging (``averaging_efficiency``) and per-learner votes (a random deferral syncs
only when all 8 learners draw "sync"). The same seed gives every policy the same requests
(common random numbers), so policy comparisons are paired.

Outcomes per run: SLO violation rate (requests over the TTFT or TPOT SLO or unfinished at the
horizon / requests arrived, :func:`~.serving.violation_rates`),
syncs, the share of time spent syncing, tokens trained, effective tokens and the final loss
``L(effective tokens)`` at the horizon (equal wall-clock), the work since the last sync valued
as if a closing sync happened then — so a policy is not charged for where the horizon cuts
its last interval, only for the spacing of its syncs.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
import pandas as pd
from pydantic import AfterValidator, Field

from trainfabric.config import Config
from trainfabric.diloco import requests as R
from trainfabric.diloco.learners import ProgressModel, SyncModel
from trainfabric.diloco.policies import Observation, Policy
from trainfabric.diloco.serving import (
    BUSY_S,
    FINISHED,
    VIOLATED,
    EngineState,
    ServingModel,
    advance,
    violation_rates,
)
from trainfabric.errors import ConfigError
from trainfabric.limits import check_memory


class Regime(Config):
    """Serving load and sync cost of one pressure regime (``seed_compat``: the artifact's)."""

    name: str
    arrivals: Literal["poisson", "diurnal", "mmpp", "hawkes", "azure", "trace"] = "poisson"
    trace: str | None = Field(None, description="trace CSV replayed when arrivals = 'trace'")
    rate: float = Field(3.0, gt=0, description="mean requests/s over all replicas")
    sync: SyncModel = SyncModel()
    background: Literal["none", "seed_clean", "seed_mixed", "seed_bursty"] = "none"
    seed_compat: bool = Field(False, description="the artifact's sidecar, window and votes")

    @property
    def sync_s(self) -> float:
        """How long a sync occupies the fleet: derived (ours) or the artifact's fixed 8 s."""
        return SEED_SYNC_WINDOW_S if self.seed_compat else self.sync.duration_s()

    def requests(self, horizon_s: float, seed: int) -> R.Requests:
        rng = np.random.default_rng([seed, 17])
        if self.arrivals == "azure":
            return R.replay(R.azure_trace(), self.rate, horizon_s, rng)
        if self.arrivals == "trace":
            return R.replay(_read_trace(self.trace), self.rate, horizon_s, rng)
        gen = {"poisson": R.poisson, "diurnal": R.diurnal, "mmpp": R.mmpp, "hawkes": R.hawkes}
        return gen[self.arrivals](self.rate, horizon_s, rng)

    def pressure(self, t: np.ndarray) -> tuple[np.ndarray, ...]:
        """Background (network, inference, checkpoint, burst) at times ``t``: the artifact's
        stress-harness formulas (period 300 s; bursts of 30 s), zero without a background."""
        zero = np.zeros_like(t)
        if self.background in ("none", "seed_clean"):
            return zero, zero, zero, zero
        phase = (t % 300.0) / 300.0
        if self.background == "seed_mixed":
            net = 0.2 + 0.6 * phase
            inf = 0.1 + 0.8 * np.maximum(0.0, phase - 0.35) / 0.65
            ckpt = np.where((t // 300.0) % 4 == 3, 0.8, 0.0)
            return net, inf, ckpt, zero
        busy = (phase < 0.1).astype(float)  # 30 s bursts every 300 s
        return 0.15 + 0.20 * busy, 0.15 + 0.75 * busy, zero, busy


SEED_SYNC_WINDOW_S = 8.0  # the artifact's interference window after each merge
SEED_REQUESTS_PER_S = 32  # its simulated sidecar
SEED_SLO_MS = 120.0
SEED_LEARNERS = 8  # min_ready = all 8 learners must vote for a sync


def sidecar_latency_ms(net, inf, ckpt, syncing, noise) -> np.ndarray:
    """The artifact's simulated sidecar latency per request (ms): ``55 + 24 net + 34 inf +
    16 ckpt + [sync] 35 (0.35 + 0.65 max(net, inf)) + 6 noise`` with noise ~ LogNormal(0, 0.18)."""
    base = (
        55 + 24 * net + 34 * inf + 16 * ckpt + syncing * 35 * (0.35 + 0.65 * np.maximum(net, inf))
    )
    return base[..., None] + 6 * noise


REGIMES: dict[str, Regime] = {
    "steady": Regime(name="steady"),
    "diurnal": Regime(name="diurnal", arrivals="diurnal"),
    "bursty": Regime(name="bursty", arrivals="mmpp"),
    "sync_heavy": Regime(name="sync_heavy", sync=SyncModel(params=8e9, link_gbps=5.0)),
    "azure": Regime(name="azure", arrivals="azure", rate=1.0),  # burstier: 3 req/s overloads
    "seed_clean": Regime(name="seed_clean", background="seed_clean", seed_compat=True),
    "seed_mixed": Regime(name="seed_mixed", background="seed_mixed", seed_compat=True),
    "seed_bursty": Regime(name="seed_bursty", background="seed_bursty", seed_compat=True),
}
PROTOCOL_REGIMES = ("steady", "diurnal", "bursty", "sync_heavy")


def trace_regime(path: str | Path, rate_scale: float, base: Regime) -> Regime:
    """``base`` (its sync model, background and mode) with the arrivals of the trace CSV at
    ``path`` replayed at ``rate_scale`` times the trace's own mean rate (requests/s)."""
    trace = _read_trace(str(path))
    rate = rate_scale * trace.n / max(trace.span_s, 1e-9)
    return base.model_copy(
        update={"name": f"trace:{Path(path).name}", "arrivals": "trace", "trace": str(path)}
        | {"rate": rate}
    )


@functools.lru_cache(maxsize=4)
def _read_trace(path: str | None) -> R.Requests:
    """One parse per trace file and process (the protocol replays it per seed)."""
    if path is None:
        raise ConfigError("trace", "arrivals = 'trace' needs a trace file")
    return R.read_trace(path)


def get_regime(name: str) -> Regime:
    if name not in REGIMES:
        raise ConfigError("regime", f"unknown regime {name!r}; known: {', '.join(REGIMES)}")
    return REGIMES[name]


MAX_WINDOWS = 100_000_000  # over three years of 1 s windows
# Memory of :func:`simulate`, fitted with tracemalloc (tests/diloco/test_size_guards.py): per
# run and window (sync/SLO arrays, loads), per request (packed arrival/prompt/output arrays,
# generation temporaries), and per run and window of the artifact's 32-request sidecar noise.
RUN_WINDOW_BYTES = 32
REQUEST_BYTES = 56
COMPAT_RUN_WINDOW_BYTES = 512


def _at_most_windows(value: int) -> int:
    if value > MAX_WINDOWS:
        raise ValueError(f"at most {MAX_WINDOWS:,} (over three years of 1 s windows)")
    return value


class FleetConfig(Config):
    """One simulated fleet: horizon, window, serving, learners, EWMA forecast
    (``windows`` in ``10..100,000,000``)."""

    windows: Annotated[int, AfterValidator(_at_most_windows)] = Field(
        10_000, ge=10, description="control windows simulated"
    )
    window_s: float = Field(1.0, gt=0)
    serving: ServingModel = ServingModel()
    progress: ProgressModel = ProgressModel()
    forecast_alpha: float = Field(0.3, gt=0, le=1, description="EWMA weight of the newest window")

    @property
    def horizon_s(self) -> float:
        return self.windows * self.window_s


@dataclass
class Block:
    """A policy controlling one run per seed (``seeds[i]`` is run ``i`` of the block)."""

    policy: Policy
    seeds: np.ndarray


@dataclass(frozen=True)
class FleetResult:
    """One row per run (``table``) and, per run and window, syncs started and SLO counts."""

    table: pd.DataFrame
    sync_started: np.ndarray  # [runs, windows] bool
    violated: np.ndarray  # [runs, windows] requests over the SLO finishing in the window
    finished: np.ndarray  # [runs, windows]


def fleet_memory_bytes(config: FleetConfig, regime: Regime, runs: int, seeds: int) -> float:
    """Peak bytes of :func:`simulate` for ``runs`` runs over ``seeds`` distinct seeds:
    ``runs x windows x RUN_WINDOW_BYTES`` (plus ``COMPAT_RUN_WINDOW_BYTES`` in seed_compat
    mode) ``+ seeds x rate x horizon x REQUEST_BYTES`` (``rate``: the regime's mean
    requests/s)."""
    per_run = RUN_WINDOW_BYTES + (COMPAT_RUN_WINDOW_BYTES if regime.seed_compat else 0)
    requests = float(seeds) * regime.rate * config.horizon_s
    return float(runs) * config.windows * per_run + requests * REQUEST_BYTES


def check_fleet_size(config: FleetConfig, regime: Regime, runs: int, seeds: int) -> None:
    """ConfigError naming ``windows`` when :func:`fleet_memory_bytes` exceeds the limit."""
    check_memory(
        "windows",
        fleet_memory_bytes(config, regime, runs, seeds),
        f"a fleet simulation of {runs:,} runs x {config.windows:,} windows "
        f"({seeds:,} request sets at {regime.rate:.3g} requests/s)",
    )


def simulate(
    config: FleetConfig, regime: Regime, blocks: list[Block], *, sync: bool = True
) -> FleetResult:
    """Run every block's policy on its seeds (module doc); ``sync=False`` removes every sync
    (the no-sync load match: the same offered load, nothing else). Refuses a run over the
    memory limit before drawing any request (:func:`check_fleet_size`, field ``windows``)."""
    seeds = np.concatenate([np.asarray(b.seeds, np.int64) for b in blocks])
    uniq, req_of = np.unique(seeds, return_inverse=True)
    check_fleet_size(config, regime, seeds.size, uniq.size)
    sets = [regime.requests(config.horizon_s, int(s)) for s in uniq]
    arrival, prompt, output, n_req = _pack(sets)
    W, dt, K = config.windows, config.window_s, seeds.size
    counts = np.stack(
        [np.histogram(r.arrival_s, bins=W + 1, range=(0, (W + 1) * dt))[0] for r in sets]
    )
    load = np.clip(counts / (2.0 * regime.rate * dt), 0.0, 1.0)[req_of]  # [K, W+1]
    net, bg_inf, ckpt, burst = regime.pressure(np.arange(W + 1) * dt)
    compat = regime.seed_compat
    if compat:  # the artifact's serving signals: bursts now, next window's overlap with one
        load = np.tile(burst[: W + 1], (K, 1))
        ahead = int(SEED_SYNC_WINDOW_S / dt)
        overlap = np.convolve(np.r_[burst, np.zeros(ahead)], np.ones(ahead) / ahead)[ahead - 1 :]
        next_cost = np.tile(overlap[: W + 1], (K, 1))
        noise = np.stack(
            [
                np.random.default_rng([int(s), 29]).lognormal(0.0, 0.18, (W, SEED_REQUESTS_PER_S))
                for s in uniq
            ]
        )[req_of]
    bounds = np.cumsum([0] + [len(b.seeds) for b in blocks])
    for b, lo in zip(blocks, bounds[:-1], strict=False):
        b.policy.reset(len(b.seeds), seeds[lo : lo + len(b.seeds)], SEED_LEARNERS if compat else 1)
    prog = config.progress
    D = regime.sync_s
    outer = prog.averaging_efficiency if compat else 1.0
    params = regime.sync.params
    state = EngineState.empty(K, config.serving)
    h, tokens, eff = np.zeros(K), np.zeros(K), np.zeros(K)
    sync_until = np.full(K, -np.inf)
    last_sync = np.zeros(K)
    inference, forecast = np.zeros(K), np.zeros(K)
    started = np.zeros((K, W), bool)
    viol = np.zeros((K, W))
    fin = np.zeros((K, W))
    totals = np.zeros((K, 8))
    syncing_s = np.zeros(K)
    for w in range(W):
        t0 = w * dt
        if sync:
            gain = tokens * prog.efficiency(h) * outer
            obs = Observation.of(
                w,
                h=h,
                tokens=tokens,
                loss_delta=prog.loss(eff, params) - prog.loss(eff + gain, params),
                staleness_s=t0 - last_sync,
                network=np.full(K, net[w]),
                inference=np.full(K, bg_inf[w]) if compat else inference,
                checkpoint=np.full(K, ckpt[w]),
                serve_now=load[:, w - 1] if w else np.zeros(K),
                serve_forecast=forecast,
                serve_next=next_cost[:, w] if compat else load[:, w],
            )
            want = np.concatenate(
                [
                    np.asarray(b.policy.decide(obs.slice(lo, hi)), bool)
                    for b, lo, hi in zip(blocks, bounds[:-1], bounds[1:], strict=True)
                ]
            )
            go = want & (sync_until <= t0)
            eff[go] += gain[go]
            h[go] = 0.0
            tokens[go] = 0.0
            sync_until[go] = t0 + D
            last_sync[go] = t0 + D
            started[:, w] = go
        if compat:
            lat = sidecar_latency_ms(net[w], bg_inf[w], ckpt[w], sync_until > t0, noise[:, w])
            c = np.zeros((K, 8))
            c[:, FINISHED] = SEED_REQUESTS_PER_S
            c[:, VIOLATED] = (lat > SEED_SLO_MS).sum(axis=1)
        else:
            c = advance(
                state, arrival, prompt, output, n_req, req_of, t0 + dt, sync_until, config.serving
            )
        totals += c
        viol[:, w], fin[:, w] = c[:, VIOLATED], c[:, FINISHED]
        busy_sync = np.clip(np.minimum(sync_until, t0 + dt) - t0, 0.0, dt)
        syncing_s += busy_sync
        steps = (dt - busy_sync) * prog.steps_per_s
        h += steps
        tokens += steps * prog.tokens_per_step
        inference = np.clip(c[:, BUSY_S] / (config.serving.replicas * dt), 0.0, 1.0)
        forecast = config.forecast_alpha * load[:, w] + (1 - config.forecast_alpha) * forecast
    trained = (
        config.horizon_s * prog.steps_per_s * prog.tokens_per_step
        - syncing_s * prog.steps_per_s * prog.tokens_per_step
    )
    table = pd.DataFrame(
        {
            "policy": np.concatenate([[b.policy.name] * len(b.seeds) for b in blocks]),
            "deployable": np.concatenate([[b.policy.deployable] * len(b.seeds) for b in blocks]),
            "seed": seeds,
            "regime": regime.name,
            "windows": W,
            **violation_rates(totals, c),  # unfinished at the horizon count as violations
            "syncs": started.sum(axis=1),
            "sync_s": D,
            "sync_time_fraction": syncing_s / config.horizon_s,
            "tokens_trained": trained,
            "effective_tokens": eff + tokens * prog.efficiency(h) * outer,
            "final_loss": prog.loss(eff + tokens * prog.efficiency(h) * outer, params),
        }
    )
    return FleetResult(table, started, viol, fin)


def _pack(sets: list[R.Requests]):
    n = max(r.n for r in sets)
    S = len(sets)
    arrival = np.full((S, n), np.inf)
    prompt = np.zeros((S, n), np.int64)
    output = np.ones((S, n), np.int64)
    for i, r in enumerate(sets):
        arrival[i, : r.n], prompt[i, : r.n], output[i, : r.n] = (
            r.arrival_s,
            r.prompt_tokens,
            r.output_tokens,
        )
    return arrival, prompt, output, np.array([r.n for r in sets], np.int64)
