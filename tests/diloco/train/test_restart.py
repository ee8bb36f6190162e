"""A learner killed with SIGKILL: the group restarts from the last common checkpoint, loses
at most ``checkpoint_every`` steps, and the run completes (to the same parameters as an
uninterrupted run: data order and RNG state are in the checkpoint)."""

import itertools
import os
import signal

import pytest
import torch

from trainfabric.diloco.train.controller import FixedH
from trainfabric.diloco.train.launch import start, train

from .conftest import tiny_config


class KillOnce(FixedH):
    """Fixed-H controller that SIGKILLs learner 1 once rank 0 reaches ``at`` steps."""

    def __init__(self, H, at):
        super().__init__(H)
        self.at, self.run, self.killed_at, self.seen = at, None, None, []

    def decide(self, progress):
        self.seen.append(progress.checkpoint_s)
        if self.killed_at is None and progress.step >= self.at and self.run is not None:
            self.killed_at = progress.step
            os.kill(self.run.pids()[1], signal.SIGKILL)
        return super().decide(progress)


CFG = dict(steps=40, H=4, checkpoint_every=5, inner="adamw", max_restarts=2)


@pytest.mark.slow  # over 5 s in the default run (make test-all runs it)
def test_killed_learner_resumes_from_checkpoint(tmp_path):
    cfg = tiny_config(**CFG)
    ctl = KillOnce(cfg.H, at=23)
    run = start(cfg, tmp_path, ctl)
    ctl.run = run
    res = run.wait()
    assert ctl.killed_at == 23
    assert len(res.restarts) == 1
    r = res.restarts[0]
    assert r["failed_rank"] == 1 and r["exitcode"] == -signal.SIGKILL
    assert r["resumed_from"] == 20  # last multiple of checkpoint_every before the kill
    assert 0 <= r["step_at_failure"] - r["resumed_from"] <= cfg.checkpoint_every
    assert res.steps == cfg.steps and res.syncs == cfg.steps // cfg.H
    steps = __import__("pandas").read_parquet(tmp_path / "steps.parquet")
    assert sorted(steps[steps["rank"] == 1]["step"]) == list(range(1, cfg.steps + 1))
    assert set(steps[steps["step"] > 20]["attempt"]) == {1}
    # the checkpoint signal's clock: cumulative seconds writing checkpoints, never decreasing
    assert ctl.seen[0] == 0.0 and all(b >= a for a, b in itertools.pairwise(ctl.seen))
    assert 0 < ctl.seen[-1] <= res.checkpoint_s < res.wall_s


@pytest.mark.slow
def test_resumed_run_equals_uninterrupted(tmp_path):
    cfg = tiny_config(**CFG)
    ctl = KillOnce(cfg.H, at=23)
    run = start(cfg, tmp_path / "killed", ctl)
    ctl.run = run
    run.wait()
    train(cfg, tmp_path / "clean")
    for r in range(2):
        a = torch.load(tmp_path / "killed" / f"final-rank{r}.pt")
        b = torch.load(tmp_path / "clean" / f"final-rank{r}.pt")
        assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
