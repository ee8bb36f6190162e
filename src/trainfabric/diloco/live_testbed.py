"""A testbed where a DiLoCo sync can cost serving: separate cores, one shared shaped link.

The live experiment (:mod:`trainfabric.diloco.live`) ran the learners and vLLM on the same
two cores and sent serving traffic over loopback: a sync, waiting on a slow link, *freed*
serving's cores (TTFT 0.21 s inside syncs vs 0.66 s outside). Here the two resources the
premise is about are separated and shared the way a fleet shares them:

The placement (cores, the shared link and its rate derived from INTELLECT-1) is
:mod:`~trainfabric.diloco.placement`'s.

**The queue depth** is tbf's ``latency`` (the longest a packet may wait: the queue holds
``R · latency + burst`` bytes; TCP fills it during a sync), swept over ``queue_ms``
(20, 100, 400 ms). The headline is at **100 ms**, fixed before running: one
bandwidth-delay product at a 100 ms round trip (an inter-continental RTT, the link
INTELLECT-1's slow syncs crossed), the classic router-buffer rule of thumb; 400 ms is the
toolkit's default tbf latency, 20 ms a shallow (AQM-like) buffer.

**A run** (:func:`run_queue`): the learners (fixed period: a sync whenever ``period_s``
seconds of compute have passed since the last sync ended, the first one ``phase`` seconds
later; no final sync) start; when they reach their first control point the client replays
``duration_s`` of trace segment ``seed`` (the live protocol's
:func:`~trainfabric.diloco.live.segment`, at ``rate_scale``; segment 22 is a full 100 s with
223 requests, its neighbours are short or empty) open-loop, with fresh prompts (no prefix
cache hits); then the learners stop. Each queue depth runs ``reps`` times, the depths
interleaved (A B C A B C: the machine drifts); repetition ``k`` draws its ``phase``
uniformly in ``[0, period_s)`` (seeded by ``(seed, k)``; the same for every depth), so the
syncs fall on different requests of the segment in different repetitions. One vLLM server
and one network serve every run (the queue is changed with ``tc qdisc replace``), after one
warm-up replay.

**What a sync costs serving** (:func:`sync_cost`): a request is *inside* when its lifetime
``[sent, finish]`` (client clock; an unfinished request lives to the replay's end) overlaps
a sync ``[start, end)`` (the learners' fences, same machine clock), else *outside*.
``ttft_inside_over_outside`` = median TTFT of the inside requests / median TTFT of the
outside ones (every request with a first token); ``tpot_inside_over_outside`` the same
for TPOT (finished requests of more than one token). 95% CI: percentile bootstrap over
requests, the two groups resampled independently (:func:`~trainfabric.diloco.live_analysis.
ratio_of_medians`), pooled over a depth's runs. Requests close in time share a queue, so
the CI describes these runs (it is narrower than a bootstrap over independent runs would
be); the repeated runs' own ratios are reported beside it. TPOT as the client sees it is
``(finish − first) / (tokens − 1)``: a first chunk held in the queue while later ones catch
up can shorten it (likely why it measured 0.75-0.76 inside/outside at 20 and 100 ms), so a
sync's cost shows in TTFT, not in TPOT.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
from pydantic import Field

from trainfabric.config import Config
from trainfabric.diloco import live_analysis as LA
from trainfabric.diloco.placement import (
    BURST_KB,
    HEADLINE_QUEUE_MS,
    INNER_PHASE_S,
    INTELLECT1,
    SYNC_FRACTION,
    client_replay,
    placed,
    ring_bytes,
    testbed_shaping,
)


class TestbedConfig(Config):
    """What :func:`run` measures (defaults: the full run; :func:`quick_config`)."""

    __test__ = False  # not a pytest class

    queue_ms: list[float] = Field(default_factory=lambda: [20.0, 100.0, 400.0], min_length=1)
    headline_queue_ms: float = Field(HEADLINE_QUEUE_MS, gt=0, le=60_000)
    reps: int = Field(2, ge=1, le=100, description="runs per queue depth")
    duration_s: float = Field(100.0, ge=5, le=3600, description="replay seconds per run")
    period_s: float = Field(INNER_PHASE_S, gt=0, le=3600, description="inner phase (s)")
    rate_scale: float = Field(0.4, gt=0, le=100)
    seed: int = Field(22, ge=0, le=10_000, description="trace segment")
    server: Literal["vllm", "emulator"] = "vllm"
    serve_core: int = Field(0, ge=0, le=4095)
    train_core: int = Field(1, ge=0, le=4095)
    burst_kb: float = Field(BURST_KB, gt=0, le=1_000_000)
    warmup_s: float = Field(20.0, ge=0, le=600)
    draws: int = Field(2000, ge=100, le=100_000, description="bootstrap draws")


def quick_config(**update) -> TestbedConfig:
    """A smoke run: one 25 s run per queue depth, a 5 s warm-up."""
    return TestbedConfig(**({"reps": 1, "duration_s": 25.0, "warmup_s": 5.0} | update))


def check_config(cfg: TestbedConfig) -> None:
    """Refuse what cannot run, naming the field."""
    from trainfabric.errors import ConfigError

    cores = os.cpu_count() or 1
    for name in ("serve_core", "train_core"):
        if getattr(cfg, name) >= cores:
            raise ConfigError(name, f"core {getattr(cfg, name)} does not exist ({cores} cores)")
    if cfg.serve_core == cfg.train_core:
        raise ConfigError("train_core", "must differ from serve_core (the point of the testbed)")
    if cfg.headline_queue_ms not in cfg.queue_ms:
        raise ConfigError("headline_queue_ms", f"must be one of queue_ms {cfg.queue_ms}")


# -- the controller --------------------------------------------------------------------------
class Periodic:
    """Sync whenever ``period_s`` seconds have passed since the last sync ended (the first
    sync ``period_s + phase_s`` after the learners started); ``started`` is set at the
    first control point."""

    def __init__(self, period_s: float, phase_s: float = 0.0):
        self.period_s, self.phase_s = period_s, phase_s
        self.started = threading.Event()

    def decide(self, progress) -> bool:
        self.started.set()
        wait = self.period_s + (self.phase_s if progress.syncs == 0 else 0.0)
        return progress.since_sync_s >= wait


def phase(cfg: TestbedConfig, rep: int) -> float:
    """Repetition ``rep``'s offset of the first sync: uniform in ``[0, period_s)``, seeded."""
    return float(np.random.default_rng([cfg.seed, rep, 31337]).uniform(0.0, cfg.period_s))


