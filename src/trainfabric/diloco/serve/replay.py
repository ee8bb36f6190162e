"""Open-loop replay of a request trace against an OpenAI-compatible ``/v1/completions``.

Request ``i`` of a :class:`~trainfabric.diloco.requests.Requests` trace is sent at
``arrival_s[i] / rate_scale`` seconds after the start, whether or not earlier requests have
finished (open loop: the trace's timing, never the server's pace), exactly once (no
retries), as a streamed completion with ``max_tokens`` = its output length and
``ignore_eos: true``, so the server generates exactly that many tokens.

**Prompts** are lists of token ids (the completions API accepts them), ``prompt_tokens``
long, drawn uniformly from ``token_ids`` (default 3..258, the byte alphabet of the tiny
model's tokenizer) by a generator seeded with ``(seed, i)``: the length the server sees is
exact (text would be re-tokenised to an unknown length) and no two prompts share a prefix
(vLLM's prefix cache would otherwise skip their prefill). A request longer than the
server's context ``C`` (``max_model_len`` from ``GET /v1/models``, or given) is truncated
to fit: ``output' = min(output, C - 1)``, ``prompt' = min(prompt, C - output')``, and
counted (``truncated``); a prompt of 0 tokens is sent as 1.

**Measurements**, per request, from the client's clock (``time.monotonic``), relative to
the replay's start (``summary["start_unix_s"]``, ``summary["start_monotonic_s"]``):
``arrival_s`` (when it was due: the trace's arrival over ``rate_scale``, first one at 0),
``sent_s`` (just before the request is handed to the HTTP client, so
connection-pool waits count as latency), ``first_s`` (the first streamed chunk carrying a
choice: the first token), ``finish_s`` (``[DONE]``); ``TTFT = first_s - sent_s``,
``TPOT = (finish_s - first_s) / (tokens - 1)`` (0 for one token) with ``tokens`` the
completion tokens the server reported (``stream_options.include_usage``) or else the
chunks received (vLLM puts several tokens in one chunk when its output falls behind, so
chunks are not tokens; the first chunk still marks the first token);
``e2e = finish_s - sent_s``. A request violates its SLO when ``TTFT > ttft_slo_s`` or
``TPOT > tpot_slo_s`` (defaults 0.5 s and 0.05 s).

Request bodies are encoded before the replay's clock starts, so sending one costs no more
than handing its bytes to the HTTP client.

**Bounds**: at most ``max_requests`` requests, only those due before ``max_seconds``; after
the last is sent, in-flight requests get ``drain_s`` more seconds, then are
cancelled. A request that has not finished (cancelled, timed out, an HTTP or protocol
error) is **unfinished**; it counts as a violation once it is past its SLO, i.e. when it
got no first token within ``ttft_slo_s`` of being sent, or when even an instant remainder
would leave its TPOT above ``tpot_slo_s`` (``(end - first_s) / (output - 1) > tpot_slo_s``),
and otherwise as a request that has not violated yet. Rates are over every request sent.
The ``error`` column says why a request failed (``status`` ``error``): the client's exception
(type and message) or ``stream ended without [DONE]``; empty otherwise.

**Windows** (``window_s``, default 1 s): each request is counted in the window in which it
finished (unfinished ones in the window of the end), as the simulator counts them.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np
from pydantic import Field

from trainfabric.config import MAX_SEED, Config
from trainfabric.diloco.requests import Requests
from trainfabric.diloco.serve.address import BaseUrl
from trainfabric.diloco.telemetry import MAX_SLO_S
from trainfabric.errors import ConfigError

STATUS = ("ok", "http_error", "error", "unfinished")


MAX_CONTEXT = 67_108_864  # 2^26 tokens, as a job's seq_len (workloads.job.MAX_SEQ_LEN)
MAX_TOKEN_ID = 16_777_216  # 2^24, as a job's vocab: the largest vocabularies hold ~260,000
MAX_READ_TIMEOUT_S = 86_400.0  # a day
TokenId = Annotated[int, Field(ge=0, le=MAX_TOKEN_ID)]


class ReplayConfig(Config):
    """Replay settings (module doc); times in seconds.

    Every size has an upper bound, refused naming the field: ``rate_scale`` <= 1e6,
    ``max_requests`` <= 10,000,000, ``max_seconds`` <= 1e7, ``drain_s`` <= 1e6,
    ``context`` <= 67,108,864 (2^26), the SLOs and ``window_s`` <= 3,600,
    ``read_timeout_s`` <= 86,400, ``seed`` <= 2^63 - 1, ``token_ids`` within 0..2^24."""

    url: BaseUrl
    model: str | None = None
    rate_scale: float = Field(1.0, gt=0, le=1e6)
    max_requests: int = Field(1000, ge=1, le=10_000_000)
    max_seconds: float = Field(120.0, gt=0, le=1e7)
    drain_s: float = Field(60.0, ge=0, le=1e6)
    context: int | None = Field(None, ge=2, le=MAX_CONTEXT)
    ttft_slo_s: float = Field(0.5, gt=0, le=MAX_SLO_S)
    tpot_slo_s: float = Field(0.05, gt=0, le=MAX_SLO_S)
    window_s: float = Field(1.0, gt=0, le=MAX_SLO_S)
    read_timeout_s: float = Field(60.0, gt=0, le=MAX_READ_TIMEOUT_S)
    seed: int = Field(0, ge=0, le=MAX_SEED)
    token_ids: tuple[TokenId, TokenId] = Field((3, 259), strict=False)


@dataclass
class ReplayResult:
    """``requests`` (one row per request sent), ``windows`` (per window) and ``summary``."""

    requests: Any  # pandas.DataFrame
    windows: Any  # pandas.DataFrame
    summary: dict[str, Any]


def plan(trace: Requests, cfg: ReplayConfig, context: int) -> dict[str, np.ndarray]:
    """The requests to send: due times (s), prompt and output tokens after truncation."""
    due = (trace.arrival_s - (trace.arrival_s[0] if trace.n else 0.0)) / cfg.rate_scale
    keep = np.flatnonzero(due < cfg.max_seconds)[: cfg.max_requests]
    output = np.minimum(trace.output_tokens[keep], context - 1)
    prompt = np.maximum(1, np.minimum(trace.prompt_tokens[keep], context - output))
    truncated = (output < trace.output_tokens[keep]) | (prompt < trace.prompt_tokens[keep])
    return {"index": keep, "arrival_s": due[keep],
            "prompt": prompt, "output": output, "truncated": truncated}  # fmt: skip


def prompt_ids(cfg: ReplayConfig, i: int, n: int) -> list[int]:
    """Request ``i``'s prompt: ``n`` token ids, seeded by ``(seed, i)``."""
    lo, hi = cfg.token_ids
    return np.random.default_rng((cfg.seed, i)).integers(lo, hi, size=n).tolist()


