"""Bytes and FLOPs of one training iteration, per the formulas public workload generators use.

Symbols: ``b`` micro-batch size, ``s`` sequence length, ``h`` hidden size, ``k`` MoE top-k,
``E`` routed experts, ``dt`` activation bytes (2 for bf16), ``gt`` gradient bytes (4 for fp32
main grads). Sizes are *per shard* (one TP group = ``tp`` GPUs of one pipeline stage of one DP
replica); the GPU-level flows split them evenly over the ``tp`` ranks (sequence parallelism /
scatter-gather), so every figure below is also the sum over a shard's TP ranks.

* PP send per micro-batch per stage boundary, each direction: ``dt · b · s · h``.
* MoE dispatch per MoE layer per micro-batch from shard ``i`` to shard ``j`` of its EP group:
  ``D_ij = dt · h · b · s · k · P_j`` (``P_j`` = routing share of the experts on ``j``, see
  :mod:`~trainfabric.workloads.moe`); combine is ``D^T``; backward repeats both. A shard's row
  sums to ``dt · b · s · h · k`` (the spec's ``2·b·s·h·k/TP`` per GPU rank, times ``tp``).
* DP gradients per stage shard: dense weights ``P_d`` over the DP group (size ``dp``), expert
  weights ``P_x`` over the expert-DP group (size ``dp/ep``). Distributed optimiser: a
  reduce-scatter of ``gt · P`` then an all-gather of ``dt · P``; otherwise an all-reduce of
  ``gt · P``.
* FLOPs per token forward: ``2 ×`` the active weights it meets (the LM head ``vocab · h`` on
  the last stage; an input-embedding lookup costs none); backward is twice forward.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainfabric.workloads.job import Job


def tokens_per_micro_batch(job: Job) -> int:
    return job.parallelism.micro_batch_size * job.model.seq_len


def pp_send_bytes(job: Job) -> float:
    """Activation (or its gradient) crossing a stage boundary per micro-batch: ``dt·b·s·h``."""
    return float(job.model.dtype_bytes * tokens_per_micro_batch(job) * job.model.hidden)


def moe_dispatch_bytes_per_shard(job: Job) -> float:
    """Bytes a shard's tokens occupy after top-k replication: ``dt·b·s·h·k`` (incl. to itself)."""
    m = job.model
    return float(m.dtype_bytes * tokens_per_micro_batch(job) * m.hidden * m.moe_top_k)


@dataclass(frozen=True)
class StageWeights:
    """Parameters of one pipeline stage: ``dense`` (all but routed experts, incl. embeddings on
    the first stage and an untied head on the last) and ``expert`` (routed experts of the stage,
    all ``E`` of them; a shard holds ``E/ep``)."""

    dense: int
    expert: int


def stage_weights(job: Job, stage: int) -> StageWeights:
    m, pp = job.model, job.parallelism.pp
    dense = expert = 0
    for layer in job.stage_layers(stage):
        if m.is_moe_layer(layer):
            dense += m.attention_params + m.moe_shared_experts * m.expert_params
            dense += m.hidden * m.moe_experts
            expert += m.moe_experts * m.expert_params
        else:
            dense += m.layer_params(layer)
    if stage == 0:
        dense += m.vocab * m.hidden
    if stage == pp - 1 and not m.tied_embeddings:
        dense += m.vocab * m.hidden
    return StageWeights(dense, expert)


def dense_layer_params(job: Job, layer: int) -> int:
    """Parameters of a layer's non-routed part (all of a dense layer; attention, shared
    experts and router of an MoE layer): the weights :func:`dense_flops_per_token` meets."""
    m = job.model
    if not m.is_moe_layer(layer):
        return m.layer_params(layer)
    return m.attention_params + m.moe_shared_experts * m.expert_params + m.hidden * m.moe_experts


def dense_flops_per_token(job: Job, layer: int) -> float:
    """Forward FLOPs per token of a layer's non-routed part.

    That is attention plus the dense FFN, or plus the shared experts and the router.
    """
    m = job.model
    if not m.is_moe_layer(layer):
        return 2.0 * m.layer_params(layer)
    return 2.0 * (
        m.attention_params + m.moe_shared_experts * m.expert_params + m.hidden * m.moe_experts
    )


def expert_flops_per_token(job: Job) -> float:
    """Forward FLOPs per routed token-copy through one expert."""
    return 2.0 * job.model.expert_params


def head_flops_per_token(job: Job) -> float:
    return 2.0 * job.model.vocab * job.model.hidden


def iteration_flops(job: Job) -> float:
    """Closed form of one iteration's FLOPs: ``6 · tokens · (active layer weights + vocab·h)``."""
    m, par = job.model, job.parallelism
    tokens = tokens_per_micro_batch(job) * par.micro_batches * par.dp
    active = sum(m.layer_params(i, active=True) for i in range(m.layers)) + m.vocab * m.hidden
    return 6.0 * tokens * active
