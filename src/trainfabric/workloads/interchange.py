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

A phase may also name its collective (optional, as :class:`~trainfabric.workloads.dag.Phase`):
``group`` (the collective the step belongs to), ``op`` (``all_reduce``, ``reduce_scatter``,
``all_gather``, ``all_to_all``, ``send_recv``), ``n_ranks`` and ``n_collectives``.
Node ids are unique strings or integers; ``phases`` is optional (a comm node whose ``phase``
is not listed gets a phase of kind ``custom``; one without ``phase`` is a phase of its own).
Units: seconds and bytes. ``latency_s`` defaults to 0.

Traffic sequence, ``"format": "trainfabric.traffic"``, ``"version": 1``: phases in order, each
with ``flows`` (``[src, dst, bytes]`` triples) or a dense ``matrix`` (row = source pod)::

    {"format": "trainfabric.traffic", "version": 1, "pods": 3,
     "phases": [{"name": "a2a", "kind": "moe_dispatch", "flows": [[0, 1, 1e6], [1, 2, 2e6]]},
                {"name": "ring", "matrix": [[0, 1e6, 0], [0, 0, 1e6], [1e6, 0, 0]]}]}

Both are read by one strict reader (:func:`loads`, :func:`load`): the file's bytes go through
one pydantic ``validate_json`` call on a document model (a discriminated union of the two
formats on ``format``, and of node kinds on ``kind``), then the cross-references that a
schema cannot express (pods in range, unique ids and names, edges between existing nodes,
square matrices with a zero diagonal) are checked on the parsed arrays. The JSON is strict:
``NaN``/``Infinity``, numbers given as strings (``"1e8"``), booleans as numbers or ids
(``"id": true``) and fractional values where an integer is needed are refused, as are
unknown keys. Values must be sane as well as finite: ``0 < bytes <= 1e18`` (an exabyte),
times ``0 <= duration_s, latency_s <= 1e9`` s, ``1 <= pods <= 1,000,000``.

