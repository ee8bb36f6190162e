"""Fuzzing the interchange readers (task DAG and traffic JSON): mutations of valid files and
random bytes either load correctly or raise a TrainfabricError naming a field, never anything
else. A value no field accepts (NaN, Infinity, a boolean) put anywhere must be refused with
the mutated value's own path as the field."""

import copy
import json
import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainfabric.errors import TrainfabricError
from trainfabric.workloads import interchange as ix
from trainfabric.workloads.dag import TaskDAG
from trainfabric.workloads.traffic import PhaseTraffic

DAG = {
    "format": "trainfabric.taskdag",
    "version": 1,
    "pods": 3,
    "phases": [{"name": "fwd", "kind": "pp_fwd", "intra_pod_bytes": 10.0}],
    "nodes": [
        {"id": 0, "kind": "compute", "pod": 0, "duration_s": 0.5, "name": "F0"},
        {"id": "x", "kind": "comm", "src": 0, "dst": 2, "bytes": 1e6, "phase": "fwd"},
        {"id": 2, "kind": "barrier"},
        {"id": "b", "kind": "compute", "pod": 2, "duration_s": 1.0},
    ],
    "edges": [[0, "x"], ["x", 2], [2, "b"]],
}
TRAFFIC = {
    "format": "trainfabric.traffic",
    "version": 1,
    "pods": 3,
    "phases": [
        {"name": "a2a", "kind": "moe_dispatch", "flows": [[0, 1, 1e6], [1, 2, 2e6]]},
        {"name": "ring", "matrix": [[0, 1e6, 0], [0, 0, 1e6], [1e6, 0, 0]]},
    ],
}
# values that no field of either format accepts
NEVER_VALID = (float("nan"), float("inf"), -float("inf"), True, False)
ODD = (*NEVER_VALID, 1e308, -1, 0, "1e8", None, [], {}, 1.5, "x", 10**30, [1, 2, 3])
TOP = ("workload", "format", "version", "pods", "<root>", "nodes", "edges", "phases")


def sites(obj, path=""):
    """Every (path, container, key) inside ``obj``: dict keys as ``.key``, indices ``[i]``."""
    if isinstance(obj, dict):
        pairs = [(f"{path}.{k}" if path else k, k) for k in obj]
    else:
        pairs = [(f"{path}[{i}]", i) for i in range(len(obj))]
    for here, key in pairs:
        yield here, obj, key
        if isinstance(obj[key], dict | list):
            yield from sites(obj[key], here)


def never_valid(value) -> bool:
    return isinstance(value, bool) or (isinstance(value, float) and not math.isfinite(value))


@st.composite
def mutations(draw, valid):
    """(JSON text, path of a value that must be refused or None)."""
    doc = copy.deepcopy(valid)
    where = draw(st.sampled_from(list(sites(doc))))
    op = draw(st.sampled_from(["replace", "drop", "truncate", "duplicate"]))
    path, container, key = where
    if op == "replace":
        value = draw(st.sampled_from(ODD))
        container[key] = value
        return json.dumps(doc), path if never_valid(value) else None
    if op == "drop":
        del container[key]
        return json.dumps(doc), None
    text = json.dumps(doc)
    if op == "truncate":
        return text[: draw(st.integers(0, len(text) - 1))], None
    keys = [m.start() for m in re.finditer(r'"(\w+)": ', text)]
    at = draw(st.sampled_from(keys))
    name = re.match(r'"(\w+)": ', text[at:]).group(0)
    extra = json.dumps(draw(st.sampled_from(ODD)))
    return text[:at] + f"{name}{extra}, " + text[at:], None


def check(text_or_bytes, must_fail=None):
    """A correct load, or a TrainfabricError naming a field (``must_fail`` exactly)."""
    try:
        obj = ix.loads(text_or_bytes)
    except TrainfabricError as exc:
        assert exc.field.split("[")[0].split(".")[0] in TOP, exc.field
        assert exc.message
        if must_fail is not None:
            assert exc.field == must_fail, (exc.field, must_fail)
        return None
    assert must_fail is None, f"accepted a bad value at {must_fail}"
    assert isinstance(obj, TaskDAG | PhaseTraffic)
    assert obj.n_pods >= 1
    return obj


@pytest.mark.parametrize("valid", [DAG, TRAFFIC], ids=["dag", "traffic"])
def test_the_valid_documents_load(valid):
    obj = check(json.dumps(valid))
    assert obj is not None
    if isinstance(obj, TaskDAG):
        assert obj.critical_path_at(8e9) == pytest.approx(0.5 + 1e6 * 8 / 8e9 + 1.0)
    else:
        assert obj.bytes.sum() == 6e6 and np.isfinite(obj.bytes).all()


@settings(max_examples=60)
@given(mutations(DAG))
def test_mutated_dag_files(case):
    check(*case)


@settings(max_examples=60)
@given(mutations(TRAFFIC))
def test_mutated_traffic_files(case):
    check(*case)


@settings(max_examples=40)
@given(st.binary(max_size=300) | st.text(alphabet='{}[]":,0123456789.eE-+ NaIfinty', max_size=80))
def test_random_bytes_and_json_shaped_text(data):
    check(data)


@settings(max_examples=30)
@given(st.sampled_from(list(sites(DAG))), st.sampled_from(NEVER_VALID))
def test_every_site_refuses_non_finite_and_booleans(where, value):
    """Exhaustive over the DAG's sites: the error names exactly the mutated path."""
    doc = copy.deepcopy(DAG)
    path, container, key = next(s for s in sites(doc) if s[0] == where[0])
    container[key] = value
    check(json.dumps(doc), path)


def test_file_level_errors_name_the_argument(tmp_path):
    """Binary file, directory, truncated file through :func:`interchange.load`."""
    for name, data in (("bin.json", bytes(range(256))), ("cut.json", json.dumps(DAG)[:50])):
        path = tmp_path / name
        path.write_bytes(data if isinstance(data, bytes) else data.encode())
        with pytest.raises(TrainfabricError) as exc:
            ix.load(path)
        assert exc.value.field == "workload" and str(path) in exc.value.message
    assert math.isfinite(check(json.dumps(DAG)).comm_bytes())
