"""A Chakra trace as the task DAG the fabric's task engine runs (GPU transfers kept) and
whose pod-level view the OCS planner reads: the same aggregation as the presets
(:class:`~trainfabric.workloads.ranks.RankProgram`).

Node by node, in the trace's run order (:class:`~trainfabric.workloads.chakra.trace.ChakraTrace`):

* a ``COMP_NODE`` (and any node that is not communication) is a compute node of
  ``duration_micros · 1e-6`` s on the pod of its rank, after its data dependencies;
* a collective starts when the data dependencies of its node on every one of its ranks have
  ended, and runs as :func:`~trainfabric.workloads.ranks.collective_steps` over its ranks in
  ascending order (each step one phase of pod-pair comm nodes). ``comm_size`` means what it
  means to astra-sim's collectives (``Ring.cc``): the whole buffer ``S`` of an all-reduce or a
  reduce-scatter (a ring sends ``S / n`` per step, ``2 (n-1)`` or ``n-1`` steps), each rank's
  contribution ``c`` to an all-gather (``n-1`` steps of ``c``: the gathered buffer is
  ``n c``), each rank's buffer ``S_i`` of an all-to-all (``S_i / n`` to each other rank, all
  at once: astra-sim's ``direct`` implementation). So on ``n`` ranks, one per pod, with
  links of ``r`` bit/s and latency ``L``, a ring all-reduce takes ``2 (n-1) (L + 8 S / (n
  r))``, an all-gather ``(n-1) (L + 8 c / r)``, an all-to-all ``L + 8 S / (n r)``.
  ``REDUCE_SCATTER_BLOCK`` is a reduce-scatter; ``BARRIER`` joins its ranks and moves
  nothing. ``BROADCAST``, ``REDUCE``, ``GATHER`` and ``SCATTER`` name no root rank in the
  schema: each rank's node takes its ``duration_micros``, as astra-sim runs a broadcast;
* a send is one transfer of ``comm_size`` bytes from its rank to ``comm_dst`` after its
  data dependencies; its receive ends when the transfer has and its own dependencies have.

Ranks ``r`` sit on pod ``r // gpus_per_pod``; transfers inside a pod stay on the scale-up
domain (a phase's ``intra_pod_bytes``).

One difference from astra-sim: it runs at most one compute and one communication node at a
time per GPU; the DAG orders nodes only by their dependencies (a trace written for
astra-sim orders what it must, :func:`~trainfabric.workloads.chakra.writer.write_trace`).
"""

from __future__ import annotations

from pathlib import Path

from trainfabric.errors import ConfigError, FormatError
from trainfabric.workloads.chakra.schema import CollectiveCommType as C
from trainfabric.workloads.chakra.schema import NodeType
from trainfabric.workloads.chakra.trace import ChakraTrace, read_trace, trace_counts
from trainfabric.workloads.dag import TaskDAG
from trainfabric.workloads.ranks import RankProgram

OPS = {
    C.ALL_REDUCE: "all_reduce",
    C.REDUCE_SCATTER: "reduce_scatter",
    C.REDUCE_SCATTER_BLOCK: "reduce_scatter",
    C.ALL_GATHER: "all_gather",
    C.ALL_TO_ALL: "all_to_all",
    C.BARRIER: "barrier",
}
TIMED = (C.BROADCAST, C.REDUCE, C.GATHER, C.SCATTER)  # no root in the schema (module doc)


def buffer_bytes(op: str, comm_size: float, n_ranks: int) -> float:
    """Chakra's ``comm_size`` as :func:`~trainfabric.workloads.ranks.collective_steps`'
    buffer: an all-gather's gathered ``n · comm_size``, else ``comm_size`` (module doc)."""
    return comm_size * n_ranks if op == "all_gather" else comm_size


