"""The E5 sweep (docs/ocs.md §3.2): every scheduler on every demand family, size, switch count and
delay, one row per (family, pods, s, rho, scheduler).

δ is ``rho`` × the ideal makespan ``max_v L_v / (s B)`` of that instance
(:func:`trainfabric.ocs.schedule.demand.delay_for`), so for every ``s`` the delay is the same
fraction of what a delay-free, perfectly balanced schedule would take. Every schedule is verified by
:func:`~trainfabric.ocs.schedule.model.check_schedule` before its makespan is recorded. The
δ-independent decompositions (BvN, Solstice, colouring) are computed once per (family, pods)
and their wall time is charged to every row that uses them.
"""

from __future__ import annotations

from collections.abc import Iterator

from trainfabric.ocs.schedule.bounds import lower_bound
from trainfabric.ocs.schedule.demand import delay_for, demand_matrix
from trainfabric.ocs.schedule.model import check_schedule
from trainfabric.ocs.schedule.schedulers import (
    Instance,
    decompose_fixed,
    run_schedulers,
    with_eclipse,
)


def study_rows(
    families: list[str],
    pods: list[int],
    ocs: list[int],
    rhos: list[float],
    rate_Bps: float,
    seed: int,
) -> Iterator[dict]:
    """Yield the E5 rows (seconds; ``over_lb`` = makespan / lower bound)."""
    for family in families:
        for n in pods:
            d = demand_matrix(family, n, seed)
            base = decompose_fixed(d, rate_Bps)
            for s in ocs:
                for rho in rhos:
                    delay = delay_for(d, s, rate_Bps, rho)
                    pools = with_eclipse(base, d, delay, rate_Bps)
                    lb = lower_bound(d, s, delay, rate_Bps)
                    for name, res in run_schedulers(Instance(d, s, delay, rate_Bps), pools).items():
                        makespan = check_schedule(d, res.schedule)
                        yield {
                            "family": family,
                            "pods": n,
                            "ocs": s,
                            "rho": rho,
                            "scheduler": name,
                            "delay_s": delay,
                            "makespan_s": makespan,
                            "lower_bound_s": lb,
                            "over_lb": makespan / lb,
                            "configurations": res.configurations,
                            "wall_s": res.wall_s,
                            "detail": res.detail,
                        }
