"""Executors: run cells and hand each finished table to ``on_done(cell, table)`` in the parent.

- ``serial``: in this process, one cell after the other (debugging, tests).
- ``local``: a :class:`concurrent.futures.ProcessPoolExecutor` with the ``spawn`` start
  method (no forked state; workers import the registry afresh).
- ``ray``: Ray remote tasks, collected in batches with ``ray.wait`` (each wait returns every
  task finished so far, so the loop costs O(cells) per poll, not per finished cell). Ray is an
  optional extra and imported only here. Against a cluster (``address``), every node needs
  the same trainfabric version installed.

``on_done`` runs in the parent as each cell finishes, so the caller stores every finished
cell at once; when a cell (or ``on_done``) fails, the cells not yet started are cancelled,
the running ones stopped, and the error is raised. A ConfigError raised by an experiment in
a worker (ConfigError pickles) reaches the parent as a ConfigError with the same field,
naming the cell.

Nothing outlives the sweep:

- Ctrl-C (SIGINT) and SIGTERM: workers ignore SIGINT (a terminal sends it to the whole
  foreground group); the parent stops them (SIGTERM, then SIGKILL after
  :data:`STOP_GRACE_S`), shuts Ray down and re-raises: KeyboardInterrupt for SIGINT (the CLI
  exits 130), :class:`~trainfabric.errors.Terminated` (a ``SystemExit(143)``) for SIGTERM
  (the CLI exits 143). Cells already handed to ``on_done`` are kept.
- SIGKILL of the parent: each local worker has ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` (Linux)
  and a daemon thread that exits the worker once its parent is gone (any POSIX). A local Ray
  started here runs beside a watchdog process (:mod:`trainfabric.runs.watchdog`) that kills
  Ray's processes once this process is gone.
- A local Ray started here listens on loopback only: Ray 2.60 maps a ``_node_ip_address``
  of 127.0.0.1 to the machine's routable address and binds its gRPC servers to every
  interface, except in its single-machine mode (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, the
  mode Ray uses on laptops), which binds every server to 127.0.0.1 (measured with ``ss``);
  :func:`start_local_ray` selects that mode.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import pandas as pd

from trainfabric import limits
from trainfabric.errors import ConfigError, Terminated, sigterm_terminates

if TYPE_CHECKING:
    from trainfabric.runs.sweep import Cell

EXECUTORS = ("local", "ray", "serial")
PARENT_POLL_S = 0.5  # how often a local worker checks that its parent still runs
RAY_WAIT_S = 0.5  # longest a Ray poll blocks (signals are handled between polls)
STOP_GRACE_S = 5.0  # time given to a worker after SIGTERM before SIGKILL
PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
RAY_LOCAL_MODE_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
WATCHDOG = Path(__file__).with_name("watchdog.py")

OnDone = Callable[["Cell", pd.DataFrame], None]


def check_options(executor: str, workers: int | None, address: str | None) -> None:
    """Reject an unknown executor, ``workers < 1``, ``workers`` without ``local`` and
    ``address`` without ``ray`` (ConfigErrors), and a missing Ray for ``ray``."""
    if executor not in EXECUTORS:
        raise ConfigError(
            "executor", f"unknown executor {executor!r}; choose one of {', '.join(EXECUTORS)}"
        )
    if workers is not None and executor != "local":
        raise ConfigError("workers", "only applies to the local executor")
    if workers is not None and workers < 1:
        raise ConfigError("workers", "must be >= 1")
    if address is not None and executor != "ray":
        raise ConfigError("address", "only applies to the ray executor")
    if executor == "ray":
        _import_ray()


def execute(
    executor: str,
    cells: Sequence[Cell],
    on_done: OnDone,
    workers: int | None = None,
    address: str | None = None,
) -> None:
    """Run ``cells`` on ``executor`` (see the module docs), calling ``on_done`` per cell."""
    check_options(executor, workers, address)
    if not cells:
        return
    if executor == "serial":
        run_serial(cells, on_done)
    elif executor == "local":
        run_local(cells, workers, on_done)
    else:
        run_ray(cells, address, on_done)


def run_serial(cells: Sequence[Cell], on_done: OnDone) -> None:
    """Run the cells one by one in this process."""
    for cell in cells:
        on_done(cell, _run_cell(cell))


def run_local(cells: Sequence[Cell], workers: int | None, on_done: OnDone) -> None:
    """Run the cells on a spawn-context process pool of ``workers`` processes (default: one
    per CPU, never more than there are cells). On success the pool is shut down cleanly; on
    any exception (a failed cell, Ctrl-C, SIGTERM) its workers are stopped at once."""
    size = min(workers or os.cpu_count() or 1, len(cells))
    with _local_pool(size, worker_init, (os.getpid(),)) as pool:
        _collect_local(pool, cells, on_done)


@contextmanager
def _local_pool(size: int, initializer, initargs: tuple) -> Iterator[ProcessPoolExecutor]:
    """A spawn-context pool of ``size`` workers, each started by ``initializer(*initargs)``,
    within :func:`~trainfabric.errors.sigterm_terminates` and each worker's share of the
    memory limit. Shut down cleanly when the block succeeds; on any exception (a failed
    task, Ctrl-C, SIGTERM) its workers are stopped at once and it is raised."""
    before = set(multiprocessing.active_children())
    pool = ProcessPoolExecutor(
        max_workers=size,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=initializer,
        initargs=initargs,
    )
    try:
        with sigterm_terminates(), limits.worker_share(size):
            yield pool
    except BaseException:
        workers_now = [p for p in multiprocessing.active_children() if p not in before]
        pool.shutdown(wait=False, cancel_futures=True)
        stop_processes(workers_now)
        raise
    pool.shutdown(wait=True)


def map_local(
    fn: Callable, items: Sequence, workers: int, on_done: Callable, setup=None, setup_args=()
) -> list:
    """``[fn(item) for item in items]`` on a spawn-context pool of ``min(workers, len(items))``
    processes, started as :func:`run_local`'s (:func:`worker_init`) and then by
    ``setup(*setup_args)`` (e.g. holding a large object once per worker instead of once per
    item); ``on_done(index)`` runs in the parent as each item finishes. ``fn`` and ``setup``
    must be importable (module-level). On any exception (a failed item, Ctrl-C, SIGTERM) the
    workers are stopped at once and it is raised."""
    size = max(1, min(workers, len(items)))
    out: list = [None] * len(items)
    with _local_pool(size, _map_init, (os.getpid(), setup, tuple(setup_args))) as pool:
        with _sigint_ignored():
            futures = {pool.submit(fn, item): k for k, item in enumerate(items)}
        for future in as_completed(futures):
            k = futures[future]
            out[k] = future.result()
            on_done(k)
    return out


def _map_init(parent_pid: int, setup, setup_args: tuple) -> None:
    worker_init(parent_pid)
    if setup is not None:
        setup(*setup_args)


def _collect_local(pool: ProcessPoolExecutor, cells: Sequence[Cell], on_done: OnDone) -> None:
    """Submit every cell and hand each result to ``on_done`` as it finishes (``as_completed``
    waits on all futures once: O(cells) in all, not per finished cell)."""
    with _sigint_ignored():  # workers spawned here start with Ctrl-C ignored
        futures = {pool.submit(_task, cell): cell for cell in cells}
    for future in as_completed(futures):
        cell = futures[future]
        try:
            table = future.result()
        except ConfigError as exc:
            raise _cell_error(cell, exc) from None
        on_done(cell, table)


@contextmanager
def _sigint_ignored() -> Iterator[None]:
    """SIGINT ignored (``SIG_IGN``) in this process for the block, so that workers spawned in
    it inherit the disposition and Python installs no KeyboardInterrupt handler in them: a
    Ctrl-C during their imports prints nothing. The block only submits cells (milliseconds);
    a Ctrl-C within it is dropped."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def worker_init(parent_pid: int) -> None:
    """Initializer of local pool workers: ignore SIGINT (the parent handles Ctrl-C and stops
    the workers), ask the kernel for SIGKILL when the parent dies (Linux), and start a daemon
    thread that ends this worker when the parent is gone (any POSIX: re-parenting changes
    ``os.getppid()``). The kernel sends the death signal when the *thread* that started the
    worker ends; the pool starts workers from the thread that submits the cells, which
    stays in :func:`run_local` until the pool is shut down."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _set_pdeathsig()
    if os.getppid() != parent_pid:  # the parent died before the prctl above
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()


def _set_pdeathsig() -> None:
    """``prctl(PR_SET_PDEATHSIG, SIGKILL)`` where the C library has it (Linux)."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _watch_parent(parent_pid: int) -> None:
    """End this worker (``os._exit``) once ``parent_pid`` is no longer its parent."""
    while os.getppid() == parent_pid:
        time.sleep(PARENT_POLL_S)
    os._exit(1)


