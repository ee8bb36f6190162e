"""One learner process: inner steps, control points, DiLoCo syncs, checkpoints, logs.

Every learner steps in lockstep with the others: after each inner step rank 0 broadcasts a
one-element command (continue / sync / stop; skipped when ``M`` = 1), so a sync starts at the
same inner step everywhere. The command costs one tiny collective per step over the link;
its bytes are part of the link's counters. Logs are JSONL streamed into the run directory:
``steps-rank<r>.jsonl`` (every step: unix time, loss in nats/byte, perplexity, this
learner's tokens and all learners' ``tokens_all``) and ``evals.jsonl`` (rank 0: held-out loss
at every sync and at the end, of rank 0's model, which after a sync is the global model);
rank 0 sends every sync's record (unix start/end, duration, inner steps ``h`` it closed,
bytes all-reduced) to the launcher, which adds the link's byte counters.

With ``streaming`` set the syncs are Streaming DiLoCo's fragment syncs on their fixed
schedule (:mod:`~trainfabric.diloco.train.streaming`): the controller is not consulted,
each fragment's merge is one sync record (with its ``fragment`` and ``step_start``), and
rank 0 evaluates its model (partly merged) after each. With ``gated`` (the launcher holds a
fragment gate, e.g. :class:`~.controller.ScoreGate`) every due fragment is offered to it
(:meth:`Learner.gated_step`): rank 0 asks the launcher and broadcasts the answers within the
step's command, so every learner starts (or defers) the same fragment at the same step and a
deferral adds no collective.

A learner trains the byte-level GPT on the run's corpus unless its :class:`WorkerSpec`
brings a ``model`` (an ``nn.Module`` with ``loss(x, y)``; every learner starts from a copy
of it, cast to ``dtype``) and a ``batch`` function, ``batch(step, rank) -> (x, y)``: learner
``rank``'s batch for its inner step ``step`` (0-based; floating tensors are cast to
``dtype``); the held-out evaluation then averages the loss over ``batch(-1 - i, 0)`` for
``i < eval_batches``.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from trainfabric.diloco.train import checkpoint
from trainfabric.diloco.train.config import TrainConfig
from trainfabric.diloco.train.model import GPT
from trainfabric.diloco.train.outer import make_outer, outer_step
from trainfabric.diloco.train.streaming import (
    Collectives,
    Streamer,
    TorchCollectives,
    fragment_params,
)
from trainfabric.errors import WriteError
from trainfabric.io import writing

CONTINUE, SYNC, STOP = 0, 1, 2
STATUS_WIDTH = 5  # per rank: step, checkpointing, syncing, tokens, checkpoint seconds
EWMA = 0.1
HAND_OVER_S = 60.0  # the longest a learner waits to be stopped after a refused write
BatchFn = Callable[[int, int], tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class WorkerSpec:
    rank: int
    cfg: TrainConfig
    run_dir: Path
    master: str  # init_method: file:// store in the run directory (no TCP listener)
    namespace: str | None
    iface: str | None
    resume_step: int | None
    attempt: int
    model: nn.Module | None = None  # None: the GPT of cfg.model
    batch: BatchFn | None = None  # None: windows of the run's corpus
    cpus: tuple[int, ...] | None = None  # None: wherever the launcher runs
    gated: bool = False  # the launcher decides every due fragment (gated_step)


def data_generator(seed: int, rank: int) -> torch.Generator:
    """Learner ``rank``'s own stream of batch positions (independent across learners)."""
    return torch.Generator().manual_seed(seed * 1_000_003 + rank + 1)


