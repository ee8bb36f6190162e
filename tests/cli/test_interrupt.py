"""Ctrl-C (SIGINT) or SIGTERM on a long command: exit 130 / 143 and one line on stderr, never
exit 0."""

import signal
import subprocess
import sys
import time

import pytest
from proctable import sigint_default


@pytest.mark.parametrize(
    ("signum", "code", "line"),
    [
        (signal.SIGINT, 130, "interrupted: files already written are kept"),
        (signal.SIGTERM, 143, "terminated (SIGTERM): files already written are kept"),
    ],
)
def test_a_signal_exits_with_one_line(tmp_path, signum, code, line):
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainfabric.cli", "fabric", "eval", "--quick", "--json"]
        + ["--out", str(tmp_path / "eval")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=sigint_default,
    )
    lock = tmp_path / "eval" / ".lock"  # taken by the command itself, after the imports
    deadline = time.monotonic() + 60
    while not lock.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)  # into the first scenario (of minutes)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err
    assert err.strip().startswith(line) and len(err.strip().splitlines()) == 1
    assert out == ""
