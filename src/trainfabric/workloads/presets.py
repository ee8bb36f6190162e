"""Built-in workloads: real model shapes and pod-level traffic patterns.

Model presets match the published architectures (GPT-3 175B, Llama-3-70B, DeepSeek-V3,
Mixtral 8x7B) on a plausible parallel layout. The pod-level aliases (``moe``, ``pipeline``,
``dp-ring``, ``dp-hd``, ``hybrid``) are traffic *patterns* for the OCS and fabric pillars:
one TP group of 8 GPUs per pod, the pattern's dimension spread over the pods; the MoE
patterns keep DeepSeek-V3's layer width but only a few layers, so that a 16-pod MILP stays
tractable (identical layers repeat the same traffic).

``--pods N`` re-maps a preset: the preset's ``absorb`` dimension (DP, or PP for
``pipeline``) takes up the change (:func:`~trainfabric.workloads.job.remap_onto_pods`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from trainfabric.errors import ConfigError
from trainfabric.workloads.job import Job, remap_onto_pods


@dataclass(frozen=True)
class Preset:
    job: Job
    absorb: Literal["dp", "pp"]
    description: str


GPT3 = dict(name="gpt3-175b", layers=96, hidden=12288, heads=96, seq_len=2048, vocab=50257)
LLAMA3_70B = dict(
    name="llama3-70b",
    layers=80,
    hidden=8192,
    heads=64,
    kv_heads=8,
    ffn_hidden=28672,
    gated_ffn=True,
    tied_embeddings=False,
    seq_len=8192,
    vocab=128256,
)
DEEPSEEK_V3 = dict(
    name="deepseek-v3",
    layers=61,
    hidden=7168,
    heads=128,
    ffn_hidden=18432,
    gated_ffn=True,
    tied_embeddings=False,
    seq_len=4096,
    vocab=129280,
    moe_experts=256,
    moe_shared_experts=1,
    moe_top_k=8,
    moe_ffn_hidden=2048,
    first_dense_layers=3,
)
MIXTRAL_8X7B = dict(
    name="mixtral-8x7b",
    layers=32,
    hidden=4096,
    heads=32,
    kv_heads=8,
    ffn_hidden=14336,
    gated_ffn=True,
    tied_embeddings=False,
    seq_len=4096,
    vocab=32000,
    moe_experts=8,
    moe_top_k=2,
    moe_ffn_hidden=14336,
)


def _job(name, model, gpus_per_pod=8, **par) -> Job:
    tp, pp, dp = par.get("tp", 1), par.get("pp", 1), par.get("dp", 1)
    pods = tp * pp * dp // gpus_per_pod
    return Job.model_validate(
        dict(
            name=name,
            model=model,
            parallelism=par,
            placement=dict(gpus_per_pod=gpus_per_pod, pods=pods),
        )
    )


def _few_layers(model: dict, layers: int) -> dict:
    return {
        **model,
        "layers": layers,
        "first_dense_layers": 0,
        "name": f"{model['name']}-{layers}l",
    }


PRESETS: dict[str, Preset] = {
    "gpt3-175b": Preset(
        _job("gpt3-175b", GPT3, tp=8, pp=8, dp=8, micro_batches=8),
        "dp",
        "GPT-3 175B, TP8 x PP8 x DP8 on 64 pods of 8 GPUs",
    ),
    "llama3-70b": Preset(
        _job("llama3-70b", LLAMA3_70B, tp=8, pp=4, dp=8, micro_batches=8),
        "dp",
        "Llama-3-70B, TP8 x PP4 x DP8 on 32 pods",
    ),
    "deepseek-v3": Preset(
        _job("deepseek-v3", DEEPSEEK_V3, tp=1, pp=4, dp=32, ep=32, micro_batches=8),
        "dp",
        "DeepSeek-V3 (256 routed experts, top-8), PP4 x DP32 with EP32 on 16 pods",
    ),
    "mixtral-8x7b": Preset(
        _job("mixtral-8x7b", MIXTRAL_8X7B, tp=1, pp=4, dp=16, ep=8, micro_batches=8),
        "dp",
        "Mixtral 8x7B (8 experts, top-2), PP4 x DP16 with EP8 on 8 pods",
    ),
    "pipeline": Preset(
        _job("pipeline", GPT3, tp=8, pp=16, micro_batches=8),
        "pp",
        "GPT-3 175B as a 16-stage pipeline, one stage per pod (1F1B, 8 micro-batches)",
    ),
    "dp-ring": Preset(
        _job("dp-ring", LLAMA3_70B, tp=8, dp=16, micro_batches=4, dp_collective="ring"),
        "dp",
        "Llama-3-70B data parallel over 16 pods, ring all-reduce (RS + AG)",
    ),
    "dp-hd": Preset(
        _job("dp-hd", LLAMA3_70B, tp=8, dp=16, micro_batches=4, dp_collective="halving_doubling"),
        "dp",
        "Llama-3-70B data parallel over 16 pods, halving-doubling all-reduce",
    ),
    "moe": Preset(
        _job("moe", _few_layers(DEEPSEEK_V3, 2), tp=8, dp=16, ep=16, micro_batches=2),
        "dp",
        "DeepSeek-V3-width MoE (2 layers, 256 experts, top-8), EP over 16 pods",
    ),
    "hybrid": Preset(
        _job("hybrid", _few_layers(DEEPSEEK_V3, 4), tp=8, pp=2, dp=8, ep=8, micro_batches=4),
        "dp",
        "PP2 x DP8 x EP8 DeepSeek-V3-width MoE (4 layers) on 16 pods",
    ),
}


def preset_names() -> list[str]:
    return list(PRESETS)


def get_preset(name: str, pods: int | None = None) -> Job:
    """The job of preset ``name``, re-mapped onto ``pods`` pods when given."""
    try:
        preset = PRESETS[name]
    except KeyError:
        raise ConfigError(
            "workload", f"unknown preset '{name}'; known: {', '.join(PRESETS)} (or a .json file)"
        ) from None
    if pods is None or pods == preset.job.placement.pods:
        return preset.job
    return remap_onto_pods(preset.job, pods, preset.absorb)
