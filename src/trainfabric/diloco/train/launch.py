"""Start ``M`` learner processes, serve their controller, supervise and restart them.

:func:`start` returns a :class:`TrainingRun` at once; a supervisor thread in the calling process
answers rank 0's control points with ``controller.decide(progress)``, records sync events with
the link's qdisc byte counters, and watches the learners. When one dies (any non-zero exit,
e.g. SIGKILL), the others are killed and the whole group restarts from the latest step every
learner has checkpointed (as torchrun's ``max_restarts``), at most ``max_restarts`` times; a
learner thus loses at most the steps since its last checkpoint. A write the machine refuses
(a full disk, a read-only run directory) is not retried by a restart: the learner hands its
:class:`~trainfabric.errors.WriteError`, naming the file, to the launcher
(:func:`~.learner.hand_over`), which stops the group and ends the run with it; the
checkpoints already written stay whole. :meth:`TrainingRun.wait` returns a
:class:`TrainResult` and writes the run directory:

* ``manifest.json`` (``experiment`` ``diloco-train``, config, shaping with the measured mean
  sync time, versions, restarts),
* ``steps.parquet`` (rank, step, t, loss, perplexity, tokens, tokens_all, attempt; a step
  redone after a restart keeps its last attempt), ``syncs.parquet`` (sync, step, t_start,
  t_end, duration_s, h, tokens_all, bytes all-reduced per learner, link_bytes: the bytes all
  learners' veths sent plus received during the sync, from the interface counters),
  ``evals.parquet``,
* ``result.json`` (the :class:`TrainResult`).

**Fragment gates** (Streaming DiLoCo): ``gate`` (a :class:`~.controller.FragmentGate`, e.g.
:class:`~.controller.ScoreGate`) is asked in this process, like the controller, for every
fragment due; rank 0 broadcasts its answers (:meth:`~.learner.Learner.gated_step`). It needs
``streaming`` and replaces ``streaming.defer``'s scripted pattern (both given: refused).

**Placement** (the serving testbed): ``cpus`` pins every learner process to those cores
(``sched_setaffinity``, set by the learner before it builds anything); ``net`` runs the
learners in a network the caller created (:func:`~.netns.create`) and keeps alive after the
run (a server in one of its namespaces outlives the training), instead of one made and
removed with the run.
"""

from __future__ import annotations

import multiprocessing as mp
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from trainfabric.diloco.train import checkpoint, corpus, netns
from trainfabric.diloco.train.config import TrainConfig
from trainfabric.diloco.train.controller import FixedH, FragmentDue, FragmentGate, Progress
from trainfabric.diloco.train.learner import STATUS_WIDTH, BatchFn, WorkerSpec, main
from trainfabric.diloco.train.report import TrainResult, finish
from trainfabric.errors import ConfigError
from trainfabric.io import writing


class Controller(Protocol):
    def decide(self, progress: Progress) -> bool: ...


@dataclass
class Restart:
    attempt: int
    failed_rank: int
    exitcode: int | None
    step_at_failure: int
    resumed_from: int


