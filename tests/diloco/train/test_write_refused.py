"""A full disk under a DiLoCo training run: the checkpoint being written is refused with one
WriteError naming it, the previous checkpoint stays intact and no temporary file is left; the
learner hands that error to the launcher, which ends the run with it instead of restarting
into the same full disk. The disk is simulated in-process (writes raise ENOSPC)."""

from __future__ import annotations

import builtins
import errno
import os
from types import SimpleNamespace

import pytest
import torch

from trainfabric.diloco.train import checkpoint, learner
from trainfabric.diloco.train.launch import TrainingRun
from trainfabric.errors import WriteError

from .conftest import tiny_config

NO_SPACE = os.strerror(errno.ENOSPC)


class _FullDisk:
    """A file opened for writing on a disk with ``room`` bytes left: the write that would
    pass them raises ENOSPC (torch's zip writer then fails again closing the archive)."""

    def __init__(self, fh, room: int):
        self.fh, self.room = fh, room

    def write(self, data) -> int:
        if len(data) > self.room:
            raise OSError(errno.ENOSPC, NO_SPACE)
        self.room -= len(data)
        return self.fh.write(data)

    def flush(self) -> None:
        self.fh.flush()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.fh.close()


def _fill_disk(monkeypatch, room: int) -> None:
    """Every file the checkpoint writer opens from now on has ``room`` bytes of disk."""

    def full_open(file, mode="r", *args, **kwargs):
        return _FullDisk(builtins.open(file, mode, *args, **kwargs), room)

    monkeypatch.setattr(checkpoint, "open", full_open, raising=False)


@pytest.mark.parametrize("room", [0, 4096], ids=["at-once", "midway"])
def test_full_disk_keeps_the_previous_checkpoint_and_names_the_new_one(tmp_path, monkeypatch, room):
    checkpoint.save(tmp_path, 0, 5, {"s": 5})
    _fill_disk(monkeypatch, room)
    with pytest.raises(WriteError) as info:
        checkpoint.save(tmp_path, 0, 10, {"s": 10, "w": torch.zeros(10_000)})
    target = checkpoint.path(tmp_path, 0, 10)
    assert str(info.value) == f"cannot write {target}: {NO_SPACE}"
    assert [p.name for p in tmp_path.iterdir()] == ["rank0-step5.pt"]  # no temporary file
    monkeypatch.undo()
    assert checkpoint.steps(tmp_path) == {0: [5]}
    assert checkpoint.load(tmp_path, 0, 5) == {"s": 5}


def test_a_learners_refused_write_goes_to_the_launcher_without_a_traceback():
    refused = WriteError("/run/ckpt/rank1-step10.pt", NO_SPACE)
    errors = SimpleNamespace(items=[], put=lambda e: errors.items.append(e))
    with pytest.raises(SystemExit) as info:
        learner.hand_over(refused, errors, wait_s=0.0)
    assert info.value.code == 1 and errors.items == [refused]


def test_launcher_ends_the_run_with_a_learners_refused_write(tmp_path):
    """No restart into the same full disk: the run's error is the learner's WriteError."""
    run = TrainingRun(tiny_config(max_restarts=3), tmp_path)
    run.conn = SimpleNamespace(poll=lambda timeout: False)
    run.procs = [SimpleNamespace(exitcode=None), SimpleNamespace(exitcode=None)]  # waiting
    run.errors.put(WriteError(str(tmp_path / "ckpt" / "rank1-step10.pt"), NO_SPACE))
    with pytest.raises(WriteError, match="rank1-step10.pt: No space left on device"):
        run._tick()
    assert run.restarts == []
