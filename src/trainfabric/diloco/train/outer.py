"""The DiLoCo outer step (torch): pseudo-gradients, their all-reduce, and outer SGD.

With global parameters ``θ`` (identical on every learner) and learner ``r``'s local
parameters ``θ_r`` after its inner steps, the pseudo-gradient is the average

    Δ = (1/M) Σ_r (θ − θ_r),

computed by one sum-``all_reduce`` per bucket of flattened parameters (buckets of at most
``bucket_mb`` MB, in parameter order) and a division by ``M``. ``Δ`` becomes ``θ.grad`` and
the outer optimiser ``torch.optim.SGD(lr, momentum, nesterov)`` steps ``θ``; with momentum
``μ`` and Nesterov, ``b ← μ b + Δ``, ``θ ← θ − lr (Δ + μ b)`` (``b`` starts at ``Δ``). Every
learner then copies ``θ`` into its local parameters.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

Reduce = Callable[[torch.Tensor], None]  # in-place sum over the learners


def buckets(params: Sequence[torch.Tensor], bucket_bytes: float) -> list[list[int]]:
    """Indices of ``params`` grouped in order into buckets of at most ``bucket_bytes`` bytes
    (a single parameter larger than that is a bucket of its own)."""
    out: list[list[int]] = [[]]
    size = 0
    for i, p in enumerate(params):
        nbytes = p.numel() * p.element_size()
        if out[-1] and size + nbytes > bucket_bytes:
            out.append([])
            size = 0
        out[-1].append(i)
        size += nbytes
    return out


def pseudo_gradient(
    global_params: Sequence[torch.Tensor],
    local_params: Sequence[torch.Tensor],
    reduce: Reduce,
    world: int,
    bucket_bytes: float,
) -> tuple[list[torch.Tensor], int]:
    """Δ = mean over learners of (θ − θ_r); returns Δ per parameter and the bytes reduced."""
    out: list[torch.Tensor] = [torch.empty(0)] * len(global_params)
    total = 0
    for idx in buckets(global_params, bucket_bytes):
        flat = torch.cat([(global_params[i] - local_params[i]).reshape(-1) for i in idx])
        reduce(flat)
        flat /= world
        total += flat.numel() * flat.element_size()
        offset = 0
        for i in idx:
            n = global_params[i].numel()
            out[i] = flat[offset : offset + n].view_as(global_params[i])
            offset += n
    return out, total


@torch.no_grad()
def outer_step(
    global_params: Sequence[torch.Tensor],
    local_params: Sequence[torch.Tensor],
    outer_opt: torch.optim.Optimizer,
    reduce: Reduce,
    world: int,
    bucket_bytes: float,
) -> int:
    """One DiLoCo sync: average pseudo-gradient, outer step, local ← global. Returns bytes
    all-reduced (per learner's buffer)."""
    delta, nbytes = pseudo_gradient(global_params, local_params, reduce, world, bucket_bytes)
    apply_outer(global_params, delta, outer_opt)
    for g, p in zip(global_params, local_params, strict=True):
        p.copy_(g)
    return nbytes


@torch.no_grad()
def apply_outer(
    global_params: Sequence[torch.Tensor],
    delta: Sequence[torch.Tensor],
    outer_opt: torch.optim.Optimizer,
) -> None:
    """The outer step on ``global_params`` with ``delta`` as their gradient."""
    for g, d in zip(global_params, delta, strict=True):
        g.grad = d.clone()
    outer_opt.step()
    outer_opt.zero_grad(set_to_none=True)


def make_outer(global_params: Sequence[torch.Tensor], lr: float, momentum: float, nesterov: bool):
    return torch.optim.SGD(
        list(global_params), lr=lr, momentum=momentum, nesterov=nesterov and momentum > 0
    )