def stop_processes(processes: Sequence[multiprocessing.process.BaseProcess]) -> None:
    """SIGTERM each process, wait up to :data:`STOP_GRACE_S` seconds in all, SIGKILL the ones
    still alive and reap them."""
    for process in processes:
        process.terminate()
    deadline = time.monotonic() + STOP_GRACE_S
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.is_alive():
            process.kill()
            process.join(STOP_GRACE_S)


def run_ray(
    cells: Sequence[Cell], address: str | None, on_done: OnDone, num_cpus: int | None = None
) -> None:
    """Run the cells as Ray tasks, one CPU each.

    Uses the Ray session already initialised in this process if there is one; otherwise
    connects to ``address``, or starts a local instance (:func:`start_local_ray`, ``num_cpus``
    CPUs, default one per CPU) when ``address`` is None, and shuts down only what it started
    -- on every exit path (success, failure, Ctrl-C, SIGTERM). On an exception the tasks not
    finished are cancelled (force-killed when Ray was started here).
    """
    ray = _import_ray()
    if ray.is_initialized():
        _collect_ray(ray, cells, on_done, started_here=False)
        return
    with _ray_session(ray, address, num_cpus):
        _collect_ray(ray, cells, on_done, started_here=address is None)


def _collect_ray(
    ray: ModuleType, cells: Sequence[Cell], on_done: OnDone, started_here: bool
) -> None:
    """Submit every cell, then poll for finished ones in batches; SIGINT and SIGTERM are
    acted on between polls (:func:`_deferred_signals`)."""
    task = ray.remote(num_cpus=1)(_task)
    by_ref = {task.remote(cell): cell for cell in cells}
    pending = list(by_ref)
    try:
        with _deferred_signals() as check:
            while pending:
                done, pending = ray.wait(pending, num_returns=len(pending), timeout=RAY_WAIT_S)
                for ref in done:
                    on_done(by_ref[ref], _ray_result(ray, ref, by_ref[ref]))
                check()
    except BaseException:
        for ref in pending:
            ray.cancel(ref, force=started_here)
        raise


