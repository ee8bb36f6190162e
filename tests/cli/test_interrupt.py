"""Ctrl-C (SIGINT) on a long command: exit 130 and one line on stderr, never exit 0."""

import signal
import subprocess
import sys
import time

from proctable import sigint_default


def test_sigint_exits_130_with_one_line(tmp_path):
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
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert err.strip().startswith("interrupted") and len(err.strip().splitlines()) == 1
    assert out == ""
