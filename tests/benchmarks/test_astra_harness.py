"""The astra-sim side-by-side harness (benchmarks/vs_astra.py): the DAG's contraction into
execution-trace items (the Chakra writer's) keeps the DAG's timing, and astra-sim's finish
lines parse.

Running the traces needs astra-sim, built outside the repository; the benchmark checks it
against our engine.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import vs_astra as V  # noqa: E402

from trainfabric.workloads.chakra.writer import collective_forms, trace_items  # noqa: E402
from trainfabric.workloads.dag import COMPUTE  # noqa: E402

COLL_OPS = ("all_reduce", "reduce_scatter", "all_gather")


def _item_critical_path(items: list, rate: float, lat: float) -> float:
    """Longest path over the items with every predecessor kept (cross-GPU ones too): a
    collective of k ring steps of b bytes lasts k (lat + 8 b / rate), a send lat + 8 b / rate
    (b: comm_size for an all-gather, comm_size / n for the others)."""
    steps = {"all_reduce": 2, "reduce_scatter": 1, "all_gather": 1}
    finish = []
    for it in items:
        if it.kind == "comp":
            d = it.duration_us * 1e-6
        elif it.kind == "p2p":
            d = lat + 8 * it.size / rate
        else:
            n, size = len(it.ranks), it.sizes[it.ranks[0]]
            b = size if it.kind == "all_gather" else size / n
            d = steps[it.kind] * (n - 1) * (lat + 8 * b / rate)
        assert all(y < len(finish) for y in it.preds)  # items come in a topological order
        finish.append(max((finish[y] for y in it.preds), default=0.0) + d)
    return max(finish)


@pytest.mark.parametrize("name", list(V.JOBS))
def test_items_keep_the_dag_critical_path(name):
    job = V.job(name)
    dag = V.rounded_dag(job)
    items = trace_items(dag, collective_forms(dag))
    lat = float(job.compute.latency_s)
    assert _item_critical_path(items, V.RATE_BPS, lat) == pytest.approx(
        dag.critical_path_at(V.RATE_BPS), rel=1e-12
    )
    comp = [it for it in items if it.kind == "comp"]
    assert len(comp) == int(np.sum(dag.kind == COMPUTE))
    par = V.JOBS[name]
    colls = [it for it in items if it.kind in COLL_OPS]
    # distributed optimiser: a reduce-scatter and an all-gather per stage, over its DP group
    assert len(colls) == 2 * par.get("pp", 1)
    assert all(len(it.ranks) == par["dp"] for it in colls)
    assert all(x not in it.preds for x, it in enumerate(items))


def test_finish_lines_parse():
    line = (
        "[2026-12-05 12:40:01.123] [workload] [info] sys[6] finished, 128841520 cycles, "
        "exposed communication 28201520 cycles."
    )
    assert V.FINISHED.findall(line) == [("6", "128841520")]
