"""The task engine's loop arguments, by name (the driver builds them, the loop reads them).

:mod:`.engine` builds these per call of :func:`~trainfabric.fabric.tasks.loop.run_loop`; a
``NamedTuple`` is a plain tuple to numba (a field is resolved at compile time), so the names
cost nothing at run time. Arrays are per task (``[n]``), per flow of the graph, per
connection, per route row or per link as stated; times in seconds, bits and bits/s.
The slot arrays ``si`` and ``sf`` (a row per field, a column per flow in flight) and the
integer counters ``ic`` stay arrays indexed by the loop's named constants (``sf[REM, f]``,
``ic[HSIZE]``): the loop grows the one and writes the other in place.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class GraphArrays(NamedTuple):
    """The task graph (:class:`~trainfabric.fabric.tasks.graph.TaskGraph`) as arrays."""

    kind: np.ndarray  # [n] task kind (TIMER, COMM, BARRIER)
    duration_s: np.ndarray  # [n] a timer's duration
    latency_s: np.ndarray  # [n] delay before a released task starts
    succ_ptr: np.ndarray  # [n + 1] CSR of successors
    succ: np.ndarray
    flow_set: np.ndarray  # [n] the flow set of a comm task (-1 otherwise)
    set_ptr: np.ndarray  # CSR: flows of each set
    flow_conn: np.ndarray  # [graph flows] connection of each flow
    flow_wire: np.ndarray  # [graph flows] wire bits of each flow


class TaskState(NamedTuple):
    """Per task: what the loop has done so far."""

    pending: np.ndarray  # predecessors not finished
    ready: np.ndarray  # latest predecessor finish
    rel_by: np.ndarray  # the predecessor that released it
    tstart: np.ndarray
    tfinish: np.ndarray
    left: np.ndarray  # a comm task's flows not arrived
    arrive: np.ndarray  # a comm task's latest arrival so far
    tbits: np.ndarray  # a comm task's delivered bits


class EventHeap(NamedTuple):
    """Task events ``(time, seq, item)`` (:mod:`trainfabric.fabric.heap`, the event heap)."""

    time: np.ndarray
    seq: np.ndarray
    item: np.ndarray


class Connections(NamedTuple):
    """Per connection: its route row, when it went idle, its flowlet number."""

    row: np.ndarray
    idle: np.ndarray
    flowlet: np.ndarray


class Routes(NamedTuple):
    """Per route row: slots ``[rows, K]`` (group, weight), what is lost and the hops, the
    link classes ``[rows, W]`` (ids and weights) and the bits sent on the row."""

    group: np.ndarray
    weight: np.ndarray
    lost: np.ndarray
    hops: np.ndarray
    cls: np.ndarray
    clw: np.ndarray
    bits: np.ndarray


class LinkGroups(NamedTuple):
    """Link capacities (bits/s) and the router's link groups
    (:class:`~trainfabric.fabric.routing.Groups`)."""

    capacity_bps: np.ndarray
    offset: int
    ptr: np.ndarray
    link: np.ndarray
    coef: np.ndarray


class LoopParams(NamedTuple):
    """The call's scalars (module doc of :mod:`trainfabric.fabric.tasks.loop`)."""

    hop_s: float
    until_s: float
    advance: bool
    batch_rtol: float
    done_rtol: float
    rtol: float
    flowlet_gap_s: float  # < 0: no flowlets
    bin_s: float
    memo: bool
    local: bool
    widen: int
    certify: bool  # split modes: skip the re-solve after departures that change no rate


class ReplaySegments(NamedTuple):
    """The replayed flow set's memo: segment times and bits."""

    seg_t: np.ndarray
    seg_b: np.ndarray


class SetMemo(NamedTuple):
    """Set-level replays (module doc of :mod:`trainfabric.fabric.tasks.engine`): per flow set
    of the graph, whether its isolated evolution is known in this routing epoch (``ok``)
    and what it gives, as offsets from the set's start (s): its last flow event (``end``),
    the send time and hops of the flow that arrives last (``last_sent``, ``last_hops``),
    delivered bits (``tbits``), flows (``n_flows``), replays done since the last flush of
    link bits (``count``), and its class loads as ``n_seg`` constant-rate segments: times
    ``seg_t[seg_t_lo : seg_t_lo + n_seg + 1]``, bits ``seg_b[seg_b_lo : seg_b_lo + n_seg]``."""

    ok: np.ndarray
    end: np.ndarray
    last_sent: np.ndarray
    last_hops: np.ndarray
    tbits: np.ndarray
    n_flows: np.ndarray
    count: np.ndarray
    seg_t_lo: np.ndarray
    seg_b_lo: np.ndarray
    n_seg: np.ndarray
    seg_t: np.ndarray
    seg_b: np.ndarray
