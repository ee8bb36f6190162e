"""JSON interchange: round trips, and every malformed file names its node, edge or phase."""

import copy
import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainfabric.errors import ConfigError, FormatError
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


def parse(doc):
    """The strict reader on ``doc`` written as JSON (non-finite floats as NaN/Infinity)."""
    return ix.loads(json.dumps(doc))


def broken(edit):
    doc = copy.deepcopy(tiny())
    edit(doc)
    return doc


@pytest.mark.parametrize(
    ("edit", "field", "words"),
    [
        (lambda d: d.update(version=2), "version", "unsupported version 2"),
        (lambda d: d.update(format="other"), "format", "got 'other'"),
        (lambda d: d.pop("format"), "format", "trainfabric.taskdag"),
        (lambda d: d["nodes"][1].update(dst=0), "nodes[1].dst", "differ"),
        (lambda d: d["nodes"][1].update(bytes=0), "nodes[1].bytes", "greater than 0"),
        (lambda d: d["nodes"][1].update(bytes=1e308), "nodes[1].bytes", "less than or equal"),
        (lambda d: d["nodes"][1].update(bytes=float("nan")), "nodes[1].bytes", "finite"),
        (lambda d: d["nodes"][1].update(bytes=float("inf")), "nodes[1].bytes", "finite"),
        (lambda d: d["nodes"][1].update(bytes="1e8"), "nodes[1].bytes", "valid number"),
        (lambda d: d["nodes"][0].update(duration_s=1e308), "nodes[0].duration_s", "less than"),
        (lambda d: d["nodes"][1].update(latency_s=-1), "nodes[1].latency_s", "greater than"),
        (lambda d: d["nodes"][1].pop("bytes"), "nodes[1].bytes", "required"),
        (lambda d: d["nodes"][2].update(pod=5), "nodes[2].pod", "< pods"),
        (lambda d: d["nodes"][2].update(pod=1.0), "nodes[2].pod", "valid integer"),
        (lambda d: d["nodes"][2].update(pod=True), "nodes[2].pod", "valid integer"),
        (lambda d: d["nodes"][0].update(id=True), "nodes[0].id", "string or an integer"),
        (lambda d: d["nodes"][0].update(kind="gpu"), "nodes[0].kind", "one of"),
        (lambda d: d["nodes"][0].pop("kind"), "nodes[0].kind", "one of"),
        (lambda d: d["nodes"][2].update(id="a"), "nodes[2].id", "duplicate id 'a'"),
        (lambda d: d["nodes"][0].update(colour="red"), "nodes[0].colour", "not permitted"),
        (lambda d: d.update(nodes=[]), "nodes", "at least 1"),
        (lambda d: d["edges"].append(["b", "zz"]), "edges[2]", "'zz' does not exist"),
        (lambda d: d["edges"].append(["b", "b"]), "edges[2]", "self-loop"),
        (lambda d: d["edges"].append(["b"]), "edges[2][1]", "required"),
        (lambda d: d["edges"].append(["b", "a"]), "nodes[", "cycle"),
        (lambda d: d.update(pods=0), "pods", "greater than or equal to 1"),
        (lambda d: d.update(pods="2"), "pods", "valid integer"),
    ],
)
def test_malformed_dag_names_the_culprit(edit, field, words):
    with pytest.raises(FormatError) as exc:
        parse(broken(edit))
    assert exc.value.field.startswith(field), exc.value.field
    assert words in str(exc.value)


NAN = float("nan")


def traffic(phase, pods=3):
    return {"format": "trainfabric.traffic", "version": 1, "pods": pods, "phases": [phase]}


@pytest.mark.parametrize(
    ("phase", "field", "words"),
    [
        ({"name": "p", "flows": [[0, 0, 1.0]]}, "phases[0].flows[0]", "differ"),
        ({"name": "p", "flows": [[0, 9, 1.0]]}, "phases[0].flows[0]", "< 3"),
        ({"name": "p", "flows": [[0, 1, -1.0]]}, "phases[0].flows[0][2]", "greater than 0"),
        ({"name": "p", "flows": [[0, 1.5, 1.0]]}, "phases[0].flows[0][1]", "valid integer"),
        ({"name": "p", "flows": [[0, 1]]}, "phases[0].flows[0][2]", "required"),
        ({"name": "p", "matrix": [[0, 1], [1, 0]]}, "phases[0].matrix", "3 rows"),
        ({"name": "p", "matrix": [[0, 1, 0], [1, 0], [0, 0, 0]]}, "phases[0].matrix[1]", "3 entr"),
        ({"name": "p", "matrix": [[0, 1, 0], [1, 0, 0], [0, 0, 5]]}, "phases[0].matrix[2][2]", "0"),
        (
            {"name": "p", "matrix": [[0, 1, 0], [-1, 0, 0], [0, 0, 0]]},
            "phases[0].matrix[1][0]",
            "greater than or equal",
        ),
        (
            {"name": "p", "matrix": [[0, 1, 0], [1, 0, 0], [0, float("nan"), 0]]},
            "phases[0].matrix[2][1]",
            "finite",
        ),
        ({"name": "p"}, "phases[0]", "exactly one"),
        ({"name": "p", "flows": [], "matrix": []}, "phases[0]", "exactly one"),
    ],
)
def test_malformed_traffic_names_the_phase(phase, field, words):
    with pytest.raises(FormatError) as exc:
        parse(traffic(phase))
    assert exc.value.field == field
    assert words in exc.value.message


