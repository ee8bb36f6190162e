"""Versioned JSON interchange formats for task DAGs and traffic-matrix sequences.

Task DAG, ``"format": "trainfabric.taskdag"``, ``"version": 1``::

    {"format": "trainfabric.taskdag", "version": 1, "pods": 4,
     "phases": [{"name": "pp_fwd s0->s1 mb0", "kind": "pp_fwd", "intra_pod_bytes": 0}],
     "nodes": [
       {"id": 0, "kind": "compute", "pod": 0, "duration_s": 0.012, "name": "F0 s0"},
       {"id": 1, "kind": "comm", "src": 0, "dst": 1, "bytes": 5.0e7, "latency_s": 5e-6,
        "phase": "pp_fwd s0->s1 mb0"},
       {"id": 2, "kind": "barrier"}],
     "edges": [[0, 1], [1, 2]]}

Node ids are unique strings or integers; ``phases`` is optional (a comm node whose ``phase``
is not listed gets a phase of kind ``custom``; one without ``phase`` is a phase of its own).
Units: seconds and bytes. ``latency_s`` defaults to 0.

Traffic sequence, ``"format": "trainfabric.traffic"``, ``"version": 1``: phases in order, each
with ``flows`` (``[src, dst, bytes]`` triples) or a dense ``matrix`` (row = source pod)::

    {"format": "trainfabric.traffic", "version": 1, "pods": 3,
     "phases": [{"name": "a2a", "kind": "moe_dispatch", "flows": [[0, 1, 1e6], [1, 2, 2e6]]},
                {"name": "ring", "matrix": [[0, 1e6, 0], [0, 0, 1e6], [1e6, 0, 0]]}]}

Invalid files raise :class:`~trainfabric.errors.FormatError` naming the node, edge or phase.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trainfabric.errors import FormatError
from trainfabric.io import write_text
from trainfabric.workloads.dag import COMM, COMPUTE, KIND_NAMES, Phase, TaskDAG, from_arrays
from trainfabric.workloads.traffic import PhaseTraffic

DAG_FORMAT, TRAFFIC_FORMAT, VERSION = "trainfabric.taskdag", "trainfabric.traffic", 1


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Compute(_Strict):
    id: str | int
    kind: Literal["compute"]
    pod: int = Field(ge=0)
    duration_s: float = Field(ge=0)
    name: str = ""


class _Comm(_Strict):
    id: str | int
    kind: Literal["comm"]
    src: int = Field(ge=0)
    dst: int = Field(ge=0)
    bytes: float = Field(gt=0)
    latency_s: float = Field(default=0.0, ge=0)
    phase: str | None = None
    name: str = ""


class _Barrier(_Strict):
    id: str | int
    kind: Literal["barrier"]
    phase: str | None = None
    name: str = ""


class _Phase(_Strict):
    name: str
    kind: str = "custom"
    intra_pod_bytes: float = Field(default=0.0, ge=0)
    flows: list[tuple[int, int, float]] | None = None
    matrix: list[list[float]] | None = None


_NODE_MODELS = {"compute": _Compute, "comm": _Comm, "barrier": _Barrier}


def _check(model: type[BaseModel], data: Any, where: str) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise FormatError(f"{where}.{loc}" if loc else where, err["msg"]) from None


def _header(doc: Any, fmt: str) -> int:
    if not isinstance(doc, dict):
        raise FormatError("<root>", "must be a JSON object")
    if doc.get("format") != fmt:
        raise FormatError("format", f"must be '{fmt}', got {doc.get('format')!r}")
    if doc.get("version") != VERSION:
        raise FormatError(
            "version", f"unsupported version {doc.get('version')!r} (this reads {VERSION})"
        )
    pods = doc.get("pods")
    if not isinstance(pods, int) or isinstance(pods, bool) or pods < 1:
        raise FormatError("pods", "must be an integer >= 1")
    return pods


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FormatError("workload", f"file not found: {path}") from None
    except json.JSONDecodeError as exc:
        raise FormatError(
            "workload", f"{path}: invalid JSON at line {exc.lineno}: {exc.msg}"
        ) from None


# -- task DAG ---------------------------------------------------------------------------------
def dag_to_dict(dag: TaskDAG) -> dict[str, Any]:
    """The DAG in interchange form (node ids are the DAG's topological indices)."""
    nodes = []
    for i in range(dag.n_nodes):
        k = int(dag.kind[i])
        node: dict[str, Any] = {"id": i, "kind": KIND_NAMES[k]}
        if k == COMPUTE:
            node.update(pod=int(dag.pod[i]), duration_s=float(dag.duration_s[i]))
        elif k == COMM:
            node.update(
                src=int(dag.pod[i]),
                dst=int(dag.dst[i]),
                bytes=float(dag.bytes[i]),
                latency_s=float(dag.latency_s[i]),
            )
        if k != COMPUTE and dag.phase[i] >= 0:
            node["phase"] = dag.phases[dag.phase[i]].name
        if dag.names:
            node["name"] = dag.names[i]
        nodes.append(node)
    return {
        "format": DAG_FORMAT,
        "version": VERSION,
        "pods": dag.n_pods,
        "phases": [
            {"name": p.name, "kind": p.kind, "intra_pod_bytes": p.intra_pod_bytes}
            for p in dag.phases
        ],
        "nodes": nodes,
        "edges": dag.edges.tolist(),
    }


def dag_from_dict(doc: Any) -> TaskDAG:
    """Validate and read an interchange document into a :class:`TaskDAG`."""
    pods = _header(doc, DAG_FORMAT)
    phases: list[Phase] = []
    phase_id: dict[str, int] = {}
    for k, p in enumerate(doc.get("phases") or []):
        ph = _check(_Phase, p, f"phases[{k}]")
        if ph.name in phase_id:
            raise FormatError(f"phases[{k}].name", f"duplicate phase name {ph.name!r}")
        phase_id[ph.name] = len(phases)
        phases.append(Phase(ph.kind, ph.name, ph.intra_pod_bytes))
    raw_nodes = doc.get("nodes")
    if not isinstance(raw_nodes, list) or not raw_nodes:
        raise FormatError("nodes", "must be a non-empty list")
    n = len(raw_nodes)
    kind = np.empty(n, np.int8)
    pod = np.full(n, -1, np.int32)
    dst = np.full(n, -1, np.int32)
    dur, nbytes, lat = np.zeros(n), np.zeros(n), np.zeros(n)
    phase = np.full(n, -1, np.int32)
    index: dict[str | int, int] = {}
    names = []
    for i, raw in enumerate(raw_nodes):
        where = f"nodes[{i}]"
        if not isinstance(raw, dict) or raw.get("kind") not in _NODE_MODELS:
            raise FormatError(f"{where}.kind", f"must be one of {', '.join(_NODE_MODELS)}")
        node = _check(_NODE_MODELS[raw["kind"]], raw, f"{where} (id {raw.get('id')!r})")
        where = f"{where} (id {node.id!r})"
        if node.id in index:
            raise FormatError(f"{where}.id", "duplicate node id")
        index[node.id] = i
        kind[i] = KIND_NAMES.index(node.kind)
        names.append(node.name or str(node.id))
        if isinstance(node, _Compute):
            pod[i], dur[i] = node.pod, node.duration_s
            if node.pod >= pods:
                raise FormatError(f"{where}.pod", f"must be < pods ({pods})")
            continue
        if isinstance(node, _Comm):
            for fld in ("src", "dst"):
                if getattr(node, fld) >= pods:
                    raise FormatError(f"{where}.{fld}", f"must be < pods ({pods})")
            if node.src == node.dst:
                raise FormatError(
                    f"{where}.dst", "must differ from src (intra-pod traffic is not a comm node)"
                )
            pod[i], dst[i], nbytes[i], lat[i] = node.src, node.dst, node.bytes, node.latency_s
        pname = (
            node.phase
            if node.phase is not None
            else (f"node {node.id}" if kind[i] == COMM else None)
        )
        if pname is not None:
            if pname not in phase_id:
                phase_id[pname] = len(phases)
                phases.append(Phase("custom", pname))
            phase[i] = phase_id[pname]
    src, tgt = _edges(doc.get("edges"), index)
    return from_arrays(
        pods,
        kind=kind,
        pod=pod,
        dst=dst,
        duration_s=dur,
        nbytes=nbytes,
        latency_s=lat,
        phase=phase,
        edge_src=src,
        edge_dst=tgt,
        phases=tuple(phases),
        names=tuple(names),
    )


def _edges(raw: Any, index: dict) -> tuple[np.ndarray, np.ndarray]:
    if raw is None:
        raw = []
    if not isinstance(raw, list):
        raise FormatError("edges", "must be a list of [from, to] pairs")
    src, tgt = np.empty(len(raw), np.int64), np.empty(len(raw), np.int64)
    for k, e in enumerate(raw):
        if not isinstance(e, list | tuple) or len(e) != 2:
            raise FormatError(f"edges[{k}]", "must be a [from, to] pair")
        for end, node_id in zip(("from", "to"), e, strict=True):
            if node_id not in index:
                raise FormatError(f"edges[{k}]", f"{end} node {node_id!r} does not exist")
        src[k], tgt[k] = index[e[0]], index[e[1]]
        if src[k] == tgt[k]:
            raise FormatError(f"edges[{k}]", f"self-loop on node {e[0]!r}")
    return src, tgt


# -- traffic sequences ------------------------------------------------------------------------
def traffic_to_dict(traffic: PhaseTraffic) -> dict[str, Any]:
    phases = []
    for k, ph in enumerate(traffic.phases):
        s, d, b = traffic.flows(k)
        phases.append(
            {
                "name": ph.name,
                "kind": ph.kind,
                "intra_pod_bytes": ph.intra_pod_bytes,
                "flows": [[int(u), int(v), float(x)] for u, v, x in zip(s, d, b, strict=True)],
            }
        )
    return {"format": TRAFFIC_FORMAT, "version": VERSION, "pods": traffic.n_pods, "phases": phases}


def traffic_from_dict(doc: Any) -> PhaseTraffic:
    pods = _header(doc, TRAFFIC_FORMAT)
    raw = doc.get("phases")
    if not isinstance(raw, list) or not raw:
        raise FormatError("phases", "must be a non-empty list")
    phases, srcs, dsts, nbs, offsets = [], [], [], [], [0]
    seen = set()
    for k, p in enumerate(raw):
        where = f"phases[{k}]"
        ph = _check(_Phase, p, where)
        if ph.name in seen:
            raise FormatError(f"{where}.name", f"duplicate phase name {ph.name!r}")
        seen.add(ph.name)
        if (ph.flows is None) == (ph.matrix is None):
            raise FormatError(where, "give exactly one of 'flows' and 'matrix'")
        if ph.matrix is not None:
            m = np.asarray(ph.matrix, dtype=float)
            if m.shape != (pods, pods):
                raise FormatError(f"{where}.matrix", f"must be {pods}x{pods}, got {m.shape}")
            if (m < 0).any():
                raise FormatError(f"{where}.matrix", "bytes must be >= 0")
            if np.diag(m).any():
                raise FormatError(f"{where}.matrix", "diagonal must be 0 (intra-pod traffic)")
            s, d = np.nonzero(m)
            b = m[s, d]
        else:
            f = np.asarray(ph.flows, dtype=float).reshape(-1, 3)
            s, d, b = f[:, 0].astype(np.int64), f[:, 1].astype(np.int64), f[:, 2]
            for j in range(s.size):
                fw = f"{where}.flows[{j}]"
                if not (0 <= s[j] < pods and 0 <= d[j] < pods):
                    raise FormatError(fw, f"pods must be in [0, {pods})")
                if s[j] == d[j]:
                    raise FormatError(fw, "src must differ from dst")
                if not b[j] > 0:
                    raise FormatError(fw, "bytes must be > 0")
        phases.append(Phase(ph.kind, ph.name, ph.intra_pod_bytes))
        srcs.append(s)
        dsts.append(d)
        nbs.append(b)
        offsets.append(offsets[-1] + s.size)
    return PhaseTraffic(
        pods,
        tuple(phases),
        np.asarray(offsets, np.int64),
        np.concatenate(srcs).astype(np.int32),
        np.concatenate(dsts).astype(np.int32),
        np.concatenate(nbs).astype(float),
    )


# -- files ------------------------------------------------------------------------------------
def save(obj: TaskDAG | PhaseTraffic, path: str | Path) -> Path:
    """Write a DAG or a traffic sequence as interchange JSON (atomically)."""
    doc = dag_to_dict(obj) if isinstance(obj, TaskDAG) else traffic_to_dict(obj)
    return write_text(path, json.dumps(doc, separators=(",", ":")) + "\n")


def load(path: str | Path) -> TaskDAG | PhaseTraffic:
    """Read either interchange format, dispatching on its ``format`` field."""
    doc = _read_json(Path(path))
    fmt = doc.get("format") if isinstance(doc, dict) else None
    if fmt == TRAFFIC_FORMAT:
        return traffic_from_dict(doc)
    if fmt == DAG_FORMAT:
        return dag_from_dict(doc)
    raise FormatError("format", f"must be '{DAG_FORMAT}' or '{TRAFFIC_FORMAT}', got {fmt!r}")
