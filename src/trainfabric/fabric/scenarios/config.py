"""The scenario files: one typed config per kind, :func:`parse_scenario` and
:func:`load_scenario` (errors name the dotted field, ``kind`` first).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, model_validator

from trainfabric.config import Config, read_toml, validate
from trainfabric.errors import ConfigError
from trainfabric.fabric.config import (
    MAX_GPUS,
    MAX_MESSAGE_BYTES,
    Fraction,
    MiB,
    ScenarioConfig,
)
from trainfabric.fabric.iteration.config import IterationScenario

# a collective's buffer: 1 byte to 1 TiB, the range of `fabric collective`'s sizes
MessageBytes = Annotated[float, Field(ge=1, le=MAX_MESSAGE_BYTES)]


class CollectiveConfig(Config):
    """One collective: kind, algorithm, ranks and their placement, per-rank buffer."""

    kind: Literal["all_reduce", "reduce_scatter", "all_gather", "all_to_all", "permutation"] = (
        "all_reduce"
    )
    algorithm: Literal["ring", "halving_doubling"] = "ring"
    ranks: int | None = Field(
        None, ge=2, le=MAX_GPUS, description="ranks (default: all hosts; <= 1,048,576)"
    )
    size_bytes: MessageBytes = Field(256 * MiB, description="per-rank buffer S (NCCL-tests)")
    placement: Literal["packed", "scattered", "random"] = "random"
    step_latency_s: float = Field(2e-6, ge=0, description="software latency per step")
    sync: Literal["rank", "step"] = "rank"
    channels: int = Field(4, ge=1, le=64, description="connections (QPs) per rank pair")
    connections: Literal["persistent", "per_message"] = Field(
        "persistent",
        description="persistent: one queue pair per peer for every step (NCCL); per_message: "
        "a new connection (hash) per step, as htsim's generators",
    )


class LineRateScenario(ScenarioConfig):
    """(a) Line rate per collective x message size x mode (sizes override ``size_bytes``)."""

    kind: Literal["line_rate"] = "line_rate"
    collectives: list[CollectiveConfig] = Field(
        default_factory=lambda: [
            CollectiveConfig(kind="all_reduce", sync="step"),
            CollectiveConfig(kind="all_to_all"),
        ],
        min_length=1,
    )
    sizes_bytes: list[MessageBytes] = Field(
        default_factory=lambda: [1.0 * MiB, 16.0 * MiB, 256.0 * MiB, 4096.0 * MiB], min_length=1
    )


class IsolationScenario(ScenarioConfig):
    """(b) Victim alone vs next to an aggressor tenant (per oversubscription and fraction of
    failed leaf-spine cables; the same failures in the solo and the shared run)."""

    kind: Literal["isolation"] = "isolation"
    victim: CollectiveConfig = CollectiveConfig(kind="all_reduce", placement="scattered")
    aggressor: CollectiveConfig = CollectiveConfig(
        kind="all_to_all", placement="scattered", size_bytes=1024 * MiB
    )
    victim_fraction: float = Field(0.5, gt=0, lt=1, description="share of hosts for the victim")
    oversubscription: list[Annotated[float, Field(ge=1)]] = Field(
        default_factory=lambda: [1.0, 2.0], min_length=1
    )
    failed_fractions: list[Fraction] = Field(default_factory=lambda: [0.0, 0.1], min_length=1)


class FailuresScenario(ScenarioConfig):
    """(c) Fabric-link failures: permutation throughput vs LP vs 1 - f; collective time;
    estimated packet latency under an offered background load."""

    kind: Literal["failures"] = "failures"
    fractions: list[Fraction] = Field(default_factory=lambda: [0.0, 0.05, 0.1, 0.2], min_length=1)
    draws: int = Field(3, ge=1, le=100, description="failure sets x permutations per fraction")
    channels: int = Field(4, ge=1, le=64, description="connections (QPs) per host pair")
    collective: CollectiveConfig = CollectiveConfig(kind="all_reduce")
    lp: bool = Field(True, description="solve the max-concurrent-flow LP (HiGHS) per draw")
    offered_load: float = Field(
        0.5, gt=0, lt=1, description="background load of the latency estimate (of line rate)"
    )


class FlapConfig(Config):
    """One flap: a host link (rank 0's NIC, plane 0) or a fabric cable down for a while.

    ``at_s``: when it goes down; default: 10% into the collective of ``iteration`` in the
    mode's flap-free run, so that it hits while the job communicates.
    """

    link: Literal["host", "fabric"]
    at_s: float | None = Field(None, ge=0)
    iteration: int = Field(
        2, ge=0, le=10_000, description="iteration hit when at_s is not given (<= 10,000)"
    )
    duration_s: float = Field(gt=0)

    @model_validator(mode="after")
    def _one_time(self) -> FlapConfig:
        if self.at_s is not None and "iteration" in self.model_fields_set:
            raise ValueError("give at_s or iteration, not both (at_s sets the time itself)")
        return self


class FlapsScenario(ScenarioConfig):
    """(d) Host and fabric link flaps during a training-like collective sequence."""

    kind: Literal["flaps"] = "flaps"
    collective: CollectiveConfig = CollectiveConfig(kind="all_reduce", ranks=16)
    iterations: int = Field(20, ge=2, le=10_000)
    compute_s: float = Field(0.1, ge=0, description="compute between collectives")
    flaps: list[FlapConfig] = Field(
        default_factory=lambda: [
            FlapConfig(link="host", duration_s=1.5),
            FlapConfig(link="fabric", duration_s=1.5),
        ],
        min_length=1,
    )


SCENARIOS: dict[str, type[ScenarioConfig]] = {
    "line_rate": LineRateScenario,
    "isolation": IsolationScenario,
    "failures": FailuresScenario,
    "flaps": FlapsScenario,
}


# Every kind `fabric run` reads: the four evaluation scenarios (each also a registered
# experiment, experiments.fabric_studies) and a job's iteration on the fabric.
KINDS: dict[str, type[ScenarioConfig]] = {**SCENARIOS, "iteration": IterationScenario}


Scenario = (
    LineRateScenario | IsolationScenario | FailuresScenario | FlapsScenario | IterationScenario
)


def parse_scenario(data: dict, prefix: str = "") -> Scenario:
    """Validate a scenario mapping; errors name the dotted field (``kind`` first)."""
    if not isinstance(data, dict):
        raise ConfigError(prefix.rstrip(".") or "scenario", "must be a table")
    kind = data.get("kind")
    if not isinstance(kind, str) or kind not in KINDS:
        raise ConfigError(f"{prefix}kind", f"must be one of {', '.join(KINDS)}, got {kind!r}")
    return validate(KINDS[kind], data, prefix)


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario TOML file."""
    return parse_scenario(read_toml(path))
