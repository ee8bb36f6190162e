"""Entropic proximal gradient (mirror descent) for the free energy on the degree slice (§1.6-1.7).

Problem, for a convex smooth cost ``U`` (seconds) of the normalised wiring ``w`` (``x = M w``
circuits, ``M = Σ_v d_v / 2``), a prior ``q ∈ W`` and the inverse temperature ``b1`` (1/s)::

    min_{w ∈ W}  F(w) = U(w) + KL(w||q) / b1,      W = {w ≥ 0 : Σ_u w_uv = r_v = d_v / M}.

Step ``k`` (Bregman proximal gradient with the negative entropy as mirror map, step ``η``
in 1/s, ``g = ∇_w U(w^k) = M ∇_x U``)::

    w^{k+1} = argmin_{w∈W} <g, w> + KL(w||w^k)/η + KL(w||q)/b1
            = Proj_KL(y → W),   log y = θ log w^k + (1−θ) log q − θ η g,   θ = b1/(b1+η),

computed in log space (``log w`` is carried exactly, ``w`` may underflow) by
:func:`~trainfabric.ocs.wiring.projection.project`, warm-started at the previous duals. The
degree-span part ``c_u + c_v`` of ``g`` (least-squares pod potentials) is removed first: it is
constant on ``W``, so the iterates do not change, but ``log y`` stays in a narrow range.

Step size: backtracking on the Bregman descent test
``U(w+) ≤ U(w) + <g, w+ − w> + KL(w+||w)/η`` (η halves on failure). After an accepted step the
local relative smoothness ``L = (U(w+) − U(w) − <g, w+ − w>) / KL(w+||w)`` is known and the
next trial is ``η ← min(2η, 0.9/L)``: it grows while the cost is flatter than the step
assumes and sits just below ``1/L`` otherwise, so few trials fail. Every accepted step
satisfies, by the three-point property of the prox,

    F(w^{k+1}) ≤ F(w^k) − (1/η + 1/b1)·KL(w^k||w^{k+1})        (F is non-increasing),
    KL(w*||w^{k+1}) ≤ θ_k · KL(w*||w^k),   θ_k = b1/(b1 + η_k)   (linear convergence).

The second bound needs ``w*``, so the solver records what it can see — the sequence of
``F`` and of the step sizes ``KL(w^{k+1}||w^k)`` — and reports ``contraction[k] =
KL(w^{k+2}||w^{k+1}) / KL(w^{k+1}||w^k)``, which tends to the linear rate; a ``callback`` gets
every iterate for measuring ``KL(w*||w^k)`` afterwards.

Stopping. ``log y − log w^k = (1−θ)·(log(q/w^k) − b1 g)``: the step is ``1−θ = η/(b1+η)``
times a direction that vanishes (modulo the degree span ``c_u + c_v``) only at the optimum. So
the solver stops when ``KL(w^{k+1}||w^k) / (1−θ)^2 ≤ tol`` — to first order the KL length of the
full step ``T(w) = argmin_W <g, w'> + KL(w'||q)/b1``, a stationarity measure that does not
shrink with ``η``. (A plain ``KL(w^{k+1}||w^k) ≤ tol`` or relative-``F``-decrease test fires
whenever backtracking makes ``η`` small: on the 64-pod hybrid preset it stopped at twice the
optimal ``F``.) For ``η ≫ b1`` the two tests coincide. ``converged`` is False if ``max_iter``
runs out or 60 halvings of ``η`` all fail the descent test. Each iteration costs one
``value_and_grad`` per trial point (the accepted one is reused at the next step) plus one
warm-started projection.

Annealing (``anneal=True``): continuation in ``b2`` — stages ``b2/16, b2/8, …, b2``, each
warm-started (``w``, duals, ``η``) from the previous one; intermediate stages stop at
``max(tol, 1e-6)``.

Warm start (re-planning after the traffic drifted): ``w0`` (e.g. the previous ``w``),
``duals0`` (its projection duals) and ``eta0`` (its final step size) resume where an earlier
solve stopped; with ``anneal=False`` only the final ``b2`` stage runs.

Dark ports (``inequality=True``): ``W`` becomes ``W≤ = {w ≥ 0 : Σ_u w_uv ≤ r_v}`` (the
projection's duals are ``λ ≥ 0``). On ``W≤`` the degree-span part ``<c_u + c_v, w>`` is no
longer constant, so ``g`` is used as it is (not centred); everything else is unchanged. The
projection onto ``W≤`` is tried as the (cheaper, warm-started) projection onto ``W`` first:
its result ``w = y e^{−λ_u−λ_v}`` satisfies every KKT condition of the ``W≤`` projection when
all its duals are ``λ ≥ 0`` (feasible, all constraints tight, so complementary slackness
holds), and the projection is unique, so that is exact; only when some ``λ_v < 0`` is the
inequality projection run (clipped Sinkhorn: ~4x the sweeps on moe at 256 pods).

Sparse support (``inequality=True``, a cost that names its pairs as ``comm_pair``, at most
``_SPLIT_MAX_SHARE`` of all pairs): off those pairs ``g = 0``, so ``log y`` keeps the product
form ``α_u + α_v`` of ``log q`` and ``log w`` there (the projection only subtracts
``λ_u + λ_v``). The solver fits that form once (:func:`_product_form`), carries it through
every step (``α ← θ α + (1−θ) β − λ``) and hands it to the projection, whose sweeps then cost
``O(n + |T|)`` instead of ``O(P)`` (:class:`.projection.Split`). A gradient seen off the
support sends the rest of the solve back to dense sweeps. The iterates equal the dense
solver's to the rounding of the product form; over a non-converged run rounding differences
grow as they do between two machines, and the tests compare converged optima.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numba
import numpy as np

from trainfabric.errors import ConfigError
from trainfabric.ocs.model import OcsModel
from trainfabric.ocs.wiring.prior import uniform_prior
from trainfabric.ocs.wiring.projection import METHODS, Split, project

_ANNEAL_STAGES = 5  # b2/16 ... b2
_STAGE_TOL = 1e-6
_MAX_BACKTRACKS = 60
_GROW = 2.0
_SHRINK = 0.5
_SAFETY = 0.9
_MIN_STEP_FOR_L = 1e-13  # below this KL step the curvature estimate is rounding noise
_SPLIT_MAX_SHARE = 0.25  # sparse-support sweeps when the cost's pairs are at most this share
_FIT_ROUNDS = 60  # imputation rounds of the product-form fit (:func:`_product_form`)
_FIT_TOL = 1e-12  # largest |log w − (α_u + α_v)| off the support accepted as product form


@dataclass
class SolveResult:
    """Outcome of :func:`solve`.

    ``w`` [P] minimiser in ``W``; ``x = M w`` [P] fractional circuits; ``F``, ``U`` (s) and
    ``kl`` = ``KL(w||q)`` at ``w`` (final ``b2``); ``iterations`` accepted steps (all stages);
    ``contraction``: ratios of successive step sizes ``KL(w^{k+1}||w^k)`` within a stage;
    ``eta`` final step size (1/s); ``b1``, ``b2`` (1/s); ``converged``: the stopping test of the
    final stage was met; ``history``: one dict per accepted step (``iteration``, ``b2``, ``F``,
    ``U``, ``kl``, ``step_kl``, ``eta``, ``theta``, ``backtracks``, ``projection_iterations``,
    ``projection_method``, ``residual``); ``wall_s`` wall time; ``duals`` [n] the last
    projection's duals (pass back as ``duals0`` with ``w0 = w`` and ``eta0 = eta`` to resume).
    ``success`` is ``converged``; ``message`` says why the solver stopped.
    """

    w: np.ndarray
    x: np.ndarray
    F: float
    U: float
    kl: float
    iterations: int
    contraction: list[float]
    eta: float
    b1: float
    b2: float
    converged: bool
    history: list[dict] = field(repr=False)
    wall_s: float
    duals: np.ndarray | None = field(default=None, repr=False)

    @property
    def success(self) -> bool:
        return self.converged

    @property
    def message(self) -> str:
        if self.converged:
            return f"stopping test met after {self.iterations} iterations"
        return f"stopped after {self.iterations} iterations: max_iter or no step size passed"


@numba.njit(cache=True, nogil=True)
def _logits(log_w, log_q, g, theta, eta, out):  # pragma: no cover - compiled
    """``log y = θ log w + (1−θ) log q − θ η g``."""
    c = theta * eta
    for e in range(out.size):
        out[e] = theta * log_w[e] + (1.0 - theta) * log_q[e] - c * g[e]


@numba.njit(cache=True, nogil=True)
def _step_stats(w_new, log_w_new, w, log_w, g):  # pragma: no cover - compiled
    """``(KL(w_new||w), <g, w_new − w>, <|g|, w>)`` (the last sizes the rounding slack of the
    descent test). Compiled rather than ``np.abs(g) @ w``: a BLAS dot spawns threads, which
    on a loaded 2-core machine cost milliseconds per call.

    Per pair the KL term is ``w_new·φ(d)``, ``φ(d) = d − 1 + e^{−d}``, ``d = log w_new − log w``
    (so ``w_new e^{−d} = w``): ``w_new·d − w_new + w`` for ``|d| ≥ 0.01``, and the Taylor series
    ``d²/2 − d³/6 + d⁴/24 − d⁵/120`` below (relative error ≤ 3e-11), where the direct form would
    lose everything to cancellation on tiny steps.
    """
    kl = 0.0
    lin = 0.0
    mag = 0.0
    for e in range(w.size):
        d = log_w_new[e] - log_w[e]
        if abs(d) < 0.01:
            kl += w_new[e] * d * d * (0.5 - d * (1.0 / 6.0 - d * (1.0 / 24.0 - d / 120.0)))
        else:
            kl += w_new[e] * d - w_new[e] + w[e]
        lin += g[e] * (w_new[e] - w[e])
        mag += abs(g[e]) * w[e]
    return kl, lin, mag


@numba.njit(cache=True, nogil=True)
def _kl_logs(w, log_w, q, log_q):  # pragma: no cover - compiled
    """``KL(w||q) = Σ w (log w − log q) − w + q``."""
    s = 0.0
    for e in range(w.size):
        s += w[e] * (log_w[e] - log_q[e]) - w[e] + q[e]
    return s


@numba.njit(cache=True, nogil=True)
def _pod_fit(z, n):  # pragma: no cover - compiled
    """Least-squares pod potentials ``c = argmin ||z − (c_u + c_v)||²`` for ``n ≥ 3`` pods.

    With the pair incidence ``A`` of the complete graph, ``AᵀA = (n−2) I + 11ᵀ``, so
    ``c = (s − Σs/(2n−2)) / (n−2)`` with ``s = Aᵀz`` (per-pod sums).
    """
    s = np.zeros(n)
    e = 0
    for u in range(n - 1):
        acc = 0.0
        for v in range(u + 1, n):
            acc += z[e]
            s[v] += z[e]
            e += 1
        s[u] += acc
    return (s - s.sum() / (2.0 * n - 2.0)) / (n - 2.0)


@numba.njit(cache=True, nogil=True)
def _centred(g, n):  # pragma: no cover - compiled
    """``g − (c_u + c_v)`` with ``c = _pod_fit(g)``.

    ``<c_u + c_v, w>`` is constant on ``W``, so this changes neither the iterates nor
    ``<g, w+ − w>``, but it keeps ``log y`` in a narrow range and ``<g, w+ − w>`` free of the
    cancellation of a large degree-span part.
    """
    out = np.zeros(g.size)
    if n < 3:
        return out  # one pair: W is a single point
    c = _pod_fit(g, n)
    e = 0
    for u in range(n - 1):
        for v in range(u + 1, n):
            out[e] = g[e] - c[u] - c[v]
            e += 1
    return out


def _project(logy: np.ndarray, model: OcsModel, method: str, warm, inequality: bool, split=None):
    """KL projection of ``y = exp(logy)`` onto ``W`` or, with ``inequality``, onto ``W≤``
    (module doc: the ``W`` projection is the ``W≤`` one whenever its duals are all ``≥ 0``;
    tried only when ``W`` is not empty, i.e. when every port can carry a circuit); ``split``
    the product form of ``logy`` off the cost's pairs, if known (:class:`.projection.Split`).
    With a split the sweeps cost ``O(n + |T|)`` and the materialised ``w`` most of the
    projection, so ``W≤`` is projected on at once (one materialisation instead of two)."""
    kw = dict(method=method, log=True, split=split)
    if inequality and (split is not None or not model.completable):
        return project(logy, model, warm=warm, inequality=True, **kw)
    pr = project(logy, model, warm=warm, **kw)
    if not inequality or pr.duals.min() >= 0.0:
        return pr
    return project(logy, model, warm=pr.duals, inequality=True, **kw)


@numba.njit(cache=True, nogil=True)
def _any_off(g, on):  # pragma: no cover - compiled
    """True when ``g`` is non-zero on some pair outside the support mask ``on``."""
    for e in range(g.size):  # noqa: SIM110 (a compiled loop that stops at the first hit)
        if g[e] != 0.0 and not on[e]:
            return True
    return False


def _product_form(log_v: np.ndarray, on: np.ndarray, n: int) -> np.ndarray | None:
    """``α`` [n] with ``log_v_e = α_u + α_v`` on every pair off the support mask ``on`` (to
    ``_FIT_TOL``), or None when ``log_v`` has no such form there.

    Least squares over all pairs (:func:`_pod_fit`) with the support's entries imputed from
    the current ``α`` and refitted (the EM fixed point of the fit with those entries missing;
    exact in one round when ``log_v`` is itself a product form, e.g. the uniform prior)."""
    z = log_v.copy()
    alpha = _pod_fit(z, n)
    for _ in range(_FIT_ROUNDS):
        if _impute(z, log_v, on, alpha, n) <= _FIT_TOL:
            return alpha
        alpha = _pod_fit(z, n)
    return None


@numba.njit(cache=True, nogil=True)
def _impute(z, log_v, on, alpha, n):  # pragma: no cover - compiled
    """One pass over the pairs (``u < v`` in row order, as ``np.triu_indices``): ``z_e =
    α_u + α_v`` on the support ``on``; returns ``max |log_v_e − (α_u + α_v)|`` off it (∞ if
    any is NaN)."""
    worst = 0.0
    e = 0
    for u in range(n - 1):
        for v in range(u + 1, n):
            fit = alpha[u] + alpha[v]
            if on[e]:
                z[e] = fit
            else:
                d = abs(log_v[e] - fit)
                if not d <= worst:  # a NaN counts as infinitely far
                    worst = d if d == d else np.inf
            e += 1
    return worst


class _Sparse:
    """The sparse-support sweeps of :func:`solve` (module doc): the pairs the cost depends on
    (``cost.comm_pair``) and the product forms ``α`` of ``log w`` and ``β`` of ``log q`` off
    them, carried through every step. ``split(g, θ)`` gives the projection its structure, or
    None when the sweeps run dense (too many pairs, no product form, or a gradient seen off
    the support: then dense for the rest of the solve)."""

    def __init__(self, cost, model: OcsModel, log_q, log_w, inequality: bool):
        self.alpha = self.beta = None
        pairs = getattr(cost, "comm_pair", None)
        if not inequality or pairs is None or model.n < 3:
            return  # on W the centred gradient is not zero off the support
        # the sorted distinct pairs, by counting (np.unique sorts or hashes all comm nodes)
        support = np.flatnonzero(
            np.bincount(np.asarray(pairs, dtype=np.int64), minlength=model.n_pairs)
        )
        if support.size > _SPLIT_MAX_SHARE * model.n_pairs:
            return
        self.on = np.zeros(model.n_pairs, dtype=bool)
        self.on[support] = True
        self.support = support
        self.beta = _product_form(log_q, self.on, model.n)
        self.alpha = None if self.beta is None else _product_form(log_w, self.on, model.n)

    def split(self, g: np.ndarray, theta: float) -> Split | None:
        """The structure of ``log y = θ log w + (1−θ) log q − θηg`` when ``g`` is zero off
        the support."""
        if self.alpha is None or _any_off(g, self.on):
            self.alpha = None
            return None
        return Split(self.support, theta * self.alpha + (1.0 - theta) * self.beta)

    def accept(self, split: Split | None, duals: np.ndarray) -> None:
        """``α ← α_y − λ`` after an accepted step (``log w = log y − λ_u − λ_v``)."""
        if split is not None and self.alpha is not None:
            self.alpha = split.alpha - duals


def _direction(g: np.ndarray, n: int, inequality: bool) -> np.ndarray:
    """The gradient the step uses: centred on ``W`` (:func:`_centred`), as is on ``W≤``."""
    return g if inequality else _centred(g, n)


def _check_positive(name: str, value) -> float:
    value = float(value)
    if not (value > 0 and np.isfinite(value)):
        raise ConfigError(name, f"must be finite and > 0, got {value}")
    return value


def _check_pair_vector(name: str, v, model: OcsModel) -> np.ndarray:
    v = np.asarray(v, dtype=float)
    if v.shape != (model.n_pairs,):
        raise ConfigError(name, f"has shape {v.shape}, expected ({model.n_pairs},)")
    if not (np.isfinite(v).all() and (v > 0).all()):
        raise ConfigError(name, "must be finite and > 0 on every pair")
    return v


def solve(
    cost,
    model: OcsModel,
    b1: float,
    b2: float,
    prior=None,
    w0=None,
    max_iter: int = 500,
    tol: float = 1e-9,
    anneal: bool = False,
    projection: str = "auto",
    eta0: float | None = None,
    callback: Callable[[int, np.ndarray], None] | None = None,
    duals0=None,
    inequality: bool = False,
) -> SolveResult:
    """Minimise ``F(w) = U(w) + KL(w||q)/b1`` over ``W`` (see module doc).

    Parameters: ``cost`` with ``value_and_grad(x, b2) -> (U [s], dU/dx [P], s per circuit)``
    (e.g. :class:`~trainfabric.ocs.wiring.cost.PathCost`); ``b1`` (1/s) prior strength (small =
    stay near ``q``); ``b2`` (1/s) smoothing of the critical path; ``prior`` ``q`` [P] in ``W``
    (default :func:`~trainfabric.ocs.wiring.prior.uniform_prior`); ``w0`` [P] start, > 0 on every
    pair
    (projected onto ``W``; default ``q``); ``max_iter`` accepted steps per ``b2`` stage; ``tol``
    on the step-normalised ``KL(w^{k+1}||w^k) / (1−θ)^2``; ``anneal`` continuation in
    ``b2``; ``projection`` method of :func:`~trainfabric.ocs.wiring.projection.project`; ``eta0``
    first step size (1/s; default ``1 / (max g − min g)`` once the degree-span part
    ``c_u + c_v`` is removed from ``g``: a step that moves every ``log w`` by at most ~1);
    ``callback(k, w)`` after every accepted step; ``duals0`` [n] duals to warm-start the
    projection of ``w0`` (from an earlier result's ``duals``); ``inequality``: optimise over
    ``W≤`` (dark ports, module doc).
    """
    start = time.perf_counter()
    b1 = _check_positive("b1", b1)
    b2 = _check_positive("b2", b2)
    tol = _check_positive("tol", tol)
    if projection not in METHODS:
        raise ConfigError("projection", f"must be one of {METHODS}, got {projection!r}")
    if int(max_iter) != max_iter or max_iter < 0:
        raise ConfigError("max_iter", f"must be a non-negative integer, got {max_iter}")
    q = uniform_prior(model) if prior is None else _check_pair_vector("prior", prior, model)
    log_q = np.log(q)
    if w0 is None:
        w, log_w, duals = q.copy(), log_q.copy(), None
    else:
        w0 = _check_pair_vector("w0", w0, model)
        p0 = _project(np.log(w0), model, projection, duals0, inequality)
        w, log_w, duals = p0.w, p0.log_w, p0.duals
    sparse = _Sparse(cost, model, log_q, log_w, inequality)
    eta = None if eta0 is None else _check_positive("eta0", eta0)
    m = float(model.total_circuits)
    stages = b2 / 2.0 ** np.arange(_ANNEAL_STAGES - 1, -1, -1) if anneal else np.array([b2])

    history: list[dict] = []
    contraction: list[float] = []
    logy = np.empty_like(w)
    converged = False
    for si, stage_b2 in enumerate(stages):
        stage_b2 = float(stage_b2)
        stage_tol = tol if si == len(stages) - 1 else max(tol, _STAGE_TOL)
        u, gx = cost.value_and_grad(m * w, stage_b2)
        g = _direction(m * np.asarray(gx, dtype=float), model.n, inequality)
        if eta is None:
            centred = g if not inequality else _centred(g, model.n)  # same default on W≤
            spread = float(centred.max() - centred.min())
            eta = 1.0 / spread if spread > 0 else b1
        prev_step = None
        converged = False
        for _ in range(int(max_iter)):
            for backtracks in range(_MAX_BACKTRACKS + 1):  # noqa: B007 (recorded below)
                theta = b1 / (b1 + eta)
                _logits(log_w, log_q, g, theta, eta, logy)
                split = sparse.split(g, theta)
                pr = _project(logy, model, projection, duals, inequality, split)
                u_new, gx_new = cost.value_and_grad(m * pr.w, stage_b2)
                step_kl, lin, mag = _step_stats(pr.w, pr.log_w, w, log_w, g)
                excess = u_new - u - lin
                # Rounding slack: U and <g, Δw> carry ~1e-16 relative error and the projection a
                # 1e-12 relative degree residual; without it tiny steps would fail spuriously.
                slack = 1e-12 * (abs(u) + mag)
                if excess <= step_kl / eta + slack:
                    break
                eta *= _SHRINK
            else:
                break  # no step size passes: U is not smooth here (or the cost is not convex)
            kl_new = _kl_logs(pr.w, pr.log_w, q, log_q)
            f_new = u_new + kl_new / b1
            history.append(
                {
                    "iteration": len(history) + 1,
                    "b2": stage_b2,
                    "F": f_new,
                    "U": u_new,
                    "kl": kl_new,
                    "step_kl": step_kl,
                    "eta": eta,
                    "theta": theta,
                    "backtracks": backtracks,
                    "projection_iterations": pr.iterations,
                    "projection_method": pr.method,
                    "residual": pr.residual,
                }
            )
            if prev_step is not None and prev_step > 0:
                contraction.append(step_kl / prev_step)
            prev_step = step_kl
            w, log_w, duals, u = pr.w, pr.log_w, pr.duals, u_new
            sparse.accept(split, duals)
            g = _direction(m * np.asarray(gx_new, dtype=float), model.n, inequality)
            if callback is not None:
                callback(len(history), w)
            if step_kl <= stage_tol * (1.0 - theta) ** 2:
                converged = True
                break
            if step_kl > _MIN_STEP_FOR_L:
                curvature = excess / step_kl
                eta = _GROW * eta if curvature <= 0 else min(_GROW * eta, _SAFETY / curvature)
    kl_final = _kl_logs(w, log_w, q, log_q)
    return SolveResult(
        w=w,
        x=m * w,
        F=u + kl_final / b1,
        U=u,
        kl=kl_final,
        iterations=len(history),
        contraction=contraction,
        eta=float(eta),
        b1=b1,
        b2=b2,
        converged=converged,
        history=history,
        wall_s=time.perf_counter() - start,
        duals=None if duals is None else np.asarray(duals, dtype=float),
    )
