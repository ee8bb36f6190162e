"""Study ``rewire-or-defer``: co-scheduling OCS reconfigurations with DiLoCo outer syncs.

**Setting.** ``n = M`` pods (one per DiLoCo island, ``M = fleet.islands``) on ``ocs`` optical
switches. Each pod has ``ports`` ports carrying drifting pod-to-pod traffic (the OCS
pillar's generator, :func:`trainfabric.ocs.traffic.generate`, ``v1_share`` of one slot's
bytes as total variation, as in experiment E7) and ``2·ring_circuits`` more ports on the same
switches holding the sync ring's circuits (``ring_circuits`` per ring pair). One OCS slot is
one fleet window (``window_s`` = 1 s).

**The two layers alone.**

* *OCS*: the lazy threshold policy at ``θ*`` (:func:`trainfabric.ocs.online.threshold.evaluate`,
switch
  cost ``C = c_rel ·`` the first slot's optimal cost) reconfigures at slots ``R``; its cost is
  the OCS pillar's own, ``Σ_t f_t(w_t) + C·|R|`` seconds (``f_t``: the slot's max link
  utilisation time, :mod:`trainfabric.ocs.online.threshold`). A reconfiguration that moves at least
  one circuit darkens **every** circuit of the switches for ``delta_ms`` from the start of its
  slot (the convention of :mod:`trainfabric.ocs.schedule.model`: the switch is dark for the
  reconfiguration delay; conservative, as a churn-aware split may leave some switches
  untouched). A trigger that moves no circuit (the optimum is the deployed wiring) is
  charged ``C`` by the OCS pillar's accounting but darkens nothing, and is never deferred.
* *DiLoCo*: each policy of ``fleet`` starts syncs in windows ``S`` (the fleet simulator), each
  of nominal duration ``D`` = the ring all-reduce of ``P·bytes_per_param`` over the ``M`` pods
  at ``ring_circuits`` circuits per ring pair (the hard critical path of the sync DAG of
  :mod:`.sync_over_ocs`, by :class:`trainfabric.ocs.wiring.cost.PathCost`).

**Collision.** While dark, the ring's pairs run at the fallback rate ``B0`` only, so a sync
progresses at ``ρ = B0 / (B·ring_circuits + B0)`` of its rate (:func:`stretched_end`). A
sync that overlaps a dark interval therefore lasts longer than ``D``: training pauses and
serving is slowed for longer (:mod:`trainfabric.diloco.fleet`).

**Co-schedules** (:func:`coschedule`, one pass over the windows; the OCS decides first in a
window, then the fleet):

* ``independent``: both layers keep their plans; collisions stretch syncs;
* ``ocs_defers``: a reconfiguration due while a sync is in flight waits for its end (the
  OCS sees the sync plan); syncs never stretch;
* ``sync_defers``: a sync whose interval would overlap a planned dark interval waits until
  that interval has ended (the sync policy sees the OCS plan ``R``, fixed);
* ``joint``: both see each other's *current* decisions, causally: a sync does not start into
  a reconfiguration announced in its window, and a reconfiguration that becomes due during a
  sync in flight waits for its end. Deferred events of one kind due in the same window merge
  (one sync, one reconfiguration to the optimum of that slot's traffic).

Every co-schedule is then evaluated by the pillars themselves: the OCS cost of its
reconfiguration slots by :func:`trainfabric.ocs.online.threshold.run_policies` (a ``mask`` policy),
the SLO and losses by the fleet simulator replaying its sync windows and durations
(:class:`trainfabric.diloco.policies.Schedule`).

**Regret against each layer optimised alone** (per policy and fleet seed, then means with
standard errors): ``ocs_regret_s = OCS cost(co-schedule) − OCS cost(R)`` (seconds),
``sync_regret_s = Σ sync durations(co-schedule) − |S|·D`` (seconds of paused training),
``slo_regret = SLO violation rate(co-schedule) − SLO(S, D)`` and ``loss_regret_* =`` the
losses' differences (nats), where ``(R)`` and ``(S, D)`` are each layer alone, without the
other (no darkness for the syncs, no deferral for the OCS). A regret may be negative: neither
layer's own plan is optimal for it.

**Models and measurements.** All of it is a model: the traffic sequence and the one-hop cost
(OCS pillar), the ring and the circuit rates (workloads, OCS cost), the fleet and its loss
curve (DiLoCo pillar), and the dark-switch rule above. Nothing is measured on hardware; the
``provenance`` column says so.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from pydantic import Field, field_validator

from trainfabric.config import Config
from trainfabric.diloco.fleet import Block, SyncDurations, simulate
from trainfabric.diloco.policies import Schedule
from trainfabric.experiments.studies.common import (
    NO_SYNC,
    FleetSettings,
    fleet_context,
    fleet_simulation,
    tidy,
)
from trainfabric.experiments.studies.sync_over_ocs import rings, sync_dag
from trainfabric.ocs import traffic as tr
from trainfabric.ocs.model import OcsModel
from trainfabric.ocs.online import threshold as online
from trainfabric.ocs.wiring.cost import PathCost
from trainfabric.runs.registry import register

MODES = ("independent", "ocs_defers", "sync_defers", "joint")
QUICK = {"fleet": {"windows": 600, "fleet_seeds": 3}}
PAIR_BYTES = 1e8  # mean bytes per ordered pod pair and slot (as E7)
PROVENANCE = (
    "model: drifting traffic + one-hop OCS cost + threshold policy (ocs.traffic, ocs.online), "
    "ring all-reduce on reserved circuits (workloads.collectives, ocs.cost.PathCost), "
    "dark-switch rule (every circuit dark for delta), fleet simulator (diloco.fleet); "
    "nothing measured"
)


class RewireOrDeferConfig(Config):
    """OCS hardware and drift, the reconfiguration delay, the ring and the fleet."""

    ports: int = Field(4, ge=1, le=256, description="ports per pod for the drifting traffic")
    ocs: int = Field(4, ge=1, le=256, description="parallel OCSes (s); divides ports (<= 256)")
    rate_gbps: float = Field(100.0, gt=0, description="circuit rate B")
    fallback_gbps: float = Field(5.0, gt=0, description="electrical fallback B0 per pair")
    traffic: str = Field("moe-phases", description="ocs.traffic generator")
    v1_share: float = Field(20.0, ge=0, description="total variation V1 / one slot's bytes")
    c_rel: float = Field(1.0, gt=0, description="switch cost C / first slot's optimal cost")
    delta_ms: float = Field(25.0, ge=0, le=60_000, description="dark time per reconfiguration")
    ring_circuits: int = Field(1, ge=1, le=64, description="circuits per sync ring pair")
    bytes_per_param: float = Field(4.0, gt=0, description="pseudo-gradient bytes (fp32)")
    latency_us: float = Field(5.0, ge=0, description="per-transfer latency of a ring step")
    outer_step_s: float = Field(0.005, ge=0, description="outer Nesterov step")
    modes: list[str] = Field(default_factory=lambda: list(MODES), min_length=1)
    fleet: FleetSettings = FleetSettings()

    @field_validator("modes")
    @classmethod
    def _known_modes(cls, names: list[str]) -> list[str]:
        bad = [m for m in names if m not in MODES]
        if bad:
            raise ValueError(f"unknown mode {bad[0]!r}; known: {', '.join(MODES)}")
        return names

    @field_validator("traffic")
    @classmethod
    def _known_traffic(cls, name: str) -> str:
        if name not in tr.GENERATORS:
            raise ValueError(f"unknown generator {name!r}; known: {', '.join(tr.GENERATORS)}")
        return name

    def model(self) -> OcsModel:
        """The OCS model of the drifting traffic (rates in bits/s)."""
        return OcsModel.uniform(
            self.fleet.islands,
            self.ports,
            self.ocs,
            rate_bps=self.rate_gbps * 1e9,
            fallback_bps=self.fallback_gbps * 1e9,
        )


def nominal_sync_s(config: RewireOrDeferConfig) -> float:
    """``D`` (s): the sync DAG's hard critical path with ``ring_circuits`` on each ring pair."""
    m = config.fleet.islands
    model = OcsModel.uniform(
        m,
        2 * config.ring_circuits,
        1,
        rate_bps=config.rate_gbps * 1e9,
        fallback_bps=config.fallback_gbps * 1e9,
    )
    (ring,) = rings(m, 1)
    x = np.zeros(model.n_pairs, dtype=np.int64)
    x[np.unique(model.pair_index(ring, np.roll(ring, -1)))] = config.ring_circuits
    shard = config.fleet.params * config.bytes_per_param
    dag = sync_dag(m, m, 1, shard, config.latency_us * 1e-6, config.outer_step_s)
    return PathCost(dag, model).hard(x)


