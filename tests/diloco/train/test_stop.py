"""Stopping from outside: ``run.stop()`` ends training at the next control point, then the
final sync (the learners' last inner steps reach the global model) and the final eval."""

import time

import pytest

from trainfabric.diloco.train.controller import Never
from trainfabric.diloco.train.launch import start

from .conftest import tiny_config


@pytest.mark.slow  # 2 s or more in the default run (make test-all runs it)
def test_stop_from_outside_with_final_sync(tmp_path):
    cfg = tiny_config(steps=10**6, H=10**6, control_window_s=0.0)
    run = start(cfg, tmp_path, Never())
    deadline = time.monotonic() + 300
    while run.step() < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    run.stop()
    res = run.wait()
    assert 5 <= res.steps < 10**6
    assert res.syncs == 1  # Never synced; the final sync only
    assert res.tokens == res.steps * cfg.batch * cfg.model.context * cfg.learners
    assert res.eval_loss > 0
