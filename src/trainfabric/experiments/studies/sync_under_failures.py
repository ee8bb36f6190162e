"""Study ``sync-under-failures``: which load balancing keeps a DiLoCo fleet inside its SLO when
the fabric degrades, and does a workload-aware sync policy still matter then?

**The sync on the fabric.** ``M`` islands (``fleet.islands``) of ``k`` hosts each
(``island_hosts``, one NIC per host) sit on a multiplane fabric (``topology``,
:func:`trainfabric.fabric.scenarios.build_topology`); the ``M·k`` hosts are placed by
:func:`trainfabric.fabric.flow.collectives.place` (``placement``, seeded) and island ``i`` holds
hosts ``i·k .. i·k + k − 1`` of that placement. Every host of an island holds ``1/k`` of the
pseudo-gradient (``S = P · bytes_per_param`` bytes, ``P = fleet.params``), so the DiLoCo outer
sync is ``k`` concurrent ring all-reduces, ring ``r`` joining host ``r`` of every island
(:func:`trainfabric.workloads.collectives.ring_all_reduce`: ``2(M−1)`` steps of
``S/(k·M)`` bytes per host); step ``j`` of every ring is one step of one collective
(:func:`sync_steps`). The flows (:func:`trainfabric.fabric.flow.collectives.collective_flows`) use
``channels`` persistent connections per host pair and ``sync = "rank"`` (a host sends step
``j+1`` once its step-``j`` flows are done, plus ``step_latency_s``: NCCL's ring, so a stall
propagates and every step is simulated, no ring shortcut). The sync duration fed to DiLoCo is
the collective's completion time (release to last byte, headers and per-hop latency
included) plus the outer Nesterov step ``outer_step_s``.

**Degradation, per draw** (:func:`draw_plan`; ``draws`` per failed fraction ``f``, the same
draws for every mode: common random numbers):

* *failed cables*: ``round(f · cables)`` leaf-spine cables down (both directions) from the
  start, :func:`trainfabric.fabric.topology.fail_links` with seed ``(seed, round(f·1e6), d)``:
  old failures that every mechanism already routes around;
* *a link flap* with probability ``flap_probability`` (a stress setting, not a measured flap
  rate): one cable goes down at a time uniform over the sync (the mode's own sync time on
  that failure set) for a duration drawn from ``flap_durations_s``, then comes back. The
  cable is uniform among the cables of side ``nic`` (a host's port on one plane) or
  ``fabric`` (leaf-spine) that carry the sync's bytes in that mode's flap-free run
  (:func:`trainfabric.fabric.iteration.faults.cable_candidates`). Each mode learns the down and
  up events through its own mechanisms (hardware 5 us, host software 5 ms, routing 1 s);
  until then its traffic into the dead cable is lost or stuck. The flap's cost is measured as
  the extra time of the whole collective, never as the configured reaction time.

**Into the fleet.** The ``draws`` measured sync durations of a (``f``, mode) cell, in draw
order, are the fleet simulator's sync-duration distribution
(:class:`trainfabric.diloco.fleet.SyncDurations` samples, through :func:`.common.fleet_runs`):
every sync of a run draws one of them with replacement, the same index sequence on every
cell of a fleet seed, so two modes' ``k``-th syncs saw the same failure set and flap. Rows:
failed fraction × mode × policy with the sync seconds (mean, p50, p99, max over draws; the
healthy fabric's; ``fleet_sync_s``: the mean duration the simulator drew, NaN where no run
synced), the SLO violation rate and the loss at equal wall-clock and at equal tokens (means
and standard errors over fleet seeds), and paired differences on the same fleet seeds
against the reference policy (``policy_reference``: the first of ``fleet.policies``,
``*_vs_policy_ref``) and the reference mode (``mode_reference``: the first of ``modes``,
``*_vs_mode_ref``), with their standard errors.

**Models and measurements.** Measured on the fabric pillar's engine (a simulation, not
hardware): every sync duration (flow engine, max-min fluid rates, 64 B headers per 4096 B;
or the packet engine with ``engine = "packet"``, for small settings: the packets of one sync
are ``S / 4096`` times the ring's ``2(M−1)/M`` factor). Models: the placement, the ring
schedule, the failure and flap draws (uniform, seeded; the flap probability is a stress knob)
and the whole fleet (serving, progress and loss curves, arrivals: :mod:`trainfabric.diloco`).
``sync_s_diloco_model`` is the DiLoCo pillar's own closed form
(:meth:`trainfabric.diloco.learners.SyncModel.duration_s`) at ``k · nic_rate`` per island, the
figure the simulator would use without this study; the ``provenance`` column says all this
in every row.
"""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
import pandas as pd
from pydantic import Field

