"""The console script's end (:func:`trainfabric.cli.run`): the process ends without the
interpreter's teardown, yet the exit handlers run, both streams arrive whole, the exit codes
are :func:`~trainfabric.cli.main`'s, and a thread still running is waited for."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

PRELUDE = """
import atexit, sys, threading, time
from pathlib import Path
out = Path(sys.argv[1])
atexit.register(lambda: (out / "atexit").write_text("ran"))
"""


def _run(tmp_path, argv: list[str], extra: str = "") -> subprocess.CompletedProcess:
    code = (
        PRELUDE
        + textwrap.dedent(extra)
        + (f"sys.argv = ['trainfabric', *{argv!r}]\nfrom trainfabric.cli import run\nrun()\n")
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # buffered pipes
    return subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip


def test_help_arrives_whole_and_the_exit_handlers_run(tmp_path):
    proc = _run(tmp_path, ["--help"])
    assert proc.returncode == 0, proc.stderr
    assert "Usage" in proc.stdout and proc.stdout.rstrip().endswith("─╯")  # the last panel
    assert (tmp_path / "atexit").read_text() == "ran"


def test_json_left_in_the_buffer_is_flushed(tmp_path, strict_loads):
    """``--json`` writes one line to a block-buffered pipe and does not flush it itself."""
    proc = _run(tmp_path, ["workloads", "list", "--json"])
    assert proc.returncode == 0, proc.stderr
    assert strict_loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    ("argv", "code"),
    [(["ocs", "plan", "--rate-gbps", "nan"], 2), (["no-such-command"], 2), ([], 2)],
)
def test_exit_codes_are_mains(tmp_path, argv, code):
    proc = _run(tmp_path, argv)
    assert proc.returncode == code, proc.stderr
    assert (tmp_path / "atexit").read_text() == "ran"
    assert "Traceback" not in proc.stderr


def test_a_running_thread_is_waited_for(tmp_path):
    """A non-daemon thread still running at the end: the normal exit, which waits for it."""
    extra = """
    def late():
        time.sleep(3.0)  # past the import and the help
        (out / "thread").write_text("done")
    threading.Thread(target=late).start()
    """
    proc = _run(tmp_path, ["--help"], extra)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "thread").read_text() == "done"
    assert (tmp_path / "atexit").read_text() == "ran"
