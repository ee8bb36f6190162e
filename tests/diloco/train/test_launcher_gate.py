"""A fragment gate driven by the launcher (``launch.start(..., gate=...)``) in a real
multi-process run (gloo, two learner processes, float64): rank 0 asks the launcher's WA score
gate at every due fragment and broadcasts the answer. The run equals a run of the scripted
deferrals the gate made (``StreamingConfig.defer``) to the bit, the gate did defer and did
open, and the gated run differs from the fixed schedule (the check can fail)."""

import pandas as pd
import pytest
import torch

from trainfabric.diloco.policies import make_policy
from trainfabric.diloco.train.config import ModelConfig, StreamingConfig
from trainfabric.diloco.train.controller import ScoreGate
from trainfabric.diloco.train.launch import start
from trainfabric.errors import ConfigError

from .conftest import tiny_config

QUIET = dict(
    loss_delta=0.0, staleness_s=0.0, network=0.0, inference=0.0, checkpoint=0.0,
    serve_now=0.0, serve_forecast=0.0, serve_next=0.0,
)  # fmt: skip


class Recording(ScoreGate):
    """The WA score gate, progress only at steps divisible by 3; records its answers."""

    def __init__(self):
        wa = make_policy("wa_diloco", min_h=1, max_h=100, threshold=0.25)
        super().__init__(wa, self.observe, max_overdue=5)
        self.seen: list[tuple[int, int, bool]] = []

    @staticmethod
    def observe(due):
        return QUIET | {"tokens": 1e12 if due.step % 3 == 0 else 0.0}

    def open(self, due):
        out = super().open(due)
        self.seen.append((due.fragment, due.step, out))
        return out


def _config(defer=()):
    st = StreamingConfig(fragments=2, overlap=1, alpha=0.5, defer=list(defer))
    model = ModelConfig(layers=2, d_model=16, heads=2, context=16)
    return tiny_config(steps=14, H=4, model=model, streaming=st, dtype="float64")


def _run(tmp_path, name, cfg, gate=None):
    res = start(cfg, tmp_path / name, gate=gate).wait()
    final = [torch.load(tmp_path / name / f"final-rank{r}.pt") for r in range(cfg.learners)]
    syncs = pd.read_parquet(tmp_path / name / "syncs.parquet")
    return res, final, sorted(zip(syncs["fragment"], syncs["step_start"], strict=True))


def _max_diff(a, b) -> float:
    return max(
        float((x - y).abs().max()) for pa, pb in zip(a, b, strict=True)
        for x, y in zip(pa, pb, strict=True)
    )  # fmt: skip


@pytest.mark.slow
def test_launcher_score_gate_equals_its_scripted_deferrals(tmp_path):
    gate = Recording()
    _, gated, gsyncs = _run(tmp_path, "gated", _config(), gate)
    deferred = [(p, t) for p, t, ok in gate.seen if not ok]
    assert deferred and any(ok for *_, ok in gate.seen)
    _, scripted, ssyncs = _run(tmp_path, "scripted", _config(deferred))
    assert gsyncs == ssyncs
    assert _max_diff(gated, scripted) == 0.0
    _, fixed, _ = _run(tmp_path, "fixed", _config())
    assert _max_diff(gated, fixed) > 1e-6


def test_gate_needs_streaming_and_excludes_defer(tmp_path):
    with pytest.raises(ConfigError) as e:
        start(tiny_config(), tmp_path / "a", gate=Recording())
    assert e.value.field == "gate"
    with pytest.raises(ConfigError) as e:
        start(_config([(0, 4)]), tmp_path / "b", gate=Recording())
    assert e.value.field == "gate"
