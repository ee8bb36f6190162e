"""Max-min fair rates of multipath flows with fixed splits (progressive filling).

Flow ``f`` at rate ``x_f`` loads link ``l`` with ``A[f, l] x_f`` where ``A = S · G``: ``S``
holds the flow's slots (group, weight) and ``G`` the groups' link coefficients (see
:mod:`trainfabric.fabric.routing`). The max-min fair allocation is the unique ``x`` such
that every flow has a *bottleneck*: a saturated link (``Σ_f A[f,l] x_f = c_l``) on which no
flow has a larger rate. Progressive filling computes it exactly: raise every unfrozen rate
together; when a link saturates at level ``t`` (``t = (c_l − F_l) / W_l`` with ``F_l`` the
frozen load and ``W_l`` the unfrozen weight on ``l``), freeze every unfrozen flow through it
at ``t``; repeat. Links saturating within a relative ``rtol`` of the same level are
processed together. Saturation levels live in a binary heap of lower bounds, corrected
when they reach the top; every group is emptied at most once. The group -> flow incidence
(:class:`Incidence`) can be built once and reused while flows only leave (completions).
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from trainfabric.fabric.heap import heap_remove, heap_set, heapify, sift
from trainfabric.fabric.routing import Groups


@dataclass(frozen=True)
class Incidence:
    """The flows ``base`` in solver form: their slots ``sg``/``sw`` (rows = positions in
    ``base``) and the flows of every group as positions (CSR ``ptr``/``members``)."""

    base: np.ndarray
    sg: np.ndarray
    sw: np.ndarray
    ptr: np.ndarray
    members: np.ndarray


def build_incidence(
    slot_group: np.ndarray, slot_weight: np.ndarray, n_groups: int, base
) -> Incidence:
    """The group -> flow incidence of the flows ``base`` (their slots with weight > 0)."""
    base = np.ascontiguousarray(base, np.int64)
    sg = np.ascontiguousarray(slot_group[base], np.int64)
    sw = np.ascontiguousarray(slot_weight[base], np.float64)
    ptr, members = group_members(sg, sw, n_groups)
    return Incidence(base, sg, sw, ptr, members)


def max_min_rates(
    slot_group: np.ndarray,
    slot_weight: np.ndarray,
    groups: Groups,
    capacity_bps: np.ndarray,
    active: np.ndarray,
    incidence: Incidence | None = None,
    local: np.ndarray | None = None,
    rtol: float = 1e-9,
) -> tuple[np.ndarray, np.ndarray]:
    """Rates (bits/s) of the flows ``active`` (indices into the slot arrays) and the
    resulting load of every link (bits/s). ``incidence`` (default: built here) must cover
    every active flow, ``local`` giving their positions in its ``base``
    (``incidence.base[local] == active``).

    A flow with no slot on any link is unconstrained: a ``ValueError`` (every real route
    crosses at least its host links).
    """
    active = np.ascontiguousarray(active, np.int64)
    n_groups = groups.offset + groups.n
    if incidence is None:
        incidence, local = build_incidence(slot_group, slot_weight, n_groups, active), None
    if local is None:
        local = np.arange(active.size)
    elif not np.array_equal(incidence.base[local], active):
        raise ValueError("local must give the positions of the active flows in the incidence")
    inc, g = incidence, groups
    cap = np.ascontiguousarray(capacity_bps, np.float64)
    rates, load, unconstrained, _ = progressive_fill(
        cap, inc.sg, inc.sw, local, g.offset, g.ptr, g.link, g.coef, inc.ptr, inc.members, rtol
    )
    if unconstrained:
        raise ValueError(f"{unconstrained} active flows cross no link")
    return rates[local], load


def link_load(
    slot_group: np.ndarray, slot_weight: np.ndarray, groups: Groups, n_links: int, rates
) -> np.ndarray:
    """``A^T x``: the load of every link (bits/s) when flow ``f`` sends at ``rates[f]``."""
    rates = np.asarray(rates, float)
    n_groups = groups.offset + groups.n
    used = slot_group >= 0
    per_group = np.bincount(
        slot_group[used], weights=(slot_weight * rates[:, None])[used], minlength=n_groups
    )
    load = per_group[:n_links].astype(float)  # float even for no flows (bincount of nothing)
    spread = per_group[n_links:]
    if spread.size:
        owner = np.repeat(np.arange(groups.n), np.diff(groups.ptr))
        load += np.bincount(groups.link, weights=groups.coef * spread[owner], minlength=n_links)
    return load


def path_sum(
    slot_group: np.ndarray, slot_weight: np.ndarray, groups: Groups, per_link
) -> np.ndarray:
    """``A v``: per flow, the sum over links of (share of its traffic crossing the link) x
    ``per_link`` — e.g. the mean delay of its packets when ``per_link`` is a delay."""
    v = np.asarray(per_link, float)
    spread = np.zeros(groups.n)
    if groups.n:
        owner = np.repeat(np.arange(groups.n), np.diff(groups.ptr))
        spread = np.bincount(owner, weights=groups.coef * v[groups.link], minlength=groups.n)
    per_group = np.r_[v[: groups.offset], spread]
    used = slot_group >= 0
    return (np.where(used, slot_weight * per_group[np.where(used, slot_group, 0)], 0.0)).sum(axis=1)


@numba.njit(cache=True)
def group_members(sg, sw, n_groups):
    n, K = sg.shape
    count = np.zeros(n_groups + 1, np.int64)
    for i in range(n):
        for k in range(K):
            if sg[i, k] >= 0 and sw[i, k] > 0.0:
                count[sg[i, k] + 1] += 1
    for g in range(n_groups):
        count[g + 1] += count[g]
    members = np.empty(count[n_groups], np.int64)
    fill = count[:-1].copy()
    for i in range(n):
        for k in range(K):
            g = sg[i, k]
            if g >= 0 and sw[i, k] > 0.0:
                members[fill[g]] = i
                fill[g] += 1
    return count, members


@numba.njit(cache=True, _nrt=False)
def pop_level(hk, hl, pos, size, cap, F, W, live, level, rtol, batch):
    """One step of progressive filling: pop from the heap of link levels every link that
    saturates within ``rtol`` of the smallest level ``(cap − F)/W`` into ``batch``.

    The heap holds lower bounds (a level only rises as flows through the link freeze), so
    the top is corrected lazily; links without unfrozen flows (``live == 0``) are dropped.
    Returns ``(size, n_batch, level)``."""
    n_batch = 0
    while size > 0:
        lk = hl[0]
        if live[lk] == 0 or W[lk] <= 0.0:
            W[lk] = 0.0
            size = heap_remove(hk, hl, pos, size, lk)
            continue
        t = max((cap[lk] - F[lk]) / W[lk], level)
        if t > hk[0] * (1.0 + 1e-12):
            hk[0] = t
            sift(hk, hl, pos, 0, size)
            continue
        if n_batch == 0:
            level = t
        elif t > level * (1.0 + rtol):
            break
        batch[n_batch] = lk
        n_batch += 1
        size = heap_remove(hk, hl, pos, size, lk)
    return size, n_batch, level


@numba.njit(cache=True)
def progressive_fill(cap, sg, sw, active, g_off, g_ptr, g_link, g_coef, mptr, members, rtol):
    """Progressive filling over a min-heap of link saturation levels.

    A link's level ``(c − F)/W`` only rises as flows through it freeze, so the heap keeps a
    lower bound per link and corrects it only when the link reaches the top. Per step:
    take every link saturating within ``rtol`` of the smallest level, freeze every unfrozen
    flow through them, and pass the frozen weight of spread groups to their links.
    Flows are rows ``i`` of ``sg``/``sw``; ``active`` lists the rows solved here. Returns
    rates per row (0 outside ``active``), link loads, the number of flows left
    unconstrained, and per row the link at which it froze (its bottleneck: saturated, no
    flow on it faster; -1 if none).
    """
    n_links = cap.size
    K = sg.shape[1]
    n_spread = g_ptr.size - 1
    n_groups = g_off + n_spread
    state = np.zeros(sg.shape[0], np.int8)  # 0 not solved here, 1 unfrozen, 2 frozen
    gw = np.zeros(n_groups)
    gcount = np.zeros(n_groups, np.int64)
    for i in active:
        state[i] = 1
        for k in range(K):
            g = sg[i, k]
            if g >= 0 and sw[i, k] > 0.0:
                gw[g] += sw[i, k]
                gcount[g] += 1
    # unfrozen weight W and live-group count per link; link -> live spread groups (CSR)
    W = np.zeros(n_links)
    live = np.zeros(n_links, np.int64)
    lg_ptr = np.zeros(n_links + 1, np.int64)
    for g in range(g_off):
        if gcount[g] > 0:
            W[g] += gw[g]
            live[g] += 1
    for s in range(n_spread):
        if gcount[g_off + s] > 0:
            for e in range(g_ptr[s], g_ptr[s + 1]):
                lk = g_link[e]
                W[lk] += gw[g_off + s] * g_coef[e]
                live[lk] += 1
                lg_ptr[lk + 1] += 1
    for lk in range(n_links):
        lg_ptr[lk + 1] += lg_ptr[lk]
    lg_grp = np.empty(lg_ptr[n_links], np.int64)
    lg_fill = lg_ptr[:-1].copy()
    for s in range(n_spread):
        if gcount[g_off + s] > 0:
            for e in range(g_ptr[s], g_ptr[s + 1]):
                lk = g_link[e]
                lg_grp[lg_fill[lk]] = g_off + s
                lg_fill[lk] += 1
    F = np.zeros(n_links)
    hk = np.empty(n_links)
    hl = np.empty(n_links, np.int64)
    pos = np.full(n_links, -1, np.int64)
    size = 0
    for lk in range(n_links):
        if live[lk] > 0 and W[lk] > 0.0:
            size = heap_set(hk, hl, pos, size, lk, cap[lk] / W[lk])
    rate = np.zeros(sg.shape[0])
    bott = np.full(sg.shape[0], -1, np.int64)
    d_w = np.zeros(n_spread)
    d_f = np.zeros(n_spread)
    dirty = np.zeros(n_spread, np.bool_)
    dirty_list = np.empty(n_spread, np.int64)
    batch = np.empty(n_links, np.int64)
    remaining = active.size
    level = 0.0
    while remaining > 0 and size > 0:
        size, n_batch, level = pop_level(hk, hl, pos, size, cap, F, W, live, level, rtol, batch)
        n_dirty = 0
        for b in range(n_batch):
            lk = batch[b]
            for e in range(lg_ptr[lk] - 1, lg_ptr[lk + 1]):
                g = lk if e < lg_ptr[lk] else lg_grp[e]  # the link itself, then its groups
                if gcount[g] == 0:
                    continue
                for m in range(mptr[g], mptr[g + 1]):
                    i = members[m]
                    if state[i] != 1:
                        continue
                    state[i] = 2
                    rate[i] = level
                    bott[i] = lk
                    remaining -= 1
                    for k in range(K):
                        g2 = sg[i, k]
                        w = sw[i, k]
                        if g2 < 0 or w <= 0.0:
                            continue
                        gcount[g2] -= 1
                        if g2 < g_off:
                            W[g2] -= w
                            F[g2] += w * level
                            if gcount[g2] == 0:
                                live[g2] -= 1
                        else:
                            s = g2 - g_off
                            d_w[s] += w
                            d_f[s] += w * level
                            if not dirty[s]:
                                dirty[s] = True
                                dirty_list[n_dirty] = s
                                n_dirty += 1
        for q in range(n_dirty):
            s = dirty_list[q]
            empty = gcount[g_off + s] == 0
            for e in range(g_ptr[s], g_ptr[s + 1]):
                l2 = g_link[e]
                W[l2] -= d_w[s] * g_coef[e]
                F[l2] += d_f[s] * g_coef[e]
                if empty:
                    live[l2] -= 1
            d_w[s] = 0.0
            d_f[s] = 0.0
            dirty[s] = False
    return rate, F, remaining, bott


@numba.njit(cache=True)
def rebuild_base(act, m, rid, sg, sw, lost, n_groups, bsg, bsw, bpos):
    """Copy the slots of the active flows with ``lost < 1`` into ``bsg``/``bsw`` (the solver's
    base, rows in activation order; ``bpos[f]`` = row of flow ``f``) and build their group
    -> row incidence. Returns ``(rows, mptr, members)``."""
    K = sg.shape[1]
    nb = 0
    for i in range(m):
        f = act[i]
        if lost[f] < 1.0:
            r = rid[f]
            for k in range(K):
                bsg[nb, k] = sg[r, k]
                bsw[nb, k] = sw[r, k]
            bpos[f] = nb
            nb += 1
    mptr, members = group_members(bsg[:nb], bsw[:nb], n_groups)
    return nb, mptr, members


@numba.njit(cache=True)
def solve_active(
    act, m, lost, cap, g_off, g_ptr, g_link, g_coef, bsg, bsw, nb, bpos, mptr, members, rtol
):
    """Max-min rates of the active flows ``act[:m]`` (0 for those with ``lost >= 1``) on the
    base built by :func:`rebuild_base` (which must hold every active flow: it is rebuilt after
    releases and reused while flows only complete, as the Python loop reuses its
    incidence); the count of unconstrained flows; per active flow its bottleneck link
    (:func:`progressive_fill`; -1 for a lost flow)."""
    local = np.empty(m, np.int64)
    ok = np.empty(m, np.int64)
    mo = 0
    for i in range(m):
        f = act[i]
        if lost[f] < 1.0:
            local[mo] = bpos[f]
            ok[mo] = i
            mo += 1
    rate = np.zeros(m)
    bott = np.full(m, -1, np.int64)
    if mo == 0:
        return rate, 0, bott
    r, _load, bad, b = progressive_fill(
        cap, bsg[:nb], bsw[:nb], local[:mo], g_off, g_ptr, g_link, g_coef, mptr, members, rtol
    )
    for j in range(mo):
        rate[ok[j]] = r[local[j]]
        bott[ok[j]] = b[local[j]]
    return rate, bad, bott


@numba.njit(cache=True, _nrt=False)
def rebottle(f, b, bott, nbott):
    """Flow ``f``'s bottleneck becomes link ``b`` (-1: none), kept counted per link."""
    if bott[f] >= 0:
        nbott[bott[f]] -= 1
    bott[f] = b
    if b >= 0:
        nbott[b] += 1


