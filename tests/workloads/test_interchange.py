"""JSON interchange: round trips, and every malformed file names its node, edge or phase."""

import copy
import json

import numpy as np
import pytest

from trainfabric.errors import FormatError
from trainfabric.workloads import (
    build_dag,
    dag_from_traffic,
    get_preset,
    load_workload,
    traffic_from_dag,
)
from trainfabric.workloads import interchange as ix


@pytest.fixture(scope="module")
def hybrid():
    return build_dag(get_preset("hybrid"), seed=1)


def test_dag_round_trip(tmp_path, hybrid):
    path = ix.save(hybrid, tmp_path / "h.json")
    back = ix.load(path)
    for f in (
        "kind",
        "pod",
        "dst",
        "duration_s",
        "bytes",
        "latency_s",
        "phase",
        "indptr",
        "indices",
    ):
        np.testing.assert_array_equal(getattr(back, f), getattr(hybrid, f), err_msg=f)
    assert back.phases == hybrid.phases
    assert back.critical_path_at(1e11) == hybrid.critical_path_at(1e11)


def test_traffic_round_trip_and_dag_of_phases(tmp_path, hybrid):
    tr = traffic_from_dag(hybrid)
    assert tr.bytes.sum() == pytest.approx(hybrid.comm_bytes())
    back = ix.load(ix.save(tr, tmp_path / "t.json"))
    np.testing.assert_array_equal(back.offsets, tr.offsets)
    np.testing.assert_array_equal(back.bytes, tr.bytes)
    for k in (0, len(tr) - 1):
        assert back.matrix(k).sum() == pytest.approx(tr.phase_bytes()[k])
    # phases in series: the critical path is the sum over phases of the slowest pair
    rate, lat = 1e10, 5e-6
    chain = dag_from_traffic(tr, latency_s=lat)
    want = sum(lat + 8 * tr.flows(k)[2].max() / rate for k in range(len(tr)) if tr.flows(k)[2].size)
    assert chain.critical_path_at(rate) == pytest.approx(want, rel=1e-12)


def tiny():
    return {
        "format": "trainfabric.taskdag",
        "version": 1,
        "pods": 2,
        "nodes": [
            {"id": "a", "kind": "compute", "pod": 0, "duration_s": 1.0},
            {"id": "x", "kind": "comm", "src": 0, "dst": 1, "bytes": 1e9, "latency_s": 0.5},
            {"id": "b", "kind": "compute", "pod": 1, "duration_s": 2.0},
        ],
        "edges": [["a", "x"], ["x", "b"]],
    }


def test_tiny_dag_by_hand(tmp_path):
    p = tmp_path / "tiny.json"
    p.write_text(json.dumps(tiny()))
    w = load_workload(str(p))
    assert w.dag.critical_path_at(8e9) == pytest.approx(1.0 + 0.5 + 1.0 + 2.0)
    assert len(w.traffic) == 1 and w.traffic.phases[0].name == "node x"


def broken(edit):
    doc = copy.deepcopy(tiny())
    edit(doc)
    return doc


@pytest.mark.parametrize(
    ("edit", "field", "words"),
    [
        (lambda d: d.update(version=2), "version", "unsupported"),
        (lambda d: d.update(format="other"), "format", "trainfabric.taskdag"),
        (lambda d: d["nodes"][1].update(dst=0), "nodes[1] (id 'x').dst", "differ"),
        (lambda d: d["nodes"][1].update(bytes=0), "nodes[1] (id 'x').bytes", "greater than 0"),
        (lambda d: d["nodes"][1].pop("bytes"), "nodes[1] (id 'x').bytes", "required"),
        (lambda d: d["nodes"][2].update(pod=5), "nodes[2] (id 'b').pod", "< pods"),
        (lambda d: d["nodes"][0].update(kind="gpu"), "nodes[0].kind", "one of"),
        (lambda d: d["nodes"][2].update(id="a"), "nodes[2] (id 'a').id", "duplicate"),
        (lambda d: d["nodes"][0].update(colour="red"), "nodes[0] (id 'a').colour", "not permitted"),
        (lambda d: d["edges"].append(["b", "zz"]), "edges[2]", "'zz' does not exist"),
        (lambda d: d["edges"].append(["b", "a"]), "nodes[", "cycle"),
        (lambda d: d.update(pods=0), "pods", ">= 1"),
    ],
)
def test_malformed_dag_names_the_culprit(edit, field, words):
    with pytest.raises(FormatError) as exc:
        ix.dag_from_dict(broken(edit))
    assert exc.value.field.startswith(field), exc.value.field
    assert words in str(exc.value)


@pytest.mark.parametrize(
    ("phase", "field"),
    [
        ({"name": "p", "flows": [[0, 0, 1.0]]}, "phases[0].flows[0]"),
        ({"name": "p", "flows": [[0, 9, 1.0]]}, "phases[0].flows[0]"),
        ({"name": "p", "matrix": [[0, 1], [1, 0]]}, "phases[0].matrix"),
        ({"name": "p"}, "phases[0]"),
        ({"name": "p", "flows": [[0, 1, -1.0]]}, "phases[0].flows[0]"),
    ],
)
def test_malformed_traffic_names_the_phase(phase, field):
    doc = {"format": "trainfabric.traffic", "version": 1, "pods": 3, "phases": [phase]}
    with pytest.raises(FormatError) as exc:
        ix.traffic_from_dict(doc)
    assert exc.value.field == field


def test_not_json_reports_line(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text('{"format":\n  oops}')
    with pytest.raises(FormatError, match="line 2"):
        ix.load(p)
