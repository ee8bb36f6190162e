"""Several jobs on one wiring: weighted power-mean fairness (spec §1.12, issue 13 item 4, E9).

**Jobs.** Job ``j`` is a task DAG on its own ``k_j`` pods, placed on ``k_j`` of the model's ``n``
pods (:func:`place_jobs`: a seeded random subset in random order; a job on all ``n`` pods is
a random relabelling, job 0 keeps the identity), so jobs share pods (and their ports) and,
where both have traffic on a pod pair, that pair's circuits. A pod shared by several jobs
hosts one TP group of each; its ``d_v`` ports serve all of them.

**Sharing a pair [A12].** Jobs are not synchronised, so the only interval in which all jobs'
traffic on a pair is concurrent is the iteration: the phase of [A12] is read as the jobs'
overlapping iterations. The rate ``B·x_e + B0`` of pair ``e`` in direction ``u → v`` is split
between the jobs in proportion to their bytes in that direction per iteration::

    s_{j,u→v} = b_{j,u→v} / Σ_i b_{i,u→v},     rate_j = s_{j,u→v} · (B x_e + B0),

so a transfer ``m`` of job ``j`` lasts ``a_m + 8 b_m / (s_{j,e(m)} (B x_e + B0))`` — the
PathCost duration of a transfer of ``b_m / s_{j,e(m)}`` bytes. Job ``j``'s cost is therefore
the single-job :class:`~trainfabric.ocs.cost.PathCost` of its DAG with every transfer's bytes
divided by its share (:func:`shared_dags`); a pair used by one job only keeps ``s = 1``. The
shares are per-iteration byte counts, fixed (not re-computed from the iteration times, which
would make ``U_j`` non-convex), so every ``U_j`` stays convex in ``x``.

**Objective.** With per-job values ``v_j = c_j·U_j(x)`` (``c_j = 1``: seconds; ``normalise``:
``c_j = 1 / CP_j(uniform mesh)``, the slowdown against the fractional uniform mesh) and
weights ``ω_j > 0`` (``ω̄ = ω / Σω``)::

    Φ_p(v) = (Σ_j ω̄_j v_j^p)^(1/p),   p ≥ 1,      ∂Φ_p/∂v_j = ω̄_j (v_j / Φ_p)^(p−1),

so ``∇_x Φ_p = Σ_j ω̄_j (v_j/Φ_p)^(p−1) c_j ∇U_j``, a non-negative combination of the per-job
marginal-weighted gradients (its coefficients ``ω̄_j (v_j/Φ)^(p−1)·(v_j/Φ)`` sum to 1).
``p = ∞`` (minimise the slowest job): the smoothed max ``Φ_∞ = (1/τ) log Σ_j exp(τ v_j)``,
``max_j v_j ≤ Φ_∞ ≤ max_j v_j + log J / τ``, weights play no role (``Φ_p → max_j v_j`` for any
``ω > 0``). Its temperature is ``τ = tau_rel · b2 / c̄`` (``c̄`` the mean ``c_j``), 1/s; with
``tau_rel = 1`` and raw seconds ``Φ_∞`` is exactly the smoothed critical path at ``b2`` of all
jobs' DAGs side by side (LSE over the union of their paths). ``Φ_p`` is a weighted norm,
convex and non-decreasing in every ``v_j`` for ``p ≥ 1``, so ``Φ_p∘U`` is convex and
:func:`~trainfabric.ocs.solver.solve` (mirror descent) applies unchanged.

**α-fairness** (:func:`alpha_fair_check`): throughputs ``y_j = 1/v_j``, the α-fair utility
``Σ_j ω_j y_j^(1−α)/(1−α) = −Σ_j ω_j v_j^(α−1)/(α−1)``; maximising it minimises ``Φ_{α−1}^(α−1)``,
a strictly increasing function of ``Φ_{α−1}``, so the two *unregularised* problems have the
same minimisers. The solver's regularised problem ``Φ + KL(w||q)/b1`` is not invariant under a
monotone transform, so the check compares the unregularised optima (at the same ``b2``), each
found from its own objective — ``Φ_p`` by :func:`power_mean_optimum`, the utility, written
from the per-job throughputs, by :func:`alpha_fair_optimum` — by SLSQP and then Newton on
that objective's own KKT conditions (:func:`kkt_polish`: SLSQP stops on changes of the
objective, which leaves flat directions undetermined to ~1e-4), over the pairs that carry
traffic (the others enter neither objective). Were ``p ≠ α − 1`` the two KKT points would
differ (a test shows they do). On those pairs ``Φ_p∘U`` is strictly convex in exact arithmetic
(every transfer's duration is strictly convex in its pair's circuits and has Gibbs mass
``> 0``), but a transfer far off every near-critical path has a mass that underflows
(measured: gradients of 1e-42 beside 1e-1); such pairs are counted and left out of the
wiring comparison (:func:`alpha_fair_check`).

**Caveat of [A12].** A job sharing a pair with a much heavier one gets a share as small as its
bytes: a pipeline's activations beside a DP ring's gradients (a few GB against ~1 TB per
iteration on the presets) get shares down to 0.06% of the pair's rate (measured on
``ocs-e9``'s ``J = 8`` instance of seed 0, where one job's slowdown stays high on every
wiring tried: 5.96 or more). Max-min sharing, the alternative of the
assumption register, would favour the light job; it is not implemented here.

**Trade-off along p.** For the unregularised fractional optimum with ``J = 2`` the largest
value is non-increasing in ``p`` (a theorem; :func:`trade_off` only *reports* it for rounded
wirings, and for ``J > 2`` it is measured, not claimed). Proof: the attainable set
``{v ≥ v(x)}`` is convex (``v`` convex), so its Pareto front is ``v_2 = f(v_1)`` with ``f``
convex and decreasing, and ``Φ_p`` is minimised on it. Let ``g_p(u) = ω_1 u^p + ω_2 f(u)^p``
(convex) with minimiser ``u_p`` and ``b`` the balanced point ``b = f(b)``. Say ``u_p > b`` (job
1 is the slowest). Stationarity ``ω_1 u_p^(p−1) = −ω_2 f(u_p)^(p−1) f'(u_p)`` gives, for
``q > p``, ``g_q'(u_p)/q = ω_1 u_p^(p−1) (u_p^(q−p) − f(u_p)^(q−p)) > 0``, so ``u_q ≤ u_p``;
and ``g_p'(b) ≤ 0`` (as ``b < u_p``) has the sign of ``ω_1 + ω_2 f'(b)``, which is that of
``g_q'(b)`` too, so ``u_q ≥ b``: the max moves from ``u_p`` down to ``u_q ∈ [b, u_p]``. The
case ``u_p < b`` is symmetric (subgradients at a kink of ``f``). The regularised optimum
(``KL/b1``) and integer wirings need not follow it.

**Rounding** (:func:`round_fair`): :func:`~trainfabric.ocs.rounding.round_wiring` searches the
hard critical path of *one* PathCost, so it cannot take ``Φ_p``. Here: starts from
``round_to_degrees`` of the fractional optimum (by fractional parts and by the smoothed
gradient), from ``round_wiring`` on all jobs' shared DAGs side by side (the hard max over
jobs), then a first-improvement local search on the hard ``Φ_p`` of the per-job hard
critical paths: moves add one circuit on a pair ranked by the smoothed gradient, taking the
ports from dark ports or from the donor circuits at both ends with the smallest gradient
loss and joining the two freed ends. Budget in evaluations (one = the hard critical paths
of the jobs a move touches), never in seconds. The best near-uniform and the
demand-proportional wirings compete too, so the result is never worse than either.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp

from trainfabric.errors import ConfigError
from trainfabric.ocs import baselines, rounding, solver
from trainfabric.ocs.cost import PathCost
from trainfabric.ocs.families import combine
from trainfabric.ocs.model import OcsModel
from trainfabric.ocs.prior import uniform_prior
from trainfabric.workloads import load_workload
from trainfabric.workloads.dag import TaskDAG, from_arrays
from trainfabric.workloads.workload import is_file_spec

# -- jobs ------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class FairJob:
    """One job: ``dag`` on the model's pods (already placed), the model ``pods`` it runs on,
    and its weight ``ω > 0``."""

    name: str
    dag: TaskDAG
    pods: np.ndarray
    weight: float = 1.0


def embed(dag: TaskDAG, pods, n: int) -> TaskDAG:
    """``dag`` (on ``k`` pods) on ``n ≥ k`` pods, its pod ``i`` renamed ``pods[i]`` (distinct)."""
    pods = np.asarray(pods, dtype=np.int64)
    if pods.size != dag.n_pods or np.unique(pods).size != pods.size:
        raise ConfigError("pods", f"a {dag.n_pods}-pod job needs {dag.n_pods} distinct pods")
    if pods.min() < 0 or pods.max() >= n:
        raise ConfigError("pods", f"job pods must lie in 0..{n - 1}")
    pod = np.where(dag.pod >= 0, pods[np.maximum(dag.pod, 0)], -1).astype(np.int32)
    dst = np.where(dag.dst >= 0, pods[np.maximum(dag.dst, 0)], -1).astype(np.int32)
    edges = dag.edges.astype(np.int64)
    return from_arrays(
        n,
        kind=dag.kind,
        pod=pod,
        dst=dst,
        duration_s=dag.duration_s,
        nbytes=dag.bytes,
        latency_s=dag.latency_s,
        phase=dag.phase,
        edge_src=edges[:, 0],
        edge_dst=edges[:, 1],
        phases=dag.phases,
        names=dag.names,
    )


def place_jobs(
    workloads: list[str],
    n: int,
    job_pods: list[int] | None = None,
    weights: list[float] | None = None,
    seed: int = 0,
) -> list[FairJob]:
    """Jobs from workload specs (presets or files, :func:`~trainfabric.workloads.load_workload`)
    on ``n`` pods: job ``j`` is re-mapped onto ``job_pods[j]`` pods (default ``n``; a JSON file
    keeps its own pod count, and a different ``job_pods[j]`` is an error) and placed on a
    random subset of that size in random order (job 0 on all ``n`` pods keeps the identity).
    One ``default_rng(seed)`` draws every placement; the preset's own randomness (MoE skew)
    uses ``seed + j``.

    ConfigError naming ``jobs`` (none given), ``weights`` (count or a value ≤ 0),
    ``job_pods`` (count, a size outside ``2..n``, or not a JSON file's) or ``pods`` (a JSON
    file with more pods than ``n``).
    """
    if not workloads:
        raise ConfigError("jobs", "give at least one job")
    j = len(workloads)
    weights = [1.0] * j if weights is None else [float(w) for w in weights]
    if len(weights) != j or not all(w > 0 and math.isfinite(w) for w in weights):
        raise ConfigError("weights", f"need {j} finite weights > 0, got {weights}")
    if job_pods is not None and len(job_pods) != j:
        raise ConfigError("job_pods", f"need one pod count per job ({j}), got {len(job_pods)}")
    rng = np.random.default_rng(seed)
    jobs = []
    for i, spec in enumerate(workloads):
        k = n if job_pods is None else int(job_pods[i])
        if not 2 <= k <= n:
            raise ConfigError("job_pods", f"job {i} ({spec}): {k} pods, need 2..{n}")
        fixed = is_file_spec(spec) and spec.endswith(".json")  # a DAG file keeps its pods
        w = load_workload(spec, None if fixed else k, seed + i)
        if fixed and job_pods is not None and w.dag.n_pods != k:
            raise ConfigError("job_pods", f"job {i} ({spec}) is a {w.dag.n_pods}-pod file")
        k = w.dag.n_pods
        if k > n:
            raise ConfigError("pods", f"job {i} ({spec}) needs {k} pods, only {n} given")
        pods = np.arange(n) if (i == 0 and k == n) else rng.permutation(n)[:k]
        jobs.append(FairJob(w.name, embed(w.dag, pods, n), np.sort(pods), weights[i]))
    return jobs


def byte_shares(dags: list[TaskDAG], model: OcsModel) -> list[np.ndarray]:
    """Per job, the share ``s ∈ (0, 1]`` of every comm node (in ``dag.comm_nodes`` order) in
    its pair's directed rate: its job's bytes in that direction over all jobs' (module doc)."""
    n = model.n
    per_job = []
    for dag in dags:
        c = dag.comm_nodes
        key = dag.pod[c].astype(np.int64) * n + dag.dst[c]
        per_job.append((key, np.bincount(key, dag.bytes[c], n * n)))
    total = sum(b for _, b in per_job)
    return [
        np.divide(b[key], total[key], out=np.ones(key.size), where=total[key] > 0)
        for key, b in per_job
    ]