@numba.njit(cache=True, _nrt=False)
def rates_stand(done, k, row, rsg, g_off, g_ptr, g_link, bott, nbott):
    """Flows ``done[:k]`` (route rows ``row``, slots ``rsg``: links below ``g_off``, spread
    groups above) leave a max-min fair allocation: ``True`` when every other flow keeps its
    rate, so no re-solve is needed. Each flow froze at a bottleneck (a saturated link on
    which no flow is faster; :func:`progressive_fill` records it, ``bott`` per flow and
    ``nbott`` per link count them); leaving flows only unload their own links, so a flow
    whose bottleneck is none of them keeps it, and an allocation in which every flow has a
    bottleneck is the max-min fair one. Counts the leaving flows out of ``nbott`` first;
    every link of their slots is checked, spread groups expanded, whatever the weight
    (conservative)."""
    K = rsg.shape[1]
    for j in range(k):
        rebottle(done[j], -1, bott, nbott)
    for j in range(k):
        r = row[done[j]]
        for q in range(K):
            g = rsg[r, q]
            if g < 0:
                continue
            if g < g_off:
                if nbott[g] > 0:
                    return False
                continue
            for e in range(g_ptr[g - g_off], g_ptr[g - g_off + 1]):
                if nbott[g_link[e]] > 0:
                    return False
    return True


