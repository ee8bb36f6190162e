"""A certified lower bound on the integer optimum of the hard critical path
(docs/ocs.md §1.5, §1.9 A).

The integer problem: minimise ``CP(x) = max_π Σ_{i∈π} t_i(x)`` over integer wirings with
``Σ_u x_uv ≤ d_v`` (dark ports allowed) and ``0 ≤ x_e ≤ K_e = min(d_u, d_v)``, where a comm
node ``m`` on pair ``e`` lasts ``t_m = a_m + β_m f(x_e)``, ``β_m = 8·bytes_m`` (bits),
``f(k) = 1/(B k + B0)`` (s/bit).

**Relaxation.** ``φ_e`` is the piecewise-linear interpolant of ``f`` between consecutive
integers (the upper envelope of the MILP's secant cuts): convex, equal to ``f`` at every
integer, so replacing ``f`` by ``φ`` and letting ``x`` be fractional gives a convex problem
whose optimum ``R*`` is at most the integer optimum (the LP relaxation of the secant-cut MILP,
``milp.solve_milp(relax=True)``, solves exactly this problem on small instances).

**Dual bound (weak duality twice).** Let ``μ`` be the node marginals of any probability law
over source-to-sink paths (a unit flow; the Gibbs marginals of :class:`~.cost.PathCost` are
one). Then ``CP(x) ≥ Σ_i μ_i t_i(x) = C(μ) + Σ_e W_e f(x_e)`` with ``C(μ) = Σ_i μ_i p_i +
Σ_m μ_m a_m`` and ``W_e = Σ_{m on e} μ_m β_m``, and for pod prices ``λ ≥ 0``::

    R* ≥ LB(μ, λ) = C(μ) + Σ_e h_e(λ_u + λ_v) − Σ_v λ_v d_v,
    h_e(c) = min_{0 ≤ x ≤ K_e} W_e φ(x) + c x = min_{k ∈ {0..K_e}} W_e f(k) + c k,

the inner minimum being at an integer because ``W_e φ + c x`` is piecewise linear with
integer breakpoints. ``h_e`` is evaluated in closed form: the slope on ``[k, k+1]`` is
``c − W_e B / ((Bk + B0)(B(k+1) + B0))``, increasing in ``k``, so the minimiser is the first
``k`` where it turns non-negative: ``k* = ceil((z* − B0) / B)`` clipped to ``[0, K_e]`` with
``z*`` the positive root of ``z (z + B) = W_e B / c`` (the three integers around ``k*`` are
compared, which makes the float rounding of the root harmless). Any ``μ`` and any ``λ ≥ 0``
give a valid bound; the work goes into making it tight:

* ``λ`` for a given ``μ``: the inner problem ``min Σ_e W_e φ(x_e)`` over the relaxed
  polytope is the LP of a fractional b-matching with one unit-capacity column per pair and
  segment ``[k, k+1]`` (cost ``W_e (f(k+1) − f(k)) < 0``). HiGHS solves it; its row duals are
  the prices (only used as numbers: the bound is re-evaluated exactly from them).
* ``μ``: ``LB`` is concave in ``μ`` and its supergradient is the node durations at the inner
  minimiser ``x*(μ)``. Starting from the Gibbs marginals at the plan's wirings, the
  certificate mixes in the Gibbs marginals under the durations at ``x*(μ)`` (a smoothed
  best response, step ``2/(k+3)``) and keeps the best bound. Every ``x*(μ)`` is feasible for
  the relaxation, so ``U_R = min_k CP_φ(x*(μ_k))`` bounds ``R*`` from above.

Reported: ``lower_bound_s`` (``max_k LB``, times ``1 − 1e-9`` for float rounding in ``μ``),
``tolerance = U_R / lower_bound_s − 1`` (how far the bound may sit below the relaxation's own
optimum: the certificate's duality gap), and the plan's ``certified_gap = CP(x) /
lower_bound_s − 1``. Only pairs with ``W_e > 0`` enter the LP (``h_e = 0`` otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass

import highspy
import numba
import numpy as np
import scipy.sparse as sp

from trainfabric.errors import ConfigError
from trainfabric.ocs.highs import quiet_highs
from trainfabric.ocs.model import OcsModel
from trainfabric.ocs.wiring.search import classes_of

LP_COLUMNS = 20_000  # default size budget of the restricted master (segment columns)
LP_WORK = 200_000_000  # default budget: segment columns² x rounds
_SAFETY = 1e-9  # relative allowance for float rounding in the flow μ (conservation to ~1e-15)


@dataclass
class Certificate:
    """A lower bound on the integer optimum of the hard critical path (seconds).

    ``lower_bound_s`` ≤ every integer wiring's critical path: the larger of
    ``relaxation_bound_s`` (≤ the relaxation's optimum) and the class disjunction's bound
    (:func:`_class_disjunction`, which may exceed the relaxation's optimum);
    ``relaxation_upper_s`` ≥ the relaxation's optimum (the critical path under ``φ`` of a
    feasible fractional wiring); ``tolerance = relaxation_upper_s / relaxation_bound_s − 1``
    (the relaxation's duality gap); ``rounds``: LP rounds after the starts.
    ``success``: the bound is positive and finite (so that :meth:`gap` is finite);
    ``message``: the bound and its tolerance.
    """

    lower_bound_s: float
    relaxation_upper_s: float
    tolerance: float
    rounds: int
    relaxation_bound_s: float = np.nan

    @property
    def success(self) -> bool:
        return bool(0 < self.lower_bound_s < np.inf)

    @property
    def message(self) -> str:
        return (
            f"lower bound {self.lower_bound_s:.6g} s, tolerance {self.tolerance:.3g} "
            f"after {self.rounds} rounds"
        )

    def gap(self, critical_path_s: float) -> float:
        """``CP / lower_bound − 1``: how far a wiring of critical path ``CP`` can be from the
        integer optimum, at most."""
        return critical_path_s / self.lower_bound_s - 1.0


class Relaxation:
    """The relaxed problem of the module doc for one DAG on one OCS model."""

    def __init__(
        self,
        cost,
        model: OcsModel,
        limit: np.ndarray | None = None,
        lower: np.ndarray | None = None,
        pinned: np.ndarray | None = None,
    ):
        """``limit`` [P]: segments kept in the LPs (tightness only); ``lower`` [P]: circuit
        lower bounds ``x_e ≥ lower_e`` (a branch of :func:`_class_disjunction`; the problem
        is then the relaxation restricted to them); ``pinned`` (bool [N]): comm nodes that run
        at the fallback rate whatever the wiring (constant ``a + β f(0)``)."""
        self.cost = cost
        self.model = model
        self.pinned = pinned
        dag = cost.dag
        comm, pair = cost.comm_nodes, cost.comm_pair
        fixed = dag.duration_s.astype(float).copy()
        fixed[comm] = dag.latency_s[comm]
        if pinned is not None:
            held = comm[pinned[comm]]
            fixed[held] += 8.0 * dag.bytes[held] / model.fallback_bps
            comm, pair = comm[~pinned[comm]], pair[~pinned[comm]]
        self.comm = comm
        self.pair = pair
        self.bits = 8.0 * dag.bytes[comm]
        self.fixed = fixed
        iu, iv = model.pairs
        self.iu, self.iv = iu, iv
        self.cap = np.minimum(model.degrees[iu], model.degrees[iv]).astype(np.int64)
        self.lower = np.zeros(model.n_pairs, np.int64) if lower is None else lower.astype(np.int64)
        traffic = np.bincount(self.pair, self.bits, model.n_pairs) > 0
        self.active = np.flatnonzero(traffic | (self.lower > 0))
        position = np.zeros(model.n_pairs, dtype=np.int64)
        position[self.active] = np.arange(self.active.size)
        self.comm_active = position[self.pair]  # every comm node's pair, indexed in ``active``
        lim = self.cap if limit is None else np.minimum(self.cap, np.asarray(limit, np.int64))
        caps = np.maximum(lim, self.lower)[self.active]
        self.seg_local = np.repeat(np.arange(self.active.size), caps)
        self.seg_pair = self.active[self.seg_local]
        self.seg_k = np.arange(self.seg_pair.size) - np.repeat(np.cumsum(caps) - caps, caps)
        self.seg_lo = (self.seg_k < self.lower[self.seg_pair]).astype(float)
        self._inner_lp = None

    # -- durations ---------------------------------------------------------------------------

    def f(self, k: np.ndarray) -> np.ndarray:
        """``f(k) = 1 / (B k + B0)`` (s/bit)."""
        return 1.0 / (self.model.rate_bps * k + self.model.fallback_bps)

    def phi(self, x: np.ndarray) -> np.ndarray:
        """``φ(x)``: ``f`` interpolated linearly between consecutive integers."""
        lo = np.floor(x)
        frac = x - lo
        return (1.0 - frac) * self.f(lo) + frac * self.f(lo + 1.0)

    def durations(self, x: np.ndarray) -> np.ndarray:
        """Node durations (s) under ``φ`` at the fractional wiring ``x`` (``φ`` evaluated on
        the pairs with traffic only: ``O(active + comm)``, not ``O(P)``)."""
        t = self.fixed.copy()
        phi = self.phi(np.asarray(x, dtype=float)[self.active])
        t[self.comm] += self.bits * phi[self.comm_active]
        return t

    def equivalent(self, x: np.ndarray) -> np.ndarray:
        """``x̃`` [P] with ``f(x̃_e) = φ(x_e)``: ``x̃ = (1/φ(x) − B0) / B`` (``f`` is a bijection
        of ``[0, ∞)`` onto ``(0, 1/B0]``), ``x̃ = x`` where ``x`` is an integer. Durations under
        ``φ`` at ``x`` are the cost's durations at ``x̃`` (to a few ulps), so the cost's
        compressed sweeps serve the relaxation (measured at 1,024 MoE pods: the critical path
        0.04 -> 0.01 s, the Gibbs marginals 0.11 -> 0.05 s)."""
        x = np.array(x, dtype=float)
        on = x[self.active]  # the other pairs carry no comm node
        tilde = (1.0 / self.phi(on) - self.model.fallback_bps) / self.model.rate_bps
        x[self.active] = np.where(on == np.floor(on), on, tilde)
        return x

    def critical_path(self, x: np.ndarray) -> float:
        """``CP_φ(x)``: the hard critical path under the interpolated durations (on the
        cost's compressed DAG at :meth:`equivalent` unless comm nodes are pinned)."""
        if self.pinned is None:
            return self.cost.hard(self.equivalent(x))
        return self.cost.dag.critical_path(self.durations(x))

    def gibbs_weights(self, x: np.ndarray, b2: float, phi: bool = True) -> tuple[float, np.ndarray]:
        """:meth:`weights` of the Gibbs node marginals at inverse temperature ``b2`` (1/s)
        under the durations at ``x``: the interpolated ones (``phi``) or the cost's own. On the
        cost's compressed DAG (:meth:`.cost.PathCost.flow_weights`, at :meth:`equivalent` for
        ``φ``) unless comm nodes are pinned."""
        if self.pinned is None:
            return self.cost.flow_weights(self.equivalent(x) if phi else x, b2)
        mu = self.cost.gibbs(self.durations(x), b2) if phi else self.cost.marginals(x, b2)
        return self.weights(mu)

    # -- the bound for one flow --------------------------------------------------------------

    def weights(self, mu: np.ndarray) -> tuple[float, np.ndarray]:
        """``(C(μ), W)``: the fixed part ``Σ μ_i p_i + Σ μ_m a_m`` (s) and the per-pair
        weights ``W_e = Σ_{m on e} μ_m β_m`` (bits)."""
        const = float(mu @ self.fixed)
        w = np.bincount(self.pair, mu[self.comm] * self.bits, minlength=self.model.n_pairs)
        return const, w

    def inner(self, w: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """Prices ``λ ≥ 0`` and the minimiser ``x*`` of ``Σ_e W_e φ(x_e)`` over the relaxed
        polytope, by the segment LP of the module doc on the segments ``k < limit_e`` (one
        HiGHS instance; a new ``W`` only changes the column costs, and the simplex restarts
        from the previous basis). The prices are exact for the full problem whatever the
        limit (:meth:`dual_value` takes every ``k ≤ K_e``); the limit only trades tightness
        for LP size. ``x*`` is feasible for the relaxation; ``(λ = 0, None)`` when the LP fails
        (:func:`_optimal`)."""
        model = self.model
        cost = w[self.seg_pair] * (self.f(self.seg_k + 1.0) - self.f(self.seg_k))
        scale = 1.0 / max(np.abs(cost).max(initial=0.0), 1e-300)
        if self._inner_lp is None:
            cols = np.arange(self.seg_pair.size)
            a = sp.csr_matrix(
                (
                    np.ones(2 * cols.size),
                    (
                        np.concatenate([self.iu[self.seg_pair], self.iv[self.seg_pair]]),
                        np.tile(cols, 2),
                    ),
                ),
                shape=(model.n, cols.size),
            )
            n_rows, n_cols = a.shape
            self._inner_lp = _highs(
                cost * scale,
                self.seg_lo,
                np.ones(n_cols),
                a,
                np.full(n_rows, -np.inf),
                model.degrees.astype(float),
            )
        else:
            idx = np.arange(cost.size, dtype=np.int32)
            self._inner_lp.changeColsCost(cost.size, idx, cost * scale)
        solved = _optimal(self._inner_lp)
        if solved is None:
            return np.zeros(model.n), None
        y, duals = solved
        lam = np.maximum(-duals / scale, 0.0)
        x = np.bincount(self.seg_pair, y, minlength=model.n_pairs)
        return lam, x

    def dual_value(self, w: np.ndarray, lam: np.ndarray) -> float:
        """``Σ_e h_e(λ_u + λ_v) − Σ_v λ_v d_v`` (seconds), exact for the given prices."""
        active = np.flatnonzero((w > 0) | (self.lower > 0))
        c = lam[self.iu[active]] + lam[self.iv[active]]
        m = self.model
        h = _h(w[active], c, self.cap[active], m.rate_bps, m.fallback_bps, self.lower[active])
        return float(h.sum() - lam @ m.degrees)

    def bound(self, const: float, w: np.ndarray) -> tuple[float, np.ndarray | None]:
        """``(LB(μ, λ(μ)), x*(μ))`` for a flow ``μ`` given by its :meth:`weights` ``(C(μ), W)``
        (``x*`` None when the LP failed)."""
        lam, x = self.inner(w)
        return const + self.dual_value(w, lam), x


def _h(w, c, cap, rate, fallback, lo=None) -> np.ndarray:
    """``h(c) = min_{k ∈ lo..cap} W f(k) + c k`` per pair (vectorised, exact; see module doc;
    ``lo`` defaults to 0).

    ``z* = 2a / (r + sqrt(r² + 4a))``, ``a = W r / c`` (the root without cancellation;
    ``c = 0`` gives ``a = ∞``, ``k* = cap``). The best of the three integers around ``k*`` is
    kept only where it is a local (hence, by convexity, global) minimum of the sequence; any
    other pair is minimised by enumerating ``0..cap``, so float error can never raise ``h``."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        a = w * rate / c
        z = np.where(a > 1e200, np.sqrt(a), 2.0 * a / (rate + np.sqrt(rate * rate + 4.0 * a)))
        k = np.ceil((z - fallback) / rate)
    lo = np.zeros_like(cap) if lo is None else np.minimum(lo, cap)
    k = np.clip(np.where(np.isnan(k), 0.0, k), lo, cap)

    def val(kk):
        return w / (rate * kk + fallback) + c * kk

    cands = np.stack([np.clip(k + dk, lo, cap) for dk in (-1.0, 0.0, 1.0)])
    best_k = np.take_along_axis(cands, np.argmin(val(cands), axis=0)[None], axis=0)[0]
    best = val(best_k)
    local = (val(np.maximum(best_k - 1, lo)) >= best) & (val(np.minimum(best_k + 1, cap)) >= best)
    for i in np.flatnonzero(~local):
        ks = np.arange(lo[i], cap[i] + 1.0)
        best[i] = (w[i] / (rate * ks + fallback) + c[i] * ks).min()
    return best


def _optimal(h: highspy.Highs) -> tuple[np.ndarray, np.ndarray] | None:
    """Run ``h``: its primal and row duals, or None when HiGHS ends without an optimum even
    after a second try from scratch with presolve (the warm-started simplex can stall on a
    degenerate master). The bound never depends on it: prices ``λ = 0`` are valid too."""
    h.run()
    if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
        h.clearSolver()
        h.setOptionValue("presolve", "on")
        h.run()
        h.setOptionValue("presolve", "off")
        if h.getModelStatus() != highspy.HighsModelStatus.kOptimal:
            return None
    sol = h.getSolution()
    return np.asarray(sol.col_value), np.asarray(sol.row_dual)


@numba.njit(cache=True, nogil=True)
def _longest_path_nodes(indptr, indices, dur):  # pragma: no cover - compiled
    """Indicator (0/1 floats) of one longest root-to-leaf path under durations ``dur``."""
    n = dur.size
    start = np.zeros(n)
    pred = np.full(n, -1, dtype=np.int64)
    best, end = -1.0, 0
    for i in range(n):
        finish = start[i] + dur[i]
        if indptr[i] == indptr[i + 1] and finish > best:
            best, end = finish, i
        for k in range(indptr[i], indptr[i + 1]):
            j = indices[k]
            if finish > start[j] or pred[j] < 0:
                start[j] = max(start[j], finish)
                if finish >= start[j]:
                    pred[j] = i
    mu = np.zeros(n)
    i = end
    while i >= 0:
        mu[i] = 1.0
        i = pred[i]
    return mu


class _Master:
    """The restricted master LP over a pool of flows ("atoms", column generation on ``μ``)::

        min T  s.t.  T ≥ C_j + Σ_e W_je φ(x_e)  (atom j),  Σ_{e∋v} x_e ≤ d_v,  0 ≤ x ≤ K,

    with ``φ(x_e) = f(0)·s_e``, ``s_e = 1 + Σ_k (f(k+1) − f(k))/f(0) · y_ek``, ``x_e = Σ_k y_ek``,
    ``0 ≤ y ≤ 1`` (exact: the slopes increase with ``k``, so an optimal ``y`` fills the segments
    in order). Times are divided by the first atom's value at ``x = 0`` so HiGHS sees numbers
    of order 1. Its value is ``min_x max_j`` of valid lower bounds on ``CP_φ``; the duals ``α``
    of the atom rows (a convex combination) and ``λ`` of the degree rows are re-evaluated
    exactly by :meth:`Relaxation.dual_value`, so the reported bound never rests on the LP's
    tolerances. New atoms are added as rows to the same HiGHS instance, which re-solves from
    the previous basis (dual simplex warm start); the first solve, from no basis, is presolved
    (measured: 0.20 -> 0.11 s on the 256-pod MoE master, 0.23 -> 0.14 s on pp-dp).
    """

    def __init__(self, rel: Relaxation, const: float, w: np.ndarray):
        self.rel = rel
        pairs = self.pairs = rel.active
        m = rel.model
        col_pair, k = rel.seg_local, rel.seg_k
        self.col_pair = col_pair
        self.f0 = rel.f(0.0)
        self.scale = 1.0 / (const + self.f0 * w.sum())
        n_y, n_p = col_pair.size, pairs.size
        self.t_col = n_y + n_p
        y_cols, s_cols = np.arange(n_y), n_y + np.arange(n_p)
        slope = (rel.f(k + 1.0) - rel.f(k)) / self.f0
        rows = np.concatenate([col_pair, np.arange(n_p), rel.iu[pairs][col_pair] + n_p])
        rows = np.concatenate([rows, rel.iv[pairs][col_pair] + n_p])
        cols = np.concatenate([y_cols, s_cols, y_cols, y_cols])
        vals = np.concatenate([-slope, np.ones(n_p), np.ones(2 * n_y)])
        a = sp.csr_matrix((vals, (rows, cols)), shape=(n_p + m.n, self.t_col + 1))
        cost = np.zeros(self.t_col + 1)
        cost[-1] = 1.0
        self.h = _highs(  # the first solve is presolved: half its time at 256 pods and more
            cost,
            np.concatenate([rel.seg_lo, np.full(n_p + 1, -np.inf)]),
            np.concatenate([np.ones(n_y), np.full(n_p + 1, np.inf)]),
            a,
            np.concatenate([np.ones(n_p), np.full(m.n, -np.inf)]),
            np.concatenate([np.ones(n_p), m.degrees.astype(float)]),
        )
        self.h.setOptionValue("presolve", "on")
        self.first_atom_row = n_p + m.n
        self.consts: list[float] = []
        self.weights: list[np.ndarray] = []
        self.add(const, w)

    def add(self, const: float, w: np.ndarray) -> None:
        """Add the row ``T − Σ_e W_e f(0) s_e ≥ C`` (scaled) for a new atom."""
        wp = w[self.pairs]
        self.consts.append(const)
        self.weights.append(wp)
        nz = np.flatnonzero(wp > 0)
        idx = np.concatenate([self.col_pair.size + nz, [self.t_col]]).astype(np.int32)
        val = np.concatenate([-wp[nz] * self.f0 * self.scale, [1.0]])
        self.h.addRow(const * self.scale, np.inf, idx.size, idx, val)

    def solve(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """``(x, α, λ)``: the master's wiring [P], atom weights (sum 1) and prices ``λ ≥ 0``;
        None when the LP fails (:func:`_optimal`)."""
        n = self.rel.model.n
        solved = _optimal(self.h)
        self.h.setOptionValue("presolve", "off")  # the re-solves start from this basis
        if solved is None:
            return None
        col, dual = solved
        x = np.zeros(self.rel.model.n_pairs)
        x[self.pairs] = np.bincount(self.col_pair, col[: self.col_pair.size], self.pairs.size)
        alpha = np.maximum(dual[self.first_atom_row :], 0.0)
        alpha = alpha / alpha.sum() if alpha.sum() > 0 else np.full(alpha.size, 1.0 / alpha.size)
        lam = np.maximum(-dual[self.first_atom_row - n : self.first_atom_row] / self.scale, 0.0)
        return x, alpha, lam

    def mixture(self, alpha: np.ndarray) -> tuple[float, np.ndarray]:
        """``(C, W)`` of the convex combination ``Σ_j α_j`` (atom j) over all pairs."""
        w = np.zeros(self.rel.model.n_pairs)
        w[self.pairs] = alpha @ np.array(self.weights)
        return float(alpha @ np.array(self.consts)), w


def _highs(cost, col_lo, col_hi, a: sp.csr_matrix, row_lo, row_hi) -> highspy.Highs:
    """A quiet single-threaded HiGHS instance holding ``min cost·z  s.t.  row_lo ≤ A z ≤
    row_hi, col_lo ≤ z ≤ col_hi``."""
    n_rows, n_cols = a.shape
    lp = highspy.HighsLp()
    lp.num_col_, lp.num_row_ = n_cols, n_rows
    lp.sense_ = highspy.ObjSense.kMinimize
    lp.col_cost_, lp.col_lower_, lp.col_upper_ = cost, col_lo, col_hi
    lp.row_lower_, lp.row_upper_ = row_lo, row_hi
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.num_col_, lp.a_matrix_.num_row_ = n_cols, n_rows
    lp.a_matrix_.start_ = a.indptr.astype(np.int32)
    lp.a_matrix_.index_ = a.indices.astype(np.int32)
    lp.a_matrix_.value_ = a.data.astype(float)
    h = quiet_highs()
    for name, value in (
        ("output_flag", False),
        ("threads", 1),
        ("random_seed", 0),
        ("presolve", "off"),
        ("solver", "simplex"),
    ):
        h.setOptionValue(name, value)
    h.passModel(lp)
    return h


def default_rounds(columns: int) -> int:
    """The default work budget: ``LP_WORK / columns²`` rounds, between 1 and 64 (a simplex
    solve of the segment LPs costs about quadratically in their columns: measured 0.01 s at
    2,000 columns, 0.1-0.5 s at 13,000, 2 s at 35,000)."""
    return int(np.clip(LP_WORK // max(columns, 1) ** 2, 1, 64))


def _check_starts(model: OcsModel, starts) -> list[np.ndarray]:
    out = []
    for i, x in enumerate(starts):
        x = np.asarray(x, dtype=float)
        if x.shape != (model.n_pairs,) or not (x >= 0).all():
            raise ConfigError(f"starts[{i}]", f"needs {model.n_pairs} circuit counts >= 0")
        if (model.pod_degrees(x) > model.degrees * (1 + 1e-6)).any():
            raise ConfigError(f"starts[{i}]", "uses more ports than a pod has")
        out.append(x)
    if not out:
        raise ConfigError("starts", "needs at least one wiring")
    return out


def certify(
    cost,
    model: OcsModel,
    starts: list[np.ndarray],
    b2: float,
    rounds: int | None = None,
    rtol: float = 1e-3,
    disjunction: bool = True,
    master_columns: int = LP_COLUMNS,
) -> Certificate:
    """A :class:`Certificate` for ``cost`` (a PathCost) on ``model``.

    ``rounds`` is the work budget: LP solves after the starts (each with one Gibbs sweep and
    one longest-path sweep); by default :func:`default_rounds` of the LP's segment columns
    (64 on small instances, 1 at 256 and 1,024 pods). ``master_columns`` (``LP_COLUMNS`` by
    default) is the size budget of steps 2 and 3: they run only where the LPs have at most
    that many segment columns (a master solve costs about quadratically in them: 0.5 s at
    10,000 columns, 3 s with step 3 at 20,000, measured at 512 and 1,024 pods).

    1. **Flows by smoothed best response**: start from the best of the Gibbs marginals at
       ``b2`` (1/s) of the feasible wirings in ``starts`` (e.g. the fractional solution and
       the integer plan); at each step, mix in (weight ``2/(k+3)``) the Gibbs marginals at
       ``b2`` under ``φ`` at the inner minimiser ``x*(μ)`` — a Frank–Wolfe step on the
       concave ``LB(μ)`` with a smoothed linear oracle. Every flow met is kept as an atom.
       Half the rounds; all of them when the LPs have more than ``master_columns`` columns.
    2. **Restricted master** (:class:`_Master`, up to ``master_columns`` columns: above, one
       master solve costs seconds) over the atoms, then column generation: the master's
       wiring prices two new atoms (Gibbs marginals and one longest path under ``φ``) until
       ``CP_φ(x) ≤ (1 + rtol)·bound`` or the budget is spent. The master's optimum dominates
       every atom and every mixture of them.

    The LPs keep the segments ``k < 2·ceil(max_start x_e) + 2`` of each pair (their prices
    are re-evaluated over every ``k ≤ K_e``, so the limit costs tightness, never validity).
    The relaxation upper bound is the least ``CP_φ`` over the feasible fractional wirings
    met (the starts, the inner minimisers, their running average, the master's wirings).

    3. **Class disjunction** (``disjunction``, only where the LPs have at most
       ``master_columns`` columns: it costs two more runs of steps 1-2):
       :func:`_class_disjunction` splits the integer wirings on the pair class that the
       relaxation's best wiring gives the most fractions of a circuit; the bound is the larger
       of the relaxation's and the split's (measured 2026-12-06 on the hard families at 16
       pods, 8 ports: +9.1% on dp-ep, +1.4% on pp-dp, < 0.01% elsewhere).
    """
    starts = _check_starts(model, starts)
    if not max(cost.hard(x) for x in starts) > 0:
        raise ConfigError("workload", "the critical path is zero on every start: nothing to bound")
    if rounds is not None and (int(rounds) != rounds or rounds < 1):
        raise ConfigError("rounds", f"must be a positive integer, got {rounds}")
    if not (isinstance(master_columns, (int, np.integer)) and master_columns >= 0):
        raise ConfigError("master_columns", f"must be an integer >= 0, got {master_columns!r}")
    limit = 2 * np.ceil(np.max(starts, axis=0)) + 2
    rel = Relaxation(cost, model, limit=limit)
    best, upper, done, x_up = _bound(rel, starts, b2, rounds, rtol, master_columns)
    lower = best * (1.0 - _SAFETY)
    split = -np.inf
    if disjunction and rel.seg_pair.size <= master_columns:  # two more bounds: small LPs only
        split = _class_disjunction(
            cost, model, starts, b2, (rounds, rtol, master_columns), limit, x_up
        )
    return Certificate(
        max(lower, split * (1.0 - _SAFETY)),
        upper,
        upper / lower - 1.0,
        done,
        relaxation_bound_s=lower,
    )


def _bound(rel: Relaxation, starts, b2, rounds, rtol, master_columns):
    """Steps 1-2 of :func:`certify` on ``rel``: ``(best bound, relaxation upper bound, rounds
    done, the fractional wiring of that upper bound)``."""
    columns = rel.seg_pair.size
    rounds = default_rounds(columns) if rounds is None else rounds
    use_master = columns <= master_columns
    fw_steps = rounds // 2 if use_master else rounds
    atoms, best, upper, x_up = [], -np.inf, np.inf, starts[0]

    def better(x, upper, x_up):
        cp = rel.critical_path(x)
        return (cp, x) if cp < upper else (upper, x_up)

    for x in starts:
        atom = rel.gibbs_weights(x, b2, phi=False)
        atoms.append(atom)
        lb, xs = rel.bound(*atom)
        upper, x_up = better(x, upper, x_up)
        if xs is not None:
            upper, x_up = better(xs, upper, x_up)
        if lb > best:
            best, mixed, x_star = lb, atom, xs
    x_avg, done = x_star, 0
    for k in range(fw_steps if x_star is not None else 0):
        done += 1
        response = rel.gibbs_weights(x_star, b2)
        atoms.append(response)
        step = 2.0 / (k + 3.0)  # (C, W) are linear in μ: mixing them mixes the flows
        mixed = (
            (1.0 - step) * mixed[0] + step * response[0],
            (1.0 - step) * mixed[1] + step * response[1],
        )
        lb, x_star = rel.bound(*mixed)
        best = max(best, lb)
        if x_star is None:
            break
        x_avg = (1.0 - step) * x_avg + step * x_star
        upper, x_up = better(x_star, upper, x_up)
        upper, x_up = better(x_avg, upper, x_up)
    if use_master and rounds > fw_steps:
        best, upper, done, x_up = _column_generation(
            rel, atoms, b2, rounds - fw_steps, rtol, best, upper, done, x_up
        )
    return best, upper, done, x_up


def _class_disjunction(cost, model, starts, b2, budget, limit, x_rel) -> float:
    """A lower bound from splitting the integer wirings on one pair class ``K`` (the traffic
    roles of :func:`.search.pair_classes`: pairs whose transfers run in the same phases).

    Every integer wiring either (A) gives every pair of ``K`` at least one circuit, or (B)
    leaves some pair ``e* ∈ K`` on the fallback network. In (B), ``e*`` has a transfer in
    every phase ``g`` of ``K`` (they share their phases), so each such phase lasts at least
    ``L_g = min_{m ∈ g on K} a_m + β_m f(0)``: pinning the member ``m_g`` that attains
    ``L_g`` at the fallback rate (constant ``L_g``; it is never longer than the phase) leaves
    the critical path of every wiring of (B) unchanged. So ``min(LB_A, LB_B)`` is a lower
    bound on the integer optimum, ``LB_A`` the bound of the relaxation with ``x_e ≥ 1`` on
    ``K`` (+∞ when a pod has fewer ports than pairs of ``K``) and ``LB_B`` that of the
    relaxation with the members ``m_g`` pinned. The relaxation cannot see this either/or:
    it gives the class fractions of a circuit (``φ`` drops steeply between 0 and 1 circuit),
    the integer optimum all or none.

    ``K`` is the class with the most fractional circuits below one in the relaxation's
    wiring ``x_rel`` (``Σ_{e∈K, x_e<1} x_e``, e.g. the best relaxed wiring :func:`_bound`
    met); -∞ (no bound) when no class has any."""
    dag = cost.dag
    comm = np.asarray(cost.comm_nodes, dtype=np.int64)
    group = cost.compressed.comm_bundle
    pair = np.asarray(cost.comm_pair, dtype=np.int64)
    classes = classes_of(pair, group, model.n_pairs)
    below = np.where(x_rel < 1, x_rel, 0.0)
    keep = classes >= 0
    frac = np.bincount(classes[keep], below[keep], minlength=classes.max() + 1)
    if frac.size == 0 or frac.max() <= 0:
        return -np.inf
    in_k = classes == int(np.argmax(frac))
    lower = in_k.astype(np.int64)
    lb_a = np.inf
    if (model.pod_degrees(lower) <= model.degrees).all():
        rel_a = Relaxation(cost, model, limit=limit, lower=lower)
        lb_a = _bound(rel_a, starts, b2, *budget)[0]
    members = np.flatnonzero(in_k[pair])
    fall = dag.latency_s[comm[members]] + 8.0 * dag.bytes[comm[members]] / model.fallback_bps
    order = np.lexsort((fall, group[members]))
    first = np.r_[True, np.diff(group[members][order]) != 0]
    pinned = np.zeros(dag.n_nodes, dtype=bool)
    pinned[comm[members[order[first]]]] = True
    lb_b = _bound(Relaxation(cost, model, limit=limit, pinned=pinned), starts, b2, *budget)[0]
    return min(lb_a, lb_b)


def _column_generation(rel, atoms, b2, rounds, rtol, best, upper, done, x_up):
    """Step 2 of :func:`certify`: ``(best bound, relaxation upper bound, rounds done, the
    wiring of that upper bound)``."""
    dag = rel.cost.dag
    master = _Master(rel, *atoms[0])
    for atom in atoms[1:]:
        master.add(*atom)
    for _ in range(rounds):
        done += 1
        solved = master.solve()
        if solved is None:
            break
        x, alpha, lam = solved
        const, w = master.mixture(alpha)
        best = max(best, const + rel.dual_value(w, lam))
        cp = rel.critical_path(x)
        if cp < upper:
            upper, x_up = cp, x
        if upper <= (1.0 + rtol) * best:
            break
        master.add(*rel.gibbs_weights(x, b2))
        t = rel.durations(x)
        master.add(*rel.weights(_longest_path_nodes(dag.indptr, dag.indices, t)))
    return best, upper, done, x_up
