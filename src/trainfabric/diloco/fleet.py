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

Telemetry (all in [0, 1], :mod:`~.telemetry`): ``inference`` = the pressure of the serving
engines in the last window computed from what a vLLM server exposes (waiting requests, KV-cache
use, the shares of the window's TTFT/ITL histograms over the SLOs; :func:`server_pressure`),
``serve_now`` = last window's arrivals over twice the regime's mean (a 2x burst saturates it),
``serve_forecast`` = its one-step EWMA (``alpha``), ``serve_next`` = the same for the next
window (the future: only for the non-deployable offline policy), ``network`` and
``checkpoint`` = the regime's background series (zero unless the regime defines them).

**Regimes** (:data:`REGIMES`): ``steady`` (Poisson), ``diurnal`` (sinusoidal rate, 1 h
period), ``bursty`` (MMPP: 4x bursts of 30 s every 120 s), ``sync_heavy`` (steady load, an 8B
model over 5 Gb/s links: syncs occupy about a quarter of the time at H = 256), ``azure`` (the
real trace scaled to 1 request/s; bursts of long prompts), and the
artifact's own regimes ``seed_clean``, ``seed_mixed`` and ``seed_bursty`` in **seed_compat**
mode: its pressure formulas, its simulated sidecar (32 requests/s, the latency formula of
:func:`sidecar_latency_ms`, SLO 120 ms), a fixed 8 s sync window after each merge, plain
delta averaging (``averaging_efficiency``) and per-learner votes (a random deferral syncs
only when all 8 learners draw "sync"). The same seed gives every policy the same requests
(common random numbers), so policy comparisons are paired.

**Trace regimes** (``azure``, ``--trace``): seed ``i`` replays the ``i``-th disjoint segment
of the trace time-scaled to the regime's rate (:func:`~.requests.segment`), so seeds are
independent samples; the trace holds ``floor(n / (rate · horizon))`` of them
(:func:`trace_segments`), more seeds are refused (:func:`check_segments`) unless the regime
allows ``overlap`` (random start offsets, wrapped around: seeds then share requests). The
default horizon of a trace regime is the segment length for the seeds asked for,
``n / rate / seeds`` (:func:`segment_windows`).

**Sync durations**: the regime's scalar (derived, or the artifact's 8 s), or a distribution
(:class:`SyncDurations`: measured samples or a callable) drawn per seed with common random
numbers.

**Fragments** (:class:`FragmentModel`, Streaming DiLoCo, :mod:`~.train.streaming`): the
model in P fragments, each with its own steps ``h_p`` and tokens since its last sync, its own
staleness and a *guard clock* ``g_p = h_p + lead_p`` (``lead_p = (H − ⌊pH/P⌋) mod H`` until
its first sync, then 0), so that fragment ``p`` is due on the staggered schedule of
``streaming.py``. Per window the policy decides for every fragment, on its own observation
(``h`` = ``g_p``, ``tokens``, ``staleness_s`` and ``loss_delta`` of fragment ``p``, the
pressures of the run): the guarded policies consult their score only while ``min_h <= g_p <
max_h``, defer below, and are forced at ``max_h``; ``fixed_h`` is due at ``g_p >= H``. A
deferral drops nothing: the fragment stays due (its staleness grows) until the policy
syncs it or ``max_h`` forces it. **The budget rule**: fragments are synced only at
window starts where the link is free (no fragment sync in flight); there, every fragment
whose policy says sync starts, back to back, each for ``D_p`` = the sync of ``params / P``
(1/P of the bytes, the ring's per-step latency and the outer step in full), training pausing
for all of them; a policy's decision while the link is busy is ignored (as for whole syncs),
but with P > 1 a matched-random schedule's sync that finds the link busy is queued (a
count per fragment) and starts at the first free window, one per window and fragment, so a
schedule's count per fragment is exact when every wait ends before the horizon
(:func:`~.protocol.matched_fragment_blocks` leaves the room; with P = 1 a matched schedule's
gaps include the sync: it never finds the link busy). Fragments started together all take
the block's end as their last sync (staleness counts from there). A fragment sync
realises ``gain_p = tokens_p · e(h_p) · outer / P`` effective tokens (the fragment's share
of the model); its ``loss_delta`` is ``L(eff) − L(eff + P·gain_p)``, the loss a whole-model
sync in the fragment's state would realise, so the score keeps its scales. With P = 1 this
is the whole-model simulator operation for operation (``tests/diloco/test_fragments.py``
checks it to the bit). Not with seed_compat or drawn sync durations (ConfigError).

Outcomes per run: SLO violation rate (requests over the TTFT or TPOT SLO or unfinished at the
horizon / requests arrived, :func:`~.serving.violation_rates`),
syncs (fragment syncs with P > 1; per fragment in ``FleetResult.fragment_syncs``), the share
of time spent syncing, tokens trained, effective tokens and the final loss
``L(effective tokens)`` at the horizon (equal wall-clock), the work since the last sync valued
as if a closing sync happened then — so a policy is not charged for where the horizon cuts
its last interval, only for the spacing of its syncs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import numba
import numpy as np
import pandas as pd
from pydantic import AfterValidator, Field

