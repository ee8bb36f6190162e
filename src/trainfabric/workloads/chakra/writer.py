"""A task DAG as a Chakra execution trace that astra-sim runs: ``NAME.RANK.et`` per rank and
astra-sim's process groups (``groups.json``, its ``--comm-group-configuration``).

**Ranks are pods.** Rank ``p`` of the trace is pod ``p`` of the DAG: a GPU-level trace when
the job has one GPU per pod (``gpus_per_pod = 1``), else one endpoint per pod carrying its
GPUs' inter-pod bytes (transfers inside a pod are not in the trace).

**Items.** The DAG is contracted into items, each one node per rank it involves
(:func:`trace_items`):

* a compute node is a ``COMP_NODE`` on its pod (``duration_micros``: the duration rounded to
  whole microseconds, Chakra's unit);
* the phases of one collective (one ``Phase.group``, op ``all_reduce``, ``reduce_scatter``,
  ``all_gather`` or ``all_to_all``) are one ``COMM_COLL_NODE`` on each pod of the group, with
  a process group of those pods, when their comm nodes are exactly the steps that
  :func:`~trainfabric.workloads.ranks.collective_steps` gives for the op over those pods
  under ``algorithm`` (each step's pod pairs, its bytes within 1 B): the reader
  (:mod:`~trainfabric.workloads.chakra.convert`) rebuilds them from ``comm_size``, the
  buffer that makes each rank send what it sends in the DAG (``2 (n-1)/n S`` for an
  all-reduce, ``(n-1)/n S`` for a reduce-scatter, ``(n-1) c`` for an all-gather of
  contribution ``c``, ``(n-1)/n S_i`` for rank ``i`` of an all-to-all);
* every other comm node (point-to-point sends, and the steps of a collective without that
  form, e.g. a skewed MoE all-to-all whose ranks send unequal bytes to their peers) is a
  ``COMM_SEND_NODE`` on its source pod and a ``COMM_RECV_NODE`` on its destination, tagged
  with the item's number;
* barriers are contracted away: an item depends on the items it reaches through them.

A dependency becomes a ``data_deps`` entry where both items have a node on the rank; the
others (a phase barrier joining pods, the previous step on other ranks) are carried by the
messages and collectives themselves, and counted as ``cross_rank_edges_dropped``. Node ids
are the item numbers, the same on every rank.

**Round trip.** Read back by :func:`~trainfabric.workloads.chakra.convert.load_chakra` (one
GPU per pod, the same algorithm), a DAG whose phases are all collectives of this form or
single sends gives the same DAG (nodes, edges, bytes) with compute times in whole
microseconds; a phase of several sends (the DP replicas of one pipeline boundary) comes back
as one phase per send, without the barriers that joined them.

``sends_first``: astra-sim runs one send or collective at a time per GPU and picks the lowest
node id among the ready ones; with this flag each collective also waits for the sends of its
rank that do not depend on it, so that a pipeline's sends do not queue behind a data-parallel
collective that our engine runs beside them.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trainfabric import io
from trainfabric.errors import ConfigError
from trainfabric.workloads.chakra.convert import buffer_bytes
from trainfabric.workloads.chakra.schema import (
    SCHEMA_VERSION,
    CollectiveCommType,
    GlobalMetadata,
    Node,
    NodeType,
    attribute,
    encode_stream,
)
from trainfabric.workloads.chakra.trace import MAX_COMM_BYTES
from trainfabric.workloads.dag import COMM, COMPUTE, TaskDAG
from trainfabric.workloads.ranks import collective_steps

COLLECTIVE_TYPES = {
    "all_reduce": CollectiveCommType.ALL_REDUCE,
    "reduce_scatter": CollectiveCommType.REDUCE_SCATTER,
    "all_gather": CollectiveCommType.ALL_GATHER,
    "all_to_all": CollectiveCommType.ALL_TO_ALL,
}
GROUPS_FILE = "groups.json"


@dataclass
class Item:
    """One node per rank of ``ranks``: ``kind`` ``comp`` (``duration_us``), ``p2p``
    (``src`` -> ``dst``, ``size``) or a collective op (``sizes``: comm_size per rank);
    ``preds``: the items it depends on."""

    kind: str
    ranks: tuple[int, ...]
    duration_us: int = 0
    src: int = -1
    dst: int = -1
    size: int = 0
    sizes: dict[int, int] | None = None
    preds: frozenset[int] = frozenset()


@dataclass(frozen=True)
class WrittenTrace:
    """What :func:`write_trace` wrote: the files, its items, the nodes over all files, the
    dependencies kept and dropped (module doc), the process groups, and the collective
    groups written as their sends."""

    files: tuple[Path, ...]
    items: int
    et_nodes: int
    deps_kept: int
    cross_rank_edges_dropped: int
    process_groups: int
    collectives_as_sends: int


def _sent_fraction(op: str, n: int) -> float:
    """Bytes each of ``n`` ranks sends, as a fraction of the collective's buffer."""
    return (2.0 if op == "all_reduce" else 1.0) * (n - 1) / n