def shared_dags(dags: list[TaskDAG], model: OcsModel) -> list[TaskDAG]:
    """Each job's DAG with every transfer's bytes divided by its byte share (module doc), so
    that its PathCost is the job's cost on the shared wiring."""
    out = []
    for dag, share in zip(dags, byte_shares(dags, model), strict=True):
        nbytes = dag.bytes.astype(float).copy()
        nbytes[dag.comm_nodes] /= share
        out.append(
            TaskDAG(
                dag.n_pods,
                dag.kind,
                dag.pod,
                dag.dst,
                dag.duration_s,
                nbytes,
                dag.latency_s,
                dag.phase,
                dag.indptr,
                dag.indices,
                dag.phases,
                dag.names,
            )
        )
    return out


def side_by_side(dags: list[TaskDAG]) -> TaskDAG:
    """All DAGs in one, with no edge between them (critical path = the slowest job's)."""
    out = dags[0]
    for i, dag in enumerate(dags[1:], start=1):
        out = combine(out, dag, series=False, tags=("" if i > 1 else "j0:", f"j{i}:"))
    return out


# -- power means ----------------------------------------------------------------------------


def check_p(p) -> float:
    """The power ``p`` as a float in ``[1, ∞]``; ConfigError naming ``p`` otherwise."""
    try:
        p = float(p)
    except (TypeError, ValueError):
        raise ConfigError("p", f"must be a number >= 1 or inf, got {p!r}") from None
    if not p >= 1:  # also rejects nan
        raise ConfigError("p", f"must be >= 1 or inf (alpha = p + 1 >= 2), got {p}")
    return p


