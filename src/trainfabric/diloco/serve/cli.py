"""``trainfabric diloco serve | sidecar | replay``: the serving side of live runs.

Registered in :mod:`trainfabric.diloco.cli`; the heavy modules (httpx, FastAPI, pandas) are
imported only when a command runs.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from trainfabric.clikit import ConfigOpt, JsonOpt, emit_json, err, finite, input_file, options, out
from trainfabric.config import MAX_SEED
from trainfabric.errors import ConfigError

# ReplayConfig's bounds, repeated so that `trainfabric --help` imports no numpy (serve.replay
# does); tests/diloco/test_bounds.py keeps them equal.
MAX_CONTEXT = 67_108_864  # 2^26 tokens
MAX_SLO_S = 3600.0
SLO = finite(gt=0, le=MAX_SLO_S)

HostOpt = Annotated[
    str,
    typer.Option(help="Address to bind; anything but 127.0.0.1 is announced on stderr."),
]
DurationOpt = Annotated[
    float | None,
    typer.Option("--duration", help="Stop after this many seconds [default: at Ctrl-C].",
                 callback=finite(gt=0, le=1e7)),
]  # fmt: skip
NAMES = {
    "url": "--url", "period_s": "--period", "timeout_s": "--timeout", "port": "--port",
    "rate_scale": "--rate-scale", "max_requests": "--max-requests", "max_seconds": "--max-seconds",
    "drain_s": "--drain", "host": "--host", "context": "--context", "ttft_slo_s": "--ttft-slo",
    "tpot_slo_s": "--tpot-slo", "window_s": "--window", "seed": "--seed", "model": "--model",
}  # fmt: skip


@contextlib.contextmanager
def _sigterm_as_interrupt():
    """Within the block, SIGTERM ends a foreground command like Ctrl-C does (servers are
    stopped cleanly); the previous handler is restored afterwards."""

    def handler(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _sleep(duration: float | None) -> None:
    end = None if duration is None else time.monotonic() + duration
    while end is None or time.monotonic() < end:
        time.sleep(0.2 if end is None else max(0.0, min(0.2, end - time.monotonic())))


def serve_cmd(
    kind: Annotated[str, typer.Option(help="vllm (the real server) or emulator.")] = "vllm",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port; 0 picks a free one.")] = 0,
    host: HostOpt = "127.0.0.1",
    model: Annotated[
        Path | None, typer.Option(help="Model directory [default: the tiny Llama, built once].")
    ] = None,
    max_model_len: Annotated[int, typer.Option(min=16, max=1_048_576, help="Context.")] = 8192,
    start_timeout: Annotated[
        float, typer.Option(help="Seconds to wait for /health.", callback=finite(gt=0, le=1e5))
    ] = 400.0,
    duration: DurationOpt = None,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Start the vLLM OpenAI server (or the emulator) on loopback until Ctrl-C."""
    from trainfabric.diloco.serve.address import check_host
    from trainfabric.diloco.serve.server import KINDS, serve

    if kind not in KINDS:
        raise ConfigError("--kind", f"{kind!r} is not one of {', '.join(KINDS)}")
    if model is not None and not (model / "config.json").is_file():
        raise ConfigError("--model", f"{model} is not a model directory (no config.json)")
    with options(host="--host"):
        check_host(host)
    start = time.monotonic()
    try:
        with (
            _sigterm_as_interrupt(),
            serve(kind, host, port, model, max_model_len, start_timeout) as srv,
        ):
            info = {"url": srv.url, "kind": srv.kind, "model": srv.model, "pid": srv.pid,
                    "log": str(srv.log), "startup_s": time.monotonic() - start}  # fmt: skip
            if json_out:
                emit_json(info)
            else:
                took = info["startup_s"]
                err.print(f"{kind} serving {srv.model} at {srv.url} (started in {took:.1f} s; "
                          f"log {srv.log}); Ctrl-C stops it")  # fmt: skip
            sys.stdout.flush()
            _sleep(duration)
    except KeyboardInterrupt:
        pass
    if not json_out:
        err.print(f"{kind} stopped")


