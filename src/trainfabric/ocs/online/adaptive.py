"""Online policies that set their own threshold from the stream (no hindsight, no worst case).

All three return a switch mask [T] bool, computed by a sequential simulation in which the decision
at slot ``t`` uses ``D_0 .. D_t`` only (the same information as the threshold policy of
:mod:`.threshold`, which also sees ``D_t`` before it decides); the mask is then replayed by
:func:`.threshold.run_policies` (policy ``mask``), whose reconfiguration is the same (exact
optimum of ``D_t`` completed from the deployed wiring), so the measured regret is that of the
simulated policy (the tests check the replay against the simulation slot by slot).

**Why not θ* of the bound.** ``θ* = sqrt(C V1 / (2 Γ T))`` uses ``Γ = 8 / B0``, the sensitivity
of an *unwired* pair; the deployed wirings are far less sensitive, so θ* switches hundreds of
times too often. The policies below learn from the cost that ``Γ · drift`` bounds, the
measured *excess* of the deployed wiring

    e_t = f_t(w) − f_t(w_t*) ≥ 0      (seconds; ``f_t(w_t*) = u*_t``, the exact slot optimum),

which the policy can compute at slot ``t`` (it solves ``u*_t`` from ``D_t``; [A10] gives
``e_t ≤ 2 Γ ||D_t − D_{s_k}||_1``).

**``online-balance``** (:func:`balance_mask`, rent-or-buy). Keep the account
``A_t = Σ_{τ = s_k + 1}^{t} e_τ`` since the last reconfiguration ``s_k``; reconfigure at the
first ``t`` with ``e_t > 0`` and ``A_t ≥ price``, ``price = C`` (per reconfiguration) or
``C · m_t`` (per circuit, ``m_t`` the circuits the candidate adds), then ``A = 0``. Facts:

* *Ski rental*: on a regime whose excess is a constant ``e`` per slot and lasts ``L`` slots,
  with ``k = ⌈C/e⌉``, the policy pays ``e L`` if ``L < k``, else ``e (k − 1) + C < 2C`` (the
  switching slot itself is served by the new wiring), so at most ``2 min(e L, C)``, while the
  best single decision in hindsight (switch at the regime's start, or never) pays
  ``min(e L, C)``: the deterministic rent-or-buy rule, 2-competitive per regime (Karlin et al.
  1988).
* *Balance on drift*: with excess growing linearly, ``e_τ = g (τ − s_k)``, it switches every
  ``τ`` slots with ``g τ² / 2 ≈ C``, i.e. ``τ = sqrt(2 C / g)`` — exactly the period that
  minimises the drift-threshold policy's regret rate ``(C + g τ² / 2) / τ`` (the minimiser
  balances the two terms), rate ``sqrt(2 C g)``. So it matches the best threshold in hindsight
  without knowing ``g``, ``V1`` or ``T``.

**``online-learned``** (:func:`learned_mask`, a drift threshold learned online). The threshold
policy on ``||D_t − D_{s_k}||_1`` with ``θ*``'s formula fed by running estimates instead of
the worst case and the hindsight ``V1``: ``θ_t = sqrt(C_eff v̂_t / (2 Γ̂_t))`` with ``v̂_t =
Σ_{τ ≤ t} ||D_τ − D_{τ−1}||_1 / (t + 1)`` (the drift rate so far) and ``Γ̂_t = max_{τ ≤ t}
e_τ / (2 ||D_τ − D_{s(τ)}||_1)`` (the smallest ``Γ`` consistent with step (b) of the bound,
``e ≤ 2 Γ drift``, on the wirings actually deployed; ``θ = ∞`` until an excess is seen). With
``Γ̂ ≤ Γ`` its threshold is at least θ*'s rate-equivalent, and the bound's shape holds with
``Γ̂`` wherever the observed sensitivity is the real one.

**``glr-calibrated``** (:func:`glr_calibrated_mask`). The controller sees samples, as in
:mod:`.glr`: ``c_t ~ Poisson(D_t / chunk)`` reduced to the ``top`` pairs of highest
*utilisation* ``D_uv / (B x_e + B0)`` under the deployed wiring at the reference slot plus
"other" (:func:`utilisation`: the pairs nearest to setting the cost, the categories aligned
with the objective that docs/ocs.md §1.11 recommends; the old :mod:`.glr` ranks by load).
The detector is the two-segment GLR with the threshold
calibrated on the stream's own fitted null (:mod:`trainfabric.ocs.detect.calibrate`: with
confidence ``1 − eta``, ``P(false alarm in a window of L slots) ≤ delta``, ``ARL0 ≥ L (1 −
delta) / delta``). An alarm at ``t`` (estimated change after split ``ŝ``, absolute slot ``c``)
is a change of the traffic, not yet a reason to pay ``C``: the policy reconfigures iff the
expected saving under the observed regime statistics reaches the price,

    ê · Ĥ ≥ price,     ê = mean_{τ ∈ [c, t]} e_τ,     Ĥ = mean length of the completed regimes,

the regimes being the intervals between consecutive estimated change points (the first from
slot 0): with regime lengths i.i.d. and the excess of the new regime persisting, ``ê · Ĥ`` is
the expected excess of keeping the wiring through it (the renewal-reward estimate); switching
saves it for ``C``. Every alarm restarts the detector and re-chooses the ``top`` pairs from
``D_t`` and the wiring then deployed (the next window's reference, frozen before its
data); a window of ``L`` slots without alarm renews the detector (restart, same pairs).
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from trainfabric.errors import ConfigError
from trainfabric.ocs.online.threshold import (
    CHARGES,
    OneHopCost,
    _buffer,
    _complete,
    _optimum,
    effective_switch_cost,
)
from trainfabric.ocs.traffic import BLOCK, TrafficSequence


def _first_wiring(cost: OneHopCost, seq: TrafficSequence) -> np.ndarray:
    """The wiring deployed before slot 0 (as :func:`.threshold.run_policies`)."""
    first = seq.block(0, 1)[0]
    return cost.complete(first, cost.slot_optimum(first)[1])


@numba.njit(cache=True)
def _balance_block(
    loads, optima, c, per_circuit, acc, x, kmax, iu, iv, deg, rate, fallback, buf, mask, excess
):  # pragma: no cover - compiled
    """The rent-or-buy rule over one block (module doc); ``acc`` [1] carries the account."""
    xn = np.empty_like(x)
    for t in range(loads.shape[0]):
        f = 0.0
        for e in range(x.size):
            f = max(f, loads[t, e] / (rate * x[e] + fallback))
        e_t = max(f - optima[t], 0.0)
        excess[t] = e_t
        acc[0] += e_t
        mask[t] = False
        if e_t > 0.0 and acc[0] >= c:
            xn[:] = x
            _optimum(loads[t], kmax, iu, iv, deg, rate, fallback, buf, xn)
            _complete(loads[t], xn, x, iu, iv, deg, rate, fallback)
            moved = 0
            for e in range(x.size):
                moved += max(xn[e] - x[e], 0)
            if acc[0] >= (c * moved if per_circuit else c):
                x[:] = xn
                acc[0] = 0.0
                mask[t] = True


@dataclass
class AdaptiveRun:
    """A simulated online policy: ``mask`` [T] (reconfigure at ``t``), ``excess`` [T] the
    deployed wiring's ``e_t`` (s) before the slot's decision; ``info``: what it learned."""

    mask: np.ndarray
    excess: np.ndarray
    info: dict


def _optima(cost: OneHopCost, seq: TrafficSequence, optima) -> np.ndarray:
    """The exact per-slot optima ``u*_t`` [T] (s): ``optima`` checked, or computed when None."""
    if optima is None:
        return cost.optima(seq)
    optima = np.asarray(optima, dtype=float)
    if optima.shape != (seq.slots,):
        raise ConfigError("optima", f"must have shape ({seq.slots},), got {optima.shape}")
    return optima


def balance_mask(
    cost: OneHopCost,
    seq: TrafficSequence,
    switch_cost_s: float,
    charge: str = "reconfiguration",
    optima: np.ndarray | None = None,
) -> AdaptiveRun:
    """The ``online-balance`` (rent-or-buy) policy over ``seq`` (module doc); ``optima`` the
    exact ``u*_t`` (computed when None)."""
    effective_switch_cost(cost, switch_cost_s, charge)
    optima = _optima(cost, seq, optima)
    x = _first_wiring(cost, seq)
    acc = np.zeros(1)
    mask, excess = np.zeros(seq.slots, dtype=bool), np.zeros(seq.slots)
    args, buf = cost._args(), _buffer(cost)
    per_circuit = charge == CHARGES[1]
    for t0, b in seq.blocks(BLOCK):
        sl = slice(t0, t0 + b.shape[0])
        _balance_block(
            cost.loads(b), optima[sl], float(switch_cost_s), per_circuit, acc, x, *args, buf,
            mask[sl], excess[sl],
        )  # fmt: skip
    return AdaptiveRun(mask, excess, {"switches": int(mask.sum())})


@numba.njit(cache=True)
def _learned_block(
    flat,
    loads,
    optima,
    c_eff,
    st,
    prev,
    ref,
    x,
    kmax,
    iu,
    iv,
    deg,
    rate,
    fallback,
    buf,
    mask,
    theta_out,
):  # pragma: no cover - compiled
    """The learned drift threshold over one block (module doc); ``st`` = [slots seen, V1 seen,
    Γ̂]; ``prev`` the last matrix, ``ref`` the one at the last reconfiguration."""
    xn = np.empty_like(x)
    for t in range(flat.shape[0]):
        step, drift = 0.0, 0.0
        for j in range(flat.shape[1]):
            step += abs(flat[t, j] - prev[j])
            drift += abs(flat[t, j] - ref[j])
            prev[j] = flat[t, j]
        st[0] += 1.0
        st[1] += step
        f = 0.0
        for e in range(x.size):
            f = max(f, loads[t, e] / (rate * x[e] + fallback))
        if drift > 0.0:
            st[2] = max(st[2], max(f - optima[t], 0.0) / (2.0 * drift))
        theta = np.inf
        if st[2] > 0.0:
            theta = np.sqrt(c_eff * (st[1] / st[0]) / (2.0 * st[2]))
        theta_out[t] = theta
        mask[t] = drift > theta
        if mask[t]:
            xn[:] = x
            _optimum(loads[t], kmax, iu, iv, deg, rate, fallback, buf, xn)
            _complete(loads[t], xn, x, iu, iv, deg, rate, fallback)
            x[:] = xn
            ref[:] = flat[t]


def learned_mask(
    cost: OneHopCost,
    seq: TrafficSequence,
    switch_cost_s: float,
    charge: str = "reconfiguration",
    optima: np.ndarray | None = None,
) -> AdaptiveRun:
    """The ``online-learned`` drift threshold over ``seq`` (module doc); ``info["theta"]``
    [T] the threshold in force at each slot (bytes; ``inf`` before any excess is seen)."""
    c_eff = effective_switch_cost(cost, switch_cost_s, charge)
    optima = _optima(cost, seq, optima)
    x = _first_wiring(cost, seq)
    first = seq.block(0, 1)[0].ravel()
    st, prev, ref = np.zeros(3), first.copy(), first.copy()
    mask, theta = np.zeros(seq.slots, dtype=bool), np.zeros(seq.slots)
    args, buf = cost._args(), _buffer(cost)
    for t0, b in seq.blocks(BLOCK):
        sl = slice(t0, t0 + b.shape[0])
        _learned_block(
            b.reshape(b.shape[0], -1), cost.loads(b), optima[sl], float(c_eff), st, prev, ref,
            x, *args, buf, mask[sl], theta[sl],
        )  # fmt: skip
    info = {"switches": int(mask.sum()), "theta": theta, "gamma_hat": float(st[2])}
    return AdaptiveRun(mask, np.full(seq.slots, np.nan), info)


def utilisation(cost: OneHopCost, matrix: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``[n, n]``: ``D_uv / (B x_e + B0)`` (seconds), ``e`` the pair of ``u, v`` on wiring
    ``x``; zero diagonal. The one-hop cost is ``8 max`` of it over the pairs."""
    n = matrix.shape[0]
    iu, iv = cost.model.pairs
    cap = np.ones((n, n))
    rate = cost.model.rate_bps * np.asarray(x, dtype=float) + cost.model.fallback_bps
    cap[iu, iv] = cap[iv, iu] = rate
    return np.asarray(matrix, dtype=float) / cap * (1.0 - np.eye(n))