# -- one run ---------------------------------------------------------------------------------
@dataclass
class TestbedRun:
    """A finished run: the replay's requests (client clock, seconds since its start), the
    syncs on that clock, the queue drops and load averages around it."""

    __test__ = False

    queue_ms: float
    rep: int
    requests: pd.DataFrame
    syncs: np.ndarray  # (n, 2): start, end
    horizon_s: float
    drops: int
    load: tuple[float, float]
    steps_per_s: float
    phase_s: float = 0.0

    def inside(self) -> np.ndarray:
        """Per request: does its lifetime overlap a sync (module doc)."""
        finish = self.requests["finish_s"].to_numpy(float)
        end = np.where(np.isfinite(finish), finish, self.horizon_s)
        return LA.overlaps(self.requests["sent_s"].to_numpy(float), end, self.syncs)

    def summary(self) -> dict:
        inside = self.inside()
        span = float(np.clip(self.syncs[:, 1], 0, self.horizon_s).sum()
                     - np.clip(self.syncs[:, 0], 0, self.horizon_s).sum())  # fmt: skip
        return {
            "queue_ms": self.queue_ms,
            "rep": self.rep,
            "requests": len(self.requests),
            "inside": int(inside.sum()),
            "syncs": len(self.syncs),
            "mean_sync_s": float(np.mean(self.syncs[:, 1] - self.syncs[:, 0]))
            if len(self.syncs)
            else None,
            "sync_time_fraction": span / self.horizon_s,
            "qdisc_drops": self.drops,
            "load_avg_start_end": list(self.load),
            "learner_steps_per_s": self.steps_per_s,
            "first_sync_phase_s": self.phase_s,
        } | _ratios(self.requests, inside, draws=200, seed=self.rep)


