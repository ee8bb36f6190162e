"""Fragment-level scheduling in Streaming DiLoCo (``streaming.py``, *Fragment gates*).

Through the real learner loop (``test_streaming``'s in-process learners, float64): a gate
consulted at every due step and always open equals the fixed schedule exactly; a scripted
deferral pattern equals a reference written here from the equations (the paper's sync,
outer Nesterov step and merge, with the gate's rule: a deferred fragment stays due, a
scheduled step while still due or in flight adds no sync); the deferred run differs from
the fixed one (the check can fail); a WA score gate on every learner equals the reference
with the deferrals it made. Also: the score gate's guards, the simulator's stagger against
this schedule, and bad ``defer`` input naming the field."""

import copy
import sys
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError

from trainfabric.diloco.fleet import FragmentModel
from trainfabric.diloco.policies import make_policy
from trainfabric.diloco.train.config import StreamingConfig
from trainfabric.diloco.train.controller import FragmentDue, Open, ScoreGate, Scripted
from trainfabric.diloco.train.streaming import offsets, starts_at

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_streaming as ts  # noqa: E402  (its in-process learners and config)

ref = ts.ref
TOL = 1e-12


def reference(cfg, defer: set, net) -> list[dict]:
    """Streaming DiLoCo with deferrals, from the equations: per learner AdamW; after step
    ``t`` fragment ``p`` becomes due when ``(t − ⌊pH/P⌋) mod H = 0``; a due fragment with no
    sync in flight and ``(p, t)`` not deferred sends ``Δ_p = (1/M) Σ_r (θ_p − θ_{p,r})``;
    ``τ`` steps later ``b ← μ b + Δ_p`` (``b = Δ_p`` first), ``θ_p ← θ_p − lr (Δ_p + μ b)``,
    ``θ_{p,r} ← α θ_{p,r} + (1 − α) θ_p``. At the end the syncs in flight merge and every
    fragment trained since its last merge (or merged with α > 0) syncs with α = 0."""
    s, M, T, H = cfg.streaming, cfg.learners, cfg.steps, cfg.H
    P, tau, alpha = s.fragments, s.overlap, s.alpha
    base = copy.deepcopy(net).double()
    models = [copy.deepcopy(base) for _ in range(M)]
    opts = [
        torch.optim.AdamW(
            m.parameters(), lr=cfg.inner_lr, betas=cfg.inner_betas, eps=cfg.inner_eps,
            weight_decay=cfg.weight_decay,
        )
        for m in models
    ]  # fmt: skip
    params = [dict(m.named_parameters()) for m in models]
    theta = {n: p.detach().clone() for n, p in base.named_parameters()}
    buf: dict = {}
    frags = ref.fragment_names(base, P, s.layout)
    due, flight, merged = set(), [], [(0, 0.0)] * P
    batches = ref.Batches()

    def delta(p):
        return {n: sum(theta[n] - params[r][n].detach() for r in range(M)) / M for n in frags[p]}

    def outer(p, d, a, t):
        merged[p] = (t, a)
        for n in frags[p]:
            mu = cfg.outer_momentum
            buf[n] = d[n].clone() if n not in buf else mu * buf[n] + d[n]
            theta[n] = theta[n] - cfg.outer_lr * (d[n] + mu * buf[n])
            with torch.no_grad():
                for r in range(M):
                    params[r][n].copy_(a * params[r][n] + (1 - a) * theta[n])

    for t in range(1, T + 1):
        for r in range(M):
            x, y = batches(t - 1, r)
            opts[r].zero_grad()
            models[r].loss(x, y).backward()
            opts[r].step()
        for p in range(P):
            if (t - p * H // P) % H == 0:
                due.add(p)
            busy = any(f[0] == p for f in flight)
            if p in due and not busy and (p, t) not in defer:
                due.discard(p)
                flight.append((p, t + tau, delta(p)))
        for p, _, d in [f for f in flight if f[1] == t]:
            outer(p, d, alpha, t)
        flight = [f for f in flight if f[1] != t]
    for p, _, d in flight:
        outer(p, d, alpha, T)
    if cfg.final_sync:
        for p in range(P):
            if merged[p][0] < T or merged[p][1] > 0:
                outer(p, delta(p), 0.0, T)
    names = [n for n, _ in base.named_parameters()]
    return [[ps[n].detach() for n in names] for ps in params]


# fragment 1 (offset 2, H 4): due at 2, deferred at 2 and 3, starts at 4; due at 6, deferred
# through 9, so the scheduled step 10 adds no second sync; fragment 0 due at 8 starts at 9
DEFER = [(1, 2), (1, 3), (1, 6), (1, 7), (1, 8), (1, 9), (0, 8)]
NOT_DUE = [(0, 1), (1, 1)]  # a gate consulted at every due step, open at all of them


@pytest.mark.parametrize(
    "kw",
    [
        dict(streaming=StreamingConfig(fragments=2, overlap=1, alpha=0.5)),
        dict(streaming=StreamingConfig(fragments=2, overlap=0, alpha=0.0), learners=3),
    ],
)
def test_open_gate_equals_the_fixed_schedule(tmp_path, kw):
    fixed, syncs = ts.run_threads(ts.config(**kw), tmp_path / "fixed")
    s = kw["streaming"].model_copy(update={"defer": NOT_DUE})
    gated, gsyncs = ts.run_threads(ts.config(**(kw | {"streaming": s})), tmp_path / "gated")
    assert ts.max_diff(gated, fixed) == 0.0
    assert [(r["fragment"], r["step_start"]) for r in gsyncs] == [
        (r["fragment"], r["step_start"]) for r in syncs
    ]


@pytest.mark.parametrize(
    "kw",
    [
        dict(overlap=1, alpha=0.5),
        dict(overlap=0, alpha=0.0),
        dict(overlap=2, alpha=0.3, learners=3, final_sync=False),
    ],
)
def test_scripted_deferrals_equal_the_reference(tmp_path, kw):
    learners = kw.pop("learners", 2)
    final_sync = kw.pop("final_sync", True)
    s = StreamingConfig(fragments=2, defer=DEFER, **kw)
    cfg = ts.config(s, learners=learners, final_sync=final_sync)
    net = ref.TinyNet(blocks=ts.BLOCKS)
    ours, syncs = ts.run_threads(cfg, tmp_path / "d", net)
    want = reference(cfg, set(DEFER), net)
    assert ts.max_diff(ours, want) <= TOL
    starts = sorted((r["fragment"], r["step_start"]) for r in syncs if r["step_start"] < 12)
    assert starts == [(0, 4), (0, 9), (1, 4), (1, 10)]
    plain = cfg.model_copy(update={"streaming": s.model_copy(update={"defer": []})})
    fixed, _ = ts.run_threads(plain, tmp_path / "f", net)
    assert ts.max_diff(ours, fixed) > 1e-6  # deferring changed the run: the check can fail
    assert ts.max_diff(want, reference(cfg, set(), net)) > 1e-6


def test_score_gate_guards_and_max_overdue():
    """The WA score decides between the guards, forced at ``max_h`` and at ``max_overdue``."""
    wa = make_policy("wa_diloco", min_h=4, max_h=10, threshold=0.5)
    quiet = dict(
        tokens=0.0, loss_delta=0.0, staleness_s=0.0, network=0.0, inference=0.0,
        checkpoint=0.0, serve_now=0.0, serve_forecast=0.0, serve_next=0.0,
    )  # fmt: skip
    gate = ScoreGate(wa, lambda due: quiet, max_overdue=3)
    assert not gate.open(FragmentDue(0, 6, 6, 0))  # score 0 <= 0.5: defer
    assert gate.open(FragmentDue(0, 9, 10, 0))  # forced at max_h
    assert gate.open(FragmentDue(0, 9, 6, 3))  # forced after 3 steps overdue
    busy = quiet | {"tokens": 1e12, "loss_delta": 1.0}  # progress 1 > 0.5: sync
    assert ScoreGate(wa, lambda due: busy, max_overdue=3).open(FragmentDue(0, 6, 6, 0))
    assert not ScoreGate(wa, lambda due: busy, max_overdue=3).open(FragmentDue(0, 2, 2, 0))
    assert Open().open(FragmentDue(1, 1, 1, 0))
    assert not Scripted([(1, 5)]).open(FragmentDue(1, 5, 3, 0))


@pytest.mark.parametrize(("P", "H"), [(1, 4), (2, 4), (3, 10), (4, 256), (5, 7)])
def test_simulator_stagger_is_the_streaming_schedule(P, H):
    """The simulator's guard leads make ``fixed_h`` (H) sync fragment ``p`` first after the
    step ``streaming.starts_at`` first starts it."""
    leads = FragmentModel(fragments=P, stagger_steps=H).leads()
    for p, off in enumerate(offsets(H, P)):
        first = next(t for t in range(1, 2 * H + 1) if starts_at(t, off, H))
        assert H - leads[p] == first


@pytest.mark.parametrize("pair", [(2, 3), (0, 0), (1, 13)])
def test_bad_defer_names_the_field(pair):
    with pytest.raises(ValidationError) as e:
        ts.config(StreamingConfig(fragments=2, defer=[(0, 5), pair]))
    assert e.value.errors()[0]["loc"] == ("streaming", "defer", 1)


def test_score_gate_drives_the_real_loop(tmp_path, monkeypatch):
    """A WA score gate set on every learner's streamer (deterministic observations: progress
    only at steps divisible by 3) through the real loop equals the reference run with the
    deferrals it made; an ``Open`` gate object equals the fixed schedule."""
    wa = make_policy("wa_diloco", min_h=1, max_h=100, threshold=0.25)
    quiet = dict(
        loss_delta=0.0, staleness_s=0.0, network=0.0, inference=0.0, checkpoint=0.0,
        serve_now=0.0, serve_forecast=0.0, serve_next=0.0,
    )  # fmt: skip
    seen: list = []

    def observe(due):
        return quiet | {"tokens": 1e12 if due.step % 3 == 0 else 0.0}

    class Recording(ScoreGate):
        def open(self, due):
            out = super().open(due)
            seen.append((due.fragment, due.step, out))
            return out

    def gated(make):
        base = ts.ThreadLearner.new_streamer

        def new_streamer(self):
            s = base(self)
            s.gate = make() if self.rank == 0 else make(quiet=True)
            return s

        return new_streamer

    def recording(quiet=False):
        return (ScoreGate if quiet else Recording)(wa, observe, max_overdue=5)

    cfg = ts.config(StreamingConfig(fragments=2, overlap=1, alpha=0.5))
    net = ref.TinyNet(blocks=ts.BLOCKS)
    monkeypatch.setattr(ts.ThreadLearner, "new_streamer", gated(recording))
    ours, _ = ts.run_threads(cfg, tmp_path / "score", net)
    deferred = {(p, t) for p, t, ok in seen if not ok}
    assert deferred and any(ok for *_, ok in seen)
    assert ts.max_diff(ours, reference(cfg, deferred, net)) <= TOL
    monkeypatch.setattr(ts.ThreadLearner, "new_streamer", gated(lambda quiet=False: Open()))
    opened, _ = ts.run_threads(cfg, tmp_path / "open", net)
    monkeypatch.undo()
    fixed, _ = ts.run_threads(cfg, tmp_path / "fixed", net)
    assert ts.max_diff(opened, fixed) == 0.0
