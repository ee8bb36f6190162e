"""DiLoCo with H = 1, inner plain SGD and outer plain SGD (lr 1) is synchronous data-parallel
SGD; with inner AdamW it is not. Real learner processes (gloo over 127.0.0.1) against an
in-process reference that replays the same batches."""

import numpy as np
import pytest
import torch

from trainfabric.diloco.train.launch import train
from trainfabric.diloco.train.learner import data_generator, sample
from trainfabric.diloco.train.model import GPT

from .conftest import tiny_config


def _reference(cfg, run_dir, inner):
    """Synchronous data-parallel training: the gradient averaged over the learners' batches,
    one optimiser step on it (``inner``: "sgd" or "adamw" on the averaged gradient)."""
    dtype = getattr(torch, cfg.dtype)
    data = torch.from_numpy(np.fromfile(run_dir / "train.bin", np.uint8)).long()
    torch.manual_seed(cfg.seed)
    model = GPT(cfg.model).to(dtype)
    params = list(model.parameters())
    if inner == "sgd":
        opt = torch.optim.SGD(params, lr=cfg.inner_lr)
    else:
        opt = torch.optim.AdamW(params, lr=cfg.inner_lr, betas=(0.9, 0.95),
                                weight_decay=cfg.weight_decay)  # fmt: skip
    gens = [data_generator(cfg.seed, r) for r in range(cfg.learners)]
    for _ in range(cfg.steps):
        grads = [torch.zeros_like(p) for p in params]
        for g in gens:
            x, y = sample(data, g, cfg.batch, cfg.model.context)
            model.zero_grad()
            model.loss(x, y).backward()
            for acc, p in zip(grads, params, strict=True):
                acc += p.grad / cfg.learners
        for p, acc in zip(params, grads, strict=True):
            p.grad = acc
        opt.step()
    return [p.detach() for p in params]


def _max_diff(run_dir, ref):
    out = 0.0
    for r in range(2):
        got = torch.load(run_dir / f"final-rank{r}.pt")
        out = max(out, max(float((a - b).abs().max()) for a, b in zip(got, ref, strict=True)))
    return out


@pytest.mark.parametrize(
    ("dtype", "tol"),
    [("float64", 1e-12), pytest.param("float32", 1e-6, marks=pytest.mark.slow)],
)
def test_h1_sgd_equals_data_parallel_sgd(tmp_path, dtype, tol):
    cfg = tiny_config(inner="sgd", inner_lr=0.5, outer_lr=1.0, outer_momentum=0.0, dtype=dtype)
    res = train(cfg, tmp_path)
    assert res.syncs == cfg.steps and res.steps == cfg.steps
    ref = _reference(cfg, tmp_path, "sgd")
    moved = max(float((a - b).abs().max()) for a, b in zip(ref, _init(cfg), strict=True))
    assert moved > 1e-2  # the training really moved the parameters
    assert _max_diff(tmp_path, ref) <= tol


@pytest.mark.slow  # over 5 s in the default run (make test-all runs it)
def test_h1_adamw_is_not_data_parallel_adamw(tmp_path):
    """Each learner's AdamW normalises its own gradient: averaging the resulting moves is not
    AdamW on the averaged gradient (differences far above float64 rounding)."""
    cfg = tiny_config(outer_lr=1.0, outer_momentum=0.0, dtype="float64", inner_lr=1e-2)
    train(cfg, tmp_path)
    ref = _reference(cfg, tmp_path, "adamw")
    assert _max_diff(tmp_path, ref) > 1e-4


def _init(cfg):
    torch.manual_seed(cfg.seed)
    return [p.detach() for p in GPT(cfg.model).to(getattr(torch, cfg.dtype)).parameters()]
