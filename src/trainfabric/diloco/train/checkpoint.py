"""Per-learner checkpoints: ``ckpt/rank<r>-step<s>.pt`` written atomically
(:func:`trainfabric.io.atomic_write`: a temporary file in the same directory, fsync, rename,
fsync of the directory), the last :data:`KEEP` kept. A group resumes from the latest step for
which *every* learner has a complete checkpoint.

A write the machine refuses (a full disk, a read-only directory) raises a
:class:`~trainfabric.errors.WriteError` naming the checkpoint; the temporary file is removed
and the checkpoints already on disk are left as they were (older ones are pruned only after
the new one is in place)."""

from __future__ import annotations

import re
from pathlib import Path

import torch

from trainfabric.errors import cause_of
from trainfabric.io import atomic_write, writing

KEEP = 2
_NAME = re.compile(r"rank(\d+)-step(\d+)\.pt$")


def path(ckpt_dir: Path, rank: int, step: int) -> Path:
    return ckpt_dir / f"rank{rank}-step{step}.pt"


def write(target: Path, obj: object) -> Path:
    """``torch.save(obj)`` to ``target`` atomically; a refused write is a WriteError naming
    ``target``, with any previous ``target`` left as it was."""

    def dump(tmp: Path) -> None:
        # Through a Python file, whose full disk is an OSError (ENOSPC); torch's own file
        # writer words it as a RuntimeError ("unexpected pos"). Closing the zip archive
        # after a failed write raises such a RuntimeError too, the OSError as its context.
        try:
            with open(tmp, "wb") as fh:
                torch.save(obj, fh)
        except RuntimeError as exc:
            cause = cause_of(exc, OSError)
            if cause is None:
                raise
            raise cause from None

    return atomic_write(target, dump)


def save(ckpt_dir: Path, rank: int, step: int, state: dict) -> Path:
    """Write ``state`` as rank ``rank``'s checkpoint of ``step``, then prune older ones."""
    final = write(path(ckpt_dir, rank, step), state)
    with writing(ckpt_dir):
        for old in sorted(steps(ckpt_dir).get(rank, []))[:-KEEP]:
            path(ckpt_dir, rank, old).unlink(missing_ok=True)
    return final


def steps(ckpt_dir: Path) -> dict[int, list[int]]:
    """Complete checkpoints on disk: rank -> steps."""
    out: dict[int, list[int]] = {}
    for f in ckpt_dir.glob("rank*-step*.pt") if ckpt_dir.is_dir() else []:
        m = _NAME.search(f.name)
        if m:
            out.setdefault(int(m.group(1)), []).append(int(m.group(2)))
    return out


def common_step(ckpt_dir: Path, world: int) -> int | None:
    """The latest step every one of ``world`` learners has a checkpoint of (None: none)."""
    found = steps(ckpt_dir)
    sets = [set(found.get(r, [])) for r in range(world)]
    both = set.intersection(*sets) if sets else set()
    return max(both) if both else None


def load(ckpt_dir: Path, rank: int, step: int, device: torch.device | str = "cpu") -> dict:
    return torch.load(path(ckpt_dir, rank, step), map_location=device, weights_only=False)