def power_mean(v, weights, p: float) -> float:
    """``Φ_p(v) = (Σ ω̄_j v_j^p)^(1/p)`` for ``v > 0``; ``p = ∞``: ``max_j v_j`` (hard)."""
    return power_mean_grad(v, weights, p)[0]


def power_mean_grad(v, weights, p: float) -> tuple[float, np.ndarray]:
    """``(Φ_p(v), ∂Φ_p/∂v = ω̄ (v/Φ)^(p−1))``, computed as ``m (Σ ω̄ (v/m)^p)^(1/p)``,
    ``m = max v``, so large ``p`` neither overflows nor underflows. ``p = ∞``: the hard max
    and the indicator of the (first) largest entry."""
    v = np.asarray(v, dtype=float)
    wbar = np.asarray(weights, dtype=float) / float(np.sum(weights))
    m = float(v.max())
    if math.isinf(p):
        g = np.zeros(v.size)
        g[int(np.argmax(v))] = 1.0
        return m, g
    r = v / m
    phi = m * float(wbar @ r**p) ** (1.0 / p)
    return phi, wbar * (v / phi) ** (p - 1.0)


def smooth_max(v, tau: float) -> tuple[float, np.ndarray]:
    """``((1/τ) log Σ exp(τ v), softmax(τ v))``: within ``log J / τ`` above ``max v``."""
    z = tau * np.asarray(v, dtype=float)
    top = float(z.max())
    e = np.exp(z - top)
    total = float(e.sum())
    return (top + math.log(total)) / tau, e / total


def jain(values) -> float:
    """Jain's index ``(Σ y)² / (J Σ y²)`` of the throughputs ``y_j = 1 / v_j`` (1 = equal)."""
    y = 1.0 / np.asarray(values, dtype=float)
    return float(y.sum() ** 2 / (y.size * (y * y).sum()))


# -- the multi-job cost ---------------------------------------------------------------------


class FairnessCost:
    """``Φ_p`` of the jobs' smoothed critical paths on one wiring (module doc).

    Implements what :func:`~trainfabric.ocs.solver.solve`, :func:`.cost.temperatures` and the
    baselines need: ``value_and_grad(x, b2)``, ``hard(x)`` (``Φ_p`` of the per-job hard
    critical paths; ``p = ∞``: their max), ``log_paths()`` (``log Σ_j |Π_j|``, the paths of all
    jobs side by side), ``dag`` (all jobs side by side, unshared bytes: the demand the
    baselines see). ``costs`` are the per-job PathCosts on the shared DAGs, ``scale`` the
    ``c_j``. Validated: ``p`` (:func:`check_p`), ``tau_rel > 0``, at least one job, every job on
    the model's pods.
    """

    def __init__(
        self,
        jobs: list[FairJob],
        model: OcsModel,
        p: float,
        normalise: bool = False,
        tau_rel: float = 1.0,
    ):
        if not jobs:
            raise ConfigError("jobs", "give at least one job")
        if not (tau_rel > 0 and math.isfinite(tau_rel)):
            raise ConfigError("tau_rel", f"must be finite and > 0, got {tau_rel}")
        self.jobs, self.model, self.p = jobs, model, check_p(p)
        self.weights = np.array([j.weight for j in jobs], dtype=float)
        self.dag = side_by_side([j.dag for j in jobs])
        self.costs = [PathCost(d, model) for d in shared_dags([j.dag for j in jobs], model)]
        mesh = model.total_circuits * uniform_prior(model)
        self.scale = (
            np.array([1.0 / c.hard(mesh) for c in self.costs]) if normalise else np.ones(len(jobs))
        )
        self.tau_rel = float(tau_rel)
        self.used = np.zeros((len(jobs), model.n_pairs), dtype=bool)
        for i, c in enumerate(self.costs):
            self.used[i, c.comm_pair] = True

    def with_p(self, p: float) -> FairnessCost:
        """The same jobs and costs under another power ``p`` (nothing rebuilt)."""
        other = object.__new__(FairnessCost)
        other.__dict__.update(self.__dict__)
        other.p = check_p(p)
        return other

    def job_values(self, x, b2: float) -> tuple[np.ndarray, np.ndarray]:
        """``(v [J], ∂v/∂x [J, P])``: per-job ``c_j U_j`` (smoothed at ``b2``) and gradients."""
        vals, grads = zip(*(c.value_and_grad(x, b2) for c in self.costs), strict=True)
        return self.scale * np.array(vals), self.scale[:, None] * np.array(grads)

    def combine(self, v: np.ndarray, b2: float) -> tuple[float, np.ndarray]:
        """``(Φ, ∂Φ/∂v)`` of smoothed per-job values ``v``: the power mean, or at ``p = ∞``
        the smoothed max at ``τ = tau_rel·b2 / mean(c)``."""
        if math.isinf(self.p):
            return smooth_max(v, self.tau_rel * b2 / float(self.scale.mean()))
        return power_mean_grad(v, self.weights, self.p)

    def value_and_grad(self, x, b2: float) -> tuple[float, np.ndarray]:
        """``Φ(x)`` (objective units: s, or slowdown when normalised) and ``∇_x Φ`` [P]."""
        v, g = self.job_values(x, b2)
        phi, dphi = self.combine(v, b2)
        return phi, dphi @ g

    def smoothed(self, x, b2: float) -> float:
        return self.value_and_grad(x, b2)[0]

    def hard_jobs(self, x) -> np.ndarray:
        """Per-job hard critical paths (s) [J]."""
        return np.array([c.hard(x) for c in self.costs])

    def hard(self, x) -> float:
        """``Φ_p`` of the per-job hard values ``c_j·CP_j(x)`` (``p = ∞``: the max)."""
        return power_mean(self.scale * self.hard_jobs(x), self.weights, self.p)

    def log_paths(self) -> float:
        return float(logsumexp([c.log_paths() for c in self.costs]))


