"""The serial, local (process pool) and Ray executors give the same results; a local Ray
listens on loopback only and dies with its driver; worker errors cross process boundaries."""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest
from proctable import alive, descendants

from trainfabric.errors import ConfigError, FormatError
from trainfabric.runs import Cell, SweepSpec, expand, run_sweep
from trainfabric.runs.executors import _connect_ray, execute, run_ray


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    keys = ["cell_id", "shard"]
    return frame.sort_values(keys).reset_index(drop=True)


def test_serial_local_and_ray_agree(tmp_path, small_spec, ray_session):
    serial = run_sweep(small_spec, tmp_path / "serial", executor="serial", progress=False)
    local = run_sweep(small_spec, tmp_path / "local", executor="local", workers=2, progress=False)
    ray = run_sweep(small_spec, tmp_path / "ray", executor="ray", progress=False)
    assert len(serial.results) == 2 * 2 * (2 + 4)  # gini x seeds x (ep=2 + ep=4 shards)
    for other in (local, ray):
        assert other.computed == serial.computed and not other.skipped
        pd.testing.assert_frame_equal(_sorted(other.results), _sorted(serial.results))
        # results.parquet is in grid order whatever order the cells finished in
        pd.testing.assert_frame_equal(other.results, serial.results)
    assert ray_session.is_initialized()  # run_ray leaves a session it did not start running


def test_run_ray_calls_on_done_per_cell(ray_session):
    spec = SweepSpec(experiment="moe_skew", seeds=3, base={"experts": 8, "ep": 2})
    cells = expand(spec)
    seen = {}
    run_ray(cells, None, lambda cell, table: seen.__setitem__(cell.cell_id, len(table)))
    assert seen == {c.cell_id: 2 for c in cells}


def test_unknown_executor_is_refused_before_writing(tmp_path, small_spec):
    with pytest.raises(ConfigError) as info:
        run_sweep(small_spec, tmp_path / "run", executor="dask", progress=False)
    assert info.value.field == "executor"
    assert "local, ray, serial" in str(info.value)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("executor", "workers", "address", "field"),
    [
        ("local", 0, None, "workers"),
        ("serial", 2, None, "workers"),
        ("local", None, "ray://head:10001", "address"),
    ],
)
def test_bad_executor_options(tmp_path, small_spec, executor, workers, address, field):
    with pytest.raises(ConfigError) as info:
        run_sweep(
            small_spec,
            tmp_path,
            executor=executor,
            workers=workers,
            address=address,
            progress=False,
        )
    assert info.value.field == field


def test_missing_ray_is_a_config_error(monkeypatch, small_spec):
    monkeypatch.setitem(sys.modules, "ray", None)  # makes `import ray` fail
    with pytest.raises(ConfigError) as info:
        execute("ray", expand(small_spec), lambda cell, table: None)
    assert info.value.field == "executor"
    assert "pip install 'trainfabric[distributed]'" in str(info.value)


class _RecordingRay:
    """Stands in for the ``ray`` module: records ``init`` calls."""

    def __init__(self):
        self.inits = []

    def init(self, **kwargs):
        self.inits.append(kwargs)


