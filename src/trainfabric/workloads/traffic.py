"""Phase traffic matrices: pods x pods bytes for each communication phase, stored sparsely.

A dense ``[phases, pods, pods]`` cube is ``O(phases · n^2)`` (a 1024-pod job with a few
hundred phases would need gigabytes), so phases are kept as COO flows in CSR-over-phases
layout (``offsets``); :meth:`PhaseTraffic.matrix` densifies one phase on demand.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainfabric.workloads.dag import DagBuilder, Phase, TaskDAG


@dataclass(frozen=True, eq=False)
class PhaseTraffic:
    """Directed pod-pair bytes per phase: phase ``k`` holds flows ``offsets[k]:offsets[k+1]``."""

    n_pods: int
    phases: tuple[Phase, ...]
    offsets: np.ndarray  # int64 [K+1]
    src: np.ndarray  # int32 [F]
    dst: np.ndarray  # int32 [F]
    bytes: np.ndarray  # float64 [F]

    def __len__(self) -> int:
        return len(self.phases)

    def flows(self, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        sl = slice(self.offsets[k], self.offsets[k + 1])
        return self.src[sl], self.dst[sl], self.bytes[sl]

    def matrix(self, k: int) -> np.ndarray:
        """Dense ``[n, n]`` bytes of phase ``k`` (row = source pod)."""
        m = np.zeros((self.n_pods, self.n_pods))
        s, d, b = self.flows(k)
        np.add.at(m, (s, d), b)
        return m

    def total(self) -> np.ndarray:
        """Dense ``[n, n]`` bytes summed over all phases (the aggregated traffic matrix)."""
        m = np.zeros((self.n_pods, self.n_pods))
        np.add.at(m, (self.src, self.dst), self.bytes)
        return m

    def phase_bytes(self) -> np.ndarray:
        """Bytes per phase; a phase with no flows (only intra-pod traffic) has 0 (not the
        next phase's first flow, which ``np.add.reduceat`` would give it)."""
        phase = np.repeat(np.arange(len(self)), np.diff(self.offsets))
        return np.bincount(phase, weights=self.bytes, minlength=len(self)).astype(float)


def traffic_from_dag(dag: TaskDAG) -> PhaseTraffic:
    """Group a DAG's comm nodes by phase (the phases' order is the DAG's phase order)."""
    groups = dag.phase_nodes()
    nodes = np.concatenate(groups) if groups else np.zeros(0, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum([g.size for g in groups])]).astype(np.int64)
    return PhaseTraffic(
        dag.n_pods, dag.phases, offsets, dag.pod[nodes], dag.dst[nodes], dag.bytes[nodes]
    )


def dag_from_traffic(traffic: PhaseTraffic, latency_s: float = 5e-6) -> TaskDAG:
    """A DAG running the phases one after another (each phase lasts as its slowest pair)."""
    b = DagBuilder(traffic.n_pods)
    last: list[int] = []
    for k, ph in enumerate(traffic.phases):
        s, d, nb = traffic.flows(k)
        _, exit_ = b.phase(ph.kind, ph.name, s, d, nb, latency_s, ph.intra_pod_bytes, preds=last)
        last = [exit_]
    return b.build()
