"""Replay: every request exactly once, open loop, TTFT from the first streamed token, TPOT,
truncation to the context, bounds, unfinished requests and SLO windows."""

import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from trainfabric.diloco.requests import Requests
from trainfabric.diloco.serve.replay import ReplayConfig, plan, prompt_ids, replay, write


def _trace(n=30, gap=0.02, prompt=None, output=None):
    prompt = np.arange(10, 10 + n) if prompt is None else np.asarray(prompt)
    output = (np.arange(n) % 5) + 1 if output is None else np.asarray(output)
    return Requests(np.arange(n) * gap, prompt, output)


def test_every_request_exactly_once_with_ttft_from_first_token(script_server):
    srv = script_server
    srv.delay_s, srv.interval_s = 0.15, 0.03
    trace = _trace()
    cfg = ReplayConfig(url=srv.url, ttft_slo_s=0.1, tpot_slo_s=0.5, seed=7)
    res = replay(trace, cfg)
    t = res.requests
    assert len(srv.posts) == trace.n == len(t)
    # each request's prompt (seeded by its index) arrived exactly once
    sent = sorted(tuple(body["prompt"]) for _, body in srv.posts)
    want = sorted(tuple(prompt_ids(cfg, i, int(trace.prompt_tokens[i]))) for i in range(trace.n))
    assert sent == want
    assert all(
        b["max_tokens"] == o
        for (_, b), o in zip(
            sorted(srv.posts, key=lambda p: len(p[1]["prompt"])), trace.output_tokens, strict=True
        )
    )
    assert all(b["ignore_eos"] is True and b["stream"] is True for _, b in srv.posts)
    assert (t["status"] == "ok").all() and t["finished"].all()
    assert (t["tokens"] == trace.output_tokens).all()
    # headers come at once, the first token after delay_s: TTFT counts the token, not the
    # headers (>= delay), and not the last token (the rest of the stream, (n - 1) x 30 ms,
    # comes after it). Medians and loose upper bounds: a loaded 2-core machine delays some
    # chunks.
    assert t["ttft_s"].min() >= 0.15 and t["ttft_s"].median() < 0.15 + 0.5
    many = t["output_tokens"] > 1
    rest = t["e2e_s"] - t["ttft_s"] - (t["output_tokens"] - 1) * 0.03
    assert rest[many].median() >= -0.005
    assert 0.025 <= t.loc[many, "tpot_s"].median() < 0.03 + 0.03
    assert t["ttft_violated"].all() and not t["tpot_violated"].any()  # TTFT SLO 0.1 s < 0.15
    assert res.summary["slo_violation_rate"] == 1.0 and res.summary["completed"] == trace.n
    assert res.windows["requests"].sum() == trace.n == res.windows["violated"].sum()


def test_open_loop_sends_on_time_while_earlier_requests_run(script_server):
    srv = script_server
    srv.delay_s = 1.0  # every request takes > 1 s; arrivals every 0.02 s, over 0.38 s
    res = replay(_trace(n=20), url=srv.url)
    t = res.requests
    lag = t["sent_s"] - t["arrival_s"]
    assert lag.min() >= 0 and lag.median() < 0.02
    # every request reached the server before the first one could be answered (a closed loop,
    # or one capped at fewer than 20 in flight, would take over a second); the margin over
    # the 0.38 s of arrivals absorbs a loaded runner (0.54 s seen, with vLLM still busy)
    server_times = np.array(sorted(p[0] for p in srv.posts))
    assert server_times[-1] - server_times[0] < srv.delay_s
    assert np.allclose(t["arrival_s"], np.arange(20) * 0.02)


def test_rate_scale_compresses_arrivals(script_server):
    res = replay(_trace(n=10, gap=0.1), url=script_server.url, rate_scale=2.0)
    assert np.allclose(res.requests["arrival_s"], np.arange(10) * 0.05)


def test_truncation_to_the_context(script_server):
    srv = script_server
    srv.context = 64
    srv.delay_s = srv.interval_s = 0.0
    trace = _trace(n=4, prompt=[100, 10, 0, 30], output=[10, 100, 5, 20])
    res = replay(trace, url=srv.url)
    t = res.requests.sort_values("request")
    assert t["prompt_tokens"].tolist() == [54, 1, 1, 30]
    assert t["output_tokens"].tolist() == [10, 63, 5, 20]
    assert t["truncated"].tolist() == [True, True, False, False]
    assert res.summary["truncated"] == 2 and res.summary["context"] == 64
    for _, body in srv.posts:
        assert len(body["prompt"]) >= 1 and len(body["prompt"]) + body["max_tokens"] <= 64


