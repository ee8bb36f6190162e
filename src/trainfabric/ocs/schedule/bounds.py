"""Lower bounds on the makespan of a circuit schedule, and the exact optimum of tiny instances.

Notation as in :mod:`trainfabric.ocs.schedule.model`: demand ``D`` (bytes), ``s`` switches, delay
``δ`` (s) before every configuration, circuit rate ``B`` (bytes/s). For a port ``v`` (a row or
a column of ``D``) let ``Δ_v`` be its number of non-zero entries and ``L_v`` its load (bytes).

**Port bound.** Fix a schedule of makespan ``T`` and a row ``v`` (columns alike). Call a
configuration *useful for v* when it has positive duration and carries an edge of row ``v``.
(i) Every non-zero entry of row ``v`` needs a useful configuration carrying it, and a
configuration is a matching, so it carries at most one entry of row ``v``: there are
``≥ Δ_v`` useful configurations. (ii) A useful configuration serves row ``v`` at rate ``B``
only, so their durations sum to ``≥ L_v / B``. Let ``m`` switches hold useful configurations,
switch ``k`` holding ``c_k ≥ 1`` of them with durations summing to ``l_k``. Then
``Σ c_k ≥ max(Δ_v, m)``, ``Σ l_k ≥ L_v / B`` and ``T ≥ c_k δ + l_k`` for each such ``k``.
Averaging over the ``m`` switches, ``T ≥ (max(Δ_v, m) δ + L_v/B) / m``; and the switch with
the most useful configurations has ``c_k ≥ ⌈max(Δ_v, m) / m⌉``, so ``T ≥ ⌈max(Δ_v, m)/m⌉ δ``.
Since ``m ∈ {1, …, s}`` is unknown, ``T ≥ min_m max(those two)``. At ``m = s`` the first term
is at least the ``(δ Δ_v + L_v / B) / s``, and every ``m < s`` gives a larger value,
so this bound dominates the closed form of docs/ocs.md §1.9 B.

**Entry bound.** The largest entry ``D_uv`` is served on at most ``s`` switches; the one
serving the largest share serves ``≥ D_uv / s`` bytes after at least one δ:
``T ≥ δ + max_uv D_uv / (s B)``.

The bound is the maximum of both. :func:`exact_makespan` solves tiny instances exactly
(a MILP over every matching inside the support of ``D``) so tests can check bound ≤ optimum.
"""

from __future__ import annotations

import itertools

import numpy as np

from trainfabric.ocs.schedule.model import Schedule, sequential


def port_bound(loads_s: np.ndarray, degrees: np.ndarray, s: int, delay_s: float) -> float:
    """``max_v min_{m=1..s} max((max(Δ_v,m) δ + L_v/B)/m, ⌈max(Δ_v,m)/m⌉ δ)`` over ports with
    ``Δ_v ≥ 1``; ``loads_s`` are ``L_v / B`` (seconds), ``degrees`` the ``Δ_v``."""
    busy = degrees > 0
    if not busy.any():
        return 0.0
    lv, dv = loads_s[busy][:, None], degrees[busy][:, None].astype(float)
    m = np.arange(1, s + 1, dtype=float)[None, :]
    need = np.maximum(dv, m)
    per_m = np.maximum((need * delay_s + lv) / m, np.ceil(need / m) * delay_s)
    return float(per_m.min(axis=1).max())


def lower_bound_parts(
    demand: np.ndarray, s: int, delay_s: float, rate_Bps: float
) -> dict[str, float]:
    """The port bound, the entry bound and the closed form of docs/ocs.md §1.9 B (all seconds)."""
    d = np.asarray(demand, dtype=float)
    nz = d > 0
    loads = np.concatenate([d.sum(axis=1), d.sum(axis=0)]) / rate_Bps
    degrees = np.concatenate([nz.sum(axis=1), nz.sum(axis=0)])
    spec = float(((delay_s * degrees + loads) / s).max(initial=0.0))
    entry = delay_s + float(d.max(initial=0.0)) / (s * rate_Bps) if nz.any() else 0.0
    return {
        "port": port_bound(loads, degrees, s, delay_s),
        "entry": entry,
        "spec_port": spec,
    }


def lower_bound(demand: np.ndarray, s: int, delay_s: float, rate_Bps: float) -> float:
    """Makespan lower bound (s): the maximum of :func:`lower_bound_parts`."""
    return max(lower_bound_parts(demand, s, delay_s, rate_Bps).values())