@dataclass(frozen=True)
class StreamNull:
    """The fitted null of a sequence for the calibrated GLR: ``chunk`` (bytes per count),
    ``top`` (pairs per category set) and the ``calibration``
    (:class:`trainfabric.ocs.detect.calibrate.GlrCalibration`)."""

    chunk: float
    top: int
    calibration: object


def fit_null(
    cost: OneHopCost,
    seq: TrafficSequence,
    delta: float = 0.05,
    horizon: int = 3000,
    calibration_streams: int = 300,
    chunk_bytes: float | None = None,
    top: int | None = None,
    seed: int = 0,
) -> StreamNull:
    """Calibrate the GLR on slot 0 (module doc): ``chunk`` defaults to slot 0's total /
    :data:`.glr.DEFAULT_COUNTS_PER_SLOT`, ``top`` to ``2 n``; the null is ``Mult(Poisson(
    nbar), p0)`` with ``p0`` slot 0's reduced proportions on the ``top`` most utilised pairs
    of the first wiring, ``delta`` per window of ``horizon`` slots, confidence 0.95."""
    from trainfabric.ocs.detect.calibrate import calibrate_glr
    from trainfabric.ocs.detect.streams import reduce_counts, top_pairs
    from trainfabric.ocs.online.glr import sampling

    first, chunk, top = sampling(seq, chunk_bytes, top)
    pairs = top_pairs(utilisation(cost, first, _first_wiring(cost, seq)), top)
    p0 = reduce_counts(first, "topr", pairs=pairs)
    cal = calibrate_glr(p0, first.sum() / chunk, horizon, delta, 0.05, calibration_streams, 2, seed)
    return StreamNull(chunk, top, cal)


