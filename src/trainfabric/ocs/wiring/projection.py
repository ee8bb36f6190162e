"""KL projection of a positive pair vector onto the degree slice ``W`` (docs/ocs.md §1.7).

Problem, for ``y > 0`` over the unordered pairs ``e = (u < v)`` (``triu_indices`` order) and
``r_v = d_v / M``::

    w = argmin_{w ≥ 0, Σ_u w_uv = r_v ∀v}  Σ_e w_e log(w_e / y_e) − w_e + y_e .

Its Lagrangian dual is ``n``-dimensional: ``w_uv = y_uv · exp(−λ_u − λ_v)`` where ``λ``
minimises the convex

    ψ(λ) = Σ_{u<v} y_uv e^{−λ_u−λ_v} + Σ_v r_v λ_v ,
    ∇ψ = r − S(λ),   ∇²ψ = diag(S) + W,   S_v = Σ_u w_uv (row sums of the current w).

Both solvers work on ``ℓ = log y`` (pass ``log=True``), so kernels whose entries span more
than the float64 range are fine: only ``w`` itself may underflow, ``log w`` is exact.

* ``"sinkhorn"`` — symmetric Sinkhorn ``a ← sqrt(a ⊙ r ⊘ (Y a))`` with ``a = e^{−λ}``, i.e.
  ``λ ← λ + ½ (log S − log r)``; one sweep is one compiled ``Y a`` mat-vec over the ``P``
  pairs, without exponentials (the kernel is stabilised by absorbing the duals, see
  ``_Kernel``). The geometric-mean damping makes the symmetric iteration converge (the
  undamped one oscillates along the global scale), but it also halves every other error
  component (rate ≈ 1/2 even for a uniform kernel). So once the residual is ≤ 1/4 the solver
  takes the undamped step with the global scale fixed exactly,
  ``λ ← λ + log(S/r) − ½ log Σ_e w_e``: linearised, its error map is ``−D^{-1}W`` restricted
  off the constant direction, whose spectral radius is ≈ 1/(n−1) for a nearly uniform
  kernel. If a fast step ever increases the residual it is reverted and the solver keeps the
  damped step from then on.
* ``"newton"`` — Newton on ``ψ`` with Armijo backtracking. The Hessian system is solved by a
  Cholesky factorisation of the Jacobi-scaled matrix up to ``n = 512`` pods and by
  Jacobi-preconditioned conjugate gradients (``O(P)`` mat-vec) above. Quadratic convergence,
  robust when ``y`` is very skewed.
* ``"auto"`` — Sinkhorn, switching to Newton (warm-started at Sinkhorn's duals) when the
  residual's contraction over three sweeps predicts more remaining sweeps than a Newton finish
  costs: ``D^{-1}W`` has eigenvalues near ±1 (weight concentrated on few pairs, a ring, a
  nearly bipartite support).

Convergence: the relative degree residual ``max_v |S_v − r_v| / r_v ≤ tol`` of the returned
``w``. For ``n = 2`` there is one pair and ``W = {1}``.

**Sparse support** (``split``). Where ``ℓ_e = α_u + α_v`` on every pair outside a support
``T`` (pairs without traffic keep the prior's and the duals' product form through the
solver's steps), the row sums split as

    S_u = Σ_{v ∈ T(u)} w_uv + c_u (Σ_v c_v − c_u − Σ_{v ∈ T(u)} c_v),   c = e^{α − λ},

so a sweep costs ``O(n + |T|)`` instead of ``O(P)`` (at 1,024 pods and a sparse job,
~500x fewer terms). ``log w = ℓ − λ_u − λ_v`` is still materialised on every pair, ``w`` as
``e^{log w}`` on ``T`` and as ``c_u c_v`` elsewhere (no exponential per pair); the residual
is that of the returned ``w``. The result equals the dense kernel's to the rounding of the
product form (``tests/ocs/test_projection.py``).

**Inequality version** (``inequality=True``, dark ports): the projection onto
``W≤ = {w ≥ 0 : Σ_u w_uv ≤ r_v}``. Same form ``w_uv = y_uv e^{−λ_u−λ_v}``, now with ``λ ≥ 0``
(``a_v ≤ 1``): the dual is ``min_{λ ≥ 0} ψ(λ)`` and the KKT conditions are ``S_v ≤ r_v``,
``λ_v ≥ 0``, ``λ_v (r_v − S_v) = 0``. The residual is the relative projected gradient
``max_v |λ_v − max(0, λ_v − (r_v − S_v)/r_v)|``, i.e. ``(S_v − r_v)/r_v`` where a degree is
exceeded and ``min(λ_v, (r_v − S_v)/r_v)`` where it is not (zero exactly at the KKT point).

* ``"sinkhorn"`` — the damped sweep with the dual clipped at 0:
  ``λ ← max(0, λ + ½ (log S − log r))``. By ``e^{−δ_u−δ_v} ≤ ½(e^{−2δ_u} + e^{−2δ_v})`` the
  damped step minimises a separable majoriser of ``ψ``, and clipping solves each separable
  piece on ``λ_v ≥ 0``, so ``ψ`` decreases monotonically (majorisation-minimisation).
* ``"newton"`` — projected Newton (Bertsekas' two-metric method): pods with ``λ_v`` within
  ``ε`` of 0 and ``∇_v ψ > 0`` (slack degree pushing the dual below 0) take a diagonally
  scaled gradient step, the others a Newton step on their block of the Hessian; the step is
  projected onto ``λ ≥ 0`` and backtracked by Armijo on ``ψ``. Once the active set is right it
  is Newton on the free duals: quadratic convergence.
* ``"auto"`` — clipped Sinkhorn, switching to projected Newton by the same stall rule.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
import scipy.linalg as sla
import scipy.sparse.linalg as spla

from trainfabric.errors import ConfigError
from trainfabric.ocs.model import OcsModel

METHODS = ("auto", "sinkhorn", "newton")
_DENSE_NEWTON_MAX_N = 512
_FAST_SINKHORN_BELOW = 0.25
_STALL_WINDOW = 3
_FULL_NEWTON_STEP = 0.1
_ARMIJO = 1e-4
_MAX_HALVINGS = 30
_SAFE_EXP = 600.0  # largest log-weight allowed in an absorbed kernel (float64 overflows at 709)
_ABSORB = 100.0  # |λ − μ|_∞ beyond which the duals are absorbed into the kernel
_DEFAULT_MAX_ITER = {"sinkhorn": 10_000, "newton": 100, "auto": 10_000}


@dataclass
class ProjectionResult:
    """Outcome of :func:`project`.

    ``w`` [P] and ``log_w`` [P]: the projection and its logarithm (exact even where ``w``
    underflows); ``duals`` [n]: ``λ`` with ``w_uv = y_uv · exp(−λ_u − λ_v)`` (the scaling
    ``a = exp(−λ)`` is :attr:`scaling`; pass ``duals`` back as ``warm``); ``iterations``:
    Sinkhorn sweeps plus Newton steps; ``residual``: ``max_v |Σ_u w_uv − r_v| / r_v`` of the
    returned ``w`` (with ``inequality``, the relative projected-gradient residual of the
    module doc); ``method``: ``"sinkhorn"``, ``"newton"`` or ``"sinkhorn+newton"`` (auto after
    switching); ``converged``: ``residual ≤ tol``; ``inequality``: projected onto ``W≤``
    (duals ``≥ 0``). ``success`` is ``converged`` (``max_iter`` ran out otherwise) and
    ``message`` says which, with the residual.
    """

    w: np.ndarray
    log_w: np.ndarray
    duals: np.ndarray
    iterations: int
    residual: float
    method: str
    converged: bool
    inequality: bool = False

    @property
    def success(self) -> bool:
        return self.converged

    @property
    def message(self) -> str:
        outcome = "converged" if self.converged else "iteration limit reached"
        return (
            f"{outcome}: residual {self.residual:.3g}, {self.iterations} iterations ({self.method})"
        )

    @property
    def scaling(self) -> np.ndarray:
        """``a = exp(−λ)`` [n] (may under/overflow for extreme kernels; ``duals`` never do)."""
        return np.exp(-self.duals)


@dataclass(frozen=True)
class Split:
    """The structure of ``ℓ = log y`` that :func:`project` may use (module doc, sparse
    support): ``support`` (int64, pair indices) and ``alpha`` [n] with ``ℓ_e = α_u + α_v``
    on every other pair, to rounding. The caller guarantees it (the solver checks it once
    and keeps it by construction, :func:`.solver.solve`)."""

    support: np.ndarray
    alpha: np.ndarray


# -- compiled kernels over the pairs in triu order (row u holds v = u+1..n-1) -----------------


@numba.njit(cache=True, nogil=True)
def _rowsums_product(y, a):  # pragma: no cover - compiled
    """``S = a ⊙ (Y a)``: the row sums of ``w_uv = y_uv a_u a_v`` without forming ``w``."""
    return a * _pair_matvec(y, a)


@numba.njit(cache=True, nogil=True)
def _rowsums_split(su, sv, y_t, a, c):  # pragma: no cover - compiled
    """Row sums of ``w`` from the support pairs ``(su, sv)`` with weights ``y_t a_u a_v`` and
    the product part ``c_u c_v`` on every other pair (module doc; clipped at 0 where rounding
    leaves a row with no product part slightly negative)."""
    n = a.size
    s = np.zeros(n)
    near = np.zeros(n)
    for k in range(su.size):
        u, v = su[k], sv[k]
        x = y_t[k] * a[u] * a[v]
        s[u] += x
        s[v] += x
        near[u] += c[v]
        near[v] += c[u]
    total = c.sum()
    for u in range(n):
        s[u] += c[u] * max(total - c[u] - near[u], 0.0)
    return s


@numba.njit(cache=True, nogil=True)
def _fill_split(logy, lam, support, c, log_w, w):  # pragma: no cover - compiled
    """``log_w = ℓ_uv − λ_u − λ_v`` on every pair; ``w = exp(log_w)`` on the (sorted) support
    and the product ``c_u c_v`` elsewhere (no exponential there); returns the row sums."""
    n = lam.size
    s = np.zeros(n)
    e = 0
    k = 0
    for u in range(n - 1):
        lu = lam[u]
        cu = c[u]
        acc = 0.0
        for v in range(u + 1, n):
            z = logy[e] - lu - lam[v]
            log_w[e] = z
            if k < support.size and support[k] == e:
                x = np.exp(z)
                k += 1
            else:
                x = cu * c[v]
            w[e] = x
            acc += x
            s[v] += x
            e += 1
        s[u] += acc
    return s


@numba.njit(cache=True, nogil=True)
def _fill_product(y, a, w):  # pragma: no cover - compiled
    """``w_uv = y_uv a_u a_v``; returns the row sums."""
    n = a.size
    s = np.zeros(n)
    e = 0
    for u in range(n - 1):
        au = a[u]
        acc = 0.0
        for v in range(u + 1, n):
            x = y[e] * au * a[v]
            w[e] = x
            acc += x
            s[v] += x
            e += 1
        s[u] += acc
    return s


@numba.njit(cache=True, nogil=True)
def _fill_both_product(y, a, logy, lam, log_w, w):  # pragma: no cover - compiled
    """``w_uv = y_uv a_u a_v`` and ``log_w = ℓ_uv − λ_u − λ_v``; returns the row sums of ``w``."""
    n = a.size
    s = np.zeros(n)
    e = 0
    for u in range(n - 1):
        au = a[u]
        lu = lam[u]
        acc = 0.0
        for v in range(u + 1, n):
            x = y[e] * au * a[v]
            w[e] = x
            log_w[e] = logy[e] - lu - lam[v]
            acc += x
            s[v] += x
            e += 1
        s[u] += acc
    return s


@numba.njit(cache=True, nogil=True)
def _fill_log(logy, lam, log_w, w):  # pragma: no cover - compiled
    """``log_w = ℓ_uv − λ_u − λ_v``, ``w = exp(log_w)``; returns the row sums and
    ``max log_w``."""
    n = lam.size
    s = np.zeros(n)
    zmax = -np.inf
    e = 0
    for u in range(n - 1):
        lu = lam[u]
        acc = 0.0
        for v in range(u + 1, n):
            z = logy[e] - lu - lam[v]
            log_w[e] = z
            zmax = max(zmax, z)
            x = np.exp(z)
            w[e] = x
            acc += x
            s[v] += x
            e += 1
        s[u] += acc
    return s, zmax


@numba.njit(cache=True, nogil=True)
def _log_weights(logy, lam, out):  # pragma: no cover - compiled
    """``out = ℓ_uv − λ_u − λ_v``; returns its maximum."""
    n = lam.size
    zmax = -np.inf
    e = 0
    for u in range(n - 1):
        lu = lam[u]
        for v in range(u + 1, n):
            z = logy[e] - lu - lam[v]
            out[e] = z
            zmax = max(zmax, z)
            e += 1
    return zmax


@numba.njit(cache=True, nogil=True)
def _log_rowsums(log_w, n):  # pragma: no cover - compiled
    """``log S_v = LSE_u log w_uv`` without underflow (two passes: per-pod max, then sum)."""
    m = np.full(n, -np.inf)
    e = 0
    for u in range(n - 1):
        for v in range(u + 1, n):
            z = log_w[e]
            m[u] = max(m[u], z)
            m[v] = max(m[v], z)
            e += 1
    s = np.zeros(n)
    e = 0
    for u in range(n - 1):
        for v in range(u + 1, n):
            z = log_w[e]
            s[u] += np.exp(z - m[u])
            s[v] += np.exp(z - m[v])
            e += 1
    return m + np.log(s)


@numba.njit(cache=True, nogil=True)
def _pair_matvec(w, x):  # pragma: no cover - compiled
    """``(W x)_v = Σ_u w_uv x_u`` for the symmetric matrix ``W`` given by its pairs."""
    n = x.size
    out = np.zeros(n)
    e = 0
    for u in range(n - 1):
        xu = x[u]
        acc = 0.0
        for v in range(u + 1, n):
            acc += w[e] * x[v]
            out[v] += w[e] * xu
            e += 1
        out[u] += acc
    return out


@numba.njit(cache=True, nogil=True)
def _scaled_hessian(w, s, ridge):  # pragma: no cover - compiled
    """``D^{-1/2} (diag(S) + W) D^{-1/2} + ridge·I`` with ``D = diag(S)``, dense [n, n]."""
    n = s.size
    h = np.empty((n, n))
    d = 1.0 / np.sqrt(s)
    e = 0
    for u in range(n):
        h[u, u] = 1.0 + ridge
        for v in range(u + 1, n):
            x = w[e] * d[u] * d[v]
            h[u, v] = x
            h[v, u] = x
            e += 1
    return h


def _lse(x: np.ndarray) -> float:
    m = float(x.max())
    return m + float(np.log(np.exp(x - m).sum()))


class _Kernel:
    """``ℓ = log y``, ``r`` and the work buffers shared by the solvers.

    Row sums use the product form on an absorbed kernel (the stabilisation of log-domain
    Sinkhorn): ``Y = exp(ℓ_uv − μ_u − μ_v)`` for reference duals ``μ`` and
    ``a = exp(μ − λ)``, so ``w_uv = Y_uv a_u a_v`` and ``S = a ⊙ (Y a)`` is one multiply-add
    pass, whatever the range of ``ℓ``. When ``|λ − μ|_∞`` exceeds ``_ABSORB`` the current
    duals are absorbed (``μ ← λ``, one pass with exponentials). Entries of ``Y`` that
    underflow are below ``e^{-745}`` at ``μ``, hence below ``e^{-745 + 2·_ABSORB}`` at any
    ``λ`` where ``Y`` is used: negligible against row sums of order ``r``. ``log w`` is always
    computed as ``ℓ − λ_u − λ_v`` (exact).
    """

    def __init__(
        self, logy: np.ndarray, model: OcsModel, lam: np.ndarray, split: Split | None = None
    ):
        """Absorb at the start duals ``lam``, first shifting them in place by a constant if
        ``w(lam)`` would overflow. With ``split`` the absorbed kernel is kept on the support
        pairs and as the pod factors ``e^{α − μ}`` (module doc), not over every pair."""
        self.n = model.n
        self.logy = logy
        self.r = model.r
        self.log_r = np.log(self.r)
        self.log_w = np.empty_like(logy)
        self.w = np.empty_like(logy)
        self.split = split
        if split is None:
            self.y = np.empty_like(logy)
            zmax = _log_weights(logy, lam, self.y)
            if zmax > _SAFE_EXP:
                lam += 0.5 * zmax
                self.y -= zmax
            np.exp(self.y, out=self.y)
            self.mu = lam.copy()
            return
        iu, iv = model.pairs
        self.su, self.sv = iu[split.support], iv[split.support]
        self.logy_t = logy[split.support]
        z = self.logy_t - lam[self.su] - lam[self.sv]
        zmax = max(z.max(initial=-np.inf), 2.0 * float((split.alpha - lam).max()))
        if zmax > _SAFE_EXP:
            lam += 0.5 * zmax
        self._absorb(lam)

    def _absorb(self, lam: np.ndarray) -> None:
        """``μ ← λ``: the kernel ``exp(ℓ − μ_u − μ_v)`` (one pass with exponentials)."""
        self.mu = lam.copy()
        if self.split is None:
            _log_weights(self.logy, lam, self.y)
            np.exp(self.y, out=self.y)
        else:
            self.y_t = np.exp(self.logy_t - lam[self.su] - lam[self.sv])
            self.c_mu = np.exp(self.split.alpha - lam)

    def _scaling(self, lam: np.ndarray) -> np.ndarray:
        """``a = exp(μ − λ)``, absorbing ``λ`` into the kernel first if it is far from ``μ``."""
        if np.abs(lam - self.mu).max() > _ABSORB:
            self._absorb(lam)
        return np.exp(self.mu - lam)

    def rowsums(self, lam: np.ndarray) -> np.ndarray:
        """``S(λ)`` (the buffer ``w`` is left as it was)."""
        a = self._scaling(lam)
        if self.split is None:
            return _rowsums_product(self.y, a)
        return _rowsums_split(self.su, self.sv, self.y_t, a, self.c_mu * a)

    def fill(self, lam: np.ndarray) -> np.ndarray:
        """Write ``w(λ)`` and return its row sums."""
        if self.split is None:
            return _fill_product(self.y, self._scaling(lam), self.w)
        return self._fill_split(lam)

    def _fill_split(self, lam: np.ndarray) -> np.ndarray:
        """``w`` and ``log w`` at ``λ`` with the split (:func:`_fill_split`); row sums."""
        c = np.exp(self.split.alpha - lam)
        return _fill_split(self.logy, lam, self.split.support, c, self.log_w, self.w)

    def psi(self, lam: np.ndarray) -> float:
        """Dual objective ``ψ(λ) = Σ_e w_e + r·λ`` at a trial point, in the log form (no
        absorption; ``inf`` where ``w`` overflows)."""
        s, _ = _fill_log(self.logy, lam, self.log_w, self.w)
        return 0.5 * float(s.sum()) + float(self.r @ lam)

    def finish(self, lam: np.ndarray, inequality: bool = False) -> float:
        """Materialise ``w`` and ``log w`` at ``λ``; return the residual of that ``w``."""
        if self.split is None:
            a = self._scaling(lam)
            s = _fill_both_product(self.y, a, self.logy, lam, self.log_w, self.w)
        else:
            s = self._fill_split(lam)
        return self.box_residual(s, lam) if inequality else self.residual(s)

    def log_rowsums(self, s: np.ndarray, lam: np.ndarray) -> np.ndarray:
        """``log S(λ)``, exact also for pods whose row sum underflows."""
        if s.min() > 1e-250:
            return np.log(s)
        _fill_log(self.logy, lam, self.log_w, self.w)
        return _log_rowsums(self.log_w, self.n)

    def residual(self, s: np.ndarray) -> float:
        return float(np.max(np.abs(s - self.r) / self.r))

    def box_residual(self, s: np.ndarray, lam: np.ndarray) -> float:
        """KKT residual on ``λ ≥ 0``: ``max_v |λ_v − max(0, λ_v − (r_v − S_v)/r_v)|``."""
        g = (self.r - s) / self.r
        return float(np.max(np.abs(lam - np.maximum(0.0, lam - g))))

    def hessian_solve(
        self, s: np.ndarray, rhs: np.ndarray, rtol: float, free: np.ndarray | None = None
    ) -> np.ndarray:
        """Solve ``(diag(S) + W) δ = rhs`` with ``w`` filled at the current ``λ``; with
        ``free`` (bool [n]) only the block of the free pods (``rhs`` and the result are [F]).

        Dense for ``n ≤ 512``: Cholesky of the Jacobi-scaled matrix ``I + D^{-1/2}WD^{-1/2}``
        (eigenvalues in ``(0, 2]``; a tiny ridge if it is numerically singular, i.e. the weight
        sits on a nearly bipartite support). Above: Jacobi-preconditioned CG.
        """
        n = self.n
        idx = np.arange(n) if free is None else np.flatnonzero(free)
        sf = s[idx]
        if n <= _DENSE_NEWTON_MAX_N:
            d = 1.0 / np.sqrt(sf)
            for ridge in (0.0, 1e-12, 1e-8):
                h = _scaled_hessian(self.w, s, ridge)
                if free is not None:
                    h = np.ascontiguousarray(h[np.ix_(idx, idx)])
                try:
                    factor = sla.cho_factor(h, overwrite_a=True, check_finite=False)
                except np.linalg.LinAlgError:
                    continue
                return d * sla.cho_solve(factor, d * rhs, check_finite=False)
            raise np.linalg.LinAlgError("the Hessian of the dual is not positive definite")
        w = self.w
        full = np.zeros(n)

        def matvec(x):
            full[idx] = x
            return sf * x + _pair_matvec(w, full)[idx]

        m = idx.size
        op = spla.LinearOperator((m, m), matvec=matvec, dtype=float)
        jacobi = spla.LinearOperator((m, m), matvec=lambda x: x / sf, dtype=float)
        delta, _ = spla.cg(op, rhs, rtol=rtol, maxiter=10 * m, M=jacobi)
        return delta


# -- solvers -----------------------------------------------------------------------------------


def _newton_cost_in_sweeps(n: int) -> float:
    """Rough price of a Newton finish in Sinkhorn sweeps: ~4 steps, each a fill plus a dense
    factorisation (≈ n/25 sweeps of the same size, measured at n = 64..512) or, above, a CG
    solve of a few tens of mat-vecs."""
    return 4.0 * (3.0 + min(n / 25.0, 40.0))


def _stalled(history: list[float], tol: float, newton_cost: float) -> bool:
    """The stall rule of ``"auto"``: with ``ρ = (res_k / res_{k−3})^{1/3}`` the mean contraction
    of the residual over the last three sweeps (``history`` ends with ``res_k``), True when
    ``ρ ≥ 1`` or the sweeps still needed, ``log(res_k / tol) / −log ρ``, exceed
    ``newton_cost`` (a Newton finish priced in sweeps, :func:`_newton_cost_in_sweeps`)."""
    if len(history) <= _STALL_WINDOW:
        return False
    res = history[-1]
    rate = (res / history[-1 - _STALL_WINDOW]) ** (1.0 / _STALL_WINDOW)
    return rate >= 1.0 or np.log(res / tol) > -np.log(rate) * newton_cost


def _sinkhorn(k: _Kernel, lam, tol, max_iter, stall: bool):
    """Symmetric Sinkhorn sweeps. Returns ``(λ, sweeps, stalled)``.

    With ``stall``, stops early (``stalled``) once the contraction of the residual over the
    last three sweeps predicts more remaining sweeps than a Newton finish costs
    (:func:`_stalled`).
    """
    fast_ok = True
    history: list[float] = []
    prev = None  # (λ, S, residual) before a fast step, to revert it
    newton_cost = _newton_cost_in_sweeps(k.n)
    for it in range(max_iter):
        s = k.rowsums(lam)
        res = k.residual(s)
        if prev is not None and res > prev[2]:
            fast_ok = False
            lam, s, res = prev
            history.pop()
        if res <= tol:
            return lam, it, False
        history.append(res)
        if stall and _stalled(history, tol, newton_cost):
            return lam, it, True
        log_s = k.log_rowsums(s, lam)
        if fast_ok and res <= _FAST_SINKHORN_BELOW:
            prev = (lam.copy(), s, res)
            lam = lam + (log_s - k.log_r) - 0.5 * (_lse(log_s) - np.log(2.0))
        else:
            prev = None
            lam = lam + 0.5 * (log_s - k.log_r)
    if prev is not None and k.residual(k.rowsums(lam)) > prev[2]:
        lam = prev[0]
    return lam, max_iter, False


def _newton(k: _Kernel, lam, tol, max_iter):
    """Damped Newton on ``ψ``. Returns ``(λ, steps)``.

    Along ``λ + tδ``, ``|d³ψ/dt³| ≤ 2|δ|_∞ e^{2|δ|_∞} d²ψ/dt²`` (``ψ`` is a sum of
    exponentials of ``λ_u + λ_v``), so every ``t`` with ``t|δ|_∞ ≤ 0.1`` satisfies the Armijo
    condition for the Newton direction: such steps are taken without comparing values of
    ``ψ``, which near the solution differ by less than their rounding error.
    """
    s = k.fill(lam)
    res = k.residual(s)
    it = 0
    while res > tol and it < max_iter:
        it += 1
        if s.min() < 1e-200 * k.r.min():
            # Some pod has (numerically) no weight left, so the Hessian is singular there: one
            # damped Sinkhorn sweep brings every row sum back to the order of r.
            lam = lam + 0.5 * (k.log_rowsums(s, lam) - k.log_r)
        else:
            grad = k.r - s
            delta = k.hessian_solve(s, -grad, rtol=min(0.1, res))
            step = float(np.abs(delta).max())
            t = 1.0
            if step > _FULL_NEWTON_STEP:
                psi = 0.5 * float(s.sum()) + float(k.r @ lam)
                slope = float(grad @ delta)
                while t * step > _FULL_NEWTON_STEP:
                    if k.psi(lam + t * delta) <= psi + _ARMIJO * t * slope:
                        break
                    t *= 0.5
            lam = lam + t * delta
        s = k.fill(lam)
        res = k.residual(s)
    return lam, it


def _clipped_sweep(k: _Kernel, s: np.ndarray, lam: np.ndarray) -> np.ndarray:
    """One damped Sinkhorn sweep on ``λ ≥ 0``: ``max(0, λ + ½ (log S − log r))``."""
    return np.maximum(0.0, lam + 0.5 * (k.log_rowsums(s, lam) - k.log_r))


_DONE, _STALL, _ABSORB_NOW, _UNDERFLOW, _OUT = range(5)


@numba.njit(cache=True, nogil=True)
def _box_sweeps_split(
    su, sv, y_t, c_mu, mu, lam, r, log_r, tol, it, max_iter, hist, n_hist, stall, newton_cost
):  # pragma: no cover - compiled
    """Clipped Sinkhorn sweeps on the split kernel (module doc) from sweep ``it``, updating
    ``lam`` in place and the residual history ``hist[:n_hist]``, until one needs Python:
    returns ``(status, it, n_hist)`` with status ``_DONE`` (residual ≤ ``tol``), ``_STALL``
    (:func:`_stalled`'s rule), ``_ABSORB_NOW`` (``|λ − μ|_∞ > _ABSORB``), ``_UNDERFLOW``
    (a row sum ≤ 1e-250: the exact log row sums are dense) or ``_OUT`` (``max_iter``)."""
    while it < max_iter:
        if np.abs(lam - mu).max() > _ABSORB:
            return _ABSORB_NOW, it, n_hist
        a = np.exp(mu - lam)
        s = _rowsums_split(su, sv, y_t, a, c_mu * a)
        res = 0.0
        for v in range(lam.size):
            g = (r[v] - s[v]) / r[v]
            res = max(res, abs(lam[v] - max(0.0, lam[v] - g)))
        if res <= tol:
            return _DONE, it, n_hist
        hist[n_hist] = res
        n_hist += 1
        if stall and n_hist > _STALL_WINDOW:
            rate = (res / hist[n_hist - 1 - _STALL_WINDOW]) ** (1.0 / _STALL_WINDOW)
            if rate >= 1.0 or np.log(res / tol) > -np.log(rate) * newton_cost:
                return _STALL, it, n_hist
        if s.min() <= 1e-250:
            return _UNDERFLOW, it, n_hist
        for v in range(lam.size):
            lam[v] = max(0.0, lam[v] + 0.5 * (np.log(s[v]) - log_r[v]))
        it += 1
    return _OUT, it, n_hist


def _sinkhorn_box(k: _Kernel, lam, tol, max_iter, stall: bool):
    """Clipped symmetric Sinkhorn on ``λ ≥ 0`` (monotone in ``ψ``, module doc). Returns
    ``(λ, sweeps, stalled)`` with the stall rule of :func:`_sinkhorn`. On a split kernel the
    sweeps run compiled (:func:`_box_sweeps_split`), back in Python only to absorb the duals
    or for a sweep whose row sums underflow."""
    newton_cost = _newton_cost_in_sweeps(k.n)
    if k.split is not None:
        return _sinkhorn_box_split(k, lam, tol, max_iter, stall, newton_cost)
    history: list[float] = []
    for it in range(max_iter):
        s = k.rowsums(lam)
        res = k.box_residual(s, lam)
        if res <= tol:
            return lam, it, False
        history.append(res)
        if stall and _stalled(history, tol, newton_cost):
            return lam, it, True
        lam = _clipped_sweep(k, s, lam)
    return lam, max_iter, False


def _sinkhorn_box_split(k: _Kernel, lam, tol, max_iter, stall: bool, newton_cost: float):
    """:func:`_sinkhorn_box` on a split kernel (same sweeps, same stall rule)."""
    lam = np.array(lam, dtype=float)
    hist = np.empty(max_iter + 1)
    it = n_hist = 0
    while True:
        status, it, n_hist = _box_sweeps_split(
            k.su, k.sv, k.y_t, k.c_mu, k.mu, lam, k.r, k.log_r, tol, it, max_iter, hist,
            n_hist, stall, newton_cost,
        )  # fmt: skip
        if status == _ABSORB_NOW:
            k._absorb(lam)
        elif status == _UNDERFLOW:
            lam = _clipped_sweep(k, k.rowsums(lam), lam)
            it += 1
        else:
            return lam, it, status == _STALL


def _newton_box(k: _Kernel, lam, tol, max_iter):
    """Projected Newton on ``min_{λ ≥ 0} ψ`` (two-metric projection, module doc). Returns
    ``(λ, steps)``.

    ε-active pods ``A = {λ_v ≤ ε, ∇_v ψ > 0}`` with ``ε = min(10⁻³, |λ − P(λ − ∇ψ/r)|_∞)``
    step ``−∇_v ψ / S_v`` (the Hessian's diagonal), the rest solve their Hessian block; the
    trial point ``P(λ + tδ)`` is accepted by Armijo on ``ψ`` with the slope
    ``∇ψ·(P(λ + tδ) − λ)`` (:func:`_projected_step`). A Hessian that cannot be factorised
    or a dual row sum that underflows falls back to one clipped Sinkhorn sweep.
    """
    s = k.fill(lam)
    res = k.box_residual(s, lam)
    it = 0
    while res > tol and it < max_iter:
        it += 1
        grad = k.r - s
        active = (lam <= min(1e-3, res)) & (grad > 0)
        free = ~active
        delta = np.zeros(k.n)
        delta[active] = -grad[active] / np.maximum(s[active], 1e-300)
        try:
            if s.min() < 1e-200 * k.r.min():
                raise np.linalg.LinAlgError("a row sum underflows")
            if free.any():
                delta[free] = k.hessian_solve(s, -grad[free], rtol=min(0.1, res), free=free)
        except np.linalg.LinAlgError:
            lam = _clipped_sweep(k, s, lam)
        else:
            lam = _projected_step(k, s, lam, grad, delta, free)
        s = k.fill(lam)
        res = k.box_residual(s, lam)
    return lam, it


def _projected_step(k: _Kernel, s, lam, grad, delta, free) -> np.ndarray:
    """``P(λ + tδ)`` by Armijo backtracking on ``ψ`` along the projection arc. When the
    active duals are already 0 and no free dual is clipped, the step is a Newton step on the
    free block and is taken without comparing values once ``t|δ_F|_∞ ≤ 0.1`` (as in
    :func:`_newton`). If no ``t ≥ 2⁻³⁰`` passes, one clipped Sinkhorn sweep (which never
    increases ``ψ``)."""
    step = float(np.abs(delta[free]).max(initial=0.0))
    psi = 0.5 * float(s.sum()) + float(k.r @ lam)
    newton_block = not lam[~free].any()
    t = 1.0
    for _ in range(_MAX_HALVINGS):
        raw = lam + t * delta
        trial = np.maximum(0.0, raw)
        if newton_block and t * step <= _FULL_NEWTON_STEP and (raw[free] >= 0.0).all():
            return trial
        if k.psi(trial) <= psi + _ARMIJO * float(grad @ (trial - lam)):
            return trial
        t *= 0.5
    return _clipped_sweep(k, s, lam)


def project(
    y,
    model: OcsModel,
    method: str = "auto",
    warm=None,
    tol: float = 1e-12,
    max_iter: int | None = None,
    log: bool = False,
    inequality: bool = False,
    split: Split | None = None,
) -> ProjectionResult:
    """KL projection of ``y > 0`` [P] onto ``W = {w ≥ 0 : Σ_u w_uv = r_v}`` (see module doc),
    or with ``inequality`` onto ``W≤ = {w ≥ 0 : Σ_u w_uv ≤ r_v}`` (duals ``λ ≥ 0``; dark ports).

    Parameters: ``y`` [P], positive pair weights in ``triu_indices`` order (``log y`` when
    ``log=True``: any finite values); ``method`` ``"auto"``, ``"sinkhorn"`` or ``"newton"``;
    ``warm`` [n], the ``duals`` of an earlier projection; ``tol``, bound on the relative degree
    residual; ``max_iter``, sweeps (Sinkhorn, auto) or steps (Newton), default 10,000 / 100.
    The result may have ``converged = False`` when ``max_iter`` runs out. With
    ``inequality`` the start (``warm`` or the default) is clipped to ``λ ≥ 0`` and ``tol``
    bounds the KKT residual of the module doc. ``split``: the sparse structure of ``log y``
    (:class:`Split`, module doc), used by the sweeps when given.
    """
    if method not in METHODS:
        raise ConfigError("method", f"must be one of {METHODS}, got {method!r}")
    if not tol > 0:
        raise ConfigError("tol", "must be > 0")
    y = np.asarray(y, dtype=float)
    if y.shape != (model.n_pairs,):
        raise ConfigError("y", f"has shape {y.shape}, expected ({model.n_pairs},)")
    if log:
        if not np.isfinite(y).all():
            raise ConfigError("y", "log-weights must be finite")
        logy = y
    else:
        if not (np.isfinite(y).all() and (y > 0).all()):
            raise ConfigError("y", "weights must be finite and > 0")
        logy = np.log(y)
    if max_iter is None:
        max_iter = _DEFAULT_MAX_ITER[method]
    if model.n == 2:
        if inequality:  # w = min(y, min r): the whole dual on the pod with fewer ports
            lam = np.zeros(2)
            j = int(np.argmin(model.r))
            lam[j] = max(0.0, logy[0] - float(np.log(model.r[j])))
        else:
            lam = np.full(2, 0.5 * logy[0])
        return _result(_Kernel(logy, model, lam), lam, 0, method, tol, inequality)
    if warm is None:
        lam = np.full(model.n, 0.5 * _lse(logy))
    else:
        lam = np.array(warm, dtype=float)
        if lam.shape != (model.n,) or not np.isfinite(lam).all():
            raise ConfigError("warm", f"must be finite duals of shape ({model.n},)")
    if inequality:
        lam = np.maximum(lam, 0.0)
    if split is not None:
        _check_split(split, model)
    k = _Kernel(logy, model, lam, split)  # shifts an overflowing start up: still λ ≥ 0
    return _solve(k, lam, method, tol, max_iter, inequality)


def _check_split(split: Split, model: OcsModel) -> None:
    """ConfigError naming ``split`` unless its support is strictly increasing pair indices
    and ``alpha`` holds ``n`` finite values (the sweeps walk the support in order)."""
    sup, alpha = np.asarray(split.support), np.asarray(split.alpha)
    if sup.ndim != 1 or not np.issubdtype(sup.dtype, np.integer):
        raise ConfigError("split", "support must be a 1-d array of pair indices")
    if sup.size and (sup[0] < 0 or sup[-1] >= model.n_pairs or (np.diff(sup) <= 0).any()):
        raise ConfigError("split", f"support must increase strictly within 0..{model.n_pairs - 1}")
    if alpha.shape != (model.n,) or not np.isfinite(alpha).all():
        raise ConfigError("split", f"alpha must hold {model.n} finite values")


def _solve(
    k: _Kernel, lam, method: str, tol: float, max_iter: int, inequality: bool
) -> ProjectionResult:
    """:func:`project` from the start duals ``lam`` on the kernel ``k``: ``"newton"``, or
    Sinkhorn that hands over to Newton (warm-started at its duals, at most
    ``_DEFAULT_MAX_ITER["newton"]`` steps) when ``"auto"`` and :func:`_stalled`; the clipped
    variants (:func:`_sinkhorn_box`, :func:`_newton_box`) with ``inequality``.

    The sweeps' row sums (product form) and those of the materialised ``w`` differ by
    rounding, so the solvers aim at ``tol / 2`` and the returned ``w`` meets ``tol``."""
    sinkhorn, newton = (_sinkhorn_box, _newton_box) if inequality else (_sinkhorn, _newton)
    target = 0.5 * tol
    if method == "newton":
        lam, it = newton(k, lam, target, max_iter)
        used = "newton"
    else:
        lam, it, stalled = sinkhorn(k, lam, target, max_iter, stall=method == "auto")
        used = "sinkhorn"
        if stalled:
            lam, it_newton = newton(k, lam, target, _DEFAULT_MAX_ITER["newton"])
            it += it_newton
            used = "sinkhorn+newton"
    return _result(k, lam, it, used, tol, inequality)


def _result(
    k: _Kernel, lam, iterations: int, method: str, tol: float, inequality: bool
) -> ProjectionResult:
    """The projection at the duals ``lam``: ``w`` and ``log w`` materialised on ``k`` and
    converged when their residual (relative degree residual, or with ``inequality`` the KKT
    residual of the module doc) is ``≤ tol``."""
    res = k.finish(lam, inequality)
    return ProjectionResult(k.w, k.log_w, lam, iterations, res, method, res <= tol, inequality)
