"""GPU-level (rank-level) communication folded into pod-level task DAGs.

Two layers, both used by the job builder (:mod:`~trainfabric.workloads.build`) and by the
trace readers (:mod:`~trainfabric.workloads.chakra`):

* :class:`PodPhases` aggregates GPU-level flows into the pod-level phases of a
  :class:`~trainfabric.workloads.dag.DagBuilder`: rank ``r`` lives on pod ``r // g``
  (``g = gpus_per_pod``); the flows of one concurrent step are summed per directed pod pair
  ``(u, v)``, ``u != v``, into one comm node of ``B_uv = sum_{r->s, pod(r)=u, pod(s)=v} b_rs``
  bytes, and the bytes of flows inside a pod are kept as the phase's ``intra_pod_bytes``
  (they stay on the scale-up domain). With GPU transfers (``gpus_per_pod`` given to the
  DagBuilder), each comm node also keeps the GPU pairs it aggregates and their shares of
  ``B_uv`` (:class:`~trainfabric.workloads.dag.GpuTransfers`).
* :class:`RankProgram` is a per-rank program (compute, collectives, point-to-point sends)
  built on :class:`PodPhases`: the pod-level DAG of what each GPU does.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from trainfabric.workloads import collectives
from trainfabric.workloads.dag import DagBuilder, Phase, TaskDAG

# A step aggregated to pod pairs: (pair keys u * n_pods + v, their bytes, intra-pod bytes,
# GPU-transfer pattern ids or None).
Aggregated = tuple[np.ndarray, np.ndarray, float, np.ndarray | None]

ALGORITHMS = ("ring", "halving_doubling")
REDUCING_OPS = {
    "all_reduce": collectives.ALL_REDUCE,
    "reduce_scatter": collectives.REDUCE_SCATTER,
    "all_gather": collectives.ALL_GATHER,
}
OPS = (*REDUCING_OPS, "all_to_all", "barrier")


class PodPhases:
    """Adds GPU-level flows to a DagBuilder as pod-level phases (module doc).

    ``builder``: the DagBuilder over ``builder.n_pods`` pods (with GPU transfers when it has
    a pattern table); ``gpus_per_pod``: ``g``, rank ``r`` on pod ``r // g``; ``latency_s``:
    the start-up latency of every comm node (s).
    """

    def __init__(self, builder: DagBuilder, gpus_per_pod: int, latency_s: float):
        self.b = builder
        self.gpus_per_pod = gpus_per_pod
        self.latency_s = latency_s

    def pod(self, ranks) -> np.ndarray:
        return np.asarray(ranks) // self.gpus_per_pod

    def aggregate(self, src_ranks, dst_ranks, nbytes) -> Aggregated:
        """The flows ``src_ranks[i] -> dst_ranks[i]`` of ``nbytes[i]`` bytes (broadcast
        together) summed per directed pod pair: ``(pair keys, their bytes, intra-pod bytes,
        GPU patterns or None)``; flows of zero bytes are dropped."""
        sr, dr, w = (
            a.ravel()
            for a in np.broadcast_arrays(
                np.asarray(src_ranks), np.asarray(dst_ranks), np.asarray(nbytes, dtype=float)
            )
        )
        su, sv = self.pod(sr), self.pod(dr)
        inter = (su != sv) & (w > 0)
        key = su[inter].astype(np.int64) * self.b.n_pods + sv[inter]
        if self.b.patterns is None:
            keys, inv = np.unique(key, return_inverse=True)
            agg, pattern = np.bincount(inv, weights=w[inter], minlength=keys.size), None
        else:
            keys, agg, pattern = self._gpu_patterns(key, sr[inter], dr[inter], w[inter])
        return keys, agg, float(w[~inter].sum()), pattern

    def _gpu_patterns(self, key, src_ranks, dst_ranks, w):
        """Pod pairs (sorted keys), their bytes, and their GPU-transfer pattern ids.

        Transfers between the same two GPUs are merged; a pair's bytes are the sum of its
        merged transfers, so that ``bytes x share`` returns each transfer."""
        g = self.gpus_per_pod
        gkey = (key * g + src_ranks % g) * g + dst_ranks % g
        ukeys, inv = np.unique(gkey, return_inverse=True)
        tw = np.bincount(inv.ravel(), weights=w, minlength=ukeys.size)
        keys, first, counts = np.unique(ukeys // (g * g), return_index=True, return_counts=True)
        agg = np.add.reduceat(tw, first) if keys.size else np.zeros(0)
        share = tw / np.repeat(agg, counts)
        ids = self.b.patterns.intern(first, counts, (ukeys // g) % g, ukeys % g, share)
        return keys, agg, ids

    def add(
        self, kind: str, name: str, aggregated: Aggregated, preds=(), succs=(), meta=None
    ) -> tuple[int, int]:
        """One phase of the aggregated pairs after ``preds`` and before ``succs`` (``meta``:
        the collective fields of :class:`Phase`); returns its (entry, exit) nodes."""
        keys, agg, intra, pattern = aggregated
        n = self.b.n_pods
        return self.b.phase(
            kind,
            name,
            keys // n,
            keys % n,
            agg,
            self.latency_s,
            intra,
            preds,
            succs,
            meta=meta,
            pair_pattern=pattern,
        )

    def aggregate_steps(self, groups_steps) -> list[Aggregated]:
        """Concurrent collectives (one list of Steps per group, all of one length) step by
        step: step ``k`` of every group is one aggregated step. A ring repeats one Step
        object, so equal steps are aggregated once."""
        done: dict[tuple, Aggregated] = {}
        out = []
        for parts in zip(*groups_steps, strict=True):
            key = tuple(map(id, parts))
            if key not in done:
                done[key] = self.aggregate(
                    *(
                        np.concatenate([getattr(s, f) for s in parts])
                        for f in ("src", "dst", "bytes")
                    )
                )
            out.append(done[key])
        return out

    def chain(self, kind, name, steps: Sequence[Aggregated], preds, meta=None) -> list[int]:
        """Aggregated ``steps`` as phases named ``{name} k{step}``, each after the previous
        one (the first after ``preds``); returns the last phase's exit (``preds`` without
        steps)."""
        last = list(preds)
        for k, aggregated in enumerate(steps):
            _, exit_ = self.add(kind, f"{name} k{k}", aggregated, last, (), meta)
            last = [exit_]
        return last

    def steps(self, kind, name, groups_steps, preds, meta=None) -> list[int]:
        """Chain the steps of concurrent collectives (one list of Steps per group) as phases
        named ``{name} k{step}`` (:meth:`aggregate_steps`, :meth:`chain`)."""
        return self.chain(kind, name, self.aggregate_steps(groups_steps), preds, meta)


def collective_steps(op: str, ranks, size_bytes, algorithm: str = "ring") -> list[collectives.Step]:
    """The GPU-level steps of one collective ``op`` over ``ranks`` (in ring order).

    ``size_bytes`` is :mod:`~trainfabric.workloads.collectives`' buffer ``S``: what each rank
    holds before an all-reduce or a reduce-scatter, or receives in all from an all-gather.
    ``algorithm`` (``ring`` or ``halving_doubling``) decides the reducing collectives, whose
    ``n`` ranks each send ``2 (n-1)/n S`` (all-reduce) or ``(n-1)/n S`` (the others).
    An all-to-all is direct (one step, every ordered pair at once): rank ``i`` sends
    ``S_i / n`` to each other rank, ``size_bytes`` a scalar or one ``S_i`` per rank. A
    barrier moves nothing (no step).
    """
    if op == "barrier":
        return []
    if op == "all_to_all":
        n = len(ranks)
        per_rank = np.broadcast_to(np.asarray(size_bytes, dtype=float), (n,))
        matrix = np.repeat(per_rank[:, None] / n, n, axis=1)
        np.fill_diagonal(matrix, 0.0)
        return collectives.all_to_all(ranks, matrix=matrix)
    return REDUCING_OPS[op][algorithm](ranks, float(size_bytes))


class RankProgram:
    """A GPU-level program as the pod-level :class:`TaskDAG` that the presets also build.

    Rank ``r`` (a GPU, ``0 <= r < n_ranks``) lives on pod ``r // g`` of
    ``ceil(n_ranks / g)`` pods, ``g = gpus_per_pod``. Every method takes ``preds``, the DAG
    nodes that must finish first (what earlier calls returned), and returns the DAG nodes
    whose end is its own end:

    * :meth:`compute`: ``duration_s`` seconds on the rank's pod (one compute node per call:
      ranks of one pod compute in parallel unless ``preds`` order them);
    * :meth:`collective`: a collective over ``ranks`` starting when all ``preds`` are done
      (an entry barrier joins every participant), as its steps
      (:func:`collective_steps`), each step one phase of pod-pair comm nodes aggregated by
      :class:`PodPhases`; a comm node of ``B`` bytes lasts ``latency_s + 8 B / rate`` at
      ``rate`` bit/s, so a ring all-reduce of ``S`` bytes over ``n`` ranks on ``n`` pods
      lasts ``2 (n-1) (latency_s + 8 S / (n rate))``;
    * :meth:`send`: ``nbytes`` from rank ``src`` to ``dst`` (one phase: one comm node
      between two pods, none inside a pod);
    * :meth:`join`: a zero-duration barrier after ``preds``.

    ``gpu_flows`` keeps each comm node's GPU transfers (``TaskDAG.gpu``), so that the fabric's
    task engine can run the DAG GPU by GPU. Units: seconds, bytes.
    """

    def __init__(
        self,
        n_ranks: int,
        gpus_per_pod: int = 1,
        latency_s: float = 5e-6,
        algorithm: str = "ring",
        gpu_flows: bool = True,
    ):
        if algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
        self.n_ranks = n_ranks
        self.gpus_per_pod = gpus_per_pod
        self.algorithm = algorithm
        n_pods = -(-n_ranks // gpus_per_pod)
        self.b = DagBuilder(n_pods, gpus_per_pod if gpu_flows else None)
        self.pod_phases = PodPhases(self.b, gpus_per_pod, latency_s)
        self._steps: dict[tuple, list[Aggregated]] = {}

    def compute(self, rank: int, duration_s: float, preds: Iterable[int] = (), name="") -> list:
        node = self.b.compute(rank // self.gpus_per_pod, duration_s, name)
        self.b.edges(preds, node)
        return [node]

    def join(self, preds: Iterable[int], name: str = "") -> list[int]:
        node = self.b.barrier(name=name)
        self.b.edges(preds, node)
        return [node]

    def collective(
        self, op: str, ranks, size_bytes, preds: Iterable[int] = (), name: str = ""
    ) -> list[int]:
        """``op`` (``all_reduce``, ``reduce_scatter``, ``all_gather``, ``all_to_all``,
        ``barrier``) over ``ranks`` (ring order) with buffer ``size_bytes``
        (:func:`collective_steps`); a barrier or a collective of one rank is a join of
        ``preds``. Equal collectives (op, ranks, sizes) are aggregated once."""
        ranks = tuple(int(r) for r in ranks)
        sizes = tuple(np.atleast_1d(np.asarray(size_bytes, dtype=float)).tolist())
        key = (op, ranks, sizes)
        if len(ranks) < 2 or op == "barrier":
            return self.join(preds, name)
        if key not in self._steps:
            steps = collective_steps(op, ranks, size_bytes, self.algorithm)
            self._steps[key] = self.pod_phases.aggregate_steps([steps])
        meta = Phase("", "", group=name, op=op, n_ranks=len(ranks), n_collectives=1)
        return self.pod_phases.chain(op, name, self._steps[key], list(preds), meta)

    def send(
        self, src: int, dst: int, nbytes: float, preds: Iterable[int] = (), name: str = ""
    ) -> list[int]:
        meta = Phase("", "", group=name, op="send_recv", n_ranks=2, n_collectives=1)
        aggregated = self.pod_phases.aggregate([src], [dst], [nbytes])
        _, exit_ = self.pod_phases.add("send_recv", name, aggregated, list(preds), (), meta)
        return [exit_]

    def build(self) -> TaskDAG:
        return self.b.build()
