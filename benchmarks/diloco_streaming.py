"""Streaming DiLoCo's checks and costs, with real learner processes over gloo (loopback).

Checks (every run: ``M`` real learner processes, asynchronous gloo collectives, float64):

* ``p1_vs_diloco_max_abs``: one fragment, no overlap, ``α = 0``, unquantised, against the
  DiLoCo path (controller-driven ``sync``) on the same inputs; the largest parameter
  difference over learners, on the tiny residual net of ``_streaming_reference.py`` (12 and
  10 steps, H 4: the latter ends on a final sync) and on a tiny byte-level GPT (20 steps,
  H 5). Bar 1e-12.
* ``fragments_vs_reference_max_abs``: fragment runs of the tiny net (P 2-4, τ 0-3, α 0.25-0.8,
  M 2-3, unquantised, fp8 and int4, with and without final sync) against the independent
  reference of ``_streaming_reference.py`` (written from the paper's equations, nothing of
  ``trainfabric``). Bar 1e-12.
* ``control_min_abs_diff``: the first fragment run against the reference with one
  hyper-parameter changed (P, τ, α, H, offsets, quantisation, inner betas); the smallest
  difference must exceed 1e-6, or the check above could not fail.
* ``quantisation``: fp8 e4m3 and int4 round trips of 10^6 float32 values (normal, and
  log-normal over 12 decades) against the analytic bound of ``trainfabric.diloco.train.quantize``:
  ``max_error_over_bound`` (≤ 1 required) and the worst relative error on normal values.

Costs, descriptive (one comparison per seed, no test; ``--quick``: 1 seed, else 3): the
default byte-level GPT (4 layers, d 128, 0.83 M parameters, float32), ``M = 2``, ``steps``
inner steps, ``H`` 30, against DiLoCo: streaming with P 4 (strided), τ 2, α 0.5, unquantised,
fp8 and int4. Per run: the held-out loss at the end (nats/byte, after the final sync: the
global model), rank 0's final training loss (EWMA), the bytes one learner contributes per
sync from the runs' sync records (``peak_sync_bytes``: the largest; DiLoCo's is the whole
model in float32) and wall seconds.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _streaming_reference as ref  # noqa: E402
from _common import emit, parser  # noqa: E402

from trainfabric.diloco.train import quantize as q  # noqa: E402
from trainfabric.diloco.train.config import ModelConfig, StreamingConfig, TrainConfig  # noqa: E402
from trainfabric.diloco.train.launch import train  # noqa: E402

BLOCKS = 4
TINY_GPT = ModelConfig(layers=2, d_model=32, heads=2, context=32)
CASES = {
    "P2-tau1-alpha0.5": dict(streaming=StreamingConfig(fragments=2, overlap=1, alpha=0.5)),
    "P3-tau2-alpha0.3-M3-H6": dict(
        streaming=StreamingConfig(fragments=3, overlap=2, alpha=0.3),
        learners=3,
        H=6,
        steps=17,
    ),  # fmt: skip
    "P4-tau3-alpha0.8-no-final-sync-betas0.8,0.999": dict(
        streaming=StreamingConfig(fragments=4, overlap=3, alpha=0.8),
        final_sync=False,
        inner_betas=(0.8, 0.999),
        inner_eps=1e-6,
        steps=11,
    ),  # fmt: skip
    "P2-tau1-fp8": dict(
        streaming=StreamingConfig(fragments=2, overlap=1, alpha=0.5, quantize="fp8")
    ),
    "P2-tau0-int4-contiguous": dict(
        streaming=StreamingConfig(
            fragments=2, overlap=0, alpha=0.25, quantize="int4", layout="contiguous"
        )
    ),
}
CONTROLS = {
    "P=1": dict(fragments=1), "P=4": dict(fragments=4), "tau=0": dict(tau=0),
    "tau=2": dict(tau=2), "alpha=0.4": dict(alpha=0.4), "H=5": dict(H=5),
    "offsets=(1,3)": dict(offsets=(1, 3)), "quantize=fp8": dict(quantize="fp8"),
    "betas=(0.9,0.999)": dict(betas=(0.9, 0.999)),
}  # fmt: skip


def tiny_config(streaming=None, **kw) -> TrainConfig:
    base = dict(
        learners=2, steps=12, H=4, control_window_s=0.0, model=ModelConfig(layers=BLOCKS),
        inner_lr=1e-2, dtype="float64", checkpoint_every=10**6, eval_batches=1,
        shaping=None, unshaped_ok=True, save_final=True,
    )  # fmt: skip
    return TrainConfig(**(base | kw), streaming=streaming)


def finals(run_dir: Path, learners: int) -> list[list[torch.Tensor]]:
    return [torch.load(run_dir / f"final-rank{r}.pt") for r in range(learners)]


def max_diff(a, b) -> float:
    pairs = (xy for pa, pb in zip(a, b, strict=True) for xy in zip(pa, pb, strict=True))
    return max(float((x - y).abs().max()) for x, y in pairs)


def p1_vs_diloco(work: Path) -> dict:
    """One fragment, τ 0, α 0 against the DiLoCo path, tiny net and tiny GPT."""
    one = StreamingConfig(fragments=1, overlap=0, alpha=0.0)
    net, batches = ref.TinyNet(blocks=BLOCKS), ref.Batches()
    out = {}
    for steps in (12, 10):
        runs = {}
        for name, st in (("streaming", one), ("diloco", None)):
            cfg = tiny_config(st, steps=steps)
            train(cfg, work / f"p1-{steps}-{name}", model=net, batch=batches)
            runs[name] = finals(work / f"p1-{steps}-{name}", cfg.learners)
        out[f"tiny_net_steps{steps}"] = max_diff(runs["streaming"], runs["diloco"])
    runs = {}
    for name, st in (("streaming", one), ("diloco", None)):
        cfg = TrainConfig(
            learners=2, steps=20, H=5, control_window_s=0.0, batch=4, model=TINY_GPT,
            dtype="float64", checkpoint_every=10**6, eval_batches=1, corpus_bytes=50_000,
            shaping=None, unshaped_ok=True, save_final=True, streaming=st,
        )  # fmt: skip
        train(cfg, work / f"p1-gpt-{name}")
        runs[name] = finals(work / f"p1-gpt-{name}", 2)
    out["tiny_gpt_steps20"] = max_diff(runs["streaming"], runs["diloco"])
    return out


def fragments_vs_reference(work: Path) -> tuple[dict, list[list[torch.Tensor]]]:
    """Each case's largest difference from the reference; the first case's parameters."""
    net, batches = ref.TinyNet(blocks=BLOCKS), ref.Batches()
    out, first = {}, None
    for name, case in CASES.items():
        cfg = tiny_config(**case)
        train(cfg, work / name, model=net, batch=batches)
        ours = finals(work / name, cfg.learners)
        out[name] = ref.max_abs_diff(ours, ref.run(ref.recipe_of(cfg), net, batches), net)
        first = first or ours
    return out, first


def controls(ours: list[list[torch.Tensor]]) -> dict:
    net, batches = ref.TinyNet(blocks=BLOCKS), ref.Batches()
    cfg = tiny_config(**next(iter(CASES.values())))
    return {
        name: ref.max_abs_diff(ours, ref.run(ref.recipe_of(cfg, **change), net, batches), net)
        for name, change in CONTROLS.items()
    }


def quantisation() -> dict:
    g = torch.Generator().manual_seed(0)
    normal = torch.randn(1_000_000, generator=g)
    wide = torch.exp(torch.randn(1_000_000, generator=g) * 6.4) * torch.sign(normal)
    out = {}
    for mode in ("fp8", "int4"):
        for name, x in (("normal", normal), ("lognormal_12_decades", wide)):
            payload, s = q.quantize(x, mode)
            err = (q.dequantize(payload, s, mode, x.shape) - x).abs()
            row = {
                "max_error_over_bound": float((err / q.bound(x, s, mode)).max()),
                "payload_bytes_per_element": payload.numel() / x.numel(),
                "rms_error_over_rms": float(err.pow(2).mean().sqrt() / x.pow(2).mean().sqrt()),
            }
            if mode == "fp8":
                big = x.abs() >= 2**-6 * s  # normal range of e4m3 after scaling
                row["max_relative_error_normal_range"] = float((err[big] / x[big].abs()).max())
            out[f"{mode}_{name}"] = row
    return out


VARIANTS = {
    "diloco": None,
    "streaming_fp32": StreamingConfig(fragments=4, overlap=2, alpha=0.5),
    "streaming_fp8": StreamingConfig(fragments=4, overlap=2, alpha=0.5, quantize="fp8"),
    "streaming_int4": StreamingConfig(fragments=4, overlap=2, alpha=0.5, quantize="int4"),
}


def loss_runs(work: Path, seeds: int, steps: int, H: int) -> dict:
    rows = []
    for seed in range(seeds):
        for name, st in VARIANTS.items():
            cfg = TrainConfig(
                learners=2, steps=steps, H=H, control_window_s=0.0, seed=seed,
                checkpoint_every=10**6, shaping=None, unshaped_ok=True, streaming=st,
            )  # fmt: skip
            t0 = time.perf_counter()
            res = train(cfg, work / f"loss-{name}-{seed}")
            syncs = pd.read_parquet(work / f"loss-{name}-{seed}" / "syncs.parquet")
            rows.append(
                {
                    "variant": name, "seed": seed, "eval_loss": res.eval_loss,
                    "final_train_loss": res.final_loss, "syncs": res.syncs,
                    "peak_sync_bytes": int(syncs["bytes"].max()),
                    "mean_sync_bytes": float(syncs["bytes"].mean()),
                    "wall_s": round(time.perf_counter() - t0, 2),
                }
            )  # fmt: skip
    df = pd.DataFrame(rows)
    summary = {}
    for name, grp in df.groupby("variant", sort=False):
        summary[name] = {
            "eval_loss_mean": float(grp["eval_loss"].mean()),
            "eval_loss_per_seed": grp["eval_loss"].round(4).tolist(),
            "final_train_loss_mean": float(grp["final_train_loss"].mean()),
            "syncs": int(grp["syncs"].iloc[0]),
            "peak_sync_bytes": int(grp["peak_sync_bytes"].max()),
            "mean_sync_bytes": float(grp["mean_sync_bytes"].mean()),
            "wall_s_mean": float(grp["wall_s"].mean()),
        }
    base = summary["diloco"]["peak_sync_bytes"]
    for row in summary.values():
        row["peak_bytes_reduction_vs_diloco"] = base / row["peak_sync_bytes"]
    return summary


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=300, help="inner steps of the loss runs")
    p.add_argument("--H", type=int, default=30, help="H of the loss runs")
    args = p.parse_args()
    torch.set_num_threads(1)
    seeds = 1 if args.quick else 3
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        p1 = p1_vs_diloco(work)
        frag, first = fragments_vs_reference(work)
        ctl = controls(first)
        losses = loss_runs(work, seeds, args.steps, args.H)
    emit(
        "diloco_streaming",
        {
            "p1_vs_diloco_max_abs": max(p1.values()),
            "fragments_vs_reference_max_abs": max(frag.values()),
            "control_min_abs_diff": min(ctl.values()),
            "p1_vs_diloco": p1,
            "fragments_vs_reference": frag,
            "controls": ctl,
            "passed": max(p1.values()) <= 1e-12
            and max(frag.values()) <= 1e-12
            and min(ctl.values()) > 1e-6,
            "quantisation": quantisation(),
            "loss_runs": {
                "what": "descriptive: one run per variant and seed, no test",
                "model": ModelConfig().model_dump(),
                "learners": 2,
                "steps": args.steps,
                "H": args.H,
                "seeds": seeds,
                "variants": {k: v and v.model_dump() for k, v in VARIANTS.items()},
                "results": losses,
            },
            "wall_s": round(time.perf_counter() - t0, 1),
        },
        args.out,
    )


if __name__ == "__main__":
    main()