def replay(trace: Requests, cfg: ReplayConfig | None = None, **fields) -> ReplayResult:
    """Replay ``trace`` (blocking; runs its own event loop, so call it from a plain thread).
    ``cfg`` or its fields as keywords (``url=..., max_seconds=...``). See the module doc."""
    return asyncio.run(replay_async(trace, cfg, **fields))


async def replay_async(trace: Requests, cfg: ReplayConfig | None = None, **fields) -> ReplayResult:
    """Replay ``trace`` in the running event loop. See the module doc."""
    import httpx

    from trainfabric.config import validate

    cfg = cfg if cfg is not None else validate(ReplayConfig, fields)
    if cfg.token_ids[0] < 0 or cfg.token_ids[1] <= cfg.token_ids[0]:
        raise ConfigError("token_ids", "must be (low, high) with 0 <= low < high")
    timeout = httpx.Timeout(10.0, read=cfg.read_timeout_s)
    limits = httpx.Limits(max_connections=4096, max_keepalive_connections=256)
    async with httpx.AsyncClient(base_url=cfg.url, timeout=timeout, limits=limits) as client:
        model, context = await _server_card(client, cfg)
        todo = plan(trace, cfg, context)
        n = todo["index"].size
        rec = _Records(n)
        bodies = [_body(cfg, model, todo, k) for k in range(n)]  # encoded before the clock
        start, start_unix = time.monotonic(), time.time()
        tasks = []
        for k in range(n):
            delay = start + todo["arrival_s"][k] - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(_one(client, bodies[k], rec, k, start)))
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=cfg.drain_s)
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        end = time.monotonic() - start
    return _result(todo, rec, end, cfg, model, context, (start, start_unix))


