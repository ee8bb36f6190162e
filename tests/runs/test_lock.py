"""The run-directory lock: one writer at a time, a second one refused naming the holder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from trainfabric.errors import ConfigError
from trainfabric.runs import RunDir, run_sweep

HOLDER = textwrap.dedent(
    """
    import sys, time
    from trainfabric.runs import RunDir
    with RunDir(sys.argv[1]).lock():
        print("locked", flush=True)
        time.sleep(60)
    """
)
SWEEP = 'experiment = "moe_skew"\nseeds = 1\n[base]\nexperts = 8\nep = 2\n'


def test_second_writer_in_process_is_refused_before_computing(tmp_path, small_spec):
    run = RunDir(tmp_path / "run")
    with run.lock():
        assert run.lock_path.read_text() == f"{os.getpid()}\n"
        with pytest.raises(ConfigError) as info:
            run_sweep(small_spec, run.path, executor="serial", progress=False)
    assert info.value.field == "--out"
    assert str(info.value) == (
        f"--out: run directory {run.path} is locked by PID {os.getpid()} "
        "(another run is writing it)"
    )
    assert sorted(p.name for p in run.path.iterdir()) == [".lock"]  # nothing computed
    result = run_sweep(small_spec, run.path, executor="serial", progress=False)  # released
    assert len(result.computed) == 8


@pytest.mark.slow  # 2 s or more in the default run (make test-all runs it)
def test_second_writer_process_exits_2_naming_the_pid(tmp_path):
    run_dir = tmp_path / "run"
    sweep = tmp_path / "s.toml"
    sweep.write_text(SWEEP)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(run_dir)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline() == "locked\n"
        refused = subprocess.run(
            [sys.executable, "-m", "trainfabric.cli", "sweep", str(sweep), "--out", str(run_dir)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert refused.returncode == 2, refused.stderr
        lines = refused.stderr.splitlines()
        assert len(lines) == 1 and "--out" in lines[0]
        assert f"locked by PID {holder.pid} (another run is writing it)" in lines[0]
        assert not (run_dir / "manifest.json").exists()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
    with RunDir(run_dir).lock():  # the kernel released the killed holder's lock
        pass


def test_single_run_keeps_to_its_own_directory(tmp_path):
    """A single run may redo itself in place but never writes into another run's directory
    (whose tables would end up in its report)."""
    from trainfabric.runs.store import now, write_run_manifest

    run = tmp_path / "run"
    with RunDir(run).single_run("fabric-flaps"):
        write_run_manifest(run, "fabric-flaps", "flaps", {}, [0], now())
    with RunDir(run).single_run("fabric-flaps"):
        pass
    with (
        pytest.raises(ConfigError, match="holds run 'fabric-flaps', not 'diloco-protocol'"),
        RunDir(run).single_run("diloco-protocol"),
    ):
        pass
    stranger = tmp_path / "stranger"
    stranger.mkdir()
    (stranger / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="no run manifest"), RunDir(stranger).single_run("x"):
        pass
