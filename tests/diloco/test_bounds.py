"""Every user-given size of the DiLoCo pillar has an upper bound: an absurd value in a config
is a ConfigError naming the field and its bound, an absurd option one stderr line naming the
option and its bound (exit 2), both before any work."""

from __future__ import annotations

import pytest

from trainfabric.config import MAX_SEED, validate
from trainfabric.diloco.fleet import FleetConfig
from trainfabric.diloco.live import LiveConfig
from trainfabric.diloco.protocol import ProtocolConfig
from trainfabric.diloco.serve import cli as serve_cli
from trainfabric.diloco.serve import replay
from trainfabric.diloco.serve.sidecar import SidecarConfig
from trainfabric.diloco.serving import ServingModel
from trainfabric.diloco.telemetry import MAX_SLO_S, PressureModel
from trainfabric.diloco.train.config import TrainConfig
from trainfabric.errors import ConfigError

HUGE = 2**63 - 1
URL = {"url": "http://127.0.0.1:8000"}

# (model, required fields, the field as a dotted path, the absurd value, the bound's text)
SCHEMA_CAPS = [
    (LiveConfig, {}, "H", HUGE, "10000000"),
    (LiveConfig, {}, "min_h", HUGE, "10000000"),
    (LiveConfig, {}, "max_h", HUGE, "10000000"),
    (LiveConfig, {}, "seeds", HUGE, "1000"),
    (LiveConfig, {}, "seed0", HUGE, "10000"),
    (LiveConfig, {}, "learners", HUGE, "16"),
    (LiveConfig, {}, "sim_draws", HUGE, "1000"),
    (LiveConfig, {}, "duration_s", 1e300, "86400"),
    (LiveConfig, {}, "ttft_slo_s", 1e300, "3600"),
    (LiveConfig, {}, "tpot_slo_s", 1e300, "3600"),
    (replay.ReplayConfig, URL, "context", HUGE, "67108864"),
    (replay.ReplayConfig, URL, "seed", 2**63, str(MAX_SEED)),
    (replay.ReplayConfig, URL, "max_requests", HUGE, "10000000"),
    (replay.ReplayConfig, URL, "ttft_slo_s", 1e300, "3600"),
    (replay.ReplayConfig, URL, "tpot_slo_s", 1e300, "3600"),
    (replay.ReplayConfig, URL, "window_s", 1e300, "3600"),
    (replay.ReplayConfig, URL, "read_timeout_s", 1e300, "86400"),
    (replay.ReplayConfig, URL, "token_ids.1", (3, HUGE), "16777216"),
    (ServingModel, {}, "max_batch", HUGE, "65536"),
    (ServingModel, {}, "kv_tokens", HUGE, "4294967296"),
    (ServingModel, {}, "replicas", HUGE, "64"),
    (ServingModel, {}, "decode_base_s", 1e300, "60"),
    (ServingModel, {}, "interference", 1e300, "1000"),
    (ServingModel, {}, "ttft_slo_s", 1e300, "3600"),
    (FleetConfig, {}, "windows", HUGE, "at most 100,000,000"),
    (FleetConfig, {}, "window_s", 1e300, "3600"),
    (FleetConfig, {}, "serving.max_batch", HUGE, "65536"),
    (PressureModel, {}, "queue_scale", 1e300, "1000000000"),
    (ProtocolConfig, {}, "seeds", HUGE, "10000"),
    (ProtocolConfig, {}, "max_seeds", HUGE, "10000"),
    (ProtocolConfig, {}, "pilot_seeds", HUGE, "1000"),
    (ProtocolConfig, {}, "envelope_draws", HUGE, "1000"),
    (ProtocolConfig, {}, "calibration_seeds", HUGE, "100"),
    (ProtocolConfig, {}, "loss_margin", 1e300, "100"),
    (SidecarConfig, URL, "port", HUGE, "65535"),
    (SidecarConfig, URL, "unknown_after", HUGE, "1000"),
    (TrainConfig, {}, "learners", HUGE, "64"),
    (TrainConfig, {}, "steps", HUGE, "10000000"),
    (TrainConfig, {}, "H", HUGE, "10000000"),
    (TrainConfig, {}, "checkpoint_every", HUGE, "10000000"),
    (TrainConfig, {}, "batch", HUGE, "4096"),
    (TrainConfig, {}, "seed", 2**63, str(MAX_SEED)),
    (TrainConfig, {}, "threads", HUGE, "256"),
    (TrainConfig, {}, "eval_batches", HUGE, "10000"),
    (TrainConfig, {}, "max_restarts", HUGE, "1000"),
    (TrainConfig, {}, "corpus_bytes", HUGE, "1000000000"),
    (TrainConfig, {}, "model.layers", HUGE, "48"),
    (TrainConfig, {}, "model.d_model", HUGE, "8192"),
    (TrainConfig, {}, "model.heads", HUGE, "128"),
    (TrainConfig, {}, "model.context", HUGE, "8192"),
]


