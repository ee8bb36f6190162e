"""Study ``sync-over-ocs``: how much serving SLO does a better optical wiring buy a DiLoCo fleet?

**Islands on pods.** ``M`` islands (``fleet.islands``) of ``k`` pods each (``island_pods``):
island ``i`` holds pods ``i·k .. i·k + k − 1`` and runs its own copy of the ``workload`` job
re-mapped onto ``k`` pods (:func:`trainfabric.workloads.build_dag`; its pipeline and
expert-parallel traffic stays inside the island). Every pod of an island holds (or owns, for
replicated weights) an equal ``1/k`` shard of the ``P`` parameters (``fleet.params``), so the
DiLoCo outer sync is ``k`` concurrent ring all-reduces, ring ``r`` joining the pods of **matching
rank** ``{i·k + r : i < M}`` (island order), each over ``S/k`` bytes with
``S = P · bytes_per_param`` (:func:`trainfabric.workloads.collectives.ring_all_reduce`: ``2(M−1)``
steps of ``S/(k·M)`` bytes per pod). The outer Nesterov step (``outer_step_s``) follows on
every pod.

**Combined DAG** (:func:`sync_dags`): the ``M`` island iteration DAGs side by side, then the
sync's ``2(M−1)`` ring steps as phases (each step of all ``k`` rings is one phase, as the
rings run concurrently), then the outer step. In the simulator training pauses while a sync
runs (:mod:`trainfabric.diloco.fleet`), so the sync follows the iteration, and the static
wiring must serve both: the circuits given to the islands' traffic are not there for the
ring, and the reverse. Its hard critical path is ``iteration_s + sync_s`` exactly (the tests
check it), where ``iteration_s`` and ``sync_s`` are the hard critical paths of the islands'
part and of the sync part alone on the same wiring (:class:`trainfabric.ocs.wiring.cost.PathCost`,
the planner's one critical-path function). One iteration against one sync weighs them equally
in the planner's objective; a DiLoCo round runs ``H`` iterations per sync, so this is the
sync-friendly end of the trade-off (stated, not tuned).

**Wirings** on ``M·k`` pods, ``ports`` ports each over ``ocs`` OCSes
(:class:`trainfabric.ocs.model.OcsModel`): ``uniform`` (the traffic-oblivious mesh,
:func:`trainfabric.ocs.wiring.baselines.uniform_mesh`), ``near_uniform`` (the best of a few
near-uniform meshes on the combined DAG, the planner's own uniform reference,
:func:`trainfabric.ocs.wiring.baselines.best_near_uniform`), ``traffic_only`` (the same planner on
the aggregated traffic matrix, :func:`trainfabric.ocs.wiring.planner.plan_traffic_only`), ``demand``
(circuits proportional to pair bytes, :func:`trainfabric.ocs.wiring.baselines.demand_proportional`)
and ``dag_aware`` (:func:`trainfabric.ocs.wiring.planner.plan` on the combined DAG). For a pure ring
all-reduce the first two coincide; here the islands' traffic competes with the ring for ports.

**Into the fleet.** ``sync_s`` (seconds per sync, one value per wiring: the ring's steps are
identical and the DAG deterministic) is the simulator's sync duration
(:func:`.common.fleet_runs`); with ``iteration_from_wiring`` the inner-step rate is
``1 / iteration_s`` (the wiring also sets how fast the islands train). Rows: wiring ×
policy with the sync and iteration seconds, the critical paths, the SLO violation rate and
both losses (:mod:`.common`) with standard errors over fleet seeds, and the difference of
each against the reference wiring (the first of ``wirings``, ``reference`` column) on the same
fleet seeds (paired, ``*_vs_ref`` with ``*_vs_ref_se``).

**Models and measurements.** Everything is a model: the job's DAG (compute from
``6·params·tokens`` at the preset's FLOP rate and MFU), the one-hop OCS circuit model
(``latency + 8·bytes/(B·x + B0)``), the ring schedule and the fleet simulator. Measured: the
planner's own run (its wall time, ``plan_s``). The ``provenance`` column names each figure's
source; ``sync_s_diloco_model`` is the DiLoCo pillar's own bandwidth model at its default
100 Gb/s per island, for comparison.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import pandas as pd
from pydantic import Field, field_validator

from trainfabric.config import Config
from trainfabric.diloco.learners import ProgressModel, SyncModel
from trainfabric.experiments.studies.common import FleetSettings, fleet_runs, summarise
from trainfabric.ocs.model import OcsModel
from trainfabric.ocs.wiring import baselines
from trainfabric.ocs.wiring.cost import PathCost
from trainfabric.ocs.wiring.planner import plan, plan_traffic_only
from trainfabric.runs.registry import register
from trainfabric.workloads import build_dag, get_preset
from trainfabric.workloads.collectives import ring_all_reduce
from trainfabric.workloads.dag import DagBuilder, Phase, TaskDAG, from_arrays

WIRINGS = ("uniform", "near_uniform", "traffic_only", "demand", "dag_aware")
PROVENANCE = (
    "model: island DAG (workloads.build_dag, 6*params*tokens compute), ring all-reduce "
    "(workloads.collectives), one-hop OCS circuits (ocs.cost.PathCost), fleet simulator "
    "(diloco.fleet); measured: planner wall time (plan_s)"
)


class SyncOverOcsConfig(Config):
    """One instance: islands' job, OCS hardware, wirings compared, the fleet (rates Gb/s)."""

    workload: str = Field("moe", description="each island's job: a preset re-mapped onto k pods")
    island_pods: int = Field(4, ge=1, le=64, description="pods per island (k)")
    ports: int = Field(8, ge=1, le=256, description="OCS-facing ports per pod (d)")
    ocs: int = Field(4, ge=1, le=256, description="parallel OCSes (s); divides ports (<= 256)")
    rate_gbps: float = Field(100.0, gt=0, description="circuit rate B")
    fallback_gbps: float = Field(5.0, gt=0, description="electrical fallback B0 per pair")
    latency_us: float = Field(5.0, ge=0, description="per-transfer latency of a ring step")
    bytes_per_param: float = Field(4.0, gt=0, description="pseudo-gradient bytes (fp32)")
    outer_step_s: float = Field(0.005, ge=0, description="outer Nesterov step")
    wirings: list[str] = Field(default_factory=lambda: list(WIRINGS), min_length=1)
    b1_rel: float = Field(1.0, gt=0, description="planner prior weight (b1 = b1_rel / CP0)")
    b2_rel: float = Field(50.0, gt=0, description="planner smoothing (b2 = b2_rel log|Π| / CP0)")
    iteration_from_wiring: bool = Field(
        True, description="inner steps/s = 1 / the islands' iteration time on the wiring"
    )
    fleet: FleetSettings = FleetSettings()

    @field_validator("wirings")
    @classmethod
    def _known_wirings(cls, names: list[str]) -> list[str]:
        bad = [w for w in names if w not in WIRINGS]
        if bad:
            raise ValueError(f"unknown wiring {bad[0]!r}; known: {', '.join(WIRINGS)}")
        return names

    def model(self) -> OcsModel:
        """The OCS model over all ``M·k`` pods (rates in bits/s)."""
        return OcsModel.uniform(
            self.fleet.islands * self.island_pods,
            self.ports,
            self.ocs,
            rate_bps=self.rate_gbps * 1e9,
            fallback_bps=self.fallback_gbps * 1e9,
        )

    def shard_bytes(self) -> float:
        """Bytes one ring all-reduces: ``P · bytes_per_param / k``."""
        return self.fleet.params * self.bytes_per_param / self.island_pods