def dark_rate(config: RewireOrDeferConfig) -> float:
    """``ρ = B0 / (B·ring_circuits + B0)``: the ring's progress rate while dark."""
    return config.fallback_gbps / (config.rate_gbps * config.ring_circuits + config.fallback_gbps)


def stretched_end(start: float, work: float, dark: list[tuple[float, float]], rho: float) -> float:
    """End time (s) of ``work`` seconds of nominal sync started at ``start`` when it runs at
    rate ``rho`` inside the ``dark`` intervals ``[a, b)`` (sorted, disjoint) and 1 outside."""
    t, left = start, work
    for a, b in dark:
        if b <= t:
            continue
        if a >= t + left:
            break
        left -= max(a - t, 0.0)
        t = max(t, a)
        if t + left / rho <= b:
            return t + left / rho
        left -= (b - t) * rho
        t = b
    return t + left


def coschedule(
    syncs: np.ndarray,
    reconfigs: np.ndarray,
    mode: str,
    sync_s: float,
    delta_s: float,
    rho: float,
    window_s: float = 1.0,
) -> dict:
    """One co-schedule (module doc) of the planned sync windows ``syncs`` and reconfiguration
    slots ``reconfigs`` (bool ``[W]`` each). Returns ``sync_at`` and ``reconfig_at`` (bool
    ``[W]``), ``durations`` (s, one per sync in order), and the counts ``deferred_syncs``,
    ``deferred_reconfigs`` and ``stretched_syncs``."""
    w_all = syncs.size
    planned_dark = [(r * window_s, r * window_s + delta_s) for r in np.flatnonzero(reconfigs)]
    sync_at, reconfig_at = np.zeros(w_all, bool), np.zeros(w_all, bool)
    durations: list[float] = []
    dark: list[tuple[float, float]] = []
    want_sync = want_reconfig = False
    sync_end = -math.inf
    counts = {"deferred_syncs": 0, "deferred_reconfigs": 0, "stretched_syncs": 0}
    for w in range(w_all):
        t = w * window_s
        want_reconfig |= bool(reconfigs[w])
        want_sync |= bool(syncs[w])
        if want_reconfig:
            # a sync in flight (or, for ocs_defers, one starting now) would meet the darkness
            starting = mode == "ocs_defers" and want_sync and sync_end <= t
            conflict = delta_s > 0 and (sync_end > t or starting)
            if mode in ("ocs_defers", "joint") and conflict:
                counts["deferred_reconfigs"] += bool(reconfigs[w])
            else:
                reconfig_at[w], want_reconfig = True, False
                dark.append((t, t + delta_s))
        if not want_sync or sync_end > t:
            continue
        known = planned_dark if mode == "sync_defers" else dark
        if mode in ("sync_defers", "joint") and _overlaps(t, sync_s, known):
            counts["deferred_syncs"] += bool(syncs[w])
            continue
        future = dark if mode in ("ocs_defers", "joint") else planned_dark
        sync_end = stretched_end(t, sync_s, future, rho)
        counts["stretched_syncs"] += bool(sync_end > t + sync_s * (1 + 1e-12))
        sync_at[w], want_sync = True, False
        durations.append(sync_end - t)
    return {"sync_at": sync_at, "reconfig_at": reconfig_at, "durations": durations, **counts}


