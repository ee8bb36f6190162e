"""The size-guard module: the limit in force, the refusal message, the context's scope."""

import pytest

from trainfabric import limits
from trainfabric.errors import ConfigError


def test_refusal_names_field_estimate_and_limit():
    with limits.memory_limit(2.0), pytest.raises(ConfigError) as exc:
        limits.check_memory("pods", 3.5e9, "a 1,000-pod matrix")
    assert exc.value.field == "pods"
    assert "a 1,000-pod matrix needs about 3.5 GB" in exc.value.message
    assert "limit of 2 GB (--max-memory-gb)" in exc.value.message


def test_estimate_at_the_limit_passes_and_nan_is_refused():
    with limits.memory_limit(1.0):
        limits.check_memory("pods", 1e9, "exactly the limit")
        with pytest.raises(ConfigError):
            limits.check_memory("pods", float("nan"), "an estimate that overflowed")


def test_memory_limit_is_scoped_and_defaults_to_available_memory():
    with limits.memory_limit(0.5):
        assert limits.memory_limit_bytes() == 0.5e9
        with limits.memory_limit(None):  # what is free (it moves a little between reads)
            free = limits.available_memory_bytes()
            assert 0.8 * free <= limits.memory_limit_bytes() <= 1.25 * free
        assert limits.memory_limit_bytes() == 0.5e9
    assert limits.memory_limit_bytes() != 0.5e9
    assert limits.available_memory_bytes() > 0


def test_worker_share_hands_each_child_process_its_part(monkeypatch):
    """A sweep's workers inherit limit / workers, so together they stay within the limit."""
    import os
    import subprocess
    import sys

    monkeypatch.delenv(limits.ENV, raising=False)
    probe = "from trainfabric import limits; print(limits.memory_limit_bytes())"
    with limits.memory_limit(8.0), limits.worker_share(4):
        child = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert float(child.stdout) == 2e9
    assert limits.ENV not in os.environ
