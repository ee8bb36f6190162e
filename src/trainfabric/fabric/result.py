"""What every engine's result answers: :class:`EngineResult`, the base of the flow engine's
:class:`~trainfabric.fabric.flow.engine.SimResult`, its calibrated
:class:`~trainfabric.fabric.flow.calibration.CalibratedResult`, the task engine's
:class:`~trainfabric.fabric.tasks.engine.TaskResult` and the packet engine's
:class:`~trainfabric.fabric.packet.result.PacketResult`.

A run of ``F`` flows (tasks, for the task engine) has ``start_s[F]`` and ``finish_s[F]`` in
seconds, ``nan`` where a flow never finished, and ``n_events`` events simulated in ``wall_s``
seconds of wall-clock time. From those:

* ``unfinished = #{f : finish_s[f] = nan}``;
* ``makespan_s = max_f finish_s[f]`` over the finished flows, ``0.0`` for a run of no flow;
  when no flow finished it is ``nan`` on the fluid engines and ``0.0`` on the packet engine
  (:meth:`EngineResult._has_makespan`);
* :meth:`EngineResult.packet_metrics`: the packet engine's per-run figures, ``{}`` on the
  fluid engines (which have no packets), so callers ask every result alike.
"""

from __future__ import annotations

import numpy as np


class EngineResult:
    """Mixin of the engines' frozen result dataclasses (module doc); they hold the fields
    named below (or, for the calibrated result, delegate them to the raw one)."""

    start_s: np.ndarray
    finish_s: np.ndarray
    n_events: int
    wall_s: float

    @property
    def unfinished(self) -> int:
        """Flows never finished: the ``nan`` entries of ``finish_s``."""
        return int(np.isnan(self.finish_s).sum())

    @property
    def makespan_s(self) -> float:
        """``max_f finish_s[f]`` over the finished flows (seconds); ``0.0`` where
        :meth:`_has_makespan` says the run has none to take."""
        return float(np.nanmax(self.finish_s)) if self._has_makespan() else 0.0

    def _has_makespan(self) -> bool:
        """Whether ``makespan_s`` takes the maximum: the fluid engines take it whenever there
        are flows, so a run in which none finished has a ``nan`` makespan."""
        return bool(self.finish_s.size)

    def packet_metrics(self) -> dict:
        """The packet engine's per-run figures (latency percentiles, losses, queues); ``{}``
        for an engine without packets."""
        return {}