def sample(
    data: torch.Tensor, gen: torch.Generator, batch: int, ctx: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``batch`` windows of ``ctx + 1`` tokens at uniform random offsets: inputs, targets."""
    ix = torch.randint(len(data) - ctx - 1, (batch,), generator=gen)
    rows = torch.stack([data[i : i + ctx + 1] for i in ix.tolist()])
    return rows[:, :-1], rows[:, 1:]


class Learner:
    def __init__(self, spec: WorkerSpec, status, conn, stop_flag):
        self.spec, self.cfg, self.rank = spec, spec.cfg, spec.rank
        self.world = spec.cfg.learners
        self.status, self.conn, self.stop_flag = status, conn, stop_flag
        self.dtype = getattr(torch, self.cfg.dtype)
        gpu = self.backend() == "nccl"
        self.device = torch.device("cuda", self.rank) if gpu else torch.device("cpu")
        self.batches = spec.batch
        if self.batches is None:
            train = np.fromfile(spec.run_dir / "train.bin", np.uint8)
            self.data = torch.from_numpy(train).long()
            held = np.fromfile(spec.run_dir / "heldout.bin", np.uint8)
            self.heldout = torch.from_numpy(held).long()
        torch.manual_seed(self.cfg.seed)
        model = GPT(self.cfg.model) if spec.model is None else copy.deepcopy(spec.model)
        self.model = model.to(self.device, self.dtype)
        self.params = list(self.model.parameters())
        self.glob = [p.detach().clone() for p in self.params]
        # one outer optimiser for the whole model, or one per fragment in the streamer
        self.stream = None if self.cfg.streaming is None else self.new_streamer()
        self.outer = self.new_outer(self.glob) if self.stream is None else None
        self.inner = self.new_inner()
        self.gen = data_generator(self.cfg.seed, self.rank)
        self.c: dict[str, Any] = dict(
            step=0,
            h=0,
            tokens=0,
            tokens_since_sync=0,
            syncs=0,
            loss=math.nan,
            loss_at_sync=math.nan,
            last_sync_s=0.0,
            wall_before=0.0,
        )
        self.t0 = time.time()
        self.sync_end = self.t0
        self.logs: dict[str, Any] = {}
        self.ckpt_s = 0.0

    def backend(self) -> str:
        """``auto``: nccl when every learner can have a GPU of its own (NCCL refuses two
        ranks on one device), else gloo on CPU."""
        if self.cfg.backend != "auto":
            return self.cfg.backend
        enough = torch.cuda.is_available() and torch.cuda.device_count() >= self.world
        return "nccl" if enough else "gloo"

    def new_inner(self) -> torch.optim.Optimizer:
        if self.cfg.inner == "sgd":
            return torch.optim.SGD(self.params, lr=self.cfg.inner_lr)
        return torch.optim.AdamW(
            self.params,
            lr=self.cfg.inner_lr,
            betas=self.cfg.inner_betas,
            eps=self.cfg.inner_eps,
            weight_decay=self.cfg.weight_decay,
        )

    def new_outer(self, params: list[torch.Tensor]) -> torch.optim.Optimizer:
        cfg = self.cfg
        return make_outer(params, cfg.outer_lr, cfg.outer_momentum, cfg.nesterov)

    def new_streamer(self) -> Streamer:
        st = self.cfg.streaming
        frags = fragment_params(self.model, st.fragments, st.layout)
        return Streamer(
            st,
            self.cfg.H,
            self.glob,
            [p.data for p in self.params],
            frags,
            self.new_outer,
            self.collectives(),
            self.cfg.bucket_mb * 1e6,
        )

    def collectives(self) -> Collectives:
        """The group's collectives for the fragment syncs."""
        return TorchCollectives(self.world)

    # ---- data ------------------------------------------------------------------------
    def batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.batches is not None:
            return self.placed(self.batches(self.c["step"], self.rank))
        x, y = sample(self.data, self.gen, self.cfg.batch, self.cfg.model.context)
        return x.to(self.device), y.to(self.device)

    def placed(self, xy: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        """A ``batch`` function's tensors on the device, floating ones in ``dtype``."""
        dt = self.dtype
        return tuple(t.to(self.device, dt if t.is_floating_point() else t.dtype) for t in xy)

    @torch.no_grad()
    def eval_loss(self) -> float:
        """Mean loss over ``eval_batches`` fixed, evenly spaced held-out windows × batch
        (with a ``batch`` function: over its batches ``batch(-1 - i, 0)``)."""
        if self.batches is not None:
            held = (self.placed(self.batches(-1 - i, 0)) for i in range(self.cfg.eval_batches))
            return float(np.mean([self.model.loss(x, y).item() for x, y in held]))
        ctx, n = self.cfg.model.context, self.cfg.eval_batches * self.cfg.batch
        starts = np.linspace(0, len(self.heldout) - ctx - 2, n).astype(np.int64)
        losses = []
        for chunk in np.array_split(starts, self.cfg.eval_batches):
            rows = torch.stack([self.heldout[i : i + ctx + 1] for i in chunk]).to(self.device)
            losses.append(self.model.loss(rows[:, :-1], rows[:, 1:]).item())
        return float(np.mean(losses))

    # ---- state -----------------------------------------------------------------------
    def state(self) -> dict:
        return {
            "model": self.model.state_dict(),
            "inner": self.inner.state_dict(),
            "outer": self.outer.state_dict() if self.stream is None else self.stream.state(),
            "global": [g.clone() for g in self.glob],
            "counters": dict(self.c, wall_before=self.c["wall_before"] + self.wall()),
            "gen": self.gen.get_state(),
            "torch_rng": torch.get_rng_state(),
        }

    def restore(self, step: int) -> None:
        st = checkpoint.load(self.spec.run_dir / "ckpt", self.rank, step, self.device)
        self.model.load_state_dict(st["model"])
        self.inner.load_state_dict(st["inner"])
        with torch.no_grad():
            for g, s in zip(self.glob, st["global"], strict=True):
                g.copy_(s)
        if self.stream is None:
            self.outer.load_state_dict(st["outer"])
        else:
            self.stream.load_state(st["outer"])
        self.c = dict(st["counters"])
        self.gen.set_state(st["gen"].cpu())
        torch.set_rng_state(st["torch_rng"].cpu())

    def wall(self) -> float:
        return time.time() - self.t0

    def set_status(self, col: int, value: float) -> None:
        self.status[self.rank * STATUS_WIDTH + col] = value

    # ---- logging ---------------------------------------------------------------------
    def log(self, name: str, row: dict) -> None:
        """Append ``row`` to the JSONL log ``name`` (a refused write: a WriteError naming it)."""
        with writing(self.spec.run_dir / name):
            fh = self.logs.get(name)
            if fh is None:
                fh = self.logs[name] = open(self.spec.run_dir / name, "a", buffering=1)  # noqa: SIM115 (closed at the end of run)
            fh.write(json.dumps(row) + "\n")

    # ---- the loop ----------------------------------------------------------------------
    def inner_step(self) -> None:
        x, y = self.batch()
        loss = self.model.loss(x, y)
        self.inner.zero_grad(set_to_none=True)
        loss.backward()
        self.inner.step()
        value = loss.item()
        c = self.c
        c["step"] += 1
        c["h"] += 1
        ntok = x.numel()
        c["tokens"] += ntok
        c["tokens_since_sync"] += ntok * self.world
        c["loss"] = value if math.isnan(c["loss"]) else (1 - EWMA) * c["loss"] + EWMA * value
        if math.isnan(c["loss_at_sync"]):
            c["loss_at_sync"] = value
        self.set_status(0, c["step"])
        self.set_status(3, c["tokens"])
        self.log(
            f"steps-rank{self.rank}.jsonl",
            {
                "rank": self.rank,
                "step": c["step"],
                "t": time.time(),
                "loss": value,
                "perplexity": math.exp(min(value, 700.0)),
                "tokens": c["tokens"],
                "attempt": self.spec.attempt,
            },
        )

    def decide(self, last: bool) -> int:
        """Rank 0 asks the controller (through the launcher) when a window has elapsed."""
        if self.rank != 0:
            return CONTINUE
        if self.stop_flag.value or last:
            return STOP
        cfg, c = self.cfg, self.c
        if cfg.max_seconds is not None and c["wall_before"] + self.wall() >= cfg.max_seconds:
            return STOP
        if self.stream is not None:  # the fragments' schedule is fixed
            return CONTINUE
        now = time.time()
        if now - self.last_consult < cfg.control_window_s:
            return CONTINUE
        self.last_consult = now
        progress = dict(
            step=c["step"],
            h=c["h"],
            tokens=c["tokens"] * self.world,
            tokens_since_sync=c["tokens_since_sync"],
            loss=c["loss"],
            loss_at_sync=c["loss_at_sync"],
            syncs=c["syncs"],
            wall_s=c["wall_before"] + self.wall(),
            since_sync_s=now - self.sync_end,
            last_sync_s=c["last_sync_s"],
        )
        self.conn.send(("progress", progress))
        return SYNC if self.conn.recv() else CONTINUE

    def command(self, cmd: int) -> int:
        return self.broadcast([cmd])[0]

    def broadcast(self, values: list[int]) -> list[int]:
        """Rank 0's ``values`` on every learner (one collective; none when ``M`` = 1)."""
        if self.world == 1:
            return values
        t = torch.tensor(values, dtype=torch.int64, device=self.device)
        dist.broadcast(t, 0)
        return t.tolist()

    def gated_step(self, last: bool) -> int:
        """A streaming step under the launcher's fragment gate: rank 0 asks the launcher
        about every fragment offered now (each ``("fragment_due", FragmentDue fields)``,
        answered with its gate's ``open``) and broadcasts the answers with the step's command
        in the one collective of the step, so a deferral costs the learners no extra round
        trip over the link; every learner then starts the fragments opened. Every learner
        offers the same fragments at the same step (the schedule is deterministic, the
        learners step in lockstep), so the broadcasts pair up. The command."""
        offers = self.stream.offers(self.c["step"])
        asked = [0] * len(offers)
        if self.rank == 0:
            for i, due in enumerate(offers):
                self.conn.send(("fragment_due", dataclasses.asdict(due)))
                asked[i] = int(bool(self.conn.recv()))
        got = self.broadcast([self.decide(last), *asked])
        opened = {due.fragment for due, go in zip(offers, got[1:], strict=True) if go}
        self.stream_synced(self.stream.step(self.c["step"], opened))
        return got[0]

    def reduce(self, flat: torch.Tensor) -> None:
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)

    def fence(self) -> None:
        """A barrier of all learners (none when alone)."""
        if self.world > 1:
            dist.barrier()

    def sync(self) -> None:
        """One DiLoCo sync. With several learners it is fenced by two barriers so that the
        launcher's link counters (read when rank 0 announces the sync and after it) bracket
        exactly this sync's traffic; its duration runs from the first fence to the second."""
        c = self.c
        self.set_status(2, 1)
        if self.rank == 0:
            self.conn.send(("sync_start", {"step": c["step"]}))
            self.conn.recv()  # the launcher has read the counters
        self.fence()
        t0 = time.time()
        nbytes = outer_step(
            self.glob,
            self.params,
            self.outer,
            self.reduce if self.world > 1 else _noop,
            self.world,
            self.cfg.bucket_mb * 1e6,
        )
        self.fence()
        t1 = time.time()
        self.set_status(2, 0)
        if self.cfg.reset_inner_optimizer:
            self.inner = self.new_inner()
        self.synced({"t_start": t0, "t_end": t1, "duration_s": t1 - t0, "h": c["h"]}, nbytes)

    def synced(self, timing: dict, nbytes: int, extra: dict | None = None) -> None:
        """Bookkeeping after a sync (``timing``: t_start, t_end, duration_s and the inner
        steps ``h`` it closed); rank 0 reports it and evaluates."""
        c = self.c
        c["syncs"] += 1
        c["h"] = 0
        c["tokens_since_sync"] = 0
        c["last_sync_s"] = timing["duration_s"]
        self.sync_end = timing["t_end"]
        if self.rank == 0:
            row = {"sync": c["syncs"], "step": c["step"]} | timing
            row |= {"tokens_all": c["tokens"] * self.world, "bytes": nbytes}
            row |= {"attempt": self.spec.attempt} | (extra or {})
            self.conn.send(("sync_end", row))
            self.log_eval("sync")
        c["loss_at_sync"] = c["loss"]

    def stream_synced(self, records: list[dict]) -> None:
        """Bookkeeping of the fragment syncs merged after this step."""
        for rec in records:
            timing = {k: rec[k] for k in ("t_start", "t_end", "duration_s", "h")}
            self.synced(timing, rec["bytes"], {k: rec[k] for k in ("fragment", "step_start")})
        self.set_status(2, float(self.stream.busy()))

    def log_eval(self, at: str) -> None:
        c = self.c
        row = {"step": c["step"], "sync": c["syncs"], "tokens_all": c["tokens"] * self.world}
        row |= {"eval_loss": self.eval_loss(), "t": time.time(), "at": at}
        self.log("evals.jsonl", row)

    def save(self) -> None:
        """Checkpoint; while it is written status says so, and its seconds add up."""
        self.set_status(1, 1)
        t0 = time.perf_counter()
        try:
            checkpoint.save(self.spec.run_dir / "ckpt", self.rank, self.c["step"], self.state())
        finally:
            self.set_status(1, 0)
            self.ckpt_s += time.perf_counter() - t0
            self.set_status(4, self.ckpt_s)

    def run(self) -> None:
        cfg = self.cfg
        if self.spec.resume_step is not None:
            self.restore(self.spec.resume_step)
        self.last_consult = 0.0
        while self.c["step"] < cfg.steps:
            self.inner_step()
            last = self.c["step"] >= cfg.steps
            if self.stream is not None and self.spec.gated:
                cmd = self.gated_step(last)
            else:
                if self.stream is not None:
                    self.stream_synced(self.stream.step(self.c["step"]))
                cmd = self.command(self.decide(last))
            if cmd == SYNC:
                self.sync()
            if cmd == STOP:
                break
            if self.c["step"] % cfg.checkpoint_every == 0:
                self.save()
        if self.stream is not None:
            self.stream_synced(self.stream.close(self.c["step"], cfg.final_sync))
        elif cfg.final_sync and self.c["h"] > 0:
            self.sync()
        if self.rank == 0:
            self.log_eval("end")
            done = dict(self.c, wall_s=self.c["wall_before"] + self.wall(), backend=self.backend())
            self.conn.send(("done", done))
        if cfg.save_final:
            checkpoint.write(
                self.spec.run_dir / f"final-rank{self.rank}.pt",
                [p.detach().cpu() for p in self.params],
            )
        for name, fh in self.logs.items():
            with writing(self.spec.run_dir / name):
                fh.close()


def _noop(flat: torch.Tensor) -> None:
    return None


def main(spec: WorkerSpec, status, conn, stop_flag, errors=None) -> None:
    """Process entry: enter the namespace, join the group, train, leave.

    A write the machine refuses (a full disk under a checkpoint or a log) is handed to the
    launcher through ``errors`` (:func:`hand_over`). With ``spec.cpus`` the process (and
    every thread it starts: torch's, gloo's) runs only on those cores."""
    if spec.cpus:
        os.sched_setaffinity(0, set(spec.cpus))
    if spec.namespace:
        from trainfabric.diloco.train.netns import enter

        enter(spec.namespace)
    if spec.iface:
        os.environ["GLOO_SOCKET_IFNAME"] = spec.iface
        os.environ["NCCL_SOCKET_IFNAME"] = spec.iface
    torch.set_num_threads(spec.cfg.threads)
    learner = Learner(spec, status, conn, stop_flag)
    status[spec.rank * STATUS_WIDTH] = learner.c["step"]
    if spec.cfg.learners > 1:
        dist.init_process_group(
            learner.backend(),
            init_method=spec.master,
            rank=spec.rank,
            world_size=spec.cfg.learners,
            timeout=_timeout(),
        )
    try:
        learner.run()
    except WriteError as exc:
        if errors is None:
            raise
        hand_over(exc, errors)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def hand_over(exc: WriteError, errors, wait_s: float = HAND_OVER_S) -> None:
    """Put ``exc`` on ``errors`` (the launcher's queue), then wait, still in the group, for
    the launcher to stop every learner (it does within one poll), and exit 1 without a
    traceback. Leaving the group at once would fail the other learners' collectives, each
    with a traceback of its own; the launcher ends the run with ``exc`` instead of restarting
    into the same full disk. ``wait_s`` bounds the wait should the launcher be gone."""
    errors.put(exc)
    end = time.monotonic() + wait_s
    while time.monotonic() < end:
        time.sleep(min(0.5, max(0.0, end - time.monotonic())))
    raise SystemExit(1) from None


def _timeout():
    from datetime import timedelta

    return timedelta(seconds=float(os.environ.get("TRAINFABRIC_DIST_TIMEOUT_S", "600")))