def rings(islands: int, k: int) -> list[np.ndarray]:
    """Ring ``r`` = pods of matching rank ``r``: ``[r, k + r, 2k + r, ...]`` (module doc)."""
    return [np.arange(islands, dtype=np.int64) * k + r for r in range(k)]


def sync_dag(
    n_pods: int, islands: int, k: int, shard_bytes: float, latency_s: float, outer_step_s: float
) -> TaskDAG:
    """The outer sync alone on ``n_pods`` pods: step ``j`` of all ``k`` rings is phase ``j``
    (``ring_all_reduce`` of ``shard_bytes`` per ring), then the outer step on every pod."""
    b = DagBuilder(n_pods)
    per_ring = [ring_all_reduce(ring, shard_bytes) for ring in rings(islands, k)]
    meta = Phase(
        "diloco_sync", "", group="diloco sync", op="all_reduce", n_ranks=islands, n_collectives=k
    )
    last: list[int] = []
    for j, steps in enumerate(zip(*per_ring, strict=True)):
        src = np.concatenate([s.src for s in steps])
        dst = np.concatenate([s.dst for s in steps])
        nbytes = np.concatenate([s.bytes for s in steps])
        _, exit_ = b.phase(
            "diloco_sync", f"sync step {j}", src, dst, nbytes, latency_s, 0.0, preds=last, meta=meta
        )
        last = [exit_]
    for pod in range(n_pods):
        b.edges(last, b.compute(pod, outer_step_s, f"outer step pod {pod}"))
    return b.build()


