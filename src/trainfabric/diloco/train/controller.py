"""The sync-decision hook (no torch here).

Learner rank 0 reaches a *control point* after every inner step. When ``control_window_s``
seconds of wall clock have passed since the last consultation (0: at every control point), the
launcher's controller is asked ``decide(progress) -> bool`` in the parent process (the
launcher's supervisor thread) and rank 0 broadcasts the answer, so all learners sync at the same
inner step. Between consultations the learners do not sync. A controller may be any object
with a ``decide(Progress) -> bool`` method; :class:`FixedH` (sync every ``H`` inner steps) is
the default so that training runs standalone.

With Streaming DiLoCo a *fragment gate* (:class:`FragmentGate`) decides per fragment: at
each fragment's due step, sync now or defer (the fragment stays due and is offered again
after the next step). :class:`Open` is the fixed schedule, :class:`Scripted` a given
deferral pattern (``StreamingConfig.defer``), :class:`ScoreGate` the WA-DiLoCo score per
fragment.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol


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


# ---- fragment gates (Streaming DiLoCo) -----------------------------------------------------
@dataclass(frozen=True)
class FragmentDue:
    """A fragment due for its outer sync after inner step ``step``: ``h`` inner steps since
    its last sync started, ``overdue`` steps since it first became due (0 at its scheduled
    step; more after deferrals)."""

    fragment: int
    step: int
    h: int
    overdue: int


class FragmentGate(Protocol):
    """Decides, for every fragment due, sync now (True) or defer (False). A deferred fragment
    stays due: it is offered again after every following inner step until the gate opens
    (:class:`~trainfabric.diloco.train.streaming.Streamer`), so a deferral moves its sync,
    never drops it."""

    def open(self, due: FragmentDue) -> bool: ...


class Open:
    """Every due fragment syncs at its scheduled step (Streaming DiLoCo's fixed schedule)."""

    def open(self, due: FragmentDue) -> bool:
        return True


class Scripted:
    """Defers fragment ``p`` after step ``t`` exactly when ``(p, t)`` is in ``defer``."""

    def __init__(self, defer: Iterable[tuple[int, int]]):
        self.defer = frozenset((int(p), int(t)) for p, t in defer)

    def open(self, due: FragmentDue) -> bool:
        return (due.fragment, due.step) not in self.defer


class ScoreGate:
    """The WA-DiLoCo score controller per fragment: ``policy`` (a
    :class:`~trainfabric.diloco.policies.Policy`, e.g. ``make_policy("wa_forecast")``) decides
    on the observation ``observe(due)`` returns (the fields of
    :data:`~trainfabric.diloco.policies.FIELDS` but ``h``, which is ``due.h``: the
    fragment's tokens, loss delta and staleness, the run's pressures), with its guards on
    ``due.h``: never below ``min_h``, forced at ``max_h``; ``max_overdue`` (steps) forces a
    sync deferred that long, so a fragment is never more than one schedule period late."""

    def __init__(self, policy, observe: Callable[[FragmentDue], dict], max_overdue: int):
        if max_overdue < 0:
            raise ValueError(f"max_overdue must be >= 0, got {max_overdue}")
        self.policy, self.observe, self.max_overdue = policy, observe, max_overdue

    def open(self, due: FragmentDue) -> bool:
        from trainfabric.diloco.policies import Observation

        if due.overdue >= self.max_overdue:
            return True
        fields = self.observe(due) | {"h": due.h}
        obs = Observation.of(due.step, **{k: [v] for k, v in fields.items()})
        return bool(self.policy.decide(obs)[0])
