"""Per-learner checkpoints: ``ckpt/rank<r>-step<s>.pt`` written atomically (a temporary file
in the same directory, fsync, rename), the last :data:`KEEP` kept. A group resumes from the
latest step for which *every* learner has a complete checkpoint."""

from __future__ import annotations

import os
import re
from pathlib import Path

import torch

KEEP = 2
_NAME = re.compile(r"rank(\d+)-step(\d+)\.pt$")


def path(ckpt_dir: Path, rank: int, step: int) -> Path:
    return ckpt_dir / f"rank{rank}-step{step}.pt"


def save(ckpt_dir: Path, rank: int, step: int, state: dict) -> Path:
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    final = path(ckpt_dir, rank, step)
    tmp = final.with_suffix(f".tmp{os.getpid()}")
    with open(tmp, "wb") as fh:
        torch.save(state, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, final)
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