from trainfabric.config import Config
from trainfabric.diloco.learners import SyncModel
from trainfabric.errors import ConfigError, InfeasibleError
from trainfabric.experiments.studies.common import FleetSettings, fleet_runs, summarise
from trainfabric.fabric import topology as T
from trainfabric.fabric.config import ALL_MODES, LBMode, TopologyConfig, build_topology
from trainfabric.fabric.events import LinkEvents
from trainfabric.fabric.flow.collectives import collective_flows, place
from trainfabric.fabric.iteration.faults import cable_candidates, cable_links
from trainfabric.fabric.packet.config import PacketConfig
from trainfabric.runs.registry import register
from trainfabric.runs.report import FIGURES
from trainfabric.runs.report_figures import legend_outside, line_style, new_figure
from trainfabric.workloads.collectives import Step, ring_all_reduce

Fraction = Annotated[float, Field(ge=0, lt=1)]
Positive = Annotated[float, Field(gt=0)]
QUANTILES = {"p50": 0.5, "p99": 0.99, "max": 1.0}
PAIRED = ("slo_violation_rate", "loss_equal_wallclock", "loss_equal_tokens")
PROVENANCE = (
    "measured (simulated on the fabric pillar's {engine} engine, not hardware): each sync's "
    "collective time over seeded failure/flap draws; model: placement, ring schedule, failure "
    "and flap draws (flap probability a stress knob), outer step, fleet simulator "
    "(diloco.fleet: serving, progress, loss); sync_s_diloco_model: the DiLoCo pillar's "
    "closed form at k x NIC rate per island"
)


class SyncUnderFailuresConfig(Config):
    """The fabric, the sync on it, the degradation drawn, and the fleet (seconds, Gb/s)."""

    topology: TopologyConfig = TopologyConfig(
        gpus=32, planes=4, switch_radix=16, nic_rate_gbps=100.0
    )
    island_hosts: int = Field(4, ge=1, le=4096, description="hosts per island (k)")
    placement: Literal["packed", "scattered", "random"] = "random"
    channels: int = Field(4, ge=1, le=64, description="connections (QPs) per host pair")
    step_latency_s: float = Field(50e-6, ge=0, description="software latency per ring step")
    bytes_per_param: float = Field(4.0, gt=0, description="pseudo-gradient bytes (fp32)")
    outer_step_s: float = Field(0.005, ge=0, description="outer Nesterov step after the ring")
    modes: list[LBMode] = Field(default_factory=lambda: list(ALL_MODES), min_length=1)
    failed_fractions: list[Fraction] = Field(
        default_factory=lambda: [0.0, 0.05, 0.1, 0.2], min_length=1
    )
    draws: int = Field(20, ge=1, le=10_000, description="failure (+ flap) draws per fraction")
    flap_probability: float = Field(0.25, ge=0, le=1, description="share of syncs with a flap")
    flap_durations_s: list[Positive] = Field(
        default_factory=lambda: [1e-3, 1e-2, 1e-1, 1.0], min_length=1
    )
    flap_sides: list[Literal["nic", "fabric"]] = Field(
        default_factory=lambda: ["nic", "fabric"], min_length=1
    )
    engine: Literal["flow", "packet"] = "flow"
    packet: PacketConfig = Field(default_factory=PacketConfig)
    fleet: FleetSettings = FleetSettings()

    def shard_bytes(self) -> float:
        """Bytes one ring all-reduces: ``P · bytes_per_param / k``."""
        return self.fleet.params * self.bytes_per_param / self.island_hosts


