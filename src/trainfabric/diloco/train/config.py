"""Typed configuration of a real DiLoCo training run (no torch import here).

Defaults (the DiLoCo recipe pinned in CLARIFICATIONS, "DiLoCo part 2"):

* inner optimiser AdamW (lr 1e-3, betas ``inner_betas`` (0.9, 0.95), eps ``inner_eps`` 1e-8
  (torch's default), weight decay 0.1), one per learner, whose moments and step count carry
  over across syncs (``reset_inner_optimizer`` = the WA-DiLoCo artifact's reset at every
  sync, off by default);
* pseudo-gradient ``Δ = θ_global − θ_local``, averaged over the ``M`` learners by a real
  ``all_reduce`` (sum, then ``/ M``) of flattened buckets of at most ``bucket_mb`` MB;
* outer step: ``Δ`` is set as the gradient of the global parameters and
  ``torch.optim.SGD(lr=0.7, momentum=0.9, nesterov=True)`` is applied; every learner restarts
  from the new global parameters;
* ``H`` = 50 inner steps between syncs (the default fixed-H controller), control point after
  every inner step, control window 1 s of wall clock (0: consult the controller at every step);
* model: byte-level GPT, 4 layers, d_model 128, 4 heads (0.83 M parameters), context 64
  bytes, batch 8 sequences
  (512 tokens a step per learner), dropout 0;
* ``streaming`` None: the whole model syncs at once. A :class:`StreamingConfig` turns on
  Streaming DiLoCo (:mod:`~trainfabric.diloco.train.streaming`).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from trainfabric.config import MAX_SEED, Config

MAX_STEPS = 10_000_000  # inner steps (and H, checkpoint_every): weeks at the fastest steps
MAX_SECONDS = 1e7  # wall clock of a run: ~116 days
EXPERIMENT = "diloco-train"  # a training run's name in its manifest (``experiment``)


class ModelConfig(Config):
    """Byte-level GPT: ``layers`` blocks of causal self-attention + MLP (4·d hidden)."""

    layers: int = Field(4, ge=1, le=48)
    d_model: int = Field(128, ge=8, le=8192)
    heads: int = Field(4, ge=1, le=128)
    context: int = Field(64, ge=4, le=8192)

    @model_validator(mode="after")
    def _heads_divide(self) -> ModelConfig:
        if self.d_model % self.heads:
            raise ValueError(f"d_model {self.d_model} is not a multiple of heads {self.heads}")
        return self


class ShapingConfig(Config):
    """tc shaping of every learner's veth, both directions (token bucket filter).

    ``rate_mbit`` is the link rate (Mbit/s = 1e6 bit/s), ``burst_kb`` the bucket depth
    (KiB), ``latency_ms`` tbf's queueing limit (the time a packet may wait in the bucket's
    queue). ``qdisc`` is ``tbf`` or ``htb`` (netem is not available on this kernel: no
    delay can be added; see :mod:`trainfabric.diloco.train.netns`).
    """

    rate_mbit: float = Field(10.0, gt=0, le=100_000)
    burst_kb: float = Field(32.0, gt=0, le=1_000_000)
    latency_ms: float = Field(400.0, gt=0, le=60_000)
    qdisc: Literal["tbf", "htb"] = "tbf"


class StreamingConfig(Config):
    """Streaming DiLoCo (Douillard et al., 2025, arXiv 2501.18512): the model's blocks split
    into ``fragments`` P fragments (``layout`` strided: fragment p holds blocks p, p+P, ...;
    contiguous: consecutive runs; the parameters outside the blocks join fragment 0), fragment
    p synced every ``H`` inner steps at steps t with ``(t − ⌊pH/P⌋) mod H = 0``; its outer
    gradient's communication overlaps ``overlap`` (τ) inner steps, after which the fragment's
    local parameters become ``alpha · local + (1 − alpha) · global`` (α = 0: the global ones);
    ``quantize`` the outer gradients each learner sends (none, fp8 e4m3 or emulated int4,
    :mod:`~trainfabric.diloco.train.quantize`); ``defer``: ``(fragment, step)`` pairs at
    which a due fragment's sync is deferred (a scripted fragment gate,
    :class:`~trainfabric.diloco.train.controller.Scripted`: it stays due and is offered
    again after the next step), at most 10,000 pairs."""

    fragments: int = Field(2, ge=1, le=48)
    overlap: int = Field(1, ge=0, le=MAX_STEPS)
    alpha: float = Field(0.5, ge=0, le=1)
    quantize: Literal["none", "fp8", "int4"] = "none"
    layout: Literal["strided", "contiguous"] = "strided"
    defer: list[tuple[int, int]] = Field(default_factory=list, max_length=10_000)


def _field_error(loc: tuple[str | int, ...], value: object, message: str) -> ValidationError:
    """A validation error located at ``loc`` (so that it names the field, not the model)."""
    err = PydanticCustomError("value_error", message)
    detail = InitErrorDetails(type=err, loc=loc, input=value)
    return ValidationError.from_exception_data("TrainConfig", [detail])


class TrainConfig(Config):
    """One DiLoCo run of ``learners`` processes for ``steps`` inner steps each (or until
    ``max_seconds`` of wall clock, whichever comes first).

    Every size has an upper bound, refused naming the field: ``learners`` <= 64, ``steps``,
    ``H`` and ``checkpoint_every`` <= 10,000,000, ``max_seconds`` <= 1e7, ``batch`` <= 4,096,
    ``seed`` <= 2^63 - 1, ``threads`` <= 256, ``corpus_bytes`` <= 1e9; the model's ``layers``
    <= 48, ``d_model`` <= 8,192, ``heads`` <= 128, ``context`` <= 8,192 (:class:`ModelConfig`).
    """

    learners: int = Field(2, ge=1, le=64)
    steps: int = Field(300, ge=1, le=MAX_STEPS)
    max_seconds: float | None = Field(None, gt=0, le=MAX_SECONDS)
    H: int = Field(50, ge=1, le=MAX_STEPS)
    control_window_s: float = Field(1.0, ge=0, le=3600)
    batch: int = Field(8, ge=1, le=4096)
    seed: int = Field(0, ge=0, le=MAX_SEED)
    model: ModelConfig = ModelConfig()
    inner: Literal["adamw", "sgd"] = "adamw"
    inner_lr: float = Field(1e-3, gt=0, le=10)
    inner_betas: tuple[Annotated[float, Field(ge=0, lt=1)], Annotated[float, Field(ge=0, lt=1)]] = (
        Field((0.9, 0.95), strict=False)
    )
    inner_eps: float = Field(1e-8, gt=0, le=1)
    weight_decay: float = Field(0.1, ge=0, le=10)
    outer_lr: float = Field(0.7, gt=0, le=10)
    outer_momentum: float = Field(0.9, ge=0, lt=1)
    nesterov: bool = True
    reset_inner_optimizer: bool = False
    dtype: Literal["float32", "float64"] = "float32"
    bucket_mb: float = Field(4.0, gt=0, le=100_000)
    checkpoint_every: int = Field(100, ge=1, le=MAX_STEPS)
    max_restarts: int = Field(3, ge=0, le=1000)
    eval_batches: int = Field(4, ge=1, le=10_000)
    backend: Literal["auto", "gloo", "nccl"] = "auto"
    threads: int = Field(1, ge=1, le=256)
    shaping: ShapingConfig | None = ShapingConfig()
    unshaped_ok: bool = False
    final_sync: bool = True
    save_final: bool = False
    corpus_bytes: int = Field(1_000_000, ge=10_000, le=1_000_000_000)
    streaming: StreamingConfig | None = None

    @model_validator(mode="after")
    def _shaping_explicit(self) -> TrainConfig:
        if self.shaping is None and not self.unshaped_ok:
            raise ValueError("shaping is off: set unshaped_ok to run over loopback unshaped")
        return self

    @model_validator(mode="after")
    def _streaming_fits(self) -> TrainConfig:
        st = self.streaming
        if st is None:
            return self
        if st.overlap >= self.H:
            raise _field_error(
                ("streaming", "overlap"), st.overlap, f"must be less than H ({self.H})"
            )
        if st.fragments > self.model.layers:
            raise _field_error(
                ("streaming", "fragments"),
                st.fragments,
                f"must be at most the model's layers ({self.model.layers})",
            )
        if st.fragments > self.H:
            raise _field_error(
                ("streaming", "fragments"), st.fragments, f"must be at most H ({self.H})"
            )
        if self.reset_inner_optimizer:
            raise _field_error(("reset_inner_optimizer",), True, "is not supported with streaming")
        for i, (p, t) in enumerate(st.defer):
            if not (0 <= p < st.fragments and 1 <= t <= self.steps):
                raise _field_error(
                    ("streaming", "defer", i),
                    [p, t],
                    f"must be (fragment in 0..{st.fragments - 1}, step in 1..{self.steps})",
                )
        return self
