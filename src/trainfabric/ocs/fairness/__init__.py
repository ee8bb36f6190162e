"""Several jobs on one wiring: weighted power-mean fairness
(docs/ocs.md §1.12, issue 13 item 4, E9).

Modules: :mod:`.jobs` (placement, byte shares), :mod:`.means` (power means), :mod:`.cost`
(``Φ_p``), :mod:`.rounding` (local search on the hard ``Φ_p``), :mod:`.plan` (one wiring per
``p``), :mod:`.alpha` (α-fair equivalence), :mod:`.sweep` (a study over several ``p``).

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
the single-job :class:`~trainfabric.ocs.wiring.cost.PathCost` of its DAG with every transfer's bytes
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
:func:`~trainfabric.ocs.wiring.solver.solve` (mirror descent) applies unchanged.

**α-fairness** (:func:`alpha_fair_check`): throughputs ``y_j = 1/v_j``, the α-fair utility
``Σ_j ω_j y_j^(1−α)/(1−α) = −Σ_j ω_j v_j^(α−1)/(α−1)``; maximising it minimises ``Φ_{α−1}^(α−1)``,
a strictly increasing function of ``Φ_{α−1}``, so the two *unregularised* problems have the
same minimisers. The solver's regularised problem ``Φ + KL(w||q)/b1`` is not invariant under a
monotone transform, so the check compares the unregularised optima (at the same ``b2``), each
found from its own objective — ``Φ_p`` by :func:`power_mean_optimum`, the utility, written
from the per-job throughputs (in log form, :func:`alpha_fair_log_loss`, so that no power
``y^(1−α)`` under- or overflows at large ``p``), by :func:`alpha_fair_optimum` — by SLSQP and
then Newton on that objective's own KKT conditions (:func:`kkt_polish`: SLSQP stops on
changes of the objective, which leaves flat directions undetermined to ~1e-4), over the pairs
that carry traffic (the others enter neither objective). Were ``p ≠ α − 1`` the two KKT
points would differ (a test shows they do). On those pairs ``Φ_p∘U`` is strictly convex in
exact arithmetic (every transfer's duration is strictly convex in its pair's circuits and has
Gibbs mass ``> 0``), but a transfer far off every near-critical path has a mass that underflows
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

**Rounding** (:func:`round_fair`): :func:`~trainfabric.ocs.wiring.rounding.round_wiring` searches
the hard critical path of *one* PathCost, so it cannot take ``Φ_p``. Here: starts from
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

from trainfabric.lazy import exports

_EXPORTS = {
    "power_mean_optimum": "alpha",
    "kkt_polish": "alpha",
    "alpha_fair_utility": "alpha",
    "alpha_fair_log_loss": "alpha",
    "alpha_fair_optimum": "alpha",
    "alpha_fair_check": "alpha",
    "FairnessCost": "cost",
    "FairJob": "jobs",
    "embed": "jobs",
    "place_jobs": "jobs",
    "byte_shares": "jobs",
    "shared_dags": "jobs",
    "side_by_side": "jobs",
    "check_p": "means",
    "power_mean": "means",
    "power_mean_grad": "means",
    "smooth_max": "means",
    "jain": "means",
    "p_label": "means",
    "FairPlan": "plan",
    "temperatures_for": "plan",
    "fair_plan": "plan",
    "share_wirings": "plan",
    "trade_off": "plan",
    "DEFAULT_EVALS": "rounding",
    "hard_key": "rounding",
    "better": "rounding",
    "local_search": "rounding",
    "FairRound": "rounding",
    "round_fair": "rounding",
    "study": "sweep",
}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = exports(__name__, _EXPORTS)