class TrainingRun:
    """A running group of learners (see the module docstring)."""

    def __init__(
        self,
        cfg: TrainConfig,
        run_dir: Path,
        controller: Controller | None = None,
        model: Any = None,
        batch: BatchFn | None = None,
        net: netns.Network | None = None,
        cpus: tuple[int, ...] | None = None,
        gate: FragmentGate | None = None,
    ):
        # absolute: the learners rendezvous by this path
        self.cfg, self.run_dir = cfg, Path(run_dir).resolve()
        self.model, self.batch = model, batch  # see WorkerSpec
        self.controller = controller or FixedH(cfg.H)
        self.ctx = mp.get_context("spawn")
        self.status = self.ctx.Array("d", cfg.learners * STATUS_WIDTH, lock=False)
        self.stop_flag = self.ctx.Value("b", 0, lock=False)
        self.net: netns.Network | None = net
        self.owns_net = net is None  # a network given by the caller outlives the run
        self.cpus, self.gate = cpus, gate
        self.procs: list[Any] = []
        self.conn = None
        self.syncs: list[dict] = []
        self.restarts: list[Restart] = []
        self.done: dict | None = None
        self.error: BaseException | None = None
        self.errors = self.ctx.SimpleQueue()  # a learner's refused write (learner.main)
        self._ckpt_done = 0.0
        self._link0: tuple[tuple[int, int], ...] | None = None
        self.thread = threading.Thread(target=self._supervise, daemon=True)

    # ---- public views for the controller / telemetry ----------------------------------
    def step(self) -> int:
        """Inner steps done (rank 0)."""
        return int(self.status[0])

    def checkpointing(self) -> bool:
        """The ``checkpoint`` signal: 1 while any learner is writing a checkpoint."""
        return any(self.status[r * STATUS_WIDTH + 1] for r in range(self.cfg.learners))

    def checkpoint_seconds(self) -> float:
        """Cumulative seconds the slowest learner spent writing checkpoints (all attempts):
        the ``checkpoint`` signal of a window is its increase over the window's length."""
        w = STATUS_WIDTH
        return self._ckpt_done + max(self.status[r * w + 4] for r in range(self.cfg.learners))

    def syncing(self) -> bool:
        """True while the learners are inside a sync (between its two fences)."""
        return any(self.status[r * STATUS_WIDTH + 2] for r in range(self.cfg.learners))

    def link_bytes(self) -> list[tuple[int, int]] | None:
        """Per learner (bytes sent, bytes received) from the qdisc counters (None: unshaped,
        or the network is already removed)."""
        return self.net.qdisc_bytes() if self.net is not None and self.net.created else None

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def stop(self) -> None:
        """Ask the learners to stop at the next control point (then final sync and eval)."""
        self.stop_flag.value = 1

    # ---- lifecycle --------------------------------------------------------------------
    def start(self, resume: bool = False) -> TrainingRun:
        """Spawn the learners; ``resume``: continue from the run directory's checkpoints
        (otherwise its old checkpoints and logs are removed first)."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if not resume:
            shutil.rmtree(self.run_dir / "ckpt", ignore_errors=True)
            for old in self.run_dir.glob("*.jsonl"):
                old.unlink()
        for name, seed in (("train.bin", corpus.TRAIN_SEED), ("heldout.bin", corpus.HELDOUT_SEED)):
            size = self.cfg.corpus_bytes if name == "train.bin" else 100_000
            with writing(self.run_dir / name):
                corpus.tokens(size, seed).tofile(self.run_dir / name)
        if self.net is not None and self.net.n != self.cfg.learners:
            n, m = self.net.n, self.cfg.learners
            raise ConfigError("net", f"has {n} namespaces for {m} learners")
        if self.cfg.shaping is not None and self.net is None:
            self.net = netns.create(self.cfg.learners, self.cfg.shaping)
        try:
            self._spawn(resume=checkpoint.common_step(self.run_dir / "ckpt", self.cfg.learners))
        except BaseException:
            self._teardown()
            raise
        self.thread.start()
        return self

    def wait(self, timeout: float | None = None) -> TrainResult:
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise TimeoutError("training still running")
        if self.error is not None:
            raise self.error
        return finish(self)

    def _master(self, attempt: int) -> tuple[str, list[str | None], list[str | None]]:
        """Rendezvous through a FileStore in the run directory (shared by all namespaces,
        so no store socket listens anywhere); gloo binds the learner's veth (shaped) or
        ``lo`` (unshaped, 127.0.0.1)."""
        store = self.run_dir / f"store-{attempt}"
        store.unlink(missing_ok=True)
        n = self.cfg.learners
        if self.net is None:
            return f"file://{store}", [None] * n, ["lo"] * n
        spaces = [self.net.namespace(r) for r in range(n)]
        return f"file://{store}", spaces, [self.net.inner_dev(r) for r in range(n)]

    def _spawn(self, resume: int | None) -> None:
        attempt = len(self.restarts)
        master, spaces, ifaces = self._master(attempt)
        parent, child = self.ctx.Pipe()
        self.conn = parent
        self.procs = []
        for r in range(self.cfg.learners):
            spec = WorkerSpec(
                r, self.cfg, self.run_dir, master, spaces[r], ifaces[r], resume, attempt,
                self.model, self.batch, self.cpus, self.gate is not None,
            )  # fmt: skip
            p = self.ctx.Process(
                target=main,
                args=(spec, self.status, child if r == 0 else None, self.stop_flag, self.errors),
                daemon=True,
            )
            p.start()
            self.procs.append(p)
        child.close()

    def _supervise(self) -> None:
        try:
            while not self._tick():
                pass
        except BaseException as exc:  # surfaced by wait()
            self.error = exc
        finally:
            self._teardown()

    def _tick(self) -> bool:
        """Serve one message or check the processes; True when the run is over."""
        if not self.errors.empty():  # a refused write: a restart would meet the same disk
            raise self.errors.get()
        try:
            ready = self.conn.poll(0.05)
        except (EOFError, OSError):
            ready = False
        if ready:
            try:
                kind, body = self.conn.recv()
            except (EOFError, OSError):
                kind, body = "eof", None
                time.sleep(0.02)
            if kind != "eof":
                self._handle(kind, body)
                return False
        exits = [p.exitcode for p in self.procs]
        bad = [r for r, e in enumerate(exits) if e not in (None, 0)]
        if bad and not self.errors.empty():  # handed over as the learner left
            raise self.errors.get()
        if bad and self.done is not None:  # training finished; a learner failed leaving
            raise RuntimeError(f"learner {bad[0]} exited with {exits[bad[0]]} after the end")
        if bad:
            self._restart(bad[0], exits[bad[0]])
            return False
        if all(e == 0 for e in exits):
            if self.done is None:
                raise RuntimeError("learners exited without reporting completion")
            return True
        return False

    def _handle(self, kind: str, body: dict) -> None:
        if kind == "progress":
            body["checkpointing"] = self.checkpointing()
            body["checkpoint_s"] = self.checkpoint_seconds()
            if self.net is not None:
                body["link_bytes"] = self.net.dev_bytes()
                body["link_rate_bps"] = self.net.shaping.rate_mbit * 1e6
            body["link_time"] = time.time()
            self.conn.send(bool(self.controller.decide(Progress(**body))))
        elif kind == "fragment_due":
            self.conn.send(bool(self.gate.open(FragmentDue(**body))))
        elif kind == "sync_start":
            self._link0 = self.net.dev_bytes() if self.net is not None else None
            self.conn.send(True)
        elif kind == "sync_end":
            after = self.net.dev_bytes() if self.net is not None else None
            if after is not None and self._link0 is not None:
                body["link_bytes"] = sum(
                    a[0] - b[0] + a[1] - b[1] for a, b in zip(after, self._link0, strict=True)
                )
            self.syncs.append(body)
        elif kind == "done":
            self.done = body

    def _restart(self, rank: int, exitcode: int | None) -> None:
        step = self.step()
        self._kill()
        if len(self.restarts) >= self.cfg.max_restarts:
            raise RuntimeError(
                f"learner {rank} died (exit {exitcode}) and max_restarts "
                f"{self.cfg.max_restarts} is used up"
            )
        resume = checkpoint.common_step(self.run_dir / "ckpt", self.cfg.learners)
        self.restarts.append(Restart(len(self.restarts) + 1, rank, exitcode, step, resume or 0))
        self.syncs = [s for s in self.syncs if s["step"] <= (resume or 0)]
        self._ckpt_done = self.checkpoint_seconds()
        for i in range(len(self.status)):
            self.status[i] = 0
        self._spawn(resume)

    def _kill(self) -> None:
        for p in self.procs:
            if p.exitcode is None:
                p.kill()
        for p in self.procs:
            p.join(10)
        if self.conn is not None:
            self.conn.close()

    def _teardown(self) -> None:
        self._kill()
        if self.net is not None and self.owns_net:
            self.net.close()


def start(
    cfg: TrainConfig,
    run_dir: str | Path,
    controller: Controller | None = None,
    resume: bool = False,
    model: Any = None,
    batch: BatchFn | None = None,
    net: netns.Network | None = None,
    cpus: tuple[int, ...] | None = None,
    gate: FragmentGate | None = None,
) -> TrainingRun:
    """Start a DiLoCo run (returns at once; ``.wait()`` for the result). ``model`` and
    ``batch`` replace the GPT and its corpus batches (:class:`~.learner.WorkerSpec`);
    ``net`` and ``cpus``: the placement; ``gate``: the fragment gate (module doc)."""
    if not isinstance(cfg, TrainConfig):
        raise ConfigError("config", "expected a TrainConfig")
    if gate is not None and cfg.streaming is None:
        raise ConfigError("gate", "a fragment gate needs streaming (fragments to gate)")
    if gate is not None and cfg.streaming.defer:
        raise ConfigError("gate", "give a gate or streaming.defer, not both")
    run = TrainingRun(cfg, Path(run_dir), controller, model, batch, net, cpus, gate)
    return run.start(resume)


def train(
    cfg: TrainConfig,
    run_dir: str | Path,
    controller: Controller | None = None,
    model: Any = None,
    batch: BatchFn | None = None,
):
    """Run DiLoCo training to the end and return its :class:`TrainResult`."""
    return start(cfg, run_dir, controller, model=model, batch=batch).wait()