def trace_dag(
    trace: ChakraTrace,
    gpus_per_pod: int = 1,
    latency_s: float = 5e-6,
    algorithm: str = "ring",
    gpu_flows: bool = True,
) -> TaskDAG:
    """The task DAG of ``trace`` (module doc), ranks on pods of ``gpus_per_pod`` GPUs, every
    comm node with start-up latency ``latency_s`` (s); ``algorithm`` (``ring`` or
    ``halving_doubling``) runs the all-reduces, reduce-scatters and all-gathers.
    ``gpu_flows``: keep each comm node's GPU transfers (``TaskDAG.gpu``)."""
    if gpus_per_pod < 1:
        raise ConfigError("gpus_per_pod", f"must be >= 1, got {gpus_per_pod}")
    prog = RankProgram(trace.n_ranks, gpus_per_pod, latency_s, algorithm, gpu_flows)
    ranks = trace.ranks
    index = [{node.id: i for i, node in enumerate(rt.nodes)} for rt in ranks]
    done: list[dict[int, list[int]]] = [{} for _ in ranks]
    coll_at = {(c.ranks[0], c.nodes[0]): c for c in trace.collectives}
    send_of = {(m.src, m.send): m for m in trace.messages}
    sent: dict[tuple[int, int], list[int]] = {}  # (dst rank, receive index) -> transfer

    def preds(rank: int, i: int) -> list[int]:
        deps = ranks[rank].nodes[i].data_deps
        return list(dict.fromkeys(x for d in deps for x in done[rank][index[rank][d]]))

    for rank, i in trace.order:
        node = ranks[rank].nodes[i]
        label = f"{node.name} r{rank} n{node.id}"
        if node.type == NodeType.COMM_COLL_NODE:
            c = coll_at[rank, i]
            members = list(zip(c.ranks, c.nodes, strict=True))
            if c.comm_type in TIMED:
                for r, j in members:
                    dur = ranks[r].nodes[j].duration_micros * 1e-6
                    done[r][j] = prog.compute(r, dur, preds(r, j), label)
                continue
            op = OPS[C(c.comm_type)]
            sizes = [ranks[r].nodes[j].comm_size or 0 for r, j in members]
            size = sizes if op == "all_to_all" else buffer_bytes(op, sizes[0], len(members))
            group = c.group or "all"
            entry = list(dict.fromkeys(x for r, j in members for x in preds(r, j)))
            try:
                out = prog.collective(op, c.ranks, size, entry, f"{op} {group} #{c.seq}")
            except ConfigError as exc:  # e.g. halving-doubling on 6 ranks
                where = ranks[rank].where(node)
                raise FormatError("comm_type", f"{where}: {exc.message}") from None
            for r, j in members:
                done[r][j] = out
        elif node.type == NodeType.COMM_SEND_NODE:
            m = send_of[rank, i]
            out = prog.send(rank, m.dst, m.size, preds(rank, i), label)
            done[rank][i] = sent[m.dst, m.recv] = out
        elif node.type == NodeType.COMM_RECV_NODE:
            own = preds(rank, i)
            transfer = sent[rank, i]
            done[rank][i] = prog.join(transfer + own, label) if own else transfer
        else:
            done[rank][i] = prog.compute(rank, node.duration_micros * 1e-6, preds(rank, i), label)
    return prog.build()


def load_chakra(
    path: str | Path,
    gpus_per_pod: int = 1,
    latency_s: float = 5e-6,
    algorithm: str = "ring",
) -> tuple[str, TaskDAG, dict[str, int]]:
    """Read, check and convert a Chakra trace: ``(name, task DAG, counts)``.

    ``path``: a folder of one trace's ``NAME.RANK.et`` files, one of them, or
    ``folder/NAME`` (:func:`~trainfabric.workloads.chakra.trace.read_trace`); the DAG is
    :func:`trace_dag`'s (with GPU transfers), the counts :func:`trace_counts`'. A malformed
    or inconsistent trace raises a FormatError naming the field, file, rank and node."""
    trace = read_trace(path)
    return trace.name, trace_dag(trace, gpus_per_pod, latency_s, algorithm), trace_counts(trace)


def dp_gradient_bytes(trace: ChakraTrace, gpus_per_pod: int = 1) -> float:
    """One data-parallel replica's gradient bytes (the DiLoCo sync payload): the
    ``comm_size`` of every all-reduce and reduce-scatter whose group leaves its pod, once per
    collective (each such group holds one shard of the replica; a tensor-parallel group stays
    inside its pod, so with one GPU per pod every reducing collective counts)."""
    reducing = (C.ALL_REDUCE, C.REDUCE_SCATTER, C.REDUCE_SCATTER_BLOCK)
    return float(
        sum(
            trace.ranks[c.ranks[0]].nodes[c.nodes[0]].comm_size
            for c in trace.collectives
            if c.comm_type in reducing and len({r // gpus_per_pod for r in c.ranks}) > 1
        )
    )
