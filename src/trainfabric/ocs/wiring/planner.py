"""End-to-end wiring plan: solve (entropic proximal gradient) -> round -> split onto the OCSes.

:func:`plan` is what ``trainfabric ocs plan`` runs; :func:`compare` adds the baselines (MILP,
uniform mesh, demand-proportional, traffic-matrix-only objective) on the same instance, every
wiring scored by the same hard critical-path function (CLARIFICATIONS: one function for all).
Temperatures are dimensionless knobs scaled by the uniform mesh's critical path ``CP0``:
``b2 = b2_rel · log|Π| / CP0`` and ``b1 = b1_rel / CP0`` (absolute values are reported).

Warm start (``plan(..., warm_start=previous)``, for re-planning after the traffic drifted,
e.g. by :func:`trainfabric.ocs.online.drift.drift_traffic`): from a previous :class:`Plan` the
solver resumes at its
fractional wiring ``w = x_frac / M``, projection duals and step size; from a bare integer
wiring ``x`` it starts at ``(1 − WARM_MIX)·x / M + WARM_MIX·q`` (positive everywhere, so
``KL(w||q)`` is finite and the multiplicative steps can reach every pair). Either way only the
final ``b2`` stage runs, for at most ``WARM_MAX_ITER`` iterations (no annealing). The rounding
is replaced by the rounding's local search (:func:`.search.polish`) started from the previous
integer wiring (``Plan.x`` or the wiring given) with ``1 / WARM_SEARCH_SHARE`` of its work
budget: a drift moves the optimum a few circuits, which the search's moves reach, while the
rounding's starts from scratch are most of a cold plan's rounding time. The previous wiring
itself stays a candidate, so a warm plan is never worse than the wiring it started from on the
new job. A previous :class:`Plan` of the same pods, ports, OCSes, rates and seed also hands over
its :class:`Reuse`: the path cost's compression, kept when the DAG changed only in its bytes
(:meth:`.cost.PathCost.with_bytes`), the search's reduced DAG (the rounding's on a cold plan,
the warm search's on a warm one; only its bits are new) and, for the same ``b1_rel`` and
``b2_rel``, the temperatures ``b1``, ``b2`` (knobs scaled by the job's uniform-mesh critical
path, which a drift moves a little; the solver resumes at the optimum for those temperatures);
when the new wiring equals the old one, its split onto the OCSes is kept. What is reused is what
a cold plan would compute again (tests check a warm plan with and without it to the bit). The
traffic-free near-uniform candidates are kept per pod shape for every plan
(:func:`.baselines.mesh_candidates`).

Effort (``plan(..., effort=...)``, ``trainfabric ocs plan --effort``): :data:`EFFORTS` sets
the solver's iterations per annealing stage, the rounding's work budget and whether it tries
the class steps (:func:`.rounding.round_wiring`: the class-uniform start of
:mod:`.class_uniform`, and the class moves that take a whole pair class off the circuits and
re-spend its ports) and the size budget of the certificate's restricted master
(:func:`.bound.certify`'s ``master_columns``): ``fast`` (20, a quarter of the default search,
no class steps, a master only up to ``LP_COLUMNS / 2`` columns), ``default`` (30, up to
``LP_COLUMNS``), ``thorough`` (300, ten times the search, up to ``LP_COLUMNS``). With
``LP_COLUMNS`` at every level, ``fast`` was the slower one on pp-dp at 1,024 pods: 19,968
segment columns at ``fast`` (a master and a class disjunction, 3.0 s of a 5.4 s plan) against
20,096 at ``default`` (neither, 0.3 s of 3.6 s). The class steps are what reach the proven
optima of ``dp-ep`` and of the MoE job at 256 pods (every ring pair 5 circuits,
no expert pair any), which the local moves miss by 1.7-2% and 0.3%.
Measured on the 90 proven hard instances of ``benchmarks/ocs_vs_milp.py --quick`` with the
class steps, 30 and 50 iterations per stage both give every plan at its optimum (the
rounding's search, not the fractional optimum's last digits, sets the plan); 30 takes 40%
less solver time where the stages run to their cap (pp-dp at 1,024 pods).

A plan is never worse than a baseline it computes: the best near-uniform and the
demand-proportional wiring are candidates next to the rounding's result (and the warm start's
wiring); the shortest hard critical path wins, then it is split onto the OCSes.

Every plan carries a certified lower bound on the integer optimum (:func:`.bound.certify`,
seeded with the fractional and the integer wiring) and ``certified_gap = CP / bound − 1``.

Two baselines, named the same in every command and report: the **uniform mesh**
(:func:`.baselines.uniform_mesh`, ``uniform_mesh_critical_path_s``) and the **best
near-uniform wiring** (:func:`.baselines.best_near_uniform`, every pair within one circuit of
the fractional mesh, the best of a few roundings: ``best_near_uniform_critical_path_s``, the
older key ``uniform_critical_path_s``). ``improvement_vs_X = 1 − CP / CP_X``
(``improvement_vs_uniform`` is ``improvement_vs_best_near_uniform``). :func:`plan_findings` and
:func:`compare_findings` state them in sentences.

The relaxation allows dark ports (``Σ_u w_uv ≤ r_v``, ``solver.solve(inequality=True)``).

Exact one-hop fast path (``plan(..., exact_one_hop=True)``, the default; :func:`one_hop_wiring`):
when every comm node of the DAG has the same predecessors and the same successors (one phase,
all its transfers concurrent, e.g. :func:`.onehop.to_dag`), every path meets at most one comm
node and ``CP(x) = max(P_without, H + max_m t_m(x) + T)`` with ``H``/``T`` the longest path into
the common predecessors / out of the common successors: CP is non-decreasing in the bundle time
``max_m t_m(x)``, so the integer wiring minimising it (:func:`.onehop.least_bottleneck`, exact)
minimises the critical path over every wiring with ``Σ_u x_uv ≤ d_v`` — the same feasible set
as the relaxation, the rounding and the MILP. Then ``lower_bound_s = CP`` (gap 0, tolerance 0),
no solver runs (``x_frac`` = the exact wiring, ``iterations = 0``) and ``method =
"exact-one-hop"``. Not taken with a warm start, nor when its ``n_comm × (max d + 1)`` time
tables would exceed the memory limit (:func:`one_hop_table_bytes`), nor when the wiring cannot
be split onto the OCSes (possible only with an odd ``p_v``, :mod:`.decompose`): the general
path runs then.

Size guard: :func:`plan` and :func:`compare` first check :func:`plan_memory_bytes` (the
model's pair structures plus ``NODE_BYTES`` per DAG node for the path cost's sweeps) against
:func:`trainfabric.limits.check_memory`, refusing with a ConfigError naming ``pods``.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from trainfabric.errors import ConfigError, InfeasibleError
from trainfabric.io import write_json, write_parquet, write_text
from trainfabric.limits import check_memory, memory_limit_bytes
from trainfabric.ocs.model import OcsModel
from trainfabric.ocs.wiring import baselines, decompose, rounding, search, solver
from trainfabric.ocs.wiring.bound import LP_COLUMNS, certify
from trainfabric.ocs.wiring.cost import PathCost, temperatures
from trainfabric.ocs.wiring.onehop import least_bottleneck
from trainfabric.ocs.wiring.prior import kl, uniform_prior
from trainfabric.tables import fmt_number
from trainfabric.workloads.dag import COMM, Phase, TaskDAG
from trainfabric.workloads.traffic import PhaseTraffic, dag_from_traffic, traffic_from_dag


@dataclass
class Reuse:
    """What a re-plan of the same job can reuse (kept in memory, never written out): the path
    cost, whose compression holds while only bytes drift (:meth:`.PathCost.with_bytes`), the
    seed and temperature knobs it was planned with, and the search's reduced DAG (the
    rounding's on a cold plan, the warm search's on a warm one)."""

    cost: PathCost
    seed: int
    b_rel: tuple[float, float]
    reduced: Any = None  # the search's reduced DAG (.search._Reduced) at ``reduced_b2``
    reduced_b2: float = float("nan")


@dataclass
class Plan:
    """An integer wiring with its per-OCS split and the figures a user asks for (SI units).

    ``uniform_critical_path_s``: the best near-uniform integer wiring's critical path
    (:func:`.baselines.best_near_uniform`), the reference of ``improvement_vs_uniform``;
    ``uniform_mesh_critical_path_s``: the uniform mesh's (:func:`.baselines.uniform_mesh`);
    ``fractional_critical_path_s``: the hard critical path of the solver's fractional wiring
    ``x_frac`` (circuit counts not rounded), which is not a bound: the solver minimises the
    smoothed critical path plus ``KL(w || q)/b1``, and the rounding's search then shortens
    the hard critical path, so it can exceed the plan's. ``lower_bound_s`` ≤ every integer
    wiring's critical path and ``certificate_tolerance`` (:class:`.bound.Certificate`).
    ``success``: the wiring splits onto the OCSes (every circuit realised, ``split_feasible``
    of :meth:`summary`); ``message``: the certified gap, or the circuits left unrealised."""

    x: np.ndarray
    x_frac: np.ndarray
    decomposition: Any
    tables: list
    hard_critical_path_s: float
    fractional_critical_path_s: float
    smoothed_cost_s: float
    kl_to_prior: float
    circuits_moved_vs_prior: int
    uniform_critical_path_s: float
    b1: float
    b2: float
    iterations: int
    timings_s: dict[str, float] = field(default_factory=dict)
    duals: np.ndarray | None = field(default=None, repr=False)
    eta: float | None = None
    lower_bound_s: float = float("nan")
    certificate_tolerance: float = float("nan")
    method: str = "general"
    uniform_mesh_critical_path_s: float = float("nan")
    reuse: Reuse | None = field(default=None, repr=False, compare=False)

    @property
    def certified_gap(self) -> float:
        """``CP / lower_bound − 1``: at most this far above the integer optimum."""
        return self.hard_critical_path_s / self.lower_bound_s - 1.0

    @property
    def success(self) -> bool:
        return bool(self.decomposition.feasible)

    @property
    def message(self) -> str:
        if not self.success:
            left = sum(k for _, _, k in self.decomposition.unrealised)
            return f"{left} circuits not realised on the OCSes"
        return f"certified within {self.certified_gap:.3g} of the integer optimum"

    @property
    def solve_time_s(self) -> float:
        return sum(self.timings_s.values())

    def summary(self, model: OcsModel) -> dict[str, Any]:
        """JSON-able figures plus the per-OCS cross-connect tables (baseline keys: module doc;
        ``fractional_wiring_critical_path_s`` is ``fractional_critical_path_s`` by a clearer
        name)."""
        cp, near, mesh = (
            self.hard_critical_path_s,
            self.uniform_critical_path_s,
            self.uniform_mesh_critical_path_s,
        )
        return {
            "pods": model.n,
            "method": self.method,
            "ports": model.degrees.tolist(),
            "ocs": model.ocs,
            "rate_bps": model.rate_bps,
            "fallback_bps": model.fallback_bps,
            "hard_critical_path_s": self.hard_critical_path_s,
            "fractional_critical_path_s": self.fractional_critical_path_s,
            "uniform_critical_path_s": self.uniform_critical_path_s,
            "improvement_vs_uniform": 1 - cp / near,
            "best_near_uniform_critical_path_s": near,
            "improvement_vs_best_near_uniform": 1 - cp / near,
            "uniform_mesh_critical_path_s": mesh,
            "improvement_vs_uniform_mesh": 1 - cp / mesh,
            "fractional_wiring_critical_path_s": self.fractional_critical_path_s,
            "lower_bound_s": self.lower_bound_s,
            "certified_gap": self.certified_gap,
            "certificate_tolerance": self.certificate_tolerance,
            "smoothed_cost_s": self.smoothed_cost_s,
            "kl_to_prior": self.kl_to_prior,
            "circuits_moved_vs_prior": self.circuits_moved_vs_prior,
            "total_circuits": model.total_circuits,
            "b1": self.b1,
            "b2": self.b2,
            "iterations": self.iterations,
            "solve_time_s": self.solve_time_s,
            "timings_s": self.timings_s,
            "split_feasible": bool(self.decomposition.feasible),
            "unrealised_circuits": list(self.decomposition.unrealised),
            "ocs_configs": [[list(map(int, c)) for c in t] for t in self.tables],
        }


# Share of the prior mixed into a warm start from a bare integer wiring (module doc).
WARM_MIX = 0.05
# Solver iterations of a warm start at most, and the share of the rounding's work budget its
# search from the previous wiring gets (module doc).
WARM_MAX_ITER = 10
WARM_SEARCH_SHARE = 10
# Work budgets per effort level (module doc): solver iterations per annealing stage, the
# rounding's search budget in work units per reference size, its class steps, and the segment
# columns up to which the certificate runs its restricted master and class disjunction.
EFFORTS = {
    "fast": {
        "max_iter": 20,
        "round_max_moves": rounding.DEFAULT_MAX_MOVES // 4,
        "classes": False,
        "master_columns": LP_COLUMNS // 2,
    },
    "default": {
        "max_iter": 30,
        "round_max_moves": rounding.DEFAULT_MAX_MOVES,
        "classes": True,
        "master_columns": LP_COLUMNS,
    },
    "thorough": {
        "max_iter": 300,
        "round_max_moves": 10 * rounding.DEFAULT_MAX_MOVES,
        "classes": True,
        "master_columns": LP_COLUMNS,
    },
}


def warm_point(warm_start, model: OcsModel, q: np.ndarray):
    """``(w0, duals0, eta0)`` for :func:`solver.solve` from a previous :class:`Plan` or an
    integer wiring [P] (module doc); ConfigError naming ``warm_start`` otherwise."""
    if isinstance(warm_start, Plan):
        x = np.asarray(warm_start.x_frac, dtype=float)
        if x.shape != (model.n_pairs,):
            raise ConfigError("warm_start", f"plan for {x.size} pairs, model has {model.n_pairs}")
        # w underflows only where log w < -745: such a pair restarts at the smallest float
        w0 = np.maximum(x / model.total_circuits, np.finfo(float).tiny)
        return w0, warm_start.duals, warm_start.eta
    x = np.asarray(warm_start, dtype=float)
    if x.shape != (model.n_pairs,) or not (np.isfinite(x).all() and (x >= 0).all()):
        raise ConfigError("warm_start", f"needs a Plan or {model.n_pairs} circuit counts >= 0")
    return (1.0 - WARM_MIX) * x / model.total_circuits + WARM_MIX * q, None, None


def _warm_wiring(model: OcsModel, warm_start) -> np.ndarray | None:
    """The warm start's integer wiring (``Plan.x`` or the wiring given), or None when it is
    not an integer ``≤ d`` wiring of ``model``."""
    prev = np.asarray(warm_start.x if isinstance(warm_start, Plan) else warm_start)
    try:
        model.check_wiring(prev)
    except InfeasibleError:
        return None
    return prev.astype(np.int64)


def _best_wiring(cost: PathCost, ours: list, baselines_: list) -> np.ndarray:
    """The wiring with the shortest hard critical path among ``ours`` (the rounding's result,
    then the warm start's wiring; None entries skipped) and the ``baselines_`` (best
    near-uniform, demand-proportional): a plan is never worse than a baseline it computed.
    Ties keep the earlier one, so the rounding wins them."""
    cands = [np.asarray(x, dtype=np.int64) for x in [*ours, *baselines_] if x is not None]
    cps = [cost.hard(x) for x in cands]
    return cands[int(np.argmin(cps))]


# Planner memory per DAG node (durations, α/μ sweeps, predecessor CSR, comm-pair maps),
# fitted with tracemalloc: 250-260 B per node on moe/dp-ring at 32-256 pods.
NODE_BYTES = 250


def plan_memory_bytes(dag: TaskDAG, model: OcsModel) -> float:
    """Peak bytes of :func:`plan`: ``NODE_BYTES`` per DAG node plus the model's pair part."""
    return NODE_BYTES * float(dag.n_nodes) + model.memory_bytes()


