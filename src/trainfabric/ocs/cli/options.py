"""Options shared by the ``trainfabric ocs`` commands, and the API field -> option names."""

from __future__ import annotations

from typing import Annotated

import typer

from trainfabric.clikit import finite

WorkloadArg = Annotated[
    str,
    typer.Option(
        "--workload",
        help="Preset (moe, pipeline, dp-ring, dp-hd, hybrid, gpt3-175b, llama3-70b, deepseek-v3, "
        "mixtral-8x7b), a task-DAG/traffic .json or job .toml file, a Chakra trace (a folder of "
        "NAME.RANK.et files or one of them) or a SimAI/AICB workload .txt.",
    ),
]
PodsOpt = Annotated[
    int | None,
    typer.Option(min=2, max=65_536, help="Pods (re-maps a preset) \\[default: the preset's own]."),
]
PortsOpt = Annotated[
    int, typer.Option("--ports", min=1, max=4096, help="OCS-facing ports per pod (d).")
]
OcsOpt = Annotated[
    int, typer.Option("--ocs", min=1, max=4096, help="Parallel OCSes (s); must divide --ports.")
]
RateOpt = Annotated[
    float, typer.Option(help="Circuit rate B, Gb/s (> 0).", callback=finite(gt=0, le=1e9))
]
FallbackOpt = Annotated[
    float,
    typer.Option(help="Fallback rate B0 per pod pair, Gb/s (> 0).", callback=finite(gt=0, le=1e9)),
]
B1Opt = Annotated[
    float,
    typer.Option(help="Prior weight b1_rel > 0 (b1 = b1_rel / CP0).", callback=finite(gt=0)),
]
B2Opt = Annotated[
    float,
    typer.Option(
        help="Smoothing b2_rel > 0 (b2 = b2_rel log|paths| / CP0).", callback=finite(gt=0)
    ),
]
EffortOpt = Annotated[
    str,
    typer.Option(
        help="Work budgets: fast (20 solver iterations per stage, a quarter of the search, "
        "no class steps, a smaller certificate LP), default (30), thorough (300, ten times the "
        "search); figures per level in the README."
    ),
]
# Internal field names of the workloads and OCS APIs -> what the user typed.
NAMES = {
    "workload": "--workload",
    "pods": "--pods",
    "n": "--pods",
    "gpus_per_pod": "--gpus-per-pod",
    "ports": "--ports",
    "ports_per_pod": "--ports",
    "ocs": "--ocs",
    "s": "--ocs",
    "rate_bps": "--rate-gbps",
    "fallback_bps": "--fallback-gbps",
    "b1": "--b1",
    "b1_rel": "--b1",
    "b2": "--b2",
    "b2_rel": "--b2",
    "seed": "--seed",
    "effort": "--effort",
    "time_limit_s": "--milp-time-limit-s",
}