def _overlaps(t: float, length: float, intervals: list[tuple[float, float]]) -> bool:
    """True when ``[t, t + length)`` meets one of ``intervals`` (half-open; an empty interval
    meets nothing)."""
    return length > 0 and any(a < t + length and t < b for a, b in intervals if a < b)


def ocs_layer(config: RewireOrDeferConfig, seed: int) -> dict:
    """The OCS layer alone (module doc): the cost model, the seeded traffic sequence, the
    switch cost ``C`` (s), ``θ*`` (bytes), the exact per-slot optima and the threshold run."""
    cost = online.OneHopCost(config.model())
    n, slots = config.fleet.islands, config.fleet.windows
    v1 = config.v1_share * n * (n - 1) * PAIR_BYTES
    seq = tr.generate(config.traffic, slots, v1, pods=n, seed=seed, pair_bytes=PAIR_BYTES)
    switch_cost = config.c_rel * cost.slot_optimum(seq.block(0, 1)[0])[0]
    theta = online.theta_star(switch_cost, tr.variation(seq), cost.gamma, slots)
    optima = cost.optima(seq)
    runs = online.run_policies(
        cost, seq, [online.Policy("threshold", theta)], switch_cost, optima=optima
    )
    return {
        "cost": cost,
        "seq": seq,
        "switch_cost_s": switch_cost,
        "theta": theta,
        "optima": optima,
        "alone": runs["threshold"],
    }