def sidecar_cmd(
    url: Annotated[str, typer.Option(help="Server base URL, e.g. http://127.0.0.1:8000.")],
    period: Annotated[
        float, typer.Option(help="Seconds between scrapes.", callback=finite(ge=0.01, le=3600))
    ] = 1.0,
    timeout: Annotated[
        float, typer.Option(help="Scrape timeout (s).", callback=finite(gt=0, le=600))
    ] = 2.0,
    port: Annotated[
        int, typer.Option(min=0, max=65535, help="Port of the sidecar's own /metrics (0: free).")
    ] = 0,
    host: HostOpt = "127.0.0.1",
    duration: DurationOpt = None,
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Scrape a vLLM /metrics endpoint into fleet-pressure telemetry; serve its own metrics."""
    from trainfabric.config import validate
    from trainfabric.diloco.serve.sidecar import Sidecar, SidecarConfig

    with options(**NAMES):
        cfg = validate(SidecarConfig, {"url": url, "period_s": period, "timeout_s": timeout,
                                       "port": port, "host": host})  # fmt: skip
        with _sigterm_as_interrupt(), Sidecar(cfg) as sc:
            if host not in ("127.0.0.1", "localhost", "::1"):
                err.print(f"sidecar: its /metrics listens on {host}, reachable beyond this machine")
            err.print(f"sidecar scraping {url}/metrics every {period:g} s; own metrics at "
                      f"{sc.metrics_url}")  # fmt: skip
            try:
                _watch(sc, period, duration, json_out)
                stopped = False
            except KeyboardInterrupt:
                stopped = True
            r = sc.latest()
        _check_reading(r, url, stopped)
    if json_out:
        emit_json(_reading_json(r, sc.metrics_url))


def _check_reading(r, url: str, stopped: bool) -> None:
    """Fail a sidecar run that hit a bug of its own (exit 1; the tracebacks were logged) or
    that ran its ``--duration`` without reaching the server (ConfigError naming ``url``; one
    ``stopped`` by Ctrl-C or SIGTERM exits 0 then)."""
    if r.unexpected_errors:
        err.print(f"sidecar: {r.unexpected_errors} unexpected errors (tracebacks above)")
        raise typer.Exit(1)
    if not stopped and r.scrapes_failed and not r.scrapes_ok:
        raise ConfigError("url", f"no scrape of {url}/metrics succeeded ({r.last_error})")


def _watch(sc, period: float, duration: float | None, quiet: bool) -> None:
    end = None if duration is None else time.monotonic() + duration
    seen = -1
    while end is None or time.monotonic() < end:
        time.sleep(min(period, 0.2))
        r = sc.latest()
        if quiet or r.scrapes_ok + r.scrapes_failed == seen:
            continue
        seen = r.scrapes_ok + r.scrapes_failed
        p = "-" if r.inference is None else f"{r.inference:.3f}"
        s = r.sample
        gauges = (
            ""
            if s is None
            else (
                f" running {s.num_requests_running:g} waiting {s.num_requests_waiting:g}"
                f" kv {s.kv_cache_usage_perc:.4f}"
            )
        )
        out.print(
            f"{r.health:9s} inference {p}{gauges}" + (" (fallback: fixed-H)" if r.fallback else "")
        )


def _reading_json(r, metrics_url) -> dict:
    s, w = r.sample, r.window
    return {
        "health": r.health, "inference": r.inference, "fallback": r.fallback,
        "scrapes_ok": r.scrapes_ok, "scrapes_failed": r.scrapes_failed,
        "last_error": r.last_error, "metrics_url": metrics_url,
        "running": None if s is None else s.num_requests_running,
        "waiting": None if s is None else s.num_requests_waiting,
        "kv_usage": None if s is None else s.kv_cache_usage_perc,
        "ttft_quantile_s": None if w is None else w.ttft_s,
        "itl_quantile_s": None if w is None else w.itl_s,
    }  # fmt: skip


def replay_cmd(
    trace: Annotated[
        str, typer.Argument(help="Trace CSV (Azure or generic layout), or 'azure' (shipped).")
    ],
    url: Annotated[str, typer.Option(help="Server base URL, e.g. http://127.0.0.1:8000.")],
    rate_scale: Annotated[
        float, typer.Option(help="Speed the trace up by this.", callback=finite(gt=0, le=1e6))
    ] = 1.0,
    max_requests: Annotated[int, typer.Option(min=1, max=10_000_000)] = 1000,
    max_seconds: Annotated[
        float,
        typer.Option(help="Send only requests due before this.", callback=finite(gt=0, le=1e7)),
    ] = 120.0,
    drain: Annotated[
        float, typer.Option(help="Seconds to let requests finish.", callback=finite(ge=0, le=1e6))
    ] = 60.0,
    context: Annotated[
        int | None,
        typer.Option(min=2, max=MAX_CONTEXT, help="Context [default: the server's max_model_len]."),
    ] = None,
    ttft_slo: Annotated[float, typer.Option(callback=SLO, help="TTFT SLO (s).")] = 0.5,
    tpot_slo: Annotated[float, typer.Option(callback=SLO, help="TPOT SLO (s).")] = 0.05,
    window: Annotated[float, typer.Option(callback=SLO, help="SLO window (s).")] = 1.0,
    seed: Annotated[int, typer.Option(min=0, max=MAX_SEED, help="Prompt token seed.")] = 0,
    out_dir: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Directory for requests/windows Parquet + summary.",
            show_default="runs/diloco-replay",
        ),
    ] = None,  # fmt: skip
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Replay a request trace open-loop against an OpenAI-compatible server (TTFT/TPOT, SLOs)."""
    from trainfabric.config import validate
    from trainfabric.diloco.requests import azure_trace, read_trace
    from trainfabric.diloco.serve.replay import ReplayConfig, replay, write
    from trainfabric.io import prepare_dir

    with options(**NAMES, trace="TRACE"):
        cfg = validate(ReplayConfig, {
            "url": url, "rate_scale": rate_scale, "max_requests": max_requests,
            "max_seconds": max_seconds, "drain_s": drain, "context": context,
            "ttft_slo_s": ttft_slo, "tpot_slo_s": tpot_slo, "window_s": window, "seed": seed,
        })  # fmt: skip
        reqs = azure_trace() if trace == "azure" else read_trace(input_file(Path(trace), "TRACE"))
        out_path = prepare_dir(out_dir or Path("runs/diloco-replay"))
        res = replay(reqs, cfg)
    paths = write(res, out_path)
    summary = res.summary | {"files": paths}
    if json_out:
        return emit_json(summary)
    from rich.table import Table

    t = Table("quantity", "value", title=f"replay of {trace} against {url}")
    for k, v in summary.items():
        if k != "files":
            t.add_row(k, f"{v:.4g}" if isinstance(v, float) else str(v))
    out.print(t)
    err.print(f"tables: {paths['requests']}, {paths['windows']}")
