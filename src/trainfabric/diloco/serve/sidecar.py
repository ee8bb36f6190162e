"""The metrics sidecar: scrape a vLLM ``/metrics`` endpoint into the policies' telemetry.

Every ``period_s`` the sidecar GETs ``URL/metrics`` (timeout ``timeout_s``), parses the
Prometheus text exposition with ``prometheus_client.parser`` into a
:class:`~trainfabric.diloco.telemetry.ServerSample` (:func:`parse_exposition`: gauges and
histogram buckets summed over label sets, so several engines count as one server; KV usage
is their mean) and turns the window between two consecutive samples into the ``inference``
pressure with :class:`~trainfabric.diloco.telemetry.PressureModel` — the same maths the
simulator uses. The first sample after a start or an outage has no window yet: its pressure
uses the gauges alone (KV use, queue), latency terms 0.

**Failures** — a timeout, a refused connection, an HTTP status other than 200, a body that
is not a valid exposition, or one that lacks a required metric — never raise out of the
sidecar: each is logged (``logging``, logger ``trainfabric.diloco.serve.sidecar``; once per
change of health, not per retry), and the next scrape waits a bounded exponential backoff,
``min(period_s · 2^k, max_backoff_s)`` after ``k`` consecutive failures. **Health**:
``ok`` after a successful scrape; ``degraded`` after 1 to ``unknown_after − 1`` consecutive
failures (the last good reading is kept); ``unknown`` after ``unknown_after`` (default 3):
the reading then has ``inference = None`` and ``fallback = True``, as before the first
scrape (health ``starting``).

**Safe fallback policy** (what a controller does with ``fallback = True``): the serving
signal is unknown, so it must neither defer syncs on a stale "busy" reading (training would
stall) nor sync greedily on a stale "idle" one: it syncs on the fixed-H schedule, every H
inner steps as if no serving signal existed (``fixed_h``). A server restart (counters going
down) is not a failure: the window counts the observations since the restart.

**Own metrics** (a private registry; served on ``host:port`` when a port is given, host
127.0.0.1 by default): ``trainfabric_sidecar_scrapes_total{outcome}``,
``trainfabric_sidecar_consecutive_failures``, ``trainfabric_sidecar_backoff_seconds``,
``trainfabric_sidecar_up`` (1 when health is ok), ``trainfabric_sidecar_fallback`` (1 when
unknown), ``trainfabric_sidecar_inference_pressure`` (NaN when unknown),
``trainfabric_sidecar_requests_running``/``_waiting``, ``trainfabric_sidecar_kv_usage``,
``trainfabric_sidecar_ttft_quantile_seconds``/``_itl_quantile_seconds`` (the window's p90),
and the controller's decisions reported back with :meth:`Sidecar.record_decision`:
``trainfabric_controller_decisions_total{decision}`` and
``trainfabric_controller_last_decision`` (1 sync, 0 defer).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from pydantic import Field

from trainfabric.config import Config
from trainfabric.diloco.serve.address import BaseUrl, bind_refusal, url_host
from trainfabric.diloco.telemetry import (
    METRICS,
    Histogram,
    PressureModel,
    ServerSample,
    Window,
    window,
)

log = logging.getLogger(__name__)
HEALTH = ("starting", "ok", "degraded", "unknown")


class MetricsError(ValueError):
    """The exposition is malformed or lacks a required metric."""


class SidecarConfig(Config):
    """Sidecar settings (module doc); times in seconds."""

    url: BaseUrl
    period_s: float = Field(1.0, ge=0.01, le=3600)
    timeout_s: float = Field(2.0, gt=0, le=600)
    unknown_after: int = Field(3, ge=1, le=1000)
    max_backoff_s: float = Field(30.0, gt=0, le=86400)
    quantile: float = Field(0.9, ge=0, le=1)
    pressure: PressureModel = PressureModel()
    host: str = "127.0.0.1"
    port: int | None = Field(None, ge=0, le=65535)


def parse_exposition(text: str, time_s: float) -> ServerSample:
    """A :class:`ServerSample` from a Prometheus text exposition (module doc); MetricsError
    when it does not parse or lacks one of telemetry's :data:`METRICS`."""
    from prometheus_client.parser import text_string_to_metric_families

    values: dict[str, list[float]] = {}
    buckets: dict[str, dict[float, float]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name.endswith("_bucket") and "le" in s.labels:
                    per = buckets.setdefault(s.name[: -len("_bucket")], {})
                    le = float(s.labels["le"])
                    per[le] = per.get(le, 0.0) + float(s.value)
                else:
                    values.setdefault(s.name, []).append(float(s.value))
    except Exception as exc:  # the parser raises ValueError, TypeError, IndexError, ...
        raise MetricsError(f"malformed exposition: {type(exc).__name__}: {exc}") from None

    def scalar(key: str, reduce=sum) -> float:
        got = values.get(METRICS[key])
        if not got:
            raise MetricsError(f"missing metric {METRICS[key]}")
        v = float(reduce(got))
        if not math.isfinite(v):
            raise MetricsError(f"{METRICS[key]} is not finite")
        return v

    def hist(key: str) -> Histogram:
        name = METRICS[key]
        per = buckets.get(name)
        if not per or math.inf not in per:
            raise MetricsError(f"missing histogram {name}")
        bounds = sorted(b for b in per if math.isfinite(b))
        total = sum(values.get(f"{name}_sum", [0.0]))
        try:
            return Histogram(
                tuple(bounds), np.array([per[b] for b in bounds]), total, per[math.inf]
            )
        except ValueError as exc:  # ConfigError: not cumulative, not finite
            raise MetricsError(f"{name}: {exc}") from None

    try:
        return ServerSample(
            time_s=time_s,
            num_requests_running=scalar("running"),
            num_requests_waiting=scalar("waiting"),
            kv_cache_usage_perc=scalar("kv_usage", lambda v: sum(v) / len(v)),
            time_to_first_token_seconds=hist("ttft"),
            inter_token_latency_seconds=hist("itl"),
            num_preemptions_total=scalar("preemptions"),
        )
    except ValueError as exc:
        if isinstance(exc, MetricsError):
            raise
        raise MetricsError(str(exc)) from None


@dataclass(frozen=True)
class Reading:
    """The sidecar's current view: ``health`` (starting: no scrape yet; ok, degraded, unknown),
    ``inference`` pressure in [0, 1] (None while starting or unknown), ``fallback`` (use the
    fixed-H schedule), the last good ``sample`` and ``window``, when it was taken (``time_s``,
    monotonic), the scrape and failure counts, the last error, the failures that were bugs of
    the sidecar (``unexpected_errors``, logged with their traceback) and the decisions
    recorded."""

    health: str = "starting"
    inference: float | None = None
    fallback: bool = True
    sample: ServerSample | None = None
    window: Window | None = None
    time_s: float | None = None
    consecutive_failures: int = 0
    scrapes_ok: int = 0
    scrapes_failed: int = 0
    last_error: str | None = None
    unexpected_errors: int = 0
    decisions: dict[str, int] = field(default_factory=dict)


class Sidecar:
    """A scraping thread (module doc). ``start()``/``stop()`` (or a ``with`` block);
    :meth:`latest` returns the current :class:`Reading` without blocking, from any thread.
    ``enter``: called first by the scraping thread, e.g. to enter the server's network
    namespace (``setns`` moves only the calling thread)."""

    def __init__(self, cfg: SidecarConfig, enter: Callable[[], None] | None = None):
        self.cfg = cfg
        self._enter = enter  # run first by the scraping thread (e.g. entering a namespace)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._reading = Reading()
        self._prev: ServerSample | None = None
        self._decisions = {"sync": 0, "defer": 0}
        self._thread = threading.Thread(target=self._loop, name="sidecar", daemon=True)
        self._httpd = None
        self._metrics = _OwnMetrics()
        self._client = None  # one HTTP client (its TLS set-up is not free), made on first use
        self.metrics_url: str | None = None

    # -- public --------------------------------------------------------------------------------
    def start(self) -> Sidecar:
        """Serve the own metrics (when a port is given) and start scraping; a host or port
        that cannot be listened on is a ConfigError naming ``host`` or ``port``."""
        if self.cfg.port is not None:
            from prometheus_client import start_http_server

            try:
                self._httpd, _ = start_http_server(
                    self.cfg.port, addr=self.cfg.host, registry=self._metrics.registry
                )
            except (OSError, UnicodeError) as exc:
                raise bind_refusal(self.cfg.host, self.cfg.port, exc) from None
            self.metrics_url = f"http://{url_host(self.cfg.host)}:{self._httpd.server_port}/metrics"
            if self.cfg.host not in ("127.0.0.1", "localhost", "::1"):
                log.warning("sidecar: its metrics listen on %s, reachable beyond this machine",
                            self.metrics_url)  # fmt: skip
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.cfg.timeout_s + 5)
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._client is not None and not self._thread.is_alive():
            self._client.close()
            self._client = None

    def __enter__(self) -> Sidecar:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def latest(self) -> Reading:
        """The current reading (an immutable snapshot)."""
        with self._lock:
            return self._reading

    def record_decision(self, sync: bool) -> None:
        """Count a controller decision (exposed as ``trainfabric_controller_*``)."""
        key = "sync" if sync else "defer"
        with self._lock:
            self._decisions[key] += 1
            self._reading = _replace(self._reading, decisions=dict(self._decisions))
        self._metrics.decision(key)

    def scrape_once(self) -> float:
        """One scrape and state update; returns the delay before the next (s)."""
        import httpx

        if self._client is None:
            self._client = httpx.Client(timeout=self.cfg.timeout_s)
        try:
            resp = self._client.get(f"{self.cfg.url}/metrics")
            if resp.status_code != 200:
                raise MetricsError(f"HTTP {resp.status_code}")
            sample = parse_exposition(resp.text, time.monotonic())
        except (httpx.HTTPError, MetricsError, UnicodeDecodeError) as exc:
            return self._failed(f"{type(exc).__name__}: {exc}")
        return self._succeeded(sample)

    # -- internals -----------------------------------------------------------------------------
    def _loop(self) -> None:
        if self._enter is not None:
            self._enter()
        while not self._stop.is_set():
            try:
                delay = self.scrape_once()
            except Exception as exc:  # a bug must not kill the training that reads us
                log.exception("sidecar: unexpected error")
                delay = self._failed(f"{type(exc).__name__}: {exc}", unexpected=True)
            self._stop.wait(delay)

    def _succeeded(self, sample: ServerSample) -> float:
        prev = self._prev
        win = window(prev, sample, self.cfg.quantile) if prev is not None else None
        pm = self.cfg.pressure
        if win is not None:
            pressure = pm.of_window(win)
        else:
            pressure = float(pm.inference(sample.kv_cache_usage_perc,
                                          sample.num_requests_waiting, np.nan, np.nan))  # fmt: skip
        self._prev = sample
        with self._lock:
            old = self._reading
            if old.health in ("degraded", "unknown"):
                log.warning("sidecar: %s/metrics answers again (was %s)", self.cfg.url, old.health)
            self._reading = _replace(
                old, health="ok", inference=pressure, fallback=False, sample=sample,
                window=win, time_s=sample.time_s, consecutive_failures=0,
                scrapes_ok=old.scrapes_ok + 1,
            )  # fmt: skip
        self._metrics.update(self._reading, 0.0)
        return self.cfg.period_s

    def _failed(self, error: str, unexpected: bool = False) -> float:
        """Record a failed scrape (``unexpected``: a bug, not the server); the next delay."""
        with self._lock:
            old = self._reading
            k = old.consecutive_failures + 1
            health = "unknown" if k >= self.cfg.unknown_after else "degraded"
            if health != old.health:
                log.warning("sidecar: scrape of %s/metrics failed (%s); health %s",
                            self.cfg.url, error, health)  # fmt: skip
            unknown = health == "unknown"
            self._reading = _replace(
                old, health=health, consecutive_failures=k, scrapes_failed=old.scrapes_failed + 1,
                last_error=error, fallback=unknown,
                inference=None if unknown else old.inference,
                unexpected_errors=old.unexpected_errors + unexpected,
            )  # fmt: skip
        if unknown:
            self._prev = None  # the next good sample starts afresh
        delay = min(self.cfg.period_s * 2.0**k, self.cfg.max_backoff_s)
        self._metrics.update(self._reading, delay)
        return delay