Every invalid file raises :class:`~trainfabric.errors.FormatError` whose field is the path
of the bad value in the document (``nodes[3].bytes``, ``phases[2].matrix[5]``, ``edges[4]``,
``version``); a file that cannot be read (missing, a directory, not UTF-8, not JSON) is a
:class:`~trainfabric.errors.ConfigError` naming the argument that gave it (``workload``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from trainfabric.errors import ConfigError, FormatError
from trainfabric.io import read_file, write_text
from trainfabric.workloads.dag import (
    BARRIER,
    COMM,
    COMPUTE,
    KIND_NAMES,
    Phase,
    TaskDAG,
    from_arrays,
)
from trainfabric.workloads.traffic import PhaseTraffic

DAG_FORMAT, TRAFFIC_FORMAT, VERSION = "trainfabric.taskdag", "trainfabric.traffic", 1
MAX_BYTES = 1e18  # bytes of one transfer or phase: an exabyte
MAX_SECONDS = 1e9  # one compute step or latency: about 32 years
MAX_PODS = 1_000_000
MAX_RANKS = 1 << 31  # ranks of one collective
PARSE_BYTES_PER_FILE_BYTE = 40  # peak memory of the parsed document per byte of JSON (measured)


NodeId = StrictStr | StrictInt
Pod = Annotated[int, Field(ge=0, lt=MAX_PODS)]
Bytes = Annotated[float, Field(gt=0, le=MAX_BYTES)]
Seconds = Annotated[float, Field(ge=0, le=MAX_SECONDS)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class _Compute(_Strict):
    id: NodeId
    kind: Literal["compute"]
    pod: Pod
    duration_s: Seconds
    name: str = ""


class _Comm(_Strict):
    id: NodeId
    kind: Literal["comm"]
    src: Pod
    dst: Pod
    bytes: Bytes
    latency_s: Seconds = 0.0
    phase: str | None = None
    name: str = ""


class _Barrier(_Strict):
    id: NodeId
    kind: Literal["barrier"]
    phase: str | None = None
    name: str = ""


_Node = Annotated[_Compute | _Comm | _Barrier, Field(discriminator="kind")]
_NODE_KINDS = ("compute", "comm", "barrier")


class _Phase(_Strict):
    name: str
    kind: str = "custom"
    intra_pod_bytes: Annotated[float, Field(ge=0, le=MAX_BYTES)] = 0.0


class _DagPhase(_Phase):
    """A task-DAG phase; the optional collective fields of :class:`Phase` (unknown if absent)."""

    group: str = ""
    op: Literal["", "all_reduce", "reduce_scatter", "all_gather", "all_to_all", "send_recv"] = ""
    n_ranks: Annotated[StrictInt, Field(ge=0, le=MAX_RANKS)] = 0
    n_collectives: Annotated[StrictInt, Field(ge=0, le=MAX_RANKS)] = 0


class _TrafficPhase(_Phase):
    flows: list[tuple[Pod, Pod, Bytes]] | None = None
    matrix: list[list[Annotated[float, Field(ge=0, le=MAX_BYTES)]]] | None = None

    @model_validator(mode="after")
    def _one_layout(self):
        if (self.flows is None) == (self.matrix is None):
            raise ValueError("give exactly one of 'flows' and 'matrix'")
        return self


class _DagDoc(_Strict):
    format: Literal["trainfabric.taskdag"]
    version: Annotated[int, Field(ge=VERSION, le=VERSION)]
    pods: Annotated[int, Field(ge=1, le=MAX_PODS)]
    phases: list[_DagPhase] = []
    nodes: Annotated[list[_Node], Field(min_length=1)]
    edges: list[tuple[NodeId, NodeId]] = []


class _TrafficDoc(_Strict):
    format: Literal["trainfabric.traffic"]
    version: Annotated[int, Field(ge=VERSION, le=VERSION)]
    pods: Annotated[int, Field(ge=1, le=MAX_PODS)]
    phases: Annotated[list[_TrafficPhase], Field(min_length=1)]


_DOCUMENT = TypeAdapter(Annotated[_DagDoc | _TrafficDoc, Field(discriminator="format")])


def _id_member(loc: tuple[Any, ...], k: int) -> bool:
    """Whether ``loc[k]`` is pydantic's label of a NodeId union member (``str``/``int``),
    the last element after a node's ``id`` or an edge end."""
    if k != len(loc) - 1 or k == 0 or loc[k] not in ("str", "int"):
        return False
    return loc[k - 1] == "id" or (isinstance(loc[k - 1], int) and "edges" in loc)


def _path(loc: tuple[Any, ...]) -> str:
    """``('trainfabric.taskdag', 'nodes', 3, 'comm', 'bytes')`` -> ``nodes[3].bytes``: list
    indices in brackets, the union tags (format and node kind) dropped."""
    parts: list[str] = []
    for k, p in enumerate(loc):
        if (k == 0 and p in (DAG_FORMAT, TRAFFIC_FORMAT)) or _id_member(loc, k):
            continue
        if isinstance(p, int):
            parts.append(f"[{p}]")
        elif p in _NODE_KINDS and len(parts) >= 2 and parts[-2] == "nodes":
            continue
        else:
            parts.append(f".{p}" if parts else str(p))
    return "".join(parts) or "<root>"


def _format_error(exc: ValidationError, field: str) -> ConfigError:
    """The first pydantic error as a FormatError naming the value's path in the document."""
    err = exc.errors(include_url=False)[0]
    kind, loc, msg = err["type"], tuple(err["loc"]), err["msg"]
    if kind == "json_invalid":
        return ConfigError(field, msg.replace("Invalid JSON", "invalid JSON"))
    if kind in ("union_tag_invalid", "union_tag_not_found") and len(loc) == 0:
        got = err.get("ctx", {}).get("tag", "nothing")
        return FormatError("format", f"must be '{DAG_FORMAT}' or '{TRAFFIC_FORMAT}', got {got!r}")
    if kind in ("dict_type", "model_type", "model_attributes_type") and len(loc) == 0:
        return FormatError("<root>", "must be a JSON object")
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        return FormatError(f"{_path(loc)}.kind", f"must be one of {', '.join(_NODE_KINDS)}")
    if loc[1:] == ("version",):
        return FormatError(
            "version", f"unsupported version {err['input']!r} (this reads {VERSION})"
        )
    if _id_member(loc, len(loc) - 1):  # a node id (in a node or an edge)
        return FormatError(_path(loc), "must be a string or an integer")
    return FormatError(_path(loc), msg.removeprefix("Value error, "))


def _first(bad: np.ndarray) -> int | None:
    """Index of the first True of ``bad``, None when there is none."""
    hits = np.flatnonzero(bad)
    return int(hits[0]) if hits.size else None


# -- task DAG ---------------------------------------------------------------------------------
def dag_to_dict(dag: TaskDAG) -> dict[str, Any]:
    """The DAG in interchange form (node ids are the DAG's topological indices); a DAG
    with phase nodes (:class:`~trainfabric.workloads.dag.PairSets`) has none: a ValueError
    says to build it with one node per pod pair."""
    if dag.pairs is not None:
        raise ValueError(
            "a DAG with phase nodes has no interchange form: build it with phase_nodes=False"
        )
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
        "phases": [_phase_doc(p) for p in dag.phases],
        "nodes": nodes,
        "edges": dag.edges.tolist(),
    }


def _phase_doc(p: Phase) -> dict:
    """A phase as JSON; the collective fields only when known."""
    doc = {"name": p.name, "kind": p.kind, "intra_pod_bytes": p.intra_pod_bytes}
    extra = {"group": p.group, "op": p.op, "n_ranks": p.n_ranks, "n_collectives": p.n_collectives}
    return doc | {k: v for k, v in extra.items() if v}


def _dag(doc: _DagDoc) -> TaskDAG:
    """The validated document as a TaskDAG, after the cross-reference checks."""
    phases = [
        Phase(p.kind, p.name, p.intra_pod_bytes, p.group, p.op, p.n_ranks, p.n_collectives)
        for p in doc.phases
    ]
    phase_id = _unique([p.name for p in phases], "phases", "name")
    nodes = doc.nodes
    index = _unique([n.id for n in nodes], "nodes", "id")
    cols = _node_columns(nodes)
    _check_pods(doc.pods, cols["kind"], cols["pod"], cols["dst"])
    phase = np.full(len(nodes), -1, np.int32)
    for i, name in enumerate(cols["phase_name"]):
        if name is not None:
            if name not in phase_id:
                phase_id[name] = len(phases)
                phases.append(Phase("custom", name))
            phase[i] = phase_id[name]
    src, tgt = _edges(doc.edges, index)
    return from_arrays(
        doc.pods,
        kind=cols["kind"],
        pod=cols["pod"],
        dst=cols["dst"],
        duration_s=cols["duration_s"],
        nbytes=cols["bytes"],
        latency_s=cols["latency_s"],
        phase=phase,
        edge_src=src,
        edge_dst=tgt,
        phases=tuple(phases),
        names=tuple(n.name or str(n.id) for n in nodes),
    )


def _node_columns(nodes: list) -> dict[str, Any]:
    """The nodes as columns (one pass): kind code, pod (compute) or src (comm), dst, seconds,
    bytes, latency and the phase name (a comm node without one: ``node <id>``)."""
    n = len(nodes)
    kind = np.empty(n, np.int8)
    pod, dst = np.full(n, -1, np.int32), np.full(n, -1, np.int32)
    dur, nbytes, lat = np.zeros(n), np.zeros(n), np.zeros(n)
    phase_name: list[str | None] = [None] * n
    for i, node in enumerate(nodes):
        if isinstance(node, _Compute):
            kind[i], pod[i], dur[i] = COMPUTE, node.pod, node.duration_s
        elif isinstance(node, _Comm):
            kind[i], pod[i], dst[i] = COMM, node.src, node.dst
            nbytes[i], lat[i] = node.bytes, node.latency_s
            phase_name[i] = node.phase if node.phase is not None else f"node {node.id}"
        else:
            kind[i], phase_name[i] = BARRIER, node.phase
    return {
        "kind": kind,
        "pod": pod,
        "dst": dst,
        "duration_s": dur,
        "bytes": nbytes,
        "latency_s": lat,
        "phase_name": phase_name,
    }


def _unique(keys: list, where: str, attr: str) -> dict:
    """``{key: position}``; a repeated key is a FormatError naming its second occurrence."""
    seen: dict = {}
    for i, key in enumerate(keys):
        if key in seen:
            raise FormatError(f"{where}[{i}].{attr}", f"duplicate {attr} {key!r}")
        seen[key] = i
    return seen


def _check_pods(pods: int, kind: np.ndarray, pod: np.ndarray, dst: np.ndarray) -> None:
    """Every pod index < ``pods``; a comm node's ``src`` differs from its ``dst``."""
    comm = kind == COMM
    checks = (
        ((kind == COMPUTE) & (pod >= pods), "pod", f"must be < pods ({pods})"),
        (comm & (pod >= pods), "src", f"must be < pods ({pods})"),
        (comm & (dst >= pods), "dst", f"must be < pods ({pods})"),
        (comm & (pod == dst), "dst", "must differ from src (intra-pod traffic is not a comm node)"),
    )
    for bad, field, message in checks:
        i = _first(bad)
        if i is not None:
            raise FormatError(f"nodes[{i}].{field}", message)


def _edges(raw: list[tuple[Any, Any]], index: dict) -> tuple[np.ndarray, np.ndarray]:
    """Edge endpoints as node positions; unknown nodes and self-loops name the edge."""
    src, tgt = np.empty(len(raw), np.int64), np.empty(len(raw), np.int64)
    for k, edge in enumerate(raw):
        for end, node_id in zip(("from", "to"), edge, strict=True):
            if node_id not in index:
                raise FormatError(f"edges[{k}]", f"{end} node {node_id!r} does not exist")
        src[k], tgt[k] = index[edge[0]], index[edge[1]]
        if src[k] == tgt[k]:
            raise FormatError(f"edges[{k}]", f"self-loop on node {edge[0]!r}")
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


def _traffic(doc: _TrafficDoc) -> PhaseTraffic:
    """The validated document as a PhaseTraffic, after the per-phase shape and pod checks."""
    _unique([p.name for p in doc.phases], "phases", "name")
    flows = [_phase_flows(p, doc.pods, f"phases[{k}]") for k, p in enumerate(doc.phases)]
    sizes = [f[0].size for f in flows]
    return PhaseTraffic(
        doc.pods,
        tuple(Phase(p.kind, p.name, p.intra_pod_bytes) for p in doc.phases),
        np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
        np.concatenate([f[0] for f in flows]).astype(np.int32),
        np.concatenate([f[1] for f in flows]).astype(np.int32),
        np.concatenate([f[2] for f in flows]).astype(float),
    )


def _phase_flows(ph: _TrafficPhase, pods: int, where: str) -> tuple[np.ndarray, ...]:
    """(src, dst, bytes) of one phase from its flow list or its dense matrix."""
    if ph.matrix is not None:
        m = _square(ph.matrix, pods, f"{where}.matrix")
        s, d = np.nonzero(m)
        return s, d, m[s, d]
    f = np.asarray(ph.flows, dtype=float).reshape(-1, 3)
    s, d = f[:, 0].astype(np.int64), f[:, 1].astype(np.int64)
    for bad, message in (
        (np.maximum(s, d) >= pods, f"pods must be < {pods}"),
        (s == d, "src must differ from dst"),
    ):
        j = _first(bad)
        if j is not None:
            raise FormatError(f"{where}.flows[{j}]", message)
    return s, d, f[:, 2]


def _square(rows: list[list[float]], pods: int, where: str) -> np.ndarray:
    """A ``pods x pods`` matrix with a zero diagonal (entries already finite and >= 0)."""
    if len(rows) != pods:
        raise FormatError(where, f"must have {pods} rows (one per pod), got {len(rows)}")
    for i, row in enumerate(rows):
        if len(row) != pods:
            raise FormatError(f"{where}[{i}]", f"must have {pods} entries, got {len(row)}")
    m = np.asarray(rows, dtype=float).reshape(pods, pods)
    i = _first(np.diag(m) != 0)
    if i is not None:
        raise FormatError(f"{where}[{i}][{i}]", "diagonal must be 0 (intra-pod traffic)")
    return m


# -- files ------------------------------------------------------------------------------------
def save(obj: TaskDAG | PhaseTraffic, path: str | Path) -> Path:
    """Write a DAG or a traffic sequence as interchange JSON (atomically)."""
    doc = dag_to_dict(obj) if isinstance(obj, TaskDAG) else traffic_to_dict(obj)
    return write_text(path, json.dumps(doc, separators=(",", ":"), allow_nan=False) + "\n")


def loads(data: str | bytes, field: str = "workload") -> TaskDAG | PhaseTraffic:
    """Read either interchange format from JSON text (module doc); ``field`` names the
    argument the text came from in errors about the text as a whole (not JSON)."""
    try:
        doc = _DOCUMENT.validate_json(data)
    except ValidationError as exc:
        raise _format_error(exc, field) from None
    return _dag(doc) if isinstance(doc, _DagDoc) else _traffic(doc)


def load(path: str | Path, field: str = "workload") -> TaskDAG | PhaseTraffic:
    """Read an interchange file. A missing, unreadable, directory or non-UTF-8 file is a
    ConfigError naming ``field``; a malformed one a FormatError naming the value's path, its
    message ending with the file's name."""
    path = Path(path)
    data = _read_bytes(path, field)
    try:
        return loads(data, field)
    except FormatError as exc:
        raise FormatError(exc.field, f"{exc.message} (in {path})") from None
    except ConfigError as exc:
        raise ConfigError(exc.field, f"{path}: {exc.message}") from None


def _read_bytes(path: Path, field: str) -> bytes:
    """The file's bytes, checked to be UTF-8 and small enough to parse in memory."""
    data = read_file(path, field, "JSON file", parse_factor=PARSE_BYTES_PER_FILE_BYTE)
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(field, f"{path}: not a UTF-8 text file (byte {exc.start})") from None
    return data
