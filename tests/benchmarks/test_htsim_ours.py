"""Our side of the whole-process pairs against htsim (benchmarks/_htsim_ours.py): the process
prints the same completions as the engine called in-process, and its environment turns
Python's bytecode cache on in a folder of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import _htsim as H  # noqa: E402


@pytest.mark.slow  # 2 s or more in the default run (make test-all runs it)
def test_our_process_prints_the_engines_completions(tmp_path):
    """A chained ring (dependencies: the 8-host warm-up is the ring shape too) run as a
    process: exit 0, one line per flow with the in-process
    engine's start and htsim-definition finish, then the timing line."""
    sc = H.ring_chains(8, 1, 3, 8000, seed=1)
    cm = H.write_cm(sc, tmp_path / "ring.cm")
    env = H.bytecode_cache_env(tmp_path / "pycache")
    out = subprocess.run(
        H.ours_command(cm, "packet", "spray"), env=env, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-800:]
    start, finish, wall, load = H.parse_ours(out.stdout, sc)
    want_start, want_finish, *_ = H.packet_completions(sc, "spray", 0)
    np.testing.assert_allclose(start, want_start, rtol=0, atol=1e-12)
    np.testing.assert_allclose(finish, want_finish, rtol=0, atol=1e-12)
    assert wall > 0 and load > 0
    assert out.stdout.splitlines()[-1].startswith("engine_only_wall_s ")
    assert any((tmp_path / "pycache").rglob("*.pyc"))  # the bytecode cache was written there


def test_bytecode_cache_env(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    env = H.bytecode_cache_env(tmp_path)
    assert "PYTHONDONTWRITEBYTECODE" not in env
    assert env["PYTHONPYCACHEPREFIX"] == str(tmp_path)
    assert env["PATH"] == os.environ["PATH"]
