"""The ``iteration`` scenario kind's configuration: the job, tenants and faults of a training
iteration on the fabric (run by :mod:`trainfabric.fabric.iteration.scenario`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from trainfabric.config import Config
from trainfabric.fabric.config import FaultsConfig, ScenarioConfig, TopologyConfig


class WorkloadConfig(Config):
    """The job of an ``iteration`` scenario (:mod:`trainfabric.fabric.iteration.run`): a preset
    name, a job TOML or a task-DAG JSON; each pod is a server of ``gpus_per_pod`` GPUs."""

    name: str = Field("llama3-70b", min_length=1, description="preset, job .toml or DAG .json")
    pods: int | None = Field(None, ge=2, le=65_536, description="servers (re-maps a preset)")
    gpus_per_pod: int = Field(8, ge=1, le=4096, description="GPUs per pod of a task-DAG JSON")
    layers: int | None = Field(
        None, ge=1, le=10_000, description="cut the model to this many layers (<= 10,000)"
    )
    placement: Literal["packed", "scattered", "random"] = "random"
    channels: int = Field(4, ge=1, le=64, description="connections (QPs) per GPU pair")
    overlap: list[Literal["none", "bucketed"]] = Field(
        default_factory=lambda: ["none", "bucketed"], min_length=1
    )
    bucket_mb: float | None = Field(
        None,
        gt=0,
        description="gradient bucket (MiB per GPU) of bucketed overlap; default "
        "Megatron-LM's size (PyTorch DDP uses 25)",
    )


class TenantsConfig(Config):
    """Several jobs on one fabric, servers interleaved on leaves; ``iterations`` back to back
    per job, each job starting at a seeded offset in ``[0, its solo iteration)``; ``draws``
    offset draws (the spread)."""

    jobs: list[WorkloadConfig] = Field(default_factory=list)
    iterations: int = Field(2, ge=1, le=100)
    draws: int = Field(3, ge=1, le=100, description="seeded draws of the start offsets")


class IterationScenario(ScenarioConfig):
    """(e) A training job's iteration on the fabric per mode and overlap setting; optional
    tenants and faults (:mod:`trainfabric.fabric.iteration.run`)."""

    kind: Literal["iteration"] = "iteration"
    topology: TopologyConfig = TopologyConfig(gpus=256, switch_radix=64)
    workload: WorkloadConfig = WorkloadConfig()
    tenants: TenantsConfig = TenantsConfig()
    faults: FaultsConfig | None = None
    bin_s: float | None = Field(
        None,
        ge=1e-6,  # one time bin per microsecond at most: an iteration's bins stay in memory
        description="utilisation bin (default: 1/100 of it), at least 1 us",
    )
    top_links: int = Field(10, ge=1, le=1000, description="most loaded links reported")