async def _server_card(client, cfg: ReplayConfig) -> tuple[str, int]:
    """(model name, context) from ``GET /v1/models`` unless both are given."""
    import httpx

    if cfg.model is not None and cfg.context is not None:
        return cfg.model, cfg.context
    try:
        resp = await client.get("/v1/models")
        resp.raise_for_status()
        card = resp.json()["data"][0]
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as exc:
        raise ConfigError("url", f"{cfg.url}/v1/models did not describe a model: {exc}") from None
    context = cfg.context or card.get("max_model_len")
    if not isinstance(context, int) or context < 2:
        raise ConfigError("context", "the server reports no max_model_len; give --context")
    return cfg.model or str(card["id"]), context


class _Records:
    """Per-request measurement arrays (NaN where not measured)."""

    def __init__(self, n: int):
        self.sent = np.full(n, np.nan)
        self.first = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.tokens = np.zeros(n, np.int64)
        self.status = np.full(n, STATUS.index("unfinished"), np.int64)
        self.http_status = np.zeros(n, np.int64)
        self.error = np.full(n, "", dtype=object)


def _body(cfg: ReplayConfig, model: str, todo: dict, k: int) -> bytes:
    """Request ``k``'s JSON body: a streamed completion of exactly its output length."""
    prompt = prompt_ids(cfg, int(todo["index"][k]), int(todo["prompt"][k]))
    body = {"model": model, "prompt": prompt,
            "max_tokens": int(todo["output"][k]), "stream": True, "ignore_eos": True,
            "temperature": 0.0, "stream_options": {"include_usage": True}}  # fmt: skip
    return json.dumps(body).encode()


async def _one(client, body: bytes, rec: _Records, k: int, start: float) -> None:
    """Send request ``k`` once and record its stream."""
    import httpx

    rec.sent[k] = time.monotonic() - start
    chunks = 0
    usage = None
    try:
        headers = {"content-type": "application/json"}
        async with client.stream("POST", "/v1/completions", content=body, headers=headers) as resp:
            rec.http_status[k] = resp.status_code
            if resp.status_code != 200:
                await resp.aread()
                rec.status[k] = STATUS.index("http_error")
                return
            async for line in resp.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    rec.finish[k] = time.monotonic() - start
                    rec.tokens[k] = usage if usage is not None else chunks
                    rec.status[k] = STATUS.index("ok")
                    return
                chunk = json.loads(data)
                if chunk.get("choices"):
                    if chunks == 0:
                        rec.first[k] = time.monotonic() - start
                    chunks += 1
                if chunk.get("usage"):
                    usage = int(chunk["usage"]["completion_tokens"])
            rec.status[k] = STATUS.index("error")
            rec.error[k] = "stream ended without [DONE]"
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        rec.status[k] = STATUS.index("error")
        rec.error[k] = f"{type(exc).__name__}: {exc}"[:200]
    finally:
        rec.tokens[k] = max(rec.tokens[k], chunks)


def _result(todo, rec: _Records, end: float, cfg: ReplayConfig, model: str, context: int,
            start: float) -> ReplayResult:  # fmt: skip
    import pandas as pd

    ok = rec.status == STATUS.index("ok")
    ttft = rec.first - rec.sent
    span = rec.finish - rec.first
    tpot = np.where(rec.tokens > 1, span / np.maximum(rec.tokens - 1, 1), 0.0)
    tpot[~ok] = np.nan
    bad_ttft = np.where(np.isnan(rec.first), end - rec.sent > cfg.ttft_slo_s, ttft > cfg.ttft_slo_s)
    late = (end - rec.first) / np.maximum(todo["output"] - 1, 1) > cfg.tpot_slo_s
    bad_tpot = np.where(
        ok, tpot > cfg.tpot_slo_s, ~np.isnan(rec.first) & late & (todo["output"] > 1)
    )
    table = pd.DataFrame({
        "request": todo["index"], "arrival_s": todo["arrival_s"], "sent_s": rec.sent,
        "prompt_tokens": todo["prompt"], "output_tokens": todo["output"],
        "truncated": todo["truncated"], "status": pd.Categorical.from_codes(rec.status, STATUS),
        "http_status": rec.http_status, "tokens": rec.tokens, "first_s": rec.first,
        "finish_s": rec.finish, "finished": ok, "ttft_s": ttft, "tpot_s": tpot,
        "e2e_s": rec.finish - rec.sent,
        "ttft_violated": bad_ttft, "tpot_violated": bad_tpot, "violated": bad_ttft | bad_tpot,
        "error": rec.error.astype(str),
    })  # fmt: skip
    return ReplayResult(table, _windows(table, end, cfg.window_s), _summary(table, end, cfg) | {
        "model": model, "context": context, "url": cfg.url, "start_monotonic_s": start[0],
        "start_unix_s": start[1],
    })  # fmt: skip


