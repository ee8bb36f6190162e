"""Built-in experiments. Importing this module registers them (see
:mod:`trainfabric.runs.registry`).

Pillars add their experiments here, or in modules imported from here, so that worker
processes that import only the registry find every experiment by name.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from pydantic import Field, ValidationInfo, field_validator

from trainfabric.config import Config
from trainfabric.runs.registry import register
from trainfabric.workloads import moe
from trainfabric.workloads.job import MAX_EXPERTS


class MoeSkewConfig(Config):
    """Expert-popularity skew of one MoE layer, spread over expert-parallel shards."""

    experts: int = Field(
        256, ge=1, le=MAX_EXPERTS, description="number of routed experts (<= 65,536)"
    )
    ep: int = Field(
        8, ge=1, le=MAX_EXPERTS, description="expert-parallel degree (shards, <= 65,536)"
    )
    gini: float = Field(0.2, ge=0, lt=1, description="target Gini coefficient of expert load")

    @field_validator("ep")
    @classmethod
    def _ep_divides_experts(cls, ep: int, info: ValidationInfo) -> int:
        experts = info.data.get("experts")
        if experts is not None and experts % ep:
            raise ValueError(f"must divide experts ({experts})")
        return ep

    @field_validator("gini")
    @classmethod
    def _gini_reachable(cls, gini: float, info: ValidationInfo) -> float:
        experts = info.data.get("experts")
        if experts is not None and experts > 1 and gini >= (experts - 1) / experts:
            raise ValueError(f"must be < {(experts - 1) / experts:.3f} with {experts} experts")
        return gini


@register("moe_skew", MoeSkewConfig, keys=("shard",))
def moe_skew(config: MoeSkewConfig, seed: int) -> pd.DataFrame:
    """Share of routed tokens per expert-parallel shard under skewed expert popularity.

    One row per shard: ``shard`` (index), ``share`` (fraction of all routed tokens, the rows
    sum to 1), and per-cell constants ``realised_gini`` (Gini of the per-expert popularity,
    equal to ``config.gini`` by construction), ``shard_gini`` (Gini of the shard shares) and
    ``max_over_mean`` (hottest shard's share over the mean share, ≥ 1; the all-to-all
    straggler factor). The seed only decides which expert gets which popularity.
    """
    popularity = moe.expert_popularity(config.experts, config.gini, np.random.default_rng(seed))
    share = moe.shard_share(popularity, config.ep)
    return pd.DataFrame(
        {
            "shard": np.arange(config.ep),
            "share": share,
            "realised_gini": moe.gini(popularity),
            "shard_gini": moe.gini(share),
            "max_over_mean": float(share.max() / share.mean()),
        }
    )


# Experiments defined in other modules register on import; keep them reachable from here.
from trainfabric.experiments import (  # noqa: E402, F401
    diloco_studies,
    fabric_iteration_studies,
    fabric_studies,
    ocs_detect_studies,
    ocs_fairness_studies,
    ocs_onehop_studies,
    ocs_online_studies,
    ocs_schedule_studies,
    ocs_studies,
    studies,
    workload_studies,
)
