"""The sync-decision hook (no torch here).

Learner rank 0 reaches a *control point* after every inner step. When ``control_window_s``
seconds of wall clock have passed since the last consultation (0: at every control point), the
launcher's controller is asked ``decide(progress) -> bool`` in the parent process (the
launcher's supervisor thread) and rank 0 broadcasts the answer, so all learners sync at the same
inner step. Between consultations the learners do not sync. A controller may be any object
with a ``decide(Progress) -> bool`` method; :class:`FixedH` (sync every ``H`` inner steps) is
the default so that training runs standalone.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Progress:
    """What the learners report at a control point (rank 0's view; all learners step in
    lockstep, so ``step`` and ``h`` are every learner's).

    ``tokens_since_sync`` counts all learners' tokens; ``loss`` is rank 0's EWMA (α 0.1) of
    its training loss (nats/byte) now and ``loss_at_sync`` the same at the last sync end;
    ``wall_s`` is seconds since training started; ``since_sync_s`` since the last sync ended.
    The launcher adds, at the moment it asks the controller: ``checkpointing`` (any learner
    writing a checkpoint now; at a control point, in lockstep, usually False),
    ``checkpoint_s`` (cumulative seconds spent writing checkpoints: the ``checkpoint`` signal
    of a window is its increase over the window's length), ``link_bytes`` (per learner, the
    cumulative bytes (sent, received) on its veth, read from the interface counters, None
    when unshaped), ``link_time`` (unix seconds of that reading) and ``link_rate_bps`` (the
    shaped rate, bit/s), from which ``network`` = utilisation between two readings
    (:func:`trainfabric.diloco.train.netns.utilisation`).
    """

    step: int
    h: int
    tokens: int
    tokens_since_sync: int
    loss: float
    loss_at_sync: float
    syncs: int
    wall_s: float
    since_sync_s: float
    last_sync_s: float
    checkpointing: bool = False
    checkpoint_s: float = 0.0
    link_bytes: tuple[tuple[int, int], ...] | None = None
    link_time: float = 0.0
    link_rate_bps: float | None = None

    @property
    def loss_delta(self) -> float:
        """Loss improvement since the last sync (positive: better)."""
        return self.loss_at_sync - self.loss


class FixedH:
    """Sync when ``h >= H`` inner steps have run since the last sync."""

    def __init__(self, H: int):
        self.H = H

    def decide(self, progress: Progress) -> bool:
        return progress.h >= self.H


class Never:
    """Never sync (the no-sync baseline; learners train independently)."""

    def decide(self, progress: Progress) -> bool:
        return False