def train_config(cfg: TestbedConfig, net_shaping, seed: int):
    """The learners' config: the default model and recipe, no checkpoints, no final sync."""
    from trainfabric.diloco.train.config import TrainConfig

    return TrainConfig(
        learners=2,
        steps=10_000_000,
        max_seconds=cfg.duration_s + 600.0,
        H=10_000_000,
        control_window_s=0.0,
        seed=seed,
        shaping=net_shaping,
        final_sync=False,
        checkpoint_every=10_000_000,
    )


def run_queue(cfg: TestbedConfig, net, url: str, model: str, queue_ms: float, rep: int,
              out_dir: Path, prompt_seed: int) -> TestbedRun:  # fmt: skip
    """One run at queue depth ``queue_ms`` (module doc)."""
    from trainfabric.diloco.live import LiveConfig, segment
    from trainfabric.diloco.train.launch import start

    net.reshape(net.shaping.model_copy(update={"latency_ms": queue_ms}))
    seg = LiveConfig(duration_s=cfg.duration_s, rate_scale=cfg.rate_scale, seeds=1)
    req = segment(seg, cfg.seed)
    ctl = Periodic(cfg.period_s, phase(cfg, rep))
    load0, drops0 = os.getloadavg()[0], net.queue_drops()
    run = start(train_config(cfg, net.shaping, rep), out_dir / "train", ctl,
                net=net, cpus=(cfg.train_core,))  # fmt: skip
    try:
        if not ctl.started.wait(300.0):
            raise RuntimeError("the learners did not reach a control point in 300 s")
        rep_res = client_replay(net, cfg.serve_core)(
            req, url=url, model=model, max_seconds=cfg.duration_s, max_requests=1_000_000,
            drain_s=30.0, seed=prompt_seed,
        )  # fmt: skip
    finally:
        run.stop()
    result = run.wait()
    t0 = rep_res.summary["start_unix_s"]
    sy = pd.read_parquet(out_dir / "train" / "syncs.parquet")
    syncs = np.c_[sy["t_start"].to_numpy(float) - t0, sy["t_end"].to_numpy(float) - t0]
    return TestbedRun(
        queue_ms=queue_ms,
        rep=rep,
        requests=rep_res.requests,
        syncs=syncs.reshape(-1, 2),
        horizon_s=float(rep_res.summary["duration_s"]),
        drops=net.queue_drops() - drops0,
        load=(load0, os.getloadavg()[0]),
        steps_per_s=1.0 / result.mean_step_s if result.mean_step_s > 0 else 0.0,
        phase_s=ctl.phase_s,
    )


# -- the measurement ---------------------------------------------------------------------------
def _ratios(requests: pd.DataFrame, inside: np.ndarray, draws: int, seed: int) -> dict:
    """TTFT and TPOT medians inside over outside with their bootstrap CIs."""
    out = {}
    for key, col in (("ttft", "ttft_s"), ("tpot", "tpot_s")):
        x = requests[col].to_numpy(float)
        if key == "tpot":  # one-token requests have no inter-token time
            x = np.where(requests["tokens"].to_numpy() > 1, x, np.nan)
        r = LA.ratio_of_medians(x[inside], x[~inside], draws=draws, seed=seed)
        out[f"{key}_inside_over_outside"] = r["ratio"]
        out[f"{key}_inside_over_outside_ci"] = r["ci"]
        out[f"{key}_median_inside_s"] = r["median_inside"]
        out[f"{key}_median_outside_s"] = r["median_outside"]
        out[f"{key}_n_inside"], out[f"{key}_n_outside"] = r["n_inside"], r["n_outside"]
    return out


def sync_cost(runs: list[TestbedRun], draws: int) -> dict:
    """The module doc's ratios over ``runs`` (one queue depth), requests pooled, with each
    run's own ratios beside them."""
    table = pd.concat([r.requests for r in runs], ignore_index=True)
    inside = np.concatenate([r.inside() for r in runs])
    return _ratios(table, inside, draws=draws, seed=int(runs[0].queue_ms)) | {
        "requests": len(table),
        "inside": int(inside.sum()),
        "runs": [r.summary() for r in runs],
    }


