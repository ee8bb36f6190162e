"""The sidecar: parses a recorded real vLLM exposition; survives 500s, hangs, malformed text and
missing metrics (then falls back) and recovers; bounded backoff; its own metrics."""

import re
import time

import httpx
import numpy as np
import pytest

from trainfabric.diloco import telemetry
from trainfabric.diloco.serve.emulator import Metrics
from trainfabric.diloco.serve.sidecar import MetricsError, Sidecar, SidecarConfig, parse_exposition


def _line_value(text: str, pattern: str) -> float:
    """The value of the one exposition line whose name+labels match ``pattern`` (regex)."""
    hits = [ln for ln in text.splitlines() if re.match(pattern, ln)]
    assert len(hits) == 1, (pattern, hits)
    return float(hits[0].rsplit(" ", 1)[1])


def _wait(pred, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.01)
    raise AssertionError("condition not reached")


def test_parses_recorded_vllm_exposition(recorded_exposition):
    text = recorded_exposition
    s = parse_exposition(text, 5.0)
    assert s.time_s == 5.0
    assert s.num_requests_running == _line_value(text, r"vllm:num_requests_running\{") == 16
    assert s.num_requests_waiting == _line_value(text, r"vllm:num_requests_waiting\{") == 0
    kv = _line_value(text, r"vllm:kv_cache_usage_perc\{")
    assert s.kv_cache_usage_perc == pytest.approx(kv) and 0 < kv < 1
    assert s.num_preemptions_total == _line_value(text, r"vllm:num_preemptions_total\{")
    ttft = s.time_to_first_token_seconds
    assert ttft.bounds == telemetry.TTFT_BUCKETS
    assert ttft.count == _line_value(text, r"vllm:time_to_first_token_seconds_count\{")
    assert ttft.sum == pytest.approx(_line_value(text, r"vllm:time_to_first_token_seconds_sum"))
    at_half = _line_value(text, r'vllm:time_to_first_token_seconds_bucket\{.*le="0.5"')
    assert ttft.buckets[telemetry.TTFT_BUCKETS.index(0.5)] == at_half
    itl = s.inter_token_latency_seconds
    assert itl.bounds == telemetry.ITL_BUCKETS
    assert itl.count == _line_value(text, r"vllm:inter_token_latency_seconds_count\{") > 0


@pytest.mark.parametrize(
    "text, message",
    [
        ('vllm:num_requests_running{engine="0" 1.0 oops\n\x00{{{', "malformed"),
        ("# TYPE other gauge\nother 1.0\n", "missing metric vllm:num_requests_running"),
        ("", "missing metric"),
    ],
)
def test_bad_expositions_are_metrics_errors(text, message):
    with pytest.raises(MetricsError, match=message):
        parse_exposition(text, 0.0)


def test_missing_histogram_is_named(recorded_exposition):
    text = "\n".join(
        ln for ln in recorded_exposition.splitlines() if "inter_token_latency" not in ln
    )
    with pytest.raises(MetricsError, match="vllm:inter_token_latency_seconds"):
        parse_exposition(text + "\n", 0.0)


FAULTS = [("500", "HTTP 500"), ("hang", "Timeout"), ("garbage", "MetricsError"),
          ("missing", "missing")]  # fmt: skip


@pytest.mark.parametrize("mode, error", FAULTS)
def test_survives_falls_back_and_recovers(metrics_server, mode, error):
    cfg = SidecarConfig(url=metrics_server.url, period_s=0.02, timeout_s=0.3, unknown_after=3,
                        max_backoff_s=0.05)  # fmt: skip
    metrics_server.hang_s = 1.0
    with Sidecar(cfg) as sc:
        _wait(lambda: sc.latest().health == "ok")
        assert sc.latest().inference is not None and not sc.latest().fallback
        metrics_server.mode = mode
        _wait(lambda: sc.latest().health == "unknown")
        r = sc.latest()
        assert r.inference is None and r.fallback and error in r.last_error
        assert r.consecutive_failures >= 3 and sc._thread.is_alive()
        metrics_server.mode = "ok"
        _wait(lambda: sc.latest().health == "ok", timeout=15)
        r = sc.latest()
        assert r.inference is not None and not r.fallback and r.consecutive_failures == 0