# -- rounding: local search on the hard power mean ------------------------------------------

DEFAULT_EVALS = 3000  # move evaluations per start (work units: each = the jobs a move touches)
_TARGETS = 24  # pairs tried as targets per sweep (by smoothed gradient)
_DONORS = 3  # donor circuits tried at each end of a target


def _key(cost: FairnessCost, v: np.ndarray) -> tuple[float, float]:
    """Hard objective of per-job values ``v`` for comparing wirings: ``(Φ_p, weighted mean)``
    (the mean breaks ties of the max at ``p = ∞``)."""
    w = cost.weights
    return power_mean(v, w, cost.p), float(w @ v / w.sum())


def _moves(cost: FairnessCost, x: np.ndarray, grad: np.ndarray, free: np.ndarray):
    """Candidate moves ``(remove pairs, add pairs)`` (module doc): targets by the smoothed
    gradient (most negative first), donors at each end by the least gradient loss."""
    model = cost.model
    iu, iv = model.pairs
    useful = np.flatnonzero(cost.used.any(axis=0) & (grad < 0))
    targets = useful[np.argsort(grad[useful], kind="stable")][:_TARGETS]
    for e in targets:
        u, v = int(iu[e]), int(iv[e])
        ends = []
        for a, other in ((u, v), (v, u)):
            if free[a] > 0:
                ends.append([None])
                continue
            inc = np.flatnonzero(((iu == a) | (iv == a)) & (x > 0))
            inc = inc[(iu[inc] != other) & (iv[inc] != other)]
            ends.append(inc[np.argsort(-grad[inc], kind="stable")][:_DONORS].tolist())
        for da in ends[0]:
            for db in ends[1]:
                remove = [d for d in (da, db) if d is not None]
                add = [int(e)]
                if da is not None and db is not None:
                    a = int(iu[da] + iv[da] - u)
                    b = int(iu[db] + iv[db] - v)
                    if a != b:
                        add.append(int(model.pair_index(a, b)))
                yield remove, add


def _better(k: tuple[float, float], best: tuple[float, float]) -> bool:
    """``k`` beats ``best``: a lower ``Φ_p`` (beyond 1e-12 relative: float noise of the
    sweeps), or an equal one and a lower weighted mean."""
    if k[0] < best[0] * (1.0 - 1e-12):
        return True
    return k[0] <= best[0] and k[1] < best[1] * (1.0 - 1e-12)


def local_search(
    cost: FairnessCost, x, b2: float, max_evals: int = DEFAULT_EVALS
) -> tuple[np.ndarray, tuple[float, float], int]:
    """First-improvement search on the hard ``Φ_p`` from integer wiring ``x`` (module doc).

    Returns ``(x, key, evaluations)``; stops at a local optimum of the move set or after
    ``max_evals`` evaluations (each: the hard critical paths of the jobs whose pairs a move
    changes, so at most ``J`` PathCost sweeps)."""
    model = cost.model
    x = np.asarray(x, dtype=np.int64).copy()
    vals = cost.scale * cost.hard_jobs(x)
    best = _key(cost, vals)
    evals = 0
    improved = True
    while improved and evals < max_evals:
        improved = False
        grad = cost.value_and_grad(x, b2)[1]
        free = model.free_ports(x)
        for remove, add in _moves(cost, x, grad, free):
            if evals >= max_evals:
                break
            y = x.copy()
            np.subtract.at(y, remove, 1)
            np.add.at(y, add, 1)
            touched = cost.used[:, remove + add].any(axis=1)
            new = vals.copy()
            new[touched] = cost.scale[touched] * [
                c.hard(y) for c, t in zip(cost.costs, touched, strict=True) if t
            ]
            evals += 1
            k = _key(cost, new)
            if _better(k, best):
                x, vals, best, improved = y, new, k, True
                break
    return x, best, evals


@dataclass
class FairRound:
    """Outcome of :func:`round_fair`: the wiring ``x``, its ``key`` (hard ``Φ_p``, weighted
    mean), the start it came from (``source``) and the evaluations spent."""

    x: np.ndarray
    key: tuple[float, float]
    source: str
    evaluations: int


def round_fair(
    cost: FairnessCost,
    x_frac,
    b2: float,
    seed: int = 0,
    max_evals: int = DEFAULT_EVALS,
) -> FairRound:
    """Integer wiring (degrees ≤ d) minimising the hard ``Φ_p`` near ``x_frac`` (module doc):
    every start searched by :func:`local_search` (``max_evals`` each), the baselines kept as
    candidates; ties keep the earlier (searched) one."""
    model = cost.model
    x_frac = np.asarray(x_frac, dtype=float)
    grad = cost.value_and_grad(x_frac, b2)[1]
    joint = PathCost(side_by_side([c.dag for c in cost.costs]), model)
    starts = {
        "fractional-parts": rounding.round_to_degrees(model, x_frac),
        "gradient": rounding.round_to_degrees(model, x_frac, -grad),
        "slowest-job": rounding.round_wiring(joint, model, x_frac, b2=None, seed=seed).x,
    }
    results = []
    evals = 0
    for name, x0 in starts.items():
        x, key, ev = local_search(cost, x0, b2, max_evals)
        evals += ev
        results.append(FairRound(x, key, name, 0))
    for name, x in (
        ("near-uniform", baselines.best_near_uniform(cost, model, seed=seed)),
        ("demand-proportional", baselines.demand_proportional(cost.dag, model)),
    ):
        results.append(FairRound(x, _key(cost, cost.scale * cost.hard_jobs(x)), name, 0))
    best = min(results, key=lambda r: r.key)
    best.evaluations = evals
    return best


# -- the plan for one p, and the study over several -----------------------------------------