def ocs_costs(layer: dict, masks: list[np.ndarray]) -> list[online.PolicyRun]:
    """The OCS pillar's run of each reconfiguration mask on the layer's sequence."""
    policies = [online.Policy(f"mask {i}", mask=m) for i, m in enumerate(masks)]
    runs = online.run_policies(
        layer["cost"], layer["seq"], policies, layer["switch_cost_s"], optima=layer["optima"]
    )
    return [runs[p.name] for p in policies]


def replay(config: RewireOrDeferConfig, seed: int, plans: list[tuple[str, int, dict]]):
    """The fleet simulator replaying each plan ``(policy, fleet seed, co-schedule)``: its
    sync windows (:class:`~trainfabric.diloco.policies.Schedule`) with its durations (the
    ``k``-th sync of a run lasts ``durations[k]``). Plans whose syncs all last the nominal
    ``D`` run in one batch per policy; the others one by one (a duration stream is per
    fleet seed). Returns the tidy run tables in the order of ``plans``."""
    fleet, regime = fleet_context(config.fleet)
    d_nom = nominal_sync_s(config)
    out: list[pd.DataFrame | None] = [None] * len(plans)
    batch: dict[str, list[int]] = {}
    for i, (policy, _, plan) in enumerate(plans):
        if np.allclose(plan["durations"], d_nom, rtol=1e-12, atol=0):
            batch.setdefault(policy, []).append(i)
            continue
        block = Block(Schedule(name=policy, sync_at=plan["sync_at"][None]), [plans[i][1]])
        res = simulate(fleet, regime, [block], durations=_fixed(plan["durations"], d_nom))
        out[i] = tidy(res.table, fleet, config.fleet.params)
    for policy, idx in batch.items():
        sync_at = np.stack([plans[i][2]["sync_at"] for i in idx])
        block = Block(Schedule(name=policy, sync_at=sync_at), [plans[i][1] for i in idx])
        res = simulate(fleet, regime, [block], durations=SyncDurations(samples=[d_nom]))
        table = tidy(res.table, fleet, config.fleet.params)
        for row, i in enumerate(idx):
            out[i] = table.iloc[[row]].reset_index(drop=True)
    return out


def _fixed(durations: list[float], default: float) -> SyncDurations:
    """A duration stream giving ``durations`` in order, then ``default``."""
    values = np.asarray(durations, float)
    block = SyncDurations.BLOCK
    calls = iter(range(1 << 62))

    def draw(_rng, n):
        k = next(calls) * block
        chunk = values[k : k + n]
        return np.r_[chunk, np.full(n - chunk.size, default)]

    return SyncDurations(fn=draw, max_s=float(max(values.max(initial=0.0), default)))