def _arrays(dag: TaskDAG, node0: int, pod0: int, phase0: int) -> dict[str, np.ndarray]:
    """``dag``'s node columns and edges shifted by node, pod and phase offsets."""
    src = np.repeat(np.arange(dag.n_nodes, dtype=np.int64), np.diff(dag.indptr))
    return {
        "kind": dag.kind,
        "pod": np.where(dag.pod >= 0, dag.pod + pod0, -1).astype(np.int32),
        "dst": np.where(dag.dst >= 0, dag.dst + pod0, -1).astype(np.int32),
        "duration_s": dag.duration_s,
        "nbytes": dag.bytes,
        "latency_s": dag.latency_s,
        "phase": np.where(dag.phase >= 0, dag.phase + phase0, -1).astype(np.int32),
        "edge_src": src + node0,
        "edge_dst": dag.indices.astype(np.int64) + node0,
    }


def _renamed(phases, prefix: str) -> list[Phase]:
    return [
        replace(p, name=f"{prefix}{p.name}", group=p.group and f"{prefix}{p.group}") for p in phases
    ]


def compose(n_pods: int, parts: list[tuple[TaskDAG, int, str]], chain: bool) -> TaskDAG:
    """One DAG of ``parts`` = ``(dag, pod offset, phase-name prefix)``; ``chain``: every leaf
    of the earlier parts precedes every root of the last part (else side by side)."""
    cols, phases, node0, phase0 = [], [], 0, 0
    for dag, pod0, prefix in parts:
        cols.append(_arrays(dag, node0, pod0, phase0))
        phases += _renamed(dag.phases, prefix)
        node0, phase0 = node0 + dag.n_nodes, phase0 + len(dag.phases)
    joined = {key: np.concatenate([c[key] for c in cols]) for key in cols[0]}
    if chain and len(parts) > 1:
        last = parts[-1][0]
        first = node0 - last.n_nodes
        out_deg = np.bincount(joined["edge_src"], minlength=node0)
        in_deg = np.bincount(joined["edge_dst"], minlength=node0)
        leaves = np.flatnonzero(out_deg[:first] == 0)
        roots = first + np.flatnonzero(in_deg[first:] == 0)
        joined["edge_src"] = np.r_[joined["edge_src"], np.repeat(leaves, roots.size)]
        joined["edge_dst"] = np.r_[joined["edge_dst"], np.tile(roots, leaves.size)]
    return from_arrays(n_pods, **joined, phases=tuple(phases))


def sync_dags(config: SyncOverOcsConfig, seed: int) -> tuple[TaskDAG, TaskDAG, TaskDAG]:
    """``(islands, sync, combined)`` on all ``M·k`` pods (module doc): the islands' iteration
    side by side, the sync alone, and the sync after the iteration."""
    m, k = config.fleet.islands, config.island_pods
    n = m * k
    island = build_dag(get_preset(config.workload, pods=k), seed)
    parts = [(island, i * k, f"island {i}: ") for i in range(m)]
    ring = sync_dag(n, m, k, config.shard_bytes(), config.latency_us * 1e-6, config.outer_step_s)
    return (
        compose(n, parts, chain=False),
        ring,
        compose(n, [*parts, (ring, 0, "")], chain=True),
    )


