"""Job -> task DAG of one training iteration (pod-level), with documented modelling choices.

Structure (one node chain per (pipeline stage, pod) — all shards of a stage on a pod run the
same operation on different GPUs, so one node stands for them with the longest duration):

* **Pipeline schedule.** Each stage runs its forward ``F_j`` and backward ``B_j`` operations
  for micro-batches ``j`` in schedule order: GPipe (all forwards, then all backwards) or 1F1B
  (``pp - p - 1`` warm-up forwards on stage ``p``, then alternating, then the cool-down);
  consecutive operations of a stage are sequenced on every pod that hosts it.
* **PP sends.** ``F_j`` on stage ``p`` -> phase ``pp_fwd`` (activations, every replica and TP
  rank at once) -> ``F_j`` on stage ``p+1``; gradients flow back by ``pp_bwd``. The phase
  couples the DP replicas of a stage boundary, which run in lockstep anyway.
* **MoE layers.** Inside an operation: non-expert compute -> ``moe_dispatch`` all-to-all ->
  expert compute (duration from the tokens the shard *receives*, so skew slows hot shards)
  -> ``moe_combine``; backward mirrors it (``moe_combine_bwd`` carries ``D``,
  ``moe_dispatch_bwd`` carries ``D^T``). Expert popularity is drawn once per MoE layer from
  the seed (:mod:`~trainfabric.workloads.moe`).
* **DP gradients.** After a stage's last backward, its dense gradients go through the DP
  collective (ring or halving-doubling; reduce-scatter + all-gather with the distributed
  optimiser, else all-reduce), then its expert gradients over the expert-DP groups; one phase
  per collective step. By default (``overlap = "none"``) gradient communication does not
  overlap the backward pass (the conservative, schedule-free reading); ``overlap =
  "bucketed"`` reduces gradient buckets while the last backward runs
  (:mod:`~trainfabric.workloads.buckets`).
* **GPU transfers** (``gpu_flows=True``): each comm node also keeps the GPU-level transfers
  it aggregates (:class:`~trainfabric.workloads.dag.GpuTransfers`).
* **Collective metadata**: every phase names its collective group, op, ranks and concurrent
  collectives (:class:`~trainfabric.workloads.dag.Phase`), for per-collective bandwidths
  (:mod:`~trainfabric.workloads.attribution`).

Flows between GPUs of the same pod stay on the scale-up domain: they are recorded per phase
as ``intra_pod_bytes`` and do not become comm nodes (the aggregation of GPU flows into pod
phases is :class:`~trainfabric.workloads.ranks.PodPhases`, which trace readers share).

**Size guard.** Before building, :func:`dag_size` counts the nodes the DAG will have without
building it (per stage: compute nodes, and per distinct phase the directed pod pairs, from the
pods of the TP-rank-0 GPUs, since a TP group never leaves its pod) and :func:`build_dag`
refuses, through :func:`trainfabric.limits.check_memory`, a DAG whose builder would need more
than the memory limit: ``DAG_BYTES_PER_NODE`` (measured peak of the builder, about 400 B per
node with its ~2 edges, names and the topological renumbering) per node plus
``FLOW_BYTES`` per GPU-level flow of the largest phase (its aggregation temporaries).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from trainfabric.limits import check_memory
from trainfabric.workloads import collectives, sizes
from trainfabric.workloads.buckets import BucketPlan, Stream, bucket_bounds, bucket_elements
from trainfabric.workloads.dag import DagBuilder, Phase, TaskDAG
from trainfabric.workloads.job import Job
from trainfabric.workloads.moe import expert_popularity, shard_share
from trainfabric.workloads.ranks import PodPhases


def schedule(stages: int, micro_batches: int, stage: int, kind: str) -> list[tuple[str, int]]:
    """Operation order ``[("F"|"B", micro_batch), ...]`` of ``stage`` under GPipe or 1F1B."""
    m = micro_batches
    if kind == "gpipe":
        return [("F", j) for j in range(m)] + [("B", j) for j in range(m)]
    warm = min(stages - stage - 1, m)
    ops = [("F", j) for j in range(warm)]
    for i in range(m - warm):
        ops += [("F", warm + i), ("B", i)]
    return ops + [("B", j) for j in range(m - warm, m)]


class _Builder:
    """Holds the job, the rank -> pod map and the DagBuilder while the DAG is assembled."""

    def __init__(self, job: Job, seed: int, gpu_flows: bool = False, phase_nodes: bool = False):
        self.job = job
        par, pl = job.parallelism, job.placement
        self.par = par
        self.b = DagBuilder(pl.pods, pl.gpus_per_pod if gpu_flows else None, phase_nodes)
        self.pod_phases = PodPhases(self.b, pl.gpus_per_pod, job.compute.latency_s)
        self.fps = job.compute.flops_per_s * par.tp
        self.tokens = sizes.tokens_per_micro_batch(job)
        self._segments: dict[tuple[int, str], list[tuple]] = {}
        self._aggregated: dict[tuple, tuple] = {}
        rng = np.random.default_rng(seed)
        m = job.model
        self.share = {
            layer: shard_share(expert_popularity(m.moe_experts, job.moe_skew_gini, rng), par.ep)
            for layer in range(m.layers)
            if m.is_moe_layer(layer)
        }

    # -- placement -------------------------------------------------------------------------
    def ranks(self, t, d, p) -> np.ndarray:
        return np.asarray(t) + self.par.tp * (np.asarray(d) + self.par.dp * np.asarray(p))

    def pod(self, ranks) -> np.ndarray:
        return self.pod_phases.pod(ranks)

    def stage_pods(self, p: int) -> list[int]:
        return sorted(set(self.pod(self.ranks(0, np.arange(self.par.dp), p)).tolist()))

    # -- phases ----------------------------------------------------------------------------
    def add_phase(self, kind, name, flows, key, preds=(), succs=(), meta=None):
        """Aggregate GPU ``flows`` (a function returning source ranks, destination ranks and
        bytes) to directed pod pairs and add them as one phase (``meta``: the collective
        fields of :class:`Phase`). Phases with the same ``key`` have the same flows (one
        layer's all-to-all in every micro-batch, one boundary's sends): aggregated once."""
        if key not in self._aggregated:
            self._aggregated[key] = self.pod_phases.aggregate(*flows())
        return self.pod_phases.add(kind, name, self._aggregated[key], preds, succs, meta)

    def steps_phases(self, kind, name, groups_steps, preds, meta=None):
        """Chain the steps of concurrent collectives (one list of Steps per group) as phases
        named ``{name} k{step}``, all in collective group ``name``."""
        return self.pod_phases.steps(kind, name, groups_steps, preds, meta)

    # -- operations ------------------------------------------------------------------------
    def segments(self, p: int, direction: str) -> list[tuple]:
        """Compute and MoE segments of one forward (or backward) operation of stage ``p``
        (computed once per stage and direction: every micro-batch has the same)."""
        key = (p, direction)
        if key not in self._segments:
            self._segments[key] = self._stage_segments(p, direction)
        return self._segments[key]

    def _stage_segments(self, p: int, direction: str) -> list[tuple]:
        """Segments ``("compute", FLOPs per token, items)`` (``items``: the weights whose
        gradients the segment produces, ``(parameters, FLOPs per token)`` each, in the
        segment's order: the input embedding has no FLOPs), ``("moe", which, layer)`` and
        ``("expert", layer, scale)``."""
        job, m = self.job, self.job.model
        segs: list[tuple] = []
        flops = 0.0
        items: list[tuple[int, float]] = [(m.vocab * m.hidden, 0.0)] if p == 0 else []
        for layer in job.stage_layers(p):
            f = sizes.dense_flops_per_token(job, layer)
            flops += f
            items.append((sizes.dense_layer_params(job, layer), f))
            if m.is_moe_layer(layer):
                segs += [
                    ("compute", flops, tuple(items)),
                    ("moe", "dispatch", layer),
                    ("expert", layer, 1.0),
                    ("moe", "combine", layer),
                ]
                flops, items = 0.0, []
        if p == self.par.pp - 1:
            head = sizes.head_flops_per_token(job)
            flops += head
            items.append((0 if m.tied_embeddings else m.vocab * m.hidden, head))
        if flops:
            segs.append(("compute", flops, tuple(items)))
        if direction == "F":
            return segs
        back = {"dispatch": "combine_bwd", "combine": "dispatch_bwd"}
        return [
            (s[0], back[s[1]], s[2])
            if s[0] == "moe"
            else (s[0], 2.0 * s[1], tuple((w, 2.0 * f) for w, f in reversed(s[2])))
            if s[0] == "compute"
            else (s[0], s[1], 2.0)
            for s in reversed(segs)
        ]

    def expert_duration(self, p: int, layer: int, scale: float) -> dict[int, float]:
        """Per pod: longest expert compute over the stage's shards on it (tokens received)."""
        par = self.par
        d = np.arange(par.dp)
        received = par.ep * self.tokens * self.job.model.moe_top_k * self.share[layer][d % par.ep]
        dur = scale * received * sizes.expert_flops_per_token(self.job) / self.fps
        out: dict[int, float] = defaultdict(float)
        for pod, t in zip(self.pod(self.ranks(0, d, p)).tolist(), dur.tolist(), strict=True):
            out[pod] = max(out[pod], t)
        return out

    def moe_phase(self, p, which, layer, name, preds):
        """The all-to-all of every EP group of stage ``p`` for one MoE layer, as one phase."""
        par = self.par

        def flows():
            D = np.outer(np.ones(par.ep), self.share[layer])
            D = D * sizes.moe_dispatch_bytes_per_shard(self.job)
            if which in ("combine", "dispatch_bwd"):
                D = D.T
            a, c = np.nonzero(~np.eye(par.ep, dtype=bool))
            g = np.arange(par.dp // par.ep)[:, None, None]
            t = np.arange(par.tp)[None, :, None]
            return (
                self.ranks(t, g * par.ep + a, p),
                self.ranks(t, g * par.ep + c, p),
                D[a, c] / par.tp,
            )

        meta = Phase(
            "",
            "",
            group=name,
            op="all_to_all",
            n_ranks=par.ep,
            n_collectives=par.dp // par.ep * par.tp,
        )
        key = ("moe", p, which, layer)
        return self.add_phase(f"moe_{which}", name, flows, key, preds=preds, meta=meta)

    def operation(
        self, p: int, direction: str, j: int, plan: BucketPlan | None = None
    ) -> dict[int, tuple[int, int]]:
        """Build one operation of stage ``p``; returns ``{pod: (entry node, exit node)}``.

        With a bucket ``plan`` (the stage's last backward under bucketed overlap), compute
        segments are split into chunks at bucket boundaries and the plan records, per
        bucket, the nodes whose end makes it ready (:mod:`~trainfabric.workloads.buckets`).
        """
        pods = self.stage_pods(p)
        entry: dict[int, int] = {}
        last: dict[int, int] = {}
        tag = f"{direction}{j} s{p}"
        for seg in self.segments(p, direction):
            if seg[0] == "moe":
                e, x = self.moe_phase(
                    p, seg[1], seg[2], f"moe_{seg[1]} L{seg[2]} {tag}", list(last.values())
                )
                for pod in pods:
                    entry.setdefault(pod, e)
                    last[pod] = x
                continue
            if seg[0] == "compute":
                chunks = [(seg[1], [])] if plan is None else plan.cut(seg[2])
                durs = [(dict.fromkeys(pods, f * self.tokens / self.fps), c) for f, c in chunks]
            else:
                closes = (
                    []
                    if plan is None
                    else plan.expert_done(self.job.model.expert_params * self.job.model.moe_experts)
                )
                durs = [(self.expert_duration(p, seg[1], seg[2]), closes)]
            for k, (dur, closes) in enumerate(durs):
                name = f"{seg[0]} {tag}" + (f" c{k}" if len(durs) > 1 else "")
                for pod in pods:
                    node = self.b.compute(pod, dur[pod], f"{name} pod{pod}")
                    if pod in last:
                        self.b.edge(last[pod], node)
                    entry.setdefault(pod, node)
                    last[pod] = node
                stream = "dp" if seg[0] == "compute" else "dp_expert"
                if plan is not None:
                    plan.ready.extend((stream, b, list(last.values())) for b in closes)
        if plan is not None:
            plan.close_rest(list(last.values()))
        return {pod: (entry[pod], last[pod]) for pod in pods}

    # -- whole iteration -------------------------------------------------------------------
    def build(self) -> TaskDAG:
        par = self.par
        ops: dict[tuple[int, str, int], dict[int, tuple[int, int]]] = {}
        for p in range(par.pp):
            prev: dict[int, int] = {}
            order = schedule(par.pp, par.micro_batches, p, par.schedule)
            plan = self.bucket_plan(p)
            for k, (direction, j) in enumerate(order):
                last_op = plan if k == len(order) - 1 else None
                op = ops[p, direction, j] = self.operation(p, direction, j, last_op)
                for pod, (e, x) in op.items():
                    if pod in prev:
                        self.b.edge(prev[pod], e)
                    prev[pod] = x
            if plan is None:
                self.dp_gradients(p, list(prev.values()))
            else:
                self.bucketed_gradients(p, list(prev.values()), plan)
        self.pp_sends(ops)
        return self.b.build()

    def pp_sends(self, ops) -> None:
        par = self.par
        d = np.arange(par.dp)[:, None]
        t = np.arange(par.tp)[None, :]
        nb = sizes.pp_send_bytes(self.job) / par.tp
        for p in range(par.pp - 1):
            for j in range(par.micro_batches):
                for kind, a, c in (("pp_fwd", p, p + 1), ("pp_bwd", p + 1, p)):
                    direction = "F" if kind == "pp_fwd" else "B"
                    name = f"{kind} s{a}->s{c} mb{j}"
                    self.add_phase(
                        kind,
                        name,
                        lambda a=a, c=c: (self.ranks(t, d, a), self.ranks(t, d, c), nb),
                        ("pp", a, c),
                        preds=[x for _, x in ops[a, direction, j].values()],
                        succs=[e for e, _ in ops[c, direction, j].values()],
                        meta=Phase(
                            "",
                            "",
                            group=name,
                            op="send_recv",
                            n_ranks=2,
                            n_collectives=par.dp * par.tp,
                        ),
                    )

    def gradient_streams(self, p: int) -> list[tuple[str, list, int, int]]:
        """``(label, groups, denom, weights)`` of stage ``p``'s DP gradient collectives:
        dense weights over the DP groups (one per TP rank), routed-expert weights over the
        expert-DP groups; only those that exist (weights > 0, groups of >= 2 ranks)."""
        par = self.par
        w = sizes.stage_weights(self.job, p)
        d = np.arange(par.dp)
        dense = [self.ranks(t, d, p) for t in range(par.tp)]
        expert = [
            self.ranks(t, np.arange(a, par.dp, par.ep), p)
            for t in range(par.tp)
            for a in range(par.ep)
        ]
        return [
            (label, groups, denom, weights)
            for label, groups, weights, denom in (
                ("dp", dense, w.dense, par.tp),
                ("dp_expert", expert, w.expert, par.tp * par.ep),
            )
            if weights > 0 and len(groups[0]) >= 2
        ]

    def bucket_plan(self, p: int) -> BucketPlan | None:
        """The stage's bucket streams under bucketed overlap (None without overlap or DP)."""
        par = self.par
        streams = self.gradient_streams(p) if par.overlap == "bucketed" else []
        if not streams:
            return None
        per_gpu = bucket_elements(par.bucket_mb, par.grad_dtype_bytes, par.dp)
        return BucketPlan(
            {
                label: Stream(
                    label,
                    groups,
                    denom,
                    weights,
                    bucket_bounds(weights, max(1, round(per_gpu * denom))),
                )
                for label, groups, denom, weights in streams
            }
        )

    def bucketed_gradients(self, p: int, preds: list[int], plan: BucketPlan) -> None:
        """One stream: bucket collectives in ready order, then the all-gathers (module doc of
        :mod:`~trainfabric.workloads.buckets`)."""
        par, job = self.par, self.job
        op = "reduce_scatter" if par.distributed_optimizer else "all_reduce"
        last: list[int] = []
        for label, b, ready in plan.ready:
            s = plan.streams[label]
            size = par.grad_dtype_bytes * s.sizes[b] / s.denom
            steps = [COLLECTIVE[op][par.dp_collective](g, size) for g in s.groups]
            name = f"{label}_{op} s{p} b{b}"
            meta = Phase(
                "", "", group=name, op=op, n_ranks=len(s.groups[0]), n_collectives=len(s.groups)
            )
            last = self.steps_phases(f"{label}_{op}", name, steps, ready + last, meta)
        if not par.distributed_optimizer:
            return
        last = last + preds
        for s in plan.streams.values():
            size = job.model.dtype_bytes * s.total / s.denom
            steps = [COLLECTIVE["all_gather"][par.dp_collective](g, size) for g in s.groups]
            name = f"{s.label}_all_gather s{p}"
            meta = Phase(
                "",
                "",
                group=name,
                op="all_gather",
                n_ranks=len(s.groups[0]),
                n_collectives=len(s.groups),
            )
            last = self.steps_phases(f"{s.label}_all_gather", name, steps, last, meta)

    def dp_gradients(self, p: int, preds: list[int]) -> None:
        """Stage ``p``'s gradient collectives after its last backward (no overlap): per
        stream (dense, then expert), reduce-scatter + all-gather, or all-reduce."""
        par, job = self.par, self.job
        plan = (
            [("reduce_scatter", par.grad_dtype_bytes), ("all_gather", job.model.dtype_bytes)]
            if par.distributed_optimizer
            else [("all_reduce", par.grad_dtype_bytes)]
        )
        last = preds
        for label, groups, denom, weights in self.gradient_streams(p):
            for op, nbytes in plan:
                size = nbytes * weights / denom
                steps = [COLLECTIVE[op][par.dp_collective](g, size) for g in groups]
                name = f"{label}_{op} s{p}"
                meta = Phase(
                    "", "", group=name, op=op, n_ranks=len(groups[0]), n_collectives=len(groups)
                )
                last = self.steps_phases(f"{label}_{op}", name, steps, last, meta)


# Measured with tracemalloc (tests/workloads/test_size_guards.py): the builder's peak is
# 400-410 B per node on moe/dp-ring/hybrid at 64-256 pods (edges ~ 2 per node).
DAG_BYTES_PER_NODE = 400
FLOW_BYTES = 120  # GPU-level flow of one phase: src/dst/bytes, their copies, keys, masks
COLLECTIVE = {
    "reduce_scatter": collectives.REDUCE_SCATTER,
    "all_gather": collectives.ALL_GATHER,
    "all_reduce": collectives.ALL_REDUCE,
}


@dataclass(frozen=True)
class DagSize:
    """Node counts of a job's DAG before it is built, and the builder's memory (bytes)."""

    compute_nodes: int
    phase_nodes: int  # comm nodes and phase barriers
    max_phase_flows: int  # GPU-level flows of the largest phase

    @property
    def nodes(self) -> int:
        return self.compute_nodes + self.phase_nodes

    @property
    def memory_bytes(self) -> float:
        return DAG_BYTES_PER_NODE * float(self.nodes) + FLOW_BYTES * float(self.max_phase_flows)


def _pods_of(job: Job, d: np.ndarray, p: int) -> np.ndarray:
    """Pods of DP ranks ``d`` of stage ``p`` (TP rank 0; a TP group never leaves its pod)."""
    par = job.parallelism
    return (par.tp * (np.asarray(d, np.int64) + par.dp * p)) // job.placement.gpus_per_pod


def _pairs(src_pods: np.ndarray, dst_pods: np.ndarray, n: int) -> int:
    """Distinct directed inter-pod pairs among the flows ``src_pods -> dst_pods``."""
    keep = src_pods != dst_pods
    return int(np.unique(src_pods[keep] * n + dst_pods[keep]).size)


def _phase_nodes(pairs: int, phase_nodes: bool = False) -> int:
    """Nodes of a phase of ``pairs`` pod pairs (:meth:`DagBuilder.phase`): comm nodes plus
    an entry and an exit barrier (one barrier without pairs, none for a single pair); one
    node with ``phase_nodes``."""
    if phase_nodes:
        return 1
    return pairs if pairs == 1 else pairs + (1 if pairs == 0 else 2)


def _moe_pairs(pods: np.ndarray, ep: int) -> int:
    """Pod pairs of one MoE all-to-all: each EP group (``ep`` consecutive DP ranks, pods
    non-decreasing) exchanges between all ordered pairs of its ``k`` distinct pods,
    ``k (k - 1)``; summed over groups (exact unless two groups share a pod pair)."""
    rows = pods.reshape(-1, ep)
    k = 1 + (np.diff(rows, axis=1) != 0).sum(axis=1)
    return int((k * (k - 1)).sum())


def _n_buckets(job: Job, weights: int, denom: int) -> int:
    """Buckets of a gradient stream of ``weights`` parameters split over ``denom`` GPUs (1
    without bucketed overlap), as :meth:`_Builder.bucket_plan` cuts them."""
    par = job.parallelism
    if par.overlap != "bucketed":
        return 1
    per_gpu = bucket_elements(par.bucket_mb, par.grad_dtype_bytes, par.dp)
    return bucket_bounds(weights, max(1, round(per_gpu * denom))).size


def _gradient_nodes(
    job: Job, p: int, pods: np.ndarray, phase_nodes: bool = False
) -> tuple[int, int]:
    """Phase nodes of stage ``p``'s DP gradient collectives (as :meth:`_Builder.dp_gradients`
    builds them, on DP-rank indices mapped to pods; identical ring steps counted once;
    under bucketed overlap every bucket repeats the reduce-scatter or all-reduce), and the
    dense buckets (each may add one chunk of the last backward per pod)."""
    par = job.parallelism
    w = sizes.stage_weights(job, p)
    plan = ["reduce_scatter", "all_gather"] if par.distributed_optimizer else ["all_reduce"]
    d = np.arange(par.dp)
    total = chunks = 0
    for groups, weights, denom in (
        (d[None, :], w.dense, par.tp),
        (d.reshape(-1, par.ep).T, w.expert, par.tp * par.ep),
    ):
        if weights == 0 or groups.shape[1] < 2:
            continue
        buckets = _n_buckets(job, weights, denom)
        chunks += buckets if denom == par.tp else 0
        for op in plan:
            per_group = [COLLECTIVE[op][par.dp_collective](g, 1.0) for g in groups]
            # groups of one size share the algorithm's step structure: where group 0
            # repeats a step object (a ring), every group does
            first, nodes = per_group[0], 0
            for k, step in enumerate(first):
                if k == 0 or step is not first[k - 1]:
                    src = pods[np.concatenate([g[k].src for g in per_group])]
                    dst = pods[np.concatenate([g[k].dst for g in per_group])]
                    nodes = _phase_nodes(_pairs(src, dst, job.placement.pods), phase_nodes)
                total += nodes * (1 if op == "all_gather" else buckets)
    return total, chunks


def dag_size(job: Job, phase_nodes: bool = False) -> DagSize:
    """Count the DAG's nodes without building it (module doc); cost ``O(GPUs + layers)``;
    ``phase_nodes``: a phase is one node (:class:`~trainfabric.workloads.dag.PairSets`)."""
    par, m, n = job.parallelism, job.model, job.placement.pods
    n_ops = 2 * par.micro_batches
    compute = phase = 0
    flows = par.dp * par.tp  # a PP send or a DP collective step
    d = np.arange(par.dp)
    for p in range(par.pp):
        pods = _pods_of(job, d, p)
        stage_pods = 1 + int((np.diff(pods) != 0).sum())
        moe = sum(m.is_moe_layer(layer) for layer in job.stage_layers(p))
        compute += n_ops * (2 * moe + 1) * stage_pods
        if moe:
            phase += n_ops * 2 * moe * _phase_nodes(_moe_pairs(pods, par.ep), phase_nodes)
            flows = max(flows, par.dp * (par.ep - 1) * par.tp)
        if p + 1 < par.pp:
            phase += n_ops * _phase_nodes(_pairs(pods, _pods_of(job, d, p + 1), n), phase_nodes)
        grad_phase, chunks = _gradient_nodes(job, p, pods, phase_nodes)
        phase += grad_phase
        compute += chunks * stage_pods if par.overlap == "bucketed" else 0
    return DagSize(compute, phase, flows)


def check_dag_size(job: Job, phase_nodes: bool = False) -> DagSize:
    """Refuse (ConfigError) a DAG whose construction would exceed the memory limit.

    Raises, naming ``pods`` when communication phases hold most nodes (pod pairs grow with
    the pods), else ``layers`` (compute nodes: layers x micro-batches x pods); a cheap lower
    bound (every pod computes in every operation of its stage) is checked first, so that a
    huge job is refused before the count itself allocates.
    """
    par = job.parallelism
    floor = DAG_BYTES_PER_NODE * 2.0 * par.micro_batches * job.placement.pods
    check_memory("pods", floor + FLOW_BYTES * float(par.gpus), "the task DAG (lower bound)")
    size = dag_size(job, phase_nodes)
    what = (
        f"a task DAG of ~{size.nodes:,} nodes ({size.compute_nodes:,} compute, "
        f"{size.phase_nodes:,} in communication phases)"
    )
    field = "pods" if size.phase_nodes >= size.compute_nodes else "layers"
    check_memory(field, size.memory_bytes, what)
    return size


def build_dag(
    job: Job, seed: int = 0, gpu_flows: bool = False, phase_nodes: bool = False
) -> TaskDAG:
    """The pod-level task DAG of one training iteration of ``job`` (see the module doc).

    ``gpu_flows``: also keep each comm node's GPU-level transfers (``TaskDAG.gpu``, a
    :class:`~trainfabric.workloads.dag.GpuTransfers`); pod-pair bytes are then the sums of
    the merged GPU transfers (equal to the default's up to summation order).
    ``phase_nodes``: a phase of several pod pairs is one node holding its pair set (the
    fabric's form at scale, :class:`~trainfabric.workloads.dag.PairSets`).
    Refuses a DAG over the memory limit first (:func:`check_dag_size`: a ConfigError naming
    ``pods`` or ``layers``)."""
    check_dag_size(job, phase_nodes)
    return _Builder(job, seed, gpu_flows, phase_nodes).build()
