"""Job descriptions: model, parallelism, placement, compute — pydantic, loadable from TOML.

Parameter counts (documented formulas, bf16 unless ``dtype_bytes`` says otherwise):

* attention per layer: ``2 h^2 + 2 h (kv_heads * h / heads)`` (Q and O are ``h x h``; K and V
  are ``h x kv_heads*head_dim``); multi-head attention (``kv_heads == heads``) gives ``4 h^2``.
  DeepSeek's MLA is approximated by MHA of the same width (within 10% of its real count).
* FFN per layer: ``3 h f`` when gated (SwiGLU: gate, up, down), ``2 h f`` otherwise (GPT-3).
* MoE layer: ``(E + E_shared) * 3 h f_moe`` expert weights plus ``h E`` for the router;
  active per token: ``(k + E_shared) * 3 h f_moe``.
* embeddings: ``vocab * h``, doubled when the output head is untied.

Compute time follows the usual ``6 x active params x tokens`` rule per iteration (2 forward,
4 backward), at ``gpu_flops * mfu`` per GPU; attention's quadratic term is ignored.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from trainfabric.config import Config, validate
from trainfabric.errors import ConfigError

MAX_LAYERS = 10_000
MAX_PODS = 65_536
MAX_MICRO_BATCHES = 4_096
MAX_EXPERTS = 65_536
MAX_GPUS_PER_POD = 4_096
MAX_GPUS = MAX_PODS * MAX_GPUS_PER_POD
MAX_HIDDEN = 1_048_576  # 2^20
MAX_FFN = 4_194_304  # 2^22
MAX_SEQ_LEN = 67_108_864  # 2^26
MAX_VOCAB = 16_777_216  # 2^24
MAX_HEADS = 65_536
MAX_MICRO_BATCH_SIZE = 1_048_576
MAX_DTYPE_BYTES = 8


def _at_most(limit: int, why: str):
    """An integer cap with a message saying why (pydantic ``AfterValidator``)."""

    def check(value: int) -> int:
        if value > limit:
            raise ValueError(f"at most {limit:,} ({why}), got {value:,}")
        return value

    return AfterValidator(check)


Layers = Annotated[
    int, Field(ge=1), _at_most(MAX_LAYERS, "the largest published models have ~130 layers")
]
Pods = Annotated[int, Field(ge=1), _at_most(MAX_PODS, "pod-pair structures grow as pods^2")]
MicroBatches = Annotated[
    int, Field(ge=1), _at_most(MAX_MICRO_BATCHES, "each one is a node chain of the task DAG")
]
Experts = Annotated[int, Field(ge=0), _at_most(MAX_EXPERTS, "each expert's load is drawn")]
GpusPerPod = Annotated[
    int, Field(ge=1), _at_most(MAX_GPUS_PER_POD, "the largest scale-up domains hold ~576 GPUs")
]
Hidden = Annotated[
    int, Field(ge=1), _at_most(MAX_HIDDEN, "the widest published models are ~20,000 wide")
]
Ffn = Annotated[int, Field(ge=1), _at_most(MAX_FFN, "the widest published FFNs have ~75,000 units")]
SeqLen = Annotated[
    int, Field(ge=1), _at_most(MAX_SEQ_LEN, "the longest trained contexts are ~10M tokens")
]
Vocab = Annotated[
    int, Field(ge=1), _at_most(MAX_VOCAB, "the largest vocabularies hold ~260,000 tokens")
]
Heads = Annotated[
    int, Field(ge=1), _at_most(MAX_HEADS, "the largest published models use ~128 heads")
]
DtypeBytes = Annotated[
    int, Field(ge=1), _at_most(MAX_DTYPE_BYTES, "float64 is the widest element type")
]
ExpertCount = Annotated[int, Field(ge=0), _at_most(MAX_EXPERTS, "the cap on routed experts")]
LayerCount = Annotated[int, Field(ge=0), _at_most(MAX_LAYERS, "the cap on layers")]
Tp = Annotated[int, Field(ge=1), _at_most(MAX_GPUS_PER_POD, "a TP group stays inside a pod")]
Pp = Annotated[int, Field(ge=1), _at_most(MAX_LAYERS, "a stage holds at least one layer")]
Dp = Annotated[int, Field(ge=1), _at_most(MAX_GPUS, "the GPUs of 65,536 pods of 4,096")]
Ep = Annotated[int, Field(ge=1), _at_most(MAX_EXPERTS, "an EP group shards the experts")]
MicroBatchSize = Annotated[
    int, Field(ge=1), _at_most(MAX_MICRO_BATCH_SIZE, "published runs use 1-16 sequences")
]


class ModelSpec(Config):
    """Transformer shape. Sizes are counts; ``dtype_bytes`` is bytes per activation element.

    Every size is capped, far above the largest published models, and refused with its
    reason before any work: ``layers`` and ``first_dense_layers`` <= 10,000, ``hidden``
    <= 1,048,576 (2^20), ``ffn_hidden`` and ``moe_ffn_hidden`` <= 4,194,304 (2^22),
    ``seq_len`` <= 67,108,864 (2^26), ``vocab`` <= 16,777,216 (2^24), ``heads`` and
    ``kv_heads`` <= 65,536, ``moe_experts``, ``moe_shared_experts`` and ``moe_top_k``
    <= 65,536, ``dtype_bytes`` <= 8.
    """

    name: str = "model"
    layers: Layers = Field(description=f"transformer layers (at most {MAX_LAYERS:,})")
    hidden: Hidden = Field(description=f"hidden size (at most {MAX_HIDDEN:,})")
    seq_len: SeqLen = Field(description=f"tokens per sequence (at most {MAX_SEQ_LEN:,})")
    vocab: Vocab = Field(description=f"vocabulary size (at most {MAX_VOCAB:,})")
    heads: Heads = Field(1, description=f"attention heads (at most {MAX_HEADS:,})")
    kv_heads: Heads | None = Field(
        None, description=f"key/value heads, default heads (at most {MAX_HEADS:,})"
    )
    ffn_hidden: Ffn | None = Field(
        None, description=f"FFN width, default 4 x hidden (at most {MAX_FFN:,})"
    )
    gated_ffn: bool = False
    tied_embeddings: bool = True
    moe_experts: Experts = Field(0, description=f"routed experts (at most {MAX_EXPERTS:,})")
    moe_shared_experts: ExpertCount = Field(
        0, description=f"shared experts (at most {MAX_EXPERTS:,})"
    )
    moe_top_k: ExpertCount = Field(
        0, description=f"routed experts per token (at most {MAX_EXPERTS:,})"
    )
    moe_ffn_hidden: Ffn | None = Field(
        None, description=f"expert FFN width, default ffn_hidden (at most {MAX_FFN:,})"
    )
    first_dense_layers: LayerCount = Field(
        0, description=f"leading dense layers of an MoE model (at most {MAX_LAYERS:,})"
    )
    dtype_bytes: DtypeBytes = Field(
        2, description=f"bytes per activation element (at most {MAX_DTYPE_BYTES})"
    )

    @model_validator(mode="after")
    def _check(self) -> ModelSpec:
        if self.hidden % self.heads:
            raise ValueError("hidden must be a multiple of heads")
        if self.kv_heads is not None and self.heads % self.kv_heads:
            raise ValueError("heads must be a multiple of kv_heads")
        if self.is_moe and not 1 <= self.moe_top_k <= self.moe_experts:
            raise ValueError("moe_top_k must be in [1, moe_experts]")
        if self.moe_top_k and not self.moe_experts:
            raise ValueError("moe_top_k > 0 needs moe_experts > 0")
        if self.first_dense_layers > self.layers:
            raise ValueError("first_dense_layers exceeds layers")
        return self

    @property
    def is_moe(self) -> bool:
        return self.moe_experts > 0

    @property
    def ffn(self) -> int:
        return self.ffn_hidden or 4 * self.hidden

    @property
    def moe_ffn(self) -> int:
        return self.moe_ffn_hidden or self.ffn

    def is_moe_layer(self, layer: int) -> bool:
        """Whether 0-based ``layer`` is MoE (the first ``first_dense_layers`` are dense)."""
        return self.is_moe and layer >= self.first_dense_layers

    @property
    def attention_params(self) -> int:
        h = self.hidden
        kv = (self.kv_heads or self.heads) * (h // self.heads)
        return 2 * h * h + 2 * h * kv

    @property
    def dense_ffn_params(self) -> int:
        return (3 if self.gated_ffn else 2) * self.hidden * self.ffn

    @property
    def expert_params(self) -> int:
        """Weights of one expert (always gated, as in Mixtral and DeepSeek)."""
        return 3 * self.hidden * self.moe_ffn

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    def layer_params(self, layer: int, active: bool = False) -> int:
        """Parameters of one layer; ``active`` counts only the experts a token visits."""
        if not self.is_moe_layer(layer):
            return self.attention_params + self.dense_ffn_params
        experts = (self.moe_top_k if active else self.moe_experts) + self.moe_shared_experts
        return self.attention_params + experts * self.expert_params + self.hidden * self.moe_experts

    def params(self, active: bool = False) -> int:
        """Total (or active-per-token) parameter count."""
        return self.embedding_params + sum(self.layer_params(i, active) for i in range(self.layers))


class ParallelismSpec(Config):
    """Degrees of tensor (TP), pipeline (PP), data (DP) and expert (EP) parallelism.

    EP groups are carved out of the DP dimension (Megatron's convention): ``ep`` must divide
    ``dp`` and the expert count. ``dp_collective`` picks the gradient all-reduce algorithm.
    Caps: ``tp`` <= 4,096 (a pod), ``pp`` <= 10,000 (the layers), ``dp`` <= 268,435,456
    (the GPUs of the largest placement), ``ep`` <= 65,536 (the experts), ``micro_batches``
    <= 4,096, ``micro_batch_size`` <= 1,048,576, ``grad_dtype_bytes`` <= 8.

    ``overlap``: ``"none"`` (DP gradient collectives after a stage's last backward) or
    ``"bucketed"`` (gradient buckets reduced while the last backward runs, see
    :mod:`~trainfabric.workloads.buckets`); ``bucket_mb``: bucket size in MiB of gradients
    per GPU (PyTorch DDP's ``bucket_cap_mb``, default there 25); None takes Megatron-LM's
    default, ``max(40e6, 1e6 x dp)`` gradient elements per GPU.
    """

    tp: Tp = Field(1, description=f"tensor-parallel degree (at most {MAX_GPUS_PER_POD:,})")
    pp: Pp = Field(1, description=f"pipeline stages (at most {MAX_LAYERS:,})")
    dp: Dp = Field(1, description=f"data-parallel degree (at most {MAX_GPUS:,})")
    ep: Ep = Field(1, description=f"expert-parallel degree (at most {MAX_EXPERTS:,})")
    micro_batches: MicroBatches = Field(
        4, description=f"micro-batches per iteration (at most {MAX_MICRO_BATCHES:,})"
    )
    micro_batch_size: MicroBatchSize = Field(
        1, description=f"sequences per micro-batch (at most {MAX_MICRO_BATCH_SIZE:,})"
    )
    schedule: Literal["gpipe", "1f1b"] = "1f1b"
    dp_collective: Literal["ring", "halving_doubling"] = "ring"
    distributed_optimizer: bool = True
    grad_dtype_bytes: DtypeBytes = Field(
        4, description=f"bytes per gradient element (at most {MAX_DTYPE_BYTES})"
    )
    overlap: Literal["none", "bucketed"] = "none"
    bucket_mb: float | None = Field(default=None, gt=0, le=1e9)

    @model_validator(mode="after")
    def _check(self) -> ParallelismSpec:
        if self.dp % self.ep:
            raise ValueError("ep must divide dp")
        if self.dp_collective == "halving_doubling" and self.dp & (self.dp - 1):
            raise ValueError("halving_doubling needs dp to be a power of two")
        return self

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp


class PlacementSpec(Config):
    """GPUs per pod (the scale-up domain that the inter-pod network does not see) and pods
    (``pods`` <= 65,536, ``gpus_per_pod`` <= 4,096)."""

    gpus_per_pod: GpusPerPod = 8
    pods: Pods


class ComputeSpec(Config):
    """GPU throughput: ``gpu_flops`` (FLOP/s, dense bf16) at model-FLOPs utilisation ``mfu``."""

    gpu_flops: float = Field(default=989e12, gt=0)
    mfu: float = Field(default=0.4, gt=0, le=1)
    latency_s: float = Field(default=5e-6, ge=0)

    @property
    def flops_per_s(self) -> float:
        return self.gpu_flops * self.mfu


class Job(Config):
    """A training job: what runs, how it is split, where it sits.

    Rank layout (Megatron order): ``rank = t + tp * (d + dp * p)`` for TP rank ``t``, DP rank
    ``d``, PP stage ``p``; pod of a rank = ``rank // gpus_per_pod``. A TP group must sit inside
    one pod (``gpus_per_pod % tp == 0``): tensor parallelism stays on the scale-up domain.
    """

    name: str = "job"
    model: ModelSpec
    parallelism: ParallelismSpec = ParallelismSpec()
    placement: PlacementSpec
    compute: ComputeSpec = ComputeSpec()
    moe_skew_gini: float = Field(default=0.2, ge=0, lt=1)

    @model_validator(mode="after")
    def _check(self) -> Job:
        par, pl, m = self.parallelism, self.placement, self.model
        if par.gpus != pl.gpus_per_pod * pl.pods:
            raise ValueError(
                f"tp*pp*dp = {par.gpus} GPUs but placement has "
                f"{pl.gpus_per_pod}*{pl.pods} = {pl.gpus_per_pod * pl.pods}"
            )
        if pl.gpus_per_pod % par.tp:
            raise ValueError("gpus_per_pod must be a multiple of tp (TP stays inside a pod)")
        if par.pp > m.layers:
            raise ValueError("pp exceeds the number of layers")
        if m.is_moe and m.moe_experts % par.ep:
            raise ValueError("ep must divide moe_experts")
        if not m.is_moe and par.ep != 1:
            raise ValueError("ep > 1 needs an MoE model")
        return self

    def stage_layers(self, stage: int) -> range:
        """Layers of pipeline ``stage``: as even as possible, earlier stages take the remainder."""
        base, extra = divmod(self.model.layers, self.parallelism.pp)
        start = stage * base + min(stage, extra)
        return range(start, start + base + (stage < extra))

    def rank(self, t: int, d: int, p: int) -> int:
        par = self.parallelism
        return t + par.tp * (d + par.dp * p)

    def pod_of(self, rank: int) -> int:
        return rank // self.placement.gpus_per_pod


def remap_onto_pods(job: Job, pods: int, absorb: Literal["dp", "pp"] = "dp") -> Job:
    """The same job on ``pods`` pods: the ``absorb`` dimension (DP or PP) takes up the change.

    EP follows DP when it spanned all of DP (largest common divisor with the experts).
    ``pods`` outside ``1..65,536``, degrees that do not divide, or an MoE job left without EP
    raise a ConfigError naming ``pods``.
    """
    if not 1 <= pods <= MAX_PODS:
        raise ConfigError("pods", f"must be in 1..{MAX_PODS:,}, got {pods:,}")
    par, pl = job.parallelism, job.placement
    gpus = pods * pl.gpus_per_pod
    other = par.tp * (par.pp if absorb == "dp" else par.dp)
    if gpus % other:
        raise ConfigError("pods", f"{gpus} GPUs are not a multiple of the fixed degrees ({other})")
    new = gpus // other
    updates: dict[str, int] = {absorb: new}
    if absorb == "dp" and par.ep == par.dp and job.model.is_moe:
        ep = math.gcd(new, job.model.moe_experts)  # the largest EP group that divides both
        if ep == 1:
            raise ConfigError(
                "pods",
                f"no EP degree > 1 divides both DP {new} and {job.model.moe_experts} experts",
            )
        updates["ep"] = ep
    data = job.model_dump()
    data["parallelism"].update(updates)
    data["placement"]["pods"] = pods
    return validate(Job, data, prefix="pods -> ")