def check_plan_size(dag: TaskDAG, model: OcsModel) -> None:
    """ConfigError naming ``pods`` when planning ``dag`` on ``model`` exceeds the limit."""
    check_memory(
        "pods",
        plan_memory_bytes(dag, model),
        f"planning a {dag.n_nodes:,}-node task DAG on {model.n:,} pods",
    )


def plan(
    dag: TaskDAG,
    model: OcsModel,
    b1_rel: float = 1.0,
    b2_rel: float = 50.0,
    seed: int = 0,
    anneal: bool = True,
    max_iter: int | None = None,
    round_max_moves: int | None = None,
    warm_start=None,
    bound_rounds: int | None = None,
    exact_one_hop: bool = True,
    effort: str = "default",
    threads: int = 2,
) -> Plan:
    """Plan the wiring of ``dag`` on ``model`` (see module doc); timings per stage in seconds.

    ``effort`` (``fast``, ``default``, ``thorough``) sets the budgets of :data:`EFFORTS`;
    ``max_iter`` or ``round_max_moves``, when given, override its values.
    ``max_iter`` bounds the solver's iterations per annealing stage; ``round_max_moves`` bounds
    the rounding's search in work units per reference size (:func:`.rounding.round_wiring`;
    work, not seconds: small instances reach a local optimum long before it).
    ``warm_start``: a previous :class:`Plan` or integer wiring [P] to resume from (module doc;
    no annealing then). ``bound_rounds``: work budget of the certified lower bound
    (:func:`.bound.certify`; default by size). ``exact_one_hop``: take the exact fast path
    on single-bundle DAGs (module doc); False forces the general path. Refuses an instance
    over the memory limit first (:func:`check_plan_size`, field ``pods``). ``threads=2`` runs
    what reads no fractional solution (:func:`.rounding.prepare`: the rounding's reduced DAG,
    iterative roundings and class-uniform start; the near-uniform and demand-proportional
    baselines) in a second thread while the solver runs, ``threads=1`` in the calling thread
    when it is needed; the plan is the same (each step is deterministic and none reads
    another's output). Timings are the calling thread's wall time per stage, so with
    ``threads=2`` the rounding and baselines stages hold only the wait for that thread.
    """
    if threads not in (1, 2):
        raise ConfigError("threads", f"must be 1 or 2, got {threads!r}")
    budgets = effort_budgets(effort)
    max_iter = budgets["max_iter"] if max_iter is None else max_iter
    round_max_moves = budgets["round_max_moves"] if round_max_moves is None else round_max_moves
    check_plan_size(dag, model)
    if exact_one_hop and warm_start is None and single_bundle(dag):
        fast = _plan_one_hop(dag, model, b1_rel, b2_rel, seed)
        if fast is not None:
            return fast
    t0 = time.perf_counter()
    reuse = _reusable(warm_start, model, seed)
    cost = None if reuse is None else reuse.cost.with_bytes(dag, model)
    drifted = cost is not None  # the same job, only its bytes changed
    cost = cost if drifted else PathCost(dag, model)
    if drifted and reuse.b_rel == (b1_rel, b2_rel):
        b1, b2 = warm_start.b1, warm_start.b2  # the previous plan's temperatures (module doc)
    else:
        b1, b2, _ = temperatures(cost, model, b1_rel, b2_rel)
    q = uniform_prior(model)
    t1 = time.perf_counter()
    w0 = duals0 = eta0 = None
    if warm_start is not None:
        w0, duals0, eta0 = warm_point(warm_start, model, q)
        anneal = False
        max_iter = min(max_iter, WARM_MAX_ITER)
    start = None if warm_start is None else _warm_wiring(model, warm_start)
    classes = budgets["classes"]
    with _aside(threads) as submit:
        if start is None:
            prepared = submit(rounding.prepare, cost, model, b2, round_max_moves, classes)
        others = submit(_other_baselines, cost, model, seed)
        res = solver.solve(
            cost,
            model,
            b1,
            b2,
            prior=q,
            anneal=anneal,
            max_iter=max_iter,
            w0=w0,
            duals0=duals0,
            eta0=eta0,
            inequality=True,
        )
        t2 = time.perf_counter()
        if start is None:
            rounded = rounding.round_wiring(
                cost,
                model,
                res.x,
                b2=b2,
                seed=seed,
                max_moves=round_max_moves,
                classes=classes,
                prepared=prepared.result(),
            )
            ours, reduced = [rounded.x], rounded.reduced
        else:
            reduced = _reduced(cost, model, b2, reuse if drifted else None)
            ours = [_warm_search(reduced, model, start, b2, seed, round_max_moves), start]
        t3 = time.perf_counter()
        near_uniform, demand = others.result()
    uniform = baselines.uniform_mesh(model)
    x = _best_wiring(cost, ours, [near_uniform, demand])
    t4 = time.perf_counter()
    if reuse is not None and np.array_equal(x, warm_start.x):
        dec, tables = warm_start.decomposition, warm_start.tables  # same wiring, same OCSes
    else:
        dec = decompose.decompose(model, x)
        tables = decompose.cross_connects(model, dec)
    t5 = time.perf_counter()
    cert = certify(
        cost, model, [res.x, x], b2, rounds=bound_rounds, master_columns=budgets["master_columns"]
    )
    t6 = time.perf_counter()
    return Plan(
        x=x,
        x_frac=res.x,
        decomposition=dec,
        tables=tables,
        hard_critical_path_s=cost.hard(x),
        fractional_critical_path_s=cost.hard(res.x),
        smoothed_cost_s=cost.smoothed(x, b2),
        kl_to_prior=kl(x / model.total_circuits, q),
        circuits_moved_vs_prior=int(np.abs(x - uniform).sum() // 2),
        uniform_critical_path_s=cost.hard(near_uniform),
        uniform_mesh_critical_path_s=cost.hard(uniform),
        b1=b1,
        b2=b2,
        iterations=res.iterations,
        timings_s={
            "setup": t1 - t0,
            "solve": t2 - t1,
            "round": t3 - t2,
            "baselines": t4 - t3,
            "decompose": t5 - t4,
            "bound": t6 - t5,
        },
        duals=res.duals,
        eta=res.eta,
        lower_bound_s=cert.lower_bound_s,
        certificate_tolerance=cert.tolerance,
        reuse=Reuse(cost, seed, (b1_rel, b2_rel), reduced, b2),
    )


def _other_baselines(cost: PathCost, model: OcsModel, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The best near-uniform and the demand-proportional wiring (:mod:`.baselines`)."""
    near = baselines.best_near_uniform(cost, model, seed=seed)
    return near, baselines.demand_proportional(cost.dag, model)


class _Deferred:
    """``fn(*args)``, run in the calling thread when its result is asked for."""

    def __init__(self, fn, *args):
        self._fn, self._args = fn, args

    def result(self):
        return self._fn(*self._args)


@contextmanager
def _aside(threads: int):
    """``submit(fn, *args)`` giving an object whose ``result()`` is ``fn(*args)``: started at
    once in one worker thread (``threads=2``), or run when asked for (``threads=1``)."""
    if threads == 1:
        yield _Deferred
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="ocs-plan") as pool:
        yield pool.submit


def effort_budgets(effort: str) -> dict[str, int]:
    """The work budgets of an effort level (:data:`EFFORTS`); ConfigError naming ``effort``."""
    if effort not in EFFORTS:
        raise ConfigError("effort", f"must be one of {', '.join(EFFORTS)}, got {effort!r}")
    return EFFORTS[effort]


def _reduced(cost: PathCost, model: OcsModel, b2: float, reuse: Reuse | None):
    """The search's reduced DAG of ``cost`` at ``b2``: the previous plan's with the new bytes
    when ``reuse`` (of the same job, only its bytes drifted) holds one built at the same
    ``b2`` (only its ``bits`` depend on the bytes: :class:`.search._Reduced`), else a new one."""
    if reuse is None or reuse.reduced is None or reuse.reduced_b2 != b2:
        return search._Reduced(cost, model, b2)
    return search.with_bits(reuse.reduced, 8.0 * cost.dag.bytes[cost.comm_nodes])


def _warm_search(red, model: OcsModel, start: np.ndarray, b2: float, seed: int, max_moves: int):
    """The local search of :func:`.rounding.round_wiring` (:func:`.search.polish`, the hard
    critical path, ties by the smoothed cost at ``b2``) from the previous wiring ``start``,
    with ``1 / WARM_SEARCH_SHARE`` of the rounding's work budget for this size."""
    size = search.setup_work(red)
    budget = (max_moves + max_moves * size // rounding.WORK_REF_SIZE) // WARM_SEARCH_SHARE
    perm = np.random.default_rng(seed).permutation(model.n).astype(np.int64)
    return search.polish(red, model, start, b2, perm, max(budget, 1))[0]


def _reusable(warm_start, model: OcsModel, seed: int) -> Reuse | None:
    """The warm start's :class:`Reuse` when it planned the same pods, ports, OCSes and rates
    with the same ``seed`` (the near-uniform candidates are seeded), else None."""
    reuse = warm_start.reuse if isinstance(warm_start, Plan) else None
    if reuse is None or reuse.seed != seed:
        return None
    old = reuse.cost.model
    same = old is model or (
        np.array_equal(old.degrees, model.degrees)
        and (old.ocs, old.rate_bps, old.fallback_bps)
        == (model.ocs, model.rate_bps, model.fallback_bps)
    )
    return reuse if same else None


def single_bundle(dag: TaskDAG) -> bool:
    """True when the DAG has comm nodes and all of them share one predecessor set and one
    successor set (module doc: the critical path is monotone in their slowest one). Comm
    nodes of more than one phase answer False at once (O(N), no adjacency built: 0.35 s at
    1,024 pods otherwise); such a DAG is then planned by the general path, which is safe."""
    comm = np.flatnonzero(dag.kind == COMM)
    if comm.size == 0:
        return False
    phase = dag.phase[comm]
    if phase.min() != phase.max():
        return False
    n = dag.n_nodes
    adj = sp.csr_matrix(
        (np.ones(dag.indices.size), dag.indices.astype(np.int64), dag.indptr.astype(np.int64)),
        shape=(n, n),
    )
    return all(_same_rows(m[comm]) for m in (adj, adj.T.tocsr()))


def _same_rows(m: sp.csr_matrix) -> bool:
    """True when every row of ``m`` has the same set of non-zero columns."""
    m = m.tocsr()
    m.sum_duplicates()
    m.sort_indices()
    nnz = np.diff(m.indptr)
    if (nnz != nnz[0]).any():
        return False
    cols = m.indices.reshape(nnz.size, nnz[0])
    return bool((cols == cols[:1]).all())


def one_hop_wiring(cost: PathCost, model: OcsModel) -> np.ndarray:
    """The integer wiring minimising ``max_m t_m(x)`` over ``Σ_u x_uv ≤ d_v`` (exact):
    per loaded pair ``e`` the table ``t_e(k) = max_{m on e} (a_m + 8 b_m / (B k + B0))``,
    ``k = 0..min(d_u, d_v)``, in the same floating-point expression as :meth:`PathCost.hard`,
    then :func:`.onehop.least_bottleneck`."""
    order = np.argsort(cost.comm_pair, kind="stable")
    pair = cost.comm_pair[order]
    loaded, starts = np.unique(pair, return_index=True)
    iu, iv = model.pairs
    u, v = iu[loaded], iv[loaded]
    kmax = np.minimum(model.degrees[u], model.degrees[v])
    k = np.arange(int(kmax.max()) + 1, dtype=float)
    rate = float(model.rate_bps) * k[None, :] + float(model.fallback_bps)
    nodes = cost.comm_nodes[order]
    lat, bits = cost.dag.latency_s[nodes].astype(float), 8.0 * cost.dag.bytes[nodes]
    node_t = lat[:, None] + bits[:, None] / rate
    table = np.maximum.reduceat(node_t, starts, axis=0)
    best, _ = least_bottleneck(table, kmax, (u, v), model.degrees)
    x = np.zeros(model.n_pairs, dtype=np.int64)
    x[loaded] = best
    return x


def one_hop_table_bytes(dag: TaskDAG, model: OcsModel) -> float:
    """Peak bytes of :func:`one_hop_wiring`'s tables: three float64/bool arrays of
    ``n_comm × (max d + 1)`` (node times, pair table, feasibility mask), counted as 24 B each."""
    return 24.0 * float(np.count_nonzero(dag.kind == COMM)) * float(model.degrees.max() + 1)


def _plan_one_hop(
    dag: TaskDAG, model: OcsModel, b1_rel: float, b2_rel: float, seed: int
) -> Plan | None:
    """The exact one-hop plan (module doc), or None when its time tables would exceed the
    memory limit or its wiring cannot be split."""
    if one_hop_table_bytes(dag, model) > memory_limit_bytes():
        return None
    t0 = time.perf_counter()
    cost = PathCost(dag, model)
    b1, b2, _ = temperatures(cost, model, b1_rel, b2_rel)
    t1 = time.perf_counter()
    x = one_hop_wiring(cost, model)
    t2 = time.perf_counter()
    uniform = baselines.uniform_mesh(model)
    near_uniform = baselines.best_near_uniform(cost, model, seed=seed)
    t3 = time.perf_counter()
    dec = decompose.decompose(model, x)
    if not dec.feasible:
        return None
    tables = decompose.cross_connects(model, dec)
    t4 = time.perf_counter()
    cp = cost.hard(x)
    return Plan(
        x=x,
        x_frac=x.astype(float),
        decomposition=dec,
        tables=tables,
        hard_critical_path_s=cp,
        fractional_critical_path_s=cp,
        smoothed_cost_s=cost.smoothed(x, b2),
        kl_to_prior=kl(x / model.total_circuits, uniform_prior(model)),
        circuits_moved_vs_prior=int(np.abs(x - uniform).sum() // 2),
        uniform_critical_path_s=cost.hard(near_uniform),
        uniform_mesh_critical_path_s=cost.hard(uniform),
        b1=b1,
        b2=b2,
        iterations=0,
        timings_s={"setup": t1 - t0, "exact": t2 - t1, "baselines": t3 - t2, "decompose": t4 - t3},
        lower_bound_s=cp,
        certificate_tolerance=0.0,
        method="exact-one-hop",
    )


def port_owner(model: OcsModel) -> np.ndarray:
    """Pod owning each per-OCS port: pod ``v`` owns ports ``offset_v .. offset_v + p_v - 1``."""
    return np.repeat(np.arange(model.n), model.ports_per_ocs)


def cross_connect_table(model: OcsModel, tables: list) -> dict[str, np.ndarray]:
    """One row per cross-connect, as columns ``ocs, a_port, a_pod, b_port, b_pod``."""
    owner = port_owner(model)
    ocs = np.repeat(np.arange(len(tables)), [len(t) for t in tables]).astype(np.int64)
    ends = np.array([pair for t in tables for pair in t], dtype=np.int64).reshape(-1, 2)
    a, b = ends[:, 0], ends[:, 1]
    return {"ocs": ocs, "a_port": a, "a_pod": owner[a], "b_port": b, "b_pod": owner[b]}


CROSS_CONNECTS = "cross_connects"  # file stem of the per-OCS cross-connect table
WIRING = "wiring"  # file stem of the circuits per pod pair


def csv_text(columns: dict[str, np.ndarray]) -> str:
    """Integer columns as CSV: a header line of the names, then one line per row."""
    rows = np.column_stack([np.asarray(c, dtype=np.int64) for c in columns.values()])
    return "\n".join([",".join(columns), *(",".join(map(str, r)) for r in rows.tolist())]) + "\n"


def write_plan(out_dir, model: OcsModel, result: Plan, summary: dict[str, Any]) -> Path:
    """Write ``cross_connects.parquet`` (one row per cross-connect, its ``ocs`` a column),
    ``wiring.parquet`` (circuits per pod pair), the same two tables as ``.csv`` and
    ``plan.json`` (atomically); returns the cross-connect Parquet file's path."""
    out_dir = Path(out_dir)
    iu, iv = model.pairs
    keep = result.x > 0
    wiring = {"u": iu[keep], "v": iv[keep], "circuits": result.x[keep].astype(np.int64)}
    write_parquet(out_dir / f"{WIRING}.parquet", wiring)
    header = {
        k: getattr(result, k)
        for k in ("hard_critical_path_s", "lower_bound_s", "certified_gap", "certificate_tolerance")
    }
    table = cross_connect_table(model, result.tables)
    path = write_parquet(out_dir / f"{CROSS_CONNECTS}.parquet", table, header)
    write_text(out_dir / f"{CROSS_CONNECTS}.csv", csv_text(table))
    write_text(out_dir / f"{WIRING}.csv", csv_text(wiring))
    write_json(out_dir / "plan.json", {k: v for k, v in summary.items() if k != "ocs_configs"})
    return path


def _seconds(v: float) -> str:
    return f"{fmt_number(v)} s"


def _percent(v: float) -> str:
    return f"{fmt_number(100 * v, 3)}%"


def _relative(a: float, b: float) -> str:
    """``a`` beside ``b`` in words: "12.3% below", "4.56% above" or "equal to"."""
    if a < b:
        return f"{_percent(1 - a / b)} below"
    return f"{_percent(a / b - 1)} above" if a > b else "equal to"


def _vs_baselines(who: str, cp: float, near: float, mesh: float) -> str:
    return (
        f"{who} critical path is {_seconds(cp)}, {_relative(cp, near)} the best near-uniform "
        f"wiring's {_seconds(near)} and {_relative(cp, mesh)} the uniform mesh's {_seconds(mesh)}."
    )


def plan_findings(summary: dict[str, Any]) -> list[str]:
    """What a plan answers, in sentences with its numbers (:meth:`Plan.summary`'s keys): the
    critical path beside both baselines, the certified distance from the best any wiring
    can do (and how much of it may be the bound's own slack), why the solver's fractional
    wiring lies outside [bound, plan] when it does, and whether every circuit is realised."""
    s = summary
    cp, lb = s["hard_critical_path_s"], s["lower_bound_s"]
    near, mesh = s["best_near_uniform_critical_path_s"], s["uniform_mesh_critical_path_s"]
    frac = _fractional_sentence(s["fractional_wiring_critical_path_s"], cp, lb)
    return [
        _vs_baselines("The plan's", cp, near, mesh),
        _certificate_sentence(s),
        *([frac] if frac else []),
        _split_sentence(s),
    ]


def _certificate_sentence(s: dict[str, Any]) -> str:
    """The certified gap ``CP / LB − 1`` in words, and how much of it the certificate's
    tolerance (the bound's distance below its relaxation's optimum) may explain."""
    lb, gap, tol = s["lower_bound_s"], s["certified_gap"], s["certificate_tolerance"]
    if gap <= 0:
        return (
            f"No wiring can do better: the critical path equals the certified lower bound "
            f"({_seconds(lb)}; method {s['method']})."
        )
    slack = (
        f"may sit up to {_percent(tol)} below its relaxation's optimum, so all of the gap "
        "may be the bound's slack and the plan optimal"
        if tol >= gap
        else f"is within {_percent(tol)} of its relaxation's optimum; the rest of the gap is "
        "the plan's distance from optimal or the relaxation's integrality gap"
    )
    return (
        f"It is within {_percent(gap)} of the best any wiring can do: no wiring's critical "
        f"path is below the certified lower bound of {_seconds(lb)} (the bound {slack})."
    )


def _fractional_sentence(frac: float, cp: float, lb: float) -> str | None:
    """Why the solver's fractional wiring's critical path lies outside ``[lb, cp]``, when it
    does: it counts fractions of circuits at the continuous rate ``B x + B0`` (below the
    bound's interpolant between integers), and the solver minimises a smoothed, prior-pulled
    cost rather than the hard critical path."""
    if lb * (1 - 1e-9) <= frac <= cp * (1 + 1e-9):
        return None
    where = "above the plan's" if frac > cp else "below the certified lower bound"
    return (
        f"The solver's fractional wiring has a critical path of {_seconds(frac)}, {where}: "
        "it is no bound, as it counts fractions of circuits at their continuous rate and "
        "minimises a smoothed critical path pulled towards the uniform mesh; the plan is the "
        "best integer wiring found from it and the baselines."
    )


def _split_sentence(s: dict[str, Any]) -> str:
    """Whether every circuit is a cross-connect, and the plan's distance from the uniform
    mesh (``circuits_moved_vs_prior``: half the L1 distance between the two wirings)."""
    if not s["split_feasible"]:
        left = sum(k for _, _, k in s["unrealised_circuits"])
        return f"{left:,} circuits could not be split onto the {s['ocs']:,} OCSes."
    n = sum(len(t) for t in s["ocs_configs"])
    return (
        f"All {n:,} circuits of the plan are cross-connects on the {s['ocs']:,} OCSes; it "
        f"differs from the uniform mesh ({s['total_circuits']:,} circuits) by "
        f"{s['circuits_moved_vs_prior']:,} moved circuits (half the L1 distance)."
    )


# Every compared method's name in words, the same in every command and report.
METHOD_LABELS = {
    "entropic": "our plan",
    "milp": "MILP (HiGHS)",
    "uniform": "uniform mesh",
    "best-near-uniform": "best near-uniform wiring",
    "demand": "demand-proportional wiring",
    "traffic-only": "traffic-matrix-only plan",
}


def compare_findings(rows: list[dict[str, Any]]) -> list[str]:
    """:func:`compare`'s rows in sentences: our plan beside both baselines and the MILP, then
    every other method's distance from our plan (nothing without an ``entropic`` row)."""
    by = {r["method"]: r for r in rows}
    if "entropic" not in by:
        return []
    cp = by["entropic"]["hard_critical_path_s"]
    out = []
    if {"uniform", "best-near-uniform"} <= set(by):
        near = by["best-near-uniform"]["hard_critical_path_s"]
        out.append(_vs_baselines("Our plan's", cp, near, by["uniform"]["hard_critical_path_s"]))
    if "milp" in by:
        out.append(_milp_sentence(by["milp"], cp))
    for r in rows:
        if r["method"] in ("demand", "traffic-only"):
            other = r["hard_critical_path_s"]
            out.append(
                f"The {r['label']}'s critical path is {_relative(other, cp)} our plan's "
                f"({_seconds(other)} vs {_seconds(cp)})."
            )
    return out


def _milp_sentence(row: dict[str, Any], cp: float) -> str:
    """Our plan's critical path ``cp`` beside the MILP's row (proven optimum or not)."""
    milp = row["hard_critical_path_s"]
    if not np.isfinite(milp):
        return f"The MILP found no wiring (status {row['status']})."
    what = "proven optimum" if row["status"] == "optimal" else f"best wiring ({row['status']})"
    took = f"HiGHS took {_seconds(row['wall_s'])}"
    where = "equals" if cp == milp else f"is {_relative(cp, milp)}"
    return f"Our plan's critical path {where} the MILP's {what}, {_seconds(milp)} ({took})."


def aggregated_dag(dag: TaskDAG) -> TaskDAG:
    """One phase carrying the iteration's aggregated traffic matrix (directed pod pairs).

    Its hard critical path is the max over pairs of ``8 · bytes_uv / (B x_e + B0)``: the max
    pair utilisation objective of traffic-matrix planners, as a DAG."""
    tot = traffic_from_dag(dag).total()
    src, dst = np.nonzero(tot)
    one = PhaseTraffic(
        dag.n_pods,
        (Phase("aggregate", "aggregate"),),
        np.array([0, src.size]),
        src,
        dst,
        tot[src, dst],
    )
    return dag_from_traffic(one, latency_s=0.0)


def plan_traffic_only(
    dag: TaskDAG, model: OcsModel, b2_rel: float = 50.0, b1_rel: float = 1.0, seed: int = 0
) -> np.ndarray:
    """Ablation E11: the same solver, rounding and polishing on :func:`aggregated_dag` (the
    traffic matrix alone) instead of the job's DAG; returns the integer wiring. A job that
    moves no bytes between pods has an empty matrix: the wiring is the prior's, the uniform
    mesh."""
    agg = aggregated_dag(dag)
    if not (agg.bytes > 0).any():
        return baselines.uniform_mesh(model)
    return plan(agg, model, b1_rel, b2_rel, seed).x


def compare(
    dag: TaskDAG,
    model: OcsModel,
    b1_rel: float = 1.0,
    b2_rel: float = 50.0,
    seed: int = 0,
    milp_time_limit_s: float = 60.0,
    methods: tuple[str, ...] = (
        "entropic",
        "milp",
        "uniform",
        "best-near-uniform",
        "demand",
        "traffic-only",
    ),
) -> list[dict[str, Any]]:
    """Every method's integer wiring on one instance, scored by the same hard critical path
    (size guard first: :func:`check_plan_size`, field ``pods``); each row names its method
    in words (``label``, :data:`METHOD_LABELS`). A MILP without a wiring scores ``inf``."""
    check_plan_size(dag, model)
    cost = PathCost(dag, model)
    rows = []
    for method in methods:
        t0 = time.perf_counter()
        status = "ok"
        extra: dict[str, Any] = {}
        if method == "entropic":
            x = plan(dag, model, b1_rel, b2_rel, seed).x
        elif method == "milp":
            from trainfabric.ocs.wiring.milp import solve_milp

            m = solve_milp(dag, model, time_limit_s=milp_time_limit_s)
            x, status = m.x, m.status
            extra = {"best_bound_s": m.best_bound_s, "mip_gap": m.gap, "solver": m.solver}
        elif method == "uniform":
            x = baselines.uniform_mesh(model)
        elif method == "best-near-uniform":
            x = baselines.best_near_uniform(cost, model, seed=seed)
        elif method == "demand":
            x = baselines.demand_proportional(dag, model)
        elif method == "traffic-only":
            x = plan_traffic_only(dag, model, b2_rel, b1_rel, seed)
        else:
            raise ConfigError("methods", f"unknown method '{method}'")
        wall = time.perf_counter() - t0
        rows.append(
            {
                "method": method,
                "label": METHOD_LABELS[method],
                "hard_critical_path_s": float("inf") if x is None else cost.hard(x),
                "wall_s": wall,
                "status": status,
                **extra,
            }
        )
    return rows