def all_matchings(demand: np.ndarray) -> list[np.ndarray]:
    """Every non-empty partial matching whose edges are all non-zero entries of ``demand``
    (as ``perm`` arrays). Exponential: for tiny instances only (n ≤ 4)."""
    n = demand.shape[0]
    edges = [(u, v) for u in range(n) for v in range(n) if demand[u, v] > 0]
    out = []
    for r in range(1, n + 1):
        for combo in itertools.combinations(edges, r):
            us = {u for u, _ in combo}
            vs = {v for _, v in combo}
            if len(us) == r and len(vs) == r:
                perm = np.full(n, -1, dtype=np.int64)
                for u, v in combo:
                    perm[u] = v
                out.append(perm)
    return out


def exact_makespan(
    demand: np.ndarray, s: int, delay_s: float, rate_Bps: float
) -> tuple[float, Schedule]:
    """Optimal makespan and schedule of a tiny instance, by a MILP (HiGHS via scipy).

    Columns: every matching ``j`` of :func:`all_matchings` on every switch ``k``; binary
    ``y_jk`` (configuration used), duration ``φ_jk ∈ [0, U y_jk]`` with ``U`` the trivial
    one-configuration-per-entry makespan. ``min T`` s.t. ``Σ_j (δ y_jk + φ_jk) ≤ T`` per
    switch and ``Σ_{j∋(u,v), k} φ_jk B ≥ D_uv``. Using a matching twice on one switch is never
    better than once with the summed duration, so binary ``y`` loses nothing: the optimum of
    this MILP is the optimum of the problem. The returned schedule's durations are scaled up
    by the MILP's coverage deficit (≈ its feasibility tolerance, 1e-7 relative) so it passes
    :func:`~trainfabric.ocs.schedule.model.check_schedule`; the returned optimum is the MILP's.
    """
    from scipy.optimize import Bounds, LinearConstraint, milp

    d = np.asarray(demand, dtype=float)
    cols = all_matchings(d)
    n_j = len(cols)
    if n_j == 0:
        return 0.0, sequential(d.shape[0], delay_s, rate_Bps, [[] for _ in range(s)])
    scale = float(d.max()) / rate_Bps  # durations in units of the largest entry's time
    dn = d / float(d.max())
    big = float((dn > 0).sum()) * (1 + delay_s / scale)
    nv = 2 * n_j * s + 1  # [y (j,k)], [phi (j,k)], T
    c = np.zeros(nv)
    c[-1] = 1.0
    rows, lo, hi = [], [], []
    for k in range(s):  # per-switch time
        a = np.zeros(nv)
        a[[j * s + k for j in range(n_j)]] = delay_s / scale
        a[[n_j * s + j * s + k for j in range(n_j)]] = 1.0
        a[-1] = -1.0
        rows.append(a), lo.append(-np.inf), hi.append(0.0)
    for u, v in zip(*np.nonzero(dn), strict=True):  # coverage
        a = np.zeros(nv)
        for j, perm in enumerate(cols):
            if perm[u] == v:
                a[n_j * s + j * s : n_j * s + j * s + s] = 1.0
        rows.append(a), lo.append(dn[u, v]), hi.append(np.inf)
    for jk in range(n_j * s):  # phi <= big * y
        a = np.zeros(nv)
        a[n_j * s + jk], a[jk] = 1.0, -big
        rows.append(a), lo.append(-np.inf), hi.append(0.0)
    integrality = np.zeros(nv)
    integrality[: n_j * s] = 1
    ub = np.full(nv, np.inf)
    ub[: n_j * s] = 1.0
    res = milp(
        c,
        constraints=LinearConstraint(np.array(rows), lo, hi),
        integrality=integrality,
        bounds=Bounds(np.zeros(nv), ub),
        options={"mip_rel_gap": 1e-9, "time_limit": 60.0},
    )
    if res.status != 0:
        raise RuntimeError(f"exact schedule MILP did not finish: {res.message}")
    used = res.x[: n_j * s].reshape(n_j, s) > 0.5
    # y within the integrality tolerance of 0 may still carry a sliver of φ: drop it
    phi = np.where(used, res.x[n_j * s : 2 * n_j * s].reshape(n_j, s), 0.0) * scale
    phi *= _deficit(d, cols, phi.sum(axis=1) * rate_Bps)  # MILP tolerance ~1e-7
    per_switch = [[(cols[j], phi[j, k]) for j in range(n_j) if phi[j, k] > 0] for k in range(s)]
    return float(res.x[-1]) * scale, sequential(d.shape[0], delay_s, rate_Bps, per_switch)


def _deficit(d: np.ndarray, cols: list[np.ndarray], served_per_col: np.ndarray) -> float:
    """``max(1, max_uv D_uv / served_uv)`` over the non-zero entries."""
    served = np.zeros_like(d)
    rows = np.arange(d.shape[0])
    for perm, amount in zip(cols, served_per_col, strict=True):
        on = perm >= 0
        served[rows[on], perm[on]] += amount
    nz = d > 0
    return max(1.0, float(np.max(d[nz] / np.maximum(served[nz], 1e-300))))
