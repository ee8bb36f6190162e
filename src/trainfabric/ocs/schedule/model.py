"""Circuit schedules with reconfiguration delay (docs/ocs.md §1.9 B, the Spectra problem).

Problem. One demand matrix ``D`` (bytes, ``n x n``, directed, zero diagonal) must be carried by
``s`` parallel optical circuit switches. Each switch is a crossbar: in one *configuration*
port ``u`` sends to at most one port and receives from at most one (a partial matching,
stored as ``perm[u] = v`` or ``-1``). A circuit carries ``rate_Bps`` bytes/s. Before **every**
configuration, the first included, the switch is dark for the reconfiguration delay
``delay_s`` (the convention of Eclipse and Spectra). A switch's makespan is therefore
``Σ_j (δ + φ_j)`` over its configurations and the schedule's makespan is the largest switch
makespan. A schedule *covers* ``D`` when ``Σ_{j: perm_j[u]=v} φ_j · B ≥ D_uv`` for every pair.

:class:`Schedule` stores, per switch, the configurations with explicit start times, so
:func:`check_schedule` can verify the delay instead of assuming it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Relative tolerance of the coverage and timing checks (LP durations are exact to ~1e-9).
CHECK_RTOL = 1e-9


class InvalidScheduleError(ValueError):
    """A schedule violates coverage, port exclusivity or the reconfiguration delay."""


@dataclass(frozen=True)
class Slot:
    """One configuration on one switch: the matching ``perm`` is up on ``[start_s, start_s +
    duration_s)`` after a dark reconfiguration interval of at least δ before ``start_s``."""

    perm: np.ndarray
    start_s: float
    duration_s: float


@dataclass(frozen=True)
class Schedule:
    """Per switch, its configurations in time order; ``delay_s`` and ``rate_Bps`` as above."""

    n: int
    delay_s: float
    rate_Bps: float
    switches: tuple[tuple[Slot, ...], ...]

    @property
    def configurations(self) -> int:
        """Number of configurations over all switches (each pays one δ)."""
        return sum(len(sw) for sw in self.switches)

    @property
    def makespan_s(self) -> float:
        """Largest end time over all switches (0 for an empty schedule)."""
        ends = [sw[-1].start_s + sw[-1].duration_s for sw in self.switches if sw]
        return max(ends, default=0.0)


def sequential(
    n: int, delay_s: float, rate_Bps: float, per_switch: list[list[tuple[np.ndarray, float]]]
) -> Schedule:
    """The schedule that runs each switch's ``(perm, duration_s)`` list back to back, every
    configuration preceded by exactly δ of reconfiguration (zero-duration entries dropped)."""
    switches = []
    for configs in per_switch:
        t, slots = 0.0, []
        for perm, dur in configs:
            if dur <= 0:
                continue
            slots.append(Slot(np.asarray(perm, dtype=np.int64), t + delay_s, float(dur)))
            t += delay_s + float(dur)
        switches.append(tuple(slots))
    return Schedule(n, delay_s, rate_Bps, tuple(switches))


def served_bytes(schedule: Schedule) -> np.ndarray:
    """``S_uv = Σ_{slots with perm[u]=v} duration · B`` (bytes)."""
    served = np.zeros((schedule.n, schedule.n))
    rows = np.arange(schedule.n)
    for sw in schedule.switches:
        for slot in sw:
            on = slot.perm >= 0
            served[rows[on], slot.perm[on]] += slot.duration_s * schedule.rate_Bps
    return served


def check_schedule(demand: np.ndarray, schedule: Schedule) -> float:
    """Verify ``schedule`` against ``demand`` and return its makespan (s).

    Checks: every slot's ``perm`` is a partial matching of the ``n`` ports without self-loops
    (per-port exclusivity: each port sends to ≤ 1 and receives from ≤ 1 port per
    configuration); durations are finite and ≥ 0; on every switch the first slot starts at
    ≥ δ and each later one at ≥ the previous end + δ; and ``served_bytes ≥ D`` entry-wise up
    to ``CHECK_RTOL`` of ``max D``. Raises :class:`InvalidScheduleError` naming the violation.
    """
    d = np.asarray(demand, dtype=float)
    n = schedule.n
    if d.shape != (n, n):
        raise InvalidScheduleError(f"demand shape {d.shape} != ({n}, {n})")
    slack = CHECK_RTOL * max(schedule.makespan_s, schedule.delay_s, 1e-300)
    for k, sw in enumerate(schedule.switches):
        free_at = 0.0
        for j, slot in enumerate(sw):
            _check_matching(slot.perm, n, f"switch {k} slot {j}")
            if not (np.isfinite(slot.duration_s) and slot.duration_s >= 0):
                raise InvalidScheduleError(f"switch {k} slot {j}: bad duration {slot.duration_s}")
            if slot.start_s < free_at + schedule.delay_s - slack:
                raise InvalidScheduleError(
                    f"switch {k} slot {j}: starts {slot.start_s:.3e} s, before the previous end "
                    f"{free_at:.3e} s + delay {schedule.delay_s:.3e} s"
                )
            free_at = slot.start_s + slot.duration_s
    short = d - served_bytes(schedule)
    worst = float(short.max(initial=0.0))
    if worst > CHECK_RTOL * max(float(d.max(initial=0.0)), 1e-300):
        u, v = np.unravel_index(int(np.argmax(short)), short.shape)
        raise InvalidScheduleError(f"pair ({u}, {v}) short of {worst:.6g} bytes")
    return schedule.makespan_s


def _check_matching(perm: np.ndarray, n: int, where: str) -> None:
    if perm.shape != (n,):
        raise InvalidScheduleError(f"{where}: perm has shape {perm.shape}, expected ({n},)")
    on = perm >= 0
    if np.any(perm < -1) or np.any(perm >= n):
        raise InvalidScheduleError(f"{where}: port index out of range")
    if np.any(perm[on] == np.flatnonzero(on)):
        raise InvalidScheduleError(f"{where}: a port is connected to itself")
    if np.unique(perm[on]).size != int(on.sum()):
        raise InvalidScheduleError(f"{where}: a port receives from two ports (not a matching)")
