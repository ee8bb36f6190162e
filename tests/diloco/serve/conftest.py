"""Fixtures of the serving tests: the recorded vLLM exposition and a small switchable
/metrics server on 127.0.0.1."""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

RECORDED = Path(__file__).resolve().parents[2] / "data" / "vllm-metrics-0.32.0.txt"


class MetricsServer:
    """Serves ``/metrics`` in a mode switched at run time: ``ok`` (``body``), ``500``,
    ``hang`` (sleeps ``hang_s`` before answering), ``garbage`` (malformed exposition),
    ``missing`` (valid exposition without vLLM's metrics)."""

    def __init__(self, body: str, hang_s: float = 2.0):
        self.mode = "ok"
        self.body = body
        self.hang_s = hang_s
        self.hits = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                outer.hits += 1
                mode = outer.mode
                if mode == "hang":
                    threading.Event().wait(outer.hang_s)
                if mode == "500":
                    return self._send(500, b"internal error")
                text = {
                    "ok": outer.body,
                    "hang": outer.body,
                    "garbage": 'vllm:num_requests_running{engine="0" 1.0 oops\n\x00{{{',
                    "missing": "# TYPE other gauge\nother 1.0\n",
                }[mode]
                self._send(200, text.encode())

            def _send(self, code, data):
                try:
                    self.send_response(code)
                    self.send_header("Content-Type", "text/plain")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="session")
def recorded_exposition() -> str:
    """The real vLLM 0.32.0 /metrics text recorded into tests/data (see its .md)."""
    return RECORDED.read_text()


@pytest.fixture
def metrics_server(recorded_exposition):
    """A running :class:`MetricsServer` serving the recorded exposition in mode ``ok``."""
    with MetricsServer(recorded_exposition) as srv:
        yield srv


class ScriptServer:
    """An OpenAI-style completions server with a known timing (uvicorn in a thread, port 0):
    every streamed completion sends its headers at once, waits ``delay_s``, then sends
    ``max_tokens`` chunks ``interval_s`` apart and ``[DONE]``. ``mode``: ``ok``, ``500``,
    ``hang`` (never sends a token), ``cut`` (one token, then the stream ends), ``garbage``
    (a chunk that is not JSON). Records every POST body with its arrival time."""

    def __init__(self, context=8192, delay_s=0.1, interval_s=0.02):
        import asyncio
        import json
        import socket
        import time

        import uvicorn
        from fastapi import FastAPI, Request
        from fastapi.responses import Response, StreamingResponse

        self.context, self.delay_s, self.interval_s = context, delay_s, interval_s
        self.mode = "ok"
        self.posts = []  # (monotonic time, body)
        app = FastAPI()

        @app.get("/v1/models")
        async def models():
            return {"data": [{"id": "script", "max_model_len": self.context}]}

        @app.post("/v1/completions")
        async def completions(request: Request):
            body = await request.json()
            self.posts.append((time.monotonic(), body))
            if self.mode == "500":
                return Response("boom", status_code=500)

            async def stream():
                await asyncio.sleep(1000 if self.mode == "hang" else self.delay_s)
                if self.mode == "garbage":
                    yield "data: {not json\n\n"
                for k in range(body["max_tokens"]):
                    if k:
                        await asyncio.sleep(self.interval_s)
                    yield f"data: {json.dumps({'choices': [{'text': 'x'}]})}\n\n"
                    if self.mode == "cut":
                        return
                usage = {"completion_tokens": body["max_tokens"]}
                yield f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n"
                yield "data: [DONE]\n\n"

            return StreamingResponse(stream(), media_type="text/event-stream")

        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )

    def __enter__(self):
        import time

        self._thread.start()
        while not self._server.started:
            time.sleep(0.01)
        return self

    def __exit__(self, *exc):
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._sock.close()


@pytest.fixture
def script_server():
    with ScriptServer() as srv:
        yield srv