def glr_calibrated_mask(
    cost: OneHopCost,
    seq: TrafficSequence,
    switch_cost_s: float,
    null: StreamNull,
    charge: str = "reconfiguration",
    optima: np.ndarray | None = None,
    seed: int = 0,
) -> AdaptiveRun:
    """The ``glr-calibrated`` policy over ``seq`` (module doc), with the fitted ``null``
    (:func:`fit_null`): counts ``Poisson(D_t / chunk)`` (``seed``) on the ``top`` most utilised
    pairs of the deployed wiring at the window's reference slot plus "other"; at every alarm,
    reconfigure iff the wiring has an excess now and ``ê · Ĥ ≥ price``. ``info["alarms"]``:
    one ``(slot, change, gain, price, switched)`` per alarm; ``info["renewals"]``."""
    from trainfabric.ocs.detect.calibrate import CalibratedGlrDetector
    from trainfabric.ocs.detect.streams import reduce_counts, top_pairs

    effective_switch_cost(cost, switch_cost_s, charge)
    optima = _optima(cost, seq, optima)
    x = _first_wiring(cost, seq)
    pairs = top_pairs(utilisation(cost, seq.block(0, 1)[0], x), null.top)
    detector = CalibratedGlrDetector(null.calibration)
    rng = np.random.default_rng(seed)
    mask, excess = np.zeros(seq.slots, dtype=bool), np.zeros(seq.slots)
    alarms, changes, seg_start = [], [], 0
    for t0, block in seq.blocks():
        counts = rng.poisson(block / null.chunk).astype(float)
        for i in range(block.shape[0]):
            t = t0 + i
            excess[t] = max(float(cost.cost(block[i : i + 1], x)[0]) - optima[t], 0.0)
            renewals = detector.renewals
            alarm = detector.update(reduce_counts(counts[i], "topr", pairs=pairs))
            if detector.renewals > renewals:  # the window restarted at this slot
                seg_start = t
            if not alarm:
                continue
            changes.append(seg_start + detector.last_alarm["split"])
            gain = excess[changes[-1] : t + 1].mean() * float(np.diff([0, *changes]).mean())
            x_new = _candidate(cost, cost.loads(block[i : i + 1])[0], x)
            price = switch_cost_s * (
                int(np.maximum(x_new - x, 0).sum()) if charge == CHARGES[1] else 1
            )
            switch = bool(excess[t] > 0 and gain >= price)
            alarms.append((t, changes[-1], gain, price, switch))
            if switch:
                mask[t], x = True, x_new
            pairs, seg_start = top_pairs(utilisation(cost, block[i], x), null.top), t + 1
    info = {"alarms": alarms, "renewals": detector.renewals, "switches": int(mask.sum())}
    return AdaptiveRun(mask, excess, info)


def _candidate(cost: OneHopCost, load: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The wiring a reconfiguration at this slot deploys (as :func:`.threshold._run_block`)."""
    xn = x.copy()
    args = cost._args()
    _optimum(load, *args, _buffer(cost), xn)
    _complete(load, xn, x, *args[1:])
    return xn