@dataclass
class FairPlan:
    """The wiring for one ``p`` and what it gives every job (times in s; ``values`` in
    objective units: s, or slowdown vs the uniform mesh when normalised).

    ``job_cp_s`` hard critical paths of the integer wiring, ``job_cp_frac_s`` of the
    fractional optimum ``x_frac``; ``phi`` hard ``Φ_p`` of the integer wiring; ``mean``
    (weighted), ``max`` and ``jain`` of its values; ``b1``, ``b2`` (1/s), solver
    ``iterations`` and ``converged``; ``source`` the start the rounding kept;
    ``evaluations`` of the search.
    """

    p: float
    x: np.ndarray
    x_frac: np.ndarray
    job_cp_s: np.ndarray
    job_cp_frac_s: np.ndarray
    values: np.ndarray
    phi: float
    mean: float
    max: float
    jain: float
    b1: float
    b2: float
    iterations: int
    converged: bool
    source: str
    evaluations: int


def temperatures_for(
    cost: FairnessCost, b1_rel: float = 1.0, b2_rel: float = 50.0
) -> tuple[float, float]:
    """``(b1, b2)`` from the dimensionless knobs, the same for every ``p`` (so the plans of a
    study differ only by ``p``), as :func:`.cost.temperatures` does for one job:
    ``b2 = b2_rel·max(log Σ_j |Π_j|, 1) / CP0`` (1/s) with ``CP0`` the weighted mean of the
    jobs' hard critical paths (s) on the fractional uniform mesh ``M q`` (so every job's
    smoothing excess ``U_j − CP_j ≤ CP0 / b2_rel``), and ``b1 = b1_rel / Φ0`` (per objective
    unit) with ``Φ0`` the weighted mean of the jobs' values there (= ``CP0`` in seconds, = 1
    when normalised). ConfigError naming ``b1_rel``/``b2_rel`` unless > 0."""
    for name, v in (("b1_rel", b1_rel), ("b2_rel", b2_rel)):
        if not (v > 0 and math.isfinite(v)):
            raise ConfigError(name, f"must be finite and > 0, got {v}")
    model, w = cost.model, cost.weights
    cp = cost.hard_jobs(model.total_circuits * uniform_prior(model))
    if not (cp > 0).all():
        raise ConfigError("jobs", "a job's critical path on the uniform mesh is zero")
    cp0 = float(w @ cp / w.sum())
    phi0 = float(w @ (cost.scale * cp) / w.sum())
    return b1_rel / phi0, b2_rel * max(cost.log_paths(), 1.0) / cp0


def fair_plan(
    cost: FairnessCost,
    b1: float,
    b2: float,
    seed: int = 0,
    max_iter: int = 1000,
    max_evals: int = DEFAULT_EVALS,
) -> FairPlan:
    """Solve (mirror descent on ``Φ_p + KL(w||q)/b1`` over ``W≤``, annealed in ``b2``), round
    (:func:`round_fair`) and score one ``p`` (``cost.p``)."""
    model = cost.model
    res = solver.solve(cost, model, b1, b2, anneal=True, max_iter=max_iter, inequality=True)
    r = round_fair(cost, res.x, b2, seed=seed, max_evals=max_evals)
    plan = FairPlan(
        p=cost.p,
        x=r.x,
        x_frac=res.x,
        job_cp_s=np.empty(0),
        job_cp_frac_s=cost.hard_jobs(res.x),
        values=np.empty(0),
        phi=math.nan,
        mean=math.nan,
        max=math.nan,
        jain=math.nan,
        b1=b1,
        b2=b2,
        iterations=res.iterations,
        converged=res.converged,
        source=r.source,
        evaluations=r.evaluations,
    )
    _score(plan, cost, r.x)
    return plan


def _score(plan: FairPlan, cost: FairnessCost, x: np.ndarray) -> None:
    """Set ``plan``'s integer wiring to ``x`` and its per-job figures accordingly."""
    cp = cost.hard_jobs(x)
    values = cost.scale * cp
    w = cost.weights
    plan.x, plan.job_cp_s, plan.values = x, cp, values
    plan.phi = power_mean(values, w, cost.p)
    plan.mean = float(w @ values / w.sum())
    plan.max = float(values.max())
    plan.jain = jain(values)


def share_wirings(cost: FairnessCost, plans: list[FairPlan], b2: float, max_evals: int) -> None:
    """Each plan of a study also tries the other plans' integer wirings: the best of them
    under its own hard ``Φ_p`` (ties: the mean), when strictly better than its own, is
    searched further (:func:`local_search`, ``max_evals``) and replaces it (``source``
    ``"plan p=q"``). So no plan is beaten on its own objective by a wiring the study found
    for another ``p`` (measured before this step: the ``p = ∞`` search once returned a max
    1.9x that of the ``p = 8`` wiring)."""
    wirings = [(pl.p, pl.x) for pl in plans]
    for pl in plans:
        c = cost.with_p(pl.p)
        keys = [_key(c, c.scale * c.hard_jobs(x)) for _, x in wirings]
        i = min(range(len(keys)), key=keys.__getitem__)
        if _better(keys[i], _key(c, pl.values)):
            x, _, ev = local_search(c, wirings[i][1], b2, max_evals)
            _score(pl, c, x)
            pl.source = f"plan p={_p_label(wirings[i][0])}"
            pl.evaluations += ev


def trade_off(plans: list[FairPlan]) -> dict:
    """Along increasing ``p``: counts of steps where the weighted mean *decreases* or the max
    *increases* (the expected trade-off is mean ↑, max ↓; rounded wirings need not follow it
    exactly), and the relative size of the largest such violation."""
    ordered = sorted(plans, key=lambda pl: pl.p)
    mean = np.array([pl.mean for pl in ordered])
    top = np.array([pl.max for pl in ordered])
    d_mean = np.diff(mean) / mean[:-1]
    d_max = np.diff(top) / top[:-1]
    return {
        "mean_decreases": int((d_mean < -1e-9).sum()),
        "max_increases": int((d_max > 1e-9).sum()),
        "worst_mean_decrease": float(max(0.0, -d_mean.min(initial=0.0))),
        "worst_max_increase": float(max(0.0, d_max.max(initial=0.0))),
    }


# -- α-fair equivalence ----------------------------------------------------------------------