def _collective_form(dag: TaskDAG, op: str, phase_nodes: list[np.ndarray], algorithm: str):
    """``(pods, comm_size per pod)`` when the group's comm nodes are the steps of one ``op``
    over its pods (module doc), else None."""
    comm = np.concatenate(phase_nodes)
    src, dst, nbytes = dag.pod[comm], dag.dst[comm], dag.bytes[comm]
    pods = np.unique(np.concatenate([src, dst]))
    n = pods.size
    sent = np.bincount(np.searchsorted(pods, src), weights=nbytes, minlength=n)
    per_rank = sent / _sent_fraction(op, n)
    if op == "all_to_all":
        sizes = np.round(per_rank).astype(np.int64)
        buffer = sizes.astype(float)
    else:
        if not np.allclose(per_rank, per_rank[0], rtol=1e-9, atol=0.5):
            return None
        size = round(per_rank[0] / n) if op == "all_gather" else round(per_rank[0])
        sizes = np.full(n, size, dtype=np.int64)
        buffer = buffer_bytes(op, float(size), n)
    steps = collective_steps(op, pods, buffer, algorithm)
    if len(steps) != len(phase_nodes):
        return None
    for step, nodes in zip(steps, phase_nodes, strict=True):
        flows = zip(step.src.tolist(), step.dst.tolist(), step.bytes.tolist(), strict=True)
        want = sorted(f for f in flows if f[2] > 0)
        got = sorted(zip(*(a[nodes].tolist() for a in (dag.pod, dag.dst, dag.bytes)), strict=True))
        if len(want) != len(got) or any(
            w[:2] != g[:2] or abs(w[2] - g[2]) > 1.0 for w, g in zip(want, got, strict=True)
        ):
            return None
    return tuple(pods.tolist()), dict(zip(pods.tolist(), sizes.tolist(), strict=True))


def collective_forms(dag: TaskDAG, algorithm: str = "ring") -> dict[str, tuple | None]:
    """Per collective group with comm nodes, its ``(pods, comm_size per pod)`` as one
    Chakra collective, or None when it is written as its sends (module doc)."""
    groups: dict[str, list[int]] = defaultdict(list)
    for k, ph in enumerate(dag.phases):
        if ph.op in COLLECTIVE_TYPES:
            groups[ph.group_name].append(k)
    phase_nodes = dag.phase_nodes() if groups else []
    forms = {}
    for group, ks in groups.items():
        nodes = [phase_nodes[k] for k in ks if phase_nodes[k].size]
        if nodes:
            forms[group] = _collective_form(dag, dag.phases[ks[0]].op, nodes, algorithm)
    return forms


def trace_items(dag: TaskDAG, forms: dict[str, tuple | None]) -> list[Item]:
    """The DAG contracted into items (module doc), in the DAG's node order; ``forms``: the
    collective groups' (:func:`collective_forms`)."""
    items: list[Item] = []
    group_item: dict[str, int] = {}
    item_of = np.full(dag.n_nodes, -1, dtype=np.int64)
    for v in range(dag.n_nodes):
        ph = dag.phases[dag.phase[v]] if dag.phase[v] >= 0 else None
        if dag.kind[v] == COMPUTE:
            us = round(float(dag.duration_s[v]) * 1e6)
            item_of[v] = len(items)
            items.append(Item("comp", (int(dag.pod[v]),), duration_us=us))
        elif ph is not None and forms.get(ph.group_name) is not None:
            if ph.group_name not in group_item:
                pods, sizes = forms[ph.group_name]
                group_item[ph.group_name] = len(items)
                items.append(Item(ph.op, pods, sizes=sizes))
            item_of[v] = group_item[ph.group_name]
        elif dag.kind[v] == COMM:
            nbytes = float(dag.bytes[v])
            if nbytes > MAX_COMM_BYTES:
                raise ConfigError(f"nodes[{v}].bytes", f"over 2^50 B in one message: {nbytes:g}")
            src, dst = int(dag.pod[v]), int(dag.dst[v])
            item_of[v] = len(items)
            items.append(Item("p2p", (src, dst), src=src, dst=dst, size=round(nbytes)))
    incoming: list[set[int]] = [set() for _ in range(dag.n_nodes)]
    preds: list[set[int]] = [set() for _ in items]
    for v in range(dag.n_nodes):
        x = int(item_of[v])
        if x >= 0:
            preds[x] |= incoming[v] - {x}
        out = {x} if x >= 0 else incoming[v]
        for w in dag.indices[dag.indptr[v] : dag.indptr[v + 1]]:
            incoming[w] |= out
    for it, p in zip(items, preds, strict=True):
        it.preds = frozenset(p)
    return items


