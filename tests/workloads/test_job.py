"""Job model: parameter counts pinned to hand computation, validation, re-mapping."""

import pytest

from trainfabric.config import validate
from trainfabric.errors import ConfigError
from trainfabric.workloads import PRESETS, Job, get_preset
from trainfabric.workloads.job import remap_onto_pods


def test_gpt3_params_hand_computed():
    # 96 layers x 12 h^2 (4 h^2 attention + 8 h^2 MLP) + tied embedding vocab x h
    h = 12288
    assert get_preset("gpt3-175b").model.params() == 96 * 12 * h * h + 50257 * h == 174_563_733_504


def test_llama3_70b_params_hand_computed():
    h, f = 8192, 28672
    attention = 2 * h * h + 2 * h * 8 * 128  # Q, O full; K, V for 8 KV heads of dim 128
    per_layer = attention + 3 * h * f
    assert per_layer == 855_638_016
    assert get_preset("llama3-70b").model.params() == 80 * per_layer + 2 * 128256 * h


@pytest.mark.parametrize(
    ("preset", "total", "active"),
    [("deepseek-v3", 671e9, 37e9), ("mixtral-8x7b", 46.7e9, 12.9e9)],
)
def test_moe_param_counts_match_published(preset, total, active):
    m = get_preset(preset).model
    assert m.params() == pytest.approx(total, rel=0.01)
    assert m.params(active=True) == pytest.approx(active, rel=0.05)


def test_every_preset_is_consistent():
    for name, p in PRESETS.items():
        job = p.job
        assert job.parallelism.gpus == job.placement.pods * job.placement.gpus_per_pod, name
        assert sum(len(job.stage_layers(s)) for s in range(job.parallelism.pp)) == job.model.layers


def test_stage_layers_uneven_split():
    job = get_preset("deepseek-v3")  # 61 layers on 4 stages
    assert [len(job.stage_layers(s)) for s in range(4)] == [16, 15, 15, 15]
    assert job.stage_layers(1).start == 16


def _job_dict(**par):
    return dict(
        model=dict(layers=4, hidden=64, seq_len=32, vocab=100, moe_experts=8, moe_top_k=2),
        parallelism=par,
        placement=dict(gpus_per_pod=4, pods=2),
    )


@pytest.mark.parametrize(
    ("par", "field"),
    [
        (dict(tp=2, dp=2), "<root>"),  # 4 GPUs but 8 in the placement
        (dict(tp=2, dp=4, ep=3), "parallelism"),  # ep does not divide dp
        (dict(tp=8, dp=1), "<root>"),  # TP group larger than a pod
        (
            dict(dp=8, dp_collective="halving_doubling", ep=8, micro_batches=0),
            "parallelism.micro_batches",
        ),
    ],
)
def test_bad_jobs_name_the_field(par, field):
    with pytest.raises(ConfigError) as exc:
        validate(Job, _job_dict(**par))
    assert exc.value.field == field


def test_remap_onto_pods_absorbs_dp_and_ep():
    job = get_preset("moe")
    small = remap_onto_pods(job, 8)
    assert (small.parallelism.dp, small.parallelism.ep, small.placement.pods) == (8, 8, 8)
    pipe = get_preset("pipeline", pods=8)
    assert (pipe.parallelism.pp, pipe.parallelism.dp) == (8, 1)


def test_remap_that_does_not_divide_names_pods():
    with pytest.raises(ConfigError) as exc:
        get_preset("gpt3-175b", pods=7)
    assert exc.value.field == "pods"


def test_unknown_preset():
    with pytest.raises(ConfigError, match="unknown preset"):
        get_preset("gpt-5")