def _replace(r: Reading, **changes) -> Reading:
    from dataclasses import replace

    return replace(r, **changes)


class _OwnMetrics:
    """The sidecar's own Prometheus metrics (module doc)."""

    def __init__(self):
        from prometheus_client import CollectorRegistry, Counter, Gauge

        self.registry = reg = CollectorRegistry()
        p = "trainfabric_sidecar_"
        self.scrapes = Counter(p + "scrapes", "Scrapes by outcome.", ["outcome"], registry=reg)
        self.failures = Gauge(p + "consecutive_failures", "Failed scrapes in a row.", registry=reg)
        self.backoff = Gauge(p + "backoff_seconds", "Delay before the next scrape.", registry=reg)
        self.up = Gauge(p + "up", "1 when the last scrape succeeded.", registry=reg)
        self.fallback = Gauge(
            p + "fallback", "1 when the signal is unknown (fixed-H).", registry=reg
        )
        self.pressure = Gauge(
            p + "inference_pressure", "Inference pressure in [0, 1].", registry=reg
        )
        self.running = Gauge(p + "requests_running", "Server's running requests.", registry=reg)
        self.waiting = Gauge(p + "requests_waiting", "Server's waiting requests.", registry=reg)
        self.kv = Gauge(p + "kv_usage", "Server's KV-cache usage fraction.", registry=reg)
        self.ttft = Gauge(p + "ttft_quantile_seconds", "Window's TTFT quantile.", registry=reg)
        self.itl = Gauge(p + "itl_quantile_seconds", "Window's ITL quantile.", registry=reg)
        self.decisions = Counter("trainfabric_controller_decisions", "Controller decisions.",
                                 ["decision"], registry=reg)  # fmt: skip
        self.last = Gauge("trainfabric_controller_last_decision", "1 sync, 0 defer.", registry=reg)

    def update(self, r: Reading, delay: float) -> None:
        self.scrapes.labels(outcome="ok" if r.health == "ok" else "error").inc()
        self.failures.set(r.consecutive_failures)
        self.backoff.set(delay)
        self.up.set(1.0 if r.health == "ok" else 0.0)
        self.fallback.set(1.0 if r.fallback else 0.0)
        self.pressure.set(math.nan if r.inference is None else r.inference)
        if r.sample is not None:
            self.running.set(r.sample.num_requests_running)
            self.waiting.set(r.sample.num_requests_waiting)
            self.kv.set(r.sample.kv_cache_usage_perc)
        if r.window is not None:
            self.ttft.set(r.window.ttft_s)
            self.itl.set(r.window.itl_s)

    def decision(self, key: str) -> None:
        self.decisions.labels(decision=key).inc()
        self.last.set(1.0 if key == "sync" else 0.0)