def _nested(path: str, value) -> dict:
    """``{"a": {"b": value}}`` for ``"a.b"`` (a trailing index is part of the value)."""
    head, _, rest = path.partition(".")
    if not rest or rest.isdigit():
        return {head: value}
    return {head: _nested(rest, value)}


@pytest.mark.parametrize(
    ("model", "base", "field", "value", "bound"),
    SCHEMA_CAPS,
    ids=[f"{m.__name__}.{f}" for m, _, f, _, _ in SCHEMA_CAPS],
)
def test_absurd_config_field_refused_naming_it_and_its_bound(model, base, field, value, bound):
    with pytest.raises(ConfigError) as info:
        validate(model, base | _nested(field, value))
    assert info.value.field == field
    assert bound in info.value.message


REPLAY = ["diloco", "replay", "azure", "--url", "http://127.0.0.1:9"]
TRAIN = ["diloco", "train", "--unshaped"]
OPTION_CAPS = [
    ([*REPLAY, "--context", str(HUGE)], "'--context'", "67108864"),
    ([*REPLAY, "--seed", str(2**63)], "'--seed'", str(MAX_SEED)),
    ([*REPLAY, "--max-requests", str(HUGE)], "'--max-requests'", "10000000"),
    ([*REPLAY, "--max-seconds", "1e300"], "'--max-seconds'", "1e+07"),
    ([*REPLAY, "--drain", "1e300"], "'--drain'", "1e+06"),
    ([*REPLAY, "--ttft-slo", "1e300"], "'--ttft-slo'", "3600"),
    ([*REPLAY, "--tpot-slo", "1e300"], "'--tpot-slo'", "3600"),
    ([*REPLAY, "--window", "1e300"], "'--window'", "3600"),
    ([*REPLAY, "--rate-scale", "1e300"], "'--rate-scale'", "1e+06"),
    (["diloco", "live", "--seed", str(HUGE)], "'--seed'", "10000"),
    (["diloco", "live", "--seeds", str(HUGE)], "'--seeds'", "1000"),
    (["diloco", "live", "--learners", str(HUGE)], "'--learners'", "16"),
    (["diloco", "live", "--duration-s", "1e300"], "'--duration-s'", "86400"),
    (["diloco", "live", "--shaping-mbit", "1e300"], "'--shaping-mbit'", "100000"),
    ([*TRAIN, "--learners", str(HUGE)], "'--learners'", "64"),
    ([*TRAIN, "--steps", str(HUGE)], "'--steps'", "10000000"),
    ([*TRAIN, "--H", str(HUGE)], "'--H'", "10000000"),
    ([*TRAIN, "--checkpoint-every", str(HUGE)], "'--checkpoint-every'", "10000000"),
    ([*TRAIN, "--seed", str(2**63)], "'--seed'", str(MAX_SEED)),
    ([*TRAIN, "--max-seconds", "1e300"], "'--max-seconds'", "1e+07"),
    ([*TRAIN, "--rate-mbit", "1e300"], "'--rate-mbit'", "100000"),
    ([*TRAIN, "--burst-kb", "1e300"], "'--burst-kb'", "1e+06"),
    (["diloco", "serve", "--port", str(HUGE)], "'--port'", "65535"),
    (["diloco", "serve", "--max-model-len", str(HUGE)], "'--max-model-len'", "1048576"),
    (["diloco", "sidecar", "--url", "http://x:1", "--port", str(HUGE)], "'--port'", "65535"),
    (["diloco", "sim", "--windows", str(HUGE)], "'--windows'", "100000000"),
    (["diloco", "sim", "--seed", str(2**63)], "'--seed'", str(MAX_SEED)),
    (["diloco", "protocol", "--seeds", str(HUGE)], "'--seeds'", "10000"),
    (["diloco", "protocol", "--windows", str(HUGE)], "'--windows'", "100000000"),
    (["diloco", "protocol", "--pilot-seeds", str(HUGE)], "'--pilot-seeds'", "1000"),
    (["diloco", "protocol", "--max-seeds", str(HUGE)], "'--max-seeds'", "10000"),
]


@pytest.mark.parametrize(
    ("argv", "option", "bound"),
    OPTION_CAPS,
    ids=[" ".join(a[:2]) + " " + o for a, o, _ in OPTION_CAPS],
)
def test_absurd_option_refused_naming_it_and_its_bound(cli, argv, option, bound):
    code, out, err = cli(*argv)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert option in lines[0] and bound in lines[0]


def test_replay_options_share_the_configs_bounds():
    """The replay command repeats ReplayConfig's bounds (so `--help` imports no numpy)."""
    fields = replay.ReplayConfig.model_fields
    assert serve_cli.MAX_CONTEXT == replay.MAX_CONTEXT
    assert serve_cli.MAX_SLO_S == MAX_SLO_S
    for name in ("ttft_slo_s", "tpot_slo_s", "window_s"):
        assert any(getattr(m, "le", None) == MAX_SLO_S for m in fields[name].metadata)
