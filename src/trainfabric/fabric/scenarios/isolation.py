"""(b) Tenant isolation: a victim collective alone, then beside an aggressor all-to-all on
the other hosts (``isolation_ratio`` = solo time / shared time; 1 = perfect isolation).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from trainfabric.errors import ConfigError
from trainfabric.fabric import topology as T
from trainfabric.fabric.config import build_topology
from trainfabric.fabric.flow.collectives import collective_flows
from trainfabric.fabric.flows import FlowTable
from trainfabric.fabric.scenarios.common import (
    check_flows,
    collective_part,
    flow_options,
    kind_label,
    place_ranks,
    simulate_flows,
    size_field,
    steps_for,
)
from trainfabric.fabric.scenarios.config import IsolationScenario


# -- (b) isolation ---------------------------------------------------------------------------------
def run_isolation(sc: IsolationScenario, seed: int | None = None) -> pd.DataFrame:
    """One row per oversubscription x failed fraction x mode: victim solo / shared times."""

    seed = sc.seed if seed is None else seed
    rows = []
    for over in sc.oversubscription:
        topo = build_topology(sc.topology, oversubscription=over)
        n_v = sc.victim.ranks or max(2, int(round(sc.victim_fraction * topo.n_hosts)))
        if n_v > topo.n_hosts - 2:
            raise ConfigError(
                "victim.ranks", f"leaves < 2 of {topo.n_hosts} hosts to the aggressor"
            )
        v_hosts = place_ranks(
            topo, sc.victim.model_copy(update={"ranks": n_v}), seed, field="victim"
        )
        rest = np.setdiff1d(np.arange(topo.n_hosts), v_hosts)
        a_hosts = place_ranks(topo, sc.aggressor, seed + 1, available=rest, field="aggressor")
        parts = [collective_part(sc.victim, v_hosts.size)]
        parts.append(collective_part(sc.aggressor, a_hosts.size))
        check_flows(size_field(sc.aggressor, "aggressor"), topo, sc.modes, parts)
        victim = collective_flows(
            steps_for(sc.victim, v_hosts.size, sc.victim.size_bytes, seed, "victim"),
            v_hosts,
            **flow_options(sc.victim, seed, job=0),
        ).flows
        aggressor = collective_flows(
            steps_for(sc.aggressor, a_hosts.size, sc.aggressor.size_bytes, seed + 1, "aggressor"),
            a_hosts,
            **flow_options(sc.aggressor, seed, job=1),
        ).flows
        both = FlowTable.concat([victim, aggressor])
        is_v = both.job == 0
        for frac, mode in ((f, m) for f in sc.failed_fractions for m in sc.modes):
            up = T.fail_links(topo, frac, seed=seed)
            solo = simulate_flows(sc, topo, victim, mode, seed, "victim.size_bytes", link_up=up)
            shared = simulate_flows(sc, topo, both, mode, seed, "aggressor.size_bytes", link_up=up)
            solo_s = solo.makespan_s
            shared_s = float(np.nanmax(shared.finish_s[is_v]))
            aggr_s = float(np.nanmax(shared.finish_s[~is_v]))
            rows.append(
                {
                    "oversubscription": float(over),
                    "failed_fraction": float(frac),
                    "mode": mode,
                    "victim": kind_label(sc.victim),
                    "aggressor": kind_label(sc.aggressor),
                    "victim_ranks": int(v_hosts.size),
                    "aggressor_ranks": int(a_hosts.size),
                    "victim_solo_s": solo_s,
                    "victim_shared_s": shared_s,
                    "aggressor_s": aggr_s,
                    "isolation_ratio": solo_s / shared_s,
                    "victim_slowdown": shared_s / solo_s - 1,
                    "aggressor_covers_victim": aggr_s >= shared_s,
                    "n_events": int(shared.n_events),
                    "sim_wall_s": float(solo.wall_s + shared.wall_s),
                    "engine": sc.engine,
                    **shared.packet_metrics(),
                }
            )
    return pd.DataFrame(rows)


def isolation_summary(table: pd.DataFrame) -> dict[str, float]:
    """Per mode: the isolation ratio at the lowest oversubscription, without failures."""
    low = table[table["oversubscription"] == table["oversubscription"].min()]
    low = low[low["failed_fraction"] == low["failed_fraction"].min()]
    return low.groupby("mode", sort=False)["isolation_ratio"].min().to_dict()