def _polytope(cost: FairnessCost):
    """The variables of the unregularised problems: the pairs with traffic (``idx``), their
    pod incidence ``A`` (``A x ≤ d``), and a strictly feasible start (ports spread evenly
    over each pod's used pairs, scaled to half the tightest pod's budget)."""
    model = cost.model
    idx = np.flatnonzero(cost.used.any(axis=0))
    iu, iv = model.pairs
    a = np.zeros((model.n, idx.size))
    a[iu[idx], np.arange(idx.size)] = 1.0
    a[iv[idx], np.arange(idx.size)] = 1.0
    load = a.sum(axis=1)
    x0 = np.full(idx.size, 0.5 * float(np.min(model.degrees / np.maximum(load, 1))))
    return idx, a, x0


def _full(cost: FairnessCost, idx: np.ndarray, z: np.ndarray) -> np.ndarray:
    x = np.zeros(cost.model.n_pairs)
    x[idx] = np.maximum(z, 0.0)
    return x


def power_mean_optimum(cost: FairnessCost, b2: float, x0=None) -> tuple[np.ndarray, dict]:
    """Unregularised ``argmin Φ_p(x)`` (finite ``p``; ``p = ∞``: ``min t s.t. v_j ≤ t``, the
    exact minimax of the smoothed job values) over ``{x ≥ 0: A x ≤ d}`` on the pairs with
    traffic, by SLSQP (``ftol`` 1e-15), then (finite ``p``) :func:`kkt_polish`. Returns the
    full pair vector [P] and the polish's ``info`` (``p = ∞``: SLSQP's ``converged``)."""
    from scipy.optimize import minimize

    idx, a, start = _polytope(cost)
    z0 = start if x0 is None else np.asarray(x0, dtype=float)[idx]
    d = cost.model.degrees.astype(float)
    ports = {"type": "ineq", "fun": lambda z: d - a @ z[: idx.size]}
    if math.isinf(cost.p):
        v0 = cost.job_values(_full(cost, idx, z0), b2)[0]
        ref = float(v0.max())

        def jobs_below(z):
            return (z[-1] - cost.job_values(_full(cost, idx, z[:-1]), b2)[0]) / ref

        def jobs_jac(z):
            g = cost.job_values(_full(cost, idx, z[:-1]), b2)[1][:, idx]
            return np.hstack([-g, np.ones((g.shape[0], 1))]) / ref

        res = minimize(
            lambda z: (z[-1] / ref, np.r_[np.zeros(idx.size), 1.0 / ref]),
            np.r_[z0, 1.01 * ref],
            jac=True,
            method="SLSQP",
            bounds=[(0, None)] * idx.size + [(None, None)],
            constraints=[
                {**ports, "jac": lambda z: -np.hstack([a, np.zeros((a.shape[0], 1))])},
                {"type": "ineq", "fun": jobs_below, "jac": jobs_jac},
            ],
            options={"ftol": 1e-15, "maxiter": 2000},
        )
        return _full(cost, idx, res.x[:-1]), {"converged": bool(res.success)}
    ref = cost.value_and_grad(_full(cost, idx, z0), b2)[0]

    def f(z):
        phi, g = cost.value_and_grad(_full(cost, idx, z), b2)
        return phi / ref, g[idx] / ref

    res = minimize(
        f,
        z0,
        jac=True,
        method="SLSQP",
        bounds=[(0, None)] * idx.size,
        constraints=[{**ports, "jac": lambda z: -a}],
        options={"ftol": 1e-15, "maxiter": 2000},
    )
    z, info = kkt_polish(lambda z: f(z)[1], res.x, a, d)
    return _full(cost, idx, z), info


_ACTIVE_TOL = 1e-5  # a bound or port budget within this share of the largest x starts active
_ACTIVE_ROUNDS = 6


def _fd_hessian(grad, z: np.ndarray) -> np.ndarray:
    """Central differences of the analytic gradient, step ``h_j = 1e-5·max(z_j, 1e-3)``,
    symmetrised."""
    h = 1e-5 * np.maximum(z, 1e-3)
    cols = []
    for j in range(z.size):
        e = np.zeros(z.size)
        e[j] = h[j]
        cols.append((grad(z + e) - grad(z - e)) / (2 * h[j]))
    hess = np.array(cols).T
    return 0.5 * (hess + hess.T)


def _newton_kkt(grad, z, a, d, free, full, iters):
    """Damped Newton on ``∇f + Cᵀμ = 0``, ``C z = d_full``, ``z_e = 0`` off ``free``: each
    step is halved until the residual ``max |∇f + Cᵀμ| + max |C z − d|`` (``μ`` the
    least-squares multipliers) decreases; stops when a full step is below 1e-14·max z or no
    step decreases it. Returns ``(z, μ, iterations)``."""
    z = np.where(free, z, 0.0)
    c = a[full][:, free]
    m = c.shape[0]
    scale = max(float(z.max()), 1.0)

    def g_free(zf):
        y = z.copy()
        y[free] = zf
        return grad(y)[free]

    def residual(zf):
        g = g_free(zf)
        mu = np.linalg.lstsq(c.T, -g, rcond=None)[0] if m else np.zeros(0)
        return np.abs(g + c.T @ mu).max(initial=0.0) + np.abs(c @ zf - d[full]).max(initial=0.0)

    it = 0
    for it in range(1, iters + 1):  # noqa: B007 (reported)
        zf = z[free]
        g = g_free(zf)
        kkt = np.block([[_fd_hessian(g_free, zf), c.T], [c, np.zeros((m, m))]])
        step = np.linalg.lstsq(kkt, np.r_[-g, d[full] - c @ zf], rcond=None)[0][: zf.size]
        if np.abs(step).max() <= 1e-14 * scale:
            break
        r0 = residual(zf)
        for t in 0.5 ** np.arange(30):
            if residual(zf + t * step) < r0:
                z[free] = zf + t * step
                break
        else:
            break
    g = grad(z)
    mu = np.linalg.lstsq(c.T, -g[free], rcond=None)[0] if m else np.zeros(0)
    return z, mu, it