def test_traffic_matrix_by_hand():
    m = [[0, 1e6, 0], [0, 0, 2e6], [3e6, 0, 0]]
    tr = parse(traffic({"name": "ring", "matrix": m}))
    np.testing.assert_array_equal(tr.matrix(0), np.array(m, float))
    dup = traffic({"name": "a", "flows": []})
    dup["phases"].append({"name": "a", "flows": []})
    with pytest.raises(FormatError, match="duplicate name 'a'") as exc:
        parse(dup)
    assert exc.value.field == "phases[1].name"


def test_strict_json_tokens_are_refused():
    """Python's json accepts these; the strict reader names the field."""
    text = json.dumps(tiny()).replace('"bytes": 1000000000.0', '"bytes": Infinity')
    with pytest.raises(FormatError) as exc:
        ix.loads(text)
    assert exc.value.field == "nodes[1].bytes"


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda p: p.mkdir(), "is a directory"),
        (lambda p: p.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe"), "not a UTF-8 text file"),
        (lambda p: None, "file not found"),
        (lambda p: p.write_text("[1, 2]"), "must be a JSON object"),
    ],
)
def test_unreadable_file_names_the_argument(tmp_path, make, words):
    path = tmp_path / "w.json"
    make(path)
    with pytest.raises(ConfigError) as exc:
        ix.load(path, field="--workload")
    assert words in exc.value.message
    assert exc.value.field in ("--workload", "<root>")


def test_not_json_reports_line(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text('{"format":\n  oops}')
    with pytest.raises(ConfigError, match="line 2") as exc:
        ix.load(p)
    assert exc.value.field == "workload"


JOB_TOML = """name = "tiny"
[model]
name = "tiny"
layers = 2
hidden = 1024
seq_len = 1024
vocab = 32000
heads = 8
[parallelism]
tp = 2
pp = 2
dp = 2
micro_batches = 2
[placement]
gpus_per_pod = 2
pods = 4
"""


@pytest.mark.parametrize(
    ("name", "make", "field", "words"),
    [
        ("dir", lambda p: p.mkdir(), "workload", "is a directory"),
        ("dir.toml", lambda p: p.mkdir(), "workload", "is a directory"),
        ("bin", lambda p: p.write_bytes(bytes(range(256))), "workload", "not a UTF-8"),
        ("bin.toml", lambda p: p.write_bytes(bytes(range(256))), "workload", "not a UTF-8"),
        ("bad.toml", lambda p: p.write_text("layers = \n"), "workload", "invalid TOML"),
        (
            "layers.toml",
            lambda p: p.write_text(JOB_TOML.replace("layers = 2", "layers = 1.5")),
            "model.layers",
            "valid integer",
        ),
        (
            "extra.toml",
            lambda p: p.write_text(JOB_TOML.replace("heads = 8", "heads = 8\nhead = 8")),
            "model.head",
            "not permitted",
        ),
    ],
)
def test_load_workload_file_errors(tmp_path, name, make, field, words):
    path = tmp_path / name
    make(path)
    with pytest.raises(ConfigError) as exc:
        load_workload(str(path))
    assert exc.value.field == field and words in exc.value.message


def test_load_workload_reads_a_job_toml(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(JOB_TOML)
    w = load_workload(str(path))
    assert w.name == "tiny" and w.dag.n_pods == 4


@given(st.lists(st.lists(st.floats(1.0, 1e9), max_size=4), min_size=1, max_size=6))
def test_phase_bytes_sums_each_phase_and_gives_empty_phases_zero(per_phase):
    """Phases with no inter-pod flows (only intra-pod bytes) sum to 0, wherever they sit."""
    from trainfabric.workloads.dag import Phase
    from trainfabric.workloads.traffic import PhaseTraffic

    sizes = [len(p) for p in per_phase]
    flat = np.array([b for p in per_phase for b in p], dtype=float)
    tr = PhaseTraffic(
        2,
        tuple(Phase("x", f"p{k}") for k in range(len(per_phase))),
        np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
        np.zeros(flat.size, np.int64),
        np.ones(flat.size, np.int64),
        flat,
    )
    np.testing.assert_allclose(tr.phase_bytes(), [sum(p) for p in per_phase], rtol=1e-12)