from trainfabric.config import Config
from trainfabric.diloco import fleet_kernel
from trainfabric.diloco import requests as R
from trainfabric.diloco.learners import ProgressModel, SyncModel
from trainfabric.diloco.policies import Policy, Schedule
from trainfabric.diloco.serving import (
    FINISHED,
    ITL_HIST,
    KV_FRAC,
    N_COUNTERS,
    TTFT_HIST,
    VIOLATED,
    WAITING,
    EngineState,
    ServingModel,
    advance,
    violation_rates,
)
from trainfabric.diloco.telemetry import (
    ITL_BUCKETS,
    MAX_SLO_S,
    TTFT_BUCKETS,
    PressureModel,
    Telemetry,
    serve_load,
    share_above_per_bucket,
)
from trainfabric.errors import ConfigError
from trainfabric.limits import check_memory

TTFT_BOUNDS, ITL_BOUNDS = np.array(TTFT_BUCKETS), np.array(ITL_BUCKETS)


class Regime(Config):
    """Serving load and sync cost of one pressure regime (``seed_compat``: the artifact's)."""

    name: str
    arrivals: Literal["poisson", "diurnal", "mmpp", "hawkes", "azure", "trace"] = "poisson"
    trace: str | None = Field(None, description="trace CSV replayed when arrivals = 'trace'")
    rate: float = Field(3.0, gt=0, description="mean requests/s over all replicas")
    sync: SyncModel = SyncModel()
    background: Literal["none", "seed_clean", "seed_mixed", "seed_bursty"] = "none"
    seed_compat: bool = Field(False, description="the artifact's sidecar, window and votes")
    overlap: bool = Field(
        False, description="trace regimes: random, overlapping offsets instead of disjoint segments"
    )

    @property
    def sync_s(self) -> float:
        """How long a sync occupies the fleet: derived (ours) or the artifact's fixed 8 s."""
        return SEED_SYNC_WINDOW_S if self.seed_compat else self.sync.duration_s()

    @property
    def is_trace(self) -> bool:
        return self.arrivals in ("azure", "trace")

    def trace_requests(self) -> R.Requests:
        return R.azure_trace() if self.arrivals == "azure" else _read_trace(self.trace)

    def trace_duration_s(self) -> float:
        """A trace regime's whole trace at its rate: ``n / rate`` seconds."""
        return self.trace_requests().n / self.rate

    def requests(self, horizon_s: float, seed: int) -> R.Requests:
        """The requests of ``seed``; in a trace regime its disjoint segment number ``seed``
        (:func:`~.requests.segment`), or with ``overlap`` a random offset (wrapped)."""
        rng = np.random.default_rng([seed, 17])
        if self.is_trace:
            if self.overlap:
                return R.replay(self.trace_requests(), self.rate, horizon_s, rng)
            return R.segment(self.trace_requests(), self.rate, horizon_s, seed)
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


def trace_segments(regime: Regime, horizon_s: float) -> int:
    """Disjoint segments of ``horizon_s`` in a trace regime's trace (at its rate)."""
    return R.segments(regime.trace_requests(), regime.rate, horizon_s)


def segment_windows(regime: Regime, seeds: int, window_s: float = 1.0) -> int:
    """A trace regime's default horizon in windows: the segment length when the trace is cut
    into one segment per seed, ``floor(n / rate / seeds / window_s)``."""
    return int(np.floor(regime.trace_duration_s() / seeds / window_s * (1 + 1e-12)))


def check_segments(regime: Regime, seeds: int, horizon_s: float, flag: str = "--seeds") -> None:
    """ConfigError naming ``flag`` when a trace regime without ``overlap`` holds fewer than
    ``seeds`` disjoint segments of ``horizon_s``."""
    if not regime.is_trace or regime.overlap:
        return
    held = trace_segments(regime, horizon_s)
    if seeds > held:
        raise ConfigError(
            flag,
            f"the trace of regime {regime.name} holds {held} independent segments of "
            f"{horizon_s:.6g} s at {regime.rate:.4g} requests/s ({regime.trace_duration_s():.6g} "
            f"s in all), {seeds} seeds asked for: fewer seeds, a shorter horizon, or "
            "--allow-overlap (seeds then share requests and the verdict says so)",
        )


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
# per distinct seed and window of a shared no-sync trajectory (fleet_kernel.record): four
# outcome counters, the pressure, the idle flag (plus 8 bytes per replica: its next request)
SHARED_WINDOW_BYTES = 41


def _at_most_windows(value: int) -> int:
    if value > MAX_WINDOWS:
        raise ValueError(f"at most {MAX_WINDOWS:,} (over three years of 1 s windows)")
    return value


class FleetConfig(Config):
    """One simulated fleet: horizon, window, serving, learners, EWMA forecast
    (``windows`` in ``10..100,000,000``, ``window_s`` <= 3,600)."""

    windows: Annotated[int, AfterValidator(_at_most_windows)] = Field(
        10_000, ge=10, description="control windows simulated"
    )
    window_s: float = Field(1.0, gt=0, le=MAX_SLO_S, description="control window (s)")
    serving: ServingModel = ServingModel()
    progress: ProgressModel = ProgressModel()
    forecast_alpha: float = Field(0.3, gt=0, le=1, description="EWMA weight of the newest window")
    pressure_tail: float = Field(
        0.1, gt=0, le=1, description="share over an SLO at which the inference pressure is 1"
    )

    @property
    def horizon_s(self) -> float:
        return self.windows * self.window_s


