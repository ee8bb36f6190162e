"""(a) Line rate: busbw of each collective x message size x mode on an idle fabric, as a
fraction of the NIC rate (NCCL-tests), beside the header-only bound ``4096/4160``.
"""

from __future__ import annotations

import pandas as pd

from trainfabric.fabric.config import build_topology
from trainfabric.fabric.flow.collectives import bus_factor, ideal_time_s
from trainfabric.fabric.scenarios.common import (
    HEADER_BOUND,
    check_flows,
    collective_part,
    kind_label,
    place_ranks,
    run_steps,
    size_field,
    steps_for,
)
from trainfabric.fabric.scenarios.config import LineRateScenario


# -- (a) line rate --------------------------------------------------------------------------------
def run_line_rate(sc: LineRateScenario, seed: int | None = None) -> pd.DataFrame:
    """One row per collective x size x mode: time, busbw, fraction of line rate."""

    seed = sc.seed if seed is None else seed
    topo = build_topology(sc.topology)
    rows = []
    for i, c in enumerate(sc.collectives):
        hosts = place_ranks(topo, c, seed + i, field=f"collectives.{i}")
        n = hosts.size
        field = size_field(c, f"collectives.{i}")
        check_flows(field, topo, sc.modes, [collective_part(c, n)])
        for size in sc.sizes_bytes:
            steps = steps_for(c, n, size, seed + i, field=f"collectives.{i}")
            for mode in sc.modes:
                run = run_steps(sc, topo, mode, steps, hosts, c, seed, f"collectives.{i}.ranks")
                busbw_bps = 8 * size / run.time_s * bus_factor(c.kind, n)
                rows.append(
                    {
                        "collective": kind_label(c),
                        "placement": c.placement,
                        "ranks": n,
                        "size_bytes": float(size),
                        "mode": mode,
                        "time_s": run.time_s,
                        "ideal_time_s": ideal_time_s(c.kind, n, size, topo.nic_rate_bps),
                        "busbw_gbps": busbw_bps / 1e9,
                        "line_rate_fraction": busbw_bps / topo.nic_rate_bps,
                        "header_bound": HEADER_BOUND,
                        "n_steps": run.n_steps,
                        "steps_simulated": run.steps_simulated,
                        "ring_shortcut": run.shortcut,
                        "n_flows": run.n_flows,
                        "n_events": run.n_events,
                        "sim_wall_s": run.wall_s,
                        "engine": sc.engine,
                        "connections": c.connections,
                        **run.packet,
                    }
                )
    return pd.DataFrame(rows)


def line_rate_summary(table: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Per mode, at the largest size: the lowest line-rate fraction over the collectives
    and, from the packet engine, the highest p99 latency and jitter (us)."""
    big = table[table["size_bytes"] == table["size_bytes"].max()].groupby("mode", sort=False)
    out = {m: {"line_rate_fraction": float(v)} for m, v in big["line_rate_fraction"].min().items()}
    for key in ("p99_latency_us", "jitter_us"):
        if key in table.columns:
            for mode, v in big[key].max().items():
                out[mode][key] = float(v)
    return out
