"""Gradient buckets: overlap of DP gradient communication with the backward pass.

The model (``ParallelismSpec.overlap = "bucketed"``), after PyTorch DDP and Megatron-LM's
``overlap_grad_reduce``:

* **When gradients are final.** Gradients accumulate over the micro-batches, so they are
  final only during the *last* backward operation of a stage (``B`` of the last
  micro-batch, in GPipe and 1F1B alike). That backward produces them in reverse layer
  order: the LM head's first (last stage), the input embedding's last (stage 0).
* **Buckets.** A stage's gradients, in that order, are cut into buckets of ``cap``
  parameters of the stage shard, per stream: dense weights (reduced over the DP group) and
  routed-expert weights (over the expert-DP group). ``cap`` is the per-GPU bucket
  (``bucket_mb`` MiB of gradients, or Megatron-LM's default ``max(4e7, 1e6 x dp)``
  elements) times the GPUs that split the shard's weights (``tp``; ``tp x ep`` for experts).
  The last bucket of a stream holds the remainder. Buckets may cut a weight tensor (DDP
  packs whole tensors): a simplification of at most one tensor per bucket.
* **Ready times.** Within a compute segment (the dense part between MoE layers), each
  weight's gradient is produced at a uniform rate over that weight's backward FLOPs, so a
  bucket boundary at parameter position ``b`` falls at the FLOPs position found by linear
  interpolation inside the weight that holds ``b``; the segment's compute node is split
  into *chunks* at those positions, and a bucket is ready when the chunk that produces its
  last parameter ends. A layer's expert compute is one node: its expert buckets are ready
  when it ends. A boundary at a weight without backward FLOPs (the input embedding) falls
  at the end of the preceding FLOPs, i.e. of the segment's chunk before it.
* **One communication stream per stage.** Bucket collectives (reduce-scatter with the
  distributed optimiser, else all-reduce) run in the order the buckets become ready, each
  after its chunk *and* after the previous bucket's collective (NCCL runs the collectives
  of a stream in order). With the distributed optimiser the updated parameters are then
  all-gathered once per stream (dense, then expert) after the last bucket: within one
  iteration that all-gather overlaps nothing (Megatron overlaps it with the *next*
  iteration's forward, which one iteration does not contain).

Consequences (tested): with zero-time communication the iteration equals the compute-only
critical path, as without overlap; with per-step latency 0, bucketing never lengthens the
one-hop critical path (every bucket's collective is the full one scaled by its bytes, and
the stream starts no later than without overlap); with latency, each extra bucket adds
one collective's per-step latencies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

MIB = 1 << 20


def bucket_elements(bucket_mb: float | None, grad_dtype_bytes: int, dp: int) -> float:
    """Gradient elements per GPU in one bucket: ``bucket_mb`` MiB of ``grad_dtype_bytes``
    elements, or Megatron-LM's default ``max(40,000,000, 1,000,000 x dp)``."""
    if bucket_mb is None:
        return float(max(40_000_000, 1_000_000 * dp))
    return bucket_mb * MIB / grad_dtype_bytes


def bucket_bounds(total: int, cap: int) -> np.ndarray:
    """Cumulative parameter ends of the buckets of a stream of ``total`` parameters:
    ``cap, 2 cap, ..., total`` (integers as float64; empty for ``total == 0``)."""
    if total <= 0:
        return np.zeros(0)
    n = math.ceil(total / cap)
    return np.minimum(np.arange(1, n + 1, dtype=float) * cap, float(total))


def cut_segment(items, offset: float, bounds: np.ndarray) -> list[tuple[float, list[int]]]:
    """Chunks of one compute segment: ``[(chunk FLOPs, [buckets ready at its end]), ...]``.

    ``items``: the segment's weights in backward order as ``(parameters, FLOPs)``;
    ``offset``: the stream's parameters produced before the segment; ``bounds``: the
    stream's bucket ends (:func:`bucket_bounds`). Chunk FLOPs sum to the segment's.
    """
    params = np.array([p for p, _ in items], dtype=float)
    flops = np.array([f for _, f in items], dtype=float)
    cum_p = offset + np.concatenate([[0.0], np.cumsum(params)])
    cum_f = np.concatenate([[0.0], np.cumsum(flops)])
    total_f = float(cum_f[-1])
    ids = np.flatnonzero((bounds > cum_p[0]) & (bounds <= cum_p[-1]))
    at = []
    for b in bounds[ids]:
        i = int(np.searchsorted(cum_p, b, side="left"))  # cum_p[i-1] < b <= cum_p[i]
        frac = (b - cum_p[i - 1]) / (cum_p[i] - cum_p[i - 1])
        at.append(cum_f[i - 1] + frac * (cum_f[i] - cum_f[i - 1]))
    ends = sorted({x for x in at if 0.0 < x < total_f} | {total_f})
    closes: list[list[int]] = [[] for _ in ends]
    for j, x in zip(ids.tolist(), at, strict=True):
        k = next((k for k, e in enumerate(ends) if x <= e), len(ends) - 1)
        closes[k].append(j)
    widths = np.diff(np.concatenate([[0.0], ends]))
    return [(float(w), c) for w, c in zip(widths, closes, strict=True)]


@dataclass
class Stream:
    """One bucketed gradient stream of a stage: its groups, bounds and progress."""

    label: str  # "dp" or "dp_expert"
    groups: list
    denom: int  # GPUs that split the stage's weights of this stream
    total: int  # parameters of the stage shard
    bounds: np.ndarray
    produced: float = 0.0

    @property
    def sizes(self) -> np.ndarray:
        """Parameters per bucket."""
        return np.diff(np.concatenate([[0.0], self.bounds]))


@dataclass
class BucketPlan:
    """Bucket streams of one stage and, as the last backward is built, the ready list:
    ``(stream label, bucket index, nodes whose end makes it ready)`` in ready order."""

    streams: dict[str, Stream]
    ready: list[tuple[str, int, list[int]]] = field(default_factory=list)

    def cut(self, items) -> list[tuple[float, list[int]]]:
        """Chunks of a dense compute segment (:func:`cut_segment`); advances the stream."""
        s = self.streams.get("dp")
        if s is None:
            return [(float(sum(f for _, f in items)), [])]
        chunks = cut_segment(items, s.produced, s.bounds)
        s.produced += float(sum(p for p, _ in items))
        return chunks

    def expert_done(self, params: int) -> list[int]:
        """Expert buckets that close when ``params`` more expert parameters are produced."""
        s = self.streams.get("dp_expert")
        if s is None:
            return []
        lo, s.produced = s.produced, s.produced + params
        return np.flatnonzero((s.bounds > lo) & (s.bounds <= s.produced)).tolist()

    def close_rest(self, nodes: list[int]) -> None:
        """Buckets not yet ready are ready at the end of ``nodes`` (the last operation's end)."""
        done = {(label, b) for label, b, _ in self.ready}
        for label, s in self.streams.items():
            for b in range(s.bounds.size):
                if (label, b) not in done:
                    self.ready.append((label, b, nodes))
