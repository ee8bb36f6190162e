"""``trainfabric diloco train``: a standalone DiLoCo run (fixed-H controller); imports torch
only when it runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trainfabric.clikit import ConfigOpt, JsonOpt, SeedOpt, emit_json, finite, options, out
from trainfabric.diloco.train.config import EXPERIMENT, MAX_SECONDS, MAX_STEPS
from trainfabric.errors import ConfigError

SUMMARY = ("final_loss", "eval_loss", "tokens", "syncs", "mean_sync_s", "mean_step_s", "params")
SHAPING = {"rate_mbit": "--rate-mbit", "burst_kb": "--burst-kb", "qdisc": "--qdisc"}


def train_cmd(
    ctx: typer.Context,
    learners: Annotated[int, typer.Option(min=1, max=64, help="Learner processes M.")] = 2,
    steps: Annotated[int, typer.Option(min=1, max=MAX_STEPS, help="Inner steps each.")] = 300,
    h: Annotated[
        int, typer.Option("--H", min=1, max=MAX_STEPS, help="Inner steps between syncs.")
    ] = 50,
    max_seconds: Annotated[
        float | None,
        typer.Option(help="Stop after this wall time (s).", callback=finite(gt=0, le=MAX_SECONDS)),
    ] = None,
    inner: Annotated[str, typer.Option(help="Inner optimiser: adamw or sgd.")] = "adamw",
    inner_lr: Annotated[float, typer.Option(callback=finite(gt=0, le=10))] = 1e-3,
    outer_lr: Annotated[float, typer.Option(callback=finite(gt=0, le=10))] = 0.7,
    outer_momentum: Annotated[float, typer.Option(callback=finite(ge=0, le=0.999))] = 0.9,
    reset_inner_optimizer: Annotated[bool, typer.Option(help="Reset AdamW at every sync.")] = False,
    checkpoint_every: Annotated[int, typer.Option(min=1, max=MAX_STEPS)] = 100,
    rate_mbit: Annotated[
        float,
        typer.Option(help="Link rate per learner (Mbit/s).", callback=finite(gt=0, le=100_000)),
    ] = 10.0,
    burst_kb: Annotated[
        float, typer.Option(help="Token bucket (KiB).", callback=finite(gt=0, le=1_000_000))
    ] = 32.0,
    qdisc: Annotated[str, typer.Option(help="tbf or htb.")] = "tbf",
    unshaped: Annotated[
        bool,
        typer.Option(
            help="No namespaces/shaping: learners on 127.0.0.1 (recorded); "
            "refuses the shaping options."
        ),
    ] = False,
    seed: SeedOpt = 0,
    out_dir: Annotated[
        Path, typer.Option("--out", help="Run directory (not another command's).")
    ] = Path("runs/diloco-train"),
    config: ConfigOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Real DiLoCo training of a small byte-level GPT: M learners over torch.distributed in
    tc-shaped network namespaces; prints final loss, tokens, syncs and mean sync seconds."""
    from trainfabric.config import validate
    from trainfabric.diloco.train.config import TrainConfig

    if unshaped:
        _refuse_shaping(ctx)
    data = dict(
        learners=learners,
        steps=steps,
        H=h,
        max_seconds=max_seconds,
        inner=inner,
        inner_lr=inner_lr,
        outer_lr=outer_lr,
        outer_momentum=outer_momentum,
        reset_inner_optimizer=reset_inner_optimizer,
        checkpoint_every=checkpoint_every,
        seed=seed,
        control_window_s=0.0,
        unshaped_ok=unshaped,
        shaping=None if unshaped else dict(rate_mbit=rate_mbit, burst_kb=burst_kb, qdisc=qdisc),
    )
    names = {"H": "--H", "unshaped_ok": "--unshaped"}
    names |= {k: "--" + k.replace("_", "-") for k in data if k not in names}
    with options(**names):
        try:
            cfg = validate(TrainConfig, data)
        except ConfigError as exc:  # shaping.rate_mbit -> --rate-mbit
            head, _, sub = exc.field.partition(".")
            if head != "shaping" or not sub:
                raise
            raise ConfigError("--" + sub.replace("_", "-"), exc.message) from None
        if cfg.shaping is not None:
            from trainfabric.diloco.train.netns import require_tools

            require_tools()
    from trainfabric.io import prepare_dir
    from trainfabric.runs.store import RunDir

    out_dir = prepare_dir(out_dir)
    with RunDir(out_dir).single_run(EXPERIMENT):  # another command's run directory: refused
        from trainfabric.diloco.train.launch import train  # torch: once the checks passed

        res = train(cfg, out_dir)
    row = {k: getattr(res, k) for k in SUMMARY} | {"run_dir": res.run_dir, "shaping": res.shaping}
    if json_out:
        return emit_json(row)
    for k in SUMMARY:
        out.print(f"{k}: {row[k]}")
    out.print(f"run directory: {res.run_dir}")


def _refuse_shaping(ctx: typer.Context) -> None:
    """Refuse a shaping option given (on the command line or in ``--config``) with
    ``--unshaped``, which would ignore it."""
    for name, flag in SHAPING.items():
        source = ctx.get_parameter_source(name)  # an enum of Typer's own copy of Click
        if source is not None and source.name != "DEFAULT":
            raise ConfigError(flag, "shapes the learners' link; --unshaped runs without shaping")