def test_bounded_in_count_and_time(script_server):
    srv = script_server
    srv.delay_s = 0.0
    assert len(replay(_trace(n=30), url=srv.url, max_requests=5).requests) == 5
    assert len(srv.posts) == 5
    res = replay(_trace(n=30, gap=0.05), url=srv.url, max_seconds=0.12)
    assert len(res.requests) == 3 and len(srv.posts) == 8


def test_hanging_server_leaves_unfinished_violations(script_server):
    srv = script_server
    srv.mode = "hang"
    start = time.monotonic()
    res = replay(_trace(n=3, output=[4, 4, 4]), url=srv.url, drain_s=0.4, ttft_slo_s=0.2)
    assert time.monotonic() - start < 30.0  # a hang would never return
    t = res.requests
    assert (t["status"] == "unfinished").all() and t["violated"].all()
    assert res.summary["unfinished"] == 3 and res.summary["slo_violation_rate"] == 1.0
    assert len(srv.posts) == 3


def test_unfinished_before_its_slo_is_not_a_violation_yet(script_server):
    srv = script_server
    srv.mode = "hang"
    res = replay(_trace(n=1, output=[4]), url=srv.url, drain_s=0.1, ttft_slo_s=5.0)
    assert res.requests["status"].tolist() == ["unfinished"]
    assert not res.requests["violated"].any()


def test_http_errors_are_counted_and_never_retried(script_server):
    srv = script_server
    srv.mode = "500"
    res = replay(_trace(n=5), url=srv.url)
    assert len(srv.posts) == 5
    assert (res.requests["status"] == "http_error").all()
    assert (res.requests["http_status"] == 500).all() and res.summary["http_errors"] == 5


@pytest.mark.parametrize(
    "mode, why", [("cut", "stream ended without [DONE]"), ("garbage", "JSONDecodeError: ")]
)
def test_failed_streams_say_why(script_server, mode, why):
    script_server.mode, script_server.delay_s = mode, 0.01
    res = replay(_trace(n=4, output=[3] * 4), ReplayConfig(url=script_server.url))
    t = res.requests
    assert (t["status"] == "error").all()
    assert all(e.startswith(why) for e in t["error"]), list(t["error"])
    script_server.mode = "ok"
    ok = replay(_trace(n=2), ReplayConfig(url=script_server.url)).requests
    assert (ok["status"] == "ok").all() and (ok["error"] == "").all()


def test_plan_matches_hand_computation():
    trace = Requests(np.array([10.0, 10.5, 12.0, 20.0]), np.array([5, 3000, 50, 7]),
                     np.array([2, 10, 5000, 1]))  # fmt: skip
    cfg = ReplayConfig(url="http://127.0.0.1:1", rate_scale=2.0, max_seconds=4.5)
    todo = plan(trace, cfg, context=4096)
    assert todo["arrival_s"].tolist() == [0.0, 0.25, 1.0]
    # output capped at C - 1 = 4095, the prompt gets what is left: 1 token
    assert todo["prompt"].tolist() == [5, 3000, 1] and todo["output"].tolist() == [2, 10, 4095]
    assert todo["truncated"].tolist() == [False, False, True]


def test_write_tables(tmp_path, script_server, strict_loads):
    script_server.delay_s = 0.0
    res = replay(_trace(n=3), url=script_server.url)
    paths = write(res, tmp_path)
    back = pd.read_parquet(paths["requests"])
    assert len(back) == 3 and set(back["status"]) == {"ok"}
    assert pd.read_parquet(paths["windows"])["requests"].sum() == 3
    assert strict_loads(Path(paths["summary"]).read_text())["requests"] == 3


def test_bad_config_names_the_field():
    from trainfabric.config import validate
    from trainfabric.errors import ConfigError

    with pytest.raises(ConfigError, match="rate_scale"):
        validate(ReplayConfig, {"url": "http://127.0.0.1:1", "rate_scale": 0.0})
    with pytest.raises(ConfigError, match="url"):
        validate(ReplayConfig, {"url": "127.0.0.1:1"})
