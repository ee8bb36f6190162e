"""Churn of the online policy's reconfigurations on the OCSes (docs/ocs.md E10, §1.8 minimal churn).

:func:`replay` rebuilds the wirings a policy run of :mod:`.threshold` deployed (the same exact
optimum and completion at the same slots). :func:`churn` splits every deployed wiring onto
the ``s`` OCSes two ways, both from the same deployed tables (those of the churn-aware
deployment, which starts from a fresh split of the first wiring):

* **naive**: a fresh :func:`trainfabric.ocs.wiring.decompose.decompose` of the new wiring;
* **churn-aware**: :func:`trainfabric.ocs.wiring.decompose.decompose_churn_aware` from the deployed
split (keeps
  every surviving circuit on its OCS and ports, places only the rest). When its local repair
  fails it falls back to a fresh split that keeps old ports only by chance, which can add
  more than the naive split (measured: 1 of 14 reconfigurations of a 16-pod MoE rotation);
  the deployment therefore takes whichever of the two adds fewer cross-connects
  (``aware``; ``aware_raw`` is the churn-aware split alone).

The churn of a reconfiguration is the number of cross-connects added, over all OCSes, by the
idempotent diff (:func:`trainfabric.ocs.wiring.decompose.diff`) from the deployed tables to the new
ones (a moved
circuit is one delete plus one add). ``wiring_moves = Σ_e max(x_new − x_old, 0)`` is the
least any split can add. The Jeffreys prediction ``M b1 Δ / 2`` of E10 (docs/ocs.md §3.2) concerns
the entropic solver's fractional optimum; the one-hop policy re-solves exactly (no ``b1``), so it
is not compared here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainfabric.ocs.online.threshold import OneHopCost, PolicyRun
from trainfabric.ocs.traffic import TrafficSequence
from trainfabric.ocs.wiring.decompose import (
    cross_connects,
    decompose,
    decompose_churn_aware,
    diff,
)


def replay(cost: OneHopCost, seq: TrafficSequence, run: PolicyRun) -> list[tuple[int, np.ndarray]]:
    """``(slot, x)`` of the initial wiring (slot −1) and of every reconfiguration of ``run``."""
    first = seq.block(0, 1)[0]
    x = cost.complete(first, cost.slot_optimum(first)[1])
    out = [(-1, x)]
    for t in np.flatnonzero(run.switched):
        d = seq.block(int(t), int(t) + 1)[0]
        x = cost.complete(d, cost.slot_optimum(d)[1], x)
        out.append((int(t), x))
    return out


@dataclass
class ChurnRow:
    """One reconfiguration: ``slot``, ``wiring_moves`` (least possible adds), cross-connects
    added by the ``naive`` split, the churn-aware split (``aware_raw``) and the deployed one
    (``aware``, the fewer of the two), and whether the churn-aware split kept every
    surviving circuit on its OCS (``kept_all``: its local repair succeeded)."""

    slot: int
    wiring_moves: int
    naive: int
    aware_raw: int
    aware: int
    kept_all: bool
    feasible: bool


def _adds(old, new) -> int:
    return sum(len(ch["adds"]) for ch in diff(old, new))


def churn(cost: OneHopCost, wirings: list[tuple[int, np.ndarray]]) -> list[ChurnRow]:
    """Naive vs churn-aware cross-connect churn of every reconfiguration (module doc);
    reconfigurations that leave the wiring unchanged are skipped."""
    model = cost.model
    aware_dec = decompose(model, wirings[0][1])
    tables = cross_connects(model, aware_dec)
    rows = []
    x_old = wirings[0][1]
    for slot, x in wirings[1:]:
        if np.array_equal(x, x_old):
            continue
        fresh = decompose(model, x)
        fresh_tables = cross_connects(model, fresh)
        aware = decompose_churn_aware(model, x, aware_dec)
        aware_tables = cross_connects(model, aware)
        naive, raw = _adds(tables, fresh_tables), _adds(tables, aware_tables)
        kept_all = aware.kept == int(np.minimum(x, x_old).sum())
        feasible = bool(fresh.feasible and aware.feasible)
        if naive < raw:
            aware, aware_tables = fresh, fresh_tables
        moves = int(np.maximum(x - x_old, 0).sum())
        rows.append(ChurnRow(slot, moves, naive, raw, min(naive, raw), kept_all, feasible))
        aware_dec, tables, x_old = aware, aware_tables, x
    return rows