def test_backoff_is_exponential_and_bounded(metrics_server):
    metrics_server.mode = "500"
    sc = Sidecar(SidecarConfig(url=metrics_server.url, period_s=0.5, max_backoff_s=3.0,
                               unknown_after=3))  # fmt: skip
    delays, health = [], []
    for _ in range(5):
        delays.append(sc.scrape_once())
        health.append(sc.latest().health)
    assert delays == [1.0, 2.0, 3.0, 3.0, 3.0]
    assert health == ["degraded", "degraded", "unknown", "unknown", "unknown"]
    assert metrics_server.hits == 5
    metrics_server.mode = "ok"
    assert sc.scrape_once() == 0.5 and sc.latest().health == "ok"


def test_unexpected_error_does_not_kill_the_thread(metrics_server, monkeypatch):
    import trainfabric.diloco.serve.sidecar as mod

    def boom(text, t):
        raise RuntimeError("bug")

    monkeypatch.setattr(mod, "parse_exposition", boom)
    cfg = SidecarConfig(url=metrics_server.url, period_s=0.01, max_backoff_s=0.02)
    with Sidecar(cfg) as sc:
        _wait(lambda: sc.latest().health == "unknown")
        assert "RuntimeError" in sc.latest().last_error and sc._thread.is_alive()


def _emulator_exposition(ttft, itl) -> str:
    m = Metrics("m")
    for x in ttft:
        m.ttft.observe(x)
    for x in itl:
        m.itl.observe(x)
    return m.exposition().decode()


def test_restart_window_and_pressure(metrics_server):
    """A server restart (counters below the last scrape) is not a failure: the window holds
    the observations since the restart, and they drive the pressure."""
    sc = Sidecar(SidecarConfig(url=metrics_server.url, period_s=0.1))
    sc.scrape_once()  # the recorded exposition: 34 first tokens so far
    first = sc.latest()
    assert first.window is None and first.health == "ok"
    assert first.inference == pytest.approx(first.sample.kv_cache_usage_perc)  # gauges only
    metrics_server.body = _emulator_exposition([0.9, 0.9], [0.01] * 5)  # restarted, late
    sc.scrape_once()
    r = sc.latest()
    assert r.health == "ok" and r.window.first_tokens == 2 and r.window.tokens == 5
    assert r.inference == 1.0  # every first token over the 0.5 s SLO
    metrics_server.body = _emulator_exposition([0.9, 0.9, 0.01, 0.01], [0.01] * 9)
    sc.scrape_once()
    r = sc.latest()
    assert r.window.first_tokens == 2 and r.inference == 0.0  # idle server, all on time
    assert np.isfinite(r.window.itl_s)


def test_own_metrics_endpoint_on_loopback(metrics_server):
    cfg = SidecarConfig(url=metrics_server.url, period_s=0.02, port=0)
    with Sidecar(cfg) as sc:
        assert sc.metrics_url.startswith("http://127.0.0.1:")
        _wait(lambda: sc.latest().scrapes_ok >= 2)
        sc.record_decision(True)
        sc.record_decision(True)
        sc.record_decision(False)
        text = httpx.get(sc.metrics_url).text
    assert _line_value(text, r"trainfabric_sidecar_up ") == 1.0
    assert _line_value(text, r'trainfabric_controller_decisions_total\{decision="sync"\}') == 2
    assert _line_value(text, r'trainfabric_controller_decisions_total\{decision="defer"\}') == 1
    assert _line_value(text, r"trainfabric_sidecar_requests_running ") == 16
    assert sc.latest().decisions == {"sync": 2, "defer": 1}
