"""Traffic drift of a task DAG: the same job with its inter-pod bytes perturbed by a set l1 share.

The pod traffic matrix of a DAG is ``T_uv = Σ_{comm m: u→v} bytes_m`` over ordered pod pairs.
:func:`drift_traffic` returns the DAG with every comm node's bytes multiplied by a factor of its
pod pair, ``f_uv = f_vu = 1 + δ s_uv`` with independent signs ``s_uv = s_vu = ±1`` per unordered
pair (seeded), so that

    T'_uv = f_uv T_uv,       ||T' − T||_1 = Σ_uv |f_uv − 1| T_uv = δ · ||T||_1     (exactly),

for ``0 ≤ δ < 1`` (every factor stays positive, every transfer keeps its pods, phase and
latency; the DAG's structure is unchanged). "A 10% l1 drift" is ``δ = 0.1``. Both directions
of a pair are scaled alike (a circuit is duplex), so bundles that the path cost merged as
identical — same multiset of (unordered pair, bytes, latency) — stay identical.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from trainfabric.errors import ConfigError
from trainfabric.workloads.dag import COMM, TaskDAG


def traffic_matrix(dag: TaskDAG) -> np.ndarray:
    """``T`` [n_pods, n_pods]: bytes sent from pod ``u`` to pod ``v`` in one iteration."""
    comm = dag.kind == COMM
    t = np.zeros((dag.n_pods, dag.n_pods))
    np.add.at(t, (dag.pod[comm], dag.dst[comm]), dag.bytes[comm])
    return t


def drift_traffic(dag: TaskDAG, delta: float = 0.1, seed: int = 0) -> TaskDAG:
    """The DAG with pod-pair bytes scaled by ``1 ± delta`` (module doc); ``||T'−T||_1 =
    delta·||T||_1``. ConfigError (field ``delta``) unless ``0 ≤ delta < 1``."""
    delta = float(delta)
    if not 0.0 <= delta < 1.0:
        raise ConfigError("delta", f"must be in [0, 1), got {delta}")
    n = dag.n_pods
    signs = np.triu(np.random.default_rng(seed).choice([-1.0, 1.0], size=(n, n)), 1)
    signs = signs + signs.T
    comm = dag.kind == COMM
    factor = np.ones(dag.n_nodes)
    factor[comm] = 1.0 + delta * signs[dag.pod[comm], dag.dst[comm]]
    return dataclasses.replace(dag, bytes=dag.bytes * factor)