@register("rewire-or-defer", RewireOrDeferConfig, keys=("mode", "policy"), quick=QUICK)
def rewire_or_defer(config: RewireOrDeferConfig, seed: int) -> pd.DataFrame:
    """OCS reconfigurations (dark for delta) against DiLoCo syncs: regret of independent,
    one-sided and joint co-schedules against each layer optimised alone, per policy."""
    layer = ocs_layer(config, seed)
    alone = layer["alone"]
    reconfigs = alone.switched & (alone.moved > 0)  # only these change a cross-connect
    no_ops = alone.switched & ~reconfigs
    d_nom, rho = nominal_sync_s(config), dark_rate(config)
    settings = config.fleet.model_copy(
        update={"policies": [p for p in config.fleet.policies if p != NO_SYNC]}
    )
    alone_runs, starts = fleet_simulation(settings, d_nom, seed)
    plans = []
    for mode in config.modes:
        for row, run in alone_runs.iterrows():
            plan = coschedule(starts[row], reconfigs, mode, d_nom, config.delta_ms * 1e-3, rho)
            plans.append((run["policy"], int(run["fleet_seed"]), plan, mode, row))
    fleets = replay(config, seed, [(p, fs, plan) for p, fs, plan, _, _ in plans])
    ocs = ocs_costs(layer, [plan["reconfig_at"] | no_ops for _, _, plan, _, _ in plans])
    alone_ocs = layer["alone"].slot_cost_s + layer["alone"].switching_cost_s
    rows = []
    for (policy, fseed, plan, mode, row), fl, oc in zip(plans, fleets, ocs, strict=True):
        base = alone_runs.iloc[row]
        rec = fl.iloc[0]
        rows.append(
            {
                "mode": mode,
                "policy": policy,
                "fleet_seed": fseed,
                "syncs": int(plan["sync_at"].sum()),
                "reconfigurations": int(plan["reconfig_at"].sum()),
                "ocs_switches": oc.switches,
                "deferred_syncs": plan["deferred_syncs"],
                "deferred_reconfigs": plan["deferred_reconfigs"],
                "stretched_syncs": plan["stretched_syncs"],
                "sync_seconds": float(np.sum(plan["durations"])),
                "ocs_cost_s": oc.slot_cost_s + oc.switching_cost_s,
                "ocs_regret_s": oc.slot_cost_s + oc.switching_cost_s - alone_ocs,
                "sync_regret_s": float(np.sum(plan["durations"])) - base["syncs"] * d_nom,
                "slo_violation_rate": rec["slo_violation_rate"],
                "slo_regret": rec["slo_violation_rate"] - base["slo_violation_rate"],
                "loss_regret_wallclock": rec["loss_equal_wallclock"] - base["loss_equal_wallclock"],
                "loss_regret_tokens": rec["loss_equal_tokens"] - base["loss_equal_tokens"],
            }
        )
    return summarise_modes(pd.DataFrame(rows), config, layer, d_nom, rho)


def summarise_modes(runs, config, layer, d_nom, rho) -> pd.DataFrame:
    """Means over fleet seeds per (mode, policy) with ``*_se`` (sd/sqrt n) of the regrets,
    and the layers' figures (``D``, ``ρ``, ``δ``, ``C``, ``θ*``, alone costs)."""
    groups = runs.groupby(["mode", "policy"], sort=False)
    value_cols = [c for c in runs.columns if c not in ("mode", "policy", "fleet_seed")]
    out = groups[value_cols].mean()
    n = groups.size()
    for col in ("ocs_regret_s", "sync_regret_s", "slo_regret", "loss_regret_wallclock"):
        out[f"{col}_se"] = groups[col].std(ddof=1).fillna(0.0) / np.sqrt(n)
    out["fleet_seeds"] = n
    out = out.reset_index()
    alone = layer["alone"]
    return out.assign(
        sync_s_nominal=d_nom,
        dark_rate=rho,
        delta_s=config.delta_ms * 1e-3,
        switch_cost_s=layer["switch_cost_s"],
        theta_bytes=layer["theta"],
        ocs_alone_cost_s=alone.slot_cost_s + alone.switching_cost_s,
        ocs_alone_switches=alone.switches,
        ocs_alone_reconfigurations=int((alone.switched & (alone.moved > 0)).sum()),
        ocs_optimum_s=float(layer["optima"].sum()),
        provenance=PROVENANCE,
    )
