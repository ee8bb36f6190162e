"""``trainfabric ocs ...``: the OCS pillar's commands, one module per command group.

Each module defines plain functions with Typer-annotated parameters; this package builds the
``app`` and registers them explicitly, in the order ``--help`` lists them: ``plan`` and
``compare`` (:mod:`.plan`), ``detect`` (:mod:`.detect`), ``fairness`` (:mod:`.fairness`),
``online`` (:mod:`.online`), ``schedule`` (:mod:`.schedule`). The command modules import their
solvers inside the command, so ``trainfabric --help`` does not pay for numba or HiGHS.
"""

from __future__ import annotations

import typer

from trainfabric.ocs.cli import detect, fairness, online, plan, schedule

app = typer.Typer(
    help="Optical circuit switch wiring: plan it, compare it with the MILP.", no_args_is_help=True
)
app.command("plan")(plan.ocs_plan)
app.command("compare")(plan.ocs_compare)
app.command("detect")(detect.ocs_detect)
app.command("fairness")(fairness.ocs_fairness)
app.command("online")(online.ocs_online)
app.command("schedule")(schedule.ocs_schedule)
