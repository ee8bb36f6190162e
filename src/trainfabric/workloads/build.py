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
  per collective step. No overlap of gradient communication with backward compute (bucketing)
  is modelled: it is the conservative, schedule-free reading.

Flows between GPUs of the same pod stay on the scale-up domain: they are recorded per phase
as ``intra_pod_bytes`` and do not become comm nodes.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from trainfabric.workloads import collectives, sizes
from trainfabric.workloads.dag import DagBuilder, TaskDAG
from trainfabric.workloads.job import Job
from trainfabric.workloads.moe import expert_popularity, shard_share


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

    def __init__(self, job: Job, seed: int):
        self.job = job
        par, pl = job.parallelism, job.placement
        self.par = par
        self.b = DagBuilder(pl.pods)
        self.fps = job.compute.flops_per_s * par.tp
        self.tokens = sizes.tokens_per_micro_batch(job)
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
        return np.asarray(ranks) // self.job.placement.gpus_per_pod

    def stage_pods(self, p: int) -> list[int]:
        return sorted(set(self.pod(self.ranks(0, np.arange(self.par.dp), p)).tolist()))

    # -- phases ----------------------------------------------------------------------------
    def add_phase(self, kind, name, src_ranks, dst_ranks, nbytes, preds=(), succs=()):
        """Aggregate GPU flows to directed pod pairs and add them as one phase."""
        su, sv, w = (
            a.ravel()
            for a in np.broadcast_arrays(
                self.pod(src_ranks), self.pod(dst_ranks), np.asarray(nbytes, dtype=float)
            )
        )
        inter = (su != sv) & (w > 0)
        n = self.job.placement.pods
        key = su[inter].astype(np.int64) * n + sv[inter]
        keys, inv = np.unique(key, return_inverse=True)
        agg = np.bincount(inv, weights=w[inter], minlength=keys.size)
        return self.b.phase(
            kind,
            name,
            keys // n,
            keys % n,
            agg,
            self.job.compute.latency_s,
            float(w[~inter].sum()),
            preds,
            succs,
        )

    def steps_phases(self, kind, name, groups_steps, preds):
        """Chain the steps of concurrent collectives (one list of Steps per group) as phases."""
        last = list(preds)
        for k, parts in enumerate(zip(*groups_steps, strict=True)):
            src = np.concatenate([s.src for s in parts])
            dst = np.concatenate([s.dst for s in parts])
            nb = np.concatenate([s.bytes for s in parts])
            _, exit_ = self.add_phase(kind, f"{name} k{k}", src, dst, nb, preds=last)
            last = [exit_]
        return last

    # -- operations ------------------------------------------------------------------------
    def segments(self, p: int, direction: str) -> list[tuple]:
        """Compute and MoE segments of one forward (or backward) operation of stage ``p``."""
        job, m = self.job, self.job.model
        segs: list[tuple] = []
        flops = 0.0
        for layer in job.stage_layers(p):
            flops += sizes.dense_flops_per_token(job, layer)
            if m.is_moe_layer(layer):
                segs += [
                    ("compute", flops),
                    ("moe", "dispatch", layer),
                    ("expert", layer, 1.0),
                    ("moe", "combine", layer),
                ]
                flops = 0.0
        if p == self.par.pp - 1:
            flops += sizes.head_flops_per_token(job)
        if flops:
            segs.append(("compute", flops))
        if direction == "F":
            return segs
        back = {"dispatch": "combine_bwd", "combine": "dispatch_bwd"}
        return [
            (s[0], back[s[1]], s[2])
            if s[0] == "moe"
            else (s[0], 2.0 * s[1])
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
        par, job = self.par, self.job
        D = np.outer(np.ones(par.ep), self.share[layer]) * sizes.moe_dispatch_bytes_per_shard(job)
        if which in ("combine", "dispatch_bwd"):
            D = D.T
        a, c = np.nonzero(~np.eye(par.ep, dtype=bool))
        g = np.arange(par.dp // par.ep)[:, None, None]
        t = np.arange(par.tp)[None, :, None]
        src = self.ranks(t, g * par.ep + a, p)
        dst = self.ranks(t, g * par.ep + c, p)
        return self.add_phase(f"moe_{which}", name, src, dst, D[a, c] / par.tp, preds=preds)

    def operation(self, p: int, direction: str, j: int) -> dict[int, tuple[int, int]]:
        """Build one operation of stage ``p``; returns ``{pod: (entry node, exit node)}``."""
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
                dur = dict.fromkeys(pods, seg[1] * self.tokens / self.fps)
            else:
                dur = self.expert_duration(p, seg[1], seg[2])
            for pod in pods:
                node = self.b.compute(pod, dur[pod], f"{seg[0]} {tag} pod{pod}")
                if pod in last:
                    self.b.edge(last[pod], node)
                entry.setdefault(pod, node)
                last[pod] = node
        return {pod: (entry[pod], last[pod]) for pod in pods}

    # -- whole iteration -------------------------------------------------------------------
    def build(self) -> TaskDAG:
        par = self.par
        ops: dict[tuple[int, str, int], dict[int, tuple[int, int]]] = {}
        for p in range(par.pp):
            prev: dict[int, int] = {}
            for direction, j in schedule(par.pp, par.micro_batches, p, par.schedule):
                op = ops[p, direction, j] = self.operation(p, direction, j)
                for pod, (e, x) in op.items():
                    if pod in prev:
                        self.b.edge(prev[pod], e)
                    prev[pod] = x
            self.dp_gradients(p, list(prev.values()))
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
                    self.add_phase(
                        kind,
                        f"{kind} s{a}->s{c} mb{j}",
                        self.ranks(t, d, a),
                        self.ranks(t, d, c),
                        nb,
                        preds=[x for _, x in ops[a, direction, j].values()],
                        succs=[e for e, _ in ops[c, direction, j].values()],
                    )

    def dp_gradients(self, p: int, preds: list[int]) -> None:
        par, job = self.par, self.job
        w = sizes.stage_weights(job, p)
        plan = (
            [("reduce_scatter", par.grad_dtype_bytes), ("all_gather", job.model.dtype_bytes)]
            if par.distributed_optimizer
            else [("all_reduce", par.grad_dtype_bytes)]
        )
        algo = par.dp_collective
        table = {
            "reduce_scatter": collectives.REDUCE_SCATTER,
            "all_gather": collectives.ALL_GATHER,
            "all_reduce": collectives.ALL_REDUCE,
        }
        d = np.arange(par.dp)
        dense_groups = [self.ranks(t, d, p) for t in range(par.tp)]
        expert_groups = [
            self.ranks(t, np.arange(a, par.dp, par.ep), p)
            for t in range(par.tp)
            for a in range(par.ep)
        ]
        last = preds
        for label, groups, weights, denom in (
            ("dp", dense_groups, w.dense, par.tp),
            ("dp_expert", expert_groups, w.expert, par.tp * par.ep),
        ):
            if weights == 0 or len(groups[0]) < 2:
                continue
            for op, nbytes in plan:
                size = nbytes * weights / denom
                steps = [table[op][algo](g, size) for g in groups]
                last = self.steps_phases(f"{label}_{op}", f"{label}_{op} s{p}", steps, last)


def build_dag(job: Job, seed: int = 0) -> TaskDAG:
    """The pod-level task DAG of one training iteration of ``job`` (see the module doc)."""
    return _Builder(job, seed).build()