def run(cfg: TestbedConfig, out_dir: Path, say=lambda text: None) -> dict:
    """The whole measurement (module doc); returns the result document. The calling thread
    runs on ``train_core`` meanwhile (its affinity is restored at the end)."""
    from trainfabric.diloco.train.config import ModelConfig
    from trainfabric.diloco.train.model import GPT, n_params

    check_config(cfg)
    params = n_params(GPT(ModelConfig()))  # the learners' model (train_config's default)
    shaping = testbed_shaping(params, 2, cfg.period_s, cfg.headline_queue_ms, cfg.burst_kb)
    say(f"link {shaping.rate_mbit} Mbit/s; queue depths {cfg.queue_ms} ms x {cfg.reps}")
    started = time.time()
    with placed(shaping, cfg.server, cfg.serve_core, cfg.train_core,
                out_dir / "server.log") as (srv, net):  # fmt: skip
        runs = _measure(cfg, srv, net, out_dir, say)
        manifest = net.manifest()
    return _document(cfg, runs, params, shaping, manifest) | {"wall_s": time.time() - started}


def _measure(cfg: TestbedConfig, srv, net, out_dir: Path, say) -> dict[float, list[TestbedRun]]:
    """Warm the server up, run every queue depth ``reps`` times, interleaved."""
    from trainfabric.diloco.live import LiveConfig, segment

    runs: dict[float, list[TestbedRun]] = {q: [] for q in cfg.queue_ms}
    order = [q for _ in range(cfg.reps) for q in cfg.queue_ms]
    send = client_replay(net, cfg.serve_core)
    if cfg.warmup_s > 0:
        say(f"warm-up replay ({cfg.warmup_s:g} s)")
        warm = LiveConfig(duration_s=cfg.duration_s, rate_scale=cfg.rate_scale, seeds=1)
        send(segment(warm, cfg.seed), url=srv.url, model=srv.model, max_seconds=cfg.warmup_s,
             max_requests=1_000_000, drain_s=30.0, seed=10_000)  # fmt: skip
    for k, q in enumerate(order):
        rep = k // len(cfg.queue_ms)
        say(f"run {k + 1}/{len(order)}: queue {q:g} ms, repetition {rep}")
        r = run_queue(cfg, net, srv.url, srv.model, q, rep, out_dir / f"q{q:g}-r{rep}",
                      prompt_seed=k + 1)  # fmt: skip
        runs[q].append(r)
        s = r.summary()
        say(f"  {s['requests']} requests, {s['inside']} inside {s['syncs']} syncs; "
            f"TTFT ratio {s['ttft_inside_over_outside']}")  # fmt: skip
    return runs


def _document(cfg: TestbedConfig, runs, params: int, shaping, manifest: dict) -> dict:
    """The result: the headline keys at ``headline_queue_ms``, every depth, the link's
    derivation and the placement."""
    per_queue = {f"{q:g}": sync_cost(rs, cfg.draws) for q, rs in runs.items()}
    head = per_queue[f"{cfg.headline_queue_ms:g}"]
    keys = ("ttft_inside_over_outside", "ttft_inside_over_outside_ci",
            "tpot_inside_over_outside", "tpot_inside_over_outside_ci")  # fmt: skip
    return {
        **{k: head[k] for k in keys},
        "headline_queue_ms": cfg.headline_queue_ms,
        "per_queue_ms": per_queue,
        "link": {
            "rate_mbit": shaping.rate_mbit,
            "derivation": {
                **INTELLECT1,
                "sync_fraction_of_inner_phase": SYNC_FRACTION,
                "tiny_params": int(params),
                "tiny_ring_bytes_per_learner": ring_bytes(params, 4, 2),
                "inner_phase_s": cfg.period_s,
                "target_sync_s": SYNC_FRACTION * cfg.period_s,
            },
            "shaping": manifest | {"latency_ms": "swept: queue_ms"},
        },
        "placement": {
            "vllm_core": cfg.serve_core,
            "load_client_core": cfg.serve_core,
            "learners_core": cfg.train_core,
            "launcher_core": cfg.train_core,
            "server_namespace": manifest["namespaces"][0],
            "client_namespace": manifest["namespaces"][1],
        },
        "definition": (
            "median TTFT (TPOT) of requests whose lifetime [sent, finish] overlaps a sync, "
            "over the median of those that do not; 95% percentile bootstrap over requests, "
            "groups resampled independently, requests pooled over a depth's runs"
        ),
        "config": cfg.model_dump(mode="json"),
        "server": cfg.server,
    }
