"""Turn a finished :class:`~trainfabric.diloco.train.launch.TrainingRun`'s streamed JSONL logs
into atomic Parquet tables, ``manifest.json`` and ``result.json``."""

from __future__ import annotations

import json
import platform
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from trainfabric.diloco.train.config import EXPERIMENT, TrainConfig
from trainfabric.diloco.train.model import GPT, n_params
from trainfabric.io import write_json, write_parquet


@dataclass
class TrainResult:
    """What one training run produced (``result.json``): counts, losses (nats/byte), seconds."""

    run_dir: str
    learners: int
    params: int
    steps: int
    tokens: int
    syncs: int
    final_loss: float  # rank 0's training loss EWMA at the end (nats/byte)
    eval_loss: float  # held-out loss at the end (nats/byte)
    mean_sync_s: float | None
    sync_s: list[float]
    mean_step_s: float
    wall_s: float
    checkpoint_s: float  # cumulative seconds writing checkpoints (slowest learner)
    restarts: list[dict] = field(default_factory=list)
    shaping: dict | None = None


def _jsonl(path: Path) -> pd.DataFrame:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return pd.DataFrame(rows)


def steps_table(run_dir: Path, learners: int) -> pd.DataFrame:
    """All learners' step rows; a step redone after a restart keeps its last attempt."""
    frames = [_jsonl(run_dir / f"steps-rank{r}.jsonl") for r in range(learners)]
    df = pd.concat([f for f in frames if len(f)], ignore_index=True)
    df = df.sort_values(["rank", "step", "attempt"]).drop_duplicates(["rank", "step"], keep="last")
    return df.reset_index(drop=True)


def mean_step_s(steps: pd.DataFrame, syncs: pd.DataFrame) -> float:
    """Median wall time between consecutive steps of rank 0 outside syncs and restarts."""
    r0 = steps[steps["rank"] == 0].sort_values("step")
    dt = np.diff(r0["t"].to_numpy())
    same = np.diff(r0["attempt"].to_numpy()) == 0
    synced = set(syncs["step"]) if len(syncs) else set()
    clean = same & ~np.isin(r0["step"].to_numpy()[:-1], list(synced))
    return float(np.median(dt[clean])) if clean.any() else float("nan")


def finish(run) -> TrainResult:
    """Write the tables, manifest and ``result.json`` of a finished run; its
    :class:`TrainResult`."""
    cfg: TrainConfig = run.cfg
    d = run.run_dir
    steps = steps_table(d, cfg.learners)
    syncs = pd.DataFrame(run.syncs)
    evals = _jsonl(d / "evals.jsonl")
    evals = evals[evals["step"] <= steps["step"].max()] if len(evals) else evals
    write_parquet(d / "steps.parquet", steps)
    write_parquet(d / "syncs.parquet", syncs)
    write_parquet(d / "evals.parquet", evals)
    durations = [float(x) for x in syncs["duration_s"]] if len(syncs) else []
    shaping = run.net.manifest() if run.net is not None else {"shaped": False}
    shaping["measured_mean_sync_s"] = float(np.mean(durations)) if durations else None
    done = run.done
    res = TrainResult(
        run_dir=str(d),
        learners=cfg.learners,
        params=n_params(GPT(cfg.model) if run.model is None else run.model),
        steps=int(done["step"]),
        tokens=int(done["tokens"]) * cfg.learners,
        syncs=int(done["syncs"]),
        final_loss=float(done["loss"]),
        eval_loss=float(evals[evals["at"] == "end"]["eval_loss"].iloc[-1]),
        mean_sync_s=shaping["measured_mean_sync_s"],
        sync_s=durations,
        mean_step_s=mean_step_s(steps, syncs),
        wall_s=float(done["wall_s"]),
        checkpoint_s=run.checkpoint_seconds(),
        restarts=[asdict(r) for r in run.restarts],
        shaping=shaping,
    )
    write_json(
        d / "manifest.json",
        {
            "experiment": EXPERIMENT,
            "config": cfg.model_dump(),
            "shaping": shaping,
            "restarts": res.restarts,
            "torch": torch.__version__,
            "python": platform.python_version(),
            "backend": done.get("backend", cfg.backend),
            "params": res.params,
        },
    )
    write_json(d / "result.json", asdict(res))
    return res
