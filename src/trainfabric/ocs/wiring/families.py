"""Five hard instance families for the OCS planner, fixed before measuring (issue 12 §2).

Each family is a seeded generator ``family(name, pods, ports, seed) -> (TaskDAG, OcsModel)``
on :meth:`OcsModel.uniform` ``(pods, ports, 4)`` (100 Gb/s circuits, 5 Gb/s fallback), built
from :mod:`trainfabric.workloads`' jobs (one TP group of 8 GPUs per pod, bf16, DeepSeek-V3 or
GPT-3 175B layer widths). The seed draws everything random in an instance through one
``numpy.random.default_rng(seed)``; the same seed gives the same instance.

* ``moe-layers``: four sequential DeepSeek-V3-width MoE layers (256 experts, top-8), EP over
  all pods (``ep = gcd(pods, 256)``), one micro-batch; every layer draws its own expert
  popularity (per-expert Gini 0.2, CLARIFICATIONS; a fresh random expert-to-shard assignment
  per layer), so each layer's all-to-all has its own hot shards. 16 all-to-all phases of up to
  ``n (n-1)`` pairs, then the dense gradients' ring.
* ``pp-dp``: GPT-3-width PP4 x DP(n/4), four micro-batches. Schedule by seed parity: even
  seeds 1F1B, odd seeds GPipe (so three seeds cover both); the layer count is drawn uniformly
  in ``[80, 112]``, so stages are uneven when it is not a multiple of 4 and gradient sizes vary.
* ``perm-pipe-moe``: a GPT-3-width pipeline of ``n`` stages, one per pod (1F1B, four
  micro-batches, ``max(96, n)`` layers), placed on a random pod permutation, followed (in
  series, after the whole pipeline) by one DeepSeek-V3 MoE dispatch phase over all pods
  (``D_ij = 2 b s h k P_j`` bytes from pod ``i`` to ``j``, ``P_j`` the drawn routing share of
  the experts on pod ``j``; needs ``n | 256``).
* ``dp-ep``: DeepSeek-style DP ring plus expert-parallel all-to-all: three DeepSeek-V3-width
  layers (the first dense), DP over all pods with EP groups of ``n/2`` consecutive pods, two
  micro-batches; ring reduce-scatter + all-gather of the dense gradients over all pods and of
  the expert gradients over the expert-DP pairs ``{a, a + n/2}``; skews drawn per MoE layer.
* ``two-jobs``: two jobs side by side on the same pods (every pod hosts one TP group of each):
  the ``perm-pipe-moe`` pipeline (identity placement) and a two-layer DeepSeek-V3 MoE job
  (DP = EP = n, one micro-batch) placed on a random pod permutation. The DAGs are independent
  (no edge between them): the iteration ends when the slower job does; they compete for ports.

Validated: ``name`` is one of :data:`FAMILIES`, ``pods`` is one the family can lay out (a
ConfigError naming ``pods`` otherwise: powers of two dividing 256 and at least 8, as
``EP`` and ``pp-dp``'s four stages need), ``ports`` is checked by :class:`OcsModel`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from trainfabric.config import validate
from trainfabric.errors import ConfigError
from trainfabric.ocs.model import OcsModel
from trainfabric.workloads import Job, build_dag
from trainfabric.workloads.dag import BARRIER, DagBuilder, Phase, TaskDAG, from_arrays
from trainfabric.workloads.moe import expert_popularity, shard_share
from trainfabric.workloads.presets import DEEPSEEK_V3, GPT3
from trainfabric.workloads.sizes import moe_dispatch_bytes_per_shard

OCS_SWITCHES = 4
MIN_PODS, MAX_PODS = 8, 256
# Sizes of benchmarks/ocs_vs_milp.py: the project MILP proves every instance in under 60 s
# (measured); the two MoE-heaviest families stop at 32 pods, where 64 pods cost 1-2 minutes an
# instance for the planner and each exact solver (the benchmark's 30-minute budget).
SIZES: dict[str, tuple[int, ...]] = {
    "moe-layers": (8, 16, 32),
    "pp-dp": (16, 32, 64),
    "perm-pipe-moe": (16, 32, 64),
    "dp-ep": (16, 32, 64),
    "two-jobs": (8, 16, 32),
}


def _job(name: str, model: dict, pods: int, **par) -> Job:
    """A job of TP8 groups, one per pod (so ``tp · pp · dp = 8 · pods``)."""
    return validate(
        Job,
        dict(
            name=name,
            model=model,
            parallelism=dict(tp=8, **par),
            placement=dict(gpus_per_pod=8, pods=pods),
        ),
        prefix="pods -> ",
    )


def _deepseek(layers: int, dense: int = 0) -> dict:
    return {
        **DEEPSEEK_V3,
        "layers": layers,
        "first_dense_layers": dense,
        "name": f"deepseek-v3-{layers}l",
    }


# -- composing DAGs -----------------------------------------------------------------------------
def relabel_pods(dag: TaskDAG, perm: np.ndarray) -> TaskDAG:
    """The same DAG with pod ``v`` renamed ``perm[v]`` (compute pods, comm sources and
    destinations; ``perm`` a permutation of ``0..n-1``, else a ConfigError naming ``perm``):
    :meth:`TaskDAG.relabel`."""
    return dag.relabel(perm)


def combine(first: TaskDAG, second: TaskDAG, series: bool, tags=("a:", "b:")) -> TaskDAG:
    """One DAG holding ``first`` and ``second`` on the same pods.

    ``series``: a barrier joins every sink of ``first`` to every source of ``second`` (the
    second starts when the first has finished: critical path = sum); otherwise they are side
    by side with no edge between them (critical path = max). Phase names get ``tags`` so that
    they stay unique; phase indices of ``second`` are shifted past those of ``first``.
    """
    if first.n_pods != second.n_pods:
        raise ConfigError("pods", "both DAGs must be on the same pods")
    n1, k1 = first.n_nodes, len(first.phases)
    ea, eb = first.edges.astype(np.int64), second.edges.astype(np.int64) + n1
    cols = {
        f: np.concatenate([getattr(first, f), getattr(second, f)])
        for f in ("kind", "pod", "dst", "duration_s", "bytes", "latency_s")
    }
    phase = np.concatenate([first.phase, np.where(second.phase >= 0, second.phase + k1, -1)])
    edge_src, edge_dst = [ea[:, 0], eb[:, 0]], [ea[:, 1], eb[:, 1]]
    if series:
        join = n1 + second.n_nodes
        sinks = np.flatnonzero(np.diff(first.indptr) == 0)
        sources = n1 + np.flatnonzero(np.bincount(second.indices, minlength=second.n_nodes) == 0)
        edge_src += [sinks, np.full(sources.size, join)]
        edge_dst += [np.full(sinks.size, join), sources]
        extra = dict(kind=BARRIER, pod=-1, dst=-1, duration_s=0.0, bytes=0.0, latency_s=0.0)
        cols = {f: np.append(v, extra[f]).astype(v.dtype) for f, v in cols.items()}
        phase = np.append(phase, -1)
    names = ()
    if first.names and second.names:
        names = tuple(tags[0] + s for s in first.names) + tuple(tags[1] + s for s in second.names)
        names += ("join",) if series else ()
    phases = tuple(Phase(p.kind, tags[0] + p.name, p.intra_pod_bytes) for p in first.phases)
    phases += tuple(Phase(p.kind, tags[1] + p.name, p.intra_pod_bytes) for p in second.phases)
    return from_arrays(
        first.n_pods,
        kind=cols["kind"].astype(np.int8),
        pod=cols["pod"].astype(np.int32),
        dst=cols["dst"].astype(np.int32),
        duration_s=cols["duration_s"],
        nbytes=cols["bytes"],
        latency_s=cols["latency_s"],
        phase=phase.astype(np.int32),
        edge_src=np.concatenate(edge_src),
        edge_dst=np.concatenate(edge_dst),
        phases=phases,
        names=names,
    )


def moe_dispatch_phase(pods: int, rng: np.random.Generator) -> TaskDAG:
    """One DeepSeek-V3 MoE dispatch all-to-all over all pods as a one-phase DAG.

    Pod ``i`` sends ``D_ij = 2 b s h k P_j`` bytes to pod ``j != i`` (``b = 1``, ``s = 4096``,
    ``h = 7168``, ``k = 8``; ``P_j``: share of the experts on pod ``j``, Gini 0.2, drawn from
    ``rng``); the diagonal stays in the pod (``intra_pod_bytes``).
    """
    job = _job("moe-phase", _deepseek(1), pods, dp=pods, ep=_ep(pods), micro_batches=1)
    share = shard_share(expert_popularity(256, job.moe_skew_gini, rng), job.parallelism.ep)
    total = moe_dispatch_bytes_per_shard(job)
    src, dst = np.nonzero(~np.eye(pods, dtype=bool))
    b = DagBuilder(pods)
    intra = float(total)  # Σ_i D_ii = total · Σ_i P_i = total
    b.phase("moe_dispatch", "moe_dispatch", src, dst, total * share[dst], 5e-6, intra)
    return b.build()


def _ep(pods: int) -> int:
    ep = math.gcd(pods, 256)
    if ep != pods:
        raise ConfigError("pods", f"must divide 256 (an EP group over all pods), got {pods}")
    return ep


# -- the five families --------------------------------------------------------------------------
def _pipeline(pods: int) -> TaskDAG:
    model = {**GPT3, "layers": max(96, pods), "name": "gpt3-pipeline"}
    return build_dag(_job("pipeline", model, pods, pp=pods, micro_batches=4, schedule="1f1b"))


def moe_layers(pods: int, rng: np.random.Generator) -> TaskDAG:
    job = _job("moe-layers", _deepseek(4), pods, dp=pods, ep=_ep(pods), micro_batches=1)
    return build_dag(job, seed=int(rng.integers(2**31)))


def pp_dp(pods: int, rng: np.random.Generator, seed: int) -> TaskDAG:
    layers = int(rng.integers(80, 113))
    model = {**GPT3, "layers": layers, "name": f"gpt3-{layers}l"}
    schedule = "gpipe" if seed % 2 else "1f1b"
    return build_dag(
        _job("pp-dp", model, pods, pp=4, dp=pods // 4, micro_batches=4, schedule=schedule)
    )


def perm_pipe_moe(pods: int, rng: np.random.Generator) -> TaskDAG:
    pipe = relabel_pods(_pipeline(pods), rng.permutation(pods))
    return combine(pipe, moe_dispatch_phase(pods, rng), series=True, tags=("pipe:", "moe:"))


def dp_ep(pods: int, rng: np.random.Generator) -> TaskDAG:
    job = _job("dp-ep", _deepseek(3, dense=1), pods, dp=pods, ep=pods // 2, micro_batches=2)
    return build_dag(job, seed=int(rng.integers(2**31)))


def two_jobs(pods: int, rng: np.random.Generator) -> TaskDAG:
    moe_job = _job("moe", _deepseek(2), pods, dp=pods, ep=_ep(pods), micro_batches=1)
    moe = relabel_pods(build_dag(moe_job, seed=int(rng.integers(2**31))), rng.permutation(pods))
    return combine(_pipeline(pods), moe, series=False, tags=("pipe:", "moe:"))


FAMILIES: dict[str, Callable[[int, np.random.Generator, int], TaskDAG]] = {
    "moe-layers": lambda n, rng, seed: moe_layers(n, rng),
    "pp-dp": pp_dp,
    "perm-pipe-moe": lambda n, rng, seed: perm_pipe_moe(n, rng),
    "dp-ep": lambda n, rng, seed: dp_ep(n, rng),
    "two-jobs": lambda n, rng, seed: two_jobs(n, rng),
}


def family(name: str, pods: int, ports: int, seed: int) -> tuple[TaskDAG, OcsModel]:
    """Instance ``seed`` of family ``name`` on ``pods`` pods with ``ports`` ports each
    (module doc); ConfigError naming ``family``, ``pods`` or ``ports`` on a bad input."""
    if name not in FAMILIES:
        raise ConfigError("family", f"unknown family '{name}'; known: {', '.join(FAMILIES)}")
    if not (MIN_PODS <= pods <= MAX_PODS and pods & (pods - 1) == 0):
        raise ConfigError("pods", f"must be a power of two in {MIN_PODS}..{MAX_PODS}, got {pods}")
    model = OcsModel.uniform(pods, ports, OCS_SWITCHES)
    rng = np.random.default_rng(seed)
    return FAMILIES[name](pods, rng, seed), model
