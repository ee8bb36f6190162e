"""An independent Streaming DiLoCo, written from the equations of Douillard et al. (2025,
arXiv 2501.18512) and nothing of ``trainfabric`` (the tests and ``diloco_streaming.py``
compare the real learners against it), plus the tiny model and batch function both drive.

All ``M`` learners run in one process, one after the other at every inner step ``t``
(``1..T``), each with its own AdamW on its own batch ``batch(t − 1, r)``. Then, for every
fragment ``p`` (blocks ``p, p+P, ...``, or ``numpy.array_split``'s ``p``-th run of blocks when
contiguous; the parameters outside the blocks in fragment 0) with
``t ≥ 1`` and ``(t − o_p) mod H = 0`` (``o_p = ⌊pH/P⌋`` unless ``offsets`` is given):

    Δ_p = (1/M) Σ_r Q(θ_p − θ_{p,r})            (Q: the optional quantise-dequantise)

is computed at ``t`` and applied at ``t + τ``: Nesterov SGD ``b ← μ b + Δ_p`` (``b = Δ_p`` the
first time), ``θ_p ← θ_p − lr (Δ_p + μ b)``, then every learner merges
``θ_{p,r} ← α θ_{p,r} + (1 − α) θ_p``. After step ``T`` the syncs in flight are applied, and
(``final_sync``) each fragment last merged before ``T`` or merged with ``α > 0`` gets
``Δ_p`` at once, the outer step and ``θ_{p,r} ← θ_p``. The outer optimiser is written out
here, not taken from torch.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


class TinyNet(nn.Module):
    """``d_in → d`` linear, ``blocks`` residual ``x + tanh(W x + b)`` blocks, ``d → 1``
    linear; squared-error loss. Initialised from ``seed`` (its own generator)."""

    def __init__(self, d_in: int = 3, d: int = 6, blocks: int = 4, seed: int = 0):
        super().__init__()
        self.inp = nn.Linear(d_in, d)
        self.blocks = nn.ModuleList(nn.Linear(d, d) for _ in range(blocks))
        self.out = nn.Linear(d, 1)
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for blk in self.blocks:
            h = h + torch.tanh(blk(h))
        return self.out(h).squeeze(-1)

    def loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(self.forward(x), y)


@dataclass(frozen=True)
class Batches:
    """``batch(step, rank)``: ``n`` inputs ~ N(0, 1) in ``d_in`` dimensions and targets
    ``sin(x · w) + 0.1 noise``, drawn from ``(seed, step, rank)`` alone (float64)."""

    seed: int = 0
    n: int = 16
    d_in: int = 3

    def __call__(self, step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
        rng = np.random.default_rng([self.seed, step + 2**31, rank + 2**31])
        w = np.linspace(1.0, -1.0, self.d_in)
        x = rng.standard_normal((self.n, self.d_in))
        y = np.sin(x @ w) + 0.1 * rng.standard_normal(self.n)
        return torch.from_numpy(x), torch.from_numpy(y)


@dataclass(frozen=True)
class Recipe:
    """The hyper-parameters of one reference run (names as in the paper where it has one)."""

    learners: int = 2
    steps: int = 12
    H: int = 4
    fragments: int = 2
    tau: int = 1
    alpha: float = 0.5
    quantize: str = "none"
    offsets: tuple[int, ...] | None = None
    layout: str = "strided"
    inner_lr: float = 1e-2
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    weight_decay: float = 0.1
    outer_lr: float = 0.7
    momentum: float = 0.9
    final_sync: bool = True


def recipe_of(cfg, **kw) -> Recipe:
    """The recipe of a run configured by ``cfg`` (a ``TrainConfig`` with ``streaming`` set,
    read by attribute name only), with ``kw`` changed."""
    s = cfg.streaming
    base = dict(
        learners=cfg.learners, steps=cfg.steps, H=cfg.H, fragments=s.fragments, tau=s.overlap,
        alpha=s.alpha, quantize=s.quantize, layout=s.layout, inner_lr=cfg.inner_lr,
        betas=cfg.inner_betas, eps=cfg.inner_eps, weight_decay=cfg.weight_decay,
        outer_lr=cfg.outer_lr, momentum=cfg.outer_momentum, final_sync=cfg.final_sync,
    )  # fmt: skip
    return Recipe(**(base | kw))


def fragment_names(model: nn.Module, P: int, layout: str = "strided") -> list[list[str]]:
    """Parameter names of each fragment."""
    runs = np.array_split(np.arange(len(model.blocks)), P)
    owner = {int(b): p for p, run in enumerate(runs) for b in run}
    out: list[list[str]] = [[] for _ in range(P)]
    for name, _ in model.named_parameters():
        parts = name.split(".")
        if parts[0] != "blocks":
            out[0].append(name)
        else:
            block = int(parts[1])
            out[block % P if layout == "strided" else owner[block]].append(name)
    return out


def qdq(x: torch.Tensor, mode: str) -> torch.Tensor:
    """Quantise and dequantise one tensor: per-tensor scale max|x|/448 (fp8 e4m3) or
    max|x|/7 (int4, round half to even, clamp to ±7); scale 1 for an all-zero tensor."""
    if mode == "none":
        return x
    top = 448.0 if mode == "fp8" else 7.0
    amax = float(x.abs().max())
    s = torch.tensor(amax / top if amax > 0 else 1.0, dtype=x.dtype)
    y = (x / s).clamp(-448.0, 448.0)
    if mode == "fp8":
        return y.to(torch.float8_e4m3fn).to(x.dtype) * s
    return torch.round(y).clamp(-7, 7) * s


def run(recipe: Recipe, model: nn.Module, batches, dtype=torch.float64) -> dict:
    """The reference run: ``{"local": [per learner {name: tensor}], "global": {name: tensor}}``."""
    R = recipe
    base = copy.deepcopy(model).to(dtype)
    models = [copy.deepcopy(base) for _ in range(R.learners)]
    opts = [
        torch.optim.AdamW(
            m.parameters(), lr=R.inner_lr, betas=R.betas, eps=R.eps, weight_decay=R.weight_decay
        )
        for m in models
    ]
    params = [dict(m.named_parameters()) for m in models]
    theta = {n: p.detach().clone() for n, p in base.named_parameters()}
    momentum: dict[str, torch.Tensor] = {}
    frags = fragment_names(base, R.fragments, R.layout)
    offs = R.offsets or tuple(p * R.H // R.fragments for p in range(R.fragments))
    in_flight: list[tuple[int, int, dict]] = []  # (fragment, due step, Δ)
    merged = [(0, 0.0)] * R.fragments  # (step, α) of each fragment's last merge

    def delta(p):
        out = {}
        for n in frags[p]:
            total = sum(
                qdq(theta[n] - params[r][n].detach(), R.quantize) for r in range(R.learners)
            )
            out[n] = total / R.learners
        return out

    def outer(p, d, alpha, t):
        merged[p] = (t, alpha)
        for n in frags[p]:
            momentum[n] = d[n].clone() if n not in momentum else R.momentum * momentum[n] + d[n]
            theta[n] = theta[n] - R.outer_lr * (d[n] + R.momentum * momentum[n])
            with torch.no_grad():
                for r in range(R.learners):
                    params[r][n].copy_(alpha * params[r][n] + (1 - alpha) * theta[n])

    for t in range(1, R.steps + 1):
        for r, (m, opt) in enumerate(zip(models, opts, strict=True)):
            x, y = batches(t - 1, r)
            opt.zero_grad()
            m.loss(x.to(dtype), y.to(dtype)).backward()
            opt.step()
        for p in range(R.fragments):
            if (t - offs[p]) % R.H == 0:
                in_flight.append((p, t + R.tau, delta(p)))
        for p, _, d in [f for f in in_flight if f[1] == t]:
            outer(p, d, R.alpha, t)
        in_flight = [f for f in in_flight if f[1] != t]
    for p, _, d in in_flight:
        outer(p, d, R.alpha, R.steps)
    if R.final_sync:
        for p in range(R.fragments):
            if merged[p][0] < R.steps or merged[p][1] > 0:
                outer(p, delta(p), 0.0, R.steps)
    return {
        "local": [{n: v.detach().clone() for n, v in ps.items()} for ps in params],
        "global": theta,
    }


def max_abs_diff(ours: list[list[torch.Tensor]], ref: dict, model: nn.Module) -> float:
    """Largest ``|ours − reference|`` over learners and parameters (``ours``: per learner,
    the parameters in ``model.parameters()`` order)."""
    names = [n for n, _ in model.named_parameters()]
    out = 0.0
    for mine, theirs in zip(ours, ref["local"], strict=True):
        for n, a in zip(names, mine, strict=True):
            out = max(out, float((a - theirs[n]).abs().max()))
    return out