def wiring(name: str, combined: TaskDAG, model: OcsModel, config, seed: int) -> np.ndarray:
    """The integer wiring [pairs] called ``name`` (module doc) for the combined DAG."""
    if name == "uniform":
        return baselines.uniform_mesh(model)
    if name == "near_uniform":
        return baselines.best_near_uniform(PathCost(combined, model), model, seed=seed)
    if name == "demand":
        return baselines.demand_proportional(combined, model)
    if name == "traffic_only":
        return plan_traffic_only(combined, model, config.b2_rel, config.b1_rel, seed)
    return plan(combined, model, config.b1_rel, config.b2_rel, seed).x


def wiring_figures(config: SyncOverOcsConfig, seed: int) -> pd.DataFrame:
    """Per wiring: its critical paths (s) on the combined DAG, the islands' iteration and
    the sync alone, the circuits on the sync's ring pairs, the planner's wall time."""
    islands, ring, combined = sync_dags(config, seed)
    model = config.model()
    costs = {
        name: PathCost(dag, model)
        for name, dag in (("combined", combined), ("iteration", islands), ("sync", ring))
    }
    ring_pairs = np.unique(PathCost(ring, model).comm_pair)
    rows = []
    for name in config.wirings:
        t0 = time.perf_counter()
        x = wiring(name, combined, model, config, seed)
        plan_s = time.perf_counter() - t0
        model.check_wiring(x)
        rows.append(
            {
                "wiring": name,
                "critical_path_s": costs["combined"].hard(x),
                "iteration_s": costs["iteration"].hard(x),
                "sync_s": costs["sync"].hard(x),
                "sync_circuits": int(x[ring_pairs].sum()),
                "circuits": int(x.sum()),
                "plan_s": plan_s,
            }
        )
    return pd.DataFrame(rows)


@register(
    "sync-over-ocs",
    SyncOverOcsConfig,
    keys=("wiring", "policy"),
    quick={"island_pods": 2, "fleet": {"windows": 600, "fleet_seeds": 3}},
)
def sync_over_ocs(config: SyncOverOcsConfig, seed: int) -> pd.DataFrame:
    """DiLoCo outer sync sharing an OCS wiring with the islands' own traffic: sync seconds per
    wiring fed into the fleet simulator; SLO and loss per wiring and policy."""
    figures = wiring_figures(config, seed)
    diloco = SyncModel(
        params=config.fleet.params,
        islands=config.fleet.islands,
        bytes_per_param=config.bytes_per_param,
    ).duration_s()
    runs = []
    for row in figures.itertuples(index=False):
        progress = (
            ProgressModel(steps_per_s=1.0 / row.iteration_s)
            if config.iteration_from_wiring
            else None
        )
        runs.append(fleet_runs(config.fleet, row.sync_s, seed, progress).assign(wiring=row.wiring))
    runs = pd.concat(runs, ignore_index=True)
    table = summarise(runs, by=("wiring", "policy")).rename(columns={"sync_s": "fleet_sync_s"})
    table = table.merge(figures, on="wiring")
    table = table.join(paired_vs(runs, config.wirings[0]), on=["wiring", "policy"])
    table["reference"] = config.wirings[0]
    table["sync_s_diloco_model"] = diloco
    table["provenance"] = PROVENANCE
    return table


def paired_vs(runs: pd.DataFrame, reference: str, by: str = "wiring") -> pd.DataFrame:
    """Per (``by``, policy): mean over fleet seeds of the paired difference against the
    ``reference`` value of ``by`` on the same policy and fleet seed, and its standard error
    (``sd/sqrt(n)``, ddof 1; 0 for one seed)."""
    cols = ["slo_violation_rate", "loss_equal_wallclock", "loss_equal_tokens"]
    index = ["policy", "fleet_seed"]
    base = runs[runs[by] == reference].set_index(index)[cols]
    out = {}
    for (key, policy), rows in runs.groupby([by, "policy"], sort=False):
        diff = rows.set_index(index)[cols] - base.reindex(rows.set_index(index).index)
        n = len(diff)
        se = diff.std(ddof=1) / np.sqrt(n) if n > 1 else diff.mean() * 0.0
        out[(key, policy)] = {
            **{f"{c}_vs_ref": diff[c].mean() for c in cols},
            **{f"{c}_vs_ref_se": se[c] for c in cols},
        }
    return pd.DataFrame.from_dict(out, orient="index").rename_axis([by, "policy"])