# -- max-min on flows whose slots are all single links, through per-link member lists -----------
@numba.njit(cache=True)
def fill_scratch(n_links):
    """Scratch of :func:`fill_local` for a fabric of ``n_links`` links (a solve uses each
    link once): rows of reals (weights, capacities, frozen load, heap keys) and of integers
    (links, live flows, heap items, heap positions, a batch)."""
    return np.empty((4, n_links + 1)), np.empty((5, n_links + 1), np.int64)


@numba.njit(cache=True, _nrt=False)
def fill_local(fl, nf, fg, fw, lost, cap, lmap, rtol, rate, fz, lhead, lnext, state, bott, wf, wi):
    """Max-min rates (into ``rate[f]``) of the flows ``fl[:nf]`` whose slots are all single
    links (``fg``/``fw``: per flow its links, -1 after the last, and weights): the
    progressive filling of :func:`progressive_fill` on the links they use only (renumbered
    through the scratch ``lmap`` of -1, restored), each link's capacity less ``fz[link]``
    (bits/s of flows held at fixed rates; reset to 0 here). A saturated link freezes the
    flows of ``fl`` in its member list (``lhead``/``lnext``, entries ``f x K + k``;
    ``state`` is a per-flow scratch of 0, restored). Flows with ``lost >= 1`` get 0.
    ``bott[f]``: the link at which ``f`` froze (its bottleneck; -1 if none). Exact when
    every other flow in flight sharing a link with ``fl`` is held at its max-min rate (the
    task loop's ``_dirty_flows`` and ``_violators``), or none is (``fz`` = 0). ``wf``, ``wi``:
    the scratch of :func:`fill_scratch`. Returns the count of unconstrained flows."""
    K = fg.shape[1]
    W, capl, F, hk = wf[0], wf[1], wf[2], wf[3]
    links, live, hl, pos, batch = wi[0], wi[1], wi[2], wi[3], wi[4]
    nl = 0
    remaining = 0
    for j in range(nf):
        f = fl[j]
        rate[f] = 0.0
        bott[f] = -1
        if lost[f] >= 1.0:
            continue
        state[f] = 1  # unfrozen
        remaining += 1
        for k in range(K):
            g = fg[f, k]
            if g < 0:
                break
            lk = lmap[g]
            if lk < 0:
                lk = lmap[g] = nl
                links[nl] = g
                W[nl] = 0.0
                live[nl] = 0
                nl += 1
            W[lk] += fw[f, k]
            live[lk] += 1
    for lk in range(nl):
        g = links[lk]
        capl[lk] = cap[g]
        F[lk] = fz[g]
        fz[g] = 0.0
        hk[lk] = (capl[lk] - F[lk]) / W[lk]
        hl[lk] = lk
    heapify(hk, hl, pos, nl)
    size = nl
    level = 0.0
    while remaining > 0 and size > 0:
        size, n_batch, level = pop_level(hk, hl, pos, size, capl, F, W, live, level, rtol, batch)
        for b in range(n_batch):
            v = lhead[links[batch[b]]]
            while v >= 0:
                f = v // K
                v = lnext[v]
                if state[f] != 1:  # frozen, held, or lost
                    continue
                state[f] = 2
                rate[f] = level
                bott[f] = links[batch[b]]
                remaining -= 1
                for k in range(K):
                    g = fg[f, k]
                    if g < 0:
                        break
                    l2 = lmap[g]
                    W[l2] -= fw[f, k]
                    F[l2] += fw[f, k] * level
                    live[l2] -= 1
    for j in range(nf):
        state[fl[j]] = 0
    for lk in range(nl):
        lmap[links[lk]] = -1
    return remaining
