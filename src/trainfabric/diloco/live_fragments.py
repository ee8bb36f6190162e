"""Streaming DiLoCo in the live protocol: the policy decides per fragment, and its matched
random control is drawn per fragment with that fragment's own sync count.

With ``LiveConfig.fragments`` = P >= 1 the learners run Streaming DiLoCo
(:mod:`~trainfabric.diloco.train.streaming`: fragment ``p`` due every ``H`` inner steps on its
staggered offset, its sync overlapping ``overlap`` inner steps, merged with ``alpha`` 0.5) and
the launcher's fragment gate is a :class:`FragmentController`, asked for every due fragment
(a deferred fragment stays due and is asked again after every inner step; the answers
travel in the step's one command broadcast, :meth:`~.train.learner.Learner.gated_step`,
so a deferral costs the learners nothing over the link):

* **the policy** (the headline, e.g. ``wa_forecast``) decides on the same observation as the
  whole-model controller (:class:`~.live.LiveController`): the sidecar's ``inference``, the
  busiest learner link's utilisation over the last window (``network``), the segment's
  serving load and its forecast; the fragment's own progress: ``h`` (inner steps since its
  last sync started), ``tokens`` = ``h`` x the run's tokens per step, staleness since the
  gate last opened it. The learners report no loss to the gate in streaming mode, so
  ``loss_delta`` is 0: the progress term is the tokens term alone (stated, not tuned). A
  fragment deferred ``max_h − H`` steps is forced (its ``h`` then reaches ``max_h``, the
  whole-model guard); while the sidecar's health is unknown the gate opens (the fixed
  schedule is the fallback).
* **matched random** (:func:`fragment_schedules`), drawn in the gate's own terms. Fragment
  ``p`` falls due on a grid of inner steps, ``g_j = o_p + j·H`` (``o_p = ⌊pH/P⌋``), and starts
  at most one sync per period ``[g_j, g_{j+1})``. For every fragment: exactly the policy
  run's count ``k`` of that fragment's syncs, in ``k`` of the periods the policy run reached
  (the last inner step it took within the replay), chosen uniformly among the choices that
  skip at most ``max_h // H − 1`` periods in a row (the policy's ``max_h`` guard; where
  none exists, uniformly without replacement), each at a deferral drawn uniformly in
  ``[0, H)`` steps after the period's due step, clipped to the steps the policy run had
  left. The gate opens the fragment at the first offer at or after its next chosen period
  and deferral once ``h >= min_h`` (the policy's other guard); a chosen period the
  fragment missed (its sync still in flight) is taken at the next offer. Runs differ in
  pace (inner steps within the replay vary by about ±5% between runs on the testbed), so a
  period the policy run reached may lie past a matched run's end: when the fragment's due
  periods left (this one included, up to the last inner step the run will reach, estimated
  at the rate since the gate's first offer, less ``H/8`` steps of margin) cannot hold its
  chosen syncs left, the gate takes this period (at once, or at its chosen deferral when
  that is reached in time). The count is then exact whatever the pace;
  :func:`fragment_counts` checks it per fragment in the results.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np

from trainfabric.diloco.policies import Policy, matched_schedule
from trainfabric.diloco.telemetry import Telemetry, link_utilisation
from trainfabric.errors import InfeasibleError


class WindowClock:
    """What a live controller keeps on the replay's clock: ``t0`` (the replay's start, unix s,
    set by the run), the window index ``floor((now − t0) / window_s)``, and ``telemetry``'s
    serving state advanced over every window that ended, with the segment's ``arrivals``;
    ``policy`` (if any) reset for ``seed``; ``started`` set at the learners' first question;
    ``log`` of every decision, each ``report``-ed (the sidecar's counters)."""

    def __init__(self, policy: Policy | None, arrivals: np.ndarray, cfg, seed: int):
        self.policy, self.arrivals, self.cfg = policy, arrivals, cfg
        if policy is not None:
            policy.reset(1, np.array([seed]))
        rate = max(arrivals.sum() / (arrivals.size * cfg.window_s), 1e-9)
        self.telemetry = Telemetry(1, rate, cfg.window_s, cfg.forecast_alpha)
        self.t0: float | None = None
        self.updated = 0  # windows folded into the telemetry so far
        self.started = threading.Event()
        self.report: Callable = lambda sync: None
        self.log: list[dict] = []

    def window(self, now: float) -> int | None:
        """The window of ``now`` with the telemetry advanced to it; None before ``t0`` and
        after the last window (nothing syncs there)."""
        if self.t0 is None or now < self.t0:
            return None
        w = int((now - self.t0) // self.cfg.window_s)
        if w >= self.arrivals.size:
            return None
        while self.updated < w:
            self.telemetry.update(requests=self.arrivals[self.updated])
            self.updated += 1
        return w


class FragmentController(WindowClock):
    """The launcher's controller (never consulted in streaming mode) and fragment gate of a
    live streaming run (module doc). ``schedules``: matched random, per fragment its chosen
    ``(period, deferral)`` pairs in order (:func:`fragment_schedules`); else ``policy``
    decides. ``t0`` (the replay's start, unix s) is
    set by the run; before it and after the last window no fragment starts."""

    def __init__(self, policy: Policy | None, inference: Callable, arrivals: np.ndarray, cfg,
                 seed: int, net, tokens_per_step: float,
                 schedules: np.ndarray | None = None):  # fmt: skip
        super().__init__(policy, arrivals, cfg, seed)
        self.inference, self.net, self.tokens_per_step = inference, net, tokens_per_step
        self.queue = None if schedules is None else [list(q) for q in schedules]
        self.offsets = [p * cfg.H // max(cfg.fragments, 1) for p in range(cfg.fragments)]
        self.max_overdue = cfg.max_h - cfg.H
        self.last_open: dict[int, float] = {}
        self.pace: tuple[float, int] | None = None  # time and step of the first offer seen
        self._link: tuple | None = None  # time, the veths' (sent, received), utilisation

    def decide(self, progress) -> bool:
        self.started.set()
        return False

    def open(self, due) -> bool:
        self.started.set()
        now = time.time()
        w = self.window(now)
        if w is None:
            return False
        reading = self.inference()
        fallback = reading.fallback or reading.inference is None
        sig = {"inference": 0.0 if fallback else float(reading.inference),
               "network": self.network(now), "checkpoint": 0.0}  # fmt: skip
        if self.queue is not None:
            go = self.scheduled(due, now)
        elif due.overdue >= self.max_overdue or fallback:
            go = True
        else:
            obs = self.telemetry.observe(
                w, h=due.h, tokens=due.h * self.tokens_per_step, loss_delta=0.0,
                staleness_s=now - self.last_open.get(due.fragment, self.t0), **sig,
            )  # fmt: skip
            go = bool(self.policy.decide(obs)[0])
        if go:
            self.last_open[due.fragment] = now
        self.report(go)
        self.log.append(
            {"time_s": now - self.t0, "window": w, "fragment": due.fragment, "h": due.h,
             "overdue": due.overdue, "sync": go, "fallback": fallback,
             "health": reading.health, "serve_now": float(self.telemetry.serve_now[0]),
             "serve_forecast": float(self.telemetry.serve_forecast[0])} | sig
        )  # fmt: skip
        return go

    def scheduled(self, due, now: float) -> bool:
        """Matched random: does ``due`` reach the fragment's next chosen (period, deferral),
        or must it take this period for the count to hold by the end (module doc)? A
        reached one is used up."""
        q = self.queue[due.fragment]
        if not q or due.h < self.cfg.min_h:  # the policy's min_h guard holds here too
            return False
        o, H = self.offsets[due.fragment], self.cfg.H
        period = (due.step - o) // H
        j, deferral = q[0]
        at = o + j * H + deferral  # the chosen inner step
        go = period > j or (period == j and due.step >= at)
        last = self.last_step(due.step, now)
        if not go and last is not None:
            left = max(0, (last - o) // H - period + 1)  # due periods left, this one included
            go = len(q) >= left and (period < j or at > last)
        if go:
            q.pop(0)
        return go

    def last_step(self, step: int, now: float) -> int | None:
        """The last inner step the run will reach within the replay, less ``H/8`` steps of
        margin, at the rate since the first offer the gate saw (None until 5 windows of
        rate are known)."""
        if self.pace is None:
            self.pace = (now, step)
        t1, s1 = self.pace
        if now - t1 < 5 * self.cfg.window_s or step <= s1:
            return None
        rate = (step - s1) / (now - t1)
        left_s = self.t0 + self.cfg.duration_s - now
        return int(step + rate * left_s - self.cfg.H / 8)

    def network(self, now: float) -> float:
        """The busiest learner link's utilisation over the last ``window_s`` or more (the
        veths' byte counters; re-read at most once a window)."""
        if self.net is None:
            return 0.0
        if self._link is not None and now - self._link[0] < self.cfg.window_s:
            return self._link[2]
        now_bytes = self.net.dev_bytes()
        util = 0.0
        if self._link is not None:
            sent = max(max(a[0] - b[0], a[1] - b[1])
                       for a, b in zip(now_bytes, self._link[1], strict=True))  # fmt: skip
            rate = self.net.shaping.rate_mbit * 1e6
            util = link_utilisation((0.0, self._link[0]), (float(sent), now), rate)
        self._link = (now, now_bytes, util)
        return util


def fragment_counts(syncs, fragments: int, horizon_s: float) -> list[int]:
    """Per fragment, the syncs a run's ``syncs`` table (``fragment``, ``start_s``, ``final``)
    started in ``[0, horizon_s)`` that were not the closing sync."""
    keep = (syncs["start_s"] >= 0) & (syncs["start_s"] < horizon_s)
    if "final" in syncs:
        keep &= ~syncs["final"].astype(bool)
    f = syncs.loc[keep, "fragment"].to_numpy(int)
    return np.bincount(f, minlength=fragments)[:fragments].tolist()


def fragment_schedules(counts: list[int], ref, cfg, seed: int) -> list[list[tuple[int, int]]]:
    """Matched random per fragment (module doc): per fragment, its ``counts[p]`` chosen
    ``(period, deferral)`` pairs in order; ``ref`` is the policy's run (its ``steps`` table:
    the last inner step it took within the replay)."""
    steps = ref.steps[(ref.steps["wall_s"] >= 0) & (ref.steps["wall_s"] <= cfg.duration_s)]
    last = int(steps["step"].max()) if len(steps) else 0
    out = []
    for p, k in enumerate(counts):
        o = p * cfg.H // cfg.fragments
        first = 1 if o == 0 else 0  # fragment 0 is first due at H (no step 0)
        periods = np.arange(first, max((last - o) // cfg.H + 1, first))
        rng = np.random.default_rng([seed, p, 7919])
        chosen = _periods(int(k), periods, max(1, cfg.max_h // cfg.H), rng)
        room = np.maximum(last - (o + chosen * cfg.H), 1)
        deferral = np.floor(rng.uniform(size=chosen.size) * np.minimum(cfg.H, room)).astype(int)
        out.append([(int(j), int(d)) for j, d in zip(chosen, deferral, strict=True)])
    return out


def _periods(k: int, periods: np.ndarray, gap_max: int, rng) -> np.ndarray:
    """``k`` of ``periods``, sorted: uniform among the choices whose gaps (in periods, the
    first from the period before the first; the tail after the last) lie in ``1..gap_max``,
    as the policy's ``max_h`` guard keeps them (:func:`~.policies.matched_schedule`); where no
    such choice exists, uniform without replacement (and the rest again at random, in the
    rare run with more syncs than periods)."""
    try:
        return periods[np.flatnonzero(matched_schedule(k, periods.size, 1, gap_max, rng))]
    except InfeasibleError:
        pick = rng.permutation(periods)[: min(k, periods.size)]
        extra = rng.choice(periods, k - pick.size) if periods.size else periods[:0]
        return np.sort(np.r_[pick, extra].astype(int))
