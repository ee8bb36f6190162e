"""The experiment registry and the built-in ``moe_skew`` experiment."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import BaseModel

from trainfabric.config import Config
from trainfabric.errors import ConfigError
from trainfabric.experiments.library import MoeSkewConfig, moe_skew
from trainfabric.runs import get, names, register, registry


def test_library_registers_moe_skew():
    assert "moe_skew" in names()
    experiment = get("moe_skew")
    assert experiment.config_model is MoeSkewConfig
    assert experiment.function is moe_skew
    assert experiment.keys == ("shard",)
    assert experiment.description.startswith("Share of routed tokens")


def test_unknown_experiment_lists_known_ones():
    with pytest.raises(ConfigError) as info:
        get("moe_skw")
    assert info.value.field == "experiment"
    assert "unknown experiment 'moe_skw'" in str(info.value)
    assert "moe_skew" in str(info.value)


def test_reregistering_a_name_with_another_function_is_refused(monkeypatch):
    names()
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))

    def other(config, seed):
        raise AssertionError("never called")

    with pytest.raises(ValueError, match="already registered"):
        register("moe_skew", MoeSkewConfig)(other)
    register("moe_skew", MoeSkewConfig, keys=("shard",))(moe_skew)  # the same one: idempotent


def test_config_model_must_be_a_trainfabric_config():
    class Plain(BaseModel):
        a: int = 1

    with pytest.raises(TypeError, match="Config"):
        register("plain", Plain)
    assert issubclass(MoeSkewConfig, Config)


def test_moe_skew_table():
    config = MoeSkewConfig(experts=64, ep=8, gini=0.3)
    table = moe_skew(config, seed=5)
    assert list(table.columns) == ["shard", "share", "realised_gini", "shard_gini", "max_over_mean"]
    assert table["shard"].tolist() == list(range(8))
    assert table["share"].sum() == pytest.approx(1.0)
    assert table["realised_gini"].iloc[0] == pytest.approx(0.3, abs=1e-9)
    share = table["share"].to_numpy()
    assert table["max_over_mean"].iloc[0] == pytest.approx(share.max() * 8)
    assert 0 < table["shard_gini"].iloc[0] < 0.3  # shards pool experts: less skewed
    assert np.array_equal(moe_skew(config, 5)["share"], share)  # same seed, same numbers
    assert not np.array_equal(moe_skew(config, 6)["share"], share)


def test_moe_skew_uniform_at_gini_zero():
    table = moe_skew(MoeSkewConfig(experts=16, ep=4, gini=0.0), seed=0)
    assert table["max_over_mean"].iloc[0] == pytest.approx(1.0)
    assert table["shard_gini"].iloc[0] == pytest.approx(0.0)


@pytest.mark.parametrize(
    ("fields", "bad"),
    [
        ({"experts": 64, "ep": 6}, "ep"),
        ({"experts": 4, "gini": 0.8}, "gini"),
        ({"gini": 1.0}, "gini"),
        ({"experts": 0}, "experts"),
        ({"shards": 4}, "shards"),
    ],
)
def test_moe_skew_config_rejects(fields, bad):
    from trainfabric.config import validate

    with pytest.raises(ConfigError) as info:
        validate(MoeSkewConfig, fields)
    assert info.value.field == bad
