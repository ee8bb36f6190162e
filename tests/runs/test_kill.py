"""A killed or interrupted sweep leaves no worker behind and loses no finished cell.

The sweeps run in subprocesses on the local executor (2 spawned workers) over cells of the
built-in ``critical_path`` experiment that take about a second each once warm. Processes are
tracked by scanning ``/proc`` for the sweep's children (pid and start time, so that a reused
pid is never mistaken for a survivor; zombies count as gone).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pandas as pd
import pytest
from proctable import Proc, alive, children, cmdline, sigint_default

from trainfabric.runs import RunDir, SweepSpec, expand, run_sweep

SPEC = SweepSpec(experiment="critical_path", seeds=4, base={"workload": "moe", "pods": 192})
SWEEP_TOML = 'experiment = "critical_path"\nseeds = 4\n[base]\nworkload = "moe"\npods = 192\n'
RUNNER = textwrap.dedent(
    """
    import sys
    from trainfabric.runs import SweepSpec, run_sweep
    spec = SweepSpec.model_validate_json(sys.argv[1])
    run_sweep(spec, sys.argv[2], executor="local", workers=2, progress=False)
    """
)


def _workers(pid: int) -> set[Proc]:
    """The pool workers among ``pid``'s children (multiprocessing's spawn entry point; the
    resource tracker, also a child, is not one)."""
    return {proc for proc in children(pid) if b"spawn_main" in cmdline(proc[0])}


def _wait_for(predicate, timeout_s: float, what: str):
    """The first truthy value of ``predicate()`` (polled every 0.1 s) within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def _first_cell_and_workers(proc: subprocess.Popen, run: RunDir) -> set[tuple[int, int]]:
    """Wait until one cell is stored and both workers run; return the sweep's children."""
    _wait_for(lambda: run.finished_ids() or proc.poll() is not None, 90, "a finished cell")
    assert proc.poll() is None, "the sweep ended before it could be interrupted"
    workers = _wait_for(lambda: len(_workers(proc.pid)) == 2 and _workers(proc.pid), 30, "workers")
    assert len(run.finished_ids()) < len(expand(SPEC)), "all cells finished: cells too fast"
    return workers | children(proc.pid)


@pytest.mark.slow  # over 5 s in the default run (make test-all runs it)
def test_sigkill_leaves_no_worker_and_resume_recomputes_nothing(tmp_path):
    run = RunDir(tmp_path / "run")
    proc = subprocess.Popen(
        [sys.executable, "-c", RUNNER, SPEC.model_dump_json(), str(run.path)],
        stderr=subprocess.PIPE,
    )
    try:
        children = _first_cell_and_workers(proc, run)
    finally:
        proc.kill()
        proc.wait(timeout=10)
    _wait_for(lambda: not alive(children), 5, "the killed sweep's processes to end")
    finished = run.finished_ids()
    mtimes = {p.name: p.stat().st_mtime_ns for p in run.cells_dir.iterdir() if p.stem in finished}
    again = run_sweep(SPEC, run.path, executor="serial", progress=False)
    assert set(again.skipped) == finished and len(again.computed) == 4 - len(finished)
    kept = {p.name: p.stat().st_mtime_ns for p in run.cells_dir.iterdir() if p.stem in finished}
    assert kept == mtimes  # the finished cells' files were not rewritten
    assert not list(run.path.rglob("*.tmp"))  # a write cut short by the kill was cleaned up
    manifest = run.read_manifest()
    assert (manifest["computed"], manifest["skipped"]) == (4 - len(finished), len(finished))


@pytest.mark.slow  # 2 s or more in the default run (make test-all runs it)
def test_sigint_exits_130_with_one_line_and_stops_workers(tmp_path):
    sweep = tmp_path / "kill.toml"
    sweep.write_text(SWEEP_TOML)
    run = RunDir(tmp_path / "run")
    command = [sys.executable, "-m", "trainfabric.cli", "sweep", str(sweep)]
    command += ["--out", str(run.path), "--workers", "2", "--json"]
    proc = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=sigint_default,
    )
    try:
        children = _first_cell_and_workers(proc, run)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, err
    lines = err.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("interrupted"), lines
    assert out == b""
    # the workers are reaped before the exit; multiprocessing's resource tracker ends on EOF
    _wait_for(lambda: not alive(children), 5, f"the sweep's processes to end: {children}")
    finished = run.finished_ids()
    assert finished and finished < {c.cell_id for c in expand(SPEC)}
    for cell_id in finished:
        assert len(pd.read_parquet(run.cell_path(cell_id))) > 0