@pytest.mark.parametrize("host", ["127.0.0.1", "no-such-host.invalid"])
def test_a_ray_address_where_nothing_listens_is_refused_at_once(host):
    """A closed port or an unknown host: a one-line error naming ``address`` within the
    probe's 5 s, before Ray (which keeps retrying its GCS) is asked; a port that listens is
    handed to Ray."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again below: nothing listens there
    ray = _RecordingRay()
    with pytest.raises(ConfigError, match="nothing accepts connections") as info:
        _connect_ray(ray, f"{host}:{port}")
    assert info.value.field == "address" and ray.inits == []
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        address = f"127.0.0.1:{s.getsockname()[1]}"
        _connect_ray(ray, address)
    assert [call["address"] for call in ray.inits] == [address]


def test_experiment_config_error_keeps_its_field(step_experiment):
    step_experiment["fail_at"] = 1
    step_experiment["error"] = ConfigError
    cells = expand(SweepSpec(experiment="step", grid={"x": [0, 1]}))
    done = []
    with pytest.raises(ConfigError) as info:
        execute("serial", cells, lambda cell, table: done.append(cell.cell_id))
    assert info.value.field == "x"
    assert "simulated user error" in str(info.value) and cells[1].cell_id in str(info.value)
    assert done == [cells[0].cell_id]


@pytest.mark.parametrize("cls", [ConfigError, FormatError])
def test_config_errors_survive_pickling(cls):
    """Workers send a ConfigError back by pickle: class, field and message survive."""
    back = pickle.loads(pickle.dumps(cls("--rate-gbps", "must be finite")))
    assert type(back) is cls
    assert (back.field, back.message) == ("--rate-gbps", "must be finite")
    assert str(back) == "--rate-gbps: must be finite"


WATCHED = textwrap.dedent(
    """
    import subprocess, sys, time
    from trainfabric.runs.executors import start_watchdog
    start_watchdog()
    child = subprocess.Popen(["sleep", "60"], start_new_session=True)
    time.sleep(0.6)  # the watchdog polls every 0.25 s
    print(child.pid, flush=True)
    time.sleep(60)
    """
)


@pytest.mark.slow  # 1.5 s or more in the default run (make test-all runs it)
def test_watchdog_kills_the_descendants_of_a_killed_parent():
    parent = subprocess.Popen([sys.executable, "-c", WATCHED], stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        watched = {p for p in descendants(parent.pid) if p[0] == child}
        assert len(watched) == 1
    finally:
        parent.kill()
        parent.wait(timeout=10)
    deadline = time.monotonic() + 5
    while alive(watched) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert alive(watched) == set()


DISMISSED = textwrap.dedent(
    """
    import subprocess, time
    from trainfabric.runs.executors import start_watchdog, stop_watchdog
    watchdog = start_watchdog()
    child = subprocess.Popen(["sleep", "60"], start_new_session=True)
    time.sleep(0.6)
    stop_watchdog(watchdog)
    print(child.pid, flush=True)
    time.sleep(60)
    """
)


@pytest.mark.slow  # 2 s or more in the default run (make test-all runs it)
def test_a_dismissed_watchdog_kills_nothing():
    parent = subprocess.Popen([sys.executable, "-c", DISMISSED], stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        watched = {p for p in descendants(parent.pid) if p[0] == child}
    finally:
        parent.kill()
        parent.wait(timeout=10)
    time.sleep(1.0)  # four watchdog polls
    try:
        assert alive(watched) == watched
    finally:
        os.kill(child, signal.SIGKILL)


def _listening(pids: set[int]) -> list[tuple[int, str]]:
    """(pid, local address as hex) of every TCP LISTEN socket owned by ``pids``."""
    inodes = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    link = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if link.startswith("socket:["):
                        inodes[link[8:-1]] = pid
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                found.append((inodes[fields[9]], fields[1].split(":")[0]))
    return found


LOOPBACK = {
    "0100007F",  # 127.0.0.1 (little-endian hex in /proc/net/tcp)
    "00000000000000000000000001000000",  # ::1
    "0000000000000000FFFF00000100007F",  # ::ffff:127.0.0.1
}


def test_local_ray_listens_on_loopback_only(ray_session):
    procs = {pid for pid, _ in descendants(os.getpid())} | {os.getpid()}
    sockets = _listening(procs)
    assert len({pid for pid, _ in sockets}) >= 3  # at least driver, GCS server and raylet
    assert [s for s in sockets if s[1] not in LOOPBACK] == []


RAY_DRIVER = textwrap.dedent(
    """
    import ray
    from trainfabric.runs.executors import start_local_ray
    start_local_ray(ray, num_cpus=1)
    print("up", flush=True)
    import time; time.sleep(120)
    """
)


@pytest.mark.slow  # over 5 s in the default run (make test-all runs it)
def test_local_ray_dies_with_a_killed_driver():
    driver = subprocess.Popen([sys.executable, "-c", RAY_DRIVER], stdout=subprocess.PIPE, text=True)
    try:
        assert driver.stdout.readline() == "up\n"
        time.sleep(1.0)  # agents started by the raylet; the watchdog has polled since
        procs = descendants(driver.pid)
    finally:
        driver.kill()
        driver.wait(timeout=10)
    assert len(procs) >= 4  # watchdog, GCS server, raylet, agents
    deadline = time.monotonic() + 10
    while alive(procs) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert alive(procs) == set()


RAY_SWEEP = textwrap.dedent(
    """
    from trainfabric.runs import SweepSpec, expand
    from trainfabric.runs.executors import run_ray
    spec = SweepSpec(experiment="critical_path", seeds=8, base={"workload": "moe", "pods": 128})
    run_ray(expand(spec), None, lambda cell, table: print("done", flush=True), num_cpus=1)
    """
)


@pytest.mark.slow  # 2 s or more in the default run (make test-all runs it)
@pytest.mark.parametrize(
    ("signum", "code"),
    [
        (signal.SIGTERM, 143),  # SystemExit(128 + SIGTERM) after cleanup
        (signal.SIGINT, -signal.SIGINT),  # KeyboardInterrupt
    ],
)
def test_a_signal_shuts_a_local_ray_down(signum, code):
    driver = subprocess.Popen([sys.executable, "-c", RAY_SWEEP], stdout=subprocess.PIPE, text=True)
    try:
        assert driver.stdout.readline() == "done\n"
        procs = descendants(driver.pid)
        driver.send_signal(signum)
        assert driver.wait(timeout=60) == code
    finally:
        driver.kill()
        driver.wait()
    assert len(procs) >= 3
    deadline = time.monotonic() + 5
    while alive(procs) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert alive(procs) == set()


BAD_CELL = Cell(
    experiment="moe_skew",
    params={"experts": -1, "ep": 2, "gini": 0.2},
    seed=0,
    cell_id="badcell000000000",
    swept=(),
)


@pytest.mark.parametrize("executor", ["local", "ray"])
def test_worker_config_error_reaches_the_parent_as_one_line(executor, request):
    """A ConfigError raised in a spawned worker / Ray task keeps its field and names the cell
    (the worker re-validates the cell's params, which are bad here)."""
    if executor == "ray":
        request.getfixturevalue("ray_session")
    done = []
    with pytest.raises(ConfigError) as info:
        execute(executor, [BAD_CELL], lambda cell, table: done.append(cell))
    assert type(info.value) is ConfigError and info.value.field == "params.experts"
    assert "badcell000000000" in info.value.message and "\n" not in str(info.value)
    assert done == []