def kkt_polish(grad, z, a: np.ndarray, d: np.ndarray, iters: int = 12) -> tuple[np.ndarray, dict]:
    """Newton on the KKT system of ``min f(z)`` s.t. ``z ≥ 0``, ``a z ≤ d`` from a solver's
    point ``z``, with an active set: first ``z_e ≤ 1e-5·max z`` held at 0 and pods with
    ``a z ≥ d − 1e-5·max z`` held at ``d``; a constraint the Newton point violates joins the
    set and one whose multiplier is negative leaves it (at most 6 rounds).

    A general solver stops on small changes of ``f`` (or, interior methods, strictly inside
    the constraints); along a direction where ``f`` is flat (curvature ``λ``) that leaves
    ``z`` undetermined by ``~sqrt(eps·f/λ)``, whereas Newton on the stationarity conditions
    ``∇f + Cᵀμ = 0`` is accurate to ``~eps·|∇f|/λ``. The Hessian is central differences of
    the analytic gradient ``grad`` (:func:`_fd_hessian`) on the free coordinates. Returns
    ``(z, info)``, ``info``: ``iterations`` (Newton steps, all rounds), ``stationarity``
    (``max |∇f + Cᵀμ|`` on the free coordinates over ``max |∇f|``), ``kkt`` (a KKT point:
    feasible and every active multiplier ≥ −1e-9·max|∇f|); when no round reaches a KKT
    point the solver's own ``z`` is returned unchanged (with ``kkt`` False)."""
    z0 = np.asarray(z, dtype=float)
    scale = max(float(z0.max()), 1.0)
    free = z0 > _ACTIVE_TOL * scale
    full = a @ z0 >= d - _ACTIVE_TOL * scale
    steps = 0
    for _ in range(_ACTIVE_ROUNDS):
        z, mu, it = _newton_kkt(grad, z0, a, d, free, full, iters)
        steps += it
        g = grad(z)
        gmax = float(np.abs(g).max())
        resid = (g + a[full].T @ mu)[free]
        nu = (g + a[full].T @ mu)[~free]  # multipliers of z_e >= 0 at the held pairs
        over = (a @ z > d + 1e-9 * scale) & ~full
        neg = (z < 0) & free
        drop_pod = np.zeros_like(full)
        drop_pod[np.flatnonzero(full)[mu < -1e-9 * gmax]] = True
        drop_zero = np.zeros_like(free)
        drop_zero[np.flatnonzero(~free)[nu < -1e-9 * gmax]] = True
        ok = not (over.any() or neg.any() or drop_pod.any() or drop_zero.any())
        if ok:
            break
        full = (full | over) & ~drop_pod
        free = (free & ~neg) | drop_zero
    info = {
        "iterations": steps,
        "stationarity": float(np.abs(resid).max(initial=0.0) / gmax),
        "kkt": bool(ok),
    }
    return (np.maximum(z, 0.0) if ok else z0.copy()), info


def alpha_fair_utility(cost: FairnessCost, x, b2: float, alpha: float) -> tuple[float, np.ndarray]:
    """``Σ_j ω_j y_j^(1−α)/(1−α)`` with throughputs ``y_j = 1/v_j(x)`` (1/s, or 1/slowdown),
    and its gradient [P], written from the throughputs (not from :func:`power_mean`):
    ``∂/∂x = Σ_j ω_j y_j^(−α) ∂y_j/∂x``, ``∂y_j/∂x = −∇v_j / v_j²``."""
    v, g = cost.job_values(x, b2)
    y = 1.0 / v
    w = cost.weights
    util = float(w @ y ** (1.0 - alpha)) / (1.0 - alpha)
    dy = -g / (v * v)[:, None]
    return util, (w * y ** (-alpha)) @ dy


def alpha_fair_optimum(
    cost: FairnessCost, b2: float, alpha: float, x0=None
) -> tuple[np.ndarray, dict]:
    """Unregularised ``argmax`` of the α-fair utility (``α > 1``) over ``{x ≥ 0: A x ≤ d}`` on
    the pairs with traffic: SLSQP on ``−utility`` (written from the throughputs by
    :func:`alpha_fair_utility`, never through :func:`power_mean`), then :func:`kkt_polish`
    on the utility's own gradient. Returns the full pair vector [P] and the polish's
    ``info``."""
    from scipy.optimize import minimize

    idx, a, start = _polytope(cost)
    z0 = start if x0 is None else np.asarray(x0, dtype=float)[idx]
    ref = abs(alpha_fair_utility(cost, _full(cost, idx, z0), b2, alpha)[0])
    d = cost.model.degrees.astype(float)

    def f(z):
        u, g = alpha_fair_utility(cost, _full(cost, idx, z), b2, alpha)
        return -u / ref, -g[idx] / ref

    res = minimize(
        f,
        z0,
        jac=True,
        method="SLSQP",
        bounds=[(0, None)] * idx.size,
        constraints=[{"type": "ineq", "fun": lambda z: d - a @ z, "jac": lambda z: -a}],
        options={"ftol": 1e-15, "maxiter": 2000},
    )
    z, info = kkt_polish(lambda z: f(z)[1], res.x, a, d)
    return _full(cost, idx, z), info


def alpha_fair_check(cost: FairnessCost, b2: float, alpha: float | None = None) -> dict:
    """Compare the unregularised ``Φ_p`` optimum with the direct α-fair optimum at
    ``α = p + 1`` (or the ``alpha`` given, e.g. to show a mismatch), both smoothed at ``b2``
    and each polished to a KKT point of its own objective (:func:`kkt_polish`).

    Returns ``alpha``; ``phi_power`` / ``phi_alpha`` (``Φ_p`` at each optimum);
    ``rel_objective = |Φ_p(x_α) − Φ_p(x_p)| / Φ_p(x_p)``; ``rel_values``, the largest
    difference of a job's value ``v_j`` over the largest value; ``rel_wiring =
    max_e |x_α,e − x_p,e| / max_e x_p,e`` over the *determined* pairs with traffic, and
    ``rel_wiring_all`` over all of them; ``kkt_power`` / ``kkt_alpha`` (the polish's
    ``info``); ``agree``: both are KKT points and the three differences are ≤ 1e-6. Also
    both wirings ``x_power``, ``x_alpha`` [P]. ``p = ∞`` has no finite α: ConfigError
    naming ``p``.

    ``undetermined`` counts the pairs where ``|∂Φ_p/∂x_e|·max d ≤ 1e-12·Φ_p`` at both optima:
    every transfer on them is so far off the near-critical paths that its Gibbs mass
    underflows (measured: gradients of 1e-42 next to 1e-1), so in float64 ``Φ_p`` does not
    change when all of a pod's ports move onto or off the pair, and neither problem
    determines its circuits (the exact problem does, by a margin no float64 solver sees);
    ``rel_wiring`` leaves them out."""
    if math.isinf(cost.p):
        raise ConfigError("p", "the alpha-fair check needs a finite p (alpha = p + 1)")
    alpha = cost.p + 1.0 if alpha is None else float(alpha)
    xp, info_p = power_mean_optimum(cost, b2)
    xa, info_a = alpha_fair_optimum(cost, b2, alpha)
    phi_p, g_p = cost.value_and_grad(xp, b2)
    phi_a, g_a = cost.value_and_grad(xa, b2)
    vp, va = cost.job_values(xp, b2)[0], cost.job_values(xa, b2)[0]
    used = cost.used.any(axis=0)
    flat = 1e-12 * phi_p / float(cost.model.degrees.max())
    undetermined = used & (np.abs(g_p) <= flat) & (np.abs(g_a) <= flat)
    diff, top = np.abs(xa - xp), float(np.abs(xp).max())
    rel_obj = abs(phi_a - phi_p) / phi_p
    rel_v = float(np.abs(va - vp).max() / vp.max())
    rel_x = float(diff[used & ~undetermined].max(initial=0.0) / top)
    return {
        "alpha": alpha,
        "phi_power": phi_p,
        "phi_alpha": phi_a,
        "rel_objective": rel_obj,
        "rel_values": rel_v,
        "rel_wiring": rel_x,
        "rel_wiring_all": float(diff[used].max() / top),
        "undetermined": int(undetermined.sum()),
        "kkt_power": info_p,
        "kkt_alpha": info_a,
        "agree": bool(info_p["kkt"] and info_a["kkt"] and max(rel_obj, rel_v, rel_x) <= 1e-6),
        "x_power": xp,
        "x_alpha": xa,
    }


