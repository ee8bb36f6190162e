"""Churn of the online policy's reconfigurations: churn-aware vs fresh splits onto the OCSes."""

import itertools

import numpy as np
import pytest

from trainfabric.ocs import traffic as tr
from trainfabric.ocs.model import OcsModel
from trainfabric.ocs.online.churn import churn, replay
from trainfabric.ocs.online.threshold import OneHopCost, evaluate


@pytest.fixture(scope="module")
def moe_run():
    cost = OneHopCost(OcsModel(np.full(16, 8), 4, rate_bps=100e9, fallback_bps=5e9))
    seq = tr.generate("moe-phases", 1500, 5e9, pods=16, seed=0)
    res = evaluate(cost, seq, cost.slot_optimum(seq.block(0, 1)[0])[0], extra=())
    return cost, seq, res.runs["threshold"]


def test_replay_rebuilds_the_deployed_wirings(moe_run):
    cost, seq, run = moe_run
    wirings = replay(cost, seq, run)
    assert [t for t, _ in wirings[1:]] == np.flatnonzero(run.switched).tolist()
    d = seq.array()
    # the policy's per-slot cost is the cost of the replayed wiring in force at that slot
    at = np.searchsorted([t for t, _ in wirings], np.arange(seq.slots), side="right") - 1
    for t in range(0, seq.slots, 37):
        assert cost.cost(d[t : t + 1], wirings[at[t]][1])[0] == run.cost[t]
    moves = sum(int(np.maximum(b[1] - a[1], 0).sum()) for a, b in itertools.pairwise(wirings))
    assert moves == run.moved_circuits


def test_churn_aware_keeps_circuits_and_never_moves_more_than_a_fresh_split(moe_run):
    cost, seq, run = moe_run
    model = cost.model
    rows = churn(cost, replay(cost, seq, run))
    assert rows and all(r.feasible for r in rows)
    for r in rows:
        assert r.wiring_moves <= r.aware <= r.naive  # the least possible <= deployed <= fresh
        assert r.aware_raw >= r.wiring_moves
        if r.kept_all:  # every surviving circuit stayed on its OCS: only the changes move
            assert r.aware_raw == r.wiring_moves
    assert any(r.kept_all for r in rows)
    assert sum(r.naive for r in rows) >= 2 * sum(r.aware for r in rows)
    assert model.ocs == 4