# -- the sync as a collective ---------------------------------------------------------------------
def sync_steps(islands: int, k: int, shard_bytes: float) -> list[Step]:
    """The ``2(M−1)`` steps of ``k`` concurrent rings over ranks ``0..M·k−1`` (rank ``i·k + r``
    = host ``r`` of island ``i``; ring ``r`` joins ranks ``r, k + r, ...``), each ring a
    :func:`~trainfabric.workloads.collectives.ring_all_reduce` of ``shard_bytes``."""
    rings = [ring_all_reduce(np.arange(islands) * k + r, shard_bytes) for r in range(k)]
    return [
        Step(
            np.concatenate([s.src for s in step]),
            np.concatenate([s.dst for s in step]),
            np.concatenate([s.bytes for s in step]),
        )
        for step in zip(*rings, strict=True)
    ]


def sync_hosts(config: SyncUnderFailuresConfig, topo, seed: int) -> np.ndarray:
    """Hosts of ranks ``0..M·k−1`` (:func:`~trainfabric.fabric.flow.collectives.place`)."""
    n = config.fleet.islands * config.island_hosts
    if n > topo.n_hosts:
        raise ConfigError(
            "island_hosts", f"islands x island_hosts = {n} exceeds the {topo.n_hosts} hosts"
        )
    return place(topo.host_leaf[0], n, config.placement, seed)


def sync_flows(config: SyncUnderFailuresConfig, hosts: np.ndarray, seed: int):
    """The sync's flows on ``hosts`` (module doc: persistent connections, ``sync = "rank"``)."""
    steps = sync_steps(config.fleet.islands, config.island_hosts, config.shard_bytes())
    return collective_flows(
        steps,
        hosts,
        step_latency_s=config.step_latency_s,
        sync="rank",
        channels=config.channels,
        seed=seed,
    ).flows


def run_sync(config: SyncUnderFailuresConfig, topo, flows, mode: str, seed: int, **faults):
    """One sync on the configured engine (``faults``: ``link_up``, ``events``); refuses a run
    whose flows never finish (``InfeasibleError``)."""
    if config.engine == "flow":
        from trainfabric.fabric.flow.engine import simulate
        from trainfabric.fabric.routing import Router

        res = simulate(topo, flows, Router(topo, mode, seed=seed), **faults)
    else:
        from trainfabric.fabric.packet import simulate_packets

        res = simulate_packets(topo, flows, mode, config=config.packet, seed=seed, **faults)
    if res.unfinished:
        raise InfeasibleError(f"{res.unfinished} flows of the DiLoCo sync never finished ({mode})")
    return res


def link_bits(res) -> np.ndarray:
    """Bits per directed link over a run (flow engine ``link_bits``, packet ``link_bytes``)."""
    return res.link_bits if hasattr(res, "link_bits") else 8.0 * res.link_bytes


