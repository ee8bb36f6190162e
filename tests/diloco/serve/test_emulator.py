"""The serving emulator: vLLM's metric names, labels and buckets; OpenAI streaming; the engine
model's timing (prefill, decode, batch limit) and the sync slowdown."""

import json
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from trainfabric.diloco import telemetry
from trainfabric.diloco.serve.emulator import Emulator
from trainfabric.diloco.serving import ServingModel

REQUIRED = (
    "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
    "vllm:num_preemptions_total", "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds", "vllm:e2e_request_latency_seconds",
)  # fmt: skip
SLOW = ServingModel(prefill_s_per_token=1e-3, decode_base_s=0.02, decode_per_seq_s=0.0,
                    interference=2.0, max_batch=4, kv_tokens=10_000)  # fmt: skip


CLIENTS: dict[str, httpx.Client] = {}


def _families(text: str) -> dict:
    """{sample-level name: (type, label names, sorted finite bucket bounds)} of an exposition."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            base = s.name.removesuffix("_bucket").removesuffix("_count").removesuffix("_sum")
            name = base if fam.type == "histogram" else s.name
            labels = frozenset(set(s.labels) - {"le"})
            kind, _, bounds = out.get(name, (fam.type, labels, set()))
            if "le" in s.labels and s.labels["le"] != "+Inf":
                bounds = bounds | {float(s.labels["le"])}
            out[name] = (kind, labels, bounds)
    return {k: (t, lab, tuple(sorted(b))) for k, (t, lab, b) in out.items()}


def _stream(url, prompt, max_tokens, absolute=False, **extra):
    """(chunk arrival times since the request, or monotonic with ``absolute``, parsed chunks,
    saw [DONE]) of one streamed completion."""
    body = {"model": "tiny-llama", "prompt": prompt, "max_tokens": max_tokens, "stream": True}
    client = CLIENTS.setdefault(url, httpx.Client(timeout=30))  # its set-up is not latency
    start, times, chunks, done = time.monotonic(), [], [], False
    with client.stream("POST", f"{url}/v1/completions", json=body | extra) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if not line:
                continue
            assert line.startswith("data: ")
            if line == "data: [DONE]":
                done = True
                continue
            times.append(time.monotonic() - (0.0 if absolute else start))
            chunks.append(json.loads(line[6:]))
    return times, chunks, done


def test_metric_names_labels_and_buckets_equal_vllm(recorded_exposition):
    vllm = _families(recorded_exposition)
    with Emulator() as emu:
        _stream(emu.url, [1, 2, 3], 3)
        ours = _families(httpx.get(f"{emu.url}/metrics").text)
    for name in REQUIRED:
        assert name in vllm and name in ours, name
        assert ours[name] == vllm[name], name
    assert vllm["vllm:time_to_first_token_seconds"][2] == telemetry.TTFT_BUCKETS
    assert set(ours) <= set(vllm)  # nothing vLLM does not have


def test_streams_like_an_openai_server():
    with Emulator(SLOW) as emu:
        times, chunks, done = _stream(emu.url, "a b c d", 5, stream_options={"include_usage": True})
        models = httpx.get(f"{emu.url}/v1/models").json()
        plain = httpx.post(f"{emu.url}/v1/completions", json={"prompt": [1], "max_tokens": 2})
    assert done and len(chunks) == 6
    assert [c["choices"][0]["finish_reason"] for c in chunks[:5]] == [None] * 4 + ["length"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["prompt_tokens"] == 4
    assert chunks[-1]["usage"]["completion_tokens"] == 5
    assert models["data"][0]["max_model_len"] == 8192
    assert plain.json()["usage"] == {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}


@pytest.mark.parametrize("body", [{"prompt": "x", "max_tokens": 9000}, {"prompt": 3},
                                  {"prompt": "x", "max_tokens": 0}, [1, 2]])  # fmt: skip
def test_bad_requests_are_400(body):
    with Emulator() as emu:
        r = httpx.post(f"{emu.url}/v1/completions", json=body)
    assert r.status_code == 400 and r.json()["error"]["message"]


def test_timing_follows_the_engine_model_and_the_sync_slowdown():
    """TTFT = prefill 1 ms x 100 tokens = 0.1 s; one token per 20 ms decode iteration; during a
    sync every piece of work takes 1 + interference = 3 times as long."""
    with Emulator(SLOW) as emu:
        _stream(emu.url, [7], 1)  # warm the connection path
        free, _, _ = _stream(emu.url, [7] * 100, 6)
        assert httpx.post(f"{emu.url}/sync", json={"active": True}).json() == {"active": True}
        synced, _, _ = _stream(emu.url, [7] * 100, 6)
        emu.set_sync(False)
        assert httpx.get(f"{emu.url}/sync").json() == {"active": False}
    # lower bounds are exact (sleeps never end early); upper ones allow a loaded machine
    ttft, tpot = free[0], (free[-1] - free[0]) / 5
    assert 0.1 <= ttft < 0.1 + 0.1 and 0.8 * 0.02 <= tpot < 0.02 + 0.02
    s_ttft, s_tpot = synced[0], (synced[-1] - synced[0]) / 5
    assert 0.3 <= s_ttft < 0.3 + 0.1 and 0.8 * 0.06 <= s_tpot < 0.06 + 0.02
    assert s_ttft / ttft > 1.8 and s_tpot / tpot > 1.8


def test_batch_limit_queues_and_metrics_count():
    import threading

    model = SLOW.model_copy(update={"max_batch": 1})
    with Emulator(model) as emu:
        res = {}

        def go(k):
            res[k] = _stream(emu.url, [1] * 10, 10, absolute=True)

        threads = [threading.Thread(target=go, args=(k,)) for k in range(2)]
        for th in threads:
            th.start()
        for _ in range(2000):  # until both are in the engine (<= 10 s when busy)
            mid = _families_values(httpx.get(f"{emu.url}/metrics").text)
            if mid["vllm:num_requests_waiting"] + mid["vllm:num_requests_running"] == 2:
                break
            time.sleep(0.005)
        for th in threads:
            th.join()
        end = _families_values(httpx.get(f"{emu.url}/metrics").text)
    first, second = sorted((res[0][0][0], res[1][0][0]))
    # the second waits for the first to finish: 10 ms prefill + 9 x 20 ms decode
    assert second >= first + 0.18
    assert mid["vllm:num_requests_running"] == 1 and mid["vllm:num_requests_waiting"] == 1
    assert mid["vllm:kv_cache_usage_perc"] == pytest.approx(20 / 10_000)
    assert end["vllm:num_requests_running"] == 0 and end["vllm:kv_cache_usage_perc"] == 0
    assert end["vllm:time_to_first_token_seconds_count"] == 2
    assert end["vllm:inter_token_latency_seconds_count"] == 18
    assert end["vllm:generation_tokens_total"] == 20 and end["vllm:prompt_tokens_total"] == 20


def _families_values(text: str) -> dict:
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples
            if "le" not in s.labels}  # fmt: skip
