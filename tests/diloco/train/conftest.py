"""Shared pieces of the DiLoCo training tests: a tiny model and unshaped-run configs."""

import os

import pytest

from trainfabric.diloco.train.config import ModelConfig, TrainConfig

TINY = ModelConfig(layers=1, d_model=16, heads=2, context=16)


def tiny_config(**kw) -> TrainConfig:
    base = dict(
        learners=2, steps=8, H=1, control_window_s=0.0, batch=4, model=TINY,
        checkpoint_every=1000, eval_batches=1, corpus_bytes=20_000, shaping=None,
        unshaped_ok=True, save_final=True,
    )  # fmt: skip
    return TrainConfig(**(base | kw))


needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="network namespaces and tc need root (CAP_NET_ADMIN)"
)
