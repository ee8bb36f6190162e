"""The evaluation suite (``trainfabric fabric eval``), the demo's scenarios, and the topology
comparison of the line-rate study.
"""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd

from trainfabric.errors import ConfigError
from trainfabric.fabric import topology as T
from trainfabric.fabric.config import MiB, TopologyConfig
from trainfabric.fabric.scenarios.common import HEADER_BOUND
from trainfabric.fabric.scenarios.config import (
    CollectiveConfig,
    FailuresScenario,
    FlapConfig,
    FlapsScenario,
    IsolationScenario,
    LineRateScenario,
    Scenario,
)
from trainfabric.fabric.scenarios.failures import MAXFLOW_TARGET
from trainfabric.fabric.scenarios.findings import mode_findings
from trainfabric.fabric.scenarios.rundir import (
    HEADLINE,
    render_run,
    run_scenario,
    summarize,
    write_manifest,
    write_tables,
)
from trainfabric.io import write_json
from trainfabric.progress import track
from trainfabric.runs.store import now


# -- topologies side by side ---------------------------------------------------------------------
def topology_comparison(cfg: TopologyConfig, gpus: list[int]) -> pd.DataFrame:
    """The multiplane fabric of ``cfg`` beside the hierarchical builds of the same switch ASIC
    (radix ``R·P`` per plane becomes ``R`` ports at the full NIC rate): a single 2-tier plane
    and the 3-tier fat-tree, at each GPU count; a build that does not fit gets ``fits=False``."""

    nic = cfg.nic_rate_gbps * 1e9
    flat_radix = max(2, cfg.switch_radix // cfg.planes)
    builds = {
        "multiplane": lambda n: T.multiplane(n, cfg.planes, cfg.switch_radix, nic),
        "leaf_spine": lambda n: T.leaf_spine(n, flat_radix, nic),
        "fat_tree": lambda n: T.fat_tree(n, flat_radix, nic),
    }
    rows = []
    for n in gpus:
        for kind, build in builds.items():
            try:
                rows.append({"gpus": n, "build": kind, "fits": True, **build(n).summary()})
            except ConfigError as exc:
                rows.append({"gpus": n, "build": kind, "fits": False, "note": exc.message})
    return pd.DataFrame(rows)


# -- the evaluation and the demo -------------------------------------------------------------------
def eval_scenarios(quick: bool, seed: int = 0, engine: str = "flow") -> list[Scenario]:
    """The four scenarios of ``fabric eval`` on ``engine``: 64 GPUs (quick) or 512 GPUs, 4
    planes, 800G NICs (the packet engine's sizes: :func:`packet_eval_scenarios`).

    Quick: radix 16 per plane (8 leaves x 4 spines per plane, 2 parallel cables per
    leaf-spine pair); full: radix 32 (32 leaves x 16 spines per plane), as htsim's 512-host
    reference fabric but multiplane. The collectives of the full evaluation run on groups
    placed at random (isolation: interleaved) over the whole fabric, so their flows cross
    every spine; the permutations and failure draws use every host.

    Full sizes (chosen to finish in about 3 minutes on 2 cores; they took about 10 minutes
    before, almost all of it in the isolation and flap runs): line rate on 64-rank groups, 8
    sizes from 256 KiB to 4 GiB; isolation on a 32-rank victim all-reduce next to a 32-rank
    aggressor all-to-all (were 64 + 64: the aggressor's 16k concurrent flows made every
    victim step a 16k-flow max-min solve). The aggressor sends 1 GiB per rank: the ECMP
    and flowlet victims outlast it (``aggressor_covers_victim`` False); 2 GiB covers them
    but costs 40 s more (every victim step then re-solves the aggressor's flows) and leaves
    their ratio at 1 (their bottlenecks are their own collisions). Failures: 2 draws per
    fraction (were 5; a draw costs about 5 concurrent-flow LPs over 512 hosts: the figure
    itself and the adaptive mode's split for the collective and for both permutations) and
    a 32-rank all-to-all (was 64). Flaps: a 16-rank all-reduce (was 64), 8 iterations of
    0.25 s of compute (were 20 of 0.1 s), so that the 1.5 s flaps still cover several
    iterations and outlast the routing reaction (1 s).
    """
    if engine == "packet":
        return packet_eval_scenarios(quick, seed)
    if engine != "flow":
        raise ConfigError("engine", f"must be flow or packet, got {engine!r}")
    topo = TopologyConfig(gpus=64 if quick else 512, switch_radix=16 if quick else 32)
    common = dict(seed=seed, topology=topo)
    sizes = [1.0 * MiB, 16.0 * MiB, 256.0 * MiB, 4096.0 * MiB]
    if not quick:
        sizes = [2.0**k * MiB for k in range(-2, 13, 2)]
    group = dict(ranks=None if quick else 64)
    small = dict(ranks=None if quick else 32)
    flaps = {} if quick else dict(iterations=8, compute_s=0.25)
    return [
        LineRateScenario(
            name="line-rate",
            sizes_bytes=sizes,
            collectives=[
                CollectiveConfig(kind="all_reduce", sync="step", **group),
                CollectiveConfig(kind="all_to_all", **group),
            ],
            **common,
        ),
        IsolationScenario(
            name="isolation",
            victim=CollectiveConfig(kind="all_reduce", placement="scattered", **small),
            aggressor=CollectiveConfig(
                kind="all_to_all", placement="scattered", size_bytes=1024 * MiB, **small
            ),
            **common,
        ),
        FailuresScenario(
            name="failures",
            draws=2,
            collective=CollectiveConfig(kind="all_to_all", size_bytes=64 * MiB, **small),
            **common,
        ),
        FlapsScenario(
            name="flaps",
            collective=CollectiveConfig(kind="all_reduce", ranks=16),
            **flaps,
            **common,
        ),
    ]


def packet_eval_scenarios(quick: bool, seed: int = 0) -> list[Scenario]:
    """The four scenarios on the packet engine (``engine = "packet"``, default
    :class:`~trainfabric.fabric.packet.PacketConfig`: trimming switches, NDP-like transport).

    It simulates every packet (about 10 events each), so the sizes are those it runs in
    seconds: 32 GPUs (quick; radix 16: 4 leaves x 2 spines per plane, 4 parallel cables per
    pair) or 64 GPUs (full; 8 leaves x 4 spines per plane), 4 planes, 800G NICs. Line rate:
    a ring all-reduce (global barrier per step) and an all-to-all over 8 random ranks,
    per-rank buffers of 1 and 16 MiB (quick; full adds 64 MiB): with more ranks the ring's
    per-step latency (about 7 us) dominates the buffers the engine can afford. Isolation:
    a victim all-reduce of 4 MiB on 8 ranks next to an aggressor all-to-all of 16 MiB on 8
    others, interleaved on every leaf (quick: no oversubscription). Failures: 0, 10 and 20%
    of the cables down, one draw (quick) or two; permutations of 512 KiB per connection
    (:data:`PACKET_PERMUTATION_BYTES`, goodput measured while every flow is active:
    :func:`measured_goodput`) and a 1 MiB all-to-all over every host.
    Flaps: an 8-rank all-reduce of 4 MiB, 6 iterations of 20 ms of compute, a host and a
    fabric link down for 50 ms each (the flap, its detection and the recovery of the lost
    packets are the engine's: keep-alive-free, by missing acknowledgements and each
    mechanism's reaction time).
    """
    topo = TopologyConfig(gpus=32 if quick else 64, switch_radix=16)
    common = dict(seed=seed, topology=topo, engine="packet")
    sizes = [1.0 * MiB, 16.0 * MiB] if quick else [1.0 * MiB, 16.0 * MiB, 64.0 * MiB]
    return [
        LineRateScenario(
            name="line-rate",
            sizes_bytes=sizes,
            collectives=[
                CollectiveConfig(kind="all_reduce", sync="step", ranks=8),
                CollectiveConfig(kind="all_to_all", ranks=8),
            ],
            **common,
        ),
        IsolationScenario(
            name="isolation",
            victim=CollectiveConfig(
                kind="all_reduce", placement="scattered", ranks=8, size_bytes=4 * MiB
            ),
            aggressor=CollectiveConfig(
                kind="all_to_all", placement="scattered", ranks=8, size_bytes=16 * MiB
            ),
            oversubscription=[1.0] if quick else [1.0, 2.0],
            **common,
        ),
        FailuresScenario(
            name="failures",
            fractions=[0.0, 0.1, 0.2],
            draws=1 if quick else 2,
            collective=CollectiveConfig(kind="all_to_all", size_bytes=1 * MiB),
            **common,
        ),
        FlapsScenario(
            name="flaps",
            collective=CollectiveConfig(kind="all_reduce", ranks=8, size_bytes=4 * MiB),
            iterations=6,
            compute_s=0.02,
            flaps=[
                FlapConfig(link="host", duration_s=0.05),
                FlapConfig(link="fabric", duration_s=0.05),
            ],
            **common,
        ),
    ]


def eval_name(quick: bool, engine: str = "flow") -> str:
    """The run name of ``fabric eval``: ``fabric-eval[-packet][-quick]``."""
    return "fabric-eval" + ("-packet" if engine == "packet" else "") + ("-quick" if quick else "")


def run_eval(
    run_dir: str | Path,
    quick: bool = False,
    seed: int = 0,
    console=None,
    progress=None,
    engine: str = "flow",
    calibrated: bool = False,
) -> dict:
    """All four scenarios on ``engine`` into one run directory with a report; headline
    figures per mode.

    ``progress``: a rich Progress advanced once per scenario (:func:`trainfabric.progress.track`).
    """
    run_dir = Path(run_dir)
    started, t0 = now(), time.perf_counter()
    scenarios = eval_scenarios(quick, seed, engine)
    if calibrated:
        scenarios = [sc.model_copy(update={"calibration": True}) for sc in scenarios]
    modes: dict[str, dict[str, float]] = {}
    walls = {}
    for sc in track(scenarios, "scenarios", progress):
        t = time.perf_counter()
        if console is not None:
            console.print(f"fabric eval ({engine} engine): {sc.kind} ...")
        tables = run_scenario(sc)
        write_tables(run_dir, tables)
        for mode, row in summarize(sc.kind, tables).items():
            modes.setdefault(mode, {}).update(row)
        walls[sc.kind] = time.perf_counter() - t
    topo = scenarios[0].topology
    production = TopologyConfig(gpus=32768, switch_radix=256)  # 256 x 200G per plane, 4 planes
    builds = [
        topology_comparison(topo, [topo.gpus]),
        topology_comparison(production, [8192, 32768]),
    ]
    write_tables(run_dir, {"fabric_topologies": pd.concat(builds, ignore_index=True)})
    config = {sc.kind: sc.model_dump(mode="json") for sc in scenarios}
    write_manifest(run_dir, eval_name(quick, engine), config, started, seed, engine)
    result = {
        "run_dir": str(run_dir),
        "quick": quick,
        "engine": engine,
        "calibrated": calibrated,
        "modes": modes,
        "f3": f3_check(modes),
        "header_bound": HEADER_BOUND,
        "wall_s": time.perf_counter() - t0,
        "scenario_wall_s": walls,
        "findings": mode_findings(modes),
    }
    write_json(run_dir / "summary.json", result)  # the report's headline
    return result | {"report": str(render_run(run_dir))}


def f3_check(modes: dict[str, dict[str, float]]) -> dict:
    """F3 restated: adaptive's cut-permutation goodput over the max-flow bisection at 10%
    failures against :data:`MAXFLOW_TARGET` (empty without an adaptive failures row)."""
    key = "goodput_over_maxflow_at_10pct_failures"
    ratio = modes.get("adaptive", {}).get(key)
    if ratio is None:
        return {}
    return {
        "adaptive_over_maxflow": ratio,
        "target": MAXFLOW_TARGET,
        "met": ratio >= MAXFLOW_TARGET,
    }


def demo_scenarios(seed: int = 0) -> list[Scenario]:
    """Short versions of the four scenarios (32 GPUs, radix 16, 4 planes) for ``make demo``."""
    topo = TopologyConfig(gpus=32, switch_radix=16)
    common = dict(seed=seed, topology=topo, modes=["ecmp", "pinning", "spray", "adaptive"])
    return [
        LineRateScenario(name="line-rate", sizes_bytes=[1.0 * MiB, 256.0 * MiB], **common),
        IsolationScenario(name="isolation", oversubscription=[1.0], **common),
        FailuresScenario(
            name="failures",
            fractions=[0.0, 0.1, 0.2],
            draws=1,
            collective=CollectiveConfig(kind="all_to_all", size_bytes=64 * MiB),
            **common,
        ),
        FlapsScenario(
            name="flaps",
            collective=CollectiveConfig(kind="all_reduce", ranks=8),
            iterations=12,
            compute_s=0.15,
            **common,
        ),
    ]


def fabric_demo(run_dir: str | Path, console) -> dict:
    """Demo step: the short scenarios' tables into ``run_dir`` (no manifest, no report), a
    per-mode table on ``console``; returns ``{"modes": {mode: headline figures}}``."""
    from rich.table import Table

    run_dir = Path(run_dir)
    modes: dict[str, dict[str, float]] = {}
    for sc in demo_scenarios():
        tables = run_scenario(sc)
        write_tables(run_dir, tables)
        for mode, row in summarize(sc.kind, tables).items():
            modes.setdefault(mode, {}).update(row)
    keys = HEADLINE
    heads = (
        "busbw/line rate",
        "isolation",
        "perm. goodput @10% failed",
        "max-flow bisection @10%",
        "goodput/max-flow @10%",
        "flap stall (s)",
    )
    t = Table("mode", *heads, title="fabric: 32 GPUs, 4 planes x 200G, radix 16 (flow level)")
    for mode, row in modes.items():
        t.add_row(mode, *(f"{row.get(k, float('nan')):.4g}" for k in keys))
    console.print(t)
    return {"modes": modes}