# -- a study over several p -----------------------------------------------------------------


def _p_label(p: float) -> float | str:
    """``p`` for JSON: a number, or ``"inf"``."""
    return "inf" if math.isinf(p) else p


def _scored(cost: FairnessCost, x: np.ndarray) -> dict:
    """Per-job hard iteration times (s) and values of wiring ``x``, with mean, max, Jain."""
    cp = cost.hard_jobs(x)
    v = cost.scale * cp
    w = cost.weights
    return {
        "job_iteration_s": cp.tolist(),
        "job_values": v.tolist(),
        "mean": float(w @ v / w.sum()),
        "max": float(v.max()),
        "jain": jain(v),
    }


def study(
    jobs: list[FairJob],
    model: OcsModel,
    ps=(1.0, 2.0, 4.0, 8.0, math.inf),
    b1_rel: float = 1.0,
    b2_rel: float = 50.0,
    normalise: bool = False,
    seed: int = 0,
    alpha_check: bool = True,
    max_evals: int = DEFAULT_EVALS,
    max_iter: int = 1000,
) -> dict:
    """One wiring per ``p`` (:func:`fair_plan`, temperatures shared by all ``p``, then
    :func:`share_wirings`), scored by
    the per-job hard iteration times of the integer wiring, with the baselines and checks
    a user asks for. JSON-able.

    Per ``p``: ``job_iteration_s``, ``job_values``, ``mean`` (weighted), ``max``, ``jain``,
    ``phi`` (hard ``Φ_p``), the regularised fractional optimum's ``fractional_max`` and
    ``fractional_mean``, solver/rounding counters; ``unregularised``: the exact optimum's
    ``max``/``mean`` of smoothed values (finite ``p``: from the α-fair check's ``Φ_p`` side;
    ``p = ∞``: the minimax of :func:`power_mean_optimum`), and ``alpha_fair`` (the check's
    figures) when ``alpha_check``. ``trade_off`` (:func:`trade_off`) of the integer
    wirings and ``unregularised_max_non_increasing`` along ``p``; ``baselines``: the best
    near-uniform and the demand-proportional wirings scored alike. ``max_iter``: solver
    iterations per annealing stage; ``max_evals``: rounding search evaluations per start.
    """
    ps = sorted(check_p(p) for p in ps)
    if not ps:
        raise ConfigError("p", "give at least one p")
    cost = FairnessCost(jobs, model, ps[0], normalise)
    b1, b2 = temperatures_for(cost, b1_rel, b2_rel)
    rows = []
    plans = [
        fair_plan(cost.with_p(p), b1, b2, seed=seed, max_iter=max_iter, max_evals=max_evals)
        for p in ps
    ]
    share_wirings(cost, plans, b2, max_evals)
    for p, plan in zip(ps, plans, strict=True):
        c = cost.with_p(p)
        frac = cost.scale * plan.job_cp_frac_s
        row = {
            "p": _p_label(p),
            **_scored(c, plan.x),
            "phi": plan.phi,
            "fractional_max": float(frac.max()),
            "fractional_mean": float(cost.weights @ frac / cost.weights.sum()),
            "solver_iterations": plan.iterations,
            "solver_converged": plan.converged,
            "rounding_source": plan.source,
            "rounding_evaluations": plan.evaluations,
        }
        if alpha_check:
            if math.isinf(p):
                v = cost.job_values(power_mean_optimum(c, b2)[0], b2)[0]
            else:
                chk = alpha_fair_check(c, b2)
                v = cost.job_values(chk["x_power"], b2)[0]
                row["alpha_fair"] = {
                    k: chk[k]
                    for k in (
                        "alpha",
                        "rel_objective",
                        "rel_values",
                        "rel_wiring",
                        "rel_wiring_all",
                        "undetermined",
                        "agree",
                    )
                } | {"kkt": bool(chk["kkt_power"]["kkt"] and chk["kkt_alpha"]["kkt"])}
            row["unregularised"] = {
                "max": float(v.max()),
                "mean": float(cost.weights @ v / cost.weights.sum()),
            }
        rows.append(row)
    out = {
        "pods": model.n,
        "ports": int(model.degrees[0]) if (model.degrees == model.degrees[0]).all() else None,
        "ocs": model.ocs,
        "normalise": normalise,
        "value_unit": "slowdown vs uniform mesh" if normalise else "s",
        "b1": b1,
        "b2": b2,
        "jobs": [
            {"name": j.name, "pods": j.pods.tolist(), "weight": j.weight, "scale": float(s)}
            for j, s in zip(jobs, cost.scale, strict=True)
        ],
        "plans": rows,
        "trade_off": trade_off(plans),
        "baselines": {
            "near_uniform": _scored(cost, baselines.best_near_uniform(cost, model, seed=seed)),
            "demand_proportional": _scored(cost, baselines.demand_proportional(cost.dag, model)),
        },
    }
    if alpha_check:
        tops = [r["unregularised"]["max"] for r in rows]
        out["unregularised_max_non_increasing"] = bool(
            all(b <= a * (1 + 1e-7) for a, b in zip(tops, tops[1:], strict=False))
        )
        out["alpha_fair_all_agree"] = all(
            r["alpha_fair"]["agree"] for r in rows if "alpha_fair" in r
        )
    return out
