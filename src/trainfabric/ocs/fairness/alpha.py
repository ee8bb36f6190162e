"""α-fair equivalence: the unregularised optima of ``Φ_p`` and the α-fair utility, KKT-polished.

The maths: :mod:`trainfabric.ocs.fairness`.
"""

from __future__ import annotations

import math

import numpy as np

from trainfabric.errors import ConfigError
from trainfabric.ocs.fairness.cost import FairnessCost


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


def alpha_fair_log_loss(cost: FairnessCost, x, b2: float, alpha: float) -> tuple[float, np.ndarray]:
    """``log(Σ_j ω_j y_j^(1−α)) / (α−1) = log((α−1)·(−utility)) / (α−1)``, a strictly
    increasing function of minus the α-fair utility (so the same minimisers), and its
    gradient [P] ``Σ_j s_j ∇v_j / v_j`` (``s`` the softmax of ``log ω_j − (α−1) log y_j``).
    Written from the log-throughputs by log-sum-exp around the smallest, so that no power
    ``y^(1−α)`` is formed: those under- or overflow from ``α`` of a few hundred on, where
    :func:`alpha_fair_utility` turns to 0, inf or NaN."""
    v, g = cost.job_values(x, b2)
    log_y = -np.log(v)
    low = float(log_y.min())
    with np.errstate(over="ignore"):  # far above the lowest throughput: exp(-inf) = 0
        e = cost.weights * np.exp(-(alpha - 1.0) * (log_y - low))
    total = float(e.sum())
    return -low + math.log(total) / (alpha - 1.0), (e / (total * v)) @ g


def alpha_fair_optimum(
    cost: FairnessCost, b2: float, alpha: float, x0=None
) -> tuple[np.ndarray, dict]:
    """Unregularised ``argmax`` of the α-fair utility (``α > 1``) over ``{x ≥ 0: A x ≤ d}`` on
    the pairs with traffic: SLSQP on its log form :func:`alpha_fair_log_loss` (written from
    the throughputs, never through :func:`power_mean`; finite for any ``α``), then
    :func:`kkt_polish` on that function's own gradient. Returns the full pair vector [P] and
    the polish's ``info``."""
    from scipy.optimize import minimize

    idx, a, start = _polytope(cost)
    z0 = start if x0 is None else np.asarray(x0, dtype=float)[idx]
    d = cost.model.degrees.astype(float)

    def f(z):
        loss, g = alpha_fair_log_loss(cost, _full(cost, idx, z), b2, alpha)
        return loss, g[idx]

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