# -- draws -----------------------------------------------------------------------------------------
def draw_plan(config: SyncUnderFailuresConfig, seed: int) -> pd.DataFrame:
    """Per (fraction, draw): the failure seed and the flap's four uniforms (flap?, side and
    duration, time, cable), from ``default_rng([seed, round(f·1e6), d])``: the same for every
    mode."""
    rows = []
    sides, durations = config.flap_sides, config.flap_durations_s
    for frac in config.failed_fractions:
        for d in range(config.draws):
            rng = np.random.default_rng([seed, round(frac * 1e6), d])
            fail_seed = int(rng.integers(2**31))
            u = rng.random(4)
            flap = bool(u[0] < config.flap_probability)
            kind = min(int(u[1] * len(sides) * len(durations)), len(sides) * len(durations) - 1)
            rows.append(
                {
                    "failed_fraction": float(frac),
                    "draw": d,
                    "fail_seed": fail_seed,
                    "flap": flap,
                    "flap_side": sides[kind // len(durations)] if flap else "",
                    "flap_duration_s": float(durations[kind % len(durations)]) if flap else 0.0,
                    "u_time": float(u[2]),
                    "u_cable": float(u[3]),
                }
            )
    return pd.DataFrame(rows)


def measure_draw(config, topo, flows, mode: str, seed: int, draw) -> dict:
    """One draw of ``mode``: the sync on its failure set, then (if the draw flaps) again with
    the flap at ``u_time`` of that time on the ``u_cable``-th candidate cable (module doc)."""
    up = T.fail_links(topo, draw.failed_fraction, seed=draw.fail_seed)
    res = run_sync(config, topo, flows, mode, seed, link_up=up)
    collective_s, flap_at_s, cable = res.makespan_s, np.nan, -1
    if draw.flap:
        cands = cable_candidates(topo, link_bits(res), draw.flap_side)
        cable = int(cands[min(int(draw.u_cable * cands.size), cands.size - 1)])
        flap_at_s = draw.u_time * collective_s
        events = LinkEvents.flap(
            cable_links(topo, cable), flap_at_s, flap_at_s + draw.flap_duration_s
        )
        collective_s = run_sync(config, topo, flows, mode, seed, link_up=up, events=events)
        collective_s = collective_s.makespan_s
    return {
        "failed_cables": int((~up).sum()) // 2,
        "flap_cable": cable,
        "flap_at_s": flap_at_s,
        "collective_s": float(collective_s),
        "sync_s": float(collective_s) + config.outer_step_s,
    }


def sync_draws(config: SyncUnderFailuresConfig, seed: int) -> pd.DataFrame:
    """Every draw of every mode: :func:`draw_plan`'s columns, ``mode`` and
    :func:`measure_draw`'s figures (seconds), plus the mode's healthy sync
    (``healthy_sync_s``: no failure, no flap)."""
    topo = build_topology(config.topology)
    flows = sync_flows(config, sync_hosts(config, topo, seed), seed)
    plan = draw_plan(config, seed)
    parts = []
    for mode in config.modes:
        healthy = run_sync(config, topo, flows, mode, seed).makespan_s + config.outer_step_s
        rows = [measure_draw(config, topo, flows, mode, seed, d) for d in plan.itertuples()]
        figures = pd.DataFrame(rows, index=plan.index)
        parts.append(pd.concat([plan, figures], axis=1).assign(mode=mode, healthy_sync_s=healthy))
    return pd.concat(parts, ignore_index=True)


# -- the study -------------------------------------------------------------------------------------
def sync_figures(draws: pd.DataFrame) -> pd.DataFrame:
    """Per (fraction, mode): sync seconds mean and :data:`QUANTILES` over draws, the healthy
    sync, the mean failed cables and the share of draws with a flap."""
    groups = draws.groupby(["failed_fraction", "mode"], sort=False)
    out = groups.agg(
        sync_s_mean=("sync_s", "mean"),
        healthy_sync_s=("healthy_sync_s", "first"),
        failed_cables=("failed_cables", "mean"),
        flap_share=("flap", "mean"),
        sync_draws=("sync_s", "size"),
    )
    for name, q in QUANTILES.items():
        out[f"sync_s_{name}"] = groups["sync_s"].quantile(q)
    return out.reset_index()


def paired(runs: pd.DataFrame, column: str, reference: str, within: list[str]) -> pd.DataFrame:
    """Per ``within + [column]`` group: the mean and standard error (``sd/sqrt(n)``, ddof 1; 0
    for one seed) over fleet seeds of :data:`PAIRED` minus their values at ``column ==
    reference`` with the same ``within`` keys and fleet seed."""
    keys = [*within, "fleet_seed"]
    base = runs[runs[column] == reference].set_index(keys)[list(PAIRED)]
    diff = runs.set_index(keys)[list(PAIRED)] - base.reindex(runs.set_index(keys).index).to_numpy()
    diff[column] = runs[column].to_numpy()
    groups = diff.reset_index().groupby([*within, column], sort=False)[list(PAIRED)]
    n = groups.size().to_numpy()[:, None]
    se = groups.std(ddof=1).fillna(0.0) / np.sqrt(n)
    suffix = f"_vs_{column}_ref"
    return groups.mean().add_suffix(suffix).join(se.add_suffix(f"{suffix}_se")).reset_index()


@register(
    "sync-under-failures",
    SyncUnderFailuresConfig,
    keys=("failed_fraction", "mode", "policy"),
    quick={
        "failed_fractions": [0.0, 0.1, 0.2],
        "draws": 6,
        "flap_probability": 0.5,
        "fleet": {"windows": 600, "fleet_seeds": 3},
    },
)
def sync_under_failures(config: SyncUnderFailuresConfig, seed: int) -> pd.DataFrame:
    """DiLoCo outer sync as a collective on a degraded multiplane fabric (failed cables, link
    flaps) per load-balancing mode; the measured sync-time distribution fed into the fleet
    simulator: SLO and loss per failed fraction x mode x policy."""
    draws = sync_draws(config, seed)
    runs = []
    for (frac, mode), cell in draws.groupby(["failed_fraction", "mode"], sort=False):
        samples = cell.sort_values("draw")["sync_s"].to_numpy()
        cell_runs = fleet_runs(config.fleet, samples, seed)
        runs.append(cell_runs.assign(failed_fraction=frac, mode=mode))
    runs = pd.concat(runs, ignore_index=True)
    keys = ["failed_fraction", "mode", "policy"]
    table = summarise(runs, by=tuple(keys)).rename(columns={"sync_s": "fleet_sync_s"})
    table.loc[table.syncs == 0, "fleet_sync_s"] = np.nan  # nothing drawn (no_sync)
    table = table.merge(sync_figures(draws), on=["failed_fraction", "mode"])
    policy_ref, mode_ref = config.fleet.policies[0], config.modes[0]
    table = table.merge(paired(runs, "policy", policy_ref, ["failed_fraction", "mode"]), on=keys)
    table = table.merge(paired(runs, "mode", mode_ref, ["failed_fraction", "policy"]), on=keys)
    table["policy_reference"], table["mode_reference"] = policy_ref, mode_ref
    table["sync_s_diloco_model"] = SyncModel(
        params=config.fleet.params,
        bytes_per_param=config.bytes_per_param,
        islands=config.fleet.islands,
        link_gbps=config.island_hosts * config.topology.nic_rate_gbps,
        step_latency_s=config.step_latency_s,
        outer_step_s=config.outer_step_s,
    ).duration_s()
    table["engine"] = config.engine
    table["provenance"] = PROVENANCE.format(engine=config.engine)
    return table


# -- figures ---------------------------------------------------------------------------------------
DEMO_STEM = "cross_pillar_sync_under_failures"  # the demo's table (trainfabric.demo)


def study_figures(table: pd.DataFrame) -> list:
    """Per mode against the failed fraction (means over study seeds): the sync seconds (p50,
    bars to p99) and, for the last syncing policy, the SLO violation rate minus the reference
    mode's on the same fleet seeds (paired; bars: its standard error)."""
    need = {"failed_fraction", "mode", "policy", "sync_s_p50", "sync_s_p99", "mode_reference"}
    if not need <= set(table.columns) or table["failed_fraction"].nunique() < 2:
        return []
    syncing = [p for p in dict.fromkeys(table["policy"]) if p != "no_sync"]
    if not syncing:
        return []
    policy = syncing[-1]
    fig, (left, right) = new_figure(2, 5.6)
    for i, (mode, rows) in enumerate(table.groupby("mode", sort=False)):
        cells = rows[rows.policy == policy].groupby("failed_fraction")
        x = np.asarray(list(cells.groups), float) * 100
        p50, p99 = cells["sync_s_p50"].mean(), cells["sync_s_p99"].mean()
        style = line_style(i)
        left.errorbar(x, p50, yerr=[0 * p50, p99 - p50], capsize=3, label=mode, **style)
        slo = cells["slo_violation_rate_vs_mode_ref"].mean() * 100
        se = cells["slo_violation_rate_vs_mode_ref_se"].mean() * 100
        right.errorbar(x, slo, yerr=se, capsize=3, label=mode, **style)
    left.set(xlabel="failed leaf-spine cables (%)", ylabel="DiLoCo sync (s): p50, bar to p99")
    left.set_title("Measured sync time on the fabric")
    ref = table["mode_reference"].iloc[0]
    right.set(xlabel="failed leaf-spine cables (%)", ylabel=f"SLO violations - {ref}'s (pp)")
    right.set_title(f"Fleet SLO vs {ref} ({policy}, paired; bars: 1 s.e.)")
    legend_outside(fig, "LB mode")
    return [fig]


FIGURES["sync-under-failures"] = study_figures
FIGURES[DEMO_STEM] = study_figures