def _ray_result(ray: ModuleType, ref: object, cell: Cell) -> pd.DataFrame:
    """``ray.get(ref)``, with an experiment's ConfigError unwrapped from Ray's task error."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as exc:
        if isinstance(exc.cause, ConfigError):
            raise _cell_error(cell, exc.cause) from None
        raise


@contextmanager
def _ray_session(ray: ModuleType, address: str | None, num_cpus: int | None) -> Iterator[None]:
    """A Ray session for the block: connected to ``address``, or a local one started with
    :func:`start_local_ray`; shut down (and its watchdog dismissed) however the block ends."""
    watchdog = None
    with _sigterm_kept_through_init():
        if address is None:
            with limits.worker_share(num_cpus or os.cpu_count() or 1):
                watchdog = start_local_ray(ray, num_cpus)
        else:
            _connect_ray(ray, address)
    try:
        yield
    finally:
        ray.shutdown()
        if watchdog is not None:
            stop_watchdog(watchdog)


@contextmanager
def _sigterm_kept_through_init() -> Iterator[None]:
    """SIGTERM during ``ray.init`` ends like SIGTERM elsewhere (:class:`Terminated`, after
    the caller's cleanup), and this process's SIGTERM handler survives ``ray.init``.

    ``ray.init`` replaces the handler with ``sys.exit(15)``, and its core worker adds a
    C-level one that aborts (exit 134, measured) unless Ray's constant
    ``RAY_DISABLE_FAILURE_SIGNAL_HANDLER`` (read from the environment at import) is set.
    The block sets that constant, turns ``SystemExit(15)`` into :class:`Terminated` and
    restores the handler and the constant afterwards (the handler in the main thread only).
    """
    from ray._private import ray_constants

    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if main else None
    saved = ray_constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER
    ray_constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER = True
    try:
        yield
    except SystemExit as exc:
        if exc.code != signal.SIGTERM:
            raise
        raise Terminated from None
    finally:
        ray_constants.RAY_DISABLE_FAILURE_SIGNAL_HANDLER = saved
        if main:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def start_local_ray(ray: ModuleType, num_cpus: int | None = None) -> subprocess.Popen[bytes]:
    """Start a local Ray instance bound to 127.0.0.1 (``num_cpus`` CPUs, default one per CPU,
    no dashboard) with a watchdog that kills its processes if this process dies without
    shutting it down; return the watchdog (dismiss it with :func:`stop_watchdog` after
    ``ray.shutdown()``). The loopback binding uses Ray's single-machine mode (module docs)."""
    watchdog = start_watchdog()
    try:
        with _environment(RAY_LOCAL_MODE_ENV), _single_machine_mode():
            ray.init(
                address="local",
                num_cpus=num_cpus or os.cpu_count(),
                include_dashboard=False,
                logging_level=logging.WARNING,
            )
    except BaseException:
        ray.shutdown()
        stop_watchdog(watchdog)
        raise
    return watchdog


@contextmanager
def _single_machine_mode() -> Iterator[None]:
    """Ray's single-machine mode in this process for the block: its constants module reads
    ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` once, at import, and the node-address lookup reads
    the constant at call time, so an already imported Ray is switched here and restored
    afterwards (a later connection to a cluster from this process is unaffected)."""
    from ray._private import ray_constants

    saved = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved


@contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """``os.environ`` updated with ``values`` for the block (Ray's processes, started within
    it, inherit them), restored afterwards."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def start_watchdog() -> subprocess.Popen[bytes]:
    """Start :mod:`trainfabric.runs.watchdog` for this process, in its own session, by file
    path (it imports only the standard library, so it is watching within milliseconds)."""
    return subprocess.Popen(
        [sys.executable, "-I", str(WATCHDOG), str(os.getpid())],
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )


def stop_watchdog(watchdog: subprocess.Popen[bytes]) -> None:
    """Dismiss a watchdog (SIGTERM: it exits without killing anything) and reap it."""
    watchdog.terminate()
    try:
        watchdog.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        watchdog.kill()
        watchdog.wait()


@contextmanager
def _deferred_signals() -> Iterator[Callable[[], None]]:
    """Within the block, SIGINT and SIGTERM are recorded instead of raised; yields
    ``check()``, which raises KeyboardInterrupt (SIGINT) or
    :class:`~trainfabric.errors.Terminated` (SIGTERM) once one has arrived. Ray needs this:
    an exception raised by a Python signal handler inside ``ray.wait`` comes out as Ray's own
    ``SystemExit(1)`` (``ray.init`` is covered by :func:`_sigterm_kept_through_init`). Only
    in the main thread (elsewhere ``check()`` never raises)."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return

    def record(signum: int, frame: object) -> None:
        received.append(signum)

    def check() -> None:
        if signal.SIGINT in received:
            raise KeyboardInterrupt
        if received:
            raise Terminated

    previous = {sig: signal.signal(sig, record) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield check
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)


def _task(cell: Cell) -> pd.DataFrame:
    """Worker entry point (top level, spawn-safe): the cell's table."""
    return cell.run()


def _run_cell(cell: Cell) -> pd.DataFrame:
    """The cell's table; a ConfigError is re-raised naming the cell."""
    try:
        return cell.run()
    except ConfigError as exc:
        raise _cell_error(cell, exc) from None


def _cell_error(cell: Cell, exc: ConfigError) -> ConfigError:
    """``exc`` with the cell (id, parameters, seed) added to its message, same field and
    class."""
    return type(exc)(
        exc.field, f"{exc.message} (cell {cell.cell_id}: {cell.params}, seed {cell.seed})"
    )


def _import_ray() -> ModuleType:
    try:
        import ray
    except ImportError:
        raise ConfigError(
            "executor", "ray is not installed: pip install 'trainfabric[distributed]'"
        ) from None
    return ray


def _connect_ray(ray: ModuleType, address: str) -> None:
    _probe(address)
    try:
        ray.init(address=address, logging_level=logging.WARNING)
    except (ConnectionError, ValueError) as exc:
        raise ConfigError("address", f"cannot connect to Ray at {address!r}: {exc}") from None


def _probe(address: str, timeout_s: float = 5.0) -> None:
    """Refuse at once a ``host:port`` where nothing accepts a TCP connection within
    ``timeout_s`` (Ray itself retries its GCS for a minute and more); ``auto`` and ``ray://``
    addresses are Ray's to resolve."""
    host, sep, port = address.rpartition(":")
    if "://" in address or not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except (OSError, OverflowError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise ConfigError("address", f"nothing accepts connections at {address}: {why}") from None