class FragmentModel(Config):
    """Streaming DiLoCo's fragments in the simulator (module doc, *Fragments*): the model in
    ``fragments`` P parts, fragment ``p`` staggered by ``o_p = ⌊p·H/P⌋`` inner steps of a
    schedule of period ``stagger_steps`` H (as :mod:`~.train.streaming`). P = 1 is the
    whole-model simulator, to the bit."""

    fragments: int = Field(1, ge=1, le=64, description="fragments P")
    stagger_steps: int = Field(
        256, ge=1, le=10_000_000, description="H of the staggered schedule (inner steps)"
    )

    def leads(self) -> np.ndarray:
        """Steps each fragment's guard clock starts ahead: ``(H − o_p) mod H``, so a
        fixed-H policy with ``H = stagger_steps`` syncs fragment ``p`` first after ``o_p``
        steps (fragment 0 after H), then every H, as :func:`~.train.streaming.starts_at`."""
        H, P = self.stagger_steps, self.fragments
        return np.array([(H - p * H // P) % H for p in range(P)], float)

    def sync_s(self, regime: Regime) -> float:
        """One fragment's sync: the regime's sync model on ``params / P`` (its ring moves 1/P
        of the bytes; the per-step latency and the outer step stay); P = 1: ``regime.sync_s``."""
        if self.fragments == 1:
            return regime.sync_s
        part = regime.sync.model_copy(update={"params": regime.sync.params / self.fragments})
        return part.duration_s()

    def check(self, regime: Regime, durations) -> None:
        """ConfigError naming ``fragments`` for what the fragment model does not cover."""
        if self.fragments == 1:
            return
        if regime.seed_compat:
            raise ConfigError("fragments", "must be 1 in seed_compat (the artifact's 8 s window)")
        if durations is not None:
            raise ConfigError("fragments", "must be 1 with sync durations from a distribution")


WHOLE = FragmentModel()


@dataclass
class Block:
    """A policy controlling one run per seed (``seeds[i]`` is run ``i`` of the block)."""

    policy: Policy
    seeds: np.ndarray


@dataclass(frozen=True)
class FleetResult:
    """One row per run (``table``); per run and window, syncs started and SLO counts; per
    distinct seed and window, the requests that arrived; per run, when each sync ended.

    A sync of run ``k`` started in window ``w`` occupies ``[w·window_s, sync_ends_s[k][j])``
    (its ``j``-th sync; the end may pass the horizon, where the simulation stops)."""

    table: pd.DataFrame
    sync_started: np.ndarray  # [runs, windows] bool
    violated: np.ndarray  # [runs, windows] requests over the SLO finishing in the window
    finished: np.ndarray  # [runs, windows]
    arrivals: np.ndarray  # [distinct seeds, windows] requests arriving in the window
    seed_row: np.ndarray  # [runs] the row of ``arrivals`` whose requests the run serves
    sync_ends_s: tuple[np.ndarray, ...]  # per run: end (s) of each of its syncs, in order
    window_s: float
    fragment_syncs: np.ndarray | None = None  # [runs, P] syncs of each fragment

    @property
    def horizon_s(self) -> float:
        return self.sync_started.shape[1] * self.window_s

    def request_rate_per_s(self, run: int) -> np.ndarray:
        """Requests per second arriving in each window of ``run`` (its seed's requests)."""
        return self.arrivals[self.seed_row[run]] / self.window_s

    def sync_times(self, run: int) -> pd.DataFrame:
        """One row per sync of ``run``: ``start_s``, ``end_s`` (cut at the horizon) and
        ``request_rate_per_s``, the arrivals in the windows the sync overlaps over their
        length, ``Σ_{w0 <= w < w1} a_w / ((w1 − w0)·window_s)`` with ``w0`` the start's
        window and ``w1 = max(⌈end / window_s⌉, w0 + 1)``."""
        w0, w1 = self._sync_windows(run)
        cum = np.r_[0.0, np.cumsum(self.arrivals[self.seed_row[run]])]
        return pd.DataFrame(
            {
                "start_s": w0 * self.window_s,
                "end_s": np.minimum(self.sync_ends_s[run], self.horizon_s),
                "request_rate_per_s": (cum[w1] - cum[w0]) / ((w1 - w0) * self.window_s),
            }
        )

    def sync_rate(self, runs) -> tuple[float, float]:
        """Over ``runs``: the mean request rate during their syncs (pooled over every sync,
        :meth:`sync_times`; nan without a sync) and the mean over their horizons
        (requests/s)."""
        during = [self.sync_times(k)["request_rate_per_s"].to_numpy() for k in runs]
        pooled = np.concatenate(during) if during else np.zeros(0)
        mean = float(np.mean([self.arrivals[self.seed_row[k]].sum() for k in runs]))
        return (float(pooled.mean()) if pooled.size else float("nan")), mean / self.horizon_s

    def _sync_windows(self, run: int) -> tuple[np.ndarray, np.ndarray]:
        """First and one-past-last window each sync of ``run`` overlaps (:meth:`sync_times`)."""
        w0 = np.flatnonzero(self.sync_started[run])
        ends = np.asarray(self.sync_ends_s[run], float) / self.window_s
        w1 = np.maximum(np.ceil(ends - 1e-9).astype(np.int64), w0 + 1)
        return w0, np.minimum(w1, self.sync_started.shape[1])

    def in_sync(self, run: int) -> np.ndarray:
        """Per window of ``run``: does a sync overlap it (the windows of :meth:`sync_times`)."""
        W = self.sync_started.shape[1]
        w0, w1 = self._sync_windows(run)
        edge = np.zeros(W + 1, np.int64)
        np.add.at(edge, w0, 1)
        np.add.at(edge, w1, -1)
        return np.cumsum(edge[:W]) > 0

    def timeline(self, run: int) -> pd.DataFrame:
        """Per window of ``run``: ``t_s`` (its start), ``request_rate_per_s`` and
        ``in_sync`` (:meth:`in_sync`): the sync times drawn over the request rate."""
        W = self.sync_started.shape[1]
        return pd.DataFrame(
            {
                "t_s": np.arange(W) * self.window_s,
                "request_rate_per_s": self.request_rate_per_s(run),
                "in_sync": self.in_sync(run),
            }
        )


def fleet_memory_bytes(config: FleetConfig, regime: Regime, runs: int, seeds: int) -> float:
    """Peak bytes of :func:`simulate` for ``runs`` runs over ``seeds`` distinct seeds:
    ``runs x windows x RUN_WINDOW_BYTES`` (plus ``COMPAT_RUN_WINDOW_BYTES`` in seed_compat
    mode) ``+ seeds x rate x horizon x REQUEST_BYTES`` (``rate``: the regime's mean
    requests/s), and when runs share a seed (outside seed_compat) its no-sync trajectory,
    ``seeds x windows x (SHARED_WINDOW_BYTES + 8 x replicas)``."""
    per_run = RUN_WINDOW_BYTES + (COMPAT_RUN_WINDOW_BYTES if regime.seed_compat else 0)
    requests = float(seeds) * regime.rate * config.horizon_s
    shared = runs > seeds and not regime.seed_compat
    per_seed = SHARED_WINDOW_BYTES + 8 * config.serving.replicas if shared else 0
    windows = float(config.windows)
    return runs * windows * per_run + requests * REQUEST_BYTES + seeds * windows * per_seed


def check_fleet_size(config: FleetConfig, regime: Regime, runs: int, seeds: int) -> None:
    """ConfigError naming ``windows`` when :func:`fleet_memory_bytes` exceeds the limit."""
    check_memory(
        "windows",
        fleet_memory_bytes(config, regime, runs, seeds),
        f"a fleet simulation of {runs:,} runs x {config.windows:,} windows "
        f"({seeds:,} request sets at {regime.rate:.3g} requests/s)",
    )


class SyncDurations:
    """A distribution of sync durations (seconds) in place of the regime's scalar.

    ``samples``: durations drawn uniformly with replacement (e.g. measured collective
    times); or ``fn(rng, n)``: ``n`` durations from a numpy Generator, at most ``max_s``
    (which a matched-random control needs to keep its syncs apart). Each seed has one
    stream, from ``default_rng([seed, 31])`` in blocks of :attr:`BLOCK` draws, and a run's
    ``k``-th sync takes the stream's ``k``-th duration: common random numbers, so policies
    on the same seed see the same durations in the same order.
    """

    BLOCK = 256

    def __init__(self, samples=None, fn: Callable | None = None, max_s: float | None = None):
        if (samples is None) == (fn is None):
            raise ConfigError("sync_durations", "give either samples or a callable")
        if samples is not None:
            samples = np.asarray(samples, float).ravel()
            if samples.size == 0 or not np.all(np.isfinite(samples) & (samples > 0)):
                raise ConfigError("sync_durations", "samples must be finite and > 0 seconds")
            max_s = float(samples.max())
        elif max_s is None or not (np.isfinite(max_s) and max_s > 0):
            raise ConfigError("sync_durations", "a callable needs max_s > 0 seconds")
        self.samples, self.fn, self.max_s = samples, fn, float(max_s)

    def _block(self, rng: np.random.Generator) -> np.ndarray:
        if self.samples is not None:
            return self.samples[rng.integers(self.samples.size, size=self.BLOCK)]
        d = np.asarray(self.fn(rng, self.BLOCK), float)
        if d.shape != (self.BLOCK,) or not np.all(np.isfinite(d) & (d > 0) & (d <= self.max_s)):
            raise ConfigError(
                "sync_durations", f"the callable must return {self.BLOCK} durations in (0, max_s]"
            )
        return d

    def streams(self, seeds: np.ndarray) -> list[_Stream]:
        return [_Stream(self, np.random.default_rng([int(s), 31])) for s in seeds]


class _Stream:
    """The durations of one seed, drawn block by block as needed (same order every time)."""

    def __init__(self, dist: SyncDurations, rng: np.random.Generator):
        self.dist, self.rng, self.values = dist, rng, np.zeros(0)

    def __getitem__(self, k: int) -> float:
        while k >= self.values.size:
            self.values = np.r_[self.values, self.dist._block(self.rng)]
        return float(self.values[k])


def simulate(
    config: FleetConfig,
    regime: Regime,
    blocks: list[Block],
    *,
    sync: bool = True,
    durations: SyncDurations | None = None,
    reference: bool = False,
    fragments: FragmentModel = WHOLE,
) -> FleetResult:
    """Run every block's policy on its seeds (module doc); ``sync=False`` removes every sync
    (the no-sync load match: the same offered load, nothing else); ``durations`` draws each
    sync's duration (:class:`SyncDurations`) instead of the regime's scalar. Refuses a run
    over the memory limit before drawing any request (:func:`check_fleet_size`, field
    ``windows``).

    The window loop is compiled (:mod:`~.fleet_kernel`, bit for bit the Python loop) unless
    ``durations`` is given, a policy is of another class than the known ones, or
    ``reference`` asks for the Python loop (:func:`_python_loop`, the reference).

    ``fragments``: the fragment model (module doc, *Fragments*; :class:`FragmentModel`),
    run by the Python loop when P > 1; P = 1 (the default) is the whole-model simulator."""
    fragments.check(regime, durations)
    P = fragments.fragments
    seeds = np.concatenate([np.asarray(b.seeds, np.int64) for b in blocks])
    uniq, req_of = np.unique(seeds, return_inverse=True)
    check_fleet_size(config, regime, seeds.size, uniq.size)
    sets = [regime.requests(config.horizon_s, int(s)) for s in uniq]
    packed = _pack(sets)
    W, dt = config.windows, config.window_s
    counts = np.stack(
        [np.histogram(r.arrival_s, bins=W + 1, range=(0, (W + 1) * dt))[0] for r in sets]
    )
    inputs = _Inputs.of(config, regime, counts, uniq, req_of)
    bounds = np.cumsum([0] + [len(b.seeds) for b in blocks])
    for b, lo in zip(blocks, bounds[:-1], strict=False):
        # one policy row per run and fragment; fragment p of seed s draws as seed s·P + p
        own = (seeds[lo : lo + len(b.seeds), None] * P + np.arange(P)).ravel()
        b.policy.reset(len(b.seeds) * P, own, inputs.learners)
    python = reference or durations is not None or P > 1
    enc = None if python else fleet_kernel.encode_policies(blocks, W)
    if enc is None:
        streams = None if durations is None else durations.streams(uniq)
        out = _python_loop(
            config, regime, blocks, bounds, packed, req_of, inputs, sync, streams, fragments
        )
    else:
        out = _compiled_loop(config, regime, enc, packed, req_of, inputs, sync)
    return _result(config, regime, blocks, seeds, req_of, counts, out, fragments)


@dataclass
class _Inputs:
    """What every run sees per window, one row per distinct seed (``row[k]``: run ``k``'s):
    the serving load (``serve_now`` before the EWMA) and the next window's serving cost
    (``serve_next``), the background series, and in seed_compat mode the sidecar's noise."""

    load: np.ndarray  # [rows, W + 1]
    load_row: np.ndarray  # [runs]
    next_cost: np.ndarray  # [rows, W + 1]
    next_row: np.ndarray  # [runs]
    background: np.ndarray  # [3, W + 1]: network, inference, checkpoint
    noise: np.ndarray | None  # [distinct seeds, W, SEED_REQUESTS_PER_S] (seed_compat)
    compat: bool
    learners: int

    @classmethod
    def of(cls, config: FleetConfig, regime: Regime, counts, uniq, req_of) -> _Inputs:
        W, dt = config.windows, config.window_s
        net, bg_inf, ckpt, burst = regime.pressure(np.arange(W + 1) * dt)
        background = np.stack([net, bg_inf, ckpt])
        if not regime.seed_compat:
            load = serve_load(counts, regime.rate, dt)
            return cls(load, req_of, load, req_of, background, None, False, 1)
        # the artifact's serving signals: bursts now, next window's overlap with one
        ahead = int(SEED_SYNC_WINDOW_S / dt)
        overlap = np.convolve(np.r_[burst, np.zeros(ahead)], np.ones(ahead) / ahead)[ahead - 1 :]
        noise = np.stack(
            [
                np.random.default_rng([int(s), 29]).lognormal(0.0, 0.18, (W, SEED_REQUESTS_PER_S))
                for s in uniq
            ]
        )
        same = np.zeros(req_of.size, np.int64)
        load, next_cost = burst[None, : W + 1], overlap[None, : W + 1]
        return cls(load, same, next_cost, same, background, noise, True, SEED_LEARNERS)


@dataclass
class _LoopOut:
    """What a window loop leaves per run: syncs started, violated and finished requests per
    window, counters summed (the compiled loop sums the outcome counters ``FINISHED`` ..
    ``TPOT_VIOL`` only, all :func:`~.serving.violation_rates` reads) and of the last
    window, time syncing, drawn sync time, and the learners' ``h``, ``tokens`` since the
    last sync and effective tokens."""

    started: np.ndarray
    viol: np.ndarray
    fin: np.ndarray
    totals: np.ndarray
    last: np.ndarray
    syncing_s: np.ndarray
    drawn_s: np.ndarray
    h: np.ndarray
    tokens: np.ndarray
    eff: np.ndarray
    streams: list | None = None
    fragment_syncs: np.ndarray | None = None  # [runs, P] syncs per fragment (the Python loop)
    fragment_starts: np.ndarray | None = None  # [runs, W] fragments started per window (P > 1)


def _python_loop(config, regime, blocks, bounds, packed, req_of, inputs, sync, streams, frag=None):
    """The window loop in Python, vectorised over runs and fragments (``[runs, P]``, module
    doc, *Fragments*): the reference of the compiled loop (:mod:`~.fleet_kernel`, P = 1),
    and the loop for sync durations from a distribution and for fragments."""
    frag = WHOLE if frag is None else frag
    arrival, prompt, output, n_req = packed
    W, dt, K, P = config.windows, config.window_s, req_of.size, frag.fragments
    load = inputs.load[inputs.load_row]  # [K, W+1]
    next_cost = inputs.next_cost[inputs.next_row]
    net, bg_inf, ckpt = inputs.background
    compat = inputs.compat
    noise = inputs.noise[req_of] if compat else None
    prog = config.progress
    D = frag.sync_s(regime)
    outer = prog.averaging_efficiency if compat else 1.0
    params = regime.sync.params
    pressure = pressure_model(config)
    tel = Telemetry(K * P, regime.rate, dt, config.forecast_alpha)
    state = EngineState.empty(K, config.serving)
    h, tokens, eff = np.zeros((K, P)), np.zeros((K, P)), np.zeros(K)
    guard = np.tile(frag.leads(), (K, 1))  # the guards' steps: h plus the fragment's lead
    sync_until = np.full(K, -np.inf)
    last_sync = np.zeros((K, P))
    inference = np.zeros(K)
    started = np.zeros((K, W), bool)
    n_started = np.zeros((K, W), np.int8) if P > 1 else None
    frag_syncs = np.zeros((K, P), np.int64)
    # P > 1: a schedule's syncs that find the link busy (another fragment's) wait for it
    exact = np.concatenate([[isinstance(b.policy, Schedule)] * len(b.seeds) for b in blocks])
    exact &= P > 1
    queued = np.zeros((K, P), np.int64)
    viol = np.zeros((K, W))
    fin = np.zeros((K, W))
    totals = np.zeros((K, N_COUNTERS))
    syncing_s, drawn_s = np.zeros(K), np.zeros(K)
    for w in range(W):
        t0 = w * dt
        if sync:
            gain = tokens * prog.efficiency(h) * outer  # the whole model's gain in this state
            obs = tel.observe(
                w,
                h=guard.ravel(),
                tokens=tokens.ravel(),
                loss_delta=(
                    prog.loss(eff, params)[:, None] - prog.loss(eff[:, None] + gain, params)
                ).ravel(),
                staleness_s=(t0 - last_sync).ravel(),
                network=net[w],
                inference=bg_inf[w] if compat else np.repeat(inference, P),
                checkpoint=ckpt[w],
                serve_next=np.repeat(next_cost[:, w], P),
            )
            want = np.concatenate(
                [
                    np.asarray(b.policy.decide(obs.slice(lo * P, hi * P)), bool)
                    for b, lo, hi in zip(blocks, bounds[:-1], bounds[1:], strict=True)
                ]
            ).reshape(K, P)
            pending = queued + want  # P > 1: a schedule's syncs never merge or vanish
            free = (sync_until <= t0)[:, None]
            go = (pending > 0) & free
            queued = (pending - go) * exact[:, None]
            eff += np.where(go, gain / P, 0.0).sum(axis=1)
            h[go] = 0.0
            tokens[go] = 0.0
            guard[go] = 0.0
            n_go = go.sum(axis=1)
            now = n_go > 0
            dur = n_go * D  # the fragments started together run back to back
            if streams is not None:
                for k in np.flatnonzero(now):
                    dur[k] = streams[req_of[k]][int(started[k].sum())]
                drawn_s[now] += dur[now]
            sync_until[now] = t0 + dur[now]
            last_sync[go] = np.broadcast_to((t0 + dur)[:, None], (K, P))[go]
            started[:, w] = now
            frag_syncs += go
            if n_started is not None:
                n_started[:, w] = n_go
        if compat:
            lat = sidecar_latency_ms(net[w], bg_inf[w], ckpt[w], sync_until > t0, noise[:, w])
            c = np.zeros((K, N_COUNTERS))
            c[:, FINISHED] = SEED_REQUESTS_PER_S
            c[:, VIOLATED] = (lat > SEED_SLO_MS).sum(axis=1)
        else:
            c = advance(
                state, arrival, prompt, output, n_req, req_of, t0 + dt, sync_until, config.serving
            )
            inference = server_pressure(pressure, c)
        totals += c
        viol[:, w], fin[:, w] = c[:, VIOLATED], c[:, FINISHED]
        busy_sync = np.clip(np.minimum(sync_until, t0 + dt) - t0, 0.0, dt)
        syncing_s += busy_sync
        steps = (dt - busy_sync) * prog.steps_per_s
        h += steps[:, None]
        tokens += (steps * prog.tokens_per_step)[:, None]
        guard += steps[:, None]
        tel.update(load=np.repeat(load[:, w], P))
    return _LoopOut(
        started, viol, fin, totals, c, syncing_s, drawn_s, h, tokens, eff, streams,
        frag_syncs, n_started,
    )  # fmt: skip


def _compiled_loop(config, regime, enc, packed, req_of, inputs, sync) -> _LoopOut:
    """The window loop of :mod:`~.fleet_kernel` over every run, split over
    ``numba.get_num_threads()`` threads (runs are independent); stopped runs get their
    ``loss_delta`` projected here with numpy (the kernel module doc says why) and resume."""
    fk = fleet_kernel
    kind, pp, prow, fixed = enc
    W, K = config.windows, req_of.size
    prog, params = config.progress, regime.sync.params
    sc, ib = _scalars(config, regime)
    state = np.zeros((K, fk.STATE))
    state[:, fk.SYNC_UNTIL] = -np.inf
    eng = EngineState.empty(K, config.serving)
    engine = (eng.t, eng.head, eng.slot_req, eng.slot_left, eng.slot_first, eng.kv, eng.top)
    serving = (config.serving.params(), np.zeros((1, 1, 2)), TTFT_BOUNDS, ITL_BOUNDS)
    noise = inputs.noise if inputs.compat else np.zeros((1, 1, 1))
    wcur = np.zeros(K, np.int64)
    M = min(fk.LOSS_WINDOWS, W)  # at most 8 bytes per run and window (check_fleet_size)
    loss = np.zeros((K, M))
    loss_w0, loss_n = np.zeros(K, np.int64), np.zeros(K, np.int64)
    wc, totals = np.zeros((K, N_COUNTERS)), np.zeros((K, N_COUNTERS))
    started = np.zeros((K, W), bool)
    viol, fin = np.zeros((K, W)), np.zeros((K, W))
    joined = np.full(K, -1, np.int64)
    seeds = packed[3].size
    shared = sync and not inputs.compat and seeds < K  # runs of one seed share its engines
    ref = _shared_trajectories(config, packed, sc, ib, serving, shared)

    def advance_runs(todo):
        fk.run(
            todo, W, sync, inputs.compat, sc, ib, kind, pp, prow, fixed, state, wcur, loss,
            loss_w0, loss_n, req_of, inputs.load, inputs.load_row, inputs.next_cost,
            inputs.next_row, inputs.background, noise, engine, packed, serving, wc, totals,
            started, viol, fin, ref, joined,
        )  # fmt: skip

    todo = np.arange(K)
    with _Pool(K) as pool:
        while todo.size:
            pool.each(advance_runs, todo)
            todo = np.flatnonzero(wcur < W)  # the runs stopped for a loss_delta
            for part in np.array_split(todo, max(1, -(-todo.size * M // 2**17))):  # 1 MB each
                eff = state[part, fk.EFF]  # as the Python loop: L(eff) − L(eff + gain)
                gained = fk.project(part, wcur, state, sc, M)
                loss[part] = prog.loss(eff, params)[:, None] - prog.loss(gained, params)
                loss_w0[part], loss_n[part] = wcur[part], M
    st = state.T
    return _LoopOut(
        started, viol, fin, totals, wc, st[fk.SYNCING].copy(), np.zeros(K),
        st[fk.H].copy(), st[fk.TOKENS_].copy(), st[fk.EFF].copy(),
    )  # fmt: skip


class _Pool:
    """``numba.get_num_threads()`` threads (at most one per item) running a ``nogil``
    kernel on parts of the items: blocks of ``block`` items dealt in turn (for runs, 8: the
    threads get runs of every policy, and write no cache line of a per-run array together)."""

    def __init__(self, items: int):
        self.threads = max(1, min(numba.get_num_threads(), items))
        self.pool = ThreadPoolExecutor(self.threads)

    def __enter__(self) -> _Pool:
        return self

    def __exit__(self, *exc) -> None:
        self.pool.shutdown()

    def each(self, kernel, todo: np.ndarray, block: int = 8) -> None:
        """``kernel(part)`` for every thread's part of ``todo``, waiting for all."""
        parts = [todo[(todo // block) % self.threads == i] for i in range(self.threads)]
        list(self.pool.map(kernel, [p for p in parts if p.size]))


def _shared_trajectories(config: FleetConfig, packed, sc, ib, serving, shared: bool) -> tuple:
    """Every request set's no-sync trajectory (:func:`~.fleet_kernel.record`): the
    windows its runs share between their syncs; empty arrays when ``shared`` is off."""
    S, W = (packed[3].size, config.windows) if shared else (0, 0)
    R = config.serving.replicas
    ref = (
        np.zeros((S, W, 4)),
        np.zeros((S, W)),
        np.zeros((S, W), bool),
        np.zeros((S, W, R), np.int64),
        np.zeros((S, N_COUNTERS)),
    )
    if shared:
        eng = EngineState.empty(S, config.serving)
        engine = (eng.t, eng.head, eng.slot_req, eng.slot_left, eng.slot_first, eng.kv, eng.top)
        wc = np.zeros((S, N_COUNTERS))
        with _Pool(S) as pool:
            pool.each(
                lambda todo: fleet_kernel.record(todo, W, sc, ib, engine, packed, serving, wc, ref),
                np.arange(S),
                block=1,  # few seeds, each a whole run
            )
    return ref


def _scalars(config: FleetConfig, regime: Regime) -> tuple[np.ndarray, np.ndarray]:
    """The compiled loop's scalars (:data:`~.fleet_kernel.DT` ...) and the histogram buckets
    holding the TTFT and TPOT SLOs."""
    fk, prog = fleet_kernel, config.progress
    pm = pressure_model(config)
    sc = np.zeros(fk.N_SCALARS)
    sc[fk.DT], sc[fk.SYNC_S] = config.window_s, regime.sync_s
    sc[fk.OUTER] = prog.averaging_efficiency if regime.seed_compat else 1.0
    sc[fk.STEPS_PER_S], sc[fk.TOKENS_PER_STEP] = prog.steps_per_s, prog.tokens_per_step
    sc[fk.DRIFT], sc[fk.ALPHA] = prog.drift_steps, config.forecast_alpha
    sc[fk.KEEP] = 1 - config.forecast_alpha
    b_ttft, sc[fk.TTFT_KEEP] = _slo_bucket(pm.ttft_slo_s, TTFT_BOUNDS)
    b_itl, sc[fk.ITL_KEEP] = _slo_bucket(pm.tpot_slo_s, ITL_BOUNDS)
    sc[fk.TAIL], sc[fk.QUEUE_SCALE], sc[fk.SLO_MS] = pm.tail, pm.queue_scale, SEED_SLO_MS
    return sc, np.array([b_ttft, b_itl], np.int64)


def _slo_bucket(x: float, bounds: np.ndarray) -> tuple[int, float]:
    """The bucket ``b`` holding latency ``x`` and ``1 − frac``, the share of it above ``x``
    under linear interpolation (:func:`~.telemetry.share_above_per_bucket`)."""
    b = int(np.searchsorted(bounds, x, side="left"))
    if b >= bounds.size:
        return b, 0.0
    lo = bounds[b - 1] if b > 0 else 0.0
    frac = min(max((x - lo) / (bounds[b] - lo), 0.0), 1.0)
    return b, 1.0 - frac


def _result(config, regime, blocks, seeds, req_of, counts, out: _LoopOut, frag=None) -> FleetResult:
    """The per-run table and the per-window arrays of a finished loop (module doc)."""
    frag = WHOLE if frag is None else frag
    prog = config.progress
    W, dt, K, P = config.windows, config.window_s, req_of.size, frag.fragments
    D = frag.sync_s(regime)
    outer = prog.averaging_efficiency if regime.seed_compat else 1.0
    params = regime.sync.params
    streams = out.streams
    trained = (
        config.horizon_s * prog.steps_per_s * prog.tokens_per_step
        - out.syncing_s * prog.steps_per_s * prog.tokens_per_step
    )
    by_fragment = out.fragment_syncs
    if by_fragment is None:
        by_fragment = out.started.sum(axis=1)[:, None]
    syncs = by_fragment.sum(axis=1)  # fragment syncs (P = 1: whole-model syncs)
    mean_sync_s = (
        D if streams is None else np.where(syncs > 0, out.drawn_s / np.maximum(syncs, 1), D)
    )
    tok, hh = out.tokens.reshape(K, -1), out.h.reshape(K, -1)
    effective = out.eff + (tok * prog.efficiency(hh) * outer / P).sum(axis=1)
    table = pd.DataFrame(
        {
            "policy": np.concatenate([[b.policy.name] * len(b.seeds) for b in blocks]),
            "deployable": np.concatenate([[b.policy.deployable] * len(b.seeds) for b in blocks]),
            "seed": seeds,
            "regime": regime.name,
            "windows": W,
            **violation_rates(out.totals, out.last),  # unfinished past their SLO: violations
            "syncs": syncs,
            "sync_s": mean_sync_s,
            "sync_time_fraction": out.syncing_s / config.horizon_s,
            "tokens_trained": trained,
            "effective_tokens": effective,
            "final_loss": prog.loss(effective, params),
        }
    )
    ends = tuple(
        np.flatnonzero(out.started[k]) * dt
        + (D if streams is None else np.array([streams[req_of[k]][j] for j in range(syncs[k])]))
        * (1 if out.fragment_starts is None else out.fragment_starts[k][out.started[k]])
        for k in range(K)
    )
    return FleetResult(
        table, out.started, out.viol, out.fin, counts[:, :W], req_of, ends, dt, by_fragment
    )


def pressure_model(config: FleetConfig) -> PressureModel:
    """The ``inference`` pressure of the simulated servers: the serving SLOs, the fleet's
    tail share, a queue of one full batch per replica at 1 (:mod:`~.telemetry`)."""
    sm = config.serving
    return PressureModel(
        ttft_slo_s=sm.ttft_slo_s,
        tpot_slo_s=sm.tpot_slo_s,
        tail=config.pressure_tail,
        queue_scale=float(sm.replicas * sm.max_batch),
    )


def server_pressure(model: PressureModel, c: np.ndarray) -> np.ndarray:
    """``inference`` per run from one window's counters, exactly as from two scrapes of a
    vLLM server (:func:`~.telemetry.window`): gauges at its end, latency quantiles of its
    histograms' shares over the SLOs (:func:`~.telemetry.share_above_per_bucket`)."""
    nt, ni = len(TTFT_BUCKETS) + 1, len(ITL_BUCKETS) + 1
    ttft = share_above_per_bucket(model.ttft_slo_s, TTFT_BUCKETS, c[:, TTFT_HIST : TTFT_HIST + nt])
    itl = share_above_per_bucket(model.tpot_slo_s, ITL_BUCKETS, c[:, ITL_HIST : ITL_HIST + ni])
    return model.inference(c[:, KV_FRAC], c[:, WAITING], ttft, itl)


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