def _windows(table, end: float, window_s: float):
    """Per window of ``window_s``: requests finished there (unfinished: the last window) and
    how many violated (TTFT, TPOT, either)."""
    import pandas as pd

    n_win = max(1, int(np.ceil(end / window_s)))
    when = table["finish_s"].fillna(end).to_numpy()
    w = np.minimum((when // window_s).astype(np.int64), n_win - 1)
    count = lambda mask: np.bincount(w[mask], minlength=n_win)  # noqa: E731
    everything = np.ones(len(table), bool)
    return pd.DataFrame({
        "window": np.arange(n_win), "start_s": np.arange(n_win) * window_s,
        "requests": count(everything), "violated": count(table["violated"].to_numpy()),
        "ttft_violated": count(table["ttft_violated"].to_numpy()),
        "tpot_violated": count(table["tpot_violated"].to_numpy()),
    })  # fmt: skip


def _summary(table, end: float, cfg: ReplayConfig) -> dict[str, Any]:
    n = len(table)
    ok = (table["status"] == "ok").to_numpy()

    def q(col: str, p: float) -> float | None:
        vals = table[col].to_numpy()[ok]
        return float(np.percentile(vals, p)) if vals.size else None

    def rate(col: str) -> float | None:
        return float(table[col].mean()) if n else None

    lag = (table["sent_s"] - table["arrival_s"]).to_numpy()
    return {
        "requests": n,
        "completed": int(ok.sum()),
        "http_errors": int((table["status"] == "http_error").sum()),
        "errors": int((table["status"] == "error").sum()),
        "unfinished": int((table["status"] == "unfinished").sum()),
        "truncated": int(table["truncated"].sum()),
        "tokens": int(table["tokens"].sum()),
        "duration_s": end,
        "tokens_per_s": float(table["tokens"].sum() / end) if end > 0 else None,
        "ttft_p50_s": q("ttft_s", 50), "ttft_p90_s": q("ttft_s", 90), "ttft_p99_s": q("ttft_s", 99),
        "tpot_p50_s": q("tpot_s", 50), "tpot_p90_s": q("tpot_s", 90), "tpot_p99_s": q("tpot_s", 99),
        "slo_violation_rate": rate("violated"),
        "ttft_violation_rate": rate("ttft_violated"),
        "tpot_violation_rate": rate("tpot_violated"),
        "max_send_lag_s": float(np.max(lag)) if n else None,
        "rate_scale": cfg.rate_scale, "ttft_slo_s": cfg.ttft_slo_s, "tpot_slo_s": cfg.tpot_slo_s,
        "window_s": cfg.window_s,
    }  # fmt: skip


def write(result: ReplayResult, out_dir) -> dict[str, str]:
    """Write ``requests.parquet``, ``windows.parquet`` and ``summary.json`` into ``out_dir``."""
    from pathlib import Path

    from trainfabric.io import write_json, write_parquet

    out = Path(out_dir)
    table = result.requests.assign(status=result.requests["status"].astype(str))
    paths = {"requests": write_parquet(out / "requests.parquet", table),
             "windows": write_parquet(out / "windows.parquet", result.windows),
             "summary": write_json(out / "summary.json", result.summary)}  # fmt: skip
    return {k: str(v) for k, v in paths.items()}