def _collectives_above(items: list[Item]) -> list[set[int]]:
    """Per item, the collective items it depends on, directly or not."""
    above: list[set[int]] = []
    for it in items:
        s: set[int] = set()
        for y in it.preds:
            s |= above[y] | ({y} if items[y].kind in COLLECTIVE_TYPES else set())
        above.append(s)
    return above


def _et_node(x: int, it: Item, rank: int, pg: int):
    """The Chakra node of item ``x`` on ``rank`` (its id is ``x`` on every rank)."""
    node = Node(id=x, name=f"{it.kind}_{x}")
    if it.kind == "comp":
        node.type = NodeType.COMP_NODE
        node.duration_micros = it.duration_us
        node.attr.append(attribute("is_cpu_op", bool_val=False))
    elif it.kind == "p2p":
        node.type = NodeType.COMM_SEND_NODE if rank == it.src else NodeType.COMM_RECV_NODE
        node.attr.extend(
            [
                attribute("comm_src", int32_val=it.src),
                attribute("comm_dst", int32_val=it.dst),
                attribute("comm_size", int64_val=it.size),
                attribute("comm_tag", int32_val=x),
                attribute("is_cpu_op", bool_val=False),
            ]
        )
    else:
        node.type = NodeType.COMM_COLL_NODE
        node.attr.extend(
            [
                attribute("comm_type", int64_val=COLLECTIVE_TYPES[it.kind]),
                attribute("comm_size", int64_val=it.sizes[rank]),
                attribute("pg_name", string_val=str(pg)),
                attribute("is_cpu_op", bool_val=False),
            ]
        )
    return node


def write_trace(
    dag: TaskDAG,
    folder: str | Path,
    name: str = "trace",
    algorithm: str = "ring",
    sends_first: bool = False,
) -> WrittenTrace:
    """Write ``dag`` as ``folder/NAME.RANK.et`` for ranks ``0 .. n_pods-1`` and
    ``folder/groups.json`` (module doc); ``algorithm``: the one the reader will run the
    collectives with (``ring`` as astra-sim's ``ring`` implementation)."""
    folder = Path(folder)
    forms = collective_forms(dag, algorithm)
    items = trace_items(dag, forms)
    groups: dict[tuple[int, ...], int] = {}
    pg = {
        x: groups.setdefault(it.ranks, len(groups) + 1)
        for x, it in enumerate(items)
        if it.kind in COLLECTIVE_TYPES
    }
    above = _collectives_above(items) if sends_first else []
    per_rank: list[list[int]] = [[] for _ in range(dag.n_pods)]
    for x, it in enumerate(items):
        for r in it.ranks:
            per_rank[r].append(x)
    kept = dropped = 0
    files = []
    for rank, xs in enumerate(per_rank):
        sends = [x for x in xs if items[x].kind == "p2p" and items[x].src == rank]
        nodes = [GlobalMetadata(version=SCHEMA_VERSION)]
        for x in xs:
            it = items[x]
            node = _et_node(x, it, rank, pg.get(x, 0))
            if sends_first and it.kind in COLLECTIVE_TYPES:
                node.data_deps.extend(y for y in sends if y not in it.preds and x not in above[y])
            for y in sorted(it.preds):
                if rank in items[y].ranks:
                    node.data_deps.append(y)
                    kept += 1
                else:
                    dropped += 1
            nodes.append(node)
        files.append(io.write_bytes(folder / f"{name}.{rank}.et", encode_stream(nodes)))
    io.write_text(folder / GROUPS_FILE, json.dumps({str(g): list(r) for r, g in groups.items()}))
    return WrittenTrace(
        files=tuple(files),
        items=len(items),
        et_nodes=sum(len(xs) for xs in per_rank),
        deps_kept=kept,
        cross_rank_edges_dropped=dropped,
        process_groups=len(groups),
        collectives_as_sends=sum(f is None for f in forms.values()),
    )
